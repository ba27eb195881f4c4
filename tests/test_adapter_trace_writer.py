"""TraceWriter: records readable by read_trace, rotation bounded in size and count, never blocking the
step."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy.policies.static import StaticConfig, StaticPolicy
from specpolicy.runtime.controller import StepController
from specpolicy.runtime.decision import StepRecord
from specpolicy.runtime.trace_file import rank_path
from specpolicy.runtime.trace_writer import TraceWriter
from specpolicy.stats import StepStats
from specpolicy.trace import read_trace


def _feed(w: TraceWriter, n: int, start: int = 1) -> None:
    for step in range(start, start + n):
        stats = StepStats(batch_size=step % 7 + 1, last_num_steps=2, accepted_draft_tokens=[1, 2])
        w.on_record(StepRecord(step, stats, step % 4, 2e-6, step % 5 == 0, time.perf_counter(), 0.001 * step))


def _controller(w: TraceWriter) -> StepController:
    """A controller feeding ``w``; its steps' depths are imposed with ``force``."""
    return StepController(
        StaticPolicy(StaticConfig(num_steps=3)), allowed_steps=(0, 3), default_steps=3, observers=[w]
    )


def test_records_round_trip_through_read_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    w = TraceWriter(path, header={"engine": "sglang", "engine_version": "0.5.23", "path": "x", "policy": {}})
    _feed(w, 10)
    w.close()
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    assert (
        head["kind"] == "header"
        and head["engine"] == "sglang"
        and head["format"].startswith("specpolicy-trace")
    )
    recs = list(read_trace(path))
    assert [r.step for r in recs] == list(range(1, 11))
    assert [r.num_steps for r in recs] == [s % 4 for s in range(1, 11)]
    assert [r.step_time_s for r in recs] == pytest.approx([0.001 * s for s in range(1, 11)])
    assert [r.fallback for r in recs] == [s % 5 == 0 for s in range(1, 11)]
    assert recs[0].stats() == StepStats(batch_size=2, last_num_steps=2, accepted_draft_tokens=[1, 2])


def test_a_step_whose_time_never_comes_is_still_written(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    w = TraceWriter(path)
    ctl = _controller(w)
    ctl.force(StepStats(4), 3)
    ctl.force(StepStats(4), 0)  # step 1's time was never reported
    ctl.outcome(2, None, 0.02)
    ctl.force(StepStats(4), 3)
    ctl.close()
    w.close()
    assert [(r.step, r.step_time_s) for r in read_trace(path)] == [(1, None), (2, 0.02), (3, None)]


@settings(max_examples=15)
@given(n=st.integers(1, 400), max_bytes=st.integers(1024, 8192), backups=st.integers(0, 3))
def test_rotation_bounds_size_and_count_and_keeps_the_newest(n: int, max_bytes: int, backups: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.jsonl"
        w = TraceWriter(path, max_bytes=max_bytes, backups=backups)
        _feed(w, n)
        w.close()
        files = sorted(Path(d).iterdir())
        assert len(files) <= backups + 1
        for f in files:
            assert f.stat().st_size <= max_bytes
            assert json.loads(f.read_text().splitlines()[0])["kind"] == "header"  # every file self-describing
        # the live file ends with the newest step; the kept files hold a contiguous run of the newest steps
        steps = [
            r.step
            for f in [*sorted(files[1:], key=lambda p: -int(p.suffix[1:])), path]
            for r in read_trace(f)
        ]
        assert steps == list(range(n - len(steps) + 1, n + 1))
        if backups and w.rotations:
            assert path.with_name("t.jsonl.1").exists()


def test_step_path_never_waits_for_a_slow_disk(tmp_path: Path) -> None:
    """Hold the writer's I/O lock (as a stalled write would) and check that steps still return at once."""
    w = TraceWriter(tmp_path / "t.jsonl", flush_interval_s=0.01, max_pending=1000)
    with w._io_lock:
        t0 = time.perf_counter()
        _feed(w, 5000)
        elapsed = time.perf_counter() - t0
    # 5000 steps complete while the disk is "stuck"; beyond max_pending they are dropped and counted
    assert elapsed < 1.0
    assert w.dropped == 5000 - 1000
    w.close()
    assert len(list(read_trace(tmp_path / "t.jsonl"))) == 1000


def test_background_thread_flushes_without_close(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    w = TraceWriter(path, flush_interval_s=0.02)
    _feed(w, 3)
    deadline = time.time() + 5
    while time.time() < deadline and (not path.exists() or len(path.read_text().splitlines()) < 4):
        time.sleep(0.02)
    assert [r.step for r in read_trace(path)] == [1, 2, 3]
    assert any(t.name == "specpolicy-trace-0" for t in threading.enumerate())
    w.close()


def test_rank_paths_do_not_collide(tmp_path: Path) -> None:
    assert rank_path(tmp_path / "t.jsonl", 0) == tmp_path / "t.jsonl"
    assert rank_path(tmp_path / "t.jsonl", 3) == tmp_path / "t.rank3.jsonl"
    assert rank_path(str(tmp_path / "t-{rank}.jsonl"), 2) == tmp_path / "t-2.jsonl"


def test_invalid_sizes_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_bytes must be >= 1024"):
        TraceWriter(tmp_path / "t", max_bytes=10)
    with pytest.raises(ValueError, match="backups must be >= 0"):
        TraceWriter(tmp_path / "t", backups=-1)


def test_a_step_time_reported_decisions_later_is_paired_with_its_own_step(tmp_path: Path) -> None:
    # Overlap / async engines learn a round's time one or two decisions after deciding it.
    path = tmp_path / "lag.jsonl"
    w = TraceWriter(path)
    ctl = _controller(w)
    ctl.force(StepStats(4), 3)
    ctl.force(StepStats(4), 0)
    ctl.outcome(1, None, 0.031)  # step 1's time arrives after step 2 was decided
    ctl.force(StepStats(4), 3)
    ctl.outcome(3, None, 0.017)  # step 2's never comes: it is written without one, in order
    ctl.force(StepStats(4), 3)
    ctl.close()
    w.close()
    assert [(r.step, r.num_steps, r.step_time_s) for r in read_trace(path)] == [
        (1, 3, 0.031),
        (2, 0, None),
        (3, 3, 0.017),
        (4, 3, None),
    ]
