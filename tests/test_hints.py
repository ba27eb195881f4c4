"""Per-request hints: parsing, the batch aggregate, the batch rule, and the controller applying it after
decide() (so every policy respects it)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy.errors import ConfigError
from specpolicy.hints import HINT_KEY, BatchHints, BatchRule, HintBook, HintError, aggregate, parse_hint
from specpolicy.mode import MAX_NUM_STEPS, SpecMode
from specpolicy.runtime.controller import StepController
from specpolicy.runtime.settings import AdapterSettings
from specpolicy.stats import StepStats


class Fixed:
    """A policy that always asks for one depth and records what it saw."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.seen: list[StepStats] = []

    def decide(self, stats: StepStats) -> SpecMode:
        self.seen.append(stats)
        return SpecMode(self.k)


@pytest.mark.parametrize(
    ("value", "allowance"),
    [(None, None), ("auto", None), ("", None), ("off", 0), (" OFF ", 0), ("max_depth=2", 2),
     ("max_depth = 5", 5), ({"max_depth": 1}, 1), ({"max_depth": 0}, 0), ("max_depth=0", 0)],
)
def test_parse_hint_forms(value: object, allowance: int | None) -> None:
    assert parse_hint(value) == allowance


@pytest.mark.parametrize(
    "value", ["of", "max_depth", "max_depth=-1", "max_depth=x", "depth=2", {"max_depth": True},
              {"max_depth": 2.0}, {"max_depth": 2, "x": 1}, {}, 3, ["off"], f"max_depth={MAX_NUM_STEPS + 1}"]
)
def test_parse_hint_refuses_with_the_allowed_forms(value: object) -> None:
    with pytest.raises(HintError, match=r"specpolicy(\.max_depth)?: must be"):
        parse_hint(value)


def test_book_counts_each_request_once_and_contains_bad_hints(caplog: pytest.LogCaptureFixture) -> None:
    book = HintBook()
    assert book.admit("a", {HINT_KEY: "off"}) == 0
    assert book.admit("a", {HINT_KEY: "off"}) == 0  # admitted again (a retraction): counted once
    assert book.admit("b", {HINT_KEY: {"max_depth": 2}}) == 2
    assert book.admit("c", None) is None
    assert book.admit("d", {"other": 1}) is None
    with caplog.at_level(logging.WARNING, logger="specpolicy.hints"):
        assert book.admit("e", {HINT_KEY: "sometimes"}) is None
        assert book.admit("f", {HINT_KEY: object()}) is None
    assert book.counts() == {"requests_off": 1, "requests_capped": 1, "bad": 2, "request_steps_trimmed": 0}
    assert [r for r in caplog.records if "hint is ignored" in r.getMessage()].__len__() == 1
    assert set(book.live) == {"a", "b"}
    book.drop("a")
    book.drop("zz")
    assert set(book.live) == {"b"}


@given(st.lists(st.integers(0, MAX_NUM_STEPS)))
def test_aggregate_counts_and_range(allowances: list[int]) -> None:
    h = aggregate(allowances)
    if not allowances:
        assert h is None
        return
    assert h is not None
    caps = [a for a in allowances if a]
    assert h == BatchHints(allowances.count(0), len(caps), min(caps, default=0), max(caps, default=0))


@pytest.mark.parametrize(
    ("rule", "off", "batch", "limited"),
    [("any", 1, 8, True), ("majority", 4, 8, False), ("majority", 5, 8, True), ("majority", 1, 1, True),
     ("all", 7, 8, False), ("all", 8, 8, True)],
)
def test_off_rule(rule: Any, off: int, batch: int, limited: bool) -> None:
    limit = BatchRule(rule).limit(BatchHints(off, 0, 0, 0), batch)
    assert limit == (0 if limited else MAX_NUM_STEPS)


@given(
    st.lists(st.one_of(st.none(), st.integers(0, MAX_NUM_STEPS)), min_size=1, max_size=40),
    st.sampled_from(["any", "majority", "all"]),
    st.integers(0, MAX_NUM_STEPS),
)
def test_rule_invariants(requests: list[int | None], rule: Any, k: int) -> None:
    """Hints only ever lower the depth; per request, the batch keeps what its most permissive request
    allows; per batch, never above the smallest cap, and off exactly as the rule says."""
    hinted = [a for a in requests if a is not None]
    h = aggregate(hinted)
    n = len(requests)
    if h is None:
        return
    per_req = min(k, BatchRule(rule, per_request=True).limit(h, n))
    most = max(MAX_NUM_STEPS if a is None else a for a in requests)
    assert per_req == min(k, most)
    batch = min(k, BatchRule(rule).limit(h, n))
    assert batch <= k
    caps = [a for a in hinted if a]
    offs = hinted.count(0)
    wants_off = {"any": offs > 0, "majority": 2 * offs > n, "all": offs == n}[rule]
    assert batch == (0 if wants_off else min([k, *caps]))


def _controller(policy: Any, allowed: range | list[int] = range(5), default: int = 4,
                rule: BatchRule | None = None) -> StepController:
    return StepController(policy, allowed_steps=allowed, default_steps=default, hint_rule=rule)


def test_controller_applies_the_rule_after_decide_and_counts() -> None:
    pol = Fixed(4)
    ctl = _controller(pol)
    hints = aggregate([0, 2])
    assert ctl.decide(ctl.next_stats(4, 0, None))[1] == 4  # no hints: the policy's depth
    # 1 of 4 off (no majority); cap 2
    assert ctl.decide(ctl.next_stats(4, 0, None, None, hints))[1] == 2
    # 2 of 3 off
    assert ctl.decide(ctl.next_stats(3, 0, None, ["a", "b", "c"], aggregate([0, 0])))[1] == 0
    assert pol.seen[1].hints == (1, 1, 2, 2) and pol.seen[2].request_ids == ["a", "b", "c"]
    assert ctl.hint_counts() == {"steps_off": 1, "steps_capped": 1}
    assert ctl.steps_by_depth == {0: 1, 1: 0, 2: 1, 3: 0, 4: 1}


