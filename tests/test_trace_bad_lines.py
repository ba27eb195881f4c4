"""Every malformed trace line is a one-line error naming the line and the field, for every reader.

``specpolicy profile fit`` used to end in a traceback on crafted traces (a string batch size, a float depth,
a rank that is a bool, junk per-request lists, bytes that are not UTF-8, a line nested 100,000 deep).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specpolicy.trace import read_trace

GOOD: dict[str, Any] = {
    "step": 1,
    "batch_size": 4,
    "num_steps": 3,
    "step_time_s": 0.01,
    "mean_seq_len": 100.0,
    "last_num_steps": 3,
    "accepted_draft_tokens": [1, 2],
    "rank": 0,
}

BAD_FIELDS = [
    ("batch_size", "x"),
    ("batch_size", 2.5),
    ("num_steps", 2.5),
    ("step", None),
    ("rank", "a"),
    ("rank", True),
    ("last_num_steps", "3"),
    ("last_batch_size", -1),
    ("accepted_draft_tokens", ["a"]),
    ("accepted_draft_tokens", {"a": 1}),
    ("drafted_tokens", "abc"),
    ("fallback", "no"),
    ("extra", [1]),
    ("ts", "now"),
    ("step_time_s", -1),
    ("batch_size", 10**30),
]


def _trace(path: Path, bad_line: bytes) -> Path:
    lines = [json.dumps({**GOOD, "step": i}).encode() for i in range(1, 4)]
    path.write_bytes(b"\n".join([*lines, bad_line, *lines]) + b"\n")
    return path


@pytest.mark.parametrize(("key", "value"), BAD_FIELDS, ids=[f"{k}={v!r}" for k, v in BAD_FIELDS])
def test_a_field_of_the_wrong_type_names_the_line_and_the_field(tmp_path: Path, key: str, value: Any) -> None:
    path = _trace(tmp_path / "t.jsonl", json.dumps({**GOOD, key: value}).encode())
    with pytest.raises(ValueError, match=rf"t\.jsonl:4: trace record field {key} must be "):
        list(read_trace(path))


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"\xff\xfe garbage", "not UTF-8 text"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
        (b"[1, 2]", "each line must be a JSON object"),
        (b"{not json", "not JSON"),
    ],
    ids=["binary", "deep", "array", "broken"],
)
def test_a_line_that_is_no_record_names_the_line(tmp_path: Path, line: bytes, says: str) -> None:
    path = _trace(tmp_path / "t.jsonl", line)
    with pytest.raises(ValueError, match=rf"t\.jsonl:4: {says}"):
        list(read_trace(path))


def test_profile_fit_reports_a_bad_trace_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    path = _trace(tmp_path / "t.jsonl", json.dumps({**GOOD, "rank": "a"}).encode())
    out = subprocess.run(
        [sys.executable, "-m", "specpolicy.cli", "profile", "fit", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"specpolicy profile fit: {path}:4: trace record field rank must be an integer in [0, 2**53), got 'a'"
    ]
