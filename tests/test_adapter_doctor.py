"""``specpolicy doctor`` without engines, and the smoke test's comparison rule (fed made-up runs)."""

from __future__ import annotations

import importlib.util
import io
import json
from typing import Any

import pytest

from specpolicy.adapters.sglang.smoke import RUNS, agreement, compare, smoke_test
from specpolicy.cli import main


def test_agreement_counts_tokens_before_the_first_divergence() -> None:
    assert agreement([[1, 2, 3, 4]], [[1, 2, 3, 4]]) == 1.0
    assert agreement([[1, 2, 9, 4]], [[1, 2, 3, 4]]) == 0.5  # later equal tokens do not count
    assert agreement([[1, 2], [5, 6, 7, 8]], [[1, 2], [5, 0, 7, 8]]) == (1.0 + 0.25) / 2
    assert agreement([[1, 2, 3]], [[1, 2]]) == pytest.approx(2 / 3)  # a shorter output is a divergence
    assert agreement([], []) == 0.0 and agreement([[1]], [[1], [2]]) == 0.0


def _runs(on: list[list[int]], off: list[list[int]], sw: list[list[int]]) -> dict[str, dict[str, Any]]:
    ref = on
    return {
        "reference": {"tokens": ref, "tokens_per_s": 100.0},
        "on": {"tokens": on, "tokens_per_s": 150.0},
        "off": {"tokens": off, "tokens_per_s": 90.0},
        "switching": {"tokens": sw, "tokens_per_s": 120.0},
    }


def test_switching_passes_when_it_is_no_worse_than_the_static_runs_noise_floor() -> None:
    on, off = [[1, 2, 3, 4]], [[1, 2, 7, 7]]  # on and off already differ at token 3 (noise floor 0.5)
    res = compare(_runs(on, off, [[1, 2, 3, 9]]))  # agrees 0.75 with on, 0.5 with off
    assert res["ok"] and res["agreement"]["on_vs_off"] == 0.5
    assert res["speed"]["off"]["vs_reference"] == pytest.approx(0.9)
    bad = compare(_runs(on, on, [[1, 9, 3, 4]]))  # static runs identical, switching diverges at token 2
    assert not bad["ok"] and "FAIL" in bad["verdict"]


def test_smoke_runs_four_engines_with_the_right_policies() -> None:
    seen: list[dict[str, Any]] = []

    def runner(spec: dict[str, Any]) -> dict[str, Any]:
        seen.append(spec)
        return {"tokens": [[1, 2, 3]] * len(spec["prompts"]), "tokens_per_s": 10.0, "seconds": 1.0}

    res = smoke_test("m", "d", num_steps=4, runner=runner)
    assert [s["speculative"] for s in seen] == [False, True, True, True]
    assert [s["policy"] for s in seen] == [
        None,
        None,
        {"name": "static", "num_steps": 0},
        {"name": "alternate", "depths": [0, 4], "period": 1},
    ]
    assert res["ok"] and set(res["runs"]) == set(RUNS)


@pytest.mark.skipif(
    importlib.util.find_spec("sglang") is not None or importlib.util.find_spec("vllm") is not None,
    reason="checks the report when no engine is installed",
)
def test_doctor_without_engines_says_so_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "SGLang: not installed" in out and "no engine is installed here" in out
    assert main(["doctor", "--engine", "sglang", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["sglang"]["version"] is None


def test_smoke_without_model_is_a_usage_error() -> None:
    with pytest.raises(SystemExit, match="--smoke needs --model"):
        main(["doctor", "--smoke"])


def test_report_writes_to_the_given_stream() -> None:
    from specpolicy.adapters.doctor import report

    buf = io.StringIO()
    report(engine="sglang", out=buf)
    assert buf.getvalue().startswith("SGLang: ")
