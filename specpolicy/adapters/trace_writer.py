"""TraceWriter: a StepObserver that writes the JSONL step trace without ever blocking the engine step.

The step path only appends a small tuple to a bounded deque (a few hundred nanoseconds); a daemon thread turns
tuples into ``TraceRecord`` JSON lines, writes them and rotates the file (``FILE`` -> ``FILE.1`` -> ...
``FILE.N``) when it passes ``max_bytes``. Every file starts with a header line (engine, version, worker path,
policy). When the writer falls behind by more than ``max_pending`` steps, further steps are dropped and
counted
rather than slowing the engine down.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from ..stats import StepStats
from ..trace import TRACE_FORMAT, TraceRecord

__all__ = ["TraceWriter", "rank_path"]

log = logging.getLogger("specpolicy.trace")

# (step, stats, num_steps, decide_s, fallback, wall-clock ts)
_Pending = tuple[int, StepStats, int, float, bool, float]


def rank_path(path: str | os.PathLike[str], rank: int) -> Path:
    """The file a rank writes: ``{rank}`` in the path is substituted; otherwise ranks > 0 get ``.rankN``."""
    text = os.fspath(path)
    if "{rank}" in text:
        return Path(text.replace("{rank}", str(rank)))
    p = Path(text)
    if rank == 0:
        return p
    return p.with_name(f"{p.stem}.rank{rank}{p.suffix}")


#: How many decisions a step time may lag behind and still be paired with its step.
MAX_TIME_LAG = 4


class TraceWriter:
    """Buffered, rotating JSONL trace writer; one per engine process (rank).

    ``on_decision`` remembers the step; ``on_step_time`` completes it with its measured wall time and queues
    the record. A step whose time never arrives is written (time null) when the next decision comes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        header: Mapping[str, Any] | None = None,
        rank: int = 0,
        max_bytes: int = 64 * 2**20,
        backups: int = 3,
        flush_interval_s: float = 0.5,
        max_pending: int = 100_000,
    ) -> None:
        if max_bytes < 1024:
            raise ValueError(f"TraceWriter.max_bytes must be >= 1024, got {max_bytes}")
        if backups < 0:
            raise ValueError(f"TraceWriter.backups must be >= 0, got {backups}")
        self.path = rank_path(path, rank)
        self.rank = rank
        self.max_bytes = max_bytes
        self.backups = backups
        self.flush_interval_s = flush_interval_s
        self.header = {"kind": "header", "format": TRACE_FORMAT, "rank": rank, **(header or {})}
        self.dropped = 0
        self.written = 0
        self.rotations = 0
        self._queue: deque[tuple[_Pending, float | None]] = deque()
        self._max_pending = max_pending
        # Decisions still waiting for their step time, oldest first. Engines report a step's time up to a
        # couple of decisions late (overlap, async scheduling); older than MAX_TIME_LAG: written without one.
        self._open: deque[_Pending] = deque()
        self._fh: TextIO | None = None
        self._size = 0
        self._wake = threading.Event()
        self._stop = False
        self._io_lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name=f"specpolicy-trace-{rank}", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    # -- StepObserver (engine thread; must stay cheap and never raise) --
    def on_decision(
        self, step: int, stats: StepStats, num_steps: int, decide_s: float, fallback: bool
    ) -> None:
        open_ = self._open
        if len(open_) >= MAX_TIME_LAG:
            self._push(open_.popleft(), None)
        open_.append((step, stats, num_steps, decide_s, fallback, time.time()))

    def on_step_time(self, step: int, step_time_s: float | None) -> None:
        open_ = self._open
        while open_ and open_[0][0] < step:  # earlier steps whose time never came: keep the trace in order
            self._push(open_.popleft(), None)
        if open_ and open_[0][0] == step:
            self._push(open_.popleft(), step_time_s)

    def _push(self, pending: _Pending, step_time_s: float | None) -> None:
        if len(self._queue) >= self._max_pending:
            self.dropped += 1
            return
        self._queue.append((pending, step_time_s))

    # -- background thread --
    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            try:
                self.flush()
            except Exception:  # a full disk must not kill the engine; say so once per burst
                log.exception("specpolicy: cannot write the step trace %s", self.path)
                time.sleep(5 * self.flush_interval_s)

    def flush(self) -> None:
        """Write everything queued so far (called by the background thread, and by ``close``)."""
        with self._io_lock:
            q = self._queue
            if not q:
                if self._fh is not None:
                    self._fh.flush()
                return
            lines = []
            while q:
                (step, stats, k, decide_s, fallback, ts), t = q.popleft()
                rec = TraceRecord.from_stats(
                    step,
                    stats,
                    k,
                    t,
                    rank=self.rank,
                    ts=round(ts, 6),
                    decide_us=round(decide_s * 1e6, 3),
                    fallback=fallback,
                )
                try:
                    lines.append(rec.to_json() + "\n")
                except (
                    TypeError,
                    ValueError,
                ):  # NaN or odd types in stats: keep the step, drop the bad field
                    lines.append(_safe_json(rec) + "\n")
            for line in lines:
                self._write(line)
            if self._fh is not None:
                self._fh.flush()

    def _write(self, line: str) -> None:
        data = line.encode()
        if self._fh is None:
            self._open_file()
        elif self._size + len(data) > self.max_bytes and self._size > 0:
            self._rotate()
        assert self._fh is not None
        self._fh.write(line)
        self._size += len(data)
        self.written += 1

    def _open_file(self) -> None:
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open across flushes
        self._size = self.path.stat().st_size
        if self._size == 0:
            head = json.dumps(self.header, separators=(",", ":"), default=str) + "\n"
            self._fh.write(head)
            self._size += len(head.encode())

    def _rotate(self) -> None:
        assert self._fh is not None
        self._fh.close()
        self._fh = None
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
        else:
            for i in range(self.backups - 1, 0, -1):
                src = self.path.with_name(f"{self.path.name}.{i}")
                if src.exists():
                    os.replace(src, self.path.with_name(f"{self.path.name}.{i + 1}"))
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self.rotations += 1
        self._open_file()

    def close(self) -> None:
        """Flush what is queued (including a step still waiting for its time) and stop the thread."""
        if self._stop:
            return
        while self._open:
            self._push(self._open.popleft(), None)
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=5)
        try:
            self.flush()
        finally:
            with self._io_lock:
                if self._fh is not None:
                    self._fh.close()
                    self._fh = None
        if self.dropped:
            log.warning("specpolicy: the trace writer dropped %d steps (it fell behind)", self.dropped)


def _safe_json(rec: TraceRecord) -> str:
    d = {k: getattr(rec, k) for k in ("step", "batch_size", "num_steps", "rank", "ts", "fallback")}
    d["extra"] = {"error": "record had non-serialisable fields"}
    return json.dumps(d, separators=(",", ":"), default=str)
