"""TraceWriter never destroys a file it did not create, notices a deleted directory, and resets after fork.

A mistyped trace path (``SPECPOLICY_TRACE=profile.json``) must leave that file byte for byte as it was,
through appends and rotations; a trace whose directory is removed while running must not count records as
written that exist nowhere; a forked child must not write the parent's queued records a second time.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import pytest

from specpolicy.runtime.decision import StepRecord
from specpolicy.runtime.trace_writer import TraceWriter
from specpolicy.stats import StepStats
from specpolicy.trace import read_trace


def _feed(w: TraceWriter, n: int, start: int = 1) -> None:
    for step in range(start, start + n):
        stats = StepStats.fast(4, 0, 100.0, 2, [1] * 4, None, 0.01)
        w.on_record(StepRecord(step, stats, 2, 1e-6, False, time.perf_counter(), 0.01))


USER_FILES = [
    b'{"profile": "mine", "steps": [1, 2, 3]}\n',  # JSON, but not a trace
    b"not json at all\n" * 200,
    b'{"kind": "header"}\n',  # a header without the trace format
]


@pytest.mark.parametrize("content", USER_FILES, ids=["json", "text", "bare-header"])
@pytest.mark.parametrize("backups", [0, 2])
def test_an_existing_file_that_is_not_a_trace_is_left_untouched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, backups: int
) -> None:
    path = tmp_path / "profile.json"
    path.write_bytes(content)
    with caplog.at_level(logging.ERROR, logger="specpolicy.trace"):
        w = TraceWriter(path, max_bytes=1024, backups=backups, flush_interval_s=0.01)
    assert any(
        "not a specpolicy trace" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records
    )
    _feed(w, 200)  # enough to rotate several times, were it written
    w.close()
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.json"]
    assert (w.written, w.drops["write_error"]) == (0, 200)


def test_a_user_file_at_a_backup_path_is_never_replaced_by_rotation(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    backup = tmp_path / "t.jsonl.2"
    backup.write_bytes(b"keep me\n")
    w = TraceWriter(path, max_bytes=1024, backups=2, flush_interval_s=0.01)
    _feed(w, 200)
    w.close()
    assert backup.read_bytes() == b"keep me\n"
    assert w.written + w.dropped == w.offered == 200 and w.drops["write_error"] > 0


def test_an_existing_trace_is_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    w = TraceWriter(path)
    _feed(w, 5)
    w.close()
    w = TraceWriter(path)
    _feed(w, 5, start=6)
    w.close()
    assert [r.step for r in read_trace(path)] == list(range(1, 11)) and w.written == 5
    assert sum(json.loads(line).get("kind") == "header" for line in path.read_text().splitlines()) == 1


def test_a_deleted_directory_is_created_again_and_nothing_is_counted_that_exists_nowhere(
    tmp_path: Path,
) -> None:
    path = tmp_path / "traces" / "t.jsonl"
    w = TraceWriter(path, flush_interval_s=10)  # flushed by hand: the deletion falls between two writes
    _feed(w, 50)
    w.flush()
    assert w.written == 50
    shutil.rmtree(path.parent)
    _feed(w, 30, start=51)
    w.flush()
    w.close()
    assert w.written + w.dropped == w.offered == 80
    assert [r.step for r in read_trace(path)] == list(range(51, 81))  # the 50 before went with the directory
    assert w.written == 80


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_never_writes_the_parents_queued_records(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    w = TraceWriter(path, flush_interval_s=10)  # records stay queued across the fork
    _feed(w, 100)
    pid = os.fork()
    if pid == 0:  # the child: its copy must be closed, with an empty queue and counts of its own
        ok = w.closed and not w._queue and w.offered == 0
        _feed(w, 10, start=101)
        w.close()
        ok = ok and w.written == 0 and w.drops["after_close"] == 10 == w.offered
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    w.close()
    assert os.waitstatus_to_exitcode(status) == 0
    steps = [r.step for r in read_trace(path)]
    assert steps == list(range(1, 101)) and w.written == 100
