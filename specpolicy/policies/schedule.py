"""schedule: a hand-written table from batch size to draft depth.

``table`` is vLLM's ``num_speculative_tokens_per_batch_size`` form: ``[min_batch, max_batch, num_steps]``
entries with inclusive ranges, ascending, contiguous (no gaps, no overlaps), 0 meaning off. Batch sizes past
the last entry keep the last entry's depth, as vLLM carries its last entry. TensorRT-LLM's
``draft_len_schedule`` dict ``{max_batch: num_steps}`` is accepted too (key ``draft_len_schedule`` instead
of ``table``, or ``ScheduleConfig.from_draft_len_schedule``): each key closes a range that starts after the
previous key, and batch sizes above the largest key are off, as in TensorRT-LLM. decide() is one list index:
the table is expanded to a dense lookup at construction.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from ..clean import clean_count
from ..errors import FieldError, short_repr
from ..mode import MAX_NUM_STEPS, SpecMode
from ..policy import PolicyConfig, PolicyEntry
from ..snapshot import SlotsState
from ..stats import StepStats

__all__ = ["ScheduleConfig", "SchedulePolicy", "ENTRY", "table_from_draft_len_schedule"]

#: Dense lookups cover batch sizes up to this; larger table ends use a bisect (still O(log n)).
_DENSE_LIMIT = 1 << 16


def table_from_draft_len_schedule(schedule: Mapping[Any, Any]) -> list[list[int]]:
    """Convert TensorRT-LLM's ``{max_batch: num_steps}`` into table entries.

    ``{4: 4, 8: 2, 32: 1}`` becomes ``[[1, 4, 4], [5, 8, 2], [9, 32, 1], [33, 33, 0]]``: batch 1-4 -> 4,
    5-8 -> 2, 9-32 -> 1, 33 and above -> off (the last entry carries past the table).
    """
    if not isinstance(schedule, Mapping) or not schedule:
        raise ValueError("draft_len_schedule must be a non-empty mapping {max_batch: num_steps}")
    items: list[tuple[int, int]] = []
    for key, value in schedule.items():
        try:
            bs = int(key)
        except (TypeError, ValueError):
            raise ValueError(
                f"draft_len_schedule key {short_repr(key)} is not an integer batch size"
            ) from None
        if bs < 1 or str(bs) != str(key).strip():
            raise ValueError(f"draft_len_schedule key {short_repr(key)} must be an integer batch size >= 1")
        if type(value) is not int or not 0 <= value <= MAX_NUM_STEPS:
            raise ValueError(
                f"draft_len_schedule[{short_repr(key)}] = {short_repr(value)}: num_steps must be an int in "
                f"[0, {MAX_NUM_STEPS}]"
            )
        items.append((bs, value))
    items.sort()
    table: list[list[int]] = []
    start = 1
    for bs, k in items:
        table.append([start, bs, k])
        start = bs + 1
    if items[-1][1] != 0:
        table.append([start, start, 0])
    return table


class ScheduleConfig(PolicyConfig):
    """Draft depth looked up from a batch-size table (vLLM / TensorRT-LLM schedule forms)."""

    name: Literal["schedule"] = "schedule"
    table: tuple[tuple[int, int, int], ...] = Field(
        ((1, 7, 3), (8, 31, 2), (32, 63, 1), (64, 64, 0)),
        min_length=1,
        description="[min_batch, max_batch, num_steps] inclusive, ascending, contiguous; 0 = off; "
        "the last entry also covers larger batches (or give TensorRT-LLM's draft_len_schedule instead)",
    )

    @model_validator(mode="before")
    @classmethod
    def _accept_draft_len_schedule(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "draft_len_schedule" in data:
            data = dict(data)
            if "table" in data:
                raise FieldError("draft_len_schedule", "give either table or draft_len_schedule, not both")
            try:
                data["table"] = table_from_draft_len_schedule(data.pop("draft_len_schedule"))
            except ValueError as exc:
                raise FieldError("draft_len_schedule", str(exc)) from None
        return data

    @field_validator("table")
    @classmethod
    def _contiguous(cls, table: tuple[tuple[int, int, int], ...]) -> tuple[tuple[int, int, int], ...]:
        for i, (lo, hi, k) in enumerate(table):
            if lo < 0:
                raise ValueError(f"entry {i} {list(table[i])}: min_batch must be >= 0")
            if not 0 <= k <= MAX_NUM_STEPS:
                raise ValueError(f"entry {i} {list(table[i])}: num_steps must be in [0, {MAX_NUM_STEPS}]")
            if lo > hi:
                raise ValueError(f"entry {i} {list(table[i])}: min_batch {lo} > max_batch {hi}")
        first = table[0]
        if first[0] > 1:
            raise ValueError(f"entry 0 {list(first)}: the first range must start at batch 0 or 1")
        for i in range(1, len(table)):
            prev, cur = table[i - 1], table[i]
            if cur[0] <= prev[1]:
                what = "is out of order with" if cur[0] < prev[0] else "overlaps"
                raise ValueError(f"entry {i} {list(cur)} {what} entry {i - 1} {list(prev)}")
            if cur[0] != prev[1] + 1:
                raise ValueError(
                    f"entry {i} {list(cur)} leaves a gap after entry {i - 1} {list(prev)}: batch sizes "
                    f"{prev[1] + 1}..{cur[0] - 1} are not covered"
                )
        return table

    @classmethod
    def from_draft_len_schedule(cls, schedule: Mapping[Any, Any]) -> ScheduleConfig:
        """Build from TensorRT-LLM's ``draft_len_schedule`` dict (see ``table_from_draft_len_schedule``)."""
        return cls(draft_len_schedule=schedule)  # type: ignore[call-arg]

    def depth_for(self, batch_size: int) -> int:
        """The table's depth for a batch size (reference lookup; the policy uses a dense copy)."""
        for lo, hi, k in self.table:
            if lo <= batch_size <= hi:
                return k
        return self.table[0][2] if batch_size < self.table[0][0] else self.table[-1][2]

    def candidate_steps(self) -> tuple[int, ...]:
        return tuple(sorted({k for _, _, k in self.table}))


