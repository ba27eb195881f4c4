"""The simulator's per-request hints: which requests get one, the batch rule / per-request trimming in the
simulated engine, and the ``--hints`` option."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine import PROFILE, Recorder, _drain, _requests

from specpolicy.errors import ConfigError
from specpolicy.sim.comparators import PolicyDecider
from specpolicy.sim.engine import EngineConfig, simulate
from specpolicy.sim.hint_mix import HintMix, parse_hint_mix
from specpolicy.sim.scenario import Scenario
from specpolicy.sim.workloads import load_workload


def test_allowances_follow_the_fractions_and_the_request_number() -> None:
    mix = HintMix(off=0.2, capped=0.3, max_depth=2)
    ids = np.arange(20_000, dtype=np.int64)
    a = mix.allowances(0, ids)
    assert set(np.unique(a).tolist()) == {-1, 0, 2}
    assert abs(float((a == 0).mean()) - 0.2) < 0.02 and abs(float((a == 2).mean()) - 0.3) < 0.02
    assert np.array_equal(a[5:9], mix.allowances(0, ids[5:9]))  # a request's hint is its own
    assert not np.array_equal(a, mix.allowances(1, ids))


@pytest.mark.parametrize(
    ("text", "mix"),
    [("off=0.25", HintMix(off=0.25)), ("capped=0.5,max_depth=3", HintMix(capped=0.5, max_depth=3)),
     ("off=0.1,per_request=true,rule=any", HintMix(off=0.1, per_request=True, off_rule="any"))],
)
def test_parse_hint_mix(text: str, mix: HintMix) -> None:
    assert parse_hint_mix(text) == mix
    assert parse_hint_mix(None) is None


@pytest.mark.parametrize(
    ("text", "field"),
    [("off=2", "off"), ("off=0.6,capped=0.6", "off \\+ capped"), ("capped=0.1,max_depth=0", "max_depth"),
     ("rule=most,off=0.1", "rule"), ("often=0.1", "expected"), ("per_request=maybe", "per_request")],
)
def test_parse_hint_mix_names_the_bad_key(text: str, field: str) -> None:
    with pytest.raises(ConfigError, match=f"--hints: .*{field}"):
        parse_hint_mix(text)


def test_every_request_opting_out_keeps_the_batch_off() -> None:
    rec = Recorder([4])
    sc = _drain(_requests(6, 20, acceptance=1.0))
    res = simulate(load_workload_like(sc, HintMix(off=1.0)), PROFILE, PolicyDecider(rec), EngineConfig(),
                   track_requests=True)
    assert res.spec_steps == 0 and res.decode_steps_total > 0
    assert all(s.hints is not None and s.hints[0] == s.batch_size for s in rec.seen)
    assert {r: e for r, (e, _) in res.emitted_per_request.items()} == dict.fromkeys(range(6), 20)


def test_per_request_trimming_keeps_the_others_speculating() -> None:
    sc = _drain(_requests(8, 40, acceptance=1.0))
    base = simulate(sc, PROFILE, PolicyDecider(Recorder([4])), EngineConfig(jitter=0.0))
    half = simulate(load_workload_like(sc, HintMix(off=0.5, per_request=True)), PROFILE,
                    PolicyDecider(Recorder([4])), EngineConfig(jitter=0.0))
    batch = simulate(load_workload_like(sc, HintMix(off=0.5, off_rule="any")), PROFILE,
                     PolicyDecider(Recorder([4])), EngineConfig(jitter=0.0))
    # per request: the batch keeps speculating, the opted-out requests take one token per step
    assert half.spec_steps > 0 and half.decode_steps_total > base.decode_steps_total
    # one depth per batch, off when any request opts out: no speculation while one is in the batch
    assert batch.spec_steps < half.spec_steps


@settings(max_examples=30, deadline=None)
@given(
    off=st.floats(0.0, 0.5), capped=st.floats(0.0, 0.5), depth=st.integers(1, 4),
    per_request=st.booleans(), rule=st.sampled_from(["any", "majority", "all"]),
    outs=st.lists(st.integers(1, 30), min_size=1, max_size=10),
)
def test_hints_never_change_what_a_request_gets(
    off: float, capped: float, depth: int, per_request: bool, rule: str, outs: list[int]
) -> None:
    mix = HintMix(off, capped, depth, per_request, rule)  # type: ignore[arg-type]
    rec = Recorder([4, 2, 0, 3])
    res = simulate(load_workload_like(_drain(_requests(len(outs), outs, acceptance=0.9)), mix), PROFILE,
                   PolicyDecider(rec), EngineConfig(max_running=4), track_requests=True)
    assert {r: e for r, (e, _) in res.emitted_per_request.items()} == dict(enumerate(outs))


def test_load_workload_gives_every_scenario_the_hints() -> None:
    mix = HintMix(off=0.3)
    scs = load_workload("sweep", profile=PROFILE, concurrency=[1, 4], duration_s=5.0, hints=mix)
    assert [sc.hints for sc in scs] == [mix, mix]
    assert all(sc.hints is None for sc in load_workload("sweep", profile=PROFILE, duration_s=5.0))


def load_workload_like(sc: Scenario, mix: HintMix) -> Scenario:
    return dataclasses.replace(sc, hints=mix)
