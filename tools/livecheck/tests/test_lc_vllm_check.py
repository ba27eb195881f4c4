"""The vLLM live check (specpolicy_livecheck.vllm_check) on the CPU: its plan, engines, verdicts and report.

The engine side is exercised with a fake ``vllm.LLM`` (``generate`` returns the oracle's chain, or a wrong
token), and the stat logger with fake ``SchedulerStats``; the engine arguments are checked against vLLM's
real config classes in ``test_lc_vllm_args.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from lc_env import REPO
from specpolicy_livecheck import bigram_model as bm
from specpolicy_livecheck import plan as planmod
from specpolicy_livecheck import vllm_check as vc
from specpolicy_livecheck.paths import SGLANG_REPORT

ROOT = REPO
DOC = ROOT / "docs" / "results" / "methodology.md"


@pytest.fixture
def gpucheck_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test policies registered as on the GPU host (there through their entry points), for this test."""
    import sys

    import specpolicy.registry as registry
    from specpolicy.policies import BUILTIN_ENTRIES

    gc = sys.modules["specpolicy_gpucheck"]
    entries = [gc.CYCLE, gc.RAISE, gc.RESUME, gc.SLOW, gc.SKIP_CATCH_UP, gc.DISPATCH]
    reg = registry._Registry([*BUILTIN_ENTRIES, *entries])
    monkeypatch.setattr(registry, "_registry", lambda: reg)


def test_plan_interleaves_every_label_at_every_level_each_repeat() -> None:
    opts = vc.Options()
    plan = vc.build_plan(opts)
    perf = [b for b in plan if b.kind == "perf"]
    labels = list(vc.DEFAULT_PERF)
    assert len(perf) == opts.repeats * len(opts.concurrency) * len(labels)
    assert [(b.repeat, b.c, b.label) for b in perf] == planmod.interleave(
        labels, opts.repeats, opts.concurrency
    )
    for r in range(opts.repeats):  # each repeat is a whole sweep before the next starts
        chunk = perf[r * len(opts.concurrency) * len(labels) : (r + 1) * len(opts.concurrency) * len(labels)]
        assert {(b.c, b.label) for b in chunk} == {(c, p) for c in opts.concurrency for p in labels}
    for b in perf:
        engine, dispatch = vc.PERF_LABELS[b.label]
        assert (b.engine, b.dispatch) == (engine, dispatch)
        assert len(b.lengths) == b.c and len(set(b.lengths)) == 1 and b.min_s == opts.min_batch_s
        assert b.seed == 100 * b.repeat + b.c  # the same prompts for every label of a point
    # the specpolicy labels run in one engine, through its dispatcher; vLLM's own ones in their engines
    assert {vc.PERF_LABELS[p][0] for p in ("static", "static-0", "cost_model")} == {"sp"}
    assert vc.PERF_LABELS["vllm-static"] == ("vllm-k", None) and vc.PERF_LABELS["never"] == ("never", None)
    # warm-ups cover every level and label; checks report per-step stats
    warm = {(b.c, b.label) for b in plan if b.kind == "warmup"}
    assert {(c, p) for c in opts.concurrency for p in labels} <= warm
    checks = [b for b in plan if b.kind == "check"]
    assert [b.label for b in checks if b.engine == "sp"] == list(vc.SP_CHECKS)
    assert all(b.steps and b.c == opts.check_concurrency and len(set(b.lengths)) > 1 for b in checks)
    controls = {b.label for b in checks if b.engine != "sp"}
    assert controls == {"never:no-spec", "vllm-k:always-on", "vllm-table:always-on"}
    profiles = [b for b in plan if b.kind == "profile"]
    assert {b.label for b in profiles} == set(vc.PROFILE_LABELS)
    assert all(b.lengths[0] >= (vc.PROFILE_DELAY + vc.PROFILE_STEPS) * (vc.K + 1) for b in profiles)


