#!/bin/bash
# Build .gpu/ (git-ignored; copied along to an offline GPU host) on a networked machine, from the
# repository root:   bash ci/gpu-host/build.sh HOST_PACKAGES
# HOST_PACKAGES: what the host has, from one visit there (seconds), either its snapshot
#   PYTHONPATH=src /opt/torch/.venv/bin/python -m ftmatrix.system_packages > host.json
# (each distribution's metadata: the wheelhouse then resolves exactly as the host will), or its
#   /opt/torch/.venv/bin/python -m pip list --format=freeze > host-freeze.txt
# .gpu/ gets: wheels/ (what the cells of gpu-seed.yaml and gpu-now.yaml need besides what the
# host has, by `ftmatrix wheelhouse`), tools/ (nox and its wheels, the uv binary xz-compressed)
# and the two matrices, within 62 MB.
set -euo pipefail
HOST=${1:?usage: bash ci/gpu-host/build.sh HOST_PACKAGES (a host snapshot or pip freeze)}
K=ci/gpu-host G=.gpu DL=${DL:-/tmp/gpu-host-downloads} PY=${PYTHON:-python3}
X=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$X")"
grep -qx '/.gpu/' "$X" 2>/dev/null || echo '/.gpu/' >> "$X"
rm -rf $G && mkdir -p $G/tools $G/wheels $DL/tools
export UV_CONSTRAINT=$PWD/$K/constraints.txt   # run.sh resolves with the same
ftm() { PYTHONPATH=$PWD/src $PY -m ftmatrix "$@"; }
# 1. Every wheel the cells need for Python 3.12 on manylinux x86_64, less what the host has.
for m in gpu-seed gpu-now; do
  FTMATRIX_MATRIX=$K/$m.yaml ftm wheelhouse --python 3.12 --platform manylinux_2_28_x86_64 \
    --host-packages "$HOST" $DL/wheels
done
# 2. Into .gpu/wheels, two wheels trimmed to what the host loads (each keeps a TRIMMED list in
# its dist-info), to stay under 64 MiB: bitsandbytes keeps its cuda130 and cpu libraries
# (43.1 -> 3.6 MB), unsloth drops studio/, the web app `import unsloth` never loads (31 -> 1.9 MB).
for w in $DL/wheels/*.whl; do
  case $(basename $w) in
    bitsandbytes-*) $PY $K/trimwheel.py $w $G/wheels/$(basename $w) \
                      'libbitsandbytes_(cuda1(18|21|24|26|28|32)|rocm|xpu)' ;;
    unsloth-2026.*) $PY $K/trimwheel.py $w $G/wheels/$(basename $w) '^studio/' ;;
    *) cp $w $G/wheels/ ;;
  esac
done
# 3. nox (and the wheels it needs that the host lacks) and uv, which the host does not have.
get() { $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d $DL/tools "$1"; ls $DL/tools/$(echo "${1%%==*}" | tr - _)-${1##*==}-*.whl; }
for s in nox==2026.10.20 argcomplete==3.7.2 colorlog==6.12.0 dependency_groups==1.3.2 \
         python_discovery==1.9.5 platformdirs==4.14.7; do cp "$(get $s)" $G/tools/; done
U=$(get uv==0.13.9); unzip -p "$U" 'uv-0.13.9.data/scripts/uv' | xz -6 -T1 > $G/tools/uv.xz
cp $K/gpu-seed.yaml $K/gpu-now.yaml $K/run.sh $K/constraints.txt $G/
du -sb $G $G/tools $G/wheels
[ "$(du -sb $G | cut -f1)" -lt 62000000 ] || { echo ".gpu/ is over 62 MB: too big to copy along"; exit 1; }
