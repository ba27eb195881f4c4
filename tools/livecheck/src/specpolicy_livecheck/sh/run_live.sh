#!/bin/bash
# Run the live check on a GPU host: install SGLang from an offline bundle (first time only; any release
# `specpolicy-livecheck bundle make-sglang` has a row for: 0.5.12.post1, 0.5.17), install the specpolicy and
# test-policy wheels, then run `specpolicy-livecheck run` (this copy of the tool, from the site or the checkout).
# Environment:
#   GC_BUNDLE  folder holding the bundle written by `bundle make-sglang` (sglang-bundle.tar, or its
#              split parts part.*, there or one per folder p1/, p2/, ...); not needed once GC_SITE holds sglang
#   GC_WHEELS  folder holding specpolicy-*.whl and specpolicy_gpucheck-*.whl (pip wheel --no-deps), or
#              "none" with ENGINES=install: SGLang alone (its own engines only; no specpolicy plugin)
#   GC_SITE    install target put on PYTHONPATH (default /tmp/site); GC_WORK scratch (default /tmp/gc)
#   GC_OUT     where the results tarball goes (default ./gpu-check-out)
# Usage: specpolicy-livecheck bundle run-live ENGINES BUDGET_S [more `specpolicy-livecheck run` options]
#   (before anything is installed: bash tools/livecheck/src/specpolicy_livecheck/sh/run_live.sh ...)
#   ENGINES: comma-separated among v1,v2,base_v1,base_v2,plain_v1,plain_v2, eagle3_v1,eagle3_v2,eagle3tree_v1
#            (`specpolicy-livecheck run --help`), or
#            "install": install and check the imports only (for `specpolicy-livecheck paired` and the like)
# One run (about 9 minutes, two engine starts; docs/results/methodology.md, "One run"):
#   specpolicy-livecheck bundle run-live v2,base_v2 570 --attn triton --concurrency 1,4,16,64,128 --ramp-s 30
# Print that plan and its estimate first, on any machine (the budget is what this script leaves after
# installing): specpolicy-livecheck plan --paths v2,base_v2 \
#   --attn triton --concurrency 1,4,16,64,128 --ramp-s 30 --budget-s 555
set -o pipefail
ENGINES=${1:?engines}; BUDGET=${2:?budget seconds}; shift 2
SITE=${GC_SITE:-/tmp/site}; WORK=${GC_WORK:-/tmp/gc}; OUTDIR=${GC_OUT:-$(pwd)/gpu-check-out}
T0=$(date +%s)
if [ ! -d "$SITE/sglang" ]; then
  B=${GC_BUNDLE:?GC_BUNDLE: folder with the offline SGLang bundle}
  mkdir -p /tmp/gc-bundle
  if [ -f "$B/sglang-bundle.tar" ]; then tar xf "$B/sglang-bundle.tar" -C /tmp/gc-bundle || exit 3
  else  # the parts, in $B or one per folder ($B/p1/part.00, ...), joined in the order of their names
    find "$B" -maxdepth 2 -name 'part.*' -printf '%f %p\n' | sort | cut -d' ' -f2- | xargs cat \
      | tar xf - -C /tmp/gc-bundle || exit 3
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" /tmp/gc-bundle/wheels/*.whl || exit 4
  tar xzf /tmp/gc-bundle/kslim.tar.gz -C "$SITE" || exit 5
  rm -rf /tmp/gc-bundle
fi
if [ "${GC_WHEELS:-}" = none ] && [ "$ENGINES" = install ]; then
  echo "specpolicy not installed (GC_WHEELS=none)"
elif [ ! -d "$SITE/specpolicy" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "${GC_WHEELS:?GC_WHEELS}"/*.whl || exit 6
fi
echo "install done in $(( $(date +%s) - T0 ))s"
SRC=$(cd "$(dirname "$0")/../.." && pwd)  # the folder holding this copy of specpolicy_livecheck
export PYTHONPATH=$SITE:$SRC PYTHONUNBUFFERED=1 SGLANG_DISABLE_REQUEST_LOGGING=1
(cd /tmp && python3 -c "import sglang; print('sglang', sglang.__version__, sglang.__file__)") || exit 7
if [ -d "$SITE/specpolicy" ]; then
  (cd /tmp && python3 -c "import specpolicy; from specpolicy import available_policies as a; print('specpolicy', specpolicy.__file__, a())") || exit 7
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
[ "$ENGINES" = install ] && exit 0
LEFT=$(( BUDGET - ($(date +%s) - T0) ))
python3 -m specpolicy_livecheck run --work "$WORK" --out "$OUTDIR" --paths "$ENGINES" --budget-s $LEFT "$@"
rc=$?
echo "run_live.sh rc=$rc total $(( $(date +%s) - T0 ))s"
exit $rc
