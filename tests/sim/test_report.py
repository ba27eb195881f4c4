"""The report: the JSON document's shape and the ratios, recomputed independently from the runs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from specpolicy.registry import available_policies, get_entry
from specpolicy.sim.report import REQUIRED_RUN_KEYS, format_table, rows, to_json
from specpolicy.sim.run import Simulation, SimulationSpec, run_simulation


@pytest.fixture(scope="module")
def sweep() -> Simulation:
    return run_simulation(
        SimulationSpec(
            profile="h200-llama8b",
            workload="sweep",
            concurrency=(2, 96),
            duration_s=3.0,
            decide_cost_us=0.5,
            jobs=1,
        ),
        progress=False,
    )


@pytest.fixture(scope="module")
def ramp() -> Simulation:
    return run_simulation(
        SimulationSpec(
            profile="h200-llama8b",
            workload="ramp",
            duration_s=8.0,
            decide_cost_us=0.5,
            jobs=1,
            policies=("hysteresis",),
        ),
        progress=False,
    )


def test_json_has_exactly_the_documented_shape(sweep: Simulation) -> None:
    doc = json.loads(json.dumps(to_json(sweep), allow_nan=False))
    assert doc["profile"] == "h200-llama8b" and doc["workload"] == "sweep" and doc["seed"] == 0
    assert isinstance(doc["runs"], list) and doc["runs"]
    types = {
        "policy": str,
        "output_tok_s": float,
        "tpot_ms_p50": float,
        "tpot_ms_p99": float,
        "ttft_ms_p50": float,
        "switches": int,
        "spec_step_share": float,
    }
    for run in doc["runs"]:
        assert set(REQUIRED_RUN_KEYS) <= set(run)
        for key, typ in types.items():
            assert isinstance(run[key], typ) or (typ is float and isinstance(run[key], int)), (key, run[key])
        assert run["concurrency"] in (2, 96)
        assert 0.0 <= run["spec_step_share"] <= 1.0
        assert run["switches"] >= 0
        assert run["tpot_ms_p50"] <= run["tpot_ms_p99"]


def test_time_varying_runs_have_null_concurrency(ramp: Simulation) -> None:
    doc = to_json(ramp)
    assert doc["workload"] == "ramp"
    assert {r["concurrency"] for r in doc["runs"]} == {None}


def test_every_comparator_is_reported_per_level(sweep: Simulation) -> None:
    labels = {r["policy"] for r in to_json(sweep)["runs"]}
    k = sweep.profile.max_steps
    expected = {"never", "oracle", "schedule-vllm", *(f"static-{i}" for i in range(k + 1))}
    # Every registered policy, except one that cannot run on its defaults (it is named in a note instead).
    names = available_policies()
    skipped = {n for n in names if any(note.startswith(f"{n} skipped") for note in sweep.notes)}
    # Diagnostic policies (switching stress tests such as `alternate`) are left out of the default set.
    diagnostic = {n for n in names if get_entry(n).config.diagnostic}
    assert "alternate" in diagnostic
    # Compositions (gate, clamp) combine policies that are compared already: left out too.
    composite = {n for n in names if get_entry(n).config.composite}
    assert {"gate", "clamp"} <= composite
    expected |= {n for n in available_policies() if n != "static"} - skipped - diagnostic - composite
    assert expected <= labels
    assert not diagnostic & labels
    assert not composite & labels
    for c in (2, 96):
        assert len([r for r in to_json(sweep)["runs"] if r["concurrency"] == c]) == len(labels)


def test_ratios_are_relative_to_best_static_and_oracle_of_the_same_level(sweep: Simulation) -> None:
    runs = to_json(sweep)["runs"]
    for c in (2, 96):
        level = {r["policy"]: r for r in runs if r["concurrency"] == c}
        best = max(v["output_tok_s"] for k, v in level.items() if k.startswith("static-"))
        oracle = level["oracle"]["output_tok_s"]
        for r in level.values():
            assert r["vs_best_static"] == pytest.approx(r["output_tok_s"] / best, abs=1e-3)
            assert r["vs_oracle"] == pytest.approx(r["output_tok_s"] / oracle, abs=1e-3)


def test_static_and_never_rows_behave_as_named(sweep: Simulation) -> None:
    for r in rows(sweep):
        if r.policy in ("never", "static-0"):
            assert r.spec_step_share == 0.0 and r.switches == 0
        elif r.policy.startswith("static-"):
            assert r.spec_step_share == 1.0 and r.switches == 0
        if r.policy in ("never", "oracle", "lookahead"):  # no decide() of their own
            assert r.decide_cost_us is None
        else:
            assert r.decide_cost_us == pytest.approx(0.5)


def test_table_lists_every_row_and_the_decide_charge(sweep: Simulation) -> None:
    text = format_table(sweep)
    for r in rows(sweep):
        assert any(line.startswith(r.policy + " ") for line in text.splitlines())
    assert "concurrency 2:" in text and "concurrency 96:" in text
    assert "fixed at 0.5 us" in text


def test_goodput_counts_only_requests_meeting_the_slo(sweep: Simulation) -> None:
    generous = {r.policy: r.goodput_tok_s for r in rows(sweep, slo_tpot_ms=1e9)}
    none = {r.policy: r.goodput_tok_s for r in rows(sweep, slo_tpot_ms=1e-9)}
    assert all(v == 0.0 for v in none.values())
    for o in sweep.outcomes:
        res = o.result
        assert generous is not None
        assert res.goodput_tok_s(1e9) == pytest.approx(res.completed_output_tokens.sum() / res.window_s)
    doc = to_json(sweep, slo_tpot_ms=20.0)
    assert all("goodput_tok_s" in r for r in doc["runs"])


def test_nan_metrics_become_null(tmp_path: Path) -> None:
    late = tmp_path / "late.jsonl"
    late.write_text(json.dumps({"arrival_s": 5.0, "prompt_tokens": 10, "output_tokens": 10}) + "\n")
    # A request file whose only request arrives after the window: nothing completes, TPOT is undefined.
    sim = run_simulation(
        SimulationSpec(
            profile="h200-llama8b",
            workload=str(late),
            duration_s=0.5,
            decide_cost_us=0.0,
            jobs=1,
            policies=(),
        ),
        progress=False,
    )
    doc = json.loads(json.dumps(to_json(sim), allow_nan=False))
    assert any(r["tpot_ms_p50"] is None for r in doc["runs"])
    assert all(math.isfinite(r["output_tok_s"]) for r in doc["runs"])


def test_a_registered_policy_without_valid_defaults_is_skipped_with_a_note(monkeypatch: Any) -> None:
    from specpolicy.errors import ConfigError
    from specpolicy.sim import comparators

    monkeypatch.setattr(comparators, "available_policies", lambda: ["threshold", "needs_config"])
    comps, notes = comparators.default_comparators(3)
    assert "threshold" in [c.label for c in comps]
    assert "needs_config" not in [c.label for c in comps]
    assert any(n.startswith("needs_config skipped") and "--policy" in n for n in notes)
    with pytest.raises(ConfigError, match="needs_config"):
        comparators.default_comparators(3, ["needs_config"])  # asked for explicitly: an error
