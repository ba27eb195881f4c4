"""The live check's plan: which engines, which request batches, which policies."""

from __future__ import annotations

import plan as P
import pytest


def test_every_speculative_engine_runs_checks_then_the_whole_sweep() -> None:
    runs = P.build_plan(("v2", "base_v2", "v1"))
    assert [r.path for r in runs] == ["v2", "base_v2", "v1"]
    for run in runs:
        names = [p.name for p in run.phases]
        assert names[0].startswith("warmup") and sum(n.startswith("warmup") for n in names) >= len(
            P.CONCURRENCY
        )
        perf = [p for p in run.phases if p.kind == "perf"]
        labels = sorted({p.policy for p in perf}, key=str)
        want = sorted(P.PERF_POLICIES) if run.speculative else [None]
        assert labels == want
        for label in labels:
            assert sorted(p.concurrency for p in perf if p.policy == label) == sorted(P.CONCURRENCY)
        checks = [p for p in run.phases if p.kind == "check"]
        first_perf = names.index(perf[0].name)
        assert all(names.index(c.name) < first_perf for c in checks)
        if run.speculative:
            assert {c.policy for c in checks} == set(P.CHECK_POLICIES)
            assert set(run.policies) == set(P.CHECK_POLICIES) | set(P.PERF_POLICIES)


def test_phases_compared_for_identical_tokens_share_prompts_and_lengths() -> None:
    run = P.build_plan(("v1",))[0]
    checks = [p for p in run.phases if p.kind == "check"]
    assert len({(p.seed, p.prompt_len, p.max_new_tokens) for p in checks}) == 1
    assert len(set(checks[0].max_new_tokens)) > 1  # requests finish at different steps
    by_c: dict[int, set[tuple[int, tuple[int, ...]]]] = {}
    for p in run.phases:
        if p.kind == "perf":
            by_c.setdefault(p.concurrency, set()).add((p.seed, p.max_new_tokens))
    assert all(len(v) == 1 for v in by_c.values())


def test_prompts_are_deterministic_and_inside_the_chain_vocabulary() -> None:
    ph = P.Phase("x", "check", "a", 5, 7, (3,) * 5, seed=4)
    a, b = P.prompts_for(ph, 50), P.prompts_for(ph, 50)
    assert a == b and len(a) == 5 and all(len(p) == 7 for p in a)
    assert min(min(p) for p in a) >= 4 and max(max(p) for p in a) < 50


def test_engine_run_json_round_trip() -> None:
    run = P.build_plan(("v2",), concurrency=(1, 4))[0]
    assert P.EngineRun.from_json(run.to_json()) == run


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"concurrency": 0, "max_new_tokens": ()}, "concurrency"),
        ({"concurrency": 2, "max_new_tokens": (4,)}, "one entry per request"),
        ({"concurrency": 1, "max_new_tokens": (0,)}, "max_new_tokens"),
    ],
)
def test_phase_validation(kw: dict[str, object], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        P.Phase(name="p", kind="perf", policy=None, prompt_len=4, seed=0, **kw)  # type: ignore[arg-type]


def test_dispatch_config_validates_with_the_check_policies(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from specpolicy_gpucheck import DispatchConfig

    cfg = P.dispatch_config(P.check_policies(), str(tmp_path / "c"), str(tmp_path / "l"), "always-on")
    assert DispatchConfig(**cfg).candidate_steps() == (0, P.LAUNCH_DEPTH)


def test_plain_engines_run_sglang_speculation_without_specpolicy() -> None:
    run = P.build_plan(("plain_v1",), concurrency=(1, 2))[0]
    assert run.speculative and not run.adapter
    assert {p.policy for p in run.phases} == {None}
    assert [p.name for p in run.phases if p.kind != "warmup"] == [
        "check:sglang-static",
        "perf:sglang-static:1",
        "perf:sglang-static:2",
    ]
    assert P.build_plan(("v1",))[0].adapter and not P.build_plan(("base_v1",))[0].adapter
