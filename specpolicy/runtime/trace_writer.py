"""TraceWriter: a StepObserver that writes the JSONL step trace without ever blocking the engine step.

It receives each step's record once, complete (the controller pairs decisions with their outcomes). The step
path only appends the record to a bounded deque (a few hundred nanoseconds); a daemon thread turns
tuples into JSON lines, writes them and rotates the file (``FILE`` -> ``FILE.1`` -> ... ``FILE.N``) when it
passes ``max_bytes``. Every file starts with a header line (engine, version, worker path, policy); ``note``
adds an event line among the records (a policy change, ``runtime.control_file``).

Accounting is exact: every record offered is either written (all its bytes reached the file) or dropped with
a cause (``DROP_CAUSES``), so after ``close()`` ``written + dropped == offered``; the first drop of each cause
is logged at once, and ``close()`` logs one summary line when anything was dropped.

- The queue is bounded in records (``max_pending``) and in estimated memory (``max_pending_bytes``): a stalled
  disk costs dropped records, never unbounded memory or a slower step.
- A record that cannot be serialised keeps its valid fields (the bad ones written as null and named in
  ``extra.invalid``); only when step, batch size or depth are unusable is it dropped, alone.
- The file itself (``trace_disk``) holds exactly the lines counted as written.
- After ``fork()`` the child's copy of the writer is closed and its queue emptied (``os.register_at_fork``):
  the trace belongs to the parent, and the parent's queued records are never written twice. The child's
  own records count as ``after_close``.
- ``close()`` never raises and returns within ``close_timeout_s``: a thread stuck in a write is abandoned
  (it is a daemon) and what it still held is counted as dropped; should that write return later, the thread
  cuts the file back to its size before it, so the file still holds exactly the records counted as written.
- The writer thread releases the GIL every ``_YIELD_S`` of serialising work: a thread holding it keeps the
  engine thread waiting up to the interpreter's switch interval (5 ms), which is what made the step path's
  tail latency with the trace on. It wakes every ``flush_interval_s`` (0.1 s): records queued longer survive
  into the collector's oldest generation and make its full collections, run on the engine thread, longer.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from typing import Any

from ..errors import short_repr, short_str
from ..stats import StepStats
from ..trace import TRACE_FORMAT
from .decision import StepRecord
from .trace_disk import TraceDisk
from .trace_file import encode, not_a_trace, rank_path

__all__ = ["DROP_CAUSES", "TraceWriter"]

log = logging.getLogger("specpolicy.trace")

# (step, stats, num_steps, decide_s, fallback, wall-clock ts of the decision, step time)
_Pending = tuple[int, StepStats, int, float, bool, float, float | None]

#: Why a record was not written: the queue was full (the writer fell behind or the disk stalled), the write
#: failed (full disk, read-only directory), the record could not be serialised, it arrived after close(), or
#: close() timed out with the record still queued or in a stuck write.
DROP_CAUSES = ("queue_full", "write_error", "bad_record", "after_close", "close_timeout")

#: Serialising work between two GIL releases of the writer thread, and the release: a real sleep (a
#: ``sleep(0)`` returns before a waiting thread is scheduled, and the writer takes the GIL straight back).
_YIELD_S = 2e-4
_YIELD_SLEEP_S = 1e-5
#: Records taken from the queue per write.
_BATCH = 256
#: Estimated memory of one queued record besides its per-request lists (tuple, StepStats, floats).
_RECORD_BYTES = 400
#: Live writers, for the fork hook (weak: a writer that is gone needs no reset).
_WRITERS: weakref.WeakSet[TraceWriter] = weakref.WeakSet()


class TraceWriter(TraceDisk):
    """Buffered, rotating JSONL trace writer; one per engine process (rank).

    ``on_record`` queues a completed step record (its time null when the engine never reported one).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        header: Mapping[str, Any] | None = None,
        rank: int = 0,
        max_bytes: int = 64 * 2**20,
        backups: int = 3,
        flush_interval_s: float = 0.1,
        max_pending: int = 100_000,
        max_pending_bytes: int = 64 * 2**20,
        close_timeout_s: float = 2.0,
    ) -> None:
        if max_bytes < 1024:
            raise ValueError(f"TraceWriter.max_bytes must be >= 1024, got {max_bytes}")
        if backups < 0:
            raise ValueError(f"TraceWriter.backups must be >= 0, got {backups}")
        if max_pending < 1 or max_pending_bytes < 1:
            raise ValueError("TraceWriter.max_pending and max_pending_bytes must be >= 1")
        self.path = rank_path(path, rank)
        self.rank = rank
        self.max_bytes = max_bytes
        self.backups = backups
        self.flush_interval_s = flush_interval_s
        self.close_timeout_s = close_timeout_s
        self.header = {"kind": "header", "format": TRACE_FORMAT, "rank": rank, **(header or {})}
        self.rotations = 0
        # Counters: each is written by one thread only (the engine thread or the writer thread), so no lock.
        self.offered = 0
        self.written = 0
        self._drops = dict.fromkeys(DROP_CAUSES, 0)  # queue_full, after_close, close_timeout: engine thread
        self._writer_drops = dict.fromkeys(DROP_CAUSES, 0)  # write_error, bad_record: writer thread
        self._queue: deque[tuple[_Pending | bytes, int]] = deque()  # bytes: an event line (``note``)
        self._max_pending = max_pending
        self._max_pending_bytes = max_pending_bytes
        self._bytes_in = 0  # engine thread: estimated bytes queued, ever
        self._bytes_out = 0  # writer thread: estimated bytes taken off the queue, ever
        self._inflight = 0  # records the writer thread has taken and not yet accounted for
        self._fd: int | None = None
        self._size = 0
        self._wake = threading.Event()
        self._stop = False
        self._closed = False
        self._abandoned = False
        self._io_lock = threading.Lock()
        self._forked = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # the writes will fail and be counted; the engine still starts
            log.error("specpolicy: cannot create the trace directory %s: %s", self.path.parent, exc)
        for p in self._paths():
            problem = not_a_trace(p)
            if problem:  # said now, at start; every open checks again (and counts what it refuses)
                log.error("specpolicy: %s", problem)
        _WRITERS.add(self)
        self._thread = threading.Thread(target=self._run, name=f"specpolicy-trace-{rank}", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    # -- accounting --
    @property
    def dropped(self) -> int:
        """Records offered and not written, all causes."""
        return sum(self._drops.values()) + sum(self._writer_drops.values())

    @property
    def drops(self) -> dict[str, int]:
        """Dropped records by cause (``DROP_CAUSES``)."""
        return {c: self._drops[c] + self._writer_drops[c] for c in DROP_CAUSES}

    @property
    def closed(self) -> bool:
        return self._closed

    def _drop(self, counts: dict[str, int], cause: str, n: int, detail: str = "") -> None:
        if n <= 0 or (self._abandoned and counts is self._writer_drops):  # close() counted those already
            return
        first = self._drops[cause] + self._writer_drops[cause] == 0
        counts[cause] += n
        if first:
            log.warning(
                "specpolicy: the step trace %s is dropping records (%s%s); counted per cause, summed up at "
                "close",
                self.path,
                cause,
                f": {detail}" if detail else "",
            )

    # -- StepObserver (engine thread; must stay cheap and never raise) --
    def on_record(self, record: StepRecord) -> None:
        step, stats, k, decide_s, fallback, decided_at, step_time_s = record
        ts = time.time() - (time.perf_counter() - decided_at)  # the decision's wall-clock time
        self._push((step, stats, k, decide_s, fallback, ts, step_time_s))

    def note(self, event: Mapping[str, Any]) -> None:
        """Queue an event line (a policy change: ``{"kind": "policy_swap", "step": ...}``) among the step
        records, with this rank and the wall-clock time; counted like a record. Rare, so encoded here."""
        try:
            line = json.dumps({**event, "rank": self.rank, "ts": round(time.time(), 6)}, default=str)
        except Exception:  # noqa: BLE001 - an event that cannot be written is dropped, counted
            self.offered += 1
            self._drop(self._drops, "bad_record", 1, "an event line")
            return
        self._push(line.encode() + b"\n")

    def _push(self, pending: _Pending | bytes) -> None:
        self.offered += 1
        if self._closed:
            self._drop(
                self._drops,
                "after_close",
                1,
                "in a forked child: the trace is the parent's" if self._forked else "",
            )
            return
        if pending.__class__ is bytes:  # an event line (``note``)
            size = _RECORD_BYTES + len(pending)
        else:
            acc = pending[1][4]  # type: ignore[index]
            size = _RECORD_BYTES + (8 * len(acc) if acc.__class__ is list else 0)
        if (
            len(self._queue) >= self._max_pending
            or self._bytes_in - self._bytes_out + size > self._max_pending_bytes
        ):
            self._drop(self._drops, "queue_full", 1, "the writer fell behind or the disk stalled")
            return
        self._bytes_in += size
        self._queue.append((pending, size))

    # -- background thread --
    def _run(self) -> None:
        while True:
            stopping = self._stop
            if not stopping:
                self._wake.wait(self.flush_interval_s)
                self._wake.clear()
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - flush accounts for its records; this is a last resort
                log.error("specpolicy: the trace writer failed: %s", short_str(exc))
            if stopping or self._abandoned:
                return

    def flush(self) -> None:
        """Write everything queued so far (the background thread's work; also safe to call directly)."""
        with self._io_lock:
            q = self._queue
            while q and not self._abandoned:
                batch = [q.popleft() for _ in range(min(len(q), _BATCH))]
                self._inflight = len(batch)
                self._write_batch(batch)
                self._inflight = 0

    def _write_batch(self, batch: list[tuple[_Pending | bytes, int]]) -> None:
        lines: list[bytes] = []
        perf = time.perf_counter
        mark = perf()
        rank = self.rank
        for pending, size in batch:
            self._bytes_out += size
            if isinstance(pending, bytes):  # an event line, encoded already
                lines.append(pending)
                continue
            step, stats, k, decide_s, fallback, ts, t = pending
            line = encode(step, stats, k, t, rank, ts, decide_s, fallback)
            if line is None:
                self._drop(self._writer_drops, "bad_record", 1, f"step {short_repr(step)}")
            else:
                lines.append(line)
            if perf() - mark > _YIELD_S:
                time.sleep(_YIELD_SLEEP_S)  # hand the GIL to a waiting engine thread now, not in 5 ms
                mark = perf()
        self._write_lines(lines)

    def _after_fork_in_child(self) -> None:
        """The child's copy: closed, its queue (the parent's records) emptied, its counts its own."""
        self._forked = self._closed = self._stop = True
        self._queue.clear()
        self._io_lock = threading.Lock()  # the parent's writer thread may have held it
        self._wake = threading.Event()
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # the child's descriptor only; the parent's stays open
        self.offered = self.written = self._inflight = self._bytes_in = self._bytes_out = 0
        self._drops = dict.fromkeys(DROP_CAUSES, 0)
        self._writer_drops = dict.fromkeys(DROP_CAUSES, 0)

    def close(self) -> None:
        """Write what is queued and stop the thread.

        Never raises; returns within about ``close_timeout_s``. Called again (the exit hook), it does nothing.
        """
        if self._closed:
            return
        try:
            self._closed = True
            self._stop = True
            self._wake.set()
            if self._thread.is_alive() and self._thread is not threading.current_thread():
                self._thread.join(timeout=self.close_timeout_s)
            if self._thread.is_alive():  # stuck in a write: abandon it, count what it and the queue held
                self._abandoned = True
                stuck = self._inflight + len(self._queue)
                self._queue.clear()
                self._drop(self._drops, "close_timeout", stuck, f"no return in {self.close_timeout_s} s")
            else:
                if self._queue:  # the thread ended early: write the rest here
                    self.flush()
                self._close_fd()
            if self.dropped:
                causes = ", ".join(f"{c} {n}" for c, n in self.drops.items() if n)
                log.warning(
                    "specpolicy: step trace %s: %d records offered, %d written, %d dropped (%s)",
                    self.path,
                    self.offered,
                    self.written,
                    self.dropped,
                    causes,
                )
        except Exception as exc:  # noqa: BLE001 - shutdown must finish
            log.error("specpolicy: closing the step trace %s failed: %s", self.path, short_str(exc))


def _after_fork() -> None:
    for writer in list(_WRITERS):
        writer._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
