#!/bin/bash
# Runs ON the GPU machine, at the checkout root, as the last of the live rig's back-to-back commands
# (see docs/gpu-results.md): reassembles and installs SGLang 0.5.12.post1 into /tmp/site the first time,
# installs the specpolicy and test-policy wheels from .carry/wheel, then runs scripts/gpu_check.py device.
# Usage: bash scripts/gpu/device.sh PATHS BUDGET_S [more gpu_check.py device options]
#   PATHS: comma-separated engines among v2,base_v2,v1,base_v1
set -o pipefail
PATHS=${1:?paths}; BUDGET=${2:?budget seconds}; shift 2
T0=$(date +%s)
S=/root/stash
mkdir -p $S && cp .carry/p3/* $S/ 2>/dev/null
if [ ! -d /tmp/site/sglang ]; then
  cat $S/part.* > /tmp/bundle.tar && sha256sum /tmp/bundle.tar
  mkdir -p /tmp/b && tar xf /tmp/bundle.tar -C /tmp/b || exit 3
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/b/wheels/*.whl || exit 4
  tar xzf /tmp/b/kslim.tar.gz -C /tmp/site || exit 5
  rm -f /tmp/bundle.tar
fi
if [ ! -d /tmp/site/specpolicy ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/wheel/*.whl || exit 6
fi
echo "install done in $(( $(date +%s) - T0 ))s"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 SGLANG_DISABLE_REQUEST_LOGGING=1
(cd /tmp && python3 -c "import specpolicy, sglang; from specpolicy import available_policies as a; print('specpolicy', specpolicy.__file__, 'sglang', sglang.__version__, a())") || exit 7
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader
LEFT=$(( BUDGET - ($(date +%s) - T0) ))
python3 scripts/gpu_check.py device --work /tmp/gc --out "$OUT" --paths "$PATHS" --budget-s $LEFT "$@"
rc=$?
echo "device.sh rc=$rc total $(( $(date +%s) - T0 ))s"
exit $rc
