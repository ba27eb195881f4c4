"""AdapterSettings: validation naming the field, and the environment round trip spawned processes rely on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy.errors import ConfigError
from specpolicy.runtime.settings import ENV_CONFIG, ENV_POLICY, ENV_VARS, AdapterSettings


@given(
    num_steps=st.integers(0, 64),
    trace=st.one_of(
        st.none(), st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=20)
    ),
    max_bytes=st.integers(4096, 2**40),
    backups=st.integers(0, 1000),
    metrics=st.booleans(),
    failure=st.sampled_from(["refuse", "warn"]),
    untested=st.booleans(),
    tp=st.sampled_from(["auto", "local", "broadcast"]),
    off_step=st.sampled_from(["decode", "verify"]),
    catch_up=st.sampled_from(["auto", "lazy", "per_step"]),
    window=st.integers(1, 4096),
    clock=st.sampled_from(["auto", "host"]),
)
def test_environment_round_trip_rebuilds_identical_settings(
    num_steps: int,
    trace: str | None,
    max_bytes: int,
    backups: int,
    metrics: bool,
    failure: str,
    untested: bool,
    tp: str,
    off_step: str,
    catch_up: str,
    window: int,
    clock: str,
) -> None:
    s = AdapterSettings.build(
        {"name": "static", "num_steps": num_steps},
        trace_path=trace,
        trace_max_bytes=max_bytes,
        trace_backups=backups,
        metrics=metrics,
        on_install_failure=failure,
        allow_untested=untested,
        tp_agreement=tp,
        off_step=off_step,
        draft_catch_up=catch_up,
        draft_catch_up_window=window,
        step_clock=clock,
    )
    assert AdapterSettings.from_env(s.to_env()) == s


@pytest.mark.parametrize(
    ("fields", "field_named", "allowed"),
    [
        ({"trace_backups": -1}, "trace_backups", "must be from 0 to 1,000 (got -1)"),
        ({"trace_max_bytes": 10}, "trace_max_bytes", "from 4,096 to 1,099,511,627,776 bytes (got 10)"),
        ({"trace_max_bytes": -3 * 2**20}, "trace_max_bytes", "from 4,096 to 1,099,511,627,776 bytes"),
        ({"on_install_failure": "ignore"}, "on_install_failure", "'refuse' or 'warn'"),
        ({"tp_agreement": "vote"}, "tp_agreement", "'auto', 'local' or 'broadcast'"),
        ({"off_step": "skip"}, "off_step", "'decode' or 'verify'"),
        ({"draft_catch_up": "never"}, "draft_catch_up", "'auto', 'lazy' or 'per_step'"),
        ({"draft_catch_up_window": 0}, "draft_catch_up_window", "must be from 1 to 4,096 (got 0)"),
        ({"draft_catch_up_window": 4097}, "draft_catch_up_window", "must be from 1 to 4,096 (got 4097)"),
        ({"decide_budget_s": 0}, "decide_budget_s", "must be from 0.00001 to 60 s (got 0)"),
        ({"step_clock": "wall"}, "step_clock", "'auto' or 'host'"),
        ({"metrics": "perhaps"}, "metrics", "valid boolean"),
        ({"colour": "blue"}, "colour", "known: policy, trace_path"),
    ],
)
def test_bad_field_is_named_with_what_is_allowed(
    fields: dict[str, object], field_named: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as info:
        AdapterSettings.build("static", **fields)
    text = str(info.value)
    assert text.startswith(f"{field_named}:") and allowed in text


def test_bad_policy_field_is_prefixed_with_policy() -> None:
    with pytest.raises(ConfigError, match=r"^policy\.static\.num_steps: .*less than or equal to 64"):
        AdapterSettings.build({"name": "static", "num_steps": 65})
    with pytest.raises(ConfigError, match=r"^policy\.name: unknown policy 'nope'; available: .*static"):
        AdapterSettings.build("nope")


def test_from_env_is_none_when_nothing_is_configured() -> None:
    assert AdapterSettings.from_env({"SPECPOLICY_TRACE": "/tmp/x"}) is None  # a trace alone is not a request


def test_single_variables_override_the_serialised_config(tmp_path: Path) -> None:
    base = AdapterSettings.build("static", metrics=True).to_env()
    env = {
        **base,
        ENV_POLICY: '{"name": "static", "num_steps": 0}',
        ENV_VARS["metrics"]: "0",
        ENV_VARS["trace_path"]: str(tmp_path / "t.jsonl"),
        ENV_VARS["trace_backups"]: "7",
    }
    s = AdapterSettings.from_env(env)
    assert s is not None
    assert (s.policy.candidate_steps(), s.metrics, s.trace_path, s.trace_backups) == (
        (0,),
        False,
        tmp_path / "t.jsonl",
        7,
    )


def test_policy_file_is_accepted(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"name": "static", "num_steps": 2}))
    s = AdapterSettings.from_env({ENV_POLICY: str(f)})
    assert s is not None and s.policy.candidate_steps() == (2,)


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]"])
def test_broken_config_variable_is_reported(raw: str) -> None:
    with pytest.raises(ConfigError, match=ENV_CONFIG):
        AdapterSettings.from_env({ENV_CONFIG: raw})


def test_settings_are_frozen() -> None:
    s = AdapterSettings.build("static")
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="frozen"):
        s.metrics = False


def test_catch_up_window_from_its_variable() -> None:
    env = {ENV_POLICY: "static", ENV_VARS["draft_catch_up_window"]: "48", ENV_VARS["draft_catch_up"]: "lazy"}
    s = AdapterSettings.from_env(env)
    assert s is not None and (s.draft_catch_up, s.draft_catch_up_window) == ("lazy", 48)
    assert AdapterSettings.build("static").draft_catch_up_window == 32
    with pytest.raises(ConfigError) as info:
        AdapterSettings.from_env({ENV_POLICY: "static", "SPECPOLICY_DRAFT_CATCH_UP_WINDOW": "-3"})
    # the field and the variable it came from, with the range
    assert str(info.value) == (
        "draft_catch_up_window (SPECPOLICY_DRAFT_CATCH_UP_WINDOW): must be from 1 to 4,096 (got '-3')"
    )


def test_trace_size_from_its_variable_is_named_with_its_range() -> None:
    with pytest.raises(ConfigError) as info:
        AdapterSettings.from_env({ENV_POLICY: "static", "SPECPOLICY_TRACE_MAX_BYTES": "-3"})
    assert str(info.value) == (
        "trace_max_bytes (SPECPOLICY_TRACE_MAX_BYTES): must be from 4,096 to 1,099,511,627,776 bytes "
        "(got '-3')"
    )
    # a bad value in the serialised config (no variable of its own) names the field alone
    with pytest.raises(ConfigError, match=r"^trace_max_bytes: must be from 4,096 "):
        AdapterSettings.from_env({ENV_CONFIG: '{"policy": "static", "trace_max_bytes": -3}'})


@pytest.mark.parametrize(
    ("field", "value", "bound"),
    [
        ("decide_budget_s", 5e-324, "0.00001"),
        ("decide_budget_s", 1e-6, "0.00001"),
        ("watchdog_s", 5e-324, "0.01"),
        ("watchdog_s", 0.001, "0.01"),
    ],
)
def test_timing_settings_below_their_floor_are_a_config_error_naming_the_field(
    field: str, value: float, bound: str
) -> None:
    with pytest.raises(ConfigError, match=rf"{field}.*{bound}"):
        AdapterSettings.build("static", **{field: value})
