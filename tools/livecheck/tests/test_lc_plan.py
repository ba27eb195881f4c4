"""The live check's plan: engines, request batches, policies, their order, arrival schedules and estimates."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from specpolicy_livecheck import plan as P

SITTING = P.SITTING_CONCURRENCY


def test_every_speculative_engine_runs_warmups_checks_perf_resume_then_ramps() -> None:
    runs = P.build_plan(("v2", "base_v2", "v1"), concurrency=SITTING)
    assert [r.id for r in runs] == ["v2/triton", "base_v2/triton", "v1/triton"]
    for run in runs:
        kinds = [p.kind for p in run.phases]
        order = [P.KINDS.index(k) for k in kinds]
        assert order == sorted(order), f"{run.id}: phases not in order of importance"
        perf = [p for p in run.phases if p.kind == "perf"]
        labels = sorted({p.policy for p in perf}, key=str)
        assert labels == (sorted(P.PERF_POLICIES) if run.adapter else [None])
        for label in labels:
            got = Counter(p.concurrency for p in perf if p.policy == label)
            assert got == dict.fromkeys(SITTING, 3)  # three repeats of every level
        assert {p.concurrency for p in run.phases if p.kind == "warmup"} >= set(SITTING)
        ramps = [p.policy for p in run.phases if p.kind == "ramp"]
        resumes = [p.policy for p in run.phases if p.kind == "resume"]
        if run.adapter:
            assert ramps == list(P.RAMP_POLICIES)
            assert resumes == [f"resume-{k}" for k in P.RESUME_K]
            assert set(run.policies) >= set(P.CHECK_POLICIES) | set(P.PERF_POLICIES) | set(resumes)
        else:
            assert ramps == [None] and resumes == []


def test_backends_are_a_dimension_and_keep_comparable_engines_together() -> None:
    runs = P.build_plan(("v2", "base_v2"), backends=("triton", "flashinfer"), concurrency=(1, 4))
    assert [r.id for r in runs] == ["v2/triton", "base_v2/triton", "v2/flashinfer", "base_v2/flashinfer"]
    assert runs[2].backend == "flashinfer" and runs[2].side == "v2" and runs[1].side == "v2"


def test_interleaving_runs_whole_sweeps_and_rotates_the_policy_order() -> None:
    order = P.interleave(["a", "b", "c"], repeats=3, levels=[1, 8])
    assert len(order) == 18
    assert [r for r, _, _ in order] == sorted(r for r, _, _ in order)  # repeat r before r+1
    for r in range(3):
        for c in (1, 8):
            assert sorted(p for rr, cc, p in order if (rr, cc) == (r, c)) == ["a", "b", "c"]
    firsts = [next(p for rr, cc, p in order if (rr, cc) == (r, c)) for r in range(3) for c in (1, 8)]
    assert Counter(firsts) == {"a": 2, "b": 2, "c": 2}  # no policy always leads after a level change


def test_perf_batches_are_sized_to_last_for_the_fastest_policy() -> None:
    for side in ("v1", "v2"):
        for c in P.CONCURRENCY:
            n = P.perf_tokens_for(c, side, min_batch_s=1.0)
            assert c * n / P.best_rate(side, c) >= 1.0
    assert P.perf_tokens_for(1, "v2") > P.perf_tokens_for(128, "v2")
    run = P.build_plan(("v2",), concurrency=(1, 64), perf_tokens=40)[0]
    assert {p.max_new_tokens[0] for p in run.phases if p.kind == "perf"} == {40}


def test_phases_compared_for_identical_tokens_share_prompts_and_lengths() -> None:
    run = P.build_plan(("v1",), concurrency=(1, 4))[0]
    checks = [p for p in run.phases if p.kind == "check"]
    assert len({(p.seed, p.prompt_len, p.max_new_tokens) for p in checks}) == 1
    assert len(set(checks[0].max_new_tokens)) > 1  # requests finish at different steps
    by_c: dict[int, set[tuple[int, tuple[int, ...]]]] = {}
    for p in run.phases:
        if p.kind == "perf":
            by_c.setdefault(p.concurrency, set()).add((p.seed, p.max_new_tokens))
    assert all(len(v) == 1 for v in by_c.values())
    warm = {p.concurrency: p.seed for p in run.phases if p.kind == "warmup"}
    assert all(warm[c] == next(iter(v))[0] for c, v in by_c.items())  # warm-ups cache the same prompts


def test_reference_rates_interpolate_and_fall_back_conservatively() -> None:
    assert P.ref_rate("v2", "never", 1) == 457 and P.ref_rate("v2", "never", 128) == 19311
    mid = P.ref_rate("v2", "never", 3)
    assert P.ref_rate("v2", "never", 2) < mid < P.ref_rate("v2", "never", 4)
    assert P.ref_rate("v2", "never", 1000) == 19311 and P.ref_rate("v2", "never", 0.5) == 457
    assert P.ref_rate("v2", "threshold", 64) == min(r[6] for r in P.REF_TOK_S["v2"].values())
    assert P.ref_rate("v1", "sglang-static", 8) <= P.ref_rate("v1", "static", 8)


def test_ramp_target_goes_one_to_peak_to_one() -> None:
    vals = [P.target_concurrency(t, 60, 128) for t in (0, 15, 30, 45, 60)]
    assert vals[0] == pytest.approx(1) and vals[2] == pytest.approx(128) and vals[4] == pytest.approx(1)
    assert vals[1] == pytest.approx(vals[3]) == pytest.approx(128**0.5)


def _offered(arrivals: tuple[float, ...], t: float, duration: float) -> int:
    """Little's law load: requests arrived and not yet served, each served in S(c) at its arrival's c."""
    n = 0
    for a in arrivals:
        c = P.target_concurrency(a, duration, 128)
        if a <= t < a + P.RAMP_TOKENS / (P.best_rate("v2", c) / c):
            n += 1
    return n


def test_ramp_schedule_is_deterministic_open_loop_and_ramps_one_to_128_to_one() -> None:
    a = P.ramp_schedule(60, 128)
    assert a == P.ramp_schedule(60, 128) and list(a) == sorted(a)
    assert 0 < a[0] < 1 and 59 < a[-1] <= 60
    up = [_offered(a, t, 60) for t in (1, 10, 20, 29)]
    top = [_offered(a, t, 60) for t in (29.5, 30, 30.5, 31, 31.5)]
    down = [_offered(a, t, 60) for t in (32, 40, 50, 59)]
    assert up[0] <= 3 and down[-1] <= 3
    assert 100 <= max(top) <= 150  # the peak, at the middle (served requests lag their arrivals a little)
    assert up == sorted(up) and down == sorted(down, reverse=True)
    short = P.ramp_schedule(30, 128)
    assert len(short) == pytest.approx(len(a) / 2, rel=0.05)  # a shorter ramp: same shape, half the requests


def test_ramps_share_the_schedule_but_never_cached_prompts_within_an_engine() -> None:
    spec, base = P.build_plan(("v2", "base_v2"), concurrency=(1,), ramp_s=10)
    ramps = [p for p in spec.phases if p.kind == "ramp"]
    never = next(p for p in base.phases if p.kind == "ramp")
    assert len({p.arrivals for p in [*ramps, never]}) == 1
    assert len({p.seed for p in ramps}) == len(ramps)
    assert ramps[0].policy == "cost_model" and ramps[0].seed == never.seed
    assert not {p.seed for p in ramps} & {p.seed for p in spec.phases if p.kind != "ramp"}


def test_ramp_simulation_overloads_the_slower_policy_only() -> None:
    a = P.ramp_schedule(30, 128)
    fast, fast_n = P.simulate_ramp(a, P.RAMP_TOKENS, lambda n: P.ref_rate("v2", "never", n))
    slow, slow_n = P.simulate_ramp(a, P.RAMP_TOKENS, lambda n: P.ref_rate("v2", "static-0", n))
    assert fast < 32 and slow > fast + 5
    assert max(fast_n) < 128 < max(slow_n)  # a queue forms behind 128 running requests
    assert fast_n[0] <= 1 and fast_n[-1] <= 1


def test_resume_phases_fit_their_cycles_and_are_few_long_requests() -> None:
    run = P.build_plan(("v2",), concurrency=(1,))[0]
    res = [p for p in run.phases if p.kind == "resume"]
    for p in res:
        k = int(p.policy.split("-")[1])  # type: ignore[union-attr]
        spec = run.policies[p.policy]
        assert spec == {"name": "gpucheck_resume", "off_steps": k, "depth": 3, "on_steps": P.RESUME_ON_STEPS}
        assert p.concurrency <= 8
        # the fastest request (every on step accepts all drafts) still completes the minimum of cycles
        assert p.max_new_tokens[0] >= P.RESUME_CYCLES_MIN * (k + 4 * P.RESUME_ON_STEPS)
    assert (
        P.build_plan(("v2",), concurrency=(1,), resume_k=())[0]
        .policies.keys()
        .isdisjoint({"resume-1", "resume-8"})
    )


def test_estimates_cover_every_phase_and_order_the_budget() -> None:
    runs = P.build_plan(("v2", "base_v2"), concurrency=SITTING, ramp_s=30)
    assert all(p.est_s > 0 for r in runs for p in r.phases)
    est = P.engine_estimate(runs[0])
    assert est["perf"] > est["ramp"] > est["resume"] > est["check"] > 0
    assert all(p.est_s >= 1.0 for p in runs[0].phases if p.kind == "perf")  # min_batch_s
    starts = P.engine_starts(runs)
    assert starts == [P.START_COLD_S, P.START_WARM_S]
    fi = P.engine_starts(P.build_plan(("v2", "base_v2"), backends=("triton", "flashinfer"), concurrency=(1,)))
    assert fi[2] == P.START_WARM_S + P.FLASHINFER_COMPILE_S and fi[3] == P.START_WARM_S


def test_engine_deadline_protects_the_core_of_later_engines() -> None:
    runs = P.build_plan(("v2", "base_v2"), concurrency=SITTING, ramp_s=30)
    later = P.core_s(runs[1]) + P.START_WARM_S + P.SHUTDOWN_S
    assert P.engine_deadline(0, 1000, runs[1:], [P.START_WARM_S]) == pytest.approx(1000 - later)
    assert P.engine_deadline(0, 1000, [], []) == 1000
    assert P.engine_deadline(900, 1000, runs[1:], [P.START_WARM_S]) == 900  # never before now


def test_dry_run_view_of_the_one_sitting_plan_fits_and_a_short_budget_cuts_ramps_first() -> None:
    runs = P.build_plan(("v2", "base_v2"), concurrency=SITTING, ramp_s=30)
    text = P.format_plan(runs, 570)
    assert "engine v2/triton" in text and "engine base_v2/triton" in text and "CUT" not in text
    total = float(text.rsplit("total ~", 1)[1].split(" ")[0])
    assert 420 <= total <= 570
    tight = P.format_plan(runs, 480)
    cut_lines = [line for line in tight.splitlines() if "CUT" in line]
    assert cut_lines and all(line.split()[0] in ("ramp", "resume") for line in cut_lines)


def test_prompts_are_deterministic_and_inside_the_chain_vocabulary() -> None:
    ph = P.Phase("x", "check", "a", 5, 7, (3,) * 5, seed=4)
    a, b = P.prompts_for(ph, 50), P.prompts_for(ph, 50)
    assert a == b and len(a) == 5 and all(len(p) == 7 for p in a)
    assert min(min(p) for p in a) >= 4 and max(max(p) for p in a) < 50


def test_engine_run_json_round_trip() -> None:
    run = P.build_plan(("v2",), backends=("flashinfer",), concurrency=(1, 4), ramp_s=4)[0]
    assert P.EngineRun.from_json(run.to_json()) == run
    assert any(p.arrivals for p in run.phases)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"concurrency": 0, "max_new_tokens": ()}, "concurrency"),
        ({"concurrency": 2, "max_new_tokens": (4,)}, "one entry per request"),
        ({"concurrency": 1, "max_new_tokens": (0,)}, "max_new_tokens"),
        ({"concurrency": 2, "max_new_tokens": (4, 4), "arrivals": (1.0, 0.5)}, "arrivals"),
        ({"concurrency": 2, "max_new_tokens": (4, 4), "arrivals": (1.0,)}, "arrivals"),
    ],
)
def test_phase_validation(kw: dict[str, object], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        P.Phase(name="p", kind="perf", policy=None, prompt_len=4, seed=0, **kw)  # type: ignore[arg-type]


def test_dispatch_config_validates_with_every_policy_of_the_plan(tmp_path: Path) -> None:
    from specpolicy_gpucheck import DispatchConfig

    cfg = P.dispatch_config(P.check_policies(), str(tmp_path / "c"), str(tmp_path / "l"), "always-on")
    assert DispatchConfig(**cfg).candidate_steps() == (0, P.LAUNCH_DEPTH)
    run = P.build_plan(("v2",), concurrency=(1,))[0]
    cfg = P.dispatch_config(run.policies, str(tmp_path / "c"), str(tmp_path / "l"), "always-on")
    assert DispatchConfig(**cfg).candidate_steps() == (0, P.LAUNCH_DEPTH)


def test_tuned_hysteresis_is_baked_in_at_the_launch_depth() -> None:
    spec = P.perf_policies()["hysteresis"]
    assert spec == {**P.HYSTERESIS_TUNED, "num_steps": P.LAUNCH_DEPTH}
    assert spec["enable_at"] < spec["disable_at"]
    assert "threshold" not in P.PERF_POLICIES and "threshold" in P.perf_policies()


def test_plain_engines_run_sglang_speculation_without_specpolicy() -> None:
    run = P.build_plan(("plain_v1",), concurrency=(1, 2), repeats=1, ramp_s=0)[0]
    assert run.speculative and not run.adapter
    assert {p.policy for p in run.phases} == {None}
    assert [p.name for p in run.phases if p.kind != "warmup"] == [
        "check:sglang-static",
        "perf:sglang-static:1:r0",
        "perf:sglang-static:2:r0",
    ]
    assert P.build_plan(("v1",))[0].adapter and not P.build_plan(("base_v1",))[0].adapter


#: The EAGLE-3 sitting of docs/results/methodology.md ("One run").
EAGLE3_SITTING: dict[str, object] = {
    "concurrency": (1, 16, 128),
    "repeats": 2,
    "min_batch_s": 0.5,
    "perf": ("static", "static-0", "cost_model"),
    "resume_k": (),
    "ramp_s": 0.0,
    "pair_k": (1, 64),
    "skip_k": 8,
}


def test_eagle3_engines_launch_the_head_and_the_tree_at_its_own_depth() -> None:
    runs = P.build_plan(("eagle3_v1", "eagle3_v2", "eagle3tree_v1", "base_v1"), concurrency=(1, 4))
    assert [r.id for r in runs] == [
        "eagle3_v1/triton",
        "eagle3_v2/triton",
        "eagle3tree_v1/triton",
        "base_v1/triton",
    ]
    e1, e2, tree, base = runs
    assert [r.side for r in runs] == ["v1", "v2", "v1", "v1"]
    assert e1.adapter and e2.adapter and tree.adapter and not base.adapter
    assert (e1.depth, e2.depth, tree.depth) == (P.LAUNCH_DEPTH, P.LAUNCH_DEPTH, 4)
    assert tree.shape == P.SpecShape("EAGLE3", "eagle3", 4, 4, 16, "eagle3-tree/")
    assert e2.shape is not None and (e2.shape.topk, e2.shape.draft_tokens) == (1, P.LAUNCH_DEPTH + 1)
    assert base.shape is None
    # the tree's policies turn on at its launch depth, the topk-1 engines' at theirs
    assert tree.policies["always-on"] == {"name": "static", "num_steps": 4}
    assert tree.policies["cost_model"] == {"name": "cost_model", "steps": [4]}
    assert tree.policies["raise"]["raise_count"] == 20 and e1.policies["switch"]["depths"] == [3, 0]
    res = [p for p in tree.phases if p.kind == "resume"]
    assert res and all(
        p.max_new_tokens[0] == P.resume_tokens(int(p.name.rsplit("-", 1)[1]), depth=4) for p in res
    )
    assert P.EngineRun.from_json(tree.to_json()) == tree


def test_eagle3_engines_pair_each_off_stretch_with_a_shifted_always_on_reference() -> None:
    run = P.build_plan(("eagle3_v2",), concurrency=(1,), pair_k=(1, 8, 64), skip_k=8)[0]
    checks = {p.name: p for p in run.phases if p.kind == "check"}
    assert list(checks)[:4] == [f"check:{lb}" for lb in P.CHECK_POLICIES]  # the draft paths' checks first
    for k in (1, 8, 64):
        ref, once = checks[f"check:ref-{k}"], checks[f"check:resume-once-{k}"]
        assert ref.policy == "always-on" and ref.chain_shift == k and not ref.reference
        assert once.reference == ref.name and once.chain_shift == 0 and once.seed == ref.seed
        assert once.max_new_tokens == tuple(n + k for n in ref.max_new_tokens)
        assert run.policies[f"resume-once-{k}"] == {
            "name": "gpucheck_resume",
            "off_steps": k,
            "depth": P.LAUNCH_DEPTH,
            "on_steps": P.ON_FOR_GOOD,
        }
    skip = checks["check:skip-catch-up-8"]
    assert (
        skip.reference == "check:ref-8"
        and skip.max_new_tokens == checks["check:resume-once-8"].max_new_tokens
    )
    assert run.policies["skip-catch-up-8"]["name"] == "gpucheck_skip_catch_up"
    assert list(checks).index(skip.name) > list(checks).index("check:ref-8")  # its reference runs first
    # the draft-model engines keep their plan: no pairs
    plain = P.build_plan(("v2",), concurrency=(1,))[0]
    assert not [p for p in plain.phases if p.reference or p.chain_shift]
    alone = P.build_plan(("eagle3_v1",), concurrency=(1,), pair_k=(1,), skip_k=8)[0]
    assert [p.name for p in alone.phases if p.kind == "check"][4:] == [
        "check:ref-1",
        "check:resume-once-1",
        "check:ref-8",
        "check:skip-catch-up-8",
    ]
    with pytest.raises(ValueError, match="pair_k"):
        P.build_plan(("eagle3_v1",), pair_k=(0,))


def test_a_shifted_prompt_emits_what_the_unshifted_one_emits_after_its_first_k_tokens() -> None:
    from specpolicy_livecheck import bigram_model as bm

    pi = bm.bigram_map(120, 5)
    for k in (1, 8, 64):
        base = P.Phase("b", "check", "x", 3, 48, (10,) * 3, seed=31)
        shifted = P.Phase("s", "check", "x", 3, 48, (10,) * 3, seed=31, chain_shift=k)
        for p, q in zip(P.prompts_for(base, 120), P.prompts_for(shifted, 120, pi=pi.tolist()), strict=True):
            assert len(q) == 48 and min(q) >= bm.FIRST_TOKEN
            assert bm.greedy_chain(pi, q[-1], 20) == bm.greedy_chain(pi, p[-1], 20 + k)[k:]
            if k < 48:
                assert q[: 48 - k] == p[k:]  # the same text, moved along
    with pytest.raises(ValueError, match="chain"):
        P.prompts_for(P.Phase("s", "check", "x", 1, 4, (1,), seed=1, chain_shift=2), 120)
    with pytest.raises(ValueError, match="chain_shift"):
        P.Phase("s", "check", "x", 1, 4, (1,), seed=1, chain_shift=-1)


def test_the_eagle3_sitting_fits_540_seconds_with_every_check_and_a_perf_sweep() -> None:
    runs = P.build_plan(("eagle3_v1", "eagle3_v2", "eagle3tree_v1", "base_v1"), **EAGLE3_SITTING)  # type: ignore[arg-type]
    text = P.format_plan(runs, 540, margin_s=10)
    assert "CUT" not in text
    assert float(text.rsplit("total ~", 1)[1].split(" ")[0]) <= 530
    for run in runs[:3]:
        checks = {p.policy for p in run.phases if p.kind == "check"}
        assert checks >= {"always-on", "always-off", "switch", "raise", "resume-once-64", "skip-catch-up-8"}
        perf = Counter((p.policy, p.concurrency) for p in run.phases if p.kind == "perf")
        assert perf == {(pol, c): 2 for pol in ("static", "static-0", "cost_model") for c in (1, 16, 128)}
    assert {p.concurrency for p in runs[3].phases if p.kind == "perf"} == {1, 16, 128}


def test_a_tensor_parallel_plan_adds_one_rank_faults_and_keeps_its_size() -> None:
    runs = P.build_plan(("v2", "base_v2"), concurrency=(1, 4), perf_tokens=40, repeats=1, ramp_s=0, tp=2)
    spec, base = runs
    assert (spec.id, base.id, spec.tp) == ("tp2/v2/triton", "tp2/base_v2/triton", 2)
    checks = {p.policy for p in spec.phases if p.kind == "check"}
    assert {"raise-rank1", "slow-rank1"} <= checks & set(spec.policies)
    assert spec.policies["raise-rank1"]["only_rank"] == 1 == spec.policies["slow-rank1"]["only_rank"]
    assert P.EngineRun.from_json(spec.to_json()) == spec
    one = P.build_plan(("v2",), concurrency=(1,), perf_tokens=40, repeats=1, ramp_s=0)[0]
    assert one.id == "v2/triton" and "raise-rank1" not in one.policies
    with pytest.raises(ValueError, match="tp"):
        P.build_plan(("v2",), tp=0)


def test_the_kept_cost_model_is_one_policy_for_the_engines_life(tmp_path: Path) -> None:
    """``--perf cost_model-kept``: its phases interleave with the others, and the dispatcher is told not to
    reset it; a plan without it keeps nothing."""
    from specpolicy_gpucheck import DispatchConfig

    run = P.build_plan(("v2",), concurrency=(1, 16), perf=("cost_model", "cost_model-kept"))[0]
    perf = [ph.policy for ph in run.phases if ph.kind == "perf"]
    assert perf.count("cost_model-kept") == perf.count("cost_model") == 2 * 3
    cfg = P.dispatch_config(run.policies, str(tmp_path / "c"), str(tmp_path / "l"), "always-on")
    assert cfg["keep"] == ["cost_model-kept"] and DispatchConfig(**cfg).keep == ["cost_model-kept"]
    assert run.policies["cost_model-kept"] == run.policies["cost_model"]
    plain = P.build_plan(("v2",), concurrency=(1,))[0]
    assert P.dispatch_config(plain.policies, "c", "l", "always-on")["keep"] == []


def test_an_engine_that_would_serve_nothing_is_not_started_and_leaves_its_time_to_the_next() -> None:
    """A start is 60-160 s of GPU time: where the later engines' reserve leaves an engine no phase,
    the plan (and the device command, with the same functions) skips it, and the next engine's start is
    then the host's cold one."""
    runs = P.build_plan(("v2", "base_v2"), concurrency=SITTING, ramp_s=0, resume_k=())
    assert P.engine_starts(runs[1:], ["triton"]) == [P.START_WARM_S]
    assert P.engine_starts(runs[1:]) == [P.START_COLD_S]
    reserve = P.core_s(runs[1]) + P.START_WARM_S + P.SHUTDOWN_S
    first = runs[0].phases[0].est_s
    deadline = P.engine_deadline(0.0, 1000.0, runs[1:], [P.START_WARM_S])
    assert deadline == pytest.approx(1000.0 - reserve)
    room = deadline - P.START_COLD_S - P.SHUTDOWN_S
    assert not P.serves_nothing(0.0, deadline, P.START_COLD_S, runs[0])
    assert P.serves_nothing(room - first + 0.5, deadline, P.START_COLD_S, runs[0])
    assert not P.serves_nothing(room - first - 0.5, deadline, P.START_COLD_S, runs[0])
    budget = reserve + P.START_COLD_S - P.START_WARM_S + 40.0  # base_v2 fits as the cold start, v2 does not
    text = P.format_plan(runs, budget, build_s=0.0)
    assert "engine v2/triton: NOT STARTED" in text
    assert f"engine base_v2/triton: start ~{P.START_COLD_S:.0f} s (at ~{P.START_COLD_S:.0f} s)" in text
    assert "CUT" not in text.split("base_v2/triton")[1]
