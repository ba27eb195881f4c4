"""alternate: cycle through a fixed list of depths, ``period`` steps each. For checks, not for serving.

``specpolicy doctor --smoke`` uses it to switch modes as often as possible: a switching run must produce the
same greedy tokens as the static runs (speculation is lossless), and it measures what switching itself costs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from ..mode import MAX_NUM_STEPS, SpecMode
from ..policy import PolicyConfig, PolicyEntry
from ..snapshot import SlotsState
from ..stats import StepStats

__all__ = ["AlternateConfig", "AlternatePolicy", "ENTRY"]


class AlternateConfig(PolicyConfig):
    """Cycle through depths (0 = off), period steps each: a switching stress test."""

    diagnostic: ClassVar[bool] = True

    name: Literal["alternate"] = "alternate"
    depths: tuple[int, ...] = Field(
        (0, 3),
        min_length=1,
        max_length=16,
        description=f"depths to cycle through, each in [0, {MAX_NUM_STEPS}]",
    )
    period: int = Field(1, ge=1, le=1_000_000, description="steps spent at each depth before the next")

    @field_validator("depths")
    @classmethod
    def _in_range(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        for k in v:
            if not 0 <= k <= MAX_NUM_STEPS:
                raise ValueError(f"each depth must be in [0, {MAX_NUM_STEPS}], got {k}")
        return v

    def candidate_steps(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.depths)))


class AlternatePolicy(SlotsState):
    """decide() is a counter increment and a tuple index."""

    __slots__ = ("config", "_modes", "_period", "_n")
    _STATE_NAME = "alternate"
    _STATE: ClassVar[Mapping[str, tuple[type, ...]]] = {"_n": (int,)}

    def __init__(self, config: AlternateConfig) -> None:
        self.config = config
        self._modes = tuple(SpecMode.of(k) for k in config.depths)
        self._period = config.period
        self._n = 0

    def decide(self, stats: StepStats) -> SpecMode:
        mode = self._modes[(self._n // self._period) % len(self._modes)]
        self._n += 1
        return mode

    def reset(self) -> None:
        self._n = 0


ENTRY = PolicyEntry("alternate", AlternateConfig, AlternatePolicy)
