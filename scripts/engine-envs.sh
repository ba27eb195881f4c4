#!/usr/bin/env bash
# Build one virtual environment per pinned engine release, for the adapter contract tests.
#
# Each venv gets the CPU build of torch 2.13.0 and the engine installed with --no-deps plus the short list of
# pure-Python packages its speculative, scheduler and config modules import (docs/testing.md explains why).
# Everything runs under a constraints file that pins torch and blocks torchvision/torchaudio, so no
# dependency can ever pull a CUDA build. Usage: scripts/engine-envs.sh [ENGINE ...]  (default: all);
# scripts/engine-envs.sh --list prints the engines. Venvs land in ${SPECPOLICY_ENV_DIR:-.venvs}/<engine>; an
# existing complete venv is reused.
#
# One environment per tested release: a release added to adapters/sglang/releases.py (or vllm/versions.py)
# gets its NODEPS and EXTRA lines here; tests/test_adapter_releases.py checks the two lists agree.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ENV_DIR=${SPECPOLICY_ENV_DIR:-$ROOT/.venvs}
PY=${PYTHON:-python3}

SG_COMMON="numpy psutil msgspec orjson pybase64 requests packaging pillow starlette pyzmq tqdm ipython aiohttp
 dill sentencepiece compressed-tensors gguf einops openai partial_json_parser setproctitle uvloop"
declare -A EXTRA=(
  [sglang-0.5.23]="$SG_COMMON pydantic transformers==5.19.0 apache-tvm-ffi==0.1.11 uvicorn fastapi"
  [sglang-0.5.17]="$SG_COMMON pydantic transformers==5.12.1 apache-tvm-ffi==0.1.11 xgrammar==0.2.1 uvicorn fastapi xxhash"
  [sglang-0.5.12.post1]="$SG_COMMON pydantic transformers==5.6.0 uvicorn fastapi"
  [sglang-0.5.10.post1]="$SG_COMMON pydantic transformers==5.6.0 uvicorn fastapi"
  [vllm-0.34.0]="packaging pydantic>=2.12 regex numpy cbor2 psutil pyzmq urllib3 requests>=2.33.0 aiohttp>=3.14.4
 transformers>=5.16.1,<5.23.0 openai>=2.25.0 oss-harmony>=0.0.11 pillow>=13.0.0 pybase64 cachetools msgspec cloudpickle
 uvloop py-cpuinfo prometheus_client>=0.18.0 fastapi>=0.133.0,<0.137.0 partial-json-parser llguidance>=1.7.0,<1.8.0 einops"
  [vllm-0.33.0]="packaging pydantic>=2.12 regex numpy cbor2 psutil pyzmq urllib3 requests aiohttp transformers>=5.16.1,<5.21.0
 openai>=2.25.0 oss-harmony>=0.0.11 pillow>=13.0.0 pybase64 cachetools msgspec cloudpickle uvloop py-cpuinfo
 prometheus_client>=0.18.0 fastapi>=0.133.0,<0.137.0 partial-json-parser llguidance>=1.7.0,<1.8.0 einops"
  [vllm-0.26.0]="packaging pydantic>=2.12 regex numpy cbor2 psutil pyzmq urllib3 requests aiohttp transformers>=5.5.3,<5.21.0
 openai>=2.0.0 openai-harmony pillow pybase64 cachetools msgspec cloudpickle uvloop py-cpuinfo
 prometheus_client>=0.18.0 llguidance>=1.7.0,<1.8.0 einops"
)
declare -A NODEPS=(
  [sglang-0.5.23]="sglang==0.5.23 triton==3.7.1"
  [sglang-0.5.17]="sglang==0.5.17 triton==3.7.1"
  [sglang-0.5.12.post1]="sglang==0.5.12.post1 triton==3.7.1"
  [sglang-0.5.10.post1]="sglang==0.5.10.post1 triton==3.7.1"
  [vllm-0.34.0]="vllm==0.34.0 xgrammar==0.2.8 apache-tvm-ffi==0.1.11 triton==3.7.1"
  [vllm-0.33.0]="vllm==0.33.0 xgrammar==0.2.8 apache-tvm-ffi==0.1.11"
  [vllm-0.26.0]="vllm==0.26.0 xgrammar==0.2.8 apache-tvm-ffi==0.1.11"
)

