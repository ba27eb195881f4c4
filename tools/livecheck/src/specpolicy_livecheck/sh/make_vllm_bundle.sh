#!/bin/bash
# Build the offline vLLM 0.26.0 bundle for the GPU host (run it where pip can download; no GPU needed).
#
# What goes in, what stays out and why: `specpolicy-livecheck bundle vllm` (its `pins` and `drops` are read here,
# its `install` unpacks the result on the host). Steps: download vLLM 0.26.0 and the pinned wheels
# (CPython 3.12, manylinux x86_64, --no-deps, binaries only) into a cache folder; unpack the vLLM wheel and
# cut the kernels, binary and headers the offline path never loads (304 MB wheel -> ~270 MB tree); install
# the other wheels next to it with pip --target; pack the tree as one tar.xz and split it into parts of
# 40 MiB, each in its own folder so that one call carries one part beside the ~17 MB repository:
#   OUT/p1/part.00, OUT/p2/part.01, ...   (each folder also holds manifest.json: sizes and sha256)
# Usage: specpolicy-livecheck bundle make-vllm [OUT, default .carry/vllm in the current folder]
# Environment: VLLM_BUNDLE_DL (download cache, default /tmp/vllm-bundle-dl; reused), XZ_OPT (default -9 -T0).
# Takes about 5 minutes on two cores (xz -9 is most of it); the downloads are ~320 MB the first time.
set -euo pipefail
OUT=${1:-$(pwd)/.carry/vllm}
DL=${VLLM_BUNDLE_DL:-/tmp/vllm-bundle-dl}
export XZ_OPT=${XZ_OPT:--9 -T0}
LC=(env PYTHONPATH="$(cd "$(dirname "$0")/../.." && pwd)${PYTHONPATH:+:$PYTHONPATH}" python3 -m specpolicy_livecheck)
B=("${LC[@]}" bundle vllm)
PLAT=()
for p in $("${B[@]}" platforms); do PLAT+=(--platform "$p"); done
PIP=(python3 -m pip --disable-pip-version-check)
T0=$(date +%s)

mkdir -p "$DL"
mapfile -t SPECS < <("${B[@]}" pins)
for spec in "${SPECS[@]}"; do
  "${PIP[@]}" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLAT[@]}" -d "$DL" "$spec"
done

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
STAGE=$W/site
mkdir -p "$STAGE"
VWHL=$(ls "$DL"/vllm-0.26.0-*.whl)
(cd "$STAGE" && unzip -q "$VWHL")
RAW=$(du -sb "$STAGE" | cut -f1)
mapfile -t DROPS < <("${B[@]}" drops)
for d in "${DROPS[@]}"; do
  # shellcheck disable=SC2086  # globs in the drop list expand here, inside the staging tree
  (cd "$STAGE" && rm -rf $d)
done
# RECORD lists every file of the wheel: keep it true to what is installed.
python3 - "$STAGE" <<'EOF'
import csv, io, sys
from pathlib import Path
site = Path(sys.argv[1])
record = next(site.glob("vllm-*.dist-info/RECORD"))
rows = [r for r in csv.reader(io.StringIO(record.read_text())) if r and ((site / r[0]).exists() or r[0].endswith("RECORD"))]
buf = io.StringIO()
csv.writer(buf, lineterminator="\n").writerows(rows)
record.write_text(buf.getvalue())
EOF
SLIM=$(du -sb "$STAGE" | cut -f1)

WHEELS=()
for spec in "${SPECS[@]:1}"; do
  name=${spec%%==*}; ver=${spec##*==}
  pat=$(echo "$name" | tr '-' '_')
  f=$(ls "$DL" | grep -i "^${pat}-${ver}-" | head -n 1)
  [ -n "$f" ] || { echo "make_vllm_bundle: no wheel for $spec in $DL" >&2; exit 3; }
  WHEELS+=("$DL/$f")
done
"${PIP[@]}" install -q --no-deps --no-compile --no-index --only-binary=:all: --python-version 3.12 \
  --implementation cp "${PLAT[@]}" --target "$STAGE" "${WHEELS[@]}"
rm -rf "$STAGE/bin"   # console scripts with this machine's interpreter: unused on the host
TREE=$(du -sb "$STAGE" | cut -f1)

tar -C "$STAGE" -cf - . | xz > "$W/bundle.tar.xz"
SIZE=$(stat -c %s "$W/bundle.tar.xz")
SHA=$(sha256sum "$W/bundle.tar.xz" | cut -d' ' -f1)
(cd "$W" && split -b 40M -d -a 2 bundle.tar.xz part.)
rm -rf "$OUT"
mkdir -p "$OUT"
PARTS=()
i=1
for f in "$W"/part.*; do
  mkdir -p "$OUT/p$i"
  mv "$f" "$OUT/p$i/"
  PARTS+=("$(basename "$f")")
  i=$((i + 1))
done
python3 - "$OUT" "$SIZE" "$SHA" "$RAW" "$SLIM" "$TREE" "$(stat -c %s "$VWHL")" "${PARTS[@]}" <<'EOF'
import json, sys
from pathlib import Path
out, size, sha, raw, slim, tree, whl, *parts = sys.argv[1:]
folders = sorted(Path(out).glob("p*"), key=lambda p: int(p.name[1:]))
m = {
    "bundle": "vllm-bundle.tar.xz", "sha256": sha, "bytes": int(size), "parts": parts,
    "part_bytes": [next(f.glob("part.*")).stat().st_size for f in folders],
    "vllm_wheel_bytes": int(whl), "vllm_unpacked_bytes": int(raw), "vllm_slim_bytes": int(slim),
    "tree_bytes": int(tree),
}
for f in folders:
    (f / "manifest.json").write_text(json.dumps(m, indent=1))
print(json.dumps(m, indent=1))
EOF
MB() { python3 -c "print(f'{$1 / 1e6:.1f} MB')"; }
echo "vLLM wheel $(MB "$(stat -c %s "$VWHL")"), unpacked $(MB "$RAW"), slimmed $(MB "$SLIM");" \
  "with the ${#WHEELS[@]} wheels $(MB "$TREE"); bundle (xz) $(MB "$SIZE") in ${#PARTS[@]} part(s) under $OUT;" \
  "$(( $(date +%s) - T0 )) s"
