#!/usr/bin/env bash
# Run every test: first build (or reuse) one virtual environment per pinned engine release
# (scripts/engine-envs.sh, a progress line at least every 20 s while one builds), then the core suite in the
# current Python (some of its tests use those envs), then the adapter contract tests inside each env. The
# summary separates the skips a release makes expected from the rest; its last line is
# "total: N passed, N failed, N skipped".
# Environment: SPECPOLICY_SKIP_ENGINES=1 runs the core suite only; SPECPOLICY_ENGINES="sglang-0.5.23 ..."
# picks engine envs. Extra arguments go to every pytest run.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
REPORTS=$(mktemp -d)
status=0

# The example plugin package is not installed here: tests/test_policy_plugin.py installs it into a directory
# of its own, so the environment keeps exactly the policies it had.
echo "== installing specpolicy (editable) with its dev tools"
$PY -m pip install -q -e ".[dev]" 2>&1 | grep -vE "is ignored|root' user" || true

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
$PY -m pytest -q -p no:cacheprovider tests --ignore=tests/engines --junitxml="$REPORTS/core.xml" "$@" || status=1

for e in $ENGINES; do
  venv="$ENV_DIR/$e"; engine=${e%%-*}
  [ -x "$venv/bin/python" ] || { echo "== $e: venv missing"; status=1; continue; }
  echo "== $e contract tests"
  SPECPOLICY_ENGINE_ENV=$e "$venv/bin/python" -m pytest -q -p no:cacheprovider "tests/engines/$engine" \
    --junitxml="$REPORTS/$e.xml" "$@" || status=1
done

$PY scripts/test_summary.py "$REPORTS"
exit $status
