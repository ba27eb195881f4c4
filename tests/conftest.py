"""Suite-wide settings: a hypothesis profile that suits a 2-core CI machine.

No deadline (a loaded CI runner is slow, and the properties are about behaviour, not speed), no example
database written into the checkout, fixed (derandomized) examples so that a failure reproduces, and a budget
of examples that keeps every property test to a few seconds.
``SPECPOLICY_HYPOTHESIS_PROFILE=thorough`` runs 10x more examples locally.
"""

from __future__ import annotations

import os

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
