"""``vllm-args`` with the engine's depth given: a policy's ``steps`` follow it unless set, and must fit it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specpolicy import ConfigError, parse_config
from specpolicy.adapters.vllm.args import build_vllm_args
from specpolicy.cli import main
from specpolicy.runtime.settings import AdapterSettings


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
    # no note about steps (only the one naming the fields left to the server's defaults)
    assert [n for n in out.notes if not n.startswith("--additional-config carries")] == []


def test_a_derived_steps_that_breaks_another_field_is_named() -> None:
    with pytest.raises(ConfigError, match=r"policy\.acceptance\.initial_steps"):
        build_vllm_args({"name": "acceptance", "initial_steps": 4}, 2)


def _section(out: Any) -> dict[str, Any]:
    return out.additional_config["specpolicy"]["policy"]  # type: ignore[no-any-return]


def test_a_given_table_equal_to_the_default_is_kept() -> None:
    """The deployment keeps what the user wrote, should a later release change the default."""
    default = parse_config("schedule").model_dump(mode="json")["table"]
    out = build_vllm_args({"name": "schedule", "table": default}, draft_model="d")
    assert _section(out) == {"name": "schedule", "table": default}
    # what the server rebuilds from the flags is the given policy
    rebuilt = AdapterSettings.from_mapping(out.additional_config["specpolicy"]).policy
    assert rebuilt == parse_config("schedule")
    # a bare name stays a bare name
    assert _section(build_vllm_args("schedule", draft_model="d")) == {"name": "schedule"}


def test_a_given_nested_field_equal_to_the_default_is_kept_beside_the_changed_ones() -> None:
    spec = {"name": "gate", "inner": {"name": "acceptance", "steps": [1, 2, 3, 4], "probe_interval": 1}}
    assert _section(build_vllm_args(spec, draft_model="d")) == spec


def test_given_fields_are_kept_with_derived_steps() -> None:
    out = build_vllm_args({"name": "cost_model", "profile": None}, 3, draft_model="d")
    assert _section(out) == {"name": "cost_model", "profile": None, "steps": [1, 2, 3]}


def test_the_note_names_the_fields_left_to_the_servers_defaults() -> None:
    out = build_vllm_args({"name": "hysteresis", "disable_at": 48}, draft_model="d")
    assert _section(out) == {"name": "hysteresis", "disable_at": 48}
    left = [f for f in type(parse_config("hysteresis")).model_fields if f not in ("name", "disable_at")]
    assert out.notes == (
        "--additional-config carries the policy fields given or derived; "
        f"{len(left)} not given follow the defaults of the specpolicy the server runs: {', '.join(left)}",
    )
