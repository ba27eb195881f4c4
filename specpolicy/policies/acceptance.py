"""acceptance: follow the drafter's recent acceptance length; switch off when drafts are mostly rejected.

Keeps an EWMA of the acceptance length (1 + mean accepted drafts per request) of every step that speculated
and reported acceptance. Below ``min_accept_length`` speculation is off. Otherwise the depth is the
candidate closest to ``EWMA - 1 + lookahead``: draft about ``lookahead`` tokens beyond what is typically
accepted, so a drafter whose every draft is accepted climbs, and one rejected early descends (the rule
SGLang's adaptive slots use). A step without speculation carries no acceptance data, so while off the policy
probes: every ``probe_interval`` off steps it speculates one step at the smallest depth, and that step's
acceptance is what can turn it back on. Without probing it could stay off forever after one bad phase
(TensorRT-LLM's permanent disable). It does not look at load: acceptance barely moves with batch size, so
combine it with a cost-aware policy (``cost_model``) when load decides the off-switch. Per step it reads at
most ``sample_requests`` requests (an even stride through the batch), so decide() does not grow with the
batch.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from ..errors import FieldError, short_repr
from ..mode import MAX_NUM_STEPS, SpecMode
from ..policy import PolicyConfig, PolicyEntry
from ..snapshot import SlotsState
from ..stats import StepStats, mean_accepted_drafts
from ._validate import check_depths

__all__ = ["AcceptanceConfig", "AcceptancePolicy", "ENTRY"]


class AcceptanceConfig(PolicyConfig):
    """Depth from an EWMA of acceptance length; off below min_accept_length, probing to recover."""

    candidate_steps_alias: ClassVar[bool] = True

    name: Literal["acceptance"] = "acceptance"
    steps: tuple[int, ...] = Field(
        (1, 2, 3, 4),
        min_length=1,
        description="positive depths it may choose, ascending (off is always allowed)",
    )
    initial_steps: int | None = Field(
        None,
        ge=1,
        le=MAX_NUM_STEPS,
        description="depth before any acceptance is known; default the median step",
    )
    min_accept_length: float = Field(
        1.4, ge=1.0, description="off while the EWMA acceptance length is below this; < 1 + smallest step"
    )
    ewma_alpha: float = Field(0.2, gt=0.0, le=1.0, description="weight of the newest step in the EWMA")
    lookahead: float = Field(
        1.0, ge=0.0, le=MAX_NUM_STEPS, description="drafts beyond the mean accepted count to aim for"
    )
    probe_interval: int = Field(
        64, ge=1, le=1_000_000, description="while off, speculate one step in every this many to re-measure"
    )
    sample_requests: int = Field(
        32, ge=0, description="at most this many requests per step (an even stride) enter the mean; 0 = all"
    )

    @model_validator(mode="after")
    def _consistent(self) -> AcceptanceConfig:
        steps = self.steps
        check_depths(steps)
        if self.initial_steps is not None and self.initial_steps not in steps:
            raise FieldError(
                "initial_steps", f"must be one of steps {short_repr(list(steps))}, got {self.initial_steps}"
            )
        if self.min_accept_length >= 1 + steps[0]:
            raise FieldError(
                "min_accept_length",
                f"must be < 1 + the smallest step ({1 + steps[0]}), got {self.min_accept_length}: probes at "
                f"depth {steps[0]} could never turn speculation back on",
            )
        return self

    def start_steps(self) -> int:
        """The depth used before any acceptance is known."""
        if self.initial_steps is not None:
            return self.initial_steps
        return self.steps[(len(self.steps) - 1) // 2]

    def candidate_steps(self) -> tuple[int, ...]:
        return (0, *self.steps)


class AcceptancePolicy(SlotsState):
    """EWMA state plus a counter of off steps; the depth is recomputed only when acceptance data arrives."""

    __slots__ = (
        "config",
        "_alpha",
        "_min_len",
        "_offset",
        "_edges",
        "_modes",
        "_probe",
        "_interval",
        "_sample",
        "_start",
        "_ewma",
        "_mode",
        "_off_steps",
    )
    _STATE_NAME = "acceptance"
    _STATE: ClassVar[Mapping[str, tuple[type, ...]]] = {
        "_ewma": (float, type(None)),
        "_mode": (SpecMode,),
        "_off_steps": (int,),
    }

    def __init__(self, config: AcceptanceConfig) -> None:
        self.config = config
        steps = config.steps
        self._alpha = config.ewma_alpha
        self._min_len = config.min_accept_length
        # target depth t = ewma - 1 + lookahead; the closest step wins, ties to the smaller one
        self._offset = config.lookahead - 1.0
        self._edges = [(a + b) / 2 for a, b in zip(steps[:-1], steps[1:], strict=True)]
        self._modes = [SpecMode.on(k) for k in steps]
        self._probe = self._modes[0]
        self._interval = config.probe_interval
        self._sample = config.sample_requests
        self._start = SpecMode.on(config.start_steps())
        self._ewma: float | None = None
        self._mode = self._start
        self._off_steps = 0

    def decide(self, stats: StepStats) -> SpecMode:
        m = mean_accepted_drafts(stats, self._sample)
        if m is not None:
            length = 1.0 + m
            e = self._ewma
            e = length if e is None else e + self._alpha * (length - e)
            self._ewma = e
            if e < self._min_len:
                if self._mode is not _OFF:
                    self._off_steps = 0  # a fresh off period waits a full interval before probing
                self._mode = _OFF
            else:
                self._mode = self._modes[_bisect_left(self._edges, e + self._offset)]
        mode = self._mode
        if mode is _OFF:
            n = self._off_steps + 1
            if n >= self._interval:
                self._off_steps = 0
                return self._probe
            self._off_steps = n
        return mode

    def reset(self) -> None:
        self._ewma = None
        self._mode = self._start
        self._off_steps = 0

    def estimates(self) -> Mapping[str, float]:
        """The EWMA acceptance length (NaN before any data), for metrics."""
        return {"ewma_accept_length": float("nan") if self._ewma is None else self._ewma}


_OFF = SpecMode.off()
_bisect_left = bisect.bisect_left

ENTRY = PolicyEntry("acceptance", AcceptanceConfig, AcceptancePolicy)
