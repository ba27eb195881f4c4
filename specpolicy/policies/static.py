"""static: the same depth every step. The control group every other policy is measured against."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field

from ..mode import MAX_NUM_STEPS, SpecMode
from ..policy import PolicyConfig, PolicyEntry
from ..snapshot import SlotsState
from ..stats import StepStats


class StaticConfig(PolicyConfig):
    """Always speculate num_steps deep (0 = always off): the control group."""

    name: Literal["static"] = "static"
    num_steps: int = Field(
        3, ge=0, le=MAX_NUM_STEPS, description="draft depth every step; 0 = never speculate"
    )

    def candidate_steps(self) -> tuple[int, ...]:
        return (self.num_steps,)


class StaticPolicy(SlotsState):
    """Returns one precomputed mode; decide() is a single attribute load."""

    __slots__ = ("config", "_mode")
    _STATE_NAME = "static"
    _STATE: ClassVar[Mapping[str, tuple[type, ...]]] = {}

    def __init__(self, config: StaticConfig) -> None:
        self.config = config
        self._mode = SpecMode.of(config.num_steps)

    def decide(self, stats: StepStats) -> SpecMode:
        return self._mode

    def reset(self) -> None:
        pass


ENTRY = PolicyEntry("static", StaticConfig, StaticPolicy)
