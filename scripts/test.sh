#!/usr/bin/env bash
# Run every test: the core suite in the current Python, then the adapter contract tests inside one virtual
# environment per pinned engine release (built by scripts/engine-envs.sh on first use, reused after).
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

echo "== core tests ($($PY --version))"
$PY -m pytest -q -p no:cacheprovider tests --ignore=tests/engines --junitxml="$REPORTS/core.xml" "$@" || status=1

if [ "${SPECPOLICY_SKIP_ENGINES:-0}" != "1" ]; then
  ENGINES=${SPECPOLICY_ENGINES:-$(bash scripts/engine-envs.sh --list | tr '\n' ' ')}
  # shellcheck disable=SC2086
  bash scripts/engine-envs.sh $ENGINES || status=1
  ENV_DIR=${SPECPOLICY_ENV_DIR:-$ROOT/.venvs}
  for e in $ENGINES; do
    venv="$ENV_DIR/$e"; engine=${e%%-*}
    [ -x "$venv/bin/python" ] || { echo "== $e: venv missing"; status=1; continue; }
    echo "== $e contract tests"
    SPECPOLICY_ENGINE_ENV=$e "$venv/bin/python" -m pytest -q -p no:cacheprovider "tests/engines/$engine" \
      --junitxml="$REPORTS/$e.xml" "$@" || status=1
  done
fi

$PY - "$REPORTS" <<'PYEOF'
import glob, sys, xml.etree.ElementTree as ET
tot = dict(tests=0, failures=0, errors=0, skipped=0)
for f in sorted(glob.glob(sys.argv[1] + "/*.xml")):
    for s in ET.parse(f).getroot().iter("testsuite"):
        for k in tot:
            tot[k] += int(s.get(k, 0))
failed = tot["failures"] + tot["errors"]
passed = tot["tests"] - failed - tot["skipped"]
print(f"total: {passed} passed, {failed} failed, {tot['skipped']} skipped")
PYEOF
exit $status
