"""The live check's EAGLE-3 analysis on results written by a fake engine: the acceptance oracle (SGLang's
counters against the head's per-root accepted drafts), the pairs (acceptance after an off stretch against an
always-on batch k chain tokens further on), the skipped catch-up that must fail them, and the report keys."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fake_results as FR
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from specpolicy_livecheck import analysis as A
from specpolicy_livecheck import bigram_model as bm
from specpolicy_livecheck import plan as P

PATHS: tuple[P.PathName, ...] = ("eagle3_v1", "eagle3_v2", "eagle3tree_v1", "base_v1")
LOG = (
    "specpolicy: live path: v1 worker (EAGLEWorker), policy ...\n"
    "specpolicy rank 0: policy error (step 6); running the default depth and continuing.\n"
    "gpucheck_skip_catch_up: zeroing the off steps' hidden states\n"
)


@pytest.fixture()
def meta() -> dict[str, Any]:
    pi = bm.bigram_map(200, 1)
    rng = np.random.default_rng(7)
    accept = rng.integers(0, 6, 200)
    no_hidden = np.where(rng.random(200) < 0.5, 0, accept)  # half the roots lose their drafts
    accept[: bm.FIRST_TOKEN] = no_hidden[: bm.FIRST_TOKEN] = 0
    return {
        "chain_vocab": 200,
        "pi": pi.tolist(),
        "pi_draft": bm.draft_map(pi, 0.7, 2).tolist(),
        "eagle3": {"accept": accept.tolist(), "accept_no_hidden": no_hidden.tolist()},
    }


Schedule = Callable[[int], int]


def schedule(label: str | None, depth: int) -> Schedule:
    """The depth a correct adapter runs on decode step s of a batch, for each label of the plan."""
    if label in ("always-off", "static-0"):
        return lambda s: 0
    if label == "switch":
        return lambda s: depth if s % 6 < 3 else 0
    if label == "raise":  # off, but the failing decisions 5..24 run the launch depth
        return lambda s: depth if 5 <= s < 25 else 0
    if label and label.startswith(("resume-once-", "skip-catch-up-")):
        k = int(label.rsplit("-", 1)[1])
        return lambda s: 0 if s < k else depth
    if label and label.startswith("resume-"):
        k = int(label.rsplit("-", 1)[1])
        return lambda s: 0 if s % (k + P.RESUME_ON_STEPS) < k else depth
    return lambda s: depth


def fake_request(
    pi: list[int],
    table: list[int],
    last: int,
    n: int,
    sched: Schedule,
    depth: int,
    after_off: list[int] | None,
) -> tuple[dict[str, Any], list[int]]:
    """What an engine reports, step by step: an off step emits one token and counts as a verify of none;
    an on step rooted at the last token accepts ``table[root]`` drafts (``after_off[root]`` on the first on
    step after off steps), at most its depth. Also the depth of every step it ran."""
    out, hist, verifies, correct, prev_off, ran = [pi[last]], [0] * (depth + 1), 0, 0, False, []
    while len(out) < n:
        d = sched(len(ran))
        ran.append(d)
        if d == 0:
            out.append(pi[out[-1]])
            verifies, prev_off = verifies + 1, True
            hist[0] += 1
            continue
        a = min((after_off if prev_off and after_off is not None else table)[out[-1]], d)
        for _ in range(a + 1):
            out.append(pi[out[-1]])
        verifies, correct, prev_off = verifies + 1, correct + a, False
        hist[a] += 1
    req = {
        "output_ids": out[:n],
        "completion_tokens": n,
        "verify_ct": verifies,
        "correct_drafts": correct,
        "histogram": hist,
        "e2e_latency": 0.1,
    }
    return req, ran


def write_engine(
    folder: Path,
    meta: dict[str, Any],
    run: P.EngineRun,
    table: list[int],
    after_off: Callable[[str], list[int] | None],
    log: str = LOG,
) -> None:
    """One engine's phases.jsonl, trace, log and plan. ``after_off(label)``: the acceptance table of the
    first on step after an off stretch in that phase (None: the engine's own table, a correct catch-up)."""
    folder.mkdir(parents=True)
    pi = meta["pi"]
    lines = [FR.engine_line(run, 60.0)]
    trace: list[dict[str, Any]] = []
    t = 1000.0
    for ph in run.phases:
        prompts = P.prompts_for(ph, meta["chain_vocab"], pi=pi)
        sched = schedule(ph.policy, run.depth)
        reqs, steps = [], 0
        for p, n in zip(prompts, ph.max_new_tokens, strict=True):
            req, ran = fake_request(pi, table, p[-1], n, sched, run.depth, after_off(ph.policy or ""))
            if not run.speculative:
                req.update(verify_ct=None, correct_drafts=None, histogram=None)
            reqs.append(req)
            steps = max(steps, len(ran))
        wall = 0.01 * steps + 0.01
        for s in range(steps if run.adapter else 0):
            d = sched(s)
            trace.append(
                {
                    "step": len(trace) + 1,
                    "batch_size": ph.concurrency,
                    "num_steps": d,
                    "ts": t + s * 0.01,
                    "decide_us": 1.5,
                    "fallback": ph.policy == "raise" and 5 <= s < 25,
                    "step_time_s": 0.01,
                }
            )
        # static-0 runs at half the speculation-free engine's rate
        rate = 1000.0 * (0.5 if ph.policy == "static-0" else 1.0)
        lines.append(FR.phase_line(run, ph, prompts, reqs, t, wall, rate))
        t += wall + 1.0
    FR.write_engine_files(folder, run, lines, trace, log)


def plan() -> list[P.EngineRun]:
    return P.build_plan(
        PATHS, concurrency=(1, 4), perf_tokens=40, repeats=1, ramp_s=0, resume_k=(8,), pair_k=(1, 8), skip_k=8
    )


def tree_table(meta: dict[str, Any]) -> list[int]:
    """The tree accepts more than the chain on some roots: a table the analysis never sees."""
    return [min(4, a + (i % 3 == 0)) for i, a in enumerate(meta["eagle3"]["accept"])]


def write_all(
    folder: Path, meta: dict[str, Any], *, resume_table: list[int] | None = None, skip_works: bool = True
) -> None:
    """Every engine of ``plan()``: the skip phases hand the first on step the no-hidden table when
    ``skip_works``; ``resume_table`` replaces the engine's table after the off stretch of the pairs."""
    (folder / "models-meta.json").write_text(json.dumps(meta))
    e3 = meta["eagle3"]
    for run in plan():
        table = tree_table(meta) if run.path == "eagle3tree_v1" else e3["accept"]
        no_hidden = [min(a, b) for a, b in zip(table, e3["accept_no_hidden"], strict=True)]

        def after_off(
            label: str, table: list[int] = table, no_hidden: list[int] = no_hidden
        ) -> list[int] | None:
            if label.startswith("skip-catch-up-"):
                return no_hidden if skip_works else None
            return resume_table if label.startswith("resume-once-") else None

        write_engine(folder / run.id, meta, run, table, after_off)


def test_a_correct_eagle3_engine_passes_the_oracle_and_the_pairs_and_shows_the_skip(
    tmp_path: Path, meta: dict[str, Any]
) -> None:
    write_all(tmp_path, meta)
    rep = A.analyze_dir(tmp_path)
    engines = rep["engines"]
    assert list(engines) == [r.id for r in sorted(plan(), key=lambda r: r.id)]
    for eid in ("eagle3_v1/triton", "eagle3_v2/triton"):
        v = engines[eid]["verdicts"]
        assert v["oracle_acceptance"] and v["oracle_verify_counts"] and v["acceptance_after_resume"], v
        assert v["skipped_catch_up_detected"] is True and v["bookkeeping"] and v["lossless_all_phases"]
        assert v["raise_contained"] and v["switching_ran_both_modes"] and v["resume_measured"]
        by = {p["name"]: p for p in engines[eid]["phases"]}
        once = by["check:resume-once-8"]
        assert once["pair"]["equal"] == once["pair"]["requests"] == 32
        assert once["trace"]["first_batch"] == 32  # one prefill batch: every request resumed on one step
        skip = by["check:skip-catch-up-8"]
        assert skip["oracle_skip_changes"] > 0 and skip["pair"]["equal"] < skip["pair"]["requests"]
        assert skip["oracle_counts_equal"] == skip["requests"]  # the skip model predicts it exactly
        assert engines[eid]["skip_catch_up_log"]
    tree = engines["eagle3tree_v1/triton"]
    assert tree["depth"] == 4
    v = tree["verdicts"]
    assert v["oracle_acceptance"] is None and v["oracle_verify_counts"] is None  # no table for the tree
    assert v["acceptance_after_resume"] is True and v["skipped_catch_up_detected"] is True
    assert v["raise_contained"]  # its fallbacks run the tree's depth, 4
    assert rep["ok"], {k: e["verdicts"] for k, e in engines.items()}
    assert set(rep["perf"]) == {"eagle3/v1/triton", "eagle3/v2/triton", "eagle3-tree/v1/triton", "v1/triton"}
    for key in ("eagle3/v1/triton", "eagle3-tree/v1/triton"):
        assert set(rep["perf"][key]) == {*P.PERF_POLICIES, "never"}  # the base engine's row joins its side
        assert rep["off_ratio"][key] == {1: 0.5, 4: 0.5}
    assert "never" not in rep["perf"]["eagle3/v2/triton"]  # no speculation-free v2 engine ran
    md = A.render_markdown(rep)
    assert "overall: PASS" in md and "## throughput, eagle3-tree/v1/triton" in md
    assert "| check:resume-once-8 | 32/32 | check:ref-8 | 8 | 32/32 |" in md
    assert "static-0 / never" in md


def test_acceptance_that_changes_after_a_resume_fails_oracle_and_pairs(
    tmp_path: Path, meta: dict[str, Any]
) -> None:
    write_all(tmp_path, meta, resume_table=[0] * 200)  # the first verify after the stretch accepts nothing
    rep = A.analyze_dir(tmp_path)
    assert not rep["ok"]
    for eid in ("eagle3_v1/triton", "eagle3_v2/triton", "eagle3tree_v1/triton"):
        v = rep["engines"][eid]["verdicts"]
        assert v["acceptance_after_resume"] is False and v["lossless_all_phases"]  # lossless, yet caught
        pair = next(p["pair"] for p in rep["engines"][eid]["phases"] if p["name"] == "check:resume-once-1")
        assert pair["equal"] < pair["requests"] and pair["diffs"]
    for eid in ("eagle3_v1/triton", "eagle3_v2/triton"):
        v = rep["engines"][eid]["verdicts"]
        assert v["oracle_acceptance"] is False
        assert v["oracle_verify_counts"] is True  # the always-on check itself is right
    assert "| check:resume-once-1 |" in A.render_markdown(rep)


def test_a_skipped_catch_up_that_shows_nothing_fails_the_topk1_engines_only(
    tmp_path: Path, meta: dict[str, Any]
) -> None:
    write_all(tmp_path, meta, skip_works=False)
    rep = A.analyze_dir(tmp_path)
    assert not rep["ok"]
    for eid in ("eagle3_v1/triton", "eagle3_v2/triton"):
        v = rep["engines"][eid]["verdicts"]
        assert v["skipped_catch_up_detected"] is False and v["acceptance_after_resume"] is True
    tree = rep["engines"]["eagle3tree_v1/triton"]["verdicts"]
    assert tree["skipped_catch_up_detected"] is None  # reported, not failed: other branches can hide it


def test_pair_check_by_hand() -> None:
    ref = [{"verify_ct": 5, "correct_drafts": 6, "histogram": [1, 2, 1, 1]}]
    same = [{"verify_ct": 8, "correct_drafts": 6, "histogram": [4, 2, 1, 1]}]
    assert A.pair_check(same, ref, 3) == {"k": 3, "requests": 1, "equal": 1, "diffs": []}
    moved = [{"verify_ct": 8, "correct_drafts": 6, "histogram": [4, 3, 0, 1]}]  # one verify accepted 1, not 2
    assert A.pair_check(moved, ref, 3)["equal"] == 0
    fewer = [{"verify_ct": 9, "correct_drafts": 5, "histogram": [5, 2, 1, 1]}]
    got = A.pair_check(fewer, ref, 3)
    assert got["equal"] == 0 and got["diffs"] == [
        {"request": 0, "correct_drafts": [5, 6], "verify_ct": [9, 5]}
    ]
    assert A.pair_check([{"verify_ct": None, "correct_drafts": None}], ref, 3)["equal"] == 0
    margins = [9.0] * 10
    margins[7] = 0.2
    near = A.pair_check(fewer, [{**ref[0], "output_ids": [5, 7, 8]}], 3, margins)
    assert near["diffs"][0]["min_margin"] == 0.2  # a near tie on the way: the difference may be numerics


def test_oracle_counts_by_hand() -> None:
    pi = [4, 4, 4, 4, 5, 6, 7, 8, 4]  # 4 -> 5 -> 6 -> 7 -> 8 -> 4
    table = [0, 0, 0, 0, 2, 0, 1, 0, 3]
    # root 5 (emitted by prefill): accepts 0 -> emits 6; root 6: 1 -> 7 8; root 8: 3 (cap 3) -> 4 5 6 7
    got = A.oracle_counts(pi, lambda b: table[b], 5, 8, 3)
    assert got == A.OracleCounts(verifies=3, correct=4, histogram=[1, 1, 0, 1], overshoot=0)
    # off for 2 steps (emits 6, 7), then root 7 accepts 0 -> 8; root 8 accepts 3 -> 4 5 6 7 (one past the end)
    got = A.oracle_counts(pi, lambda b: table[b], 5, 7, 3, off_first=2)
    assert got == A.OracleCounts(verifies=4, correct=3, histogram=[3, 0, 0, 1], overshoot=1)
    # off for 1 step (emits 6); root 6 accepts 1 -> 7 8, or with nothing accepted after the stretch -> 7
    once = A.oracle_counts(pi, lambda b: table[b], 5, 7, 3, off_first=1)
    assert once == A.OracleCounts(verifies=3, correct=4, histogram=[1, 1, 0, 1], overshoot=1)
    none = A.oracle_counts(pi, lambda b: table[b], 5, 7, 3, off_first=1, first_on=lambda b: 0)
    assert none == A.OracleCounts(verifies=4, correct=3, histogram=[3, 0, 0, 1], overshoot=1)
    assert A.oracle_counts(pi, lambda b: table[b], 5, 7, 3, first_on=lambda b: 0) == A.oracle_counts(
        pi, lambda b: table[b], 5, 7, 3
    )  # no off stretch: nothing to resume from
    assert A.oracle_counts(pi, lambda b: table[b], 5, 1, 3) == A.OracleCounts(0, 0, [0, 0, 0, 0], 0)


def test_eagle3_accept_table_is_capped_at_the_engine_depth(meta: dict[str, Any]) -> None:
    fn = A.accepts_for(meta, "eagle3_v1", 2)
    assert fn is not None and max(fn(b) for b in range(200)) == 2
    assert A.accepts_for(meta, "eagle3tree_v1", 4) is None and A.accepts_for(meta, "base_v1", 3) is None
    assert A.accepts_for({**meta, "eagle3": {}}, "eagle3_v2", 3) is None  # results of a build without tables
    draft = A.accepts_for(meta, "v1", 3)
    pi, pd = meta["pi"], meta["pi_draft"]
    assert draft is not None and all(
        A.oracle_verifies(pi, pd, b, 50, 3) == A.oracle_counts(pi, draft, b, 51, 3).verifies
        for b in range(4, 200)
    )


@given(
    table=st.lists(st.integers(0, 8), min_size=40, max_size=40),
    root=st.integers(bm.FIRST_TOKEN, 39),
    n=st.integers(1, 120),
    k=st.integers(0, 70),
    depth=st.integers(1, 6),
)
@settings(max_examples=150, deadline=None)
def test_oracle_counts_keep_bookkeeping_and_the_pair_identity(
    table: list[int], root: int, n: int, k: int, depth: int
) -> None:
    """SGLang's bookkeeping holds for every schedule the oracle knows, and a request off for its first k
    steps then on is its k-tokens-shifted always-on twin plus k verifies of none: what the pairs check."""
    pi = bm.bigram_map(40, 3).tolist()
    acc = table.__getitem__
    x = A.oracle_counts(pi, acc, root, n + k, depth, off_first=k)
    assert sum(x.histogram) == x.verifies and sum(i * h for i, h in enumerate(x.histogram)) == x.correct
    assert 0 <= x.overshoot <= depth and 1 + x.verifies + x.correct - (n + k) == x.overshoot
    shifted = root
    for _ in range(k):
        shifted = pi[shifted]
    ref = A.oracle_counts(pi, acc, shifted, n, depth)
    assert x.correct == ref.correct and x.verifies == ref.verifies + k and x.overshoot == ref.overshoot
    assert x.histogram[1:] == ref.histogram[1:] and x.histogram[0] == ref.histogram[0] + k
