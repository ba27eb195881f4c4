"""``vllm-args`` with the engine's depth given: a policy's ``steps`` follow it unless set, and must fit it."""

from __future__ import annotations

import json

import pytest

from specpolicy import ConfigError
from specpolicy.adapters.vllm.args import build_vllm_args
from specpolicy.cli import main


def test_cost_model_defaults_follow_the_engine_depth(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["vllm-args", "--policy", "cost_model", "--num-speculative-tokens", "3", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    kwargs = json.loads(captured.out)
    policy = kwargs["additional_config"]["specpolicy"]["policy"]
    assert policy == {"name": "cost_model", "steps": [1, 2, 3]}
    depths = {k for _, _, k in kwargs["speculative_config"]["num_speculative_tokens_per_batch_size"]}
    assert depths == {0, 1, 2, 3}
    assert "policy steps [1, 2, 3]: derived from num_speculative_tokens=3" in captured.err


def test_the_depth_of_a_given_speculative_config_counts_too() -> None:
    out = build_vllm_args("acceptance", speculative_config={"num_speculative_tokens": 2, "model": "d"})
    assert out.additional_config["specpolicy"]["policy"] == {"name": "acceptance", "steps": [1, 2]}
    assert any("derived from num_speculative_tokens=2" in n for n in out.notes)


def test_defaults_that_already_match_need_no_note() -> None:
    out = build_vllm_args("acceptance", 4, draft_model="d")
    assert out.additional_config["specpolicy"]["policy"] == {"name": "acceptance"}
    assert out.notes == ()


def test_an_explicit_steps_deeper_than_the_engine_names_both_and_the_fix() -> None:
    with pytest.raises(ConfigError) as exc:
        build_vllm_args({"name": "cost_model", "steps": [1, 2, 5]}, 3)
    msg = str(exc.value)
    assert msg.startswith("policy.steps: [1, 2, 5]")
    assert "num_speculative_tokens=3" in msg and "raise --num-speculative-tokens to 5" in msg


def test_an_explicit_steps_within_the_engine_depth_is_kept() -> None:
    out = build_vllm_args({"name": "cost_model", "steps": [2]}, 4, draft_model="d")
    assert out.additional_config["specpolicy"]["policy"]["steps"] == [2]
    assert out.notes == ()


def test_a_derived_steps_that_breaks_another_field_is_named() -> None:
    with pytest.raises(ConfigError, match=r"policy\.acceptance\.initial_steps"):
        build_vllm_args({"name": "acceptance", "initial_steps": 4}, 2)
