"""StepController: the one place where a policy meets an engine.

Every adapter owns one controller per engine process (per rank). It calls decide() once per step, contains
failures (an exception or an invalid mode is logged once with its traceback, counted, and the step runs at the
engine's configured default depth), keeps depths inside what the engine pre-built, and tells observers
(metrics, the JSONL trace) what happened. The policy itself stays a small pure object.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol

from ..mode import SpecMode
from ..policy import Policy
from ..stats import StepStats

__all__ = ["StepController", "StepObserver", "Decision"]

log = logging.getLogger("specpolicy.adapter")


class StepObserver(Protocol):
    """Receives what the controller saw; implementations must be cheap and must not raise."""

    def on_decision(
        self, step: int, stats: StepStats, num_steps: int, decide_s: float, fallback: bool
    ) -> None: ...

    def on_step_time(self, step: int, step_time_s: float | None) -> None: ...


class Decision:
    """Mutable per-step scratch kept by the controller (reused, never reallocated)."""

    __slots__ = ("step", "num_steps", "fallback", "decide_s")

    def __init__(self) -> None:
        self.step = -1
        self.num_steps = 0
        self.fallback = False
        self.decide_s = 0.0


class StepController:
    """Guards one policy for one engine process.

    Args:
        policy: the policy to consult.
        allowed_steps: every depth the engine can run this session (its pre-built states / graphs), 0 for
            off if the path supports it. A depth outside it is an invalid decision.
        default_steps: the engine's configured depth, used whenever the policy fails.
        rank: this process's rank, for logs and the trace.
        observers: metrics, trace writers.
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
    ) -> None:
        allowed = frozenset(int(k) for k in allowed_steps)
        if default_steps not in allowed:
            raise ValueError(
                f"default_steps={default_steps} is not among the engine's allowed depths {sorted(allowed)}"
            )
        self.policy = policy
        self.policy_name = policy_name or type(policy).__name__
        self.allowed_steps = allowed
        self.default_steps = default_steps
        self.rank = rank
        self.observers = tuple(observers)
        self.step = 0
        self.errors = 0
        self.switches = 0
        self.steps_by_depth: dict[int, int] = {k: 0 for k in sorted(allowed)}
        self.last = Decision()
        self.last.num_steps = default_steps
        self._logged: set[str] = set()

    def decide(self, stats: StepStats) -> int:
        """The depth the engine must run this step. Never raises."""
        t0 = time.perf_counter()
        fallback = False
        try:
            mode = self.policy.decide(stats)
            k = mode.num_steps if type(mode) is SpecMode else None
            if k is None or k not in self.allowed_steps:
                raise ValueError(
                    f"policy {self.policy_name} returned {mode!r}; this engine runs only depths "
                    f"{sorted(self.allowed_steps)}"
                )
        except Exception as exc:  # contained: the engine keeps serving
            k = self.default_steps
            fallback = True
            self._on_error(exc)
        dt = time.perf_counter() - t0
        return self._commit(stats, k, dt, fallback)

    def _commit(self, stats: StepStats, k: int, dt: float, fallback: bool) -> int:
        last = self.last
        if k != last.num_steps and last.step >= 0:
            self.switches += 1
        self.step += 1
        last.step = self.step
        last.num_steps = k
        last.fallback = fallback
        last.decide_s = dt
        self.steps_by_depth[k] = self.steps_by_depth.get(k, 0) + 1
        for obs in self.observers:
            try:
                obs.on_decision(self.step, stats, k, dt, fallback)
            except Exception as exc:
                self._on_error(exc, where="observer")
        return k

    def force(self, stats: StepStats, num_steps: int) -> int:
        """Record a step whose depth the engine imposed (another rank's decision, a prefill-only step)."""
        return self._commit(stats, num_steps, 0.0, False)

    def step_time(self, step_time_s: float | None, step: int | None = None) -> None:
        """Report a step's measured wall time to the observers: the most recent step unless ``step`` names
        an earlier one (engines whose timing arrives with the feedback of a round decided earlier)."""
        which = self.step if step is None else step
        for obs in self.observers:
            try:
                obs.on_step_time(which, step_time_s)
            except Exception as exc:
                self._on_error(exc, where="observer")

    def _on_error(self, exc: BaseException, where: str = "policy") -> None:
        self.errors += where == "policy"
        key = f"{where}:{type(exc).__name__}:{exc}"
        if key not in self._logged and len(self._logged) < 16:
            self._logged.add(key)
            log.error(
                "specpolicy rank %d: %s error (step %d); running the default depth %d and continuing. "
                "Further identical errors are counted, not logged.",
                self.rank, where, self.step + 1, self.default_steps, exc_info=exc,
            )
