"""Properties every registered policy must have, built-in or plugin, run over ``available_policies()``.

Each policy is tested with its default configuration and, where given below, extra configurations that reach
other code paths. A policy added to the registry (a new built-in or a plugin) is covered without editing this
file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy import (
    MAX_NUM_STEPS,
    ConfigError,
    Policy,
    PolicyConfig,
    SpecMode,
    StepStats,
    available_policies,
    make_policy,
    parse_config,
)
from specpolicy.policies import BUILTIN_ENTRIES
from specpolicy.registry import config_union, get_entry

#: Non-default configurations worth running through the generic properties too.
EXTRA_CONFIGS: dict[str, list[dict[str, Any]]] = {
    "static": [{"num_steps": 0}, {"num_steps": MAX_NUM_STEPS}],
    "threshold": [{"max_batch_size": 0, "num_steps": 1}],
    "hysteresis": [{"disable_at": 2, "enable_at": 1, "min_dwell_steps": 1, "num_steps": 7}],
    "schedule": [
        {"table": [[0, 3, 5], [4, 4, 0], [5, 100_000, 2]]},
        {"draft_len_schedule": {"2": 2, "16": 1}},
    ],
    "acceptance": [
        {"steps": [2, 5], "min_accept_length": 2.5, "probe_interval": 2, "ewma_alpha": 1.0},
        {"steps": [1], "lookahead": 0.0, "probe_interval": 1},
    ],
}


def _configs() -> list[Any]:
    out = []
    builtin = {e.name for e in BUILTIN_ENTRIES}
    for name in available_policies():
        marks: list[Any] = []
        if name not in builtin:  # a plugin may need fields without defaults; built-ins never do
            try:
                parse_config(name)
            except ConfigError as exc:
                marks = [pytest.mark.skip(reason=f"plugin {name} has no default config: {exc}")]
        out.append(pytest.param({"name": name}, id=name, marks=marks))
        for i, extra in enumerate(EXTRA_CONFIGS.get(name, [])):
            out.append(pytest.param({"name": name, **extra}, id=f"{name}-{i}"))
    return out


CONFIGS = _configs()

# -- inputs --

_junk = st.sampled_from([None, math.nan, math.inf, -math.inf, -1, -7.5, "x", True, 2**70, 0.5])
_count = st.integers(0, 600) | st.integers(-5, -1) | st.floats(allow_nan=True, allow_infinity=True) | _junk
_seconds = st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 1)
_acc_item = st.integers(-3, 70) | st.floats(allow_nan=True, allow_infinity=True) | st.none()
_acc_list = st.none() | st.lists(_acc_item, max_size=40) | st.just("oops") | st.just(12)


@st.composite
def adversarial_stats(draw: st.DrawFn) -> StepStats:
    """Anything a buggy adapter could pass through ``StepStats.fast``: wrong types, NaN, negatives."""
    fields: list[Any] = [
        draw(_count),
        draw(_count),
        draw(_seconds),
        draw(st.integers(0, 8) | _count),
        draw(_acc_list),
        draw(_acc_list),
        draw(_seconds),
        draw(st.none() | st.floats(allow_nan=True, allow_infinity=True)),
    ]
    return StepStats.fast(*fields)


@st.composite
def realistic_stats(draw: st.DrawFn) -> StepStats:
    """Well-formed steps with load and acceptance that move, so stateful policies actually change state."""
    b = draw(st.integers(0, 300))
    k = draw(st.integers(0, 6))
    n = draw(st.integers(1, 24))
    acc = None if k == 0 else draw(st.lists(st.integers(0, k), min_size=n, max_size=n))
    t = None if draw(st.booleans()) else draw(st.floats(1e-3, 0.2))
    L = draw(st.none() | st.floats(1, 32_000))
    return StepStats(b, draw(st.integers(0, 50)), L, k, acc, None, t)


def _run(policy: Policy, seq: Sequence[StepStats]) -> list[SpecMode]:
    return [policy.decide(s) for s in seq]


# -- properties --


@pytest.mark.parametrize("spec", CONFIGS)
def test_is_a_policy_with_ascending_candidate_steps(spec: dict[str, Any]) -> None:
    config = parse_config(spec)
    policy = make_policy(config)
    assert isinstance(policy, Policy)
    steps = config.candidate_steps()
    assert list(steps) == sorted(set(steps)) and steps
    assert all(type(k) is int and 0 <= k <= MAX_NUM_STEPS for k in steps)


@pytest.mark.parametrize("spec", CONFIGS)
@given(seq=st.lists(adversarial_stats() | realistic_stats(), min_size=1, max_size=60))
def test_decide_never_raises_and_returns_only_allowed_depths(
    spec: dict[str, Any], seq: list[StepStats]
) -> None:
    config = parse_config(spec)
    allowed = set(config.candidate_steps())
    policy = make_policy(config)
    for s in seq:
        mode = policy.decide(s)
        assert type(mode) is SpecMode
        assert mode.num_steps in allowed, (s, mode)


@pytest.mark.parametrize("spec", CONFIGS)
@settings(max_examples=30)
@given(seq=st.lists(realistic_stats() | adversarial_stats(), min_size=1, max_size=50))
def test_deterministic_across_fresh_instances_and_after_reset(
    spec: dict[str, Any], seq: list[StepStats]
) -> None:
    a, b = make_policy(spec), make_policy(spec)
    first = _run(a, seq)
    assert _run(b, seq) == first
    a.reset()
    assert _run(a, seq) == first


@pytest.mark.parametrize("spec", CONFIGS)
@settings(max_examples=20)
@given(seq=st.lists(realistic_stats(), min_size=1, max_size=30))
def test_config_round_trip_through_json_gives_an_equal_policy(
    spec: dict[str, Any], seq: list[StepStats]
) -> None:
    config = parse_config(spec)
    text = config.model_dump_json()
    again = parse_config(text)
    assert again == config and type(again) is type(config)
    assert _run(make_policy(text), seq) == _run(make_policy(config), seq)
    # the tagged union parses the same JSON to the same model
    assert config_union().validate_json(text) == config


@pytest.mark.parametrize("name", [e.name for e in BUILTIN_ENTRIES])
def test_config_model_is_frozen_and_rejects_unknown_fields(name: str) -> None:
    config = parse_config(name)
    assert isinstance(config, PolicyConfig) and config.name == name
    with pytest.raises(Exception, match="frozen"):
        config.name = "other"
    with pytest.raises(ConfigError, match=rf"{name}\.no_such_field: unknown field"):
        parse_config({"name": name, "no_such_field": 1})
    entry = get_entry(name)
    assert entry.config.summary(), f"{name}: its config needs a one-line description"
