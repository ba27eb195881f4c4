"""What one decision is, for the adapters and the observers: its number and depth (``Decision``), its record
once complete (``StepRecord``), and the seam an adapter drives a step through (``StepPath``).

The number comes back with the depth so that an adapter pairs the engine's feedback with the decision it
belongs to without reading any counter back after deciding.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple, Protocol, TypeAlias

from ..stats import StepStats

__all__ = ["Decision", "StepObserver", "StepPath", "StepRecord"]


#: One decision, ``(step, num_steps)``: its number (from 1; ``outcome`` takes it back) and the depth to run.
#: A plain tuple, not a named one: it is built on every decode step, and a named tuple costs 2-3x the time
#: (about 90 ns more per step, ``benchmarks/bench_adapter_step.py``); adapters unpack it.
Decision: TypeAlias = tuple[int, int]


class StepRecord(NamedTuple):
    """One decision and, once known, its outcome: what observers (trace, metrics) receive, once per step.

    ``decided_at`` is the ``time.perf_counter()`` of the decision; ``step_time_s`` the measured time of the
    step it ran (None when unknown).
    """

    step: int
    stats: StepStats
    num_steps: int
    decide_s: float
    fallback: bool
    decided_at: float
    step_time_s: float | None = None


class StepObserver(Protocol):
    """Receives completed step records; implementations must be cheap and must not raise."""

    def on_record(self, record: StepRecord) -> None: ...


class StepPath(Protocol):
    """What an adapter calls per step: the StepStats of the coming decision, the decision, and later its
    outcome. ``AdapterRuntime`` is the adapters' one handle on it; a bare ``StepController`` is one too
    (one rank, nothing to agree on)."""

    def next_stats(
        self,
        batch_size: int,
        num_waiting: int,
        mean_seq_len: float | None,
        request_ids: Sequence[Hashable] | None = None,
        hints: Sequence[int] | None = None,
    ) -> StepStats: ...

    def decide(self, stats: StepStats) -> Decision: ...

    def outcome(
        self,
        step: int,
        accepted: Sequence[int] | None,
        step_time_s: float | None,
        num_steps: int | None = None,
        drafted: Sequence[int] | None = None,
        mean_accepted: float | None = None,
        request_ids: Sequence[Hashable] | None = None,
    ) -> None: ...

    def forget(self) -> None: ...
