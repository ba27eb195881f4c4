#!/usr/bin/env bash
# Run a pip command; keep the dependency conflicts its resolver reports out of the output.
#
# scripts/engine-envs.sh installs the engines with --no-deps on the CPU build of torch, so after every install
# pip prints an "ERROR: pip's dependency resolver ..." block listing each requirement the engine declares but
# does not get ("requires torch==..., but you have torch 2.13.0+cpu"). Those lines are expected there: they
# are appended to $SPECPOLICY_PIP_CONFLICTS (when set) instead of printed. Everything else pip writes, real
# errors included, goes to stderr as before, and pip's exit status is returned.
# Usage: scripts/pip-quiet.sh PIP-COMMAND...
set -uo pipefail
err=$(mktemp)
trap 'rm -f "$err"' EXIT
"$@" 2>"$err"
rc=$?
awk -v tally="${SPECPOLICY_PIP_CONFLICTS:-/dev/null}" '
  /^ERROR: pip.s dependency resolver does not currently take into account/ { next }
  / requires .*, but you have .* which is incompatible\.$/ || / requires .*, which is not installed\.$/ {
    print >> tally; next
  }
  { print > "/dev/stderr" }' "$err"
exit $rc
