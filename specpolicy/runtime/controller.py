"""StepController: the one place where a policy meets an engine.

Every adapter owns one controller per engine process (per rank). It calls decide() once per step, contains
failures (any exception but KeyboardInterrupt / SystemExit, or an invalid mode, is logged once with its
traceback, counted, and the step runs at the engine's configured default depth), keeps depths inside what the
engine pre-built, and tells observers (metrics, the JSONL trace) what happened. The policy itself stays a
small pure object.

It is also the one place where a decision meets its outcome. Every decision gets a number (``step``); the
adapter, which alone knows when the engine's feedback for a decision arrives, reports it with
``outcome(step, accepted, step_time_s)``. The controller then builds the next StepStats' outcome fields
from that decision's own depth, batch size and context length (``next_stats``), and hands each decision to
the observers once, complete, as a ``StepRecord``. A decision whose outcome never comes is handed over
without one when a later decision's outcome arrives, when ``MAX_OPEN`` newer ones are waiting, or on
``close``.

It also times every decide() call: one over ``decide_budget_s`` is logged once. Over-budget calls are
counted with decay (each adds 1, each call within the budget takes ``1 / BUDGET_DECAY`` off, never below 0),
so a policy over budget on more than one call in ``BUDGET_DECAY + 1`` accumulates whether or not its slow
calls are consecutive. When the count reaches ``budget_steps`` the engine default runs and the policy is
consulted only every ``RETRY_INTERVAL`` steps; a retry within the budget makes it decide again, from just
below the limit (a slow policy must not slow every step). A policy that hangs cannot be pre-empted inside
the step (Python cannot interrupt a running call safely): ``watchdog_s`` starts a ``DecideWatchdog`` that
logs the stuck thread's stack so the hang can be found.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Final

from ..errors import short_repr, short_str
from ..hints import BatchRule
from ..mode import MAX_NUM_STEPS, SpecMode
from ..policy import Policy, RequestsSteps
from ..stats import StepStats, clean_count
from .decision import Decision, StepObserver, StepRecord
from .stats_layout import OUTCOME, StatsLayout

__all__ = ["BUDGET_DECAY", "MAX_OPEN", "NOTHING_KNOWN", "StepController"]

log = logging.getLogger("specpolicy.adapter")

#: While over budget, the policy is consulted once per this many steps to see whether it has recovered.
RETRY_INTERVAL = 256
#: Calls within the budget that cancel one over-budget call in the decayed count (``_over_budget``): a
#: policy slow on more than one call in ``BUDGET_DECAY + 1`` is caught, an occasional pause is not.
BUDGET_DECAY = 4
#: Distinct error kinds logged (with a traceback) per controller; later ones are only counted.
MAX_LOGGED = 16
_FATAL = (KeyboardInterrupt, SystemExit)
#: ``_poll_at`` when nothing is watched: a step never reached.
_NEVER = 1 << 62


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
_new = tuple.__new__
_perf = time.perf_counter
#: A decision awaiting its outcome: StepRecord's fields up to ``decided_at``, then the decided depth (in the
#: place of StepRecord's last field, ``step_time_s``, which the outcome brings).
_Open = tuple[int, StepStats, int, float, bool, float, int]
_O_STATS: Final = 1  # StepRecord.stats
_O_DEPTH: Final = 2  # StepRecord.num_steps
_O_ASKED: Final = 6  # StepRecord.step_time_s (a test holds these to StepRecord's fields)


class StepController:
    """Guards one policy for one engine process.

    Args:
        policy: the policy to consult.
        allowed_steps: every depth the engine can run this session (its pre-built states / graphs), 0 for
            off if the path supports it. A depth outside it is an invalid decision.
        default_steps: the engine's configured depth, used whenever the policy fails.
        rank: this process's rank, for logs and the trace.
        observers: metrics, trace writers.
        decide_budget_s: a decide() call slower than this is over budget (logged once, counted).
        budget_steps: when the decayed count of over-budget calls reaches this, the default depth runs
            (0 = never): ``budget_steps`` in a row, or a policy slow on most calls, however interleaved.
        watchdog_s: log the deciding thread's stack when one decide() call runs longer than this (None = off).
        hint_rule: how the batch's per-request hints (``StepStats.hints``) limit the decided depth, applied
            after decide() (and to the default depth when the policy fails); the depth becomes the deepest
            allowed one within the limit.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        allowed_steps: Sequence[int],
        default_steps: int,
        rank: int = 0,
        observers: Sequence[StepObserver] = (),
        policy_name: str = "",
        decide_budget_s: float = 1e-3,
        budget_steps: int = 16,
        watchdog_s: float | None = None,
        hint_rule: BatchRule | None = None,
    ) -> None:
        allowed = frozenset(int(k) for k in allowed_steps)
        if default_steps not in allowed:
            raise ValueError(
                f"default_steps={default_steps} is not among the engine's allowed depths {sorted(allowed)}"
            )
        if not decide_budget_s > 0:
            raise ValueError(f"decide_budget_s must be > 0, got {decide_budget_s!r}")
        if budget_steps < 0:
            raise ValueError(f"budget_steps must be >= 0, got {budget_steps!r}")
        self.policy = policy  # (the property's setter: it sees whether the policy is a clamp)
        self.policy_name = policy_name or type(policy).__name__
        self.allowed_steps = allowed
        self.default_steps = default_steps
        self.rank = rank
        self.observers = tuple(observers)
        self.decide_budget_s = decide_budget_s
        self.budget_steps = budget_steps
        self.step = 0
        self.errors = 0
        #: "Type: message" of the first policy error, for reports that name it (the simulator's).
        self.first_error: str | None = None
        self._switches = -1  # the first decision is no switch (see ``switches``)
        #: decide() calls over decide_budget_s, and steps that ran the default because of it.
        self.over_budget = 0
        self.budget_fallbacks = 0
        #: outcomes ignored because their step or depth was no count (``outcome``)
        self.bad_outcomes = 0
        #: decisions per depth before the current run (see ``steps_by_depth``): counted at each switch
        self._by_depth: dict[int, int] = {k: 0 for k in sorted(allowed)}
        self._last_k = -1  # depth of the latest decision (-1: none yet), for switch counting
        self._run_from = 1  # the first decision of the current run at depth ``_last_k``
        #: (step, stats, depth, decide_s, fallback, decided_at, decided depth) of the decisions awaiting
        #: their outcome, in slot ``step & _SLOT`` (a ring: a decision MAX_OPEN older is handed over when its
        #: slot is taken). The decided depth is the one the outcome reports: where the policy is a clamp
        #: (``RequestsSteps``), the depth its part asked for, otherwise the depth the controller returned.
        self._ring: list[_Open | None] = [None] * MAX_OPEN
        self._done = 0  # every decision up to this one has been handed over (with its outcome or without)
        #: StepStats' fields after the engine's load for the next decision: the outcome fields of the latest
        #: decision with a known outcome (``known``) and an unknown ``request_ids``, so that ``next_stats``
        #: adds the load with one concatenation
        self._tail: tuple[Any, ...] = _NOTHING_TAIL
        self._logged: set[tuple[str, str, str]] = set()
        #: the decayed count of over-budget calls, in units of 1 / BUDGET_DECAY (see ``_over_budget``)
        self._slow = 0
        self._tripped = self._recovered = False  # each transition is logged once
        #: perf_counter() when the running decide() started (0.0: none running), and the deciding thread;
        #: read by the watchdog.
        self.busy_since = 0.0
        self.thread_id = 0
        self.hint_rule = BatchRule() if hint_rule is None else hint_rule
        #: the deepest allowed depth <= c, for each limit c in [0, MAX_NUM_STEPS] (0 when none is)
        self._floor = [max((k for k in allowed if k <= c), default=0) for c in range(MAX_NUM_STEPS + 1)]
        #: steps the hints turned off, and steps they made shallower but not off
        self.hint_off_steps = 0
        self.hint_capped_steps = 0
        #: the hook called before every ``_poll_every``-th decision (``watch``), and the step after which
        #: it runs next
        self._poll_hook: Callable[[int], None] | None = None
        self._poll_every = 0
        self._poll_at = _NEVER
        self.watchdog = None
        if watchdog_s is not None:
            from .watchdog import DecideWatchdog

            self.watchdog = DecideWatchdog(self, watchdog_s)

    @property
    def policy(self) -> Policy:
        """The guarded policy; assigning another one takes effect from the next decision."""
        return self._policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self._policy = policy
        self._asks: RequestsSteps | None = policy if isinstance(policy, RequestsSteps) else None

    def replace_policy(self, policy: Policy, name: str) -> None:
        """Guard another policy from the next decision on; its decide() budget starts afresh (the slow calls
        of the one it replaces are not held against it)."""
        self.policy = policy
        self.policy_name = name or type(policy).__name__
        self._slow = 0
        self._tripped = self._recovered = False

    def watch(self, hook: Callable[[int], None], every: int) -> None:
        """Call ``hook(step)`` before every ``every``-th decision, ``step`` being that decision's number
        (the control file's check). One comparison per decision; a hook that raises is contained like a
        policy error, and the decision goes ahead."""
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every!r}")
        self._poll_hook = hook
        self._poll_every = every
        self._poll_at = self.step + every

    def _poll(self) -> None:
        self._poll_at = self.step + self._poll_every
        hook = self._poll_hook
        assert hook is not None
        try:
            hook(self.step + 1)
        except _FATAL:
            raise
        except BaseException as exc:  # noqa: BLE001 - the engine keeps serving with the running policy
            self._on_error(exc, "control", "the running policy stays")

    @property
    def known(self) -> tuple[Any, ...]:
        """StepStats' outcome fields (``last_num_steps`` .. ``last_request_ids``) the next decision will
        see: those of the latest decision with a known outcome, ``NOTHING_KNOWN`` before one."""
        return self._tail[:_KNOWN]

    @property
    def steps_by_depth(self) -> dict[int, int]:
        """Decisions per depth so far (a copy). The step path only notes where each run of one depth
        starts; the runs are added up here."""
        out = dict(self._by_depth)
        if self._last_k >= 0:
            out[self._last_k] = out.get(self._last_k, 0) + self.step + 1 - self._run_from
        return out

    def _switch(self, k: int, step: int) -> None:
        """Decision ``step`` runs depth ``k``, unlike the one before it: count the run that ends."""
        last = self._last_k
        if last >= 0:
            self._by_depth[last] = self._by_depth.get(last, 0) + step - self._run_from
        self._switches += 1
        self._last_k = k
        self._run_from = step

    @property
    def switches(self) -> int:
        """Decisions whose depth differs from the previous decision's."""
        return max(self._switches, 0)

    def decide(self, stats: StepStats) -> Decision:
        """The depth the engine must run this step, with the decision's number (for ``outcome``). Never
        raises (but KeyboardInterrupt / SystemExit)."""
        if self.step >= self._poll_at:
            self._poll()
        if self._slow and self._slow >= self.budget_steps * BUDGET_DECAY > 0 and self.step % RETRY_INTERVAL:
            self.budget_fallbacks += 1
            k = self.default_steps
            if stats[_HINTS] is not None and k:
                k = self._hinted(k, stats)
            return self._commit(stats, k, 0.0, True, time.perf_counter())
        if not self.thread_id:
            self.thread_id = threading.get_ident()
        t0 = self.busy_since = _perf()
        fallback = False
        try:
            mode = self._policy.decide(stats)  # looked up per call: a patched decide() takes effect
            if type(mode) is not SpecMode or (k := mode.num_steps) not in self.allowed_steps:
                raise ValueError(
                    f"policy {self.policy_name} returned {short_repr(mode)}; this engine runs only depths "
                    f"{sorted(self.allowed_steps)}"
                )
        except _FATAL:
            self.busy_since = 0.0
            raise
        except BaseException as exc:  # contained: the engine keeps serving
            k = self.default_steps
            fallback = True
            self.errors += 1
            if self.first_error is None:
                self.first_error = f"{type(exc).__name__}: {short_str(exc)}"
            self._on_error(exc, "policy", f"running the default depth {k}")
        dt = _perf() - t0
        self.busy_since = 0.0
        if stats[_HINTS] is not None and k:
            k = self._hinted(k, stats)
        if dt > self.decide_budget_s:
            self._over_budget(dt)
        elif self._slow:
            self._in_budget()
        # ``_commit``, inlined: this is every step's path
        step = self.step = self.step + 1
        if k != self._last_k:
            self._switch(k, step)
        ring = self._ring
        i = step & _SLOT
        if ring[i] is not None:  # an outcome that never came (an aborted step): hand it over without one
            self._evict(ring[i])  # type: ignore[arg-type]
        asks = self._asks  # a clamp: the decided depth is the one its part asked for
        ring[i] = (step, stats, k, dt, fallback, t0, k if asks is None or fallback else asks.requested_steps)
        return _new(Decision, (step, k))

    def _hinted(self, k: int, stats: StepStats) -> int:
        """``k`` lowered to what the batch's hints allow (``hint_rule``), counted; malformed hints (from a
        caller other than an adapter) are ignored."""
        try:
            limit = self.hint_rule.limit(stats[_HINTS], stats[_BATCH])  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - StepStats.fast skips validation: no usable hints
            return k
        if limit >= k:
            return k
        low = self._floor[limit]
        if low == 0:
            self.hint_off_steps += 1
        else:
            self.hint_capped_steps += 1
        return low

    def hint_counts(self) -> dict[str, int]:
        """Steps the hints turned off or capped (``specpolicy_hints_total{event}``)."""
        return {"steps_off": self.hint_off_steps, "steps_capped": self.hint_capped_steps}

    def _commit(self, stats: StepStats, k: int, dt: float, fallback: bool, t0: float) -> Decision:
        step = self.step = self.step + 1
        if k != self._last_k:
            self._switch(k, step)
        ring = self._ring
        i = step & _SLOT
        if ring[i] is not None:
            self._evict(ring[i])  # type: ignore[arg-type]
        ring[i] = (step, stats, k, dt, fallback, t0, k)
        return _new(Decision, (step, k))

    def force(self, stats: StepStats, num_steps: int) -> Decision:
        """Record a step whose depth the engine imposed (another rank's decision, a prefill-only step)."""
        return self._commit(stats, num_steps, 0.0, False, time.perf_counter())

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
            except _FATAL:
                raise
            except BaseException as exc:
                self._on_error(
                    exc,
                    "observer",
                    f"the step keeps its depth {item[_O_DEPTH]}; this observer misses its record, so "
                    "the step time is not recorded",
                )

    def close(self) -> None:
        """Hand the decisions still waiting to the observers (without an outcome) and stop the watchdog
        (observers are closed by their owner)."""
        if self.observers:
            self._release_before(self.step + 1, self._done)
        self._ring = [None] * MAX_OPEN
        self._done = self.step
        if self.watchdog is not None:
            self.watchdog.stop()

    def _over_budget(self, dt: float) -> None:
        self.over_budget += 1
        trip = self.budget_steps * BUDGET_DECAY
        before = self._slow
        self._slow = n = min(before + BUDGET_DECAY, trip) if trip > 0 else 0
        if self.over_budget == 1:
            log.warning(
                "specpolicy rank %d: policy %s took %.3f ms in decide() (step %d), over the budget of %.3f "
                "ms; once %d calls are over it (less one for every %d within it) the default depth %d runs. "
                "Logged once.",
                self.rank,
                self.policy_name,
                dt * 1e3,
                self.step + 1,
                self.decide_budget_s * 1e3,
                self.budget_steps,
                BUDGET_DECAY,
                self.default_steps,
            )
        if before < n == trip and not self._tripped:
            self._tripped = True
            log.warning(
                "specpolicy rank %d: policy %s over its decide() budget on %d recent calls (last %.3f ms, "
                "%d over budget so far); running the default depth %d, consulting the policy once every %d "
                "steps (logged once)",
                self.rank,
                self.policy_name,
                self.budget_steps,
                dt * 1e3,
                self.over_budget,
                self.default_steps,
                RETRY_INTERVAL,
            )

    def _in_budget(self) -> None:
        """A call within the budget: one unit off the count. After a fallback the policy decides again from
        just below the limit, so a policy still slow on most calls is replaced again at its next slow
        call, and a recovered one decays back to 0."""
        trip = self.budget_steps * BUDGET_DECAY
        if self._slow >= trip > 0 and not self._recovered:
            self._recovered = True
            log.warning(
                "specpolicy rank %d: policy %s is back within its decide() budget; it decides again (logged "
                "once; later fallbacks are counted)",
                self.rank,
                self.policy_name,
            )
        self._slow = min(self._slow, trip) - 1

    def _on_error(self, exc: BaseException, where: str, outcome: str) -> None:
        """Log an error once per (where, type, message) with its traceback; bounded cost whatever ``exc``
        holds (a message of megabytes, a ``__str__`` that raises)."""
        logged = self._logged
        if len(logged) >= MAX_LOGGED:
            return
        key = (where, type(exc).__name__, short_str(exc))
        if key in logged:
            return
        logged.add(key)
        try:
            log.error(
                "specpolicy rank %d: %s error (step %d): %s: %s; %s and continuing. Further identical errors "
                "are counted, not logged.",
                self.rank,
                where,
                self.step + 1,
                key[1],
                key[2],
                outcome,
                exc_info=exc,
            )
        except _FATAL:
            raise
        except BaseException:  # noqa: BLE001 - a traceback that cannot be rendered: the line without it
            log.error(
                "specpolicy rank %d: %s error (step %d): %s; %s",
                self.rank,
                where,
                self.step + 1,
                key[1],
                outcome,
            )
