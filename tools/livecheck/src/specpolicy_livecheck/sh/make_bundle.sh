#!/bin/bash
# Build an offline SGLang bundle that `specpolicy-livecheck bundle run-live` installs on a GPU host with no package index
# (run it where pip can download). The host's image must already hold torch 2.11 (CUDA 13), triton and the
# other common packages; the bundle adds one release's row of `specpolicy-livecheck bundle sglang`: sglang, a
# slimmed sglang-kernel (FA3, the sm100 ops and the MLA / InfLLM libraries dropped) and the wheels the
# engine path imports that the image lacks, less what no engine process loads (`bundle sglang cuts`).
# 0.5.17 is about 110 MB: three parts at 44M.
# Usage: specpolicy-livecheck bundle make-sglang [--release R] OUT_DIR [SPLIT_SIZE]
#   --release  a bundle row (default 0.5.12.post1; `specpolicy-livecheck bundle sglang releases`)
#   SPLIT_SIZE e.g. 44M: also write the parts, each in a folder of its own (OUT/p1/part.00, OUT/p2/part.01,
#              ...) so that one call carries one part beside the ~18 MB repository (64 MiB per call)
# Environment: SGLANG_BUNDLE_DL, the download cache (default /tmp/sglang-bundle-dl; reused).
set -euo pipefail
REL=0.5.12.post1
if [ "${1:-}" = --release ]; then REL=${2:?--release needs a value}; shift 2; fi
OUT=${1:?out dir}; SPLIT=${2:-}
LC=(env PYTHONPATH="$(cd "$(dirname "$0")/../.." && pwd)${PYTHONPATH:+:$PYTHONPATH}" python3 -m specpolicy_livecheck)
B=("${LC[@]}" bundle sglang)
"${B[@]}" pins --release "$REL" > /dev/null  # an unknown release stops here, naming the rows
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)  # absolute: the split below runs in another folder
mapfile -t PINS < <("${B[@]}" pins --release "$REL")
KERNEL=$("${B[@]}" kernel --release "$REL"); KV=${KERNEL##*==}
mapfile -t KEEP < <("${B[@]}" keep --release "$REL")
mapfile -t DROPS < <("${B[@]}" drops --release "$REL")
PLAT=(); for p in $("${B[@]}" platforms); do PLAT+=(--platform "$p"); done
DL=${SGLANG_BUNDLE_DL:-/tmp/sglang-bundle-dl}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mkdir -p "$DL" "$W/bundle/wheels" "$W/sk" "$W/kslim"
for p in "${PINS[@]}" "$KERNEL"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLAT[@]}" -d "$DL" "$p" 2>&1 | { grep -v "is ignored" || true; }
done
whl() {  # the downloaded wheel of name==version
  local name=${1%%==*} ver=${1##*==}
  ls "$DL" | grep -i "^$(echo "$name" | tr -- '-' '_')-${ver}-" | head -n 1
}
KW=$(whl "$KERNEL"); [ -n "$KW" ] || { echo "make_bundle: no wheel for $KERNEL" >&2; exit 3; }
(cd "$W/sk" && unzip -q "$DL/$KW" -x 'sgl_kernel/flash_ops.abi3.so')
for k in "${KEEP[@]}" "sglang_kernel-$KV.dist-info"; do cp -r "$W/sk/$k" "$W/kslim/"; done
for d in "${DROPS[@]}"; do rm -rf "${W:?}/kslim/$d"; done
tar czf "$W/bundle/kslim.tar.gz" -C "$W/kslim" .
for p in "${PINS[@]}"; do
  f=$(whl "$p"); [ -n "$f" ] || { echo "make_bundle: no wheel for $p in $DL" >&2; exit 3; }
  cp "$DL/$f" "$W/bundle/wheels/"
done
while read -r name glob; do  # the members no engine process loads (`bundle sglang cuts`)
  [ -n "$name" ] || continue
  f=$(ls "$W/bundle/wheels" | grep -i "^$(echo "$name" | tr -- '-' '_')-" | head -n 1)
  [ -n "$f" ] || { echo "make_bundle: no wheel $name to cut" >&2; exit 3; }
  "${LC[@]:0:2}" python3 -m specpolicy_livecheck.wheel_cut "$W/bundle/wheels/$f" "$glob"
done < <("${B[@]}" cuts --release "$REL")
mkdir -p "$OUT"
rm -rf "$OUT"/p[0-9]* "$OUT/sglang-bundle.tar"
tar cf "$OUT/sglang-bundle.tar" -C "$W/bundle" .
echo "sglang $REL: ${#PINS[@]} wheels, kernel $KERNEL slimmed to $(du -sb "$W/kslim" | cut -f1) bytes" \
  "($(stat -c %s "$W/bundle/kslim.tar.gz") gzipped), bundle $(stat -c %s "$OUT/sglang-bundle.tar") bytes"
sha256sum "$OUT/sglang-bundle.tar"
if [ -n "$SPLIT" ]; then
  (cd "$W" && split -b "$SPLIT" -d "$OUT/sglang-bundle.tar" part.)
  i=1
  for f in "$W"/part.*; do mkdir -p "$OUT/p$i" && mv "$f" "$OUT/p$i/" && i=$((i + 1)); done
  rm "$OUT/sglang-bundle.tar"
  du -b "$OUT"/p*/part.*
fi
