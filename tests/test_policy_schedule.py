"""schedule: decide() equals its table; tables are validated; TensorRT-LLM's dict form converts."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import ConfigError, SpecMode, StepStats, make_policy, parse_config
from specpolicy.policies.schedule import ScheduleConfig


@st.composite
def tables(draw: st.DrawFn) -> list[list[int]]:
    """A valid table: contiguous inclusive ranges from 0 or 1, each with a depth in 0..8."""
    start = draw(st.integers(0, 1))
    widths = draw(st.lists(st.integers(1, 40), min_size=1, max_size=8))
    out = []
    for w in widths:
        out.append([start, start + w - 1, draw(st.integers(0, 8))])
        start += w
    return out


def _table_says(table: list[list[int]], b: int) -> int:
    """The documented meaning: the entry whose range holds b; below the table -> first; past it -> last."""
    for lo, hi, k in table:
        if lo <= b <= hi:
            return k
    return table[0][2] if b < table[0][0] else table[-1][2]


@given(tables(), st.lists(st.integers(0, 400), min_size=1, max_size=50))
def test_decide_equals_the_table(table: list[list[int]], batches: list[int]) -> None:
    p = make_policy({"name": "schedule", "table": table})
    for b in batches:
        assert p.decide(StepStats(b)).num_steps == _table_says(table, b)
    assert parse_config({"name": "schedule", "table": table}).candidate_steps() == tuple(
        sorted({k for _, _, k in table})
    )


def test_vllm_form_example() -> None:
    p = make_policy({"name": "schedule", "table": [[1, 4, 3], [5, 16, 1], [17, 64, 0]]})
    got = {b: p.decide(StepStats(b)).num_steps for b in (0, 1, 4, 5, 16, 17, 64, 65, 10_000)}
    assert got == {0: 3, 1: 3, 4: 3, 5: 1, 16: 1, 17: 0, 64: 0, 65: 0, 10_000: 0}


def test_past_the_table_carries_the_last_entry_like_vllm() -> None:
    p = make_policy({"name": "schedule", "table": [[1, 8, 0], [9, 16, 2]]})
    assert p.decide(StepStats(17)) == SpecMode.on(2) and p.decide(StepStats(5000)) == SpecMode.on(2)


def test_huge_ranges_beyond_the_dense_lookup_still_answer() -> None:
    p = make_policy({"name": "schedule", "table": [[1, 10, 4], [11, 10**9, 1], [10**9 + 1, 10**9 + 1, 0]]})
    assert [p.decide(StepStats(b)).num_steps for b in (3, 11, 10**8, 10**9, 10**9 + 1, 10**12)] == [
        4, 1, 1, 1, 0, 0
    ]


@pytest.mark.parametrize(
    ("schedule", "expect"),
    [
        ({4: 4, 8: 2, 32: 1}, {1: 4, 4: 4, 5: 2, 8: 2, 9: 1, 32: 1, 33: 0, 1000: 0}),
        ({"16": 3}, {1: 3, 16: 3, 17: 0}),
        ({8: 2, 2: 5, 64: 0}, {1: 5, 2: 5, 3: 2, 8: 2, 9: 0, 64: 0, 65: 0}),  # keys in any order
    ],
)
def test_tensorrt_llm_draft_len_schedule(schedule: dict[object, int], expect: dict[int, int]) -> None:
    for config in (
        ScheduleConfig.from_draft_len_schedule(schedule),
        parse_config({"name": "schedule", "draft_len_schedule": schedule}),
    ):
        p = make_policy(config)
        assert {b: p.decide(StepStats(b)).num_steps for b in expect} == expect
        assert 0 in config.candidate_steps()


def test_draft_len_schedule_from_a_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "sched.toml"
    path.write_text('name = "schedule"\n[draft_len_schedule]\n4 = 4\n8 = 2\n32 = 1\n')
    config = parse_config(str(path))
    assert config.table == ((1, 4, 4), (5, 8, 2), (9, 32, 1), (33, 33, 0))  # type: ignore[attr-defined]


def test_invalid_batch_size_repeats_the_last_answer() -> None:
    p = make_policy({"name": "schedule", "table": [[1, 4, 3], [5, 5, 0]]})
    assert p.decide(StepStats(9)) == SpecMode.off()
    for bad in (-1, math.nan, None, "x", 2.5):
        assert p.decide(StepStats.fast(bad)) == SpecMode.off()  # type: ignore[arg-type]
    assert p.decide(StepStats.fast(2.0)) == SpecMode.on(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ([[1, 4, 2], [4, 8, 1]], r"entry 1 \[4, 8, 1\] overlaps entry 0 \[1, 4, 2\]"),
        ([[1, 4, 2], [6, 8, 1]], r"entry 1 \[6, 8, 1\] leaves a gap .*: batch sizes 5..5 are not"),
        ([[5, 8, 1], [1, 4, 2]], r"entry 0 \[5, 8, 1\]: the first range must start at batch 0 or 1"),
        ([[1, 8, 1], [0, 0, 2]], r"entry 1 \[0, 0, 2\] is out of order with entry 0 \[1, 8, 1\]"),
        ([[1, 4, 2], [9, 6, 1]], r"entry 1 \[9, 6, 1\]: min_batch 9 > max_batch 6"),
        ([[1, 4, 65]], r"entry 0 \[1, 4, 65\]: num_steps must be in \[0, 64\]"),
        ([[1, 4, -1]], r"entry 0 \[1, 4, -1\]: num_steps must be in \[0, 64\]"),
        ([], r"schedule\.table: .*at least 1"),
        ([[1, 4]], r"schedule\.table\.0\.2: Field required"),
        ([[1, "x", 2]], r"schedule\.table\.0\.1: "),
    ],
)
def test_bad_tables_are_rejected_quoting_the_entry(table: list[object], message: str) -> None:
    with pytest.raises(ConfigError, match=r"schedule\.table") as info:
        make_policy({"name": "schedule", "table": table})
    assert re.search(message, str(info.value)), str(info.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"draft_len_schedule": {}}, "non-empty mapping"),
        ({"draft_len_schedule": {"a": 1}}, "key 'a' is not an integer"),
        ({"draft_len_schedule": {0: 1}}, "key 0 must be an integer batch size >= 1"),
        ({"draft_len_schedule": {4: 99}}, r"num_steps must be an int in \[0, 64\]"),
        ({"draft_len_schedule": {4: 1}, "table": [[1, 2, 3]]}, "either table or draft_len_schedule"),
    ],
)
def test_bad_draft_len_schedules_name_the_field(extra: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=rf"schedule\.draft_len_schedule: .*{message}"):
        parse_config({"name": "schedule", **extra})
