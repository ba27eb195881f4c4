"""The decide() time budget: a policy slow on most calls is replaced by the engine's default depth.

Over-budget calls are counted with decay (each adds 1, each call within the budget takes ``1 /
BUDGET_DECAY`` off, never below 0), so a policy over budget on more than one call in ``BUDGET_DECAY + 1``
accumulates whether or not its slow calls are consecutive. When the count reaches ``budget_steps`` the
engine default runs and the policy is consulted only every ``RETRY_INTERVAL`` steps; a retry within the
budget makes it decide again, from just below the limit (a slow policy must not slow every step).
"""

from __future__ import annotations

import logging

__all__ = ["BUDGET_DECAY", "RETRY_INTERVAL", "DecideBudget"]

log = logging.getLogger("specpolicy.adapter")

#: While over budget, the policy is consulted once per this many steps to see whether it has recovered.
RETRY_INTERVAL = 256
#: Calls within the budget that cancel one over-budget call in the decayed count (``_over_budget``): a
#: policy slow on more than one call in ``BUDGET_DECAY + 1`` is caught, an occasional pause is not.
BUDGET_DECAY = 4


class DecideBudget:
    """The budget half of ``StepController``: its counts, and the two log lines of a policy that trips
    and recovers. The controller's ``decide`` times each call and calls in here."""

    rank: int
    policy_name: str
    step: int
    default_steps: int
    decide_budget_s: float
    budget_steps: int
    #: decide() calls over decide_budget_s
    over_budget: int
    #: the decayed count of over-budget calls, in units of 1 / BUDGET_DECAY
    _slow: int
    _tripped: bool
    _recovered: bool

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
