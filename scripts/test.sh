#!/usr/bin/env bash
# Run every test: build (or reuse) one virtual environment per pinned engine release (scripts/engine-envs.sh,
# in the background, a progress line at least every 20 s while one builds) while the groups run, each its own
# pytest run, up to SPECPOLICY_TEST_JOBS at once (default: the number of cores). A group that reads an engine
# env starts once that env is built; a group's output is shown whole when it ends. The summary gives each
# group's counts and time, separates the skips a release makes expected from the rest, and ends with
# "total: N passed, N failed, N skipped".
# Groups: core (tests/ but tests/engines and the `network` tests; needs no network; one test reads the
# sglang-0.5.23 env), network (tests marked `network`), one per engine env (tests/engines/<engine>), harness
# (tools/livecheck/tests: the live-check tool on CPU; reads the sglang-0.5.17 and vllm-0.26.0 envs).
# --fast: the core suite without the `slow` and `network` tests, nothing installed or built, no other group.
# Environment: SPECPOLICY_SKIP_ENGINES=1 skips the engine envs and their groups; SPECPOLICY_ENGINES="..."
# picks engine envs; SPECPOLICY_OFFLINE=1 skips the network group; SPECPOLICY_TEST_JOBS=1 runs one group at a
# time. Extra arguments go to every pytest run.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
REPORTS=$(mktemp -d)
status=0
FAST=0
if [ "${1:-}" = "--fast" ]; then FAST=1; shift; fi
JOBS=${SPECPOLICY_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
# The core suite, the longest group, is spread over pytest-xdist workers (a dev tool) where there are cores
# for it: all of them for the fast loop, two beside the other groups.
xdist() { [ "$1" -ge 2 ] && "$PY" -c "import xdist" 2>/dev/null && echo "-n $1 --benchmark-disable"; }

if [ $FAST = 1 ]; then
  echo "== core tests, fast: not slow, not network ($($PY --version))"
  # shellcheck disable=SC2046
  "$PY" -m pytest -q -p no:cacheprovider --junitxml="$REPORTS/core.xml" $(xdist "$JOBS") \
    tests --ignore=tests/engines -m "not slow and not network" "$@"
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 5 ] || status=1
  $PY scripts/test_summary.py "$REPORTS"
  exit $status
fi

# The example plugin package is not installed here: tests/test_policy_plugin.py installs it into a directory
# of its own (with the build tools installed here, so without the package index), so the environment keeps
# exactly the policies it had.
echo "== installing specpolicy (editable) with its dev tools and build tools"
$PY -m pip install -q -e ".[dev]" "setuptools>=77" wheel 2>&1 | grep -vE "is ignored|root' user" || true

# The build and the groups run in the background, where an interrupt does not reach them: it stops them here.
stop() {
  local p
  for p in $(jobs -p); do pkill -TERM -P "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
  exit 130
}
trap stop INT TERM

ENV_DIR=${SPECPOLICY_ENV_DIR:-$ROOT/.venvs}
export SPECPOLICY_ENV_DIR=$ENV_DIR
ENGINES=""
BUILD=""
if [ "${SPECPOLICY_SKIP_ENGINES:-0}" != "1" ]; then
  ENGINES=${SPECPOLICY_ENGINES:-$(bash scripts/engine-envs.sh --list | tr '\n' ' ')}
  echo "== engine envs: $ENGINES"
  # shellcheck disable=SC2086
  { bash scripts/engine-envs.sh $ENGINES || echo "engine envs failed" > "$REPORTS/build.failed"; } &
  BUILD=$!
fi

# wait_env NAME: until the build has made that env (or has ended without it).
wait_env() {
  while [ -n "$BUILD" ] && [ ! -f "$ENV_DIR/$1/.complete" ] && kill -0 "$BUILD" 2>/dev/null; do sleep 1; done
}

# The groups that have ended: their output, whole, and their status. Exit status 5 (nothing selected, e.g. by
# a -k given for another group) is no failure.
SHOWN=" "
show_ended() {
  local rc name
  for rc in "$REPORTS"/*.rc; do
    [ -e "$rc" ] || continue
    name=$(basename "$rc" .rc)
    case "$SHOWN" in *" $name "*) continue;; esac
    SHOWN="$SHOWN$name "
    echo "== $(cat "$REPORTS/$name.title")"
    cat "$REPORTS/$name.log"
    [ "$(cat "$rc")" = 0 ] || [ "$(cat "$rc")" = 5 ] || status=1
  done
}

# group NAME TITLE "ENVS IT READS" PYTHON PYTEST-ARGS...: a pytest run of its own, in the background once
# fewer than JOBS groups run; it waits for the envs it reads.
STARTED=0
group() {
  local name=$1 title=$2 needs=$3 py=$4; shift 4
  while [ $((STARTED - $(find "$REPORTS" -name '*.rc' | wc -l))) -ge "$JOBS" ]; do
    wait -n 2>/dev/null || sleep 1
    show_ended
  done
  echo "$title" > "$REPORTS/$name.title"
  STARTED=$((STARTED + 1))
  (
    for e in $needs; do wait_env "$e"; done
    if [ -x "$py" ] || command -v "$py" > /dev/null; then
      "$py" -m pytest -q -p no:cacheprovider --junitxml="$REPORTS/$name.xml" "$@" > "$REPORTS/$name.log" 2>&1
      echo $? > "$REPORTS/$name.rc.tmp"
    else
      echo "venv missing: $py" > "$REPORTS/$name.log"; echo 1 > "$REPORTS/$name.rc.tmp"
    fi
    mv "$REPORTS/$name.rc.tmp" "$REPORTS/$name.rc"
  ) &
}

CORE_READS=""
case " $ENGINES " in *" sglang-0.5.23 "*) CORE_READS=sglang-0.5.23;; esac
# shellcheck disable=SC2046
group core "core tests ($($PY --version))" "$CORE_READS" "$PY" $(xdist $((JOBS < 2 ? JOBS : 2))) \
  tests --ignore=tests/engines -m "not network" "$@"

if [ "${SPECPOLICY_OFFLINE:-0}" != "1" ]; then
  group network "network tests (they ask the package index)" "" "$PY" tests --ignore=tests/engines -m network "$@"
fi

# The engine groups let Python write bytecode (the venvs are installed without it, and their tests start
# Python processes of their own that would otherwise compile torch and the engine from source each time).
for e in $ENGINES; do
  SPECPOLICY_ENGINE_ENV=$e PYTHONDONTWRITEBYTECODE="" \
    group "$e" "$e contract tests" "$e" "$ENV_DIR/$e/bin/python" "tests/engines/${e%%-*}" "$@"
done

HARNESS_READS=$(for e in sglang-0.5.17 vllm-0.26.0; do case " $ENGINES " in *" $e "*) echo "$e";; esac; done)
group harness "harness tests (tools/livecheck/tests: the live check on CPU)" "$HARNESS_READS" "$PY" \
  tools/livecheck/tests "$@"

wait
show_ended
[ ! -e "$REPORTS/build.failed" ] || { echo "== engine envs: the build failed (its output is above)"; status=1; }
$PY scripts/test_summary.py "$REPORTS"
exit $status
