"""StepLedger: which decision each vLLM step verifies, and the outcome it reports. No vLLM import.

The vLLM timeline (docs/getting-started/vllm.md): the depth K chosen when step S is scheduled is *drafted*
after step S runs and *verified* in step S+1, whose per-request (drafted, accepted) counts reach the scheduler
in ``update_from_output(S+1)``. With synchronous scheduling that happens before step S+2 is scheduled; with
async scheduling step S+2 is already scheduled by then, so the policy's stats are one step older. The ledger
keeps one record per scheduled step (in schedule order), so whatever the lag it reports each verify to the
controller as the outcome of the decision whose drafts it verified, and the stats handed to ``decide``
(``StepController.next_stats``) always describe that one cycle:

* ``last_num_steps``: that decision's depth;
* ``accepted_draft_tokens`` / ``drafted_tokens``: per request, from ``make_spec_decoding_stats``;
  ``drafted_tokens`` keeps vLLM's trimming (token budget, max_model_len, grammar-invalid drafts);
* ``last_request_ids`` / ``request_ids``: the verified requests' ids (in the order of the counts) and those
  of the step being scheduled;
* ``last_step_time_s``: wall time of the verifying step, taken with ``time.perf_counter`` in the scheduler
  between consecutive ``update_from_output`` calls (never before the step was scheduled, so idle time does not
  count). The scheduler's outputs are CPU lists that vLLM already waited for: no GPU sync is added.

A scheduled step in which no request samples a token (only non-final prefill chunks) drafts nothing usable:
the ledger does not consult the policy for it and it is transparent to the accounting.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from typing import NamedTuple, Protocol

from ...runtime.decision import StepPath

__all__ = ["StepLedger"]


class _Record(NamedTuple):
    """One scheduled step: when, and which earlier decision (depth, number) its verification belongs to.

    ``verifies_steps`` is -1 for a step in which no request samples: it verifies and times nothing. Built
    with ``tuple.__new__`` on the step path (no Python-level constructor call per step).
    """

    key: object
    t_sched: float
    verifies_steps: int
    verifies_decision: int | None


_new = tuple.__new__


class OnDraft(Protocol):
    """``StepLedger.on_draft``'s signature."""

    def __call__(self, drafted: int, accepted: int, request_id: Hashable | None = None) -> None: ...


class StepLedger:
    """Per-engine-core bookkeeping between ``schedule()`` and ``update_from_output()``.

    Args:
        path: the step path (the ``AdapterRuntime``): it builds each decision's StepStats, decides (the
            decision's number with its depth) and receives the outcomes.
    """

    __slots__ = (
        "_decide",
        "_next_stats",
        "_outcome",
        "_pending",
        "_acc",
        "_drafted",
        "_ids",
        "_with_ids",
        "on_draft",
        "_last_k",
        "_last_decision",
        "_t_last_update",
        "max_pending",
    )

    def __init__(
        self,
        path: StepPath,
        *,
        max_pending: int = 64,
        request_ids: bool = True,
    ) -> None:
        self._decide = path.decide
        self._next_stats = path.next_stats
        self._outcome = path.outcome
        self._pending: deque[_Record] = deque()
        self._acc: list[int] = []
        self._drafted: list[int] = []
        #: the request id of each verify result in ``_acc`` (None: some result came without one, or the
        #: policy reads no ids)
        self._with_ids = request_ids
        self._ids: list[Hashable] | None = [] if request_ids else None
        #: one request's verify result in the step being processed (``make_spec_decoding_stats``):
        #: ``on_draft(drafted, accepted, request_id=None)``, its id kept only where the policy reads ids
        self.on_draft: OnDraft = self._draft_with_id if request_ids else self._draft
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
        request_ids: Sequence[Hashable] | None = None,
        hints: Sequence[int] | None = None,
    ) -> int:
        """The depth for the step just scheduled (``key`` identifies its SchedulerOutput; ``request_ids``
        its decoding requests, when known; ``hints`` theirs, when any has one)."""
        pending = self._pending
        if samples:
            stats = self._next_stats(batch_size, num_waiting, mean_seq_len, request_ids, hints)
            step, k = self._decide(stats)
            pending.append(_new(_Record, (key, now, self._last_k, self._last_decision)))
            self._last_k = k
            self._last_decision = step
        else:  # nothing is drafted for a later verify: keep the depth, verify and time nothing
            k = self._last_k
            pending.append(_new(_Record, (key, now, -1, None)))
        if len(pending) > self.max_pending:  # outputs that never came back (an aborted engine step)
            pending.popleft()
        return k

    def _draft(self, drafted: int, accepted: int, request_id: Hashable | None = None) -> None:
        self._acc.append(accepted)
        self._drafted.append(drafted)

    def _draft_with_id(self, drafted: int, accepted: int, request_id: Hashable | None = None) -> None:
        self._acc.append(accepted)
        self._drafted.append(drafted)
        ids = self._ids
        if ids is not None:
            if request_id is None:
                self._ids = None  # one result without an id: the step's ids would not line up
            else:
                ids.append(request_id)

    def on_update(self, key: object, now: float) -> None:
        """``update_from_output`` of the step ``key`` finished: its verify results describe one cycle."""
        acc = self._acc
        if acc:
            drafted, ids = self._drafted, self._ids
            self._acc, self._drafted = [], []
            if self._with_ids:
                self._ids = []
        t_prev, self._t_last_update = self._t_last_update, now
        pending = self._pending
        if pending and pending[0].key is key:  # the common case, without a call
            rec = pending.popleft()
        else:
            found = self._pop(key)
            if found is None:
                return
            rec = found
        k = rec.verifies_steps
        decision = rec.verifies_decision
        if k < 0 or decision is None:  # verifies nothing (no decode, or the engine's first step)
            return
        step_time = now - (t_prev if t_prev > rec.t_sched else rec.t_sched)
        if acc:
            deepest = max(drafted)
            self._outcome(decision, acc, step_time, k if k >= deepest else deepest, drafted, None, ids)
        else:
            self._outcome(decision, None, step_time)

    def _pop(self, key: object) -> _Record | None:
        """The record of step ``key`` and every older one dropped (their outputs never came), or None."""
        pending = self._pending
        for i, rec in enumerate(pending):
            if rec.key is key:
                for _ in range(i + 1):
                    pending.popleft()
                return rec
        return None

    @property
    def in_flight(self) -> int:
        """Scheduled steps whose output has not been processed yet."""
        return len(self._pending)
