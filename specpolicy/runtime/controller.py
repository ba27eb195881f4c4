"""StepController: the one place where a policy meets an engine.

Every adapter owns one controller per engine process (per rank). It calls decide() once per step, contains
failures (any exception but KeyboardInterrupt / SystemExit, or an invalid mode, is logged once with its
traceback, counted, and the step runs at the engine's configured default depth), keeps depths inside what the
engine pre-built, and tells observers (metrics, the JSONL trace) what happened. The policy itself stays a
small pure object.

It is also the one place where a decision meets its outcome: ``decide`` returns the decision's number with
its depth, and the adapter reports the engine's feedback under that number (``outcome``, ``pairing``). Every
decide() call is timed against a budget (``budget``): a policy slow on most calls is replaced by the
engine's default depth until it recovers. A policy that hangs cannot be pre-empted inside the step (Python
cannot interrupt a running call safely): ``watchdog_s`` starts a ``DecideWatchdog`` that logs the stuck
thread's stack so the hang can be found.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..errors import short_repr, short_str
from ..hints import BatchRule
from ..mode import MAX_NUM_STEPS, SpecMode
from ..policy import Policy, RequestsSteps
from ..stats import StepStats
from .budget import BUDGET_DECAY, RETRY_INTERVAL, DecideBudget
from .decision import Decision, StepObserver
from .pairing import _BATCH, _HINTS, _NOTHING_TAIL, _SLOT, FATAL, MAX_OPEN, OutcomePairing

__all__ = ["StepController"]

log = logging.getLogger("specpolicy.adapter")

#: Distinct error kinds logged (with a traceback) per controller; later ones are only counted.
MAX_LOGGED = 16
#: ``_poll_at`` when nothing is watched: a step never reached.
_NEVER = 1 << 62
_perf = time.perf_counter


class StepController(OutcomePairing, DecideBudget):
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
        #: the decisions awaiting their outcome (``OutcomePairing``). Their decided depth is the one the
        #: outcome reports: where the policy is a clamp (``RequestsSteps``), the depth its part asked for,
        #: otherwise the depth the controller returned.
        self._ring = [None] * MAX_OPEN
        self._done = 0
        self._tail = _NOTHING_TAIL
        self._logged: set[tuple[str, str, str]] = set()
        self._slow = 0  # the decayed count of over-budget calls (``DecideBudget``)
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
        except FATAL:
            raise
        except BaseException as exc:  # noqa: BLE001 - the engine keeps serving with the running policy
            self._on_error(exc, "control", "the running policy stays")

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
        except FATAL:
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
        return (step, k)

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
        return (step, k)

    def force(self, stats: StepStats, num_steps: int) -> Decision:
        """Record a step whose depth the engine imposed (another rank's decision, a prefill-only step)."""
        return self._commit(stats, num_steps, 0.0, False, time.perf_counter())

    def close(self) -> None:
        """Hand the decisions still waiting to the observers (without an outcome) and stop the watchdog
        (observers are closed by their owner)."""
        if self.observers:
            self._release_before(self.step + 1, self._done)
        self._ring = [None] * MAX_OPEN
        self._done = self.step
        if self.watchdog is not None:
            self.watchdog.stop()

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
        except FATAL:
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
