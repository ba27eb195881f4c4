#!/bin/bash
# One side-by-side run on a GPU host that receives the offline SGLang bundle in parts, one part per call
# (a call carries at most 64 MiB beside the checkout): every call first copies the parts it carries to the
# stash; the call with the last part installs SGLang and the wheels, builds the test models, and runs
# `specpolicy-livecheck paired --paired` within the time the call has left. A later call on the same host
# finds everything installed and goes straight to its run.
# Usage: specpolicy-livecheck bundle paired-live LIMIT_S VARIANTS [more `specpolicy-livecheck paired` options]
#   (before anything is installed: bash tools/livecheck/src/specpolicy_livecheck/sh/paired_live.sh ...)
#   LIMIT_S   the call's time limit in seconds; the run's budget is what is left after the set-up, less
#             GC_KEEP (default 40) for writing the results
#   VARIANTS  `paired` variants, comma-separated (the first is the reference), or "-": copy the parts only
# Environment:
#   GC_PARTS    folders whose part.* files go to the stash (space-separated; e.g. ".carry/s17/p1")
#   GC_STASH    the stash (default /root/stash); GC_WHEELS: specpolicy and test-policy wheels (run_live.sh)
#   GC_REWHEEL  1: reinstall the wheels (a fix carried to a host that has the previous ones)
#   GC_ATTN     attention backend (default triton); GC_CONC concurrencies (default 1,16,64,128);
#   GC_REPEATS  repeats (default 3); GC_OUT where the results go (default ./gpu-check-out)
# Writes GC_OUT/ab-paired.json, log.txt.gz (the run's output), install.txt and models.txt (first call only).
# SGLang 0.5.17, three calls: GC_PARTS=.carry/s17/pN for N = 1, 2 with VARIANTS "-", then
#   GC_PARTS=.carry/s17/p3 GC_WHEELS=.carry/wheels GC_OUT=$OUT bash \
#     tools/livecheck/src/specpolicy_livecheck/sh/paired_live.sh 590 \
#     never_ov,static0_draft_ov,static_draft_ov,sglang_draft_ov,cm_draft_ov --control-variant static_draft_ov
set -o pipefail
LIMIT=${1:?LIMIT_S: the time limit of this call in seconds}; VARIANTS=${2:?VARIANTS: paired variants, or -}; shift 2
T0=$(date +%s)
STASH=${GC_STASH:-/root/stash}; SITE=${GC_SITE:-/tmp/site}; WORK=${GC_WORK:-/tmp/gc}
OUTDIR=${GC_OUT:-$(pwd)/gpu-check-out}; KEEP=${GC_KEEP:-40}
HERE=$(cd "$(dirname "$0")" && pwd); SRC=$(cd "$HERE/../.." && pwd)
mkdir -p "$STASH" "$OUTDIR" || exit 2
for d in ${GC_PARTS:-}; do
  ls "$d"/part.* >/dev/null 2>&1 || { echo "paired_live: no part.* in $d" >&2; exit 2; }
  cp "$d"/part.* "$STASH"/ || exit 2
done
echo "paired_live: stash $(ls "$STASH" | tr '\n' ' ')"
[ "$VARIANTS" = - ] && exit 0
if [ "${GC_REWHEEL:-0}" = 1 ]; then
  rm -rf "$SITE"/specpolicy "$SITE"/specpolicy-*.dist-info "$SITE"/specpolicy_gpucheck*
fi
if [ ! -d "$SITE/sglang" ] || [ ! -d "$SITE/specpolicy" ]; then
  GC_BUNDLE=$STASH GC_SITE=$SITE bash "$HERE/run_live.sh" install 0 > "$OUTDIR/install.txt" 2>&1 \
    || { tail -40 "$OUTDIR/install.txt"; exit 3; }
  tail -4 "$OUTDIR/install.txt"
fi
export PYTHONPATH=$SITE:$SRC PYTHONUNBUFFERED=1 SGLANG_DISABLE_REQUEST_LOGGING=1
if [ ! -f "$WORK/models/meta.json" ] || [ ! -d "$WORK/models/eagle3" ]; then
  python3 -m specpolicy_livecheck build-models --work "$WORK" --device cuda --eagle3 > "$OUTDIR/models.txt" 2>&1 \
    || { tail -40 "$OUTDIR/models.txt"; exit 4; }
fi
BUDGET=$(( LIMIT - ($(date +%s) - T0) - KEEP ))
echo "paired_live: set up in $(( $(date +%s) - T0 )) s; run budget $BUDGET s: $VARIANTS"
# `paired` writes its JSON 30 s before its budget ends; the timeout stops it (and its engines) if it does not
GC_ATTN=${GC_ATTN:-triton} timeout $(( BUDGET + 25 )) python3 -m specpolicy_livecheck paired --work "$WORK" \
  --out "$OUTDIR" --paired --variants "$VARIANTS" --concurrency "${GC_CONC:-1,16,64,128}" \
  --repeats "${GC_REPEATS:-3}" --budget-s "$BUDGET" "$@" > "$OUTDIR/log.txt" 2>&1
rc=$?
echo "paired_live: paired rc=$rc after $(( $(date +%s) - T0 )) s"
grep -v '^\s*$' "$OUTDIR/log.txt" | tail -40
gzip -f "$OUTDIR/log.txt"
exit $rc
