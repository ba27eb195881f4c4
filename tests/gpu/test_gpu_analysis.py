"""The live check's analysis, on results written by a fake engine that follows the bigram chain (or not)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import analysis as A
import bigram_model as bm
import numpy as np
import plan as P
import pytest

DEPTH = 3


def fake_request(pi: np.ndarray, pd: np.ndarray, last: int, n: int, depths: list[int]) -> dict[str, Any]:
    """What a correct speculative engine reports: one prefill token, then verify steps of depth depths[i]."""
    out = [int(pi[last])]
    hist = [0] * (DEPTH + 1)
    verifies = correct = 0
    i = 0
    while len(out) < n:
        k = depths[i % len(depths)]
        i += 1
        acc, d = 0, out[-1]
        while acc < k and int(pd[d]) == int(pi[d]):
            acc += 1
            d = int(pd[d])
        for _ in range(acc + 1):
            out.append(int(pi[out[-1]]))
        verifies += 1
        correct += acc
        hist[acc] += 1
    return {
        "output_ids": out[:n],
        "completion_tokens": n,
        "verify_ct": verifies,
        "correct_drafts": correct,
        "histogram": hist,
        "e2e_latency": 0.1,
    }


@pytest.fixture()
def meta() -> dict[str, Any]:
    pi = bm.bigram_map(200, 1)
    return {
        "chain_vocab": 200,
        "agree": 0.7,
        "pi": pi.tolist(),
        "pi_draft": bm.draft_map(pi, 0.7, 2).tolist(),
    }


def write_engine(
    folder: Path,
    meta: dict[str, Any],
    run: P.EngineRun,
    *,
    t0: float = 1000.0,
    tamper: dict[str, Any] | None = None,
    log: str = "",
) -> None:
    folder.mkdir(parents=True)
    pi, pd = np.array(meta["pi"]), np.array(meta["pi_draft"])
    lines = [json.dumps({"kind": "engine", "path": run.path, "init_s": 50.0})]
    trace: list[dict[str, Any]] = []
    t = t0
    for ph in run.phases:
        prompts = P.prompts_for(ph, meta["chain_vocab"])
        depths = {"always-off": [0], "static-0": [0], "switch": [3, 3, 3, 0, 0, 0], "raise": [0]}.get(
            ph.policy or "", [3]
        )
        if not run.speculative:
            depths = [0]
        reqs = [
            fake_request(pi, pd, p[-1], n, depths) for p, n in zip(prompts, ph.max_new_tokens, strict=True)
        ]
        if not run.speculative:
            for r in reqs:
                r.update(verify_ct=None, correct_drafts=None, histogram=None)
        if tamper and tamper.get("phase") == ph.name:
            tamper["fn"](reqs)
        steps = max(r["verify_ct"] or r["completion_tokens"] for r in reqs)
        wall = steps * 0.01
        for s in range(steps):
            k = depths[s % len(depths)]
            fb = ph.policy == "raise" and 5 <= s < 25
            trace.append(
                {
                    "step": len(trace) + 1,
                    "batch_size": ph.concurrency,
                    "num_steps": 3 if fb else k,
                    "ts": t + s * 0.01,
                    "decide_us": 1.5,
                    "fallback": fb,
                    "step_time_s": 0.01,
                    "accepted_draft_tokens": [1] * ph.concurrency if k else None,
                    "last_num_steps": k,
                }
            )
        tokens = sum(r["completion_tokens"] for r in reqs)
        lines.append(
            json.dumps(
                {
                    "kind": "phase",
                    "path": run.path,
                    "name": ph.name,
                    "phase_kind": ph.kind,
                    "policy": ph.policy,
                    "concurrency": ph.concurrency,
                    "prompt_len": ph.prompt_len,
                    "max_new_tokens": list(ph.max_new_tokens),
                    "seed": ph.seed,
                    "prompt_last": [p[-1] for p in prompts],
                    "t_start": t,
                    "t_end": t + wall,
                    "wall_s": wall,
                    "tokens": tokens,
                    "tok_per_s": tokens / wall,
                    "error": None,
                    "requests": reqs,
                }
            )
        )
        t += wall + 1.0
    (folder / "phases.jsonl").write_text("\n".join(lines) + "\n")
    if run.speculative:
        head = json.dumps({"kind": "header", "format": "specpolicy-trace/1"})
        (folder / "trace.jsonl").write_text("\n".join([head, *map(json.dumps, trace)]) + "\n")
    (folder / "engine.log").write_text(log + "GC DONE\n")


GOOD_LOG = (
    "[2026-11-30] specpolicy: live path: v2 worker (EAGLEWorkerV2, overlap scheduling), policy ...\n"
    "specpolicy rank 0: policy error (step 6); running the default depth 3 and continuing.\n"
    "Traceback (most recent call last):\nGpuCheckFailure: gpucheck_raise: deliberate failure\n"
)


def small_plan(paths: tuple[P.PathName, ...]) -> list[P.EngineRun]:
    return P.build_plan(paths, concurrency=(1, 4), perf_tokens=40)


def test_a_correct_engine_passes_every_check(tmp_path: Path, meta: dict[str, Any]) -> None:
    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    for run in small_plan(("v2", "base_v2")):
        write_engine(tmp_path / run.path, meta, run, log=GOOD_LOG if run.speculative else "")
    rep = A.analyze_dir(tmp_path)
    assert rep["ok"], rep["engines"]["v2"]["verdicts"]
    v = rep["engines"]["v2"]["verdicts"]
    assert v["raise_contained"] and v["raise_logged_once"] and v["switching_ran_both_modes"]
    assert v["oracle_verify_counts"] and v["live_path_logged"]
    assert set(rep["perf"]["v2"]) == set(P.PERF_POLICIES) | {"never"}
    assert sorted(rep["perf"]["v2"]["never"]) == [1, 4]
    perf4 = next(p for p in rep["engines"]["v2"]["phases"] if p["name"] == "perf:static:4")
    assert perf4["trace"]["max_batch"] == 4 and perf4["trace"]["tail_steps"] == 0
    md = A.render_markdown(rep)
    assert "overall: PASS" in md and "| cost_model |" in md


def test_a_lost_token_is_caught_with_its_position(tmp_path: Path, meta: dict[str, Any]) -> None:
    def drop(reqs: list[dict[str, Any]]) -> None:
        ids = reqs[2]["output_ids"]
        ids[:] = ids[:10] + ids[11:] + [ids[-1]]  # same length, token 10 skipped

    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    run = small_plan(("v1",))[0]
    write_engine(tmp_path / "v1", meta, run, tamper={"phase": "check:switch", "fn": drop}, log=GOOD_LOG)
    rep = A.analyze_dir(tmp_path)
    assert not rep["ok"]
    assert rep["engines"]["v1"]["verdicts"]["lossless_all_phases"] is False
    ph = next(p for p in rep["engines"]["v1"]["phases"] if p["name"] == "check:switch")
    assert ph["lossless"] == ph["requests"] - 1 and ph["first_mismatch"] == [10]


def test_missing_tokens_fallbacks_and_double_logs_fail(tmp_path: Path, meta: dict[str, Any]) -> None:
    def short(reqs: list[dict[str, Any]]) -> None:
        reqs[0]["completion_tokens"] -= 1
        reqs[0]["output_ids"].pop()

    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    run = small_plan(("v2",))[0]
    write_engine(
        tmp_path / "v2", meta, run, tamper={"phase": "perf:static:4", "fn": short}, log=GOOD_LOG + GOOD_LOG
    )
    v = A.analyze_dir(tmp_path)["engines"]["v2"]["verdicts"]
    assert v["exact_token_counts"] is False
    assert v["raise_logged_once"] is False
    assert v["raise_contained"] is True


def test_check_request_bookkeeping() -> None:
    pi = bm.bigram_map(100, 3)
    good = fake_request(pi, pi, 9, 20, [3])  # draft == target: every verify accepts all 3 drafts
    assert good["verify_ct"] == 5 and good["correct_drafts"] == 15  # 1 + 5*4 = 21 >= 20 (one cut)
    rc = A.check_request(good, 20, 9, pi, DEPTH)
    assert rc.count_ok and rc.lossless and rc.bookkeeping_ok
    bad_hist = {**good, "histogram": [0, 0, 0, 4]}
    assert not A.check_request(bad_hist, 20, 9, pi, DEPTH).bookkeeping_ok
    too_few = {**good, "correct_drafts": 3, "histogram": [4, 0, 0, 1]}
    rc = A.check_request(too_few, 20, 9, pi, DEPTH)
    assert not rc.bookkeeping_ok and "outside" in rc.bookkeeping_note
    assert A.check_request({**good, "verify_ct": None}, 20, 9, pi, DEPTH).bookkeeping_ok is False
    assert A.check_request(good, 20, 9, pi, None).bookkeeping_ok is None  # speculation-free engine


def test_oracle_verifies_extremes_and_a_hand_case() -> None:
    pi = bm.bigram_map(300, 0)
    assert A.oracle_verifies(pi, pi, 7, 100, 3) == 25
    nope = np.where(pi == 5, 6, 5)
    assert A.oracle_verifies(pi, nope, 7, 100, 3) == 100
    pi2 = np.array([4, 4, 4, 4, 5, 6, 7, 4])  # 4 -> 5 -> 6 -> 7 -> 4
    pd2 = np.array([4, 4, 4, 4, 5, 6, 4, 4])  # the draft errs only after 6
    # from 4: drafts 5, 6, 4(wrong, target says 7) -> accept 2, emit 5 6 7; from 7: drafts 4 5 6 all right
    assert A.oracle_verifies(pi2, pd2, 4, 3, 3) == 1
    assert A.oracle_verifies(pi2, pd2, 4, 7, 3) == 2


def test_trace_summary_and_phase_window() -> None:
    recs: list[dict[str, Any]] = [
        {"num_steps": 3, "ts": 1.0, "decide_us": 2.0, "accepted_draft_tokens": [1, 2], "step_time_s": 0.004},
        {"num_steps": 0, "ts": 2.0, "decide_us": 1.0, "step_time_s": 0.002},
        {"num_steps": 3, "ts": 3.0, "decide_us": 3.0, "fallback": True, "accepted_draft_tokens": None},
        {"num_steps": 3, "ts": 9.0, "decide_us": 3.0},
    ]
    win = A.phase_trace(recs, 0.5, 3.5)
    assert len(win) == 3
    s = A.trace_summary(win)
    assert s["by_depth"] == {0: 1, 3: 2} and s["switches"] == 2 and s["fallbacks"] == 1
    assert s["fallback_depths"] == [3] and s["decide_us_p50"] == 2.0 and s["accepted_drafts_seen"] == 3
    assert s["step_ms_p50_by_depth"] == {0: 2.0, 3: 4.0}


def test_rotated_trace_files_are_read_oldest_first(tmp_path: Path) -> None:
    (tmp_path / "trace.jsonl.2").write_text('{"kind":"header"}\n{"step":1,"num_steps":3}\n')
    (tmp_path / "trace.jsonl.1").write_text('{"step":2,"num_steps":0}\n')
    (tmp_path / "trace.jsonl").write_text('{"step":3,"num_steps":3}\n{"step":4,"num_')  # cut by a kill
    assert [r["step"] for r in A.load_trace(tmp_path)] == [1, 2, 3]
