"""Suite-wide settings: a hypothesis profile that suits a 2-core CI machine.

No deadline (a loaded CI runner is slow, and the properties are about behaviour, not speed), no example
database written into the checkout, fixed (derandomized) examples so that a failure reproduces, and a budget
of examples that keeps every property test to a few seconds.
``SPECPOLICY_HYPOTHESIS_PROFILE=thorough`` runs 10x more examples locally. Also the fixtures that several
modules share (``default_simulate``).
"""

from __future__ import annotations

import contextlib
import io
import os

import pytest

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # engine venvs without hypothesis still run their own tests
    pass
else:
    _common = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    # Derandomized: every run checks the same examples; "thorough" explores more.
    settings.register_profile(
        "specpolicy", max_examples=60, derandomize=True, **_common  # type: ignore[arg-type]
    )
    settings.register_profile("thorough", max_examples=600, **_common)  # type: ignore[arg-type]
    settings.load_profile(os.environ.get("SPECPOLICY_HYPOTHESIS_PROFILE", "specpolicy"))



@pytest.fixture(scope="session")
def default_simulate() -> tuple[str, str]:
    """README's first command, ``specpolicy simulate`` (progress off), run once for the suite: its stdout
    and stderr. The report's tests and the docs' checks read the same run (a few seconds each saved); the
    test that the report is the same on every run makes a run of its own to compare."""
    from specpolicy.cli import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("SPECPOLICY_SGLANG_DIR", raising=False)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert main(["simulate", "--no-progress"]) == 0
    return out.getvalue(), err.getvalue()
