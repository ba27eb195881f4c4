"""Simulator-versus-live comparison helpers (specpolicy_livecheck.compare_sim)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from specpolicy_livecheck import compare_sim as C


def test_labels_map_live_policies_to_simulator_comparators() -> None:
    assert C.sim_label("never", None) == "never"
    assert C.sim_label("sglang-static", None) == "static-3"
    assert C.sim_label("static", {"name": "static", "num_steps": 3}) == "static-3"
    assert C.sim_label("static-0", {"name": "static", "num_steps": 0}) == "static-0"
    assert C.sim_label("cost_model", {"name": "cost_model", "steps": [3]}) == "cost_model"


def test_workload_is_the_live_batch() -> None:
    lines = [json.loads(x) for x in C.workload_lines(3, 128, 256, 0.7)]
    assert lines == [{"arrival_s": 0.0, "prompt_tokens": 128, "output_tokens": 256, "acceptance": 0.7}] * 3


def test_relative_errors() -> None:
    live = {"a": {1: 100.0, 8: 200.0}, "b": {1: 50.0}}
    pred = {"a": {1: 110.0, 8: 150.0}}
    err = C.relative_errors(live, pred)
    assert err["a"]["by_concurrency"] == {1: 0.1, 8: -0.25}
    assert err["a"]["mean_abs"] == pytest.approx(0.175) and err["a"]["max_abs"] == pytest.approx(0.25)
    assert "b" not in err  # nothing predicted: no error claimed


@pytest.mark.skipif(
    shutil.which("specpolicy") is None, reason="the specpolicy console script is not installed"
)
def test_end_to_end_against_a_shipped_profile(tmp_path: Path) -> None:
    rep = {"perf": {"v2": {"never": {"4": 700.0}, "static": {"4": 1300.0}, "hysteresis": {"4": 1250.0}}}}
    (tmp_path / "r.json").write_text(json.dumps(rep))
    out = tmp_path / "c.json"
    rc = C.main(
        [
            "--report",
            str(tmp_path / "r.json"),
            "--profile",
            "h200-llama8b",
            "--path",
            "v2",
            "--acceptance",
            "0.7",
            "--feedback-lag",
            "1",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    res = json.loads(out.read_text())
    for pol in ("never", "static", "hysteresis"):
        p, v = res["predicted"][pol]["4"], rep["perf"]["v2"][pol]["4"]
        assert res["errors"][pol]["by_concurrency"]["4"] == pytest.approx((p - v) / v, abs=1e-4)


def test_perf_table_reads_backend_keys_and_the_first_reports() -> None:
    new = {"perf": {"v2/triton": {"never": {"4": 700.0}}, "v2/flashinfer": {"never": {"4": 650.0}}}}
    old = {"perf": {"v2": {"never": {"4": 690.0}}}}
    assert C.perf_table(new, "v2") == {"never": {4: 700.0}}
    assert C.perf_table(new, "v2/flashinfer") == {"never": {4: 650.0}}
    assert C.perf_table(old, "v2") == {"never": {4: 690.0}}