class SchedulePolicy(SlotsState):
    """Dense lookup ``batch_size -> SpecMode``; the last valid answer is repeated on invalid input."""

    __slots__ = ("config", "_dense", "_size", "_table_end", "_tail", "_starts", "_modes", "_first", "_last")
    _STATE_NAME = "schedule"
    _STATE: ClassVar[Mapping[str, tuple[type, ...]]] = {"_last": (SpecMode,)}

    def __init__(self, config: ScheduleConfig) -> None:
        self.config = config
        table = config.table
        self._starts = [lo for lo, _, _ in table]
        self._modes = [SpecMode.of(k) for _, _, k in table]
        end = min(table[-1][1], _DENSE_LIMIT)
        dense = [self._modes[0]] * table[0][0]  # batch 0 when the table starts at 1
        for (lo, hi, _), mode in zip(table, self._modes, strict=True):
            if lo > end:
                break
            dense.extend([mode] * (min(hi, end) - lo + 1))
        self._dense = dense
        self._size = len(dense)
        self._table_end = table[-1][1]
        self._tail = self._modes[-1]
        self._first = self._modes[0]
        self._last = self._first

    def _lookup(self, b: int) -> SpecMode:
        i = bisect.bisect_right(self._starts, b) - 1
        return self._modes[i if i >= 0 else 0]

    def decide(self, stats: StepStats) -> SpecMode:
        b = stats[0]
        if type(b) is int and b >= 0:
            mode = self._dense[b] if b < self._size else self._beyond(b)
            self._last = mode
            return mode
        c = clean_count(b)
        if c is None:
            return self._last
        return self.decide(StepStats.fast(c))

    def _beyond(self, b: int) -> SpecMode:
        """Past the dense lookup: the last entry, or a bisect when the table itself extends further."""
        return self._tail if b > self._table_end else self._lookup(b)

    def reset(self) -> None:
        self._last = self._first


ENTRY = PolicyEntry("schedule", ScheduleConfig, SchedulePolicy)
