#!/usr/bin/env bash
# Run every test: first build (or reuse) one virtual environment per pinned engine release
# (scripts/engine-envs.sh, a progress line at least every 20 s while one builds), then, in the current Python,
# the core suite (some of its tests use those envs), the live-check harness's tests and the tests that ask the
# package index, then the adapter contract tests inside each env. Each group is its own pytest run; the summary
# gives each group's counts and time, separates the skips a release makes expected from the rest, and ends
# with "total: N passed, N failed, N skipped".
# Groups: core (tests/ but tests/engines, tests/gpu and the `network` tests; needs no network),
# harness (tools/livecheck/tests: the live-check tool on CPU), network (tests marked `network`),
# one per engine env (tests/engines/<engine>).
# --fast: the core suite without the `slow` and `network` tests, nothing installed or built, no other group.
# Environment: SPECPOLICY_SKIP_ENGINES=1 skips the engine envs and their groups; SPECPOLICY_ENGINES="..."
# picks engine envs; SPECPOLICY_OFFLINE=1 skips the network group. Extra arguments go to every pytest run.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
REPORTS=$(mktemp -d)
status=0
FAST=0
if [ "${1:-}" = "--fast" ]; then FAST=1; shift; fi

# One group: a pytest run with its own JUnit report (REPORTS/<name>.xml). Exit status 5 (nothing selected,
# e.g. by a -k given for another group) is no failure.
group() {
  local name=$1 py=$2; shift 2
  "$py" -m pytest -q -p no:cacheprovider --junitxml="$REPORTS/$name.xml" "$@"
  local rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 5 ] || status=1
}

if [ $FAST = 1 ]; then
  echo "== core tests, fast: not slow, not network ($($PY --version))"
  group core "$PY" tests --ignore=tests/engines --ignore=tests/gpu -m "not slow and not network" "$@"
  $PY scripts/test_summary.py "$REPORTS"
  exit $status
fi

# The example plugin package is not installed here: tests/test_policy_plugin.py installs it into a directory
# of its own (with the build tools installed here, so without the package index), so the environment keeps
# exactly the policies it had.
echo "== installing specpolicy (editable) with its dev tools and build tools"
$PY -m pip install -q -e ".[dev]" "setuptools>=77" wheel 2>&1 | grep -vE "is ignored|root' user" || true

ENGINES=""
if [ "${SPECPOLICY_SKIP_ENGINES:-0}" != "1" ]; then
  ENGINES=${SPECPOLICY_ENGINES:-$(bash scripts/engine-envs.sh --list | tr '\n' ' ')}
  echo "== engine envs: $ENGINES"
  # shellcheck disable=SC2086
  bash scripts/engine-envs.sh $ENGINES || status=1
fi
ENV_DIR=${SPECPOLICY_ENV_DIR:-$ROOT/.venvs}
export SPECPOLICY_ENV_DIR=$ENV_DIR

echo "== core tests ($($PY --version))"
group core "$PY" tests --ignore=tests/engines --ignore=tests/gpu -m "not network" "$@"

echo "== harness tests (tools/livecheck/tests: the live check on CPU)"
group harness "$PY" tools/livecheck/tests "$@"

if [ "${SPECPOLICY_OFFLINE:-0}" != "1" ]; then
  echo "== network tests (they ask the package index)"
  group network "$PY" tests --ignore=tests/engines -m network "$@"
fi

for e in $ENGINES; do
  venv="$ENV_DIR/$e"; engine=${e%%-*}
  [ -x "$venv/bin/python" ] || { echo "== $e: venv missing"; status=1; continue; }
  echo "== $e contract tests"
  SPECPOLICY_ENGINE_ENV=$e group "$e" "$venv/bin/python" "tests/engines/$engine" "$@"
done

$PY scripts/test_summary.py "$REPORTS"
exit $status
