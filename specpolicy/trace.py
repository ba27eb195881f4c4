"""The JSONL step trace: one JSON object per executed engine step.

Engine adapters write it (buffered, off the hot path); ``specpolicy simulate`` replays it and
``specpolicy profile fit`` fits a step-cost profile from it. Each record describes ONE executed step: the
StepStats the policy saw before it, the depth the step ran with, and that step's measured wall time (written
once known, so a record is emitted one step late). Lines whose ``kind`` is ``"header"`` carry run metadata
(engine, version, worker path, policy config); ``"policy_swap"`` and ``"policy_swap_refused"`` lines say
that the policy changed (or a change was refused) before decision ``step``. ``read_trace`` skips both.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path
from typing import Any

from .clean import MAX_COUNT
from .errors import short_repr
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
    hints: Sequence[int] | None = None
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
        """The record of one parsed trace line; ValueError naming the first field of the wrong type or
        range, so every reader (the profile fit, the replay) reports a bad line in one line."""
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        missing = [k for k in ("step", "batch_size", "num_steps") if k not in known]
        if missing:
            raise ValueError(f"trace record lacks required field(s) {', '.join(missing)}")
        for key, v in known.items():
            problem = _field_problem(key, v)
            if problem:
                raise ValueError(f"trace record field {key} must be {problem}, got {short_repr(v)}")
        return cls(**known)


#: What each field of a trace line must hold (besides null, where the field allows it).
_COUNTS = ("step", "batch_size", "num_steps", "num_waiting", "last_num_steps", "rank")
_OPTIONAL_COUNTS = ("last_batch_size", "last_decided_steps")
_TIMES = ("step_time_s", "mean_seq_len", "last_step_time_s", "mean_accepted", "last_mean_seq_len")
_OPTIONAL_NUMBERS = ("ts", "decide_us")


def _is_count(v: object) -> bool:
    return type(v) is int and 0 <= v <= MAX_COUNT


def _is_number(v: object) -> bool:
    return type(v) in (int, float) and math.isfinite(v)  # type: ignore[arg-type]


def _field_problem(key: str, v: object) -> str | None:
    """What field ``key`` of a trace line must be, when ``v`` is not that; None when it is."""
    if key in _COUNTS:
        return None if _is_count(v) else "an integer in [0, 2**53)"
    if key == "fallback":
        return None if type(v) is bool else "true or false"
    if key == "extra":
        return None if isinstance(v, dict) else "an object"
    if v is None:
        return None
    if key in _OPTIONAL_COUNTS:
        return None if _is_count(v) else "an integer in [0, 2**53) or null"
    if key in _TIMES:
        return None if _is_number(v) and v >= 0 else "a finite number >= 0 or null"  # type: ignore[operator]
    if key in _OPTIONAL_NUMBERS:
        return None if _is_number(v) else "a finite number or null"
    if key in _LISTS:
        ok = isinstance(v, list) and all(_is_number(x) for x in v)
        return None if ok else "a list of numbers or null"
    return None  # the request ids: any JSON value, never read


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
_LISTS = ("accepted_draft_tokens", "drafted_tokens", "hints")
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
    with open(path, "rb") as head:
        gz = head.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rb") if gz else open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not UTF-8 text ({exc.reason})") from None
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except RecursionError:
                raise ValueError(f"{path}:{lineno}: nested too deep") from None
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not JSON: {exc}") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{lineno}: each line must be a JSON object")
            yield lineno, obj


def read_trace(path: str | Path) -> Iterator[TraceRecord]:
    """Yield the step records of a trace file (rotated files are read one at a time by the caller); lines
    with a ``kind`` (headers, policy changes) are not step records."""
    for lineno, obj in iter_trace_lines(path):
        if "kind" in obj:
            continue
        try:
            yield TraceRecord.from_dict(obj)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{lineno}: {exc}") from None