def test_plan_without_an_engine_drops_its_labels() -> None:
    plan = vc.build_plan(vc.Options(engines=("never", "sp")))
    assert {b.engine for b in plan} == {"never", "sp"}
    assert "vllm-static" not in {b.label for b in plan}


def test_dispatcher_serves_the_checks_and_the_perf_labels() -> None:
    policies = vc.sp_policies(vc.DEFAULT_PERF)
    assert set(vc.SP_CHECKS) | {"static", "static-0", "cost_model"} == set(policies)
    assert policies["static"] == {"name": "static", "num_steps": vc.K}
    assert policies["static-0"] == {"name": "static", "num_steps": 0}
    assert policies["switch"]["depths"] == [vc.K, 0] and policies["switch"]["period"] == 3
    assert policies["raise"]["raise_from"] == 5 and policies["raise"]["raise_count"] == 20


@pytest.mark.usefixtures("gpucheck_registered")
def test_engine_kwargs_by_engine(tmp_path: Path) -> None:
    opts = vc.Options(out=str(tmp_path / "out"))
    kws = {e: vc.engine_kwargs(e, tmp_path, opts, "/c", "/l", "/t") for e in vc.ENGINE_NAMES}
    for kw in kws.values():
        json.dumps(kw)  # plain data: the child process builds the engine from it
        assert kw["attention_config"] == {"backend": "TRITON_ATTN"}
        assert kw["kv_cache_memory_bytes"] == vc.KV_CACHE_BYTES and kw["max_num_seqs"] == vc.MAX_NUM_SEQS
        assert kw["async_scheduling"] is False and kw["disable_log_stats"] is False
        assert kw["skip_tokenizer_init"] is True and kw["dtype"] == "bfloat16"
        assert Path(kw["profiler_config"]["torch_profiler_dir"]).is_absolute()
    assert "speculative_config" not in kws["never"] and "scheduler_cls" not in kws["never"]
    for e in ("vllm-k", "vllm-table", "sp"):
        spec = kws[e]["speculative_config"]
        assert spec["method"] == "draft_model" and spec["model"] == str(tmp_path / "draft")
        assert spec["num_speculative_tokens"] == vc.K and spec["attention_backend"] == "TRITON_ATTN"
    assert "num_speculative_tokens_per_batch_size" not in kws["vllm-k"]["speculative_config"]
    assert kws["vllm-table"]["speculative_config"]["num_speculative_tokens_per_batch_size"] == vc.vllm_table()
    sp = kws["sp"]
    assert sp["scheduler_cls"] == "specpolicy.adapters.vllm.Scheduler"
    section = sp["additional_config"]["specpolicy"]
    assert section["policy"]["name"] == "gpucheck_dispatch" and section["policy"]["control_file"] == "/c"
    assert section["trace_path"] == "/t" and section["metrics"] is False
    # the covering schedule lists every depth the dispatcher can choose (0 and K)
    depths = {d for _, _, d in sp["speculative_config"]["num_speculative_tokens_per_batch_size"]}
    assert depths == {0, vc.K}


def test_vllm_table_is_the_documented_one_clamped() -> None:
    from specpolicy.sim.comparators import VLLM_EAGLE3_TABLE

    table = vc.vllm_table()
    assert table[0][0] == 1 and table[-1][1] == vc.MAX_NUM_SEQS
    assert all(d <= vc.K for _, _, d in table)
    assert [r[:2] for r in table] == [[lo, min(hi, 128)] for lo, hi, _ in VLLM_EAGLE3_TABLE if lo <= 128]
    assert all(a[1] + 1 == b[0] for a, b in zip(table, table[1:], strict=False))


# ----------------------------------------------------------------------------------------------- verdicts
def steps_of(depths: list[int], n: int = 4, accept: int = 1) -> list[list[int]]:
    return [[n, n * d, min(accept, d) * n] if d else [0, 0, 0] for d in depths]


