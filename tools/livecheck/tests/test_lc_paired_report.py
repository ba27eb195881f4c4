"""specpolicy_livecheck.paired_report: a side-by-side run's batches turned into the report's tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from specpolicy_livecheck import paired_report as PR


def _rows(*vals: float, requests: int = 4, lossless: int | None = None) -> list[dict[str, Any]]:
    return [
        {
            "repeat": r,
            "tok_s": v,
            "requests": requests,
            "lossless": requests if lossless is None else lossless,
        }
        for r, v in enumerate(vals)
    ]


def _run() -> dict[str, Any]:
    # the host's speed doubles in repeat 1: the ratios must not move
    return {
        "variants": ["base_v1", "off_v1", "on_v1", "cm_v1", "plain_v1"],
        "engines": {"base_v1": {"ready": True, "engine_up_s": 61.0}},
        "batches": {
            "base_v1": {"1": _rows(100, 200, 100), "16": _rows(1000, 2000, 1000)},
            "off_v1": {"1": _rows(97, 194, 96), "16": _rows(970, 1940, 980)},
            "on_v1": {"1": _rows(150, 300, 150), "16": _rows(800, 1600, 800)},
            "plain_v1": {"1": _rows(152, 304, 150), "16": _rows(810, 1610, 800)},
            "cm_v1": {"1": _rows(147, 290, 150), "16": _rows(990, 1960, 985, lossless=3)},
        },
    }


def test_the_goal_ratios_are_taken_repeat_by_repeat_against_the_better_fixed_engine() -> None:
    sec = PR.section(_run(), device="NVIDIA H200")
    r = sec["ratios"]
    assert r["static-0 / never"]["by_c"]["1"] == {"median": 0.97, "min": 0.96, "max": 0.97, "n": 3}
    assert r["static-0 / never"]["met"] is True
    # at 1 request static is the better engine, at 16 never is
    assert r["cost_model / max(never, static)"]["by_c"]["1"]["median"] == pytest.approx(0.98)
    assert r["cost_model / max(never, static)"]["by_c"]["16"]["min"] == pytest.approx(0.98)
    assert r["cost_model / max(never, static)"]["met"] is True
    assert r["static / sglang-static"]["by_c"]["1"]["min"] == pytest.approx(150 / 152, abs=1e-4)
    assert "hysteresis / max(never, static)" not in r  # not measured: no row, not a pass
    assert sec["perf"]["never"] == {"1": 100, "16": 1000}
    assert sec["perf_spread"]["static-0"]["16"] == [970, 1940]
    assert sec["policy_life"] == "engine" and sec["device"] == "NVIDIA H200"
    assert sec["engine_up_s"] == {"never": 61.0}


def test_a_missed_goal_and_a_lossy_batch_are_reported() -> None:
    run = _run()
    run["batches"]["off_v1"]["16"] = _rows(900, 1800, 900)
    run["batches"]["off_v1"]["16"][1]["tok_s"] = 1900.0
    sec = PR.section(run)
    assert sec["ratios"]["static-0 / never"]["by_c"]["16"]["median"] == 0.9
    assert sec["ratios"]["static-0 / never"]["met"] is False
    assert sec["lossless"]["cost_model"] == {"requests": 24, "lossless": 21, "errors": 0}
    assert sec["lossless_all"] is False
    md = PR.markdown("v1/triton", sec)
    assert "| static-0 / never | 0.95 |" in md and "| no |" in md
    assert "Lossless: 117 of 120 requests" in md


def test_two_variants_of_one_policy_are_refused() -> None:
    run = _run()
    run["batches"]["on"] = run["batches"]["on_v1"]
    with pytest.raises(ValueError, match="both measure 'static'"):
        PR.section(run)


def test_the_command_merges_the_section_keeping_every_other_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "ab-paired.json"
    src.write_text(json.dumps(_run()))
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"perf": {"v1/triton": {"never": {"1": 1.0}}}, "paired": {"v2/triton": {}}}))
    md = tmp_path / "p.md"
    assert PR.main([str(src), "--key", "v1/triton", "--report", str(report), "--md", str(md)]) == 0
    got = json.loads(report.read_text())
    assert got["perf"] == {"v1/triton": {"never": {"1": 1.0}}} and "v2/triton" in got["paired"]
    assert got["paired"]["v1/triton"]["ratios"]["static-0 / never"]["met"] is True
    assert md.read_text() == capsys.readouterr().out


def test_a_file_that_is_not_a_paired_run_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert PR.main([str(bad), "--key", "v1/triton"]) == 2
    assert "x.json" in capsys.readouterr().err


def test_a_run_of_both_paths_is_reported_path_by_path() -> None:
    run = _run()
    run["batches"]["on"] = run["batches"]["on_v1"]
    sec = PR.section(run, only=["base_v1", "on", "off_v1"])
    assert set(sec["variants"]) == {"never", "static", "static-0"}
    with pytest.raises(ValueError, match=r"\['plain'\] are not in the run"):
        PR.section(run, only=["base_v1", "plain"])


def test_an_eagle3_off_engine_is_static_0_of_its_own_key() -> None:
    run = _run()
    run["batches"]["off_eagle3_v1"] = {"1": _rows(90, 184, 91), "16": _rows(950, 1800, 940)}
    with pytest.raises(ValueError, match="both measure 'static-0'"):
        PR.section(run)
    sec = PR.section(run, only=["base_v1", "off_eagle3_v1"])
    by_c = sec["ratios"]["static-0 / never"]["by_c"]
    assert by_c["1"]["median"] == 0.91 and by_c["16"]["min"] == 0.9
    assert sec["ratios"]["static-0 / never"]["met"] is False


def test_a_level_left_out_is_gone_from_every_table_and_its_reason_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run()
    run["batches"]["off_v1"]["16"] = _rows(500, 1000, 500)  # a level that is not like for like
    sec = PR.section(run, leave_out={"16": "queued"})
    assert sec["ratios"]["static-0 / never"]["met"] is True  # the level would fail it
    assert all("16" not in by_c for by_c in sec["perf"].values())
    assert all("16" not in r["by_c"] for r in sec["ratios"].values())
    assert sec["left_out"] == {"16": "queued"}
    assert sec["lossless"]["never"]["requests"] == 24  # its requests were still checked against the oracle
    with pytest.raises(ValueError, match=r"levels \['64'\] to leave out are not in the run"):
        PR.section(run, leave_out={"64": "x"})
    src = tmp_path / "ab-paired.json"
    src.write_text(json.dumps(run))
    assert PR.main([str(src), "--key", "v1/triton", "--leave-out", "16"]) == 2
    assert "LEVEL=REASON" in capsys.readouterr().err
    report = tmp_path / "report.json"
    report.write_text("{}")
    args = ["--leave-out", "16=the batch queued", "--commit", "abc1234", "--report", str(report)]
    assert PR.main([str(src), "--key", "v1/triton", *args]) == 0
    got = json.loads(report.read_text())["paired"]["v1/triton"]
    assert got["left_out"] == {"16": "the batch queued"} and got["specpolicy"] == "abc1234"


def _timed(steps: int, run_us: float, result_us: float) -> dict[str, Any]:
    return {
        "t": {
            "Scheduler.run_batch": [steps, steps * run_us / 1e6],
            "Scheduler.process_batch_result": [steps, steps * result_us / 1e6],
        }
    }


def test_host_time_per_step_is_per_scheduler_step_and_tabled_per_level() -> None:
    run = _run()
    for i, b in enumerate(run["batches"]["base_v1"]["1"]):
        b["host"] = _timed(100 + i, 3000.0, 100.0)
    for b in run["batches"]["off_v1"]["1"]:
        b["host"] = _timed(50, 3200.0, 180.0)
    run["batches"]["off_v1"]["1"][0]["host"] = {"t": {}}  # a batch the timers missed: left out
    sec = PR.section(run)
    assert sec["host_us_per_step"]["never"]["1"] == {
        "Scheduler.process_batch_result": 100.0,
        "Scheduler.run_batch": 3000.0,
    }
    assert sec["host_us_per_step"]["static-0"]["1"]["Scheduler.process_batch_result"] == 180.0
    assert "16" not in sec["host_us_per_step"]["never"] and "static" not in sec["host_us_per_step"]
    md = PR.markdown("v1/triton", sec)
    assert "Host time per scheduler step at 1 requests" in md
    assert "| Scheduler.process_batch_result | 100.0 | 180.0 |" in md


def test_a_level_whose_batches_all_made_unequal_passes_misses_its_goal_and_says_why() -> None:
    run = _run()
    for rows in run["batches"].values():
        for b in rows["16"]:
            b["passes"] = 2
    for b in run["batches"]["off_v1"]["16"]:
        b["passes"] = 1
    sec = PR.section(run)
    r = sec["ratios"]["static-0 / never"]
    assert r["by_c"]["16"]["median"] is None and r["by_c"]["16"]["unequal_passes"] == 3
    assert r["met"] is False  # a level with no comparable batch is not a pass
    assert "| -, 3 left out: unequal passes |" in PR.markdown("v1/triton", sec)


def test_the_eagle3_policy_engines_and_the_draft_tree_report_under_the_goal_labels() -> None:
    run = _run()
    tree = {
        "base_v1": run["batches"]["base_v1"],
        "off_eagle3tree_v1": {"1": _rows(96, 190, 97), "16": _rows(960, 1900, 950)},
        "on_eagle3tree_v1": {"1": _rows(150, 300, 150), "16": _rows(700, 1400, 700)},
        "cm_eagle3tree_v1": {"1": _rows(148, 297, 149), "16": _rows(940, 1880, 930)},
    }
    sec = PR.section({"batches": tree})
    assert set(sec["variants"]) == {"never", "static-0", "static", "cost_model"}
    r = sec["ratios"]
    assert r["static-0 / never"]["by_c"]["16"] == {"median": 0.95, "min": 0.95, "max": 0.96, "n": 3}
    # at 1 request against the tree's static, at 16 against never
    assert r["cost_model / max(never, static)"]["by_c"]["1"]["median"] == pytest.approx(0.99)
    assert r["cost_model / max(never, static)"]["by_c"]["16"]["median"] == pytest.approx(0.94)
    assert r["cost_model / max(never, static)"]["met"] is False


def test_the_acceptance_of_each_batch_shows_which_engines_did_the_same_thing() -> None:
    run = _run()
    for v, lens in (("on_v1", (2.52, 2.50, 2.51)), ("cm_v1", (2.49, 1.0, 2.52))):
        for row, a in zip(run["batches"][v]["1"], lens, strict=True):
            row["accept_len"] = a
    run["batches"]["cm_v1"]["16"][0]["accept_len"] = 1.0
    run["batches"]["base_v1"]["1"][0]["accept_len"] = None  # a speculation-free engine reports none
    sec = PR.section(run)
    assert sec["accept_len_spread"] == {
        "static": {"1": [2.50, 2.52]},
        "cost_model": {"1": [1.0, 2.52], "16": [1.0, 1.0]},
    }
    md = PR.markdown("v1/triton", sec)
    assert "| static | 2.50-2.52 | - |" in md
    assert "| cost_model | 1.00-2.52 | 1.00-1.00 |" in md
    assert "| never |" not in md.split("Acceptance length")[1].split("| ratio")[0]
    # a run without acceptance figures prints no such table
    assert "Acceptance length" not in PR.markdown("v1/triton", PR.section(_run()))


def _v2_run() -> dict[str, Any]:
    """A v2-only release's overlap run with the EAGLE-3 head: SGLang's adaptive mode beside ours."""
    return {
        "variants": [
            "never_ov",
            "sglang_eagle3_ov",
            "adaptive_eagle3_ov",
            "static_eagle3_ov",
            "cm_eagle3_ov",
        ],
        "engines": {},
        "batches": {
            "never_ov": {"1": _rows(100, 100, 100), "64": _rows(1000, 1000, 1000)},
            "sglang_eagle3_ov": {"1": _rows(160, 160, 160), "64": _rows(700, 700, 700)},
            "adaptive_eagle3_ov": {"1": _rows(150, 150, 150), "64": _rows(990, 1010, 1000)},
            "static_eagle3_ov": {"1": _rows(157, 158, 157), "64": _rows(690, 690, 690)},
            "cm_eagle3_ov": {"1": _rows(156, 156, 156), "64": _rows(980, 985, 990)},
        },
    }


def test_a_v2_only_release_key_is_held_to_its_own_goals_with_sglang_adaptive_the_anchor() -> None:
    goals = PR.goals_for("sglang-0.5.17/overlap/eagle3/triton")
    assert goals is PR.GOALS_V2 and PR.goals_for("v1/triton") is PR.GOALS
    assert PR.goals_for("sglang-0.5.12.post1/v1/triton") is PR.GOALS  # before the v2-only releases
    sec = PR.section(_v2_run(), goals=goals)
    assert sec["variants"]["sglang-adaptive"] == "adaptive_eagle3_ov"
    r = sec["ratios"]
    # against SGLang's adaptive engine: ahead at 1 request, behind at 64 -> missed (goal 1.0)
    assert r["cost_model / sglang-adaptive"]["by_c"]["1"]["median"] == pytest.approx(156 / 150, abs=1e-3)
    assert r["cost_model / sglang-adaptive"]["by_c"]["64"]["median"] < 1.0
    assert r["cost_model / sglang-adaptive"]["met"] is False
    # static at 157/160 = 0.981 meets 0.98 at 1 request, 690/700 = 0.986 at 64
    assert r["static / sglang-static"]["goal"] == 0.98 and r["static / sglang-static"]["met"] is True
    assert r["cost_model / max(never, static)"]["goal"] == 0.97


def test_a_key_naming_no_release_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="sglang-next"):
        PR.goals_for("sglang-next/overlap/draft/triton")
