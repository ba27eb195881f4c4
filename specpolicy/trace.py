"""The JSONL step trace: one JSON object per executed engine step.

Engine adapters write it (buffered, off the hot path); ``specpolicy simulate`` replays it and
``specpolicy profile fit`` fits a step-cost profile from it. Each record describes ONE executed step: the
StepStats the policy saw before it, the depth the step ran with, and that step's measured wall time (written
once known, so a record is emitted one step late). Lines whose ``kind`` is ``"header"`` carry run metadata
(engine, version, worker path, policy config) and are skipped by ``read_trace``.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path
from typing import Any

from .stats import StepStats

__all__ = ["TRACE_FORMAT", "TraceRecord", "dumps_record", "iter_trace_lines", "read_trace", "record_dict"]

TRACE_FORMAT = "specpolicy-trace/1"


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One executed step.

    The StepStats fields (``StepStats._fields``, checked against this class at import) are those given to
    decide() before the step; ``num_steps`` is the depth the step actually ran with (after fallbacks);
    ``step_time_s`` its measured wall time (None if unknown); ``rank`` the tensor/data-parallel rank that
    wrote it; ``decide_us`` the decide() call's own time; ``fallback`` is true when the policy failed and
    the engine default ran instead.
    """

    step: int
    batch_size: int
    num_steps: int
    step_time_s: float | None = None
    num_waiting: int = 0
    mean_seq_len: float | None = None
    last_num_steps: int = 0
    accepted_draft_tokens: Sequence[int] | None = None
    drafted_tokens: Sequence[int] | None = None
    last_step_time_s: float | None = None
    mean_accepted: float | None = None
    last_batch_size: int | None = None
    last_decided_steps: int | None = None
    last_mean_seq_len: float | None = None
    last_request_ids: Sequence[Any] | None = None
    request_ids: Sequence[Any] | None = None
    rank: int = 0
    ts: float | None = None
    decide_us: float | None = None
    fallback: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_stats(
        cls, step: int, stats: StepStats, num_steps: int, step_time_s: float | None, **kw: Any
    ) -> TraceRecord:
        d = record_dict(step, stats, num_steps, step_time_s, **kw)
        for name in _LISTS:
            if d[name] is not None:
                d[name] = list(d[name])
        return cls(**d)

    def stats(self) -> StepStats:
        """The StepStats the policy saw before this step."""
        return StepStats.fast(*[getattr(self, name) for name in _STATS])

    def to_json(self) -> str:
        d = asdict(self)
        if not d["extra"]:
            del d["extra"]
        return dumps_record(d)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TraceRecord:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        missing = [k for k in ("step", "batch_size", "num_steps") if k not in known]
        if missing:
            raise ValueError(f"trace record lacks required field(s) {', '.join(missing)}")
        for key in ("step_time_s", "mean_seq_len", "last_step_time_s", "mean_accepted", "last_mean_seq_len"):
            v = known.get(key)
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"trace record field {key} must be a finite number >= 0 or null, got {v!r}")
        return cls(**known)


def dumps_record(d: dict[str, Any]) -> str:
    """One trace line's JSON (compact, no NaN / inf, numpy arrays and scalars as plain JSON)."""
    return json.dumps(d, separators=(",", ":"), allow_nan=False, default=_default)


def record_dict(
    step: int, stats: StepStats, num_steps: int, step_time_s: float | None, **kw: Any
) -> dict[str, Any]:
    """The fields of ``TraceRecord.from_stats(...)`` in its order, without building the record or copying
    the per-request lists: what the trace writer serialises on its thread (fewer allocations, less GIL)."""
    d: dict[str, Any] = {
        "step": step,
        "batch_size": stats[0],
        "num_steps": num_steps,
        "step_time_s": step_time_s,
    }
    d.update(zip(_STATS_AFTER_BATCH, stats[1:], strict=False))  # a malformed stats: what it has
    for name in _NOT_WRITTEN:
        d[name] = None
    d.update(kw)
    return d


#: The StepStats fields, in order; a record declares each with the same default (checked below).
_STATS = StepStats._fields
_STATS_AFTER_BATCH = _STATS[1:]
#: Per-request fields, copied into lists when a record is built from live stats.
_LISTS = ("accepted_draft_tokens", "drafted_tokens")
#: Fields the trace leaves out (null): request ids would make each line about 30 times longer (a 32-character
#: id per request, twice), and the trace's readers (the profile fit, the replay) do not need them.
_NOT_WRITTEN = ("last_request_ids", "request_ids")


def _check_fields() -> None:
    """TraceRecord must carry every StepStats field with its default: one field list, enforced."""
    declared = TraceRecord.__dataclass_fields__
    for name in _STATS:
        f = declared.get(name)
        default = StepStats._field_defaults.get(name, MISSING)
        if f is None or (name != "batch_size" and f.default != default):
            raise TypeError(f"TraceRecord must declare StepStats field {name!r} with default {default!r}")


_check_fields()


def _default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def iter_trace_lines(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, parsed object) for every non-empty line, headers included; a gzip file (by its
    magic bytes, whatever its name) is read through gzip."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not JSON: {exc}") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{lineno}: each line must be a JSON object")
            yield lineno, obj


def read_trace(path: str | Path) -> Iterator[TraceRecord]:
    """Yield the step records of a trace file (rotated files are read one at a time by the caller)."""
    for lineno, obj in iter_trace_lines(path):
        if obj.get("kind") == "header":
            continue
        try:
            yield TraceRecord.from_dict(obj)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{lineno}: {exc}") from None
