"""StepStats: what an engine adapter knows when it asks a policy for the next step's mode.

Built on every decode step, so it is a tuple subclass: construction is one ``tuple.__new__``. The public
constructor validates the scalar fields and raises a ``ValueError`` naming the field; ``StepStats.fast`` skips
validation for adapters that already hold well-formed values (policies never trust either: decide() treats
NaN, negative or missing values as missing data).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["StepStats"]


class _Fields(NamedTuple):
    batch_size: int
    num_waiting: int = 0
    mean_seq_len: float | None = None
    last_num_steps: int = 0
    accepted_draft_tokens: Sequence[int] | None = None
    drafted_tokens: Sequence[int] | None = None
    last_step_time_s: float | None = None


_new = tuple.__new__


class StepStats(_Fields):
    """Inputs to one ``Policy.decide`` call.

    Attributes:
        batch_size: requests in decode in the upcoming step (prefills joining it are not counted).
        num_waiting: requests queued, not yet admitted.
        mean_seq_len: mean context length of the decode batch, or None.
        last_num_steps: draft depth actually executed by the most recent step whose result is known
            (0 = that step did not speculate). With overlap scheduling that step can be one older than the
            previous decision; the fields below always describe that same step.
        accepted_draft_tokens: per request, accepted draft tokens of that step, NOT counting the bonus
            token, each in [0, drafted]. None when last_num_steps is 0 or nothing is known: a step without
            speculation is never "zero acceptance".
        drafted_tokens: per request, drafts actually proposed when the engine trims them; None means
            ``last_num_steps`` for every request.
        last_step_time_s: that step's measured wall time in seconds, or None.

    "Acceptance length" everywhere in specpolicy means 1 + accepted drafts (the bonus token counted).
    """

    __slots__ = ()

    def __new__(
        cls,
        batch_size: int,
        num_waiting: int = 0,
        mean_seq_len: float | None = None,
        last_num_steps: int = 0,
        accepted_draft_tokens: Sequence[int] | None = None,
        drafted_tokens: Sequence[int] | None = None,
        last_step_time_s: float | None = None,
    ) -> StepStats:
        if type(batch_size) is not int or batch_size < 0:
            raise ValueError(f"StepStats.batch_size must be an int >= 0, got {batch_size!r}")
        if type(num_waiting) is not int or num_waiting < 0:
            raise ValueError(f"StepStats.num_waiting must be an int >= 0, got {num_waiting!r}")
        if mean_seq_len is not None and not (mean_seq_len >= 0 and math.isfinite(mean_seq_len)):
            raise ValueError(f"StepStats.mean_seq_len must be a finite float >= 0 or None, got {mean_seq_len!r}")
        if type(last_num_steps) is not int or last_num_steps < 0:
            raise ValueError(f"StepStats.last_num_steps must be an int >= 0, got {last_num_steps!r}")
        if last_step_time_s is not None and not (last_step_time_s >= 0 and math.isfinite(last_step_time_s)):
            raise ValueError(
                f"StepStats.last_step_time_s must be a finite float >= 0 or None, got {last_step_time_s!r}"
            )
        if accepted_draft_tokens is not None and last_num_steps == 0:
            raise ValueError(
                "StepStats.accepted_draft_tokens must be None when last_num_steps is 0 (a step without "
                "speculation has no acceptance data)"
            )
        if drafted_tokens is not None and accepted_draft_tokens is not None:
            if len(drafted_tokens) != len(accepted_draft_tokens):
                raise ValueError(
                    "StepStats.drafted_tokens must have one entry per request of accepted_draft_tokens "
                    f"({len(drafted_tokens)} != {len(accepted_draft_tokens)})"
                )
        return _new(
            cls,
            (
                batch_size,
                num_waiting,
                mean_seq_len,
                last_num_steps,
                accepted_draft_tokens,
                drafted_tokens,
                last_step_time_s,
            ),
        )

    @classmethod
    def fast(
        cls,
        batch_size: int,
        num_waiting: int = 0,
        mean_seq_len: float | None = None,
        last_num_steps: int = 0,
        accepted_draft_tokens: Sequence[int] | None = None,
        drafted_tokens: Sequence[int] | None = None,
        last_step_time_s: float | None = None,
    ) -> StepStats:
        """Build without validation (the adapters' per-step path). Policies stay robust to bad values."""
        return _new(
            cls,
            (
                batch_size,
                num_waiting,
                mean_seq_len,
                last_num_steps,
                accepted_draft_tokens,
                drafted_tokens,
                last_step_time_s,
            ),
        )

    @property
    def has_acceptance(self) -> bool:
        """True when the fields describe a step that speculated and reported its acceptance."""
        return self.last_num_steps > 0 and bool(self.accepted_draft_tokens)

    def mean_acceptance_length(self) -> float | None:
        """1 + mean accepted drafts over requests of the described step, or None when unknown. O(batch)."""
        acc = self.accepted_draft_tokens
        if not acc or not self.last_num_steps > 0:
            return None
        try:
            value = 1.0 + sum(acc) / len(acc)
        except TypeError:
            return None
        return value if math.isfinite(value) else None
