"""The trace file itself: which file a rank writes, whether a file may be written into, one record's line.

The writer (``trace_writer.TraceWriter``) owns the thread, the queue and the accounting; this module holds
what it decides per file and per record, without state: the rank's path, the header check that keeps the
writer out of files it did not create, and the JSON line of a record (its unserialisable fields written as
null and named, or None when a required one is among them).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from ..errors import short_str
from ..stats import StepStats
from ..trace import dumps_record, record_dict

__all__ = ["HEAD_BYTES", "REQUIRED", "Partial", "encode", "is_header", "not_a_trace", "os_error", "rank_path"]


def rank_path(path: str | os.PathLike[str], rank: int) -> Path:
    """The file a rank writes: ``{rank}`` in the path is substituted; otherwise ranks > 0 get ``.rankN``."""
    text = os.fspath(path)
    if "{rank}" in text:
        return Path(text.replace("{rank}", str(rank)))
    p = Path(text)
    if rank == 0:
        return p
    return p.with_name(f"{p.stem}.rank{rank}{p.suffix}")


#: Fields a written record cannot do without (read_trace requires them).
REQUIRED = ("step", "batch_size", "num_steps")
#: Bytes of an existing file read to find its first line (a trace header is far shorter).
HEAD_BYTES = 1 << 16


def is_header(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) starts with a specpolicy trace header line."""
    line = head.split(b"\n", 1)[0]
    try:
        first = json.loads(line)
    except ValueError:
        return False
    return (
        isinstance(first, dict)
        and first.get("kind") == "header"
        and str(first.get("format", "")).startswith("specpolicy-trace/")
    )


def not_a_trace(path: Path) -> str | None:
    """Why the trace writer must not write into ``path``: it exists, is not empty and does not start with a
    specpolicy trace header (or cannot be read); None when it is absent, empty or a trace."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"the step trace path {path} cannot be read ({os_error(exc)}); the trace is off"
    if not head or is_header(head):
        return None
    return (
        f"the step trace path {path} holds a file that is not a specpolicy trace; it is left as it is and "
        "nothing is traced: remove it or choose another trace path"
    )


class Partial(OSError):
    """A write that stopped part-way: ``lines`` did not land (their count is what gets dropped)."""

    def __init__(self, lines: list[bytes], cause: OSError) -> None:
        super().__init__(cause.errno or errno.EIO, os_error(cause))
        self.lines = lines


def os_error(exc: OSError) -> str:
    return exc.strerror or short_str(exc, 80)


def encode(
    step: int,
    stats: StepStats,
    k: int,
    t: float | None,
    rank: int,
    ts: float,
    decide_s: float,
    fallback: bool,
) -> bytes | None:
    """The record's JSON line; a field that cannot be serialised is written as null and named in
    ``extra.invalid``; None when a required field is among them (the record is then dropped)."""
    try:
        d = record_dict(
            step,
            stats,
            k,
            t,
            rank=rank,
            ts=round(ts, 6),
            decide_us=round(decide_s * 1e6, 3),
            fallback=fallback,
        )
    except Exception:  # noqa: BLE001 - stats is not even a tuple of 8
        return None
    try:
        return (dumps_record(d) + "\n").encode()
    except Exception:  # noqa: BLE001 - NaN, inf or an odd type in some field: find which
        pass
    bad = []
    for key, value in d.items():
        try:
            dumps_record({key: value})
        except Exception:  # noqa: BLE001
            bad.append(key)
            d[key] = None
    if any(key in REQUIRED for key in bad):
        return None
    d["extra"] = {"invalid": bad}
    try:
        return (dumps_record(d) + "\n").encode()
    except Exception:  # noqa: BLE001
        return None
