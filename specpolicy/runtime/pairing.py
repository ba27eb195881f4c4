"""The pairing of each decision with its outcome: the StepStats each decision sees, and the record each
decision's observers get.

Every decision has a number (``step``); the adapter, which alone knows when the engine's feedback for a
decision arrives, reports it with ``outcome(step, accepted, step_time_s)``. The next StepStats' outcome
fields then come from that decision's own depth, batch size and context length (``next_stats``), and each
decision reaches the observers once, complete, as a ``StepRecord``. A decision whose outcome never comes is
handed over without one when a later decision's outcome arrives, when ``MAX_OPEN`` newer ones are waiting,
or on ``close``. The fields are placed by name (``stats_layout``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Final

from ..clean import clean_count
from ..errors import short_repr
from ..mode import MAX_NUM_STEPS
from ..stats import StepStats
from .decision import StepObserver, StepRecord
from .stats_layout import OUTCOME, StatsLayout

__all__ = ["FATAL", "MAX_OPEN", "NOTHING_KNOWN", "OutcomePairing"]

#: the exceptions never contained: an observer raising one stops the engine as it would without specpolicy
FATAL = (KeyboardInterrupt, SystemExit)
#: Decisions awaiting their outcome, at most (a power of two); engines report outcomes a few decisions late.
MAX_OPEN = 16
_SLOT = MAX_OPEN - 1
#: StepStats' fields found by name (``stats_layout``): the values below go to the field of their name.
_LAYOUT = StatsLayout(StepStats)
_BATCH = _LAYOUT.index["batch_size"]
_SEQ_LEN = _LAYOUT.index["mean_seq_len"]
_HINTS = _LAYOUT.index["hints"]
#: the controller's order (``LOAD + OUTCOME + BATCH`` + StepStats' other fields) to StepStats' own; None
#: while they agree, so the step pays nothing for it
_ARRANGE = _LAYOUT.arrange
#: StepStats' fields the controller never sets, at their defaults (none today)
_REST = _LAYOUT.rest
_KNOWN = len(OUTCOME)
#: StepStats' ``OUTCOME`` fields when nothing is known: their defaults.
NOTHING_KNOWN: tuple[Any, ...] = _LAYOUT.nothing_known
#: ``NOTHING_KNOWN``, an unknown ``request_ids``, no hints and the other fields' defaults: every field after
#: the engine's load, in the controller's order.
_NOTHING_TAIL: tuple[Any, ...] = NOTHING_KNOWN + (None, None) + _REST
#: A decision awaiting its outcome: StepRecord's fields up to ``decided_at``, then the decided depth (in the
#: place of StepRecord's last field, ``step_time_s``, which the outcome brings).
_Open = tuple[int, StepStats, int, float, bool, float, int]
_O_STATS: Final = 1  # StepRecord.stats
_O_DEPTH: Final = 2  # StepRecord.num_steps
_O_ASKED: Final = 6  # StepRecord.step_time_s (a test holds these to StepRecord's fields)
_new = tuple.__new__


class OutcomePairing:
    """The outcome half of ``StepController``: the ring of decisions awaiting their outcome and the
    outcome fields the next decision sees. The controller's ``decide`` fills the ring."""

    observers: tuple[StepObserver, ...]
    bad_outcomes: int
    #: (step, stats, depth, decide_s, fallback, decided_at, decided depth) of the decisions awaiting their
    #: outcome, in slot ``step & _SLOT`` (a ring: a decision MAX_OPEN older is handed over when its slot is
    #: taken)
    _ring: list[_Open | None]
    _done: int  # every decision up to this one has been handed over (with its outcome or without)
    #: StepStats' fields after the engine's load for the next decision, in the controller's order: the
    #: outcome fields of the latest decision with a known outcome (``known``) and an unknown batch
    _tail: tuple[Any, ...]

    #: the controller's containment: logs ``exc`` once and goes on (``StepController._on_error``)
    _on_error: Callable[[BaseException, str, str], None]

    @property
    def known(self) -> tuple[Any, ...]:
        """StepStats' outcome fields (``last_num_steps`` .. ``last_request_ids``) the next decision will
        see: those of the latest decision with a known outcome, ``NOTHING_KNOWN`` before one."""
        return self._tail[:_KNOWN]

    def next_stats(
        self,
        batch_size: int,
        num_waiting: int,
        mean_seq_len: float | None,
        request_ids: Sequence[Hashable] | None = None,
        hints: Sequence[int] | None = None,
    ) -> StepStats:
        """The StepStats of the coming decision: the engine's load now (and, when the adapter knows them,
        the ids of the requests in the batch and their hints), and the outcome ``known``."""
        if request_ids is None and hints is None:
            values = (batch_size, num_waiting, mean_seq_len) + self._tail
        else:
            batch = (request_ids, hints) + _REST
            values = (batch_size, num_waiting, mean_seq_len) + self._tail[:_KNOWN] + batch
        stats: StepStats = _new(StepStats, values if _ARRANGE is None else _ARRANGE(values))
        return stats

    def outcome(
        self,
        step: int,
        accepted: Sequence[int] | None,
        step_time_s: float | None,
        num_steps: int | None = None,
        drafted: Sequence[int] | None = None,
        mean_accepted: float | None = None,
        request_ids: Sequence[Hashable] | None = None,
    ) -> None:
        """Decision ``step``'s outcome: per request accepted drafts (bonus not counted; None: unknown), the
        measured time of its step (None: unknown), and, when the engine says so, the depth that actually
        ran (default: the decided one), the drafts proposed per request and the id of each request (in the
        order of ``accepted``).

        The next StepStats describe that decision's step; the observers receive its record. Earlier
        decisions still waiting are handed over without an outcome (the trace stays in order); an outcome
        for a decision no longer waiting (reported twice, or evicted) is ignored.
        """
        # (The optional parameters are positional-or-keyword: keyword-only defaults cost every call.)
        if step.__class__ is not int or (
            num_steps is not None and (num_steps.__class__ is not int or not 0 <= num_steps <= MAX_NUM_STEPS)
        ):
            checked = self._odd_outcome(step, num_steps)
            if checked is None:
                return
            step, num_steps = checked
        if step <= self._done:
            return  # handed over already
        ring = self._ring
        i = step & _SLOT
        item = ring[i]
        if item is None or item[0] != step:
            return  # evicted, or never decided
        ring[i] = None
        k = item[_O_DEPTH] if num_steps is None else num_steps
        load = item[_O_STATS]  # the decision's own stats: its batch size and context length
        # the tail in the controller's order: ``OUTCOME``, then ``BATCH`` (unknown), then ``_REST``
        if k > 0:
            self._tail = (
                k,
                accepted,
                drafted,
                step_time_s,
                mean_accepted,
                load[_BATCH],
                item[_O_ASKED],
                load[_SEQ_LEN],
                request_ids,
                None,
                None,
            ) + _REST
        else:  # a step without speculation has no acceptance data, never "zero acceptance"
            self._tail = (
                0,
                None,
                None,
                step_time_s,
                None,
                load[_BATCH],
                item[_O_ASKED],
                load[_SEQ_LEN],
                None,
                None,
                None,
            ) + _REST
        if self.observers:
            done = self._done
            self._done = step
            if step != done + 1:
                self._release_before(step, done)
            self._release(item, step_time_s)
        else:
            self._done = step

    def _odd_outcome(self, step: object, num_steps: object) -> tuple[int, int | None] | None:
        """``step`` and ``num_steps`` as ints (numpy integers and integral floats are understood), or None
        when either is no count: that outcome is ignored, counted in ``bad_outcomes`` and logged once,
        never raised into the engine."""
        s = clean_count(step)
        k = None if num_steps is None else clean_count(num_steps)
        if s is not None and (num_steps is None or (k is not None and k <= MAX_NUM_STEPS)):
            return s, k
        self.bad_outcomes += 1
        bad = ("step", step) if s is None else ("num_steps", num_steps)
        self._on_error(
            TypeError(f"outcome {bad[0]} must be an int >= 0, got {short_repr(bad[1])}"),
            "adapter",
            "this outcome is ignored",
        )
        return None

    def forget(self) -> None:
        """Feedback arrived that matches no decision: the next StepStats say nothing rather than guess."""
        self._tail = _NOTHING_TAIL

    @property
    def waiting(self) -> int:
        """Decisions whose outcome has not been reported yet (nor handed over without one)."""
        return sum(1 for item in self._ring if item is not None and item[0] > self._done)

    def _evict(self, item: _Open) -> None:
        """The decision in a slot about to be reused: hand it over without an outcome, if still waiting."""
        if item[0] > self._done:
            if self.observers:
                self._release_before(item[0], self._done)
                self._release(item, None)
            self._done = item[0]

    def _release_before(self, step: int, done: int) -> None:
        """Hand over, in order and without an outcome, the decisions after ``done`` still waiting before
        ``step``."""
        ring = self._ring
        for s in range(done + 1, step):
            item = ring[s & _SLOT]
            if item is not None and item[0] == s:
                ring[s & _SLOT] = None
                self._release(item, None)

    def _release(self, item: _Open, step_time_s: float | None) -> None:
        if not self.observers:
            return
        record: StepRecord = _new(StepRecord, item[:_O_ASKED] + (step_time_s,))
        for obs in self.observers:
            try:
                obs.on_record(record)
            except FATAL:
                raise
            except BaseException as exc:
                self._on_error(
                    exc,
                    "observer",
                    f"the step keeps its depth {item[_O_DEPTH]}; this observer misses its record, so "
                    "the step time is not recorded",
                )
