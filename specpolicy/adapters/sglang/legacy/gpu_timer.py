"""Step times of the overlap worker from CUDA events, read without waiting for the GPU.

On the overlap path the wall time between two decode steps is not the time of either: the scheduler returns
from a step as soon as its work is queued and then waits, before preparing the next batch, for a different
step's completion depending on whether it speculated (SGLang waits for the verify of a speculative step; an
off step lets it go on at once). Measured that way an isolated off step was billed the time of the
speculative step before it, so a cost model never saw off as cheap. An event recorded on the forward stream
at the start of every decode step marks when the GPU reached it; the difference between two consecutive
starts is the step's time on the GPU, idle gaps included (what throughput pays). ``start`` records the event
of the step about to run and returns the time of the step before the previous one, which has finished by
then in SGLang's loop (the scheduler has waited on its successor's events); it is None when not yet
complete, or after a prefill broke the chain. The event query never blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["GpuStepTimer"]


class GpuStepTimer:
    """``event_factory()`` returns an unrecorded timing event (``torch.cuda.Event(enable_timing=True)``)."""

    __slots__ = ("_factory", "_older", "_newer", "_free", "incomplete")

    def __init__(self, event_factory: Callable[[], Any]) -> None:
        self._factory = event_factory
        self._older: Any = None
        self._newer: Any = None
        self._free: list[Any] = []
        self.incomplete = 0  # steps whose time was not ready in time (counted, reported as unknown)

    def start(self) -> float | None:
        event = self._free.pop() if self._free else self._factory()
        event.record()
        older, newer = self._older, self._newer
        self._older, self._newer = newer, event
        if older is None or newer is None:
            return None
        self._free.append(older)
        if not newer.query():
            self.incomplete += 1
            return None
        return float(older.elapsed_time(newer)) / 1e3

    def reset(self) -> None:
        """A non-decode forward ran: intervals spanning it are not a decode step's time."""
        for e in (self._older, self._newer):
            if e is not None:
                self._free.append(e)
        self._older = self._newer = None
