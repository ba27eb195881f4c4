"""The report's winners and its verdict lines, from made-up rows whose answer is known, and properties
that hold for any rows: nothing is called best that a shown row beats, ties are ties, what to deploy is a
winner."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy.sim.verdict import TIE, standings, unwrap, verdict, verdict_lines, wrap


@dataclass(frozen=True)
class R:
    policy: str
    concurrency: int | None
    output_tok_s: float
    tpot_ms_p50: float = math.nan
    open_loop: bool = False
    ttft_ms_p50: float = math.nan
    extrapolated: bool = False


def _level(c: int | None, tok: dict[str, float], extrapolated: bool = False) -> list[R]:
    return [R(k, c, v, extrapolated=extrapolated) for k, v in tok.items()]


LOW = {"never": 100.0, "static-0": 90.0, "static-3": 200.0, "cost_model": 190.0, "hysteresis": 180.0,
       "oracle": 210.0}
HIGH = {"never": 300.0, "static-0": 280.0, "static-3": 150.0, "cost_model": 266.0, "hysteresis": 280.0,
        "oracle": 281.0}


def test_winners_per_level_ignore_the_oracle_and_include_never() -> None:
    low, high = standings(_level(1, LOW) + _level(64, HIGH))
    assert (low.best, low.best_static, low.best_depth, low.best_fixed) == (
        ("static-3",), "static-3", "static-3", "static-3")
    assert (high.best, high.best_static, high.best_fixed) == (("never",), "static-0", "never")
    assert low.speculation_gain == pytest.approx(2.0) and high.speculation_gain == pytest.approx(0.5)
    assert high.score["cost_model"] == pytest.approx(266 / 300)


def test_rows_within_the_tolerance_tie() -> None:
    (only,) = standings(_level(4, {"never": 1.0, "static-1": 2.0, "a": 2.0 * (1 - TIE / 2), "b": 1.9}))
    assert only.best == ("static-1", "a")


def test_a_policy_a_fixed_choice_beats_is_not_called_best_and_deploy_names_the_winner() -> None:
    lines = verdict_lines(_level(1, LOW) + _level(64, HIGH))
    assert len(lines) == 3
    spec, pol, deploy = lines
    head = "speculation (tok/s, best depth): pays at concurrency 1 (static-3 x2.000 of never)"
    assert spec.startswith(head)
    assert "not at 64 (static-3 x0.500 of never)" in spec
    # worst scores: cost_model 0.95 / 0.887, hysteresis 0.90 / 0.933 -> hysteresis is nearest
    assert pol.startswith("policies: none best everywhere; nearest hysteresis")
    assert "worst x0.900 of static-3 at 1" in pol
    assert "best hysteresis" not in pol
    assert deploy == ("deploy: at 1: static-3 (hysteresis x0.900 of it); "
                      "at 64: never (hysteresis x0.933 of it)")


def test_a_policy_tied_everywhere_is_best_and_deployed_everywhere() -> None:
    rows = _level(1, {**LOW, "cost_model": 200.0}) + _level(64, {**HIGH, "cost_model": 299.0})
    _, pol, deploy = verdict_lines(rows)
    assert pol.startswith("policies: best cost_model, tied for best at every level")
    assert deploy == "deploy: at 1: cost_model; at 64: never or cost_model (tie)"


def test_one_scenario_and_speculation_nowhere() -> None:
    lines = verdict_lines(_level(None, HIGH))
    assert lines[0] == "speculation (tok/s, best depth): pays nowhere (static-3 x0.500 of never)"
    assert lines[-1] == "deploy: never (hysteresis x0.933 of it)"
    assert "pays nowhere at any level" in verdict(_level(8, HIGH) + _level(16, HIGH))


def test_open_loop_scenarios_are_judged_by_tpot_not_throughput() -> None:
    # the same tokens/s for all (the arrivals set it); cost_model's requests finish 1.5x faster per token
    tpots = {"never": 30.0, "static-3": 20.0, "cost_model": 20.0, "hysteresis": 30.0}
    ttfts = {"never": 900.0, "static-3": 300.0, "cost_model": 250.0, "hysteresis": 800.0}
    rows = [R(n, None, 100.0, tpot, open_loop=True, ttft_ms_p50=ttfts[n]) for n, tpot in tpots.items()]
    (s,) = standings(rows)
    assert s.metric == "TPOT p50" and s.best == ("static-3", "cost_model")
    lines = verdict_lines(rows)
    assert lines[0] == "speculation (TPOT p50, best depth): pays (static-3 x1.500 of never)"
    assert "TTFT p50 250 ms, never's 900 ms" in lines[1]  # latency, the open loop's question
    assert lines[-1] == "deploy: cost_model"


def test_levels_outside_the_profile_are_flagged_in_the_deploy_line() -> None:
    text = verdict(_level(1, LOW) + _level(256, HIGH, extrapolated=True))
    assert "at 256: never (hysteresis x0.933 of it) [OUTSIDE the profile's measured range]" in text
    assert "at 1: static-3 (hysteresis x0.900 of it);" in text


def test_nothing_to_say_without_rows() -> None:
    assert verdict([]) == ""


def _deployed(deploy: str, level: int | None) -> list[str]:
    """The rows the deploy line names for one level."""
    body = deploy.removeprefix("deploy: ")
    if not body.startswith("at ") or body.endswith(" at every level"):
        part = body
    else:
        part = next(p for p in body.split("; ") if str(level) in p.split(":")[0][3:].split(", "))
        part = part.split(": ", 1)[1]
    return part.removesuffix(" at every level").split(" (")[0].split(" [")[0].split(" or ")


_NAMES = ["never", "static-0", "static-1", "static-2", "a", "b", "oracle"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.floats(1.0, 1000.0), min_size=len(_NAMES), max_size=len(_NAMES)),
                min_size=1, max_size=4))
def test_verdict_never_recommends_or_crowns_a_row_a_shown_row_beats(levels: list[list[float]]) -> None:
    rows = [R(n, c, v) for c, vals in enumerate(levels) for n, v in zip(_NAMES, vals, strict=True)]
    lines = verdict_lines(rows)
    deploy = lines[-1]
    for s, vals in zip(standings(rows), levels, strict=True):
        tok = dict(zip(_NAMES, vals, strict=True))
        top = max(v for n, v in tok.items() if n != "oracle")
        assert set(s.best) == {n for n, v in tok.items() if n != "oracle" and v >= top * (1 - TIE)}
        # what the deploy line names at this level ties for best, by the numbers
        assert all(tok[p] >= top * (1 - TIE) for p in _deployed(deploy, s.concurrency)), (deploy, tok)
    pol = next((line for line in lines if line.startswith("policies: best ")), None)
    if pol is not None:
        name = pol.split()[2].rstrip(",")
        for vals in levels:
            tok = dict(zip(_NAMES, vals, strict=True))
            assert tok[name] >= max(v for n, v in tok.items() if n != "oracle") * (1 - TIE)


_word = st.text(st.sampled_from("abcx0123456789.-(){}\":"), min_size=1, max_size=24)
_sep = st.sampled_from([" ", "; ", ", "])


@settings(max_examples=200)
@given(st.lists(st.tuples(_word, _sep), min_size=1, max_size=40), st.integers(30, 120))
def test_wrapping_keeps_every_word_and_fits_the_width(parts: list[tuple[str, str]], width: int) -> None:
    line = "deploy: " + "".join(w + s for w, s in parts).rstrip("; ,")
    wrapped = wrap(line, width)
    assert unwrap(wrapped) == [line]  # nothing lost, nothing added: the statement reads back whole
    for i, piece in enumerate(wrapped):
        assert piece == piece.rstrip() and (piece.startswith("  ") == (i > 0))
        assert not piece[2 if i else 0 :].startswith(" ")
        # within the width, unless one word alone is longer
        assert len(piece) <= width or " " not in piece.strip()


def test_a_long_statement_breaks_after_a_clause_where_one_fits() -> None:
    line = (
        "deploy: at 1: cost_model; at 10, 70: never (cost_model x0.950-0.990 of it); at 250: never or "
        "cost_model"
    )
    assert wrap(line, 100) == [
        "deploy: at 1: cost_model; at 10, 70: never (cost_model x0.950-0.990 of it);",
        "  at 250: never or cost_model",
    ]
    assert wrap(line, len(line)) == [line]


def test_the_verdict_is_wrapped_only_when_a_width_is_given() -> None:
    rows = _level(1, LOW) + _level(64, HIGH)
    long = verdict_lines(rows)
    short = verdict_lines(rows, width=60)
    assert unwrap(short) == long and max(len(x) for x in short) <= 60 < max(len(x) for x in long)
