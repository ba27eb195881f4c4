"""Where the step path's values sit in a StepStats, found by field name.

The controller builds one StepStats per step from three parts: the engine's load now, the outcome of the
latest decision whose feedback came, and the coming batch's request ids and hints. It keeps them in its own
order (``LOAD`` + ``OUTCOME`` + ``BATCH``, then any other field at its default) and puts them in StepStats'
order with one C-level ``itemgetter`` call, which it skips while the two orders agree (as they do now). A
field added to StepStats anywhere therefore moves nothing: its default fills it, and every value still goes
to the field of its name.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

__all__ = ["BATCH", "LOAD", "OUTCOME", "StatsLayout"]

#: What the engine knows of the coming step, in the order ``next_stats`` takes it.
LOAD = ("batch_size", "num_waiting", "mean_seq_len")
#: What one decision's outcome sets, in the order the controller keeps it (``StepController.known``).
OUTCOME = (
    "last_num_steps",
    "accepted_draft_tokens",
    "drafted_tokens",
    "last_step_time_s",
    "mean_accepted",
    "last_batch_size",
    "last_decided_steps",
    "last_mean_seq_len",
    "last_request_ids",
)
#: The coming batch's own ids and hints.
BATCH = ("request_ids", "hints")


class StatsLayout:
    """The controller's order of a StepStats class's fields and the way back to the class's own.

    Attributes:
        nothing_known: the ``OUTCOME`` fields' defaults (no outcome known yet).
        rest: the defaults of the class's other fields, which the controller does not set.
        arrange: the controller's order (``LOAD + OUTCOME + BATCH`` + the others) to the class's, or None
            where they are one order.
        index: a field's position in the class.
    """

    __slots__ = ("cls", "nothing_known", "rest", "arrange", "index")

    def __init__(self, cls: Any) -> None:
        fields: tuple[str, ...] = cls._fields
        ours = LOAD + OUTCOME + BATCH
        missing = [f for f in ours if f not in fields]
        if missing:
            raise TypeError(f"{cls.__name__} lacks the field(s) {missing} the step path sets")
        others = tuple(f for f in fields if f not in ours)
        undefaulted = [f for f in others if f not in cls._field_defaults]
        if undefaulted:
            raise TypeError(f"{cls.__name__} field(s) {undefaulted} need a default (the step path sets none)")
        self.cls = cls
        self.nothing_known: tuple[Any, ...] = tuple(cls._field_defaults[f] for f in OUTCOME)
        self.rest: tuple[Any, ...] = tuple(cls._field_defaults[f] for f in others)
        order = ours + others
        where = tuple(order.index(f) for f in fields)
        self.arrange: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = (
            None if where == tuple(range(len(fields))) else itemgetter(*where)
        )
        self.index: dict[str, int] = {f: i for i, f in enumerate(fields)}