def test_always_on_needs_every_drafting_step_at_k() -> None:
    assert vc.verdict_always_on(steps_of([0, 3, 3, 3, 3]))["ok"]
    assert not vc.verdict_always_on(steps_of([0, 3, 2, 3]))["ok"]  # a step below K
    assert not vc.verdict_always_on(steps_of([0, 3, 0, 3, 3]))["ok"]  # a step without drafts mid-batch
    assert not vc.verdict_always_on(steps_of([0, 0]))["ok"]


def test_always_off_needs_no_draft_token_at_all() -> None:
    assert vc.verdict_always_off(steps_of([0] * 20))["ok"]
    assert not vc.verdict_always_off(steps_of([0] * 10 + [3]))["ok"]


def test_switch_needs_runs_of_the_period_of_k_and_zero() -> None:
    good = [0] + ([3] * 3 + [0] * 3) * 6 + [3]
    v = vc.verdict_switch(steps_of(good))
    assert v["ok"] and v["depths_seen"] == [0.0, 3.0]
    assert not vc.verdict_switch(steps_of([0] + [3] * 30))["ok"]  # never off
    assert not vc.verdict_switch(steps_of([0] + ([3] * 3 + [2] * 3) * 6))["ok"]  # a depth nobody chose
    assert not vc.verdict_switch(steps_of([0] + ([3] * 6 + [0] * 6) * 3))["ok"]  # runs twice as long


def test_raise_needs_the_default_depth_for_the_failing_calls_and_one_log() -> None:
    depths = [0] * 5 + [3] * 20 + [0] * 30
    trace = {"fallbacks": 20, "fallback_depths": [3]}
    assert vc.verdict_raise(steps_of(depths), trace, 1)["ok"]
    assert vc.verdict_raise(steps_of(depths), None, None)["ok"]  # stats alone, where no trace exists
    assert not vc.verdict_raise(steps_of(depths), trace, 2)["ok"]  # logged twice
    assert not vc.verdict_raise(steps_of(depths), {"fallbacks": 19, "fallback_depths": [3]}, 1)["ok"]
    assert not vc.verdict_raise(steps_of([0] * 5 + [3] * 25), trace, 1)["ok"]  # too many steps at K
    assert not vc.verdict_raise(steps_of([0] * 5 + [2] * 20), trace, 1)["ok"]  # another depth


def test_step_stats_logger_reads_vllms_spec_decoding_stats() -> None:
    rec = vc.SpecStatsLogger()
    spec = SimpleNamespace(num_drafts=4, num_draft_tokens=12, num_accepted_tokens=7)
    rec.record(SimpleNamespace(spec_decoding_stats=spec), None)
    rec.record(SimpleNamespace(spec_decoding_stats=None), None)
    rec.record(None, None)  # no scheduler stats: not a step of this engine
    rec.log()
    rec.log_engine_initialized()
    rec.record_sleep_state(1, 0)
    assert rec.take() == [[4, 12, 7], [0, 0, 0]] and rec.take() == []
    assert vc.depths([[4, 12, 7], [0, 0, 0]]) == [3.0, 0.0]


# ----------------------------------------------------------------------------------------------- engine side
class FakeLLM:
    """``generate`` answers with the bigram chain (or a wrong first token) and feeds the stat logger."""

    def __init__(self, pi: np.ndarray, rec: vc.SpecStatsLogger, wrong: bool = False) -> None:
        self.pi, self.rec, self.wrong = pi, rec, wrong

    def generate(self, prompts: list[list[int]], lengths: list[int]) -> list[list[int]]:
        for _ in range(3):
            self.rec.record(
                SimpleNamespace(
                    spec_decoding_stats=SimpleNamespace(
                        num_drafts=len(prompts), num_draft_tokens=3 * len(prompts), num_accepted_tokens=2
                    )
                ),
                None,
            )
        out = [bm.greedy_chain(self.pi, p[-1], n) for p, n in zip(prompts, lengths, strict=True)]
        if self.wrong:
            out[0][0] += 1
        return out


def _fake_generate(
    llm: FakeLLM, prompts: list[list[int]], lengths: list[int]
) -> tuple[list[list[int]], float]:
    return llm.generate(prompts, list(lengths)), 0.01


