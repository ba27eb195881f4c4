"""``specpolicy doctor``'s vLLM part: the smoke-test plan and verdict, without vLLM or a GPU."""

from __future__ import annotations

import io
from typing import Any

import pytest

from specpolicy import parse_config
from specpolicy.adapters.vllm import doctor


def fake_result(name: str, token_ids: list[list[int]], seconds: float) -> dict[str, Any]:
    return {"name": name, "token_ids": token_ids, "tokens": sum(map(len, token_ids)), "seconds": seconds}


REF = [[1, 2, 3], [4, 5, 6]]


def test_identical_outputs_pass_and_speed_is_relative_to_the_reference() -> None:
    out = doctor.compare_runs(
        [
            fake_result("reference", REF, 2.0),
            fake_result("static", REF, 1.0),
            fake_result("off", REF, 2.5),
            fake_result("switching", REF, 1.25),
        ]
    )
    assert out["ok"] and "all outputs identical" in out["verdict"]
    speed = {r["name"]: round(r["speedup"], 3) for r in out["runs"]}
    assert speed == {"reference": 1.0, "static": 2.0, "off": 0.8, "switching": 1.6}


def test_switching_may_not_diverge_more_than_static_speculation() -> None:
    noisy = [[1, 2, 3], [4, 5, 9]]  # one near-tie flipped by kernel numerics, in the static run too
    ok = doctor.compare_runs(
        [
            fake_result("reference", REF, 1.0),
            fake_result("static", noisy, 1.0),
            fake_result("off", noisy, 1.0),
            fake_result("switching", noisy, 1.0),
        ]
    )
    assert ok["ok"] and "1/2 identical" in ok["verdict"]
    bad = doctor.compare_runs(
        [
            fake_result("reference", REF, 1.0),
            fake_result("static", REF, 1.0),
            fake_result("off", REF, 1.0),
            fake_result("switching", noisy, 1.0),
        ]
    )
    assert not bad["ok"] and "please report" in bad["verdict"]


def test_smoke_plan_runs_valid_policies_that_switch_as_the_batch_shrinks() -> None:
    plan = doctor.smoke_plan("target", "drafter", "eagle3", 3, num_prompts=8)
    assert [r["name"] for r in plan] == ["reference", "static", "off", "switching"]
    assert "engine" not in plan[0]  # the reference runs without speculation
    assert len({tuple(r["max_tokens"]) for r in plan}) == 1 and len(set(plan[0]["max_tokens"])) == 8
    for run in plan[1:]:
        engine = run["engine"]
        assert engine["scheduler_cls"] == "specpolicy.adapters.vllm.Scheduler"
        assert engine["speculative_config"]["model"] == "drafter"
        cfg = parse_config(engine["additional_config"]["specpolicy"]["policy"])
        assert max(cfg.candidate_steps()) <= 3
    switching = parse_config(plan[3]["engine"]["additional_config"]["specpolicy"]["policy"])
    depths_by_batch = [switching.depth_for(b) for b in range(8, 0, -1)]  # type: ignore[attr-defined]
    assert len(set(depths_by_batch)) >= 3  # it really switches, including to 0 (off)
    assert 0 in depths_by_batch


def test_smoke_test_with_an_injected_runner_and_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def runner(spec: dict[str, Any]) -> dict[str, Any]:
        calls.append(spec["name"])
        return fake_result(spec["name"], [[len(p)] for p in spec["prompts"]], 1.0)

    monkeypatch.setattr(doctor, "installed_version", lambda: "0.33.0")
    monkeypatch.setattr(doctor, "gpu_name", lambda: "Fake GPU")
    monkeypatch.setattr(doctor, "check_targets", lambda: {"vllm.x": None})
    monkeypatch.setattr(doctor, "_entry_point_registered", lambda: True)
    monkeypatch.setattr(doctor, "_scheduler_problem", lambda: None)
    buf = io.StringIO()
    res = doctor.report(smoke=True, model="m", draft_model="d", out=buf, runner=runner)
    assert calls == ["reference", "static", "off", "switching"]
    assert res["ok"] and res["smoke"]["ok"]
    assert "smoke switching" in buf.getvalue()


def test_report_without_vllm_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "installed_version", lambda: None)
    buf = io.StringIO()
    res = doctor.report(smoke=True, out=buf)
    assert not res["ok"]
    assert any("vLLM is not installed" in p for p in res["problems"])
    assert any("smoke test skipped" in p for p in res["problems"])
    assert "vLLM: not installed" in buf.getvalue()
