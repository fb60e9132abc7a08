#!/bin/bash
# On the offline GPU host (no network), from the repository root, with .gpu/ copied along (and,
# to continue an earlier run, reports/). OUT: where the results go (default /tmp/out).
# nox and uv go to /tmp/site. The cells take the host's torch/CUDA stack as installed
# (install.system-packages in the matrices: resolved against its installed versions, never
# installed again) and everything else from .gpu/wheels, with no index; the GPU cells run in
# priority order within BUDGET seconds; reports/ comes back as one tarball.
set -u
G=$PWD/.gpu S=/tmp/site O=${OUT:-/tmp/out}
mkdir -p $S/bin $O
python3 -m pip install -q --no-index --no-deps --no-compile --target $S $G/tools/*.whl || exit 1
python3 -c 'import lzma,shutil,sys;shutil.copyfileobj(lzma.open(sys.argv[1]),open(sys.argv[2],"wb"))' \
  $G/tools/uv.xz $S/bin/uv && chmod +x $S/bin/uv || exit 1
# The host is this python3 (its own packages; nox and uv in /tmp/site stay out of the cells).
export PATH=$S/bin:$PATH UV_OFFLINE=1 FTMATRIX_HOST_PYTHON=$(command -v python3) \
  UV_CONSTRAINT=$G/constraints.txt \
  FTMATRIX_RUN_ID=${FTMATRIX_RUN_ID:-gpu-host} PYTHONUNBUFFERED=1 \
  FTMATRIX_KNOWN_ISSUES=$PWD/known_issues.yaml   # the project's, not .gpu/'s
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL
nvidia-smi -L; uv --version
python3 -m pip list --format=freeze > $O/host-pip-freeze.txt
PYTHONPATH=$PWD/src python3 -m ftmatrix.system_packages > $O/host.json   # for the next build.sh
END=$((SECONDS + ${BUDGET:-520}))
NOX="import sys;sys.path[:0]=['$S','$PWD/src'];sys.argv=['nox',*sys.argv[1:]];from nox.__main__ import main;main()"
nx() { PYTHONPATH=$PWD/src python3 -c "$NOX" "$@"; }  # plan and report run python -m ftmatrix
ftm() {  # nox with ftmatrix, bounded by what is left of the budget
  local left=$((END - SECONDS)); [ $left -gt 60 ] || { echo "[run.sh] no time left: $*"; return 0; }
  rm -rf unsloth_compiled_cache   # unsloth writes it in the cwd; keep cells apart
  timeout $left python3 -c "$NOX" "$@" \
    2>&1 | tee -a $O/nox.log | grep -E '^ftmatrix: |\[ftmatrix\].*(: |cell done)|passed|failed|error'; }
# 0. what each cell takes from the host and whether it installs, before any GPU time
FTMATRIX_MATRIX=$G/gpu-seed.yaml nx -s plan >> $O/nox.log 2>&1
FTMATRIX_MATRIX=$G/gpu-now.yaml nx -s plan >> $O/nox.log 2>&1
STEPS=${STEPS:-seed generic unsloth}   # a rerun names fewer
GENERIC=${GENERIC:-test_sft.py test_grpo.py test_lora.py test_dpo.py test_preference.py test_import.py}
for step in $STEPS; do case $step in
# 1. seed failure (a): unsloth GRPO on Mistral, 2025.2.15 (broken) vs 2025.3.1 (fixed)
seed) FTMATRIX_MATRIX=$G/gpu-seed.yaml ftm -s matrix -- test_unsloth.py ;;
# 2. the generic cases on CUDA without unsloth (test_multiprocess needs 2 GPUs here)
generic) FTMATRIX_MATRIX=$G/gpu-now.yaml FTMATRIX_SELECT='*nounsloth*' ftm -s matrix -- $GENERIC ;;
# 3. unsloth 2026.10.7 on the machine's own stack: SFT, GRPO Llama/Mistral, 4-bit QKV LoRA
unsloth) FTMATRIX_MATRIX=$G/gpu-now.yaml FTMATRIX_SELECT='*unsloth2026*' ftm -s matrix -- test_unsloth.py ;;
*) echo "[run.sh] unknown step $step (seed, generic, unsloth)"; exit 2 ;;
esac; done
FTMATRIX_MATRIX=$G/gpu-now.yaml nx -s report >> $O/nox.log 2>&1
tar czf $O/reports.tgz reports && ls -l $O
head -c 6000 reports/summary.md 2>/dev/null
