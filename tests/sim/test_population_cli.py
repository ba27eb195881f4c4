"""``--acceptance`` and the request-shape options end to end, their errors, and best-fixed in the reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specpolicy.cli import main
from specpolicy.errors import ConfigError
from specpolicy.sim.acceptance import BetaAcceptance, BetaMixture
from specpolicy.sim.scenario import RequestShape
from specpolicy.sim.scenario_options import parse_acceptance, request_shape
from specpolicy.sim.tune import tune

FAST = [
    "--profile",
    "h200-llama8b",
    "--duration",
    "3",
    "--decide-cost-us",
    "1",
    "--jobs",
    "1",
    "--no-progress",
]
MIXED = ["--acceptance", "mean=0.9,weight=0.5", "--acceptance", "mean=0.2,weight=0.5"]


def _simulate(tmp_path: Path, capsys: Any, *extra: str) -> tuple[str, dict[str, Any]]:
    out = tmp_path / "r.json"
    assert (
        main(
            ["simulate", "--concurrency", "1,16", "--policy", "threshold", "--json", str(out), *FAST, *extra]
        )
        == 0
    )
    return capsys.readouterr().out, json.loads(out.read_text())


def test_a_mixed_population_is_simulated_and_recorded(tmp_path: Path, capsys: Any) -> None:
    text, doc = _simulate(tmp_path, capsys, *MIXED, "--prompt-tokens", "2048", "--output-spread", "0.2")
    assert "requests: acceptance mixture 0.5 x Beta(9, 1) + 0.5 x Beta(2, 8), mean 0.55" in text
    assert "prompt 2048 tokens +-50%, output 256 tokens +-20%" in text
    assert doc["acceptance"]["mean"] == pytest.approx(0.55)
    assert [c["mean"] for c in doc["acceptance"]["mixture"]] == pytest.approx([0.9, 0.2])
    assert doc["request_shape"] == {
        "prompt_mean": 2048,
        "prompt_spread": 0.5,
        "output_mean": 256,
        "output_spread": 0.2,
        "source": "drawn",
    }
    _, ref = _simulate(tmp_path, capsys)
    assert ref["acceptance"] == {"alpha": 7.0, "beta": 3.0, "mean": 0.7}
    # The population reaches the engine: a different acceptance, different throughput.
    tok = {(r["policy"], r["concurrency"]): r["output_tok_s"] for r in doc["runs"]}
    tok_ref = {(r["policy"], r["concurrency"]): r["output_tok_s"] for r in ref["runs"]}
    assert tok[("static-3", 16)] != tok_ref[("static-3", 16)]
    assert tok[("never", 1)] != tok_ref[("never", 1)]  # longer prompts: slower prefills


def test_best_fixed_is_named_per_scenario_and_every_row_has_its_ratio(tmp_path: Path, capsys: Any) -> None:
    text, doc = _simulate(tmp_path, capsys, *MIXED)
    assert [r["concurrency"] for r in doc["references"]] == [1, 16]
    # each level's table names what its ratio column divides by: that level's best static-k
    heads = [line for line in text.splitlines() if line.startswith("policy ")]
    assert [h.split()[-1] for h in heads] == [r["best_fixed"] for r in doc["references"]]
    for ref in doc["references"]:
        level = [r for r in doc["runs"] if r["concurrency"] == ref["concurrency"]]
        statics = [r for r in level if r["policy"].startswith("static-")]
        best = max(statics, key=lambda r: r["output_tok_s"])
        assert ref["best_fixed"] == best["policy"]
        assert ref["best_fixed_tok_s"] == pytest.approx(best["output_tok_s"], abs=1e-3)
        oracle = next(r for r in level if r["policy"] == "oracle")
        assert ref["oracle_tok_s"] == pytest.approx(oracle["output_tok_s"], abs=1e-3)
        for r in level:
            assert r["vs_best_fixed"] == pytest.approx(r["output_tok_s"] / best["output_tok_s"], abs=1e-3)
            assert r["vs_best_fixed"] == r["vs_best_static"]


def test_the_default_population_adds_no_header_line(tmp_path: Path, capsys: Any) -> None:
    text, _ = _simulate(tmp_path, capsys)
    assert not any(line.startswith("requests:") for line in text.splitlines())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--acceptance", "mean=1.5"], "--acceptance: mean must be in (0, 1), got '1.5'"),
        (["--acceptance", "mean=0.5,concentration=0"], "concentration must be a finite number > 0"),
        (["--acceptance", "alpha=2"], "expected mean=M[,concentration=C][,weight=W] or alpha=A,beta=B"),
        (["--acceptance", "mean=0.5,alpha=2"], "not both"),
        (["--acceptance", "mean=0.5,width=2"], "unknown key 'width'"),
        (
            ["--acceptance", "mean=0.5", "--acceptance", "mean=0.2,weight=-1"],
            "weight must be a finite number > 0",
        ),
        (["--acceptance", '{"mean": true}'], "mean must be in (0, 1)"),
        (["--acceptance", "0.7"], "expected mean=M"),
        (["--prompt-tokens", "0"], "--prompt-tokens must be an integer >= 1"),
        (["--output-tokens", "-3"], "--output-tokens must be an integer >= 1"),
        (["--prompt-spread", "1"], "--prompt-spread must be in [0, 1)"),
        (["--output-spread", "-0.5"], "--output-spread must be in [0, 1)"),
    ],
)
def test_bad_population_options_fail_before_simulating(argv: list[str], message: str, capsys: Any) -> None:
    assert main(["simulate", *FAST, *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and "concurrency" not in capsys.readouterr().out


def test_the_forms_of_acceptance_agree() -> None:
    assert parse_acceptance(None) is None
    assert parse_acceptance(["alpha=7,beta=3"]) == BetaAcceptance(7.0, 3.0)
    assert parse_acceptance(['{"alpha": 7, "beta": 3}']) == BetaAcceptance(7.0, 3.0)
    one = parse_acceptance(["mean=0.35,concentration=20"])
    assert isinstance(one, BetaAcceptance) and (one.alpha, one.beta) == pytest.approx((7.0, 13.0))
    mix = parse_acceptance(["mean=0.9,weight=3", '{"alpha": 1, "beta": 4}'])
    assert isinstance(mix, BetaMixture) and mix.weights == pytest.approx((0.75, 0.25))
    assert mix.mean == pytest.approx(0.75 * 0.9 + 0.25 * 0.2)
    assert request_shape() is None
    assert request_shape(output_tokens=64) == RequestShape(output_mean=64)
    with pytest.raises(ConfigError, match="--prompt-tokens"):
        request_shape(prompt_tokens=1.5)  # type: ignore[arg-type]


def test_tune_takes_the_population(capsys: Any) -> None:
    common: dict[str, Any] = {
        "profile": "h200-llama8b",
        "workload": "sweep",
        "budget": 1,
        "duration_s": 3.0,
        "concurrency": (4,),
        "decide_cost_us": 1.0,
    }
    ref = tune("threshold", **common)
    low = tune("threshold", **common, acceptance=BetaAcceptance.from_mean(0.2))
    assert low.best.metric < ref.best.metric  # drafts accepted less often: fewer tokens per second
    assert (
        main(["tune", "--policy", "threshold", "--budget", "1", *FAST[:6], "--concurrency", "4", *MIXED]) == 0
    )
    assert json.loads(capsys.readouterr().out)["name"] == "threshold"