@pytest.mark.parametrize("wrong", [False, True])
def test_serve_batch_counts_tokens_stats_and_the_oracle(monkeypatch: pytest.MonkeyPatch, wrong: bool) -> None:
    monkeypatch.setattr(vc, "_generate", _fake_generate)
    pi = bm.bigram_map(300, seed=1)
    rec = vc.SpecStatsLogger()
    cmd = {"c": 4, "lengths": [5, 6, 7, 8], "seed": 3, "min_s": 0.0, "steps": True}
    res = vc.serve_batch(FakeLLM(pi, rec, wrong), rec, cmd, 300, pi)
    assert res["passes"] == 1 and res["tok_s"] > 0
    assert (res["requests"], res["lossless"]) == (4, 3 if wrong else 4)
    assert res["engine_steps"] == 3 and res["drafts"] == 12 and res["draft_tokens"] == 36
    assert res["step_stats"] == [[4, 12, 2]] * 3 and res["depth_hist"] == {"3.0": 3}
    assert res["accept_len"] == round(1 + 6 / 12, 3)


# ----------------------------------------------------------------------------------------------- report
def fake_raw(
    static0: float = 900.0, lossless_ok: bool = True, check_ok: bool = True, controls: bool = False
) -> dict[str, Any]:
    rates = {"never": 1000.0, "vllm-static": 1200.0, "vllm-table": 1150.0, "static": 1180.0,
             "static-0": static0, "cost_model": 1190.0}  # fmt: skip
    if controls:
        rates.update({"never-pw": 500.0, "vllm-static-pw": 800.0})
    perf: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for label, rate in rates.items():
        for c in (1, 16):
            perf.setdefault(label, {})[str(c)] = [
                {
                    "tok_s": rate * c * f,
                    "repeat": r,
                    "requests": c,
                    "lossless": c,
                    "drafts": 10,
                    "draft_tokens": 30,
                }
                for r, f in enumerate((0.99, 1.0, 1.01))
            ]
    if not lossless_ok:
        perf["static"]["1"][0]["lossless"] = 0
    verdict = {"ok": check_ok}
    return {
        "engine": "vllm 0.26.0",
        "device": "NVIDIA H200",
        "perf": perf,
        "checks": {label: {"requests": 32, "lossless": 32, "verdict": verdict} for label in vc.SP_CHECKS},
        "engines": {"sp": {"ready": True}},
        "profiles": {},
    }


def test_report_has_the_sglang_reports_shape() -> None:
    report = vc.build_report(fake_raw())
    sglang = json.loads(SGLANG_REPORT.read_text())
    for key in ("ok", "model", "perf", "perf_spread", "perf_samples", "off_ratio", "doctor", "engines"):
        assert key in report and key in sglang
    (path,) = report["perf"]
    assert path == vc.PATH_KEY == "mrv1/triton"
    # label -> concurrency (a string, as in the SGLang report) -> median tok/s; spread [min, max]
    assert report["perf"][path]["never"] == {"1": 1000.0, "16": 16000.0}
    assert report["perf_spread"][path]["never"]["1"] == [990.0, 1010.0]
    sg_path = next(iter(sglang["perf"]))
    assert isinstance(next(iter(sglang["perf"][sg_path]["never"])), str)
    assert report["off_ratio"][path] == {"1": 0.9, "16": 0.9}
    assert report["ratios"][path]["static-0/never"]["1"]["median"] == 0.9
    assert report["ratios"][path]["cost_model/max(never,vllm-static)"]["1"]["n"] == 3
    assert report["depth_by_label"][path]["static"]["1"] == 3.0
    assert report["ok"] is True
    assert all(v["requests"] == v["lossless"] for v in report["lossless"].values())


def test_report_is_not_ok_when_a_request_or_a_check_fails() -> None:
    assert vc.build_report(fake_raw(lossless_ok=False))["ok"] is False
    assert vc.build_report(fake_raw(check_ok=False))["ok"] is False
    assert vc.build_report({"perf": {}})["ok"] is False


