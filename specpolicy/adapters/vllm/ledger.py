"""StepLedger: which depth each vLLM step verifies, and the StepStats the policy sees. No vLLM import.

The vLLM timeline (docs/vllm.md): the depth K chosen when step S is scheduled is *drafted* after step S runs
and *verified* in step S+1, whose per-request (drafted, accepted) counts reach the scheduler in
``update_from_output(S+1)``. With synchronous scheduling that happens before step S+2 is scheduled; with async
scheduling step S+2 is already scheduled by then, so the policy's stats are one step older. The ledger
keeps one record per scheduled step (in schedule order), so whatever the lag, the stats handed to ``decide``
always describe one cycle, the cycle of the decision whose drafts were verified:

* ``last_num_steps``: that decision's depth;
* ``accepted_draft_tokens`` / ``drafted_tokens``: per request, from ``make_spec_decoding_stats``;
  ``drafted_tokens`` keeps vLLM's trimming (token budget, max_model_len, grammar-invalid drafts);
* ``last_step_time_s``: wall time of the verifying step, taken with ``time.perf_counter`` in the scheduler
  between consecutive ``update_from_output`` calls (never before the step was scheduled, so idle time does not
  count). The scheduler's outputs are CPU lists that vLLM already waited for: no GPU sync is added.

A scheduled step in which no request samples a token (only non-final prefill chunks) drafts nothing usable:
the ledger does not consult the policy for it and it is transparent to the accounting.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from ...stats import StepStats
from ..controller import StepObserver

__all__ = ["StepLedger", "CycleRelay"]


class _Record:
    """One scheduled step: when, and which earlier decision (depth, number) its verification belongs to.

    ``verifies_steps`` is -1 for a step in which no request samples: it verifies and times nothing.
    """

    __slots__ = ("key", "t_sched", "verifies_steps", "verifies_decision")

    def __init__(
        self, key: object, t_sched: float, verifies_steps: int, verifies_decision: int | None
    ) -> None:
        self.key = key
        self.t_sched = t_sched
        self.verifies_steps = verifies_steps
        self.verifies_decision = verifies_decision


class StepLedger:
    """Per-engine-core bookkeeping between ``schedule()`` and ``update_from_output()``.

    Args:
        decide: the guarded decision (``AdapterRuntime.decide``): StepStats -> depth.
        decision_number: the number of the decision ``decide`` just made (the controller's step counter).
        on_cycle_time: called with (decision number, wall time of the step that verified its drafts).
    """

    __slots__ = (
        "_decide",
        "_number",
        "_on_cycle_time",
        "_pending",
        "_acc",
        "_drafted",
        "_known",
        "_last_k",
        "_last_decision",
        "_t_last_update",
        "max_pending",
    )

    def __init__(
        self,
        decide: Callable[[StepStats], int],
        decision_number: Callable[[], int],
        on_cycle_time: Callable[[int, float], None] | None = None,
        *,
        max_pending: int = 64,
    ) -> None:
        self._decide = decide
        self._number = decision_number
        self._on_cycle_time = on_cycle_time
        self._pending: deque[_Record] = deque()
        self._acc: list[int] = []
        self._drafted: list[int] = []
        # (last_num_steps, accepted, drafted, last_step_time_s) of the latest completed cycle
        self._known: tuple[int, Sequence[int] | None, Sequence[int] | None, float | None] = (
            0,
            None,
            None,
            None,
        )
        self._last_k = 0
        self._last_decision: int | None = None
        self._t_last_update = float("-inf")
        self.max_pending = max_pending

    def on_schedule(
        self,
        key: object,
        batch_size: int,
        num_waiting: int,
        mean_seq_len: float | None,
        samples: bool,
        now: float,
    ) -> int:
        """The depth for the step just scheduled (``key`` identifies its SchedulerOutput)."""
        pending = self._pending
        if samples:
            k = self._decide(StepStats.fast(batch_size, num_waiting, mean_seq_len, *self._known))
            pending.append(_Record(key, now, self._last_k, self._last_decision))
            self._last_k = k
            self._last_decision = self._number()
        else:  # nothing is drafted for a later verify: keep the depth, verify and time nothing
            k = self._last_k
            pending.append(_Record(key, now, -1, None))
        if len(pending) > self.max_pending:  # outputs that never came back (an aborted engine step)
            pending.popleft()
        return k

    def on_draft(self, drafted: int, accepted: int) -> None:
        """One request's verify result in the step being processed (``make_spec_decoding_stats``)."""
        self._acc.append(accepted)
        self._drafted.append(drafted)

    def on_update(self, key: object, now: float) -> None:
        """``update_from_output`` of the step ``key`` finished: its verify results describe one cycle."""
        acc, drafted = self._acc, self._drafted
        if acc:
            self._acc, self._drafted = [], []
        t_prev, self._t_last_update = self._t_last_update, now
        rec = self._pop(key)
        if rec is None:
            return
        k = rec.verifies_steps
        if k < 0:
            return
        step_time = now - (t_prev if t_prev > rec.t_sched else rec.t_sched)
        if acc:
            deepest = max(drafted)
            self._known = (k if k >= deepest else deepest, acc, drafted, step_time)
        else:
            self._known = (k, None, None, step_time)
        if rec.verifies_decision is not None and self._on_cycle_time is not None:
            self._on_cycle_time(rec.verifies_decision, step_time)

    def _pop(self, key: object) -> _Record | None:
        pending = self._pending
        if pending and pending[0].key is key:
            return pending.popleft()
        for i, rec in enumerate(pending):
            if rec.key is key:
                for _ in range(i + 1):
                    pending.popleft()
                return rec
        return None

    @property
    def known(self) -> tuple[int, Sequence[int] | None, Sequence[int] | None, float | None]:
        """(last_num_steps, accepted, drafted, last_step_time_s) the next decision will see."""
        return self._known

    @property
    def in_flight(self) -> int:
        """Scheduled steps whose output has not been processed yet."""
        return len(self._pending)


class CycleRelay:
    """Holds each decision back until the wall time of the step that verified it is known.

    In vLLM that time arrives one (sync) or two (async) decisions later. The relay forwards a decision
    immediately followed by its time, so the observers (trace writer, metrics) receive each decision with
    its own cycle's time. Decisions whose time never comes are forwarded, without a time, once ``max_held``
    newer ones are waiting, or on ``flush``.
    """

    __slots__ = ("_observers", "_held", "max_held", "errors")

    def __init__(self, observers: Sequence[StepObserver], max_held: int = 8) -> None:
        self._observers = tuple(observers)
        self._held: deque[tuple[int, StepStats, int, float, bool]] = deque()
        self.max_held = max_held
        self.errors = 0

    def on_decision(
        self, step: int, stats: StepStats, num_steps: int, decide_s: float, fallback: bool
    ) -> None:
        self._held.append((step, stats, num_steps, decide_s, fallback))
        if len(self._held) > self.max_held:
            self._release(self._held.popleft())

    def on_step_time(self, step: int, step_time_s: float | None) -> None:
        held = self._held
        while held and held[0][0] < step:
            self._release(held.popleft())
        if held and held[0][0] == step:
            self._release(held.popleft())
            for obs in self._observers:
                try:
                    obs.on_step_time(step, step_time_s)
                except Exception:  # observers must not raise; one that does loses only its own record
                    self.errors += 1

    def flush(self) -> None:
        while self._held:
            self._release(self._held.popleft())

    def _release(self, item: tuple[int, StepStats, int, float, bool]) -> None:
        for obs in self._observers:
            try:
                obs.on_decision(*item)
            except Exception:
                self.errors += 1
