"""The report's winners and its verdict line, from made-up rows whose answer is known."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from specpolicy.sim.verdict import standings, verdict


@dataclass(frozen=True)
class R:
    policy: str
    concurrency: int | None
    output_tok_s: float
    vs_best_static: float | None = None


def _level(c: int | None, tok: dict[str, float]) -> list[R]:
    best_static = max(v for k, v in tok.items() if k.startswith("static-"))
    return [R(k, c, v, v / best_static) for k, v in tok.items()]


LOW = {"never": 100.0, "static-0": 90.0, "static-3": 200.0, "cost_model": 190.0, "hysteresis": 180.0,
       "oracle": 210.0}
HIGH = {"never": 300.0, "static-0": 280.0, "static-3": 150.0, "cost_model": 266.0, "hysteresis": 280.0,
        "oracle": 281.0}


def test_winners_per_level_ignore_the_oracle() -> None:
    rows = _level(1, LOW) + _level(64, HIGH)
    low, high = standings(rows)
    assert (low.best_fixed, low.best_policy, low.best_depth) == (("static-3",), ("cost_model",), "static-3")
    assert (high.best_fixed, high.best_policy) == (("never",), ("hysteresis",))
    assert low.speculation_gain == pytest.approx(2.0) and high.speculation_gain == pytest.approx(0.5)


def test_policies_that_decide_alike_share_the_mark() -> None:
    (only,) = standings(_level(4, {"never": 1.0, "static-1": 2.0, "a": 1.5, "b": 1.5, "c": 1.4}))
    assert only.best_policy == ("a", "b") and only.best_fixed == ("static-1",)


def test_verdict_names_both_regimes_and_the_policy_closest_to_the_best_fixed_depth() -> None:
    text = verdict(_level(1, LOW) + _level(64, HIGH))
    assert text.startswith("verdict: speculation pays at concurrency 1 (best depth x2.00 over no speculation")
    assert "loses at 64 (best depth only x0.50)" in text
    # cost_model: 0.95 and 0.95 -> 0.95; hysteresis: 0.90 and 1.00 -> 0.949 (geometric mean)
    assert "best policy: cost_model, x0.950 of the best fixed depth on average (worst x0.950" in text


def test_one_scenario_and_one_regime() -> None:
    text = verdict(_level(None, LOW))
    assert text == (
        "verdict: speculation pays (best depth x2.00 over no speculation); "
        "best policy: cost_model, x0.950 of the best fixed depth"
    )
    assert "does not pay at every level" in verdict(_level(8, HIGH) + _level(16, HIGH))


def test_nothing_to_say_without_references() -> None:
    assert verdict([R("cost_model", None, 10.0)]) == ""