def test_report_subcommand_merges_the_doctor(tmp_path: Path) -> None:
    raw, doctor, out = tmp_path / "raw.json", tmp_path / "doctor.json", tmp_path / "report.json"
    raw.write_text(json.dumps(fake_raw()))
    doctor.write_text(json.dumps({"rc": 0, "report": {"vllm": {"ok": True}}}))
    assert vc.main(["report", str(raw), "--report", str(out), "--doctor", str(doctor)]) == 0
    report = json.loads(out.read_text())
    assert report["doctor"]["rc"] == 0 and report["device"] == "NVIDIA H200"


# ----------------------------------------------------------------------------------------------- dry run
def test_dry_run_prints_the_plan_within_the_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert vc.main(["--dry-run", "--work", "/nowhere", "--out", "/tmp/vc-dry", "--budget-s", "560"]) == 0
    text = capsys.readouterr().out
    assert "never, vllm-static, vllm-table, static, static-0, cost_model" in text
    est = vc.estimate(vc.Options(), vc.build_plan(vc.Options()))
    assert est["total"] <= 560 and f"total ~{est['total']:.0f} s of 560 s" in text
    assert "over" not in text.splitlines()[-1]


def test_dry_run_says_when_the_plan_runs_over(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        vc.main(["--dry-run", "--concurrency", ",".join(map(str, planmod.CONCURRENCY)), "--repeats", "5"])
        == 0
    )
    assert "over, the perf sweep stops at the deadline" in capsys.readouterr().out


def test_unknown_labels_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert vc.main(["--dry-run", "--perf", "static,nonsense"]) == 2
    assert "nonsense" in capsys.readouterr().err


def test_the_documented_commands_plan_within_their_budget() -> None:
    text = DOC.read_text().replace("\\\n", " ")  # a command continued over lines is one command
    # the command, run as ``python -m``, or the module's former script
    marks = ("specpolicy-livecheck vllm ", "specpolicy_livecheck vllm ", "vllm_check.py")
    cmds = [ln for ln in text.splitlines() if any(m in ln for m in marks) and "--budget-s" in ln]
    assert cmds, "the document gives the check's command"
    for line in cmds:
        mark = next(m for m in marks if m in line)
        args = line.split(mark, 1)[1].split()
        budget = float(args[args.index("--budget-s") + 1])
        given: dict[str, Any] = {}
        for flag, field, cast in (("--concurrency", "concurrency", int), ("--engines", "engines", str),
                                  ("--perf", "perf", str)):  # fmt: skip
            if flag in args:
                given[field] = tuple(cast(x) for x in args[args.index(flag) + 1].split(","))
        if "--profile" in args and args[args.index("--profile") + 1] == '""':
            given["profile"] = ()
        opts = vc.Options(**given)
        assert vc.estimate(opts, vc.build_plan(opts))["total"] <= budget <= 580


