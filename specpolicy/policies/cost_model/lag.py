"""Which decision a step time describes, inferred from the depths reported back (cost_model's feedback lag).

StepStats describes the most recent step whose result is known: the previous decision on non-overlap engines,
the one before on overlap scheduling (SGLang's v2 worker, vLLM async). The batch size of that step is not in
StepStats, so the policy remembers its last two decisions (batch, depth, context) and learns which of them the
feedback describes: each step where the two decided depths differ, the depth reported back votes for one.

This is the only place that guesses; once StepStats says which step its outcome fields describe, it goes.
"""

from __future__ import annotations

__all__ = ["Decided", "FeedbackLag"]

#: (batch size, depth, context length) of one decision; the context is read through the policy's check when
#: used.
Decided = tuple[int, int, float | None]

#: The vote saturates here, so a change of lag (another engine mode) is followed after a few steps.
_MAX_VOTE = 8


class FeedbackLag:
    """The last two decisions and a saturating vote on which of them the feedback describes."""

    __slots__ = ("last", "before", "vote")

    def __init__(self) -> None:
        self.last: Decided = (1, -1, None)
        self.before: Decided = (1, -1, None)
        #: > 0: the feedback describes the last decision (lag 1); < 0: the one before (lag 2).
        self.vote = 0

    def described(self, reported_depth: int) -> Decided:
        """The decision a step with this reported depth most likely was (call once per fresh step time)."""
        last, before = self.last, self.before
        if last[1] != before[1]:  # the two candidate steps differ: the reported depth says which
            if reported_depth == last[1]:
                if self.vote < _MAX_VOTE:
                    self.vote += 1
            elif reported_depth == before[1] and self.vote > -_MAX_VOTE:
                self.vote -= 1
        return before if self.vote < 0 else last
