"""``specpolicy vllm-args`` and the covering schedule, without vLLM installed."""

from __future__ import annotations

import json
import shlex
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import ConfigError
from specpolicy.adapters.vllm.args import build_vllm_args, covering_schedule
from specpolicy.cli import main


def dense_lookup(schedule: list[list[int]], max_num_seqs: int, k_max: int) -> list[int]:
    """vLLM's reading of a schedule (v1/spec_decode/dynamic/utils.py), written out independently: inclusive
    ranges, gaps and the tail carry the previous depth, values clamped to num_speculative_tokens."""
    assert schedule[0][0] == 1, "vLLM requires the first range to start at 1"
    prev_end = 0
    for lo, hi, k in schedule:
        assert 1 <= lo <= hi and k >= 0 and lo > prev_end, "vLLM requires sorted, non-overlapping ranges"
        prev_end = hi
    dense = []
    for b in range(1, max_num_seqs + 1):
        k = next((e[2] for e in reversed(schedule) if e[0] <= b), schedule[0][2])
        dense.append(min(k, k_max))
    return dense


@given(
    depths=st.sets(st.integers(0, 8), min_size=1, max_size=9),
    extra=st.integers(0, 4),
    max_num_seqs=st.integers(10, 1024),  # >= the number of distinct depths (at most 10 here)
)
def test_covering_schedule_gives_every_depth_a_tier_spanning_almost_every_batch(
    depths: set[int], extra: int, max_num_seqs: int
) -> None:
    k_max = max(depths) + extra or 1
    table = covering_schedule(depths, k_max, max_num_seqs)
    dense = dense_lookup(table, max_num_seqs, k_max)
    wanted = depths | {k_max}
    assert set(dense) == wanted
    widest = {k: max(b for b, kk in enumerate(dense, 1) if kk == k) for k in wanted}
    # vLLM sizes each depth's CUDA-graph tier up to the widest batch using it: all reach near max_num_seqs
    assert min(widest.values()) >= max_num_seqs - len(wanted) + 1
    assert dense[0] == k_max  # without the specpolicy scheduler vLLM would run its static maximum


def test_covering_schedule_rejects_depths_beyond_the_maximum_and_too_few_batch_slots() -> None:
    with pytest.raises(ConfigError, match=r"num_speculative_tokens: .*depth\(s\) \[4\]"):
        covering_schedule([0, 4], 3, 256)
    with pytest.raises(ConfigError, match="max_num_seqs: must be an int >= 4"):
        covering_schedule([0, 1, 2], 3, 3)
    with pytest.raises(ConfigError, match=r"num_speculative_tokens: must be an int in \[1, 64\]"):
        covering_schedule([0], 0, 256)


def test_build_vllm_args_normalises_the_policy_and_keeps_the_users_spec_config() -> None:
    out = build_vllm_args(
        '{"name": "schedule", "table": [[1, 7, 2], [8, 8, 0]]}',
        speculative_config={"method": "eagle", "model": "my/drafter", "num_speculative_tokens": 4},
        max_num_seqs=64,
        settings={"trace_path": "/tmp/t.jsonl"},
    )
    spec = out.speculative_config
    assert (spec["method"], spec["model"], spec["num_speculative_tokens"]) == ("eagle", "my/drafter", 4)
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 62, 4], [63, 63, 2], [64, 64, 0]]
    section = out.additional_config["specpolicy"]
    assert section["policy"] == {"name": "schedule", "table": [[1, 7, 2], [8, 8, 0]]}
    assert section["trace_path"] == "/tmp/t.jsonl"
    assert out.as_kwargs()["scheduler_cls"] == "specpolicy.adapters.vllm.Scheduler"
    assert out.notes == ()


def test_bad_settings_field_is_named_before_the_server_starts() -> None:
    with pytest.raises(ConfigError, match="trace_max_bytes"):
        build_vllm_args("static", settings={"trace_max_bytes": 1})


def test_cli_prints_shell_flags_that_parse_back(capsys: pytest.CaptureFixture[str]) -> None:
    policy = '{"name": "static", "num_steps": 2}'
    argv = ["vllm-args", "--policy", policy, "--num-speculative-tokens", "2", "--max-num-seqs", "16"]
    assert main([*argv, "--draft-model", "d"]) == 0
    text = capsys.readouterr().out
    tokens = shlex.split(text.replace("\\\n", " "))
    flags = dict(zip(tokens[::2], tokens[1::2], strict=True))
    assert set(flags) == {"--speculative-config", "--scheduler-cls", "--additional-config", "--max-num-seqs"}
    spec = json.loads(flags["--speculative-config"])
    assert spec == {
        "model": "d",
        "method": "eagle3",
        "num_speculative_tokens": 2,
        "num_speculative_tokens_per_batch_size": [[1, 16, 2]],
    }
    assert json.loads(flags["--additional-config"]) == {
        "specpolicy": {"policy": {"name": "static", "num_steps": 2}}
    }


def test_cli_json_output_and_draft_model_note(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["vllm-args", "--policy", "static", "--num-speculative-tokens", "3", "--json", "--no-metrics"])
        == 0
    )
    captured = capsys.readouterr()
    kwargs = json.loads(captured.out)
    assert kwargs["additional_config"]["specpolicy"]["metrics"] is False
    assert kwargs["max_num_seqs"] == 256
    assert "<draft model>" in captured.err


def test_cli_bad_policy_exits_1_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vllm-args", "--policy", '{"name": "static", "num_steps": 99}']) == 1
    assert "policy.static.num_steps" in capsys.readouterr().err
    assert main(["vllm-args", "--policy", "static", "--speculative-config", "[1]"]) == 1
    assert "speculative_config: must be a JSON object" in capsys.readouterr().err


def test_vllm_args_does_not_import_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    before = {m for m in sys.modules if m == "vllm" or m.startswith("vllm.")}
    assert main(["vllm-args", "--policy", "static"]) == 0
    after = {m for m in sys.modules if m == "vllm" or m.startswith("vllm.")}
    assert after == before
    assert "specpolicy.adapters.vllm.scheduler" not in sys.modules