def test_check_verdicts_read_the_trace_and_the_engine_log(tmp_path: Path) -> None:
    t0 = 1_000.0
    recs = [
        {"step": i, "num_steps": 3 if 5 <= i < 25 else 0, "fallback": 5 <= i < 25, "ts": t0 + 0.01 * i,
         "decide_us": 2.0}
        for i in range(60)
    ]  # fmt: skip
    recs.append({"step": 99, "num_steps": 3, "fallback": True, "ts": t0 + 50, "decide_us": 2.0})  # later
    (tmp_path / "trace-sp.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    line = "ERROR specpolicy rank 0: policy error (step 6): GpuCheckFailure: deliberate; running 3\n"
    (tmp_path / "engine-sp.log").write_text("INFO start\n" + line)
    res = {"step_stats": steps_of([0] * 5 + [3] * 20 + [0] * 35), "t0": t0, "t1": t0 + 1.0}
    v = vc._check_verdict("raise", res, tmp_path)
    assert v["ok"] and v["trace_fallbacks"] == 20 and v["policy_error_logs"] == 1
    (tmp_path / "engine-sp.log").write_text(line * 2)
    assert not vc._check_verdict("raise", res, tmp_path)["ok"]
    off = {"step_stats": steps_of([0] * 10)}
    assert vc._check_verdict("never:no-spec", off, tmp_path)["ok"]
    assert not vc._check_verdict("vllm-k:always-on", off, tmp_path)["ok"]


def test_piecewise_controls_are_their_engines_held_to_piecewise_graphs(tmp_path: Path) -> None:
    """``never-pw`` and ``vllm-k-pw`` are ``never`` and ``vllm-k`` with the CUDA-graph mode vLLM 0.26.0's V1
    runner forces on a dynamic verify length: the same engine otherwise, so the ratio isolates the mode."""
    opts = vc.Options(out=str(tmp_path / "out"))
    for pw, plain in (("never-pw", "never"), ("vllm-k-pw", "vllm-k")):
        kw = vc.engine_kwargs(pw, tmp_path, opts, "/c", "/l", "/t")
        ref = vc.engine_kwargs(plain, tmp_path, opts, "/c", "/l", "/t")
        assert kw.pop("compilation_config") == {"cudagraph_mode": "PIECEWISE"}
        assert "compilation_config" not in ref
        kw["profiler_config"]["torch_profiler_dir"] = ref["profiler_config"]["torch_profiler_dir"]
        assert kw == ref
    assert vc.PERF_LABELS["never-pw"] == ("never-pw", None)
    assert vc.PERF_LABELS["vllm-static-pw"] == ("vllm-k-pw", None)


def test_piecewise_controls_are_accepted_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    rc = vc.main(["--dry-run", "--engines", "never,never-pw,vllm-k-pw,sp",
                  "--perf", "never,never-pw,vllm-static-pw,static-0", "--concurrency", "1,16"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and "never-pw" in out and "vllm-static-pw" in out
    assert vc.main(["--dry-run", "--engines", "never,never-xx"]) != 0


def test_side_files_travel_as_one_archive(tmp_path: Path) -> None:
    """A device call brings back at most 8 files: logs, traces and dispatcher files go into one archive,
    the results stay beside it, and the archive holds every packed file's bytes."""
    import tarfile

    side = {"engine-never.log": "a", "engine-sp.log": "b", "trace-sp.jsonl": "{}\n", "dispatch-sp.jsonl": "x",
            "control-sp.txt": "static"}  # fmt: skip
    for name, text in {**side, "vllm-check.json": "{}", "report-vllm.json": "{}", "log.txt": "l"}.items():
        (tmp_path / name).write_text(text)
    packed = vc.pack_side_files(tmp_path)
    assert sorted(packed) == sorted(side)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["vllm-check.json", "report-vllm.json", "log.txt", vc.SIDE_ARCHIVE])
    with tarfile.open(tmp_path / vc.SIDE_ARCHIVE) as tar:
        got = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert got == side
    assert vc.pack_side_files(tmp_path) == []  # nothing left to pack: the archive is not rewritten empty
    assert (tmp_path / vc.SIDE_ARCHIVE).stat().st_size > 0


def test_report_splits_the_cost_of_off_with_the_piecewise_controls() -> None:
    """With the controls the report gives, repeat by repeat, what the forced graph mode costs (never-pw /
    never) and what is left with the same graphs (static-0 / never-pw, static / vllm-static-pw)."""
    ratios = vc.build_report(fake_raw(controls=True))["ratios"][vc.PATH_KEY]
    assert ratios["never-pw/never"]["16"]["median"] == 0.5
    assert ratios["static-0/never-pw"]["1"] == {"median": 1.8, "min": 1.8, "max": 1.8, "n": 3}
    assert ratios["static/vllm-static-pw"]["16"]["median"] == 1.475
    assert "never-pw/never" not in vc.build_report(fake_raw())["ratios"][vc.PATH_KEY]
