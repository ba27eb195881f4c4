"""threshold: speculate below a batch size, not above it.

The fix the field report first tried (``--speculative-disable-batch-threshold``), done as a policy.
Speculation pays while the decode step is memory-bound; past some batch size the verify pass of k+1 tokens
per request costs more than the accepted drafts save. It switches on every crossing: use ``hysteresis`` when
the batch size hovers around the threshold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field

from ..clean import clean_count
from ..mode import MAX_NUM_STEPS, SpecMode
from ..policy import PolicyConfig, PolicyEntry
from ..snapshot import SlotsState
from ..stats import StepStats

__all__ = ["ThresholdConfig", "ThresholdPolicy", "ENTRY"]


class ThresholdConfig(PolicyConfig):
    """Speculate num_steps deep while batch_size <= max_batch_size, off above it."""

    name: Literal["threshold"] = "threshold"
    max_batch_size: int = Field(
        32, ge=0, description="largest batch that still speculates; above it speculation is off"
    )
    num_steps: int = Field(3, ge=1, le=MAX_NUM_STEPS, description="draft depth while speculating")

    def candidate_steps(self) -> tuple[int, ...]:
        return (0, self.num_steps)


class ThresholdPolicy(SlotsState):
    """Stateless except for the last answer, which it repeats when the batch size is missing or invalid."""

    __slots__ = ("config", "_max", "_on", "_last")
    _STATE_NAME = "threshold"
    _STATE: ClassVar[Mapping[str, tuple[type, ...]]] = {"_last": (SpecMode,)}

    def __init__(self, config: ThresholdConfig) -> None:
        self.config = config
        self._max = config.max_batch_size
        self._on = SpecMode.on(config.num_steps)
        self._last = self._on

    def decide(self, stats: StepStats) -> SpecMode:
        b = stats[0]
        if type(b) is not int or b < 0:
            c = clean_count(b)
            if c is None:
                return self._last
            b = c
        mode = self._on if b <= self._max else _OFF
        self._last = mode
        return mode

    def reset(self) -> None:
        self._last = self._on


_OFF = SpecMode.off()

ENTRY = PolicyEntry("threshold", ThresholdConfig, ThresholdPolicy)
