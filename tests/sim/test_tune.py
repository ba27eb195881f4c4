"""``specpolicy tune``: the search space from the config model, and a tuned config that validates."""

from __future__ import annotations

import json
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from specpolicy.cli import main
from specpolicy.errors import ConfigError
from specpolicy.mode import MAX_NUM_STEPS
from specpolicy.policy import PolicyConfig
from specpolicy.registry import make_policy, parse_config
from specpolicy.sim.tune import Param, parse_param_ranges, search_space, tune


class Toy(PolicyConfig):
    name: Literal["toy"] = "toy"
    depth: int = Field(3, ge=1, le=MAX_NUM_STEPS)
    alpha: float = Field(0.2, gt=0.0, le=1.0)
    limit: int = Field(48, ge=1)
    offset: float = 0.0
    enabled: bool = True
    maybe: int | None = None
    steps: tuple[int, ...] = (1, 2)


TOY = Toy.model_validate({})


def test_search_space_comes_from_types_and_constraints() -> None:
    space = {p.name: p for p in search_space(Toy, TOY, max_steps=5)}
    assert set(space) == {"depth", "alpha", "limit", "offset", "enabled"}  # no None default, no tuple
    assert (space["depth"].kind, space["depth"].lo, space["depth"].hi) == (
        "int",
        1,
        5,
    )  # capped at the profile
    assert space["alpha"].kind == "float" and 0 < space["alpha"].lo and space["alpha"].hi == 1.0
    assert (space["limit"].lo, space["limit"].hi) == (12, 192) and space["limit"].log
    assert (space["offset"].lo, space["offset"].hi) == (-4, 4)
    assert space["enabled"].kind == "bool"


def test_param_overrides_replace_ranges_and_unknown_fields_are_named() -> None:
    space = {p.name: p for p in search_space(Toy, TOY, max_steps=5, overrides={"limit": (2.0, 4.0)})}
    assert (space["limit"].lo, space["limit"].hi) == (2.0, 4.0)
    with pytest.raises(ConfigError, match="nosuch"):
        search_space(Toy, TOY, max_steps=5, overrides={"nosuch": (1.0, 2.0)})
    with pytest.raises(ConfigError, match="FIELD=LO:HI"):
        parse_param_ranges(["limit=9:2"])
    assert parse_param_ranges(["limit=2:9"]) == {"limit": (2.0, 9.0)}


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_samples_stay_in_range_and_type(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for p in (Param("a", "int", 1, 7), Param("b", "float", 0.01, 10.0, log=True), Param("c", "bool", 0, 1)):
        v = p.sample(rng)
        assert p.lo <= v <= p.hi
        assert type(v) is {"int": int, "float": float, "bool": bool}[p.kind]


def test_tune_returns_a_valid_config_no_worse_than_the_default() -> None:
    res = tune(
        "hysteresis",
        profile="h200-llama8b",
        workload="sweep",
        concurrency=(4, 128),
        duration_s=2.0,
        budget=5,
        decide_cost_us=0.2,
        seed=1,
    )
    assert res.default.config == parse_config("hysteresis").model_dump(mode="json")
    assert len(res.trials) == 5
    assert res.best.score >= res.default.score
    assert res.best.score == max(t.score for t in res.trials)
    cfg = parse_config(res.best.config)
    make_policy(cfg)
    assert cfg.name == "hysteresis"
    again = tune(
        "hysteresis",
        profile="h200-llama8b",
        workload="sweep",
        concurrency=(4, 128),
        duration_s=2.0,
        budget=5,
        decide_cost_us=0.2,
        seed=1,
    )
    assert again.best.config == res.best.config and again.best.score == res.best.score


def test_tpot_objective_minimises() -> None:
    res = tune(
        "threshold",
        profile="h200-llama8b",
        workload="sweep",
        concurrency=(32,),
        duration_s=3.0,
        budget=4,
        decide_cost_us=0.2,
        objective="tpot_p99",
    )
    assert res.best.metric == min(t.metric for t in res.trials)


def test_bad_tune_requests() -> None:
    with pytest.raises(ConfigError, match="--slo-tpot-ms"):
        tune("threshold", profile="h200-llama8b", workload="ramp", objective="goodput")
    with pytest.raises(ConfigError, match="--objective"):
        tune("threshold", profile="h200-llama8b", workload="ramp", objective="latency")
    with pytest.raises(ConfigError, match="no numeric parameters"):
        tune("schedule", profile="h200-llama8b", workload="ramp")
    with pytest.raises(ConfigError, match="--budget"):
        tune("threshold", profile="h200-llama8b", workload="ramp", budget=0)


def test_tune_cli_prints_json_that_check_config_accepts(capsys: Any) -> None:
    rc = main(
        [
            "tune",
            "--policy",
            "threshold",
            "--profile",
            "h200-llama8b",
            "--workload",
            "sweep",
            "--concurrency",
            "8,96",
            "--duration",
            "2",
            "--budget",
            "3",
            "--decide-cost-us",
            "0.2",
            "--objective",
            "goodput",
            "--slo-tpot-ms",
            "30",
        ]
    )
    assert rc == 0
    captured = capsys.readouterr()
    cfg = json.loads(captured.out)
    assert cfg["name"] == "threshold"
    assert "[3/3]" in captured.err and "use it: " in captured.err
    assert main(["check-config", json.dumps(cfg)]) == 0


def test_tune_compares_the_tuned_config_with_the_alternatives_and_says_whether_to_use_it(capsys: Any) -> None:
    argv = ["tune", "--policy", "hysteresis", "--profile", "h200-llama8b", "--workload", "sweep",
            "--concurrency", "4,128", "--duration", "3", "--budget", "3", "--jobs", "1"]
    assert main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    head = next(i for i, line in enumerate(err) if line.startswith("throughput (output tok/s"))
    table = err[head + 1:-1]
    values: dict[str, float] = {}
    for line in table:
        role, rest = line[2:20].strip(), line[20:].split()
        assert rest[1:3] == ["output", "tok/s"]  # the unit on every row
        values[role] = float(rest[0])
    roles = {"tuned", "default config", "cost_model default", "best fixed depth", "no speculation"}
    assert set(values) == roles
    best_rival = max(v for k, v in values.items() if k != "tuned")
    verdict = err[-1]
    # derived from the printed numbers (4 significant digits, hence the slack), with the 0.5% tie
    if values["tuned"] < best_rival * 0.995 * 0.999:
        assert verdict.startswith("use it: no; ")
    elif values["tuned"] > best_rival * 0.995 * 1.001:
        assert verdict.startswith("use it: yes")
