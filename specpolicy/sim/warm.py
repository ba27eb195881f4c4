"""A simulated run that starts warm: a policy loaded with a saved state before its first step.

The state is a policy's ``state_dict()`` (``snapshot``'s envelope) or an adapter's warm-start file, which
holds one with its deployment's fingerprint (the simulator runs no deployment: the fingerprint is not
checked). It goes to the policies it was saved by, with the same config; the others start cold.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError, short_str
from ..policy import Policy, Stateful
from ..snapshot import StateError

__all__ = ["read_state", "takes_state", "warm_load"]


def read_state(path: str | Path) -> dict[str, Any]:
    """The state envelope in ``path`` (a saved state or a warm-start file); ConfigError saying why not."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--warm-start: cannot read {str(path)!r}: {short_str(exc)}") from None
    if isinstance(data, dict) and data.get("format") == "specpolicy-warm-start":
        data = data.get("state")
    if not isinstance(data, dict) or not {"version", "policy", "config", "state"} <= set(data):
        raise ConfigError(
            f"--warm-start: {str(path)!r} holds no policy state (version, policy, config, state)"
        )
    return data


def takes_state(policy: Policy, state: Mapping[str, Any]) -> bool:
    """Whether ``state`` is one this policy saves: the same policy and config."""
    if not isinstance(policy, Stateful):
        return False
    mine = policy.state_dict()
    return bool(mine["policy"] == state.get("policy") and mine["config"] == state.get("config"))


def warm_load(policy: Policy, state: Mapping[str, Any] | None) -> bool:
    """Load ``state`` into ``policy`` where it is that policy's; ConfigError where it is but cannot load."""
    if state is None or not takes_state(policy, state):
        return False
    assert isinstance(policy, Stateful)
    try:
        policy.load_state_dict(state)
    except StateError as exc:
        raise ConfigError(f"--warm-start: {exc}") from None
    return True
