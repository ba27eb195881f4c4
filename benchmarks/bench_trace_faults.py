"""Trace records offered / written / dropped (by cause) under each fault the trace writer must survive.

Usage (from the repository root)::

    python benchmarks/bench_trace_faults.py                 # 5000 records per fault, batch 256
    python benchmarks/bench_trace_faults.py --records 20000 --batch 64

Faults are injected into ``specpolicy.runtime.trace_writer``'s ``os`` calls: a disk that fills up after a
number of bytes, a read-only directory, a write that stalls until after ``close()`` gave up, a writer that
cannot keep up (its I/O lock held while the records arrive), and records with unserialisable fields. For each
the table shows offered, written, dropped by cause, the records actually in the file, and whether
``written + dropped == offered`` and the file agrees. tests/test_adapter_trace_faults.py runs the same faults.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from specpolicy.runtime import trace_writer as tw
from specpolicy.runtime.decision import StepRecord
from specpolicy.runtime.trace_writer import TraceWriter
from specpolicy.stats import StepStats
from specpolicy.trace import read_trace

_real_write = os.write
_real_open = os.open


@contextlib.contextmanager
def full_disk(room: int) -> Iterator[None]:
    """os.write takes ``room`` more bytes in all (the last write partially), then fails with ENOSPC."""
    left = [room]

    def write(fd: int, data: bytes) -> int:
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = _real_write(fd, data[: left[0]])
        left[0] -= n
        return n

    tw.os.write = write  # type: ignore[assignment]
    try:
        yield
    finally:
        tw.os.write = _real_write


@contextlib.contextmanager
def read_only() -> Iterator[None]:
    def refuse(*a: Any, **k: Any) -> int:
        raise OSError(errno.EROFS, "Read-only file system")

    tw.os.open = refuse  # type: ignore[assignment]
    try:
        yield
    finally:
        tw.os.open = _real_open


@contextlib.contextmanager
def stalled_write(release: threading.Event, entered: threading.Event) -> Iterator[None]:
    """Record writes block until ``release`` is set (``entered`` is set when the first one blocks)."""

    def write(fd: int, data: bytes) -> int:
        if data.startswith(b'{"step"'):
            entered.set()
            release.wait(60)
        return _real_write(fd, data)

    tw.os.write = write  # type: ignore[assignment]
    try:
        yield
    finally:
        tw.os.write = _real_write


class _Opaque:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def feed(w: TraceWriter, n: int, batch: int = 4, start: int = 1, bad_every: int = 0) -> None:
    """``n`` steps as an engine reports them; every ``bad_every``-th one with unserialisable fields (NaN,
    inf, an object) and every other of those with an unusable batch size."""
    acc = [1] * batch
    for step in range(start, start + n):
        if bad_every and step % bad_every == 0:
            b: Any = _Opaque() if step % (2 * bad_every) == 0 else batch
            stats = StepStats.fast(b, 0, math.nan, 2, [1, _Opaque()], None, math.inf)
        else:
            stats = StepStats.fast(batch, 0, 100.0, 2, acc, None, 0.01)
        w.on_record(StepRecord(step, stats, 2, 1e-6, False, time.perf_counter(), 0.01))


def on_disk(path: Path) -> int:
    return len(list(read_trace(path))) if path.exists() else 0


def _scenario(name: str, records: int, batch: int, tmp: Path) -> dict[str, Any]:
    path = tmp / f"{name}.jsonl"
    w: TraceWriter
    if name == "healthy":
        w = TraceWriter(path)
        feed(w, records, batch)
        w.close()
    elif name == "full disk":
        with full_disk(room=records * batch):  # about a third of what the records need
            w = TraceWriter(path, flush_interval_s=0.01)
            feed(w, records, batch)
            w.close()
    elif name == "read-only directory":
        with read_only():
            w = TraceWriter(path, flush_interval_s=0.01)
            feed(w, records, batch)
            w.close()
    elif name == "bad records (1 in 100)":
        w = TraceWriter(path)
        feed(w, records, batch, bad_every=100)
        w.close()
    elif name == "writer stalled (queue full)":
        w = TraceWriter(path, flush_interval_s=0.01, max_pending_bytes=4 * 2**20)
        with w._io_lock:
            feed(w, records, batch)
        w.close()
    elif name == "write never returns (close times out)":
        release, entered = threading.Event(), threading.Event()
        with stalled_write(release, entered):
            w = TraceWriter(path, flush_interval_s=0.01, close_timeout_s=0.5)
            feed(w, records // 2, batch)
            entered.wait(10)
            feed(w, records - records // 2, batch, start=records // 2 + 1)
            w.close()
            release.set()
            w._thread.join(10)
    else:
        raise ValueError(name)
    return {
        "offered": w.offered,
        "written": w.written,
        "dropped": w.dropped,
        "drops": {c: n for c, n in w.drops.items() if n},
        "on_disk": on_disk(path),
    }


SCENARIOS = (
    "healthy",
    "full disk",
    "read-only directory",
    "bad records (1 in 100)",
    "writer stalled (queue full)",
    "write never returns (close times out)",
)


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args(argv)
    out("| fault | offered | written | dropped (by cause) | in the file | exact |")
    out("|---|---:|---:|---|---:|---|")
    ok = True
    with tempfile.TemporaryDirectory() as d:
        for name in SCENARIOS:
            r = _scenario(name, args.records, args.batch, Path(d))
            counted = r["written"] + r["dropped"] == r["offered"] == args.records
            exact = counted and r["on_disk"] == r["written"]
            ok &= exact
            causes = ", ".join(f"{c} {n}" for c, n in r["drops"].items()) or "-"
            out(
                f"| {name} | {r['offered']} | {r['written']} | {r['dropped']} ({causes}) | {r['on_disk']} | "
                f"{'yes' if exact else 'NO'} |"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
