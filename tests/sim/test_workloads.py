"""Workloads: the built-in shapes match their definitions; files parse, or fail naming line and field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specpolicy.errors import ConfigError
from specpolicy.sim import workloads
from specpolicy.sim.acceptance import BetaAcceptance
from specpolicy.sim.scenario import RequestShape, RequestStream, Scenario
from specpolicy.sim.workloads import DEFAULT_SWEEP_LEVELS, load_workload, parse_concurrency


class Prof:
    """Just what the bursty workload reads: a never step of 10 ms and a 20 ms prefill."""

    def never_step_s(self, batch_size: float, seq_len: float | None = None) -> float:
        return 0.010

    def prefill_s(self, num_tokens: int) -> float:
        return 0.020


P = Prof()


def test_sweep_levels_default_and_given() -> None:
    scs = load_workload("sweep", profile=P)
    assert [s.concurrency for s in scs] == list(DEFAULT_SWEEP_LEVELS) == [2**i for i in range(9)]
    assert all(s.duration_s == 60.0 and s.closed_loop == ((0.0, s.concurrency),) for s in scs)
    scs = load_workload("sweep", profile=P, concurrency=parse_concurrency("1,10,70,250"), duration_s=5)
    assert [s.concurrency for s in scs] == [1, 10, 70, 250]
    assert all(s.duration_s == 5 and 0 < s.warmup_s < 5 for s in scs)


def test_ramp_rises_from_1_to_256_and_back_over_600_s() -> None:
    (sc,) = load_workload("ramp", profile=P)
    assert sc.duration_s == 600 and sc.time_varying
    pts = sc.closed_loop
    assert pts is not None
    levels = [c for _, c in pts]
    peak = levels.index(256)
    assert levels[0] == 1 and levels[-1] == 1 and max(levels) == 256
    assert levels[: peak + 1] == sorted(levels[: peak + 1])
    assert levels[peak:] == sorted(levels[peak:], reverse=True)
    assert pts[peak][0] == pytest.approx(300, abs=3)

    # Geometric: about as long below 16 as above 16 on the way up (equal time per octave).
    def level_at(t: float) -> int:
        return [c for s, c in pts if s <= t][-1]

    up = [level_at(t) for t in np.arange(0.0, 300.0, 1.0)]
    below = sum(1 for c in up if c < 16)
    assert 0.4 < below / len(up) < 0.6


def test_bursty_has_ten_times_the_rate_for_ten_seconds_every_minute() -> None:
    (sc,) = load_workload("bursty", profile=P, seed=3, duration_s=1200)
    reqs = sc.requests
    assert reqs is not None and sc.closed_loop is None
    t = reqs.arrival_s
    assert (np.diff(t) >= 0).all() and t[-1] < 1200
    in_burst = ((t % 60) >= 20) & ((t % 60) < 30)
    rate_burst = in_burst.sum() / (20 * 10)
    rate_base = (~in_burst).sum() / (20 * 50)
    assert rate_burst / rate_base == pytest.approx(10, rel=0.1)
    # Little's law on the speculation-free engine: 32 in flight at (20 ms + 255 x 10 ms) per request, on
    # average over the minute (50 s calm + 10 s at 10x = 2.5x the calm rate).
    mean_rate = len(t) / 1200
    assert mean_rate == pytest.approx(32 / (0.020 + 255 * 0.010), rel=0.05)
    assert mean_rate / rate_base == pytest.approx(2.5, rel=0.05)


def test_transition_alternates_acceptance_every_60_s_at_concurrency_32() -> None:
    (sc,) = load_workload("transition", profile=P)
    assert sc.closed_loop == ((0.0, 32),)
    assert sc.acceptance_phases == tuple((60.0 * i, 0.85 if i % 2 == 0 else 0.35) for i in range(10))


def test_request_shapes_match_the_reference() -> None:
    stream = RequestStream(0, RequestShape(), BetaAcceptance())
    rows = np.array([stream.get(i) for i in range(20_000)])
    prompt, out, acc = rows[:, 0], rows[:, 1], rows[:, 2]
    assert prompt.min() >= 256 and prompt.max() <= 768 and prompt.mean() == pytest.approx(512, rel=0.01)
    assert out.min() >= 128 and out.max() <= 384 and out.mean() == pytest.approx(256, rel=0.01)
    assert acc.mean() == pytest.approx(0.7, abs=0.005)


def test_request_stream_is_the_same_whatever_the_access_order() -> None:
    a = RequestStream(4, RequestShape(), BetaAcceptance())
    b = RequestStream(4, RequestShape(), BetaAcceptance())
    idx = [5000, 3, 1024, 1023, 77]
    assert [a.get(i) for i in idx] == [b.get(i) for i in reversed(idx)][::-1]
    assert a.get(3) != RequestStream(5, RequestShape(), BetaAcceptance()).get(3)


def test_requests_file(tmp_path: Path) -> None:
    f = tmp_path / "reqs.jsonl"
    f.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"arrival_s": 2.0, "prompt_tokens": 100, "output_tokens": 10},
                {"arrival_s": 0.5, "prompt_tokens": 50, "output_tokens": 3, "acceptance": 0.9},
            ]
        )
        + "\n"
    )
    (sc,) = load_workload(str(f), profile=P)
    reqs = sc.requests
    assert reqs is not None and sc.drain
    assert reqs.arrival_s.tolist() == [0.5, 2.0]
    assert reqs.output_tokens.tolist() == [3, 10]
    assert reqs.acceptance[0] == 0.9 and np.isnan(reqs.acceptance[1])
    (cut,) = load_workload(str(f), profile=P, duration_s=1.0)
    assert not cut.drain and cut.duration_s == 1.0


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ({"prompt_tokens": 1, "output_tokens": 1}, "arrival_s"),
        ({"arrival_s": -1, "prompt_tokens": 1, "output_tokens": 1}, "arrival_s"),
        ({"arrival_s": 0, "prompt_tokens": 0, "output_tokens": 1}, "prompt_tokens"),
        ({"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2.5}, "output_tokens"),
        ({"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2, "acceptance": 1.5}, "acceptance"),
    ],
)
def test_bad_requests_file_names_line_and_field(tmp_path: Path, line: dict[str, object], field: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(
        json.dumps({"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}) + "\n" + json.dumps(line)
    )
    with pytest.raises(ConfigError, match=rf"bad.jsonl:2: {field}"):
        load_workload(str(f), profile=P)


def test_step_trace_as_workload(tmp_path: Path) -> None:
    from specpolicy.stats import StepStats
    from specpolicy.trace import TRACE_FORMAT, TraceRecord

    f = tmp_path / "trace.jsonl"
    lines = [json.dumps({"kind": "header", "format": TRACE_FORMAT})]
    for i in range(300):
        bs = 8 if i < 150 else 40
        stats = StepStats(bs, 0, 700.0, 3, [2] * bs, None, 0.1)
        lines.append(TraceRecord.from_stats(i, stats, 3, 0.1).to_json())
    f.write_text("\n".join(lines))
    (sc,) = load_workload(str(f), profile=P)
    assert sc.closed_loop is not None
    assert [c for _, c in sc.closed_loop] == [8, 40]
    assert sc.closed_loop[1][0] == pytest.approx(15.0)
    assert sc.duration_s == pytest.approx(30.0)
    # Two accepted of three drafted per step: a + a^2 + a^3 = 2 -> a ~ 0.81.
    a = sc.acceptance_phases[0][1]
    assert a + a**2 + a**3 == pytest.approx(2.0, abs=1e-3)


@pytest.mark.parametrize("text", ["", "0", "1,-2", "a,b"])
def test_bad_concurrency(text: str) -> None:
    with pytest.raises(ConfigError, match="--concurrency"):
        parse_concurrency(text)


def test_unknown_workload_and_misplaced_options() -> None:
    with pytest.raises(ConfigError, match="neither a built-in workload"):
        load_workload("nosuch", profile=P)
    with pytest.raises(ConfigError, match="sweep workload only"):
        load_workload("ramp", profile=P, concurrency=(4,))
    with pytest.raises(ConfigError, match="--duration"):
        load_workload("ramp", profile=P, duration_s=-1)


def test_an_unknown_name_lists_every_built_in() -> None:
    with pytest.raises(ConfigError) as info:
        load_workload("transitions", profile=P)  # close to a built-in, still not one
    assert "'transitions' is neither a built-in workload (sweep, ramp, bursty, transition) nor a file" in str(
        info.value
    )


def test_each_built_in_runs_its_own_scenarios_for_its_default_duration() -> None:
    durations = {"sweep": 60.0, "ramp": 600.0, "bursty": 600.0, "transition": 600.0}  # the module docstring
    assert set(workloads.BUILTIN) == set(durations)
    for name, duration in durations.items():
        scenarios = load_workload(name, profile=P)
        assert scenarios and {sc.workload for sc in scenarios} == {name}
        assert {sc.duration_s for sc in scenarios} == {duration}


def test_a_registered_workload_runs_its_own_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[workloads.BuildArgs] = []

    def build(args: workloads.BuildArgs) -> list[Scenario]:
        seen.append(args)
        return [Scenario("steady", args.duration_s, closed_loop=((0.0, 8),))]

    monkeypatch.setitem(workloads.BUILTIN, "steady", workloads.Builtin(build, 30.0))
    (sc,) = load_workload("steady", profile=P, seed=7)
    assert (sc.workload, sc.duration_s, sc.closed_loop) == ("steady", 30.0, ((0.0, 8),))
    assert seen[0].seed == 7 and seen[0].concurrency is None
    (short,) = load_workload("steady", profile=P, duration_s=5.0)
    assert short.duration_s == 5.0
    with pytest.raises(ConfigError, match="sweep workload only"):
        load_workload("steady", profile=P, concurrency=(4,))


def test_scenario_validation() -> None:
    with pytest.raises(ValueError, match="closed loop or a list"):
        Scenario("x", 1.0)
    with pytest.raises(ValueError, match="concurrency >= 1"):
        Scenario("x", 1.0, closed_loop=((0.0, 0),))
