#!/usr/bin/env bash
# Build one virtual environment per pinned engine release, for the adapter contract tests.
#
# Each venv gets the CPU build of torch 2.13.0 and the engine installed with --no-deps plus the short list of
# pure-Python packages its speculative, scheduler and config modules import (docs/testing.md explains why).
# Everything runs under a constraints file that pins torch and blocks torchvision/torchaudio, so no
# dependency can ever pull a CUDA build. The installer is uv (pinned, fetched once into $ENV_DIR/.uv unless
# $UV names one): it downloads each wheel once into its cache and hard-links it into every venv, so torch's
# 700 MB are unpacked once for all the venvs, not once each. Usage: scripts/engine-envs.sh [ENGINE ...]
# (default: all); scripts/engine-envs.sh --list prints the engines. Venvs land in
# ${SPECPOLICY_ENV_DIR:-.venvs}/<engine>; an existing complete venv is reused.
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

UV_VERSION=0.13.8
if [ -z "${UV:-}" ]; then
  UV="$ENV_DIR/.uv/bin/uv"
  if [ "$("$UV" --version 2>/dev/null)" != "uv $UV_VERSION" ]; then
    echo "[engine-envs] installing uv $UV_VERSION into $ENV_DIR/.uv"
    rm -rf "$ENV_DIR/.uv"
    "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore --target "$ENV_DIR/.uv" \
      "uv==$UV_VERSION" 2>&1 | grep -v "is ignored" >&2 || true
    [ -x "$UV" ] || { echo "[engine-envs] could not install uv $UV_VERSION" >&2; exit 1; }
  fi
fi
# uv reads no pip configuration: the find-links pip is given (where a machine keeps its CPU torch file) are
# passed on, so torch==2.13.0 comes from the file pip would take. No bytecode is compiled at install (uv
# would compile the whole site-packages, about a minute a venv): Python writes it for the modules the tests
# import, on first import (scripts/test.sh lets it, where PYTHONDONTWRITEBYTECODE is set).
FIND_LINKS=${PIP_FIND_LINKS:-$("$PY" -m pip config get global.find-links 2>/dev/null || true)}
LINKS=()
for l in $FIND_LINKS; do LINKS+=(--find-links "$l"); done

PHASE=$(mktemp)
HEARTBEAT=""
trap 'rm -f "$PHASE"; [ -z "$HEARTBEAT" ] || kill "$HEARTBEAT" 2>/dev/null' EXIT
# A build is a while of uv with nothing to show: one line every SPECPOLICY_HEARTBEAT_S seconds (default 20)
# says which env, which step and how long so far.
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
  "$UV" venv -q --python "$PY" "$venv"
  local uv=(env VIRTUAL_ENV="$venv" "$UV" pip install -q -c "$CONSTRAINTS" "${LINKS[@]}")
  phase "installing torch 2.13.0 (CPU)" "$name"
  "${uv[@]}" torch==2.13.0
  phase "installing ${NODEPS[$name]} (--no-deps)" "$name"
  # shellcheck disable=SC2086
  "${uv[@]}" --no-deps ${NODEPS[$name]}
  phase "installing the engine's Python dependencies" "$name"
  # shellcheck disable=SC2086
  "${uv[@]}" ${EXTRA[$name]} prometheus_client
  # specpolicy itself, editable, with its test tools (no engine extras: the engine is already here).
  phase "installing specpolicy (editable), pytest, hypothesis" "$name"
  "${uv[@]}" -e "$ROOT" pytest hypothesis
  kill "$HEARTBEAT" 2>/dev/null || true; wait "$HEARTBEAT" 2>/dev/null || true; HEARTBEAT=""
  if "$venv/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') and torch.version.cuda is None else 1)"; then
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
