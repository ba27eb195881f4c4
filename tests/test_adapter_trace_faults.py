"""TraceWriter under faults: full disk, read-only directory, bad records, a stalled file, a full queue.

Whatever happens, after close() ``written + dropped == offered`` exactly, the file holds exactly the records
counted as written, each cause is logged once, and close() returns without raising.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _benchmarks import load
from hypothesis import given
from hypothesis import strategies as st

from specpolicy.runtime import trace_file
from specpolicy.runtime.decision import StepRecord
from specpolicy.runtime.trace_writer import TraceWriter
from specpolicy.stats import StepStats
from specpolicy.trace import TraceRecord, read_trace, record_dict

faults = load("bench_trace_faults")


def _feed(w: TraceWriter, n: int, batch: int = 4, start: int = 1) -> None:
    for step in range(start, start + n):
        stats = StepStats.fast(batch, 0, 100.0, 2, [1] * batch, None, 0.01)
        w.on_record(StepRecord(step, stats, 2, 1e-6, False, time.perf_counter(), 0.01))


def _close_in_thread(w: TraceWriter) -> bool:
    """Close from another thread; True when it returned (the liveness check, not a timing one)."""
    t = threading.Thread(target=w.close)
    t.start()
    t.join(30)
    return not t.is_alive()


def _check_accounting(w: TraceWriter, path: Path) -> None:
    assert w.written + w.dropped == w.offered
    on_disk = len(list(read_trace(path))) if path.exists() else 0
    assert on_disk == w.written


def _cause_lines(caplog: pytest.LogCaptureFixture, cause: str) -> int:
    return sum(f"dropping records ({cause}" in r.getMessage() for r in caplog.records)


def test_every_fault_scenario_of_the_benchmark_accounts_exactly() -> None:
    lines: list[str] = []
    assert faults.main(["--records", "600", "--batch", "16"], out=lines.append) == 0, "\n".join(lines)


def test_a_full_disk_loses_exactly_the_records_that_did_not_land(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.jsonl"
    with faults.full_disk(room=6000), caplog.at_level(logging.WARNING, logger="specpolicy.trace"):
        w = TraceWriter(path, flush_interval_s=0.01)
        _feed(w, 500)
        assert _close_in_thread(w)
    _check_accounting(w, path)
    assert 0 < w.written < 500 and w.drops["write_error"] == 500 - w.written
    assert _cause_lines(caplog, "write_error") == 1
    assert path.read_bytes().endswith(b"\n")  # the partial last line was cut off


def test_a_read_only_directory_counts_every_record_as_dropped_and_close_does_not_raise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with faults.read_only(), caplog.at_level(logging.WARNING, logger="specpolicy.trace"):
        w = TraceWriter(tmp_path / "t.jsonl", flush_interval_s=0.01)
        _feed(w, 300)
        assert _close_in_thread(w)
    assert (w.offered, w.written, w.drops["write_error"]) == (300, 0, 300)
    assert _cause_lines(caplog, "write_error") == 1
    assert any("300 records offered, 0 written, 300 dropped" in r.getMessage() for r in caplog.records)


class _Opaque:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_a_bad_record_loses_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    w = TraceWriter(path, flush_interval_s=10)
    _feed(w, 10)
    bad_acc = StepStats.fast(4, 0, math.nan, 2, [1, _Opaque()], None, math.inf)
    w.on_record(StepRecord(11, bad_acc, 2, 1e-6, False, time.perf_counter()))
    bad_batch = StepStats.fast(_Opaque(), 0, 1.0, 2, None, None, None)  # type: ignore[arg-type]
    w.on_record(StepRecord(12, bad_batch, 2, 1e-6, False, time.perf_counter()))
    _feed(w, 10, start=13)
    assert _close_in_thread(w)
    _check_accounting(w, path)
    recs = list(read_trace(path))
    assert [r.step for r in recs] == [*range(1, 12), *range(13, 23)]
    bad = recs[10]
    assert bad.mean_seq_len is None and bad.accepted_draft_tokens is None and bad.batch_size == 4
    assert set(bad.extra["invalid"]) == {"mean_seq_len", "accepted_draft_tokens", "last_step_time_s"}
    assert w.drops["bad_record"] == 1  # step 12: its batch size cannot be written


def test_close_returns_when_a_write_never_does(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    release, entered = threading.Event(), threading.Event()
    with faults.stalled_write(release, entered):
        w = TraceWriter(path, flush_interval_s=0.01, close_timeout_s=0.2)
        _feed(w, 50)
        assert entered.wait(10)
        _feed(w, 50, start=51)
        assert _close_in_thread(w)
        assert w.written == 0 and w.dropped == w.offered == 100
        assert w.drops["close_timeout"] == 100
        release.set()
        w._thread.join(10)
    assert w.written == 0 and w.dropped == 100  # the abandoned write's late return changes nothing
    assert not list(read_trace(path))  # and it was taken back out of the file


def test_the_queue_is_bounded_in_memory_and_counts_what_it_drops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.jsonl"
    w = TraceWriter(path, flush_interval_s=0.01, max_pending_bytes=2**20)
    with caplog.at_level(logging.WARNING, logger="specpolicy.trace"), w._io_lock:  # a stalled writer
        _feed(w, 3000, batch=256)
        assert w._bytes_in - w._bytes_out <= 2**20
    assert 0 < w.drops["queue_full"] < 3000
    assert _close_in_thread(w)
    _check_accounting(w, path)
    assert _cause_lines(caplog, "queue_full") == 1


def test_records_after_close_are_counted(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path / "t.jsonl")
    _feed(w, 3)
    w.close()
    _feed(w, 2, start=4)
    w.close()  # again: a no-op, as the exit hook is
    assert (w.offered, w.written, w.drops["after_close"]) == (5, 3, 2)


@given(
    st.integers(0, 10**6), st.integers(0, 512), st.none() | st.floats(0, 1e6), st.integers(0, 8),
    st.none() | st.lists(st.integers(0, 8), max_size=8), st.none() | st.floats(0, 10),
)
def test_the_writer_serialises_records_as_trace_record_does(
    step: int, b: int, seq: float | None, k: int, acc: list[int] | None, t: float | None
) -> None:
    stats = StepStats.fast(b, 1, seq, k, acc, None, t)
    kw: dict[str, Any] = {"rank": 2, "ts": 1.5, "decide_us": 2.25, "fallback": True}
    line = trace_file.encode(step, stats, 3, t, 2, 1.5, 2.25e-6, True)
    assert line is not None
    assert line.decode() == TraceRecord.from_stats(step, stats, 3, t, **kw).to_json() + "\n"
    assert record_dict(step, stats, 3, t, **kw)["accepted_draft_tokens"] is acc  # no copy


def test_trace_counts_reach_the_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prom = pytest.importorskip("prometheus_client")
    from specpolicy.runtime.metrics import MetricsObserver

    reg = prom.CollectorRegistry()
    w = TraceWriter(tmp_path / "t.jsonl", flush_interval_s=10, max_pending=5)
    m = MetricsObserver(engine="e", rank=0, registry=reg, trace=w)
    _feed(w, 9)
    w.close()
    m.close()
    lab = {"engine": "e", "rank": "0"}
    name = "specpolicy_trace_records_total"
    assert reg.get_sample_value(name, {**lab, "outcome": "written"}) == 5
    assert reg.get_sample_value(name, {**lab, "outcome": "dropped_queue_full"}) == 4
