"""The live check's analysis, on results written by a fake engine that follows the bigram chain (or not)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fake_results as FR
import numpy as np
import pytest
from specpolicy_livecheck import analysis as A
from specpolicy_livecheck import bigram_model as bm
from specpolicy_livecheck import plan as P

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


def _depths(policy: str | None, speculative: bool) -> list[int]:
    """The depths a correct adapter runs for each test policy, step after step."""
    if not speculative:
        return [0]
    if policy and policy.startswith("resume-"):
        k = int(policy.split("-")[1])
        return [0] * k + [3] * P.RESUME_ON_STEPS
    return {"always-off": [0], "static-0": [0], "switch": [3, 3, 3, 0, 0, 0], "raise": [0]}.get(
        policy or "", [3]
    )


def _step_time(depths: list[int], s: int) -> float:
    """10 ms a step; the first on step after k off steps costs 0.1 ms per missed step more (the resume)."""
    k = 0
    while k < s and depths[(s - 1 - k) % len(depths)] == 0:
        k += 1
    return 0.01 + (1e-4 * k if depths[s % len(depths)] > 0 else 0.0)


def _ramp_times(reqs: list[dict[str, Any]], arrivals: tuple[float, ...]) -> None:
    for r, a in zip(reqs, arrivals, strict=True):
        r.update(scheduled_s=a, arrival_s=a + 0.001, first_token_s=a + 0.02)
        r["finish_s"] = r["first_token_s"] + 0.005 * (r["completion_tokens"] - 1)


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
    lines = [FR.engine_line(run, 50.0)]
    trace: list[dict[str, Any]] = []
    t = t0
    for ph in run.phases:
        prompts = P.prompts_for(ph, meta["chain_vocab"])
        depths = _depths(ph.policy, run.speculative and ph.policy is not None)
        if run.speculative and ph.policy is None:
            depths = [3]  # SGLang's own speculation
        reqs = [
            fake_request(pi, pd, p[-1], n, depths) for p, n in zip(prompts, ph.max_new_tokens, strict=True)
        ]
        if not run.speculative:
            for r in reqs:
                r.update(verify_ct=None, correct_drafts=None, histogram=None)
        if ph.kind == "ramp":
            _ramp_times(reqs, ph.arrivals)
        if tamper and tamper.get("phase") == ph.name:
            tamper["fn"](reqs)
        steps = max(r["verify_ct"] or r["completion_tokens"] for r in reqs)
        wall = steps * 0.01
        for s in range(steps if run.adapter else 0):
            k = depths[s % len(depths)]
            fb = ph.policy == "raise" and 5 <= s < 25
            trace.append(
                {
                    "step": len(trace) + 1,
                    "batch_size": min(ph.concurrency, 128),
                    "num_steps": 3 if fb else k,
                    "ts": t + s * 0.01,
                    "decide_us": 1.5,
                    "fallback": fb,
                    "step_time_s": _step_time(depths, s),
                    "accepted_draft_tokens": [1] * ph.concurrency if k else None,
                    "last_num_steps": k,
                }
            )
        tokens = sum(r["completion_tokens"] for r in reqs)
        lines.append(FR.phase_line(run, ph, prompts, reqs, t, wall, tokens / wall * (1 + 0.01 * ph.repeat)))
        t += wall + 1.0
    FR.write_engine_files(folder, run, lines, trace, log)


GOOD_LOG = (
    "[2026-11-30] specpolicy: live path: v2 worker (EAGLEWorkerV2, overlap scheduling), policy ...\n"
    "specpolicy rank 0: policy error (step 6); running the default depth 3 and continuing.\n"
    "Traceback (most recent call last):\nGpuCheckFailure: gpucheck_raise: deliberate failure\n"
)


def small_plan(paths: tuple[P.PathName, ...], **kw: Any) -> list[P.EngineRun]:
    opts: dict[str, Any] = {
        "concurrency": (1, 4),
        "perf_tokens": 40,
        "repeats": 2,
        "ramp_s": 3.0,
        "ramp_peak": 8,
        "resume_k": (1, 8),
        **kw,
    }
    return P.build_plan(paths, **opts)


def test_a_correct_engine_passes_every_check(tmp_path: Path, meta: dict[str, Any]) -> None:
    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    for run in small_plan(("v2", "base_v2")):
        write_engine(tmp_path / run.id, meta, run, log=GOOD_LOG if run.speculative else "")
    rep = A.analyze_dir(tmp_path)
    assert list(rep["engines"]) == ["base_v2/triton", "v2/triton"]
    assert rep["ok"], rep["engines"]["v2/triton"]["verdicts"]
    v = rep["engines"]["v2/triton"]["verdicts"]
    assert v["raise_contained"] and v["raise_logged_once"] and v["switching_ran_both_modes"]
    assert v["oracle_verify_counts"] and v["live_path_logged"] and v["resume_measured"]
    assert set(rep["perf"]) == {"v2/triton"}
    assert set(rep["perf"]["v2/triton"]) == set(P.PERF_POLICIES) | {"never"}
    assert sorted(rep["perf"]["v2/triton"]["never"]) == [1, 4]
    perf4 = next(p for p in rep["engines"]["v2/triton"]["phases"] if p["name"] == "perf:static:4:r0")
    assert perf4["trace"]["max_batch"] == 4 and perf4["trace"]["tail_steps"] == 0
    md = A.render_markdown(rep)
    assert "overall: PASS" in md and "| cost_model |" in md and "## ramp, v2/triton" in md
    assert "## resume cost, v2/triton" in md


def test_report_shape_medians_spreads_ramp_and_resume(tmp_path: Path, meta: dict[str, Any]) -> None:
    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    for run in small_plan(("v2", "base_v2"), repeats=3):
        write_engine(tmp_path / run.id, meta, run, log=GOOD_LOG if run.speculative else "")
    rep = json.loads(json.dumps(A.analyze_dir(tmp_path)))  # what --json writes: concurrency keys as text
    assert {
        "ok",
        "model",
        "engines",
        "perf",
        "perf_spread",
        "perf_samples",
        "ramp",
        "resume",
        "doctor",
    } <= set(rep)
    samples = rep["perf_samples"]["v2/triton"]["static"]["4"]
    assert len(samples) == 3  # the fake's tokens/s grow 1% per repeat
    assert rep["perf"]["v2/triton"]["static"]["4"] == pytest.approx(round(sorted(samples)[1], 1))
    assert rep["perf_spread"]["v2/triton"]["static"]["4"] == [min(samples), max(samples)]
    ramp = rep["ramp"]["v2/triton"]
    assert set(ramp) == {*P.RAMP_POLICIES, "never"}
    for r in ramp.values():
        assert r["lossless"] and r["finished"] == r["requests"] > 0
        assert r["tpot_p50"] == pytest.approx(5.0) and r["tpot_p99"] == pytest.approx(5.0)
        assert r["ttft_p50"] == pytest.approx(19.0) and r["max_lateness_s"] == pytest.approx(0.001)
        assert r["tokens_per_s"] > 0
    assert rep["engines"]["v2/triton"]["policies"]["hysteresis"] == P.perf_policies()["hysteresis"]
    res = rep["resume"]["v2/triton"]
    assert set(res) == {"1", "8"}
    for k, r in res.items():
        assert r["samples"] >= P.RESUME_CYCLES_MIN and r["normal_on_ms"] == pytest.approx(10.0)
        assert r["first_on_ms"] == pytest.approx(10.0 + 0.1 * int(k)) and r["off_ms"] == pytest.approx(10.0)


def test_results_of_the_first_runs_read_as_triton(tmp_path: Path, meta: dict[str, Any]) -> None:
    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    for run in small_plan(("v2", "base_v2"), ramp_s=0, resume_k=()):
        write_engine(tmp_path / run.path, meta, run, log=GOOD_LOG if run.speculative else "")
    rep = A.analyze_dir(tmp_path)
    assert set(rep["engines"]) == {"v2/triton", "base_v2/triton"} and rep["ok"]
    assert rep["engines"]["v2/triton"]["verdicts"]["resume_measured"] is None  # not planned: no verdict


def test_a_lost_token_is_caught_with_its_position(tmp_path: Path, meta: dict[str, Any]) -> None:
    def drop(reqs: list[dict[str, Any]]) -> None:
        ids = reqs[2]["output_ids"]
        ids[:] = ids[:10] + ids[11:] + [ids[-1]]  # same length, token 10 skipped

    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    run = small_plan(("v1",))[0]
    write_engine(tmp_path / run.id, meta, run, tamper={"phase": "check:switch", "fn": drop}, log=GOOD_LOG)
    rep = A.analyze_dir(tmp_path)
    assert not rep["ok"]
    assert rep["engines"]["v1/triton"]["verdicts"]["lossless_all_phases"] is False
    ph = next(p for p in rep["engines"]["v1/triton"]["phases"] if p["name"] == "check:switch")
    assert ph["lossless"] == ph["requests"] - 1 and ph["first_mismatch"] == [10]


def test_a_wrong_token_in_a_ramp_request_fails_the_report(tmp_path: Path, meta: dict[str, Any]) -> None:
    def flip(reqs: list[dict[str, Any]]) -> None:
        reqs[-1]["output_ids"][5] += 1

    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    run = small_plan(("base_v2",))[0]
    write_engine(tmp_path / run.id, meta, run, tamper={"phase": "ramp:never", "fn": flip})
    rep = A.analyze_dir(tmp_path)
    assert not rep["ok"] and rep["ramp"]["v2/triton"]["never"]["lossless"] is False
    assert rep["engines"]["base_v2/triton"]["verdicts"]["lossless_all_phases"] is False


def test_missing_tokens_fallbacks_and_double_logs_fail(tmp_path: Path, meta: dict[str, Any]) -> None:
    def short(reqs: list[dict[str, Any]]) -> None:
        reqs[0]["completion_tokens"] -= 1
        reqs[0]["output_ids"].pop()

    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    run = small_plan(("v2",))[0]
    write_engine(
        tmp_path / run.id,
        meta,
        run,
        tamper={"phase": "perf:static:4:r1", "fn": short},
        log=GOOD_LOG + GOOD_LOG,
    )
    v = A.analyze_dir(tmp_path)["engines"]["v2/triton"]["verdicts"]
    assert v["exact_token_counts"] is False
    assert v["raise_logged_once"] is False
    assert v["raise_contained"] is True


def test_doctor_output_is_recorded_and_a_failure_fails_the_report(
    tmp_path: Path, meta: dict[str, Any]
) -> None:
    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    run = small_plan(("base_v2",), ramp_s=0)[0]
    write_engine(tmp_path / run.id, meta, run)
    d = tmp_path / "doctor" / "triton"
    d.mkdir(parents=True)
    (d / "doctor.json").write_text(json.dumps({"smoke": {"ok": True}}))
    (d / "doctor.rc").write_text(json.dumps({"rc": 0, "seconds": 200.0}))
    rep = A.analyze_dir(tmp_path)
    assert rep["ok"] and rep["doctor"]["triton"]["report"] == {"smoke": {"ok": True}}
    assert "specpolicy doctor --smoke (triton): rc 0" in A.render_markdown(rep)
    (d / "doctor.json").write_text("Traceback: no GPU")
    (d / "doctor.rc").write_text(json.dumps({"rc": 1, "seconds": 3.0}))
    rep = A.analyze_dir(tmp_path)
    assert not rep["ok"] and rep["doctor"]["triton"]["output_tail"] == "Traceback: no GPU"


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


def test_median_percentile_and_spread_table() -> None:
    assert A.median([3.0, 1.0, 2.0]) == 2.0 and A.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    xs = [float(i) for i in range(1, 101)]
    assert A.percentile(xs, 50) == 50.0 and A.percentile(xs, 99) == 99.0 and A.percentile(xs, 100) == 100.0
    assert A.percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        A.median([])
    med, spread = A.spread_table({"v2/triton": {"static": {4: [10.0, 30.0, 20.0], 1: [5.0]}}})
    assert med == {"v2/triton": {"static": {1: 5.0, 4: 20.0}}}
    assert spread == {"v2/triton": {"static": {1: [5.0, 5.0], 4: [10.0, 30.0]}}}


def _resume_trace(k: int, cycles: int, on: int = 6, lag: bool = False) -> list[dict[str, Any]]:
    """k off steps (4 ms), then on steps (10 ms; the first costs 5 ms more, or the second when ``lag``)."""
    recs: list[dict[str, Any]] = []
    for _ in range(cycles):
        for _ in range(k):
            recs.append({"num_steps": 0, "step_time_s": 0.004})
        for j in range(on):
            extra = 0.005 if j == (1 if lag else 0) else 0.0
            recs.append({"num_steps": 3, "step_time_s": 0.010 + extra})
    for i, r in enumerate(recs):
        r.update(step=i + 1, batch_size=4)
    return recs


def test_resume_cost_on_a_synthetic_trace() -> None:
    r = A.resume_cost(_resume_trace(8, cycles=5), 8, 4)
    assert r["samples"] == 5 and r["other_resumes"] == 0
    assert r["first_on_ms"] == pytest.approx(15.0) and r["second_on_ms"] == pytest.approx(10.0)
    assert r["normal_on_ms"] == pytest.approx(10.0) and r["off_ms"] == pytest.approx(4.0)
    assert r["first_over_normal"] == pytest.approx(1.5) and r["excess_ms"] == pytest.approx(5.0)
    late = A.resume_cost(_resume_trace(8, cycles=5, lag=True), 8, 4)
    assert late["first_on_ms"] == pytest.approx(10.0) and late["second_on_ms"] == pytest.approx(15.0)
    assert late["normal_on_ms"] == pytest.approx(10.0)  # the third on step on is normal again
    other = A.resume_cost(_resume_trace(8, cycles=3), 64, 4)
    assert other["samples"] == 0 and other["other_resumes"] == 3 and "first_over_normal" not in other


def test_resume_cost_only_counts_steps_at_the_phase_batch_size() -> None:
    recs = _resume_trace(1, cycles=4)
    for r in recs[-7:]:  # the last cycle ran after a request finished
        r["batch_size"] = 3
    r = A.resume_cost(recs, 1, 4)
    assert r["samples"] == 3
    assert A.resume_cost(recs, 1, 3)["samples"] == 1


def test_ramp_summary_percentiles_and_load() -> None:
    reqs = [
        {
            "scheduled_s": float(i),
            "arrival_s": i + 0.01,
            "first_token_s": i + 0.1,
            "finish_s": i + 0.1 + 0.01 * 99,
            "completion_tokens": 100,
        }
        for i in range(10)
    ]
    reqs[9]["finish_s"] = reqs[9]["first_token_s"] + 0.05 * 99  # one slow request: the p99
    s = A.ramp_summary(reqs)
    assert s["tpot_p50"] == pytest.approx(10.0) and s["tpot_p99"] == pytest.approx(50.0)
    assert s["ttft_p50"] == pytest.approx(90.0) and s["max_lateness_s"] == pytest.approx(0.01)
    assert s["tokens"] == 1000 and s["span_s"] == pytest.approx(reqs[9]["finish_s"])
    assert s["tokens_per_s"] == pytest.approx(1000 / reqs[9]["finish_s"], rel=1e-3)
    assert s["peak_in_flight"] == 2 and s["finished"] == 10
    assert A.ramp_summary([{"error": "x"}]) == {"requests": 1, "finished": 0}


def test_tensor_parallel_engines_are_found_and_their_ranks_compared(
    tmp_path: Path, meta: dict[str, Any]
) -> None:
    """``tp2/<path>/<backend>`` engines: their tables keyed under tp2/, and rank 1's trace must carry rank
    0's depth at every step (a single differing step fails the report, and is shown)."""
    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    runs = small_plan(("v2", "base_v2"), tp=2)
    assert [r.id for r in runs] == ["tp2/v2/triton", "tp2/base_v2/triton"]
    for run in runs:
        write_engine(tmp_path / run.id, meta, run, log=GOOD_LOG if run.speculative else "")
    spec = tmp_path / "tp2" / "v2" / "triton"
    lines = (spec / "trace.jsonl").read_text().splitlines()
    (spec / "trace.rank1.jsonl").write_text("\n".join(lines) + "\n")
    rep = A.analyze_dir(tmp_path)
    assert set(rep["engines"]) == {"tp2/v2/triton", "tp2/base_v2/triton"}
    eng = rep["engines"]["tp2/v2/triton"]
    assert eng["verdicts"]["ranks_agree"] is True and eng["ranks"]["ranks"] == [0, 1]
    assert "ranks_agree" not in rep["engines"]["tp2/base_v2/triton"]["verdicts"]  # no adapter, no trace
    assert {"never", "static"} <= set(rep["perf"]["tp2/v2/triton"])
    # rank 1 ran another depth at one step
    recs = [json.loads(x) for x in lines]
    i = next(i for i, r in enumerate(recs) if r.get("num_steps") == 0)
    recs[i]["num_steps"] = 3
    (spec / "trace.rank1.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    rep = A.analyze_dir(tmp_path)
    ranks = rep["engines"]["tp2/v2/triton"]["ranks"]
    assert rep["ok"] is False and ranks["agree"] is False and ranks["differences"] == 1
    assert ranks["first_differences"] == [[1, recs[i]["step"], 3, 0]]
    # rank 1 lost more than its last two steps
    (spec / "trace.rank1.jsonl").write_text("\n".join(lines[:-3]) + "\n")
    assert A.analyze_dir(tmp_path)["engines"]["tp2/v2/triton"]["ranks"]["agree"] is False


def test_engine_ids_split_with_and_without_tensor_parallelism() -> None:
    assert A.split_engine_id("tp2/eagle3_v1/triton") == ("tp2/", "eagle3_v1", "triton")
    assert A.split_engine_id("base_v2/flashinfer") == ("", "base_v2", "flashinfer")
    assert A._side_key("tp2/base_v2/triton") == "tp2/v2/triton"
    assert A._side_key("tp2/eagle3tree_v1/triton") == "tp2/eagle3-tree/v1/triton"
    table: dict[str, dict[str, Any]] = {"tp2/v1/triton": {"never": {1: 5.0}}, "tp2/eagle3/v1/triton": {}}
    A._join_never(table, {"tp2/v1/triton"})
    assert table["tp2/eagle3/v1/triton"] == {"never": {1: 5.0}}


def test_a_reused_results_folder_is_read_from_its_last_engine_start(
    tmp_path: Path, meta: dict[str, Any]
) -> None:
    """A later command on the same host appends to the folder an earlier one left: only the last start's
    phases count, so an earlier start's (here lossy, 10x faster) batches reach neither checks nor medians."""
    (tmp_path / "models-meta.json").write_text(json.dumps(meta))
    runs = small_plan(("v2", "base_v2"), ramp_s=0, resume_k=())
    for run in runs:
        write_engine(tmp_path / run.id, meta, run, log=GOOD_LOG if run.speculative else "")
    fresh = A.analyze_dir(tmp_path)
    base = tmp_path / "base_v2" / "triton" / "phases.jsonl"
    recs = [json.loads(x) for x in base.read_text().splitlines()]
    earlier = [dict(recs[0], init_s=999.0)]
    for r in recs[1:]:
        bad = json.loads(json.dumps(r))
        bad["tok_per_s"] = r["tok_per_s"] * 10
        bad["requests"][0]["output_ids"] = [x + 1 for x in bad["requests"][0]["output_ids"]]
        earlier.append(bad)
    base.write_text("".join(json.dumps(r) + "\n" for r in earlier + recs))
    rep = A.analyze_dir(tmp_path)
    assert rep["ok"] and rep["engines"]["base_v2/triton"]["init_s"] == recs[0]["init_s"]
    assert rep["perf"] == fresh["perf"] and rep["perf_samples"] == fresh["perf_samples"]
    base.write_text("".join(json.dumps(r) + "\n" for r in recs + earlier))  # the lossy start last
    assert not A.analyze_dir(tmp_path)["ok"]
