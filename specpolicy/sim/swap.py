"""A mid-run policy change in the simulator: what ``specpolicy control set`` does to a running engine.

At simulated time ``at_s``, or before decision ``at_step``, every policy row's running policy is replaced
by ``to`` through the controller's own ``replace_policy``, as the control file replaces it live; the
references (never, oracle, lookahead) are not policies and run unchanged. The report then measures a run
that starts with one policy and ends with another, against runs of either alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..registry import parse_config

__all__ = ["PolicySwap"]


@dataclass(frozen=True)
class PolicySwap:
    """Replace the policy with ``to`` (a policy spec, normalised by ``build``) at ``at_s`` simulated
    seconds or before decision ``at_step``: exactly one of the two."""

    to: dict[str, Any]
    at_s: float | None = None
    at_step: int | None = None

    def __post_init__(self) -> None:
        if (self.at_s is None) == (self.at_step is None):
            raise ConfigError("--swap-at / --swap-at-step: give exactly one (when the policy changes)")
        if self.at_s is not None and not (math.isfinite(self.at_s) and self.at_s >= 0):
            raise ConfigError(f"--swap-at: must be a number of seconds >= 0, got {self.at_s!r}")
        if self.at_step is not None and (type(self.at_step) is not int or self.at_step < 1):
            raise ConfigError(f"--swap-at-step: must be an integer >= 1, got {self.at_step!r}")

    @classmethod
    def build(cls, to: Any, at_s: float | None = None, at_step: int | None = None) -> PolicySwap:
        """Validate the policy spec (ConfigError naming the field, under ``--swap-to``) and the moment."""
        try:
            config = parse_config(to)
        except ConfigError as exc:
            raise ConfigError("\n".join(f"--swap-to: {line}" for line in str(exc).splitlines())) from None
        return cls(config.model_dump(mode="json"), at_s, at_step)

    def when(self) -> str:
        """The moment, for notes: ``at 30 s`` or ``before decision 500``."""
        return f"at {self.at_s:g} s" if self.at_s is not None else f"before decision {self.at_step}"
