"""hysteresis: a threshold with two edges and a minimum dwell, so a batch size near the edge cannot thrash.

Off once batch_size >= ``disable_at``; on again only when batch_size <= ``enable_at`` (< disable_at). A
mode, once entered, is held for at least ``min_dwell_steps`` decisions, whatever the batch size does: under
any input sequence two switches are at least ``min_dwell_steps`` steps apart. Thrash at a single threshold
is a known failure (vLLM #49548: a 10x collapse); each switch can also cost the engine a graph or state
swap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from ..clean import clean_count
from ..errors import FieldError
from ..mode import MAX_NUM_STEPS, SpecMode
from ..policy import PolicyConfig, PolicyEntry
from ..snapshot import SlotsState
from ..stats import StepStats

__all__ = ["HysteresisConfig", "HysteresisPolicy", "ENTRY"]


class HysteresisConfig(PolicyConfig):
    """Off at batch_size >= disable_at, on again at <= enable_at, each mode held >= min_dwell_steps."""

    name: Literal["hysteresis"] = "hysteresis"
    disable_at: int = Field(48, ge=1, description="turn speculation off once batch_size >= this")
    enable_at: int = Field(
        24, ge=0, description="turn it back on only when batch_size <= this (< disable_at)"
    )
    min_dwell_steps: int = Field(
        32, ge=1, description="decisions a mode is held after a switch; 1 = no dwell (two-edge threshold)"
    )
    num_steps: int = Field(3, ge=1, le=MAX_NUM_STEPS, description="draft depth while speculating")

    @model_validator(mode="after")
    def _edges_ordered(self) -> HysteresisConfig:
        if self.enable_at >= self.disable_at:
            raise FieldError("enable_at", f"must be < disable_at ({self.disable_at}), got {self.enable_at}")
        return self

    def candidate_steps(self) -> tuple[int, ...]:
        return (0, self.num_steps)


class HysteresisPolicy(SlotsState):
    """Two states (on, off) and a counter of decisions made in the current state.

    Starts on, free to switch at once (the first mode is not "entered" by a switch). Missing or invalid batch
    sizes hold the current mode and still count toward the dwell.
    """

    __slots__ = ("config", "_on", "_mode", "_held", "_disable_at", "_enable_at", "_dwell")
    _STATE_NAME = "hysteresis"
    _STATE: ClassVar[Mapping[str, tuple[type, ...]]] = {"_mode": (SpecMode,), "_held": (int,)}

    def __init__(self, config: HysteresisConfig) -> None:
        self.config = config
        self._on = SpecMode.on(config.num_steps)
        self._disable_at = config.disable_at
        self._enable_at = config.enable_at
        self._dwell = config.min_dwell_steps
        self._mode = self._on
        self._held = self._dwell

    def decide(self, stats: StepStats) -> SpecMode:
        held = self._held
        if held < self._dwell:  # inside the dwell: nothing can switch, the counter stays small
            self._held = held + 1
            return self._mode
        b = stats[0]
        if type(b) is not int or b < 0:
            c = clean_count(b)
            if c is None:
                return self._mode
            b = c
        if self._mode is _OFF:
            if b <= self._enable_at:
                self._mode = self._on
                self._held = 1
        elif b >= self._disable_at:
            self._mode = _OFF
            self._held = 1
        return self._mode

    def reset(self) -> None:
        self._mode = self._on
        self._held = self._dwell


_OFF = SpecMode.off()

ENTRY = PolicyEntry("hysteresis", HysteresisConfig, HysteresisPolicy)