# Every engine env, newest release of each engine first.
mapfile -t ALL < <(printf '%s\n' "${!NODEPS[@]}" | sort -t- -k1,1 -k2,2Vr)
if [ "${1:-}" = "--list" ]; then printf '%s\n' "${ALL[@]}"; exit 0; fi
mkdir -p "$ENV_DIR"
CONSTRAINTS="$ENV_DIR/constraints.txt"
printf 'torch==2.13.0\ntorchvision==0.0.0\ntorchaudio==0.0.0\n' > "$CONSTRAINTS"

# pip's resolver reports every dependency the --no-deps engines declare but do not get (CUDA torch, ...):
# scripts/pip-quiet.sh keeps those lines out of the output, counted in $CONFLICTS, and shows everything else.
CONFLICTS=$(mktemp)
PHASE=$(mktemp)
HEARTBEAT=""
trap 'rm -f "$CONFLICTS" "$PHASE"; [ -z "$HEARTBEAT" ] || kill "$HEARTBEAT" 2>/dev/null' EXIT
export SPECPOLICY_PIP_CONFLICTS=$CONFLICTS
# A build is minutes of pip with nothing to show: one line every SPECPOLICY_HEARTBEAT_S seconds (default
# 20) says which env, which step and how long so far.
HEARTBEAT_S=${SPECPOLICY_HEARTBEAT_S:-20}

phase() { echo "$1" > "$PHASE"; echo "[engine-envs] $2: $1"; }

build() {
  local name=$1 venv="$ENV_DIR/$1"
  if [ -f "$venv/.complete" ]; then echo "[engine-envs] $name: reusing $venv"; return 0; fi
  echo "[engine-envs] $name: building $venv"
  local t0=$SECONDS
  ( while sleep "$HEARTBEAT_S"; do
      echo "[engine-envs] $name: $(cat "$PHASE"), $((SECONDS - t0)) s so far, $(du -sh "$venv" 2>/dev/null | cut -f1)"
    done ) &
  HEARTBEAT=$!
  rm -rf "$venv"
  phase "venv" "$name"
  "$PY" -m venv "$venv"
  local pip=(bash "$ROOT/scripts/pip-quiet.sh" "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$CONSTRAINTS")
  phase "installing torch 2.13.0 (CPU)" "$name"
  "${pip[@]}" torch==2.13.0
  phase "installing ${NODEPS[$name]} (--no-deps)" "$name"
  # shellcheck disable=SC2086
  "${pip[@]}" --no-deps ${NODEPS[$name]}
  phase "installing the engine's Python dependencies" "$name"
  # shellcheck disable=SC2086
  "${pip[@]}" ${EXTRA[$name]} prometheus_client
  # specpolicy itself, editable, with its test tools (no engine extras: the engine is already here).
  phase "installing specpolicy (editable), pytest, hypothesis" "$name"
  "${pip[@]}" -e "$ROOT" pytest hypothesis
  kill "$HEARTBEAT" 2>/dev/null || true; wait "$HEARTBEAT" 2>/dev/null || true; HEARTBEAT=""
  if "$venv/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') and not torch.cuda.is_available() else 1)"; then
    touch "$venv/.complete"
    echo "[engine-envs] $name: ready in $((SECONDS - t0)) s, $(du -sh "$venv" | cut -f1)"
  else
    echo "[engine-envs] $name: torch is not the pinned CPU build" >&2; return 1
  fi
}

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${ALL[@]}")
for t in "${targets[@]}"; do
  [ -n "${NODEPS[$t]:-}" ] || { echo "unknown engine env '$t'; known: ${ALL[*]}" >&2; exit 2; }
  build "$t"
done
if [ -s "$CONFLICTS" ]; then
  echo "[engine-envs] not shown: $(wc -l < "$CONFLICTS") dependency conflicts pip reported, such as" \
    "'$(head -n 1 "$CONFLICTS")': expected, the engines are installed with --no-deps on the CPU build of" \
    "torch on purpose (docs/testing.md)"
fi