def test_a_cap_goes_to_the_deepest_depth_the_engine_runs() -> None:
    ctl = _controller(Fixed(3), allowed=[0, 3], default=3)
    # no depth in 1..2: off
    assert ctl.decide(ctl.next_stats(2, 0, None, None, aggregate([2])))[1] == 0
    ctl = _controller(Fixed(4), allowed=[0, 1, 3, 4])
    assert ctl.decide(ctl.next_stats(2, 0, None, None, aggregate([2])))[1] == 1


def test_hints_apply_to_the_default_when_the_policy_fails() -> None:
    class Broken:
        def decide(self, stats: StepStats) -> SpecMode:
            raise RuntimeError("boom")

    ctl = _controller(Broken())
    assert ctl.decide(ctl.next_stats(1, 0, None, None, aggregate([0])))[1] == 0
    assert ctl.decide(ctl.next_stats(1, 0, None))[1] == 4
    assert ctl.errors == 2


def test_per_request_rule_keeps_speculating_for_the_others() -> None:
    ctl = _controller(Fixed(4), rule=BatchRule(per_request=True))
    assert ctl.decide(ctl.next_stats(3, 0, None, None, aggregate([0, 0])))[1] == 4
    assert ctl.decide(ctl.next_stats(2, 0, None, None, aggregate([0, 0])))[1] == 0
    assert ctl.decide(ctl.next_stats(2, 0, None, None, aggregate([0, 2])))[1] == 2


def test_malformed_hints_from_a_fast_stats_are_ignored() -> None:
    ctl = _controller(Fixed(3))
    assert ctl.decide(StepStats.fast(2, hints="off"))[1] == 3  # type: ignore[arg-type]


def test_stats_validate_hints() -> None:
    assert StepStats(2, hints=(1, 0, 0, 0)).hints == (1, 0, 0, 0)
    with pytest.raises(ValueError, match="StepStats.hints"):
        StepStats(2, hints=(1, 0))
    with pytest.raises(ValueError, match="StepStats.hints"):
        StepStats(2, hints=(1, 0, -1, 0))


def test_settings_name_the_field_and_the_allowed_values() -> None:
    s = AdapterSettings.build("static", hint_off_rule="any")
    assert s.hint_off_rule == "any" and s.hints
    with pytest.raises(ConfigError, match="hint_off_rule") as exc:
        AdapterSettings.build("static", hint_off_rule="most")
    assert "majority" in str(exc.value)
    env = AdapterSettings.from_env({"SPECPOLICY_POLICY": "static", "SPECPOLICY_HINT_OFF_RULE": "all",
                                    "SPECPOLICY_HINTS": "false"})
    assert env is not None and env.hint_off_rule == "all" and not env.hints


def test_metrics_mirror_the_hint_counters() -> None:
    prom = pytest.importorskip("prometheus_client")
    from specpolicy.runtime.runtime import AdapterRuntime

    reg = prom.CollectorRegistry()
    rt = AdapterRuntime(AdapterSettings.build("static"), engine="test", engine_version="0", path="cpu",
                        allowed_steps=range(4), default_steps=3, metrics_registry=reg)
    rt.hints.admit("a", {HINT_KEY: "off"})
    rt.hints.admit("b", {HINT_KEY: "nope"})
    rt.decide(rt.next_stats(1, 0, None, None, aggregate([0])))
    rt.close()

    def value(event: str) -> float | None:
        v = reg.get_sample_value("specpolicy_hints_total", {"engine": "test", "rank": "0", "event": event})
        return v

    assert value("requests_off") == 1 and value("bad") == 1 and value("steps_off") == 1
    assert value("requests_capped") is None  # never moved


def test_bench_hints_stays_runnable(tmp_path: Any) -> None:
    """benchmarks/bench_hints.py: a tiny run reports every path at every batch size (no timings)."""
    import json

    from _benchmarks import load

    bench = load("bench_hints")
    out = tmp_path / "hints.json"
    assert bench.main(["--steps", "4", "--repeats", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["batch"] for r in rows] == list(bench.BATCH_SIZES)
    assert all(r["hinted_requests"] >= 1 for r in rows)
    for r in rows:
        assert {"idle_ns", "sglang_ns", "sglang_rescan_ns", "vllm_ns", "decide_cost_model_ns"} <= set(r)


def test_the_trace_records_the_batch_hints(tmp_path: Any) -> None:
    import json

    from specpolicy.runtime.trace_writer import TraceWriter
    from specpolicy.trace import TraceRecord

    path = tmp_path / "t.jsonl"
    tw = TraceWriter(path)
    ctl = StepController(Fixed(3), allowed_steps=range(4), default_steps=3, observers=[tw])
    step, k = ctl.decide(ctl.next_stats(2, 0, None, None, aggregate([0, 0])))
    assert k == 0
    ctl.outcome(step, None, 0.01)
    ctl.close()
    tw.close()
    line = json.loads(path.read_text().splitlines()[-1])
    assert line["hints"] == [2, 0, 0, 0] and line["num_steps"] == 0
    rec = TraceRecord.from_stats(1, StepStats(2, hints=(2, 0, 0, 0)), 0, None)
    assert rec.stats().hints == [2, 0, 0, 0]
