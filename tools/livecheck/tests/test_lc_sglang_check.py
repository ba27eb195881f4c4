"""specpolicy_livecheck.sglang_check (run, plan, build-models, analyze): argument handling, engine
arguments per path, packing, and the analyze command."""

from __future__ import annotations

import importlib.util
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from lc_env import FAKES, POLICIES_PROJECT, child_env
from specpolicy_livecheck import bigram_model as bm
from specpolicy_livecheck import sglang_check as G
from test_lc_analysis import GOOD_LOG, small_plan, write_engine

#: the ``-m`` arguments that run the module behind run / plan / build-models / analyze
MODULE = ["-m", "specpolicy_livecheck.sglang_check"]


def test_engine_kwargs_pick_the_worker_path(tmp_path: Path) -> None:
    v1, v2 = G.engine_kwargs("v1", tmp_path), G.engine_kwargs("v2", tmp_path)
    assert v1["disable_overlap_schedule"] is True and v2["disable_overlap_schedule"] is False
    for kw in (v1, v2):
        assert kw["speculative_algorithm"] == "STANDALONE" and kw["speculative_eagle_topk"] == 1
        assert kw["speculative_num_draft_tokens"] == kw["speculative_num_steps"] + 1
        assert kw["speculative_draft_model_path"] == str(tmp_path / "draft")
        assert kw["cuda_graph_max_bs"] >= 128 and kw["max_running_requests"] >= 128
    base = G.engine_kwargs("base_v1", tmp_path)
    assert "speculative_algorithm" not in base and base["disable_overlap_schedule"] is True
    assert G.engine_kwargs("base_v2", tmp_path)["disable_overlap_schedule"] is False


def test_engine_kwargs_of_the_eagle3_paths_launch_the_head(tmp_path: Path) -> None:
    e1, e2, tree = (G.engine_kwargs(p, tmp_path) for p in ("eagle3_v1", "eagle3_v2", "eagle3tree_v1"))
    for kw in (e1, e2, tree):
        assert kw["speculative_algorithm"] == "EAGLE3"
        assert kw["speculative_draft_model_path"] == str(tmp_path / "eagle3")
        assert kw["model_path"] == str(tmp_path / "target")
    assert (
        e1["disable_overlap_schedule"]
        and not e2["disable_overlap_schedule"]
        and tree["disable_overlap_schedule"]
    )
    assert [
        e2[k] for k in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    ] == [
        3,
        1,
        4,
    ]
    assert [
        tree[k] for k in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    ] == [
        4,
        4,
        16,
    ]
    assert G.SPEC_KW["speculative_algorithm"] == "STANDALONE" and G.spec_kwargs("base_v1") == {}
    assert "tp_size" not in e2 and G.engine_kwargs("v2", tmp_path, tp=2)["tp_size"] == 2
    two = G.engine_kwargs("eagle3_v2", tmp_path, depth=2)  # a plan's launch depth reaches the engine
    assert (two["speculative_num_steps"], two["speculative_num_draft_tokens"]) == (2, 3)
    assert G.engine_kwargs("eagle3tree_v1", tmp_path, depth=2)["speculative_num_steps"] == 4  # its own


def test_device_builds_the_eagle3_head_only_when_an_eagle3_engine_is_planned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "call", lambda cmd, env=None: calls.append(cmd) or 0)
    work = tmp_path / "w"
    assert G._build_models(work, 0.7, eagle3=True) == 0
    assert calls[-1][-1] == "--eagle3" and "build-models" in calls[-1]
    (work / "models").mkdir(parents=True)
    (work / "models" / "meta.json").write_text(json.dumps({"pi": []}))
    assert G._build_models(work, 0.7) == 0 and len(calls) == 1  # the draft models are there
    assert G._build_models(work, 0.7, eagle3=True) == 0 and len(calls) == 2  # the head is not
    (work / "models" / "meta.json").write_text(json.dumps({"pi": [], "eagle3": {}}))
    assert G._build_models(work, 0.7, eagle3=True) == 0 and len(calls) == 2


def test_attention_backend_comes_from_the_run_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert G.engine_kwargs("v2", tmp_path, "flashinfer")["attention_backend"] == "flashinfer"
    monkeypatch.setenv("GC_ATTN", "flashinfer")
    assert G.engine_kwargs("v2", tmp_path)["attention_backend"] == "flashinfer"
    monkeypatch.delenv("GC_ATTN")
    assert G.engine_kwargs("v2", tmp_path)["attention_backend"] == "triton"


def test_extra_engine_kwargs_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GC_EXTRA_KW", '{"attention_backend": "flashinfer", "mem_fraction_static": 0.5}')
    kw = G.engine_kwargs("v2", tmp_path)
    assert kw["attention_backend"] == "flashinfer" and kw["mem_fraction_static"] == 0.5


def test_cli_requires_a_subcommand_and_its_arguments() -> None:
    with pytest.raises(SystemExit) as e:
        G.main([])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        G.main(["device", "--work", "/tmp/x"])  # --out missing


def test_analyze_command_writes_reports_and_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pi = bm.bigram_map(200, 1)
    meta = {
        "chain_vocab": 200,
        "agree": 0.7,
        "pi": pi.tolist(),
        "pi_draft": bm.draft_map(pi, 0.7, 2).tolist(),
    }
    res = tmp_path / "res"
    res.mkdir()
    (res / "models-meta.json").write_text(json.dumps(meta))
    for run in small_plan(("v1", "base_v1")):
        write_engine(res / run.id, meta, run, log=GOOD_LOG.replace("v2 worker", "v1 worker"))
    rc = G.main(["analyze", str(res), "--json", str(tmp_path / "r.json"), "--md", str(tmp_path / "r.md")])
    assert rc == 0
    assert json.loads((tmp_path / "r.json").read_text())["ok"] is True
    assert "throughput, v1/triton" in (tmp_path / "r.md").read_text()
    assert "overall: PASS" in capsys.readouterr().out
    (res / "v1" / "triton" / "engine.log").write_text("nothing\n")  # no live-path line, engine did not finish
    assert G.main(["analyze", str(res)]) == 1


def test_pack_collects_every_engine_folder_and_the_model_meta(tmp_path: Path) -> None:
    work, out = tmp_path / "w", tmp_path / "o"
    for p in ("v2/triton", "base_v2/triton", "v1/triton", "doctor/triton"):
        (work / "runs" / p).mkdir(parents=True)
        (work / "runs" / p / "phases.jsonl").write_text("{}\n")
    (work / "models").mkdir()
    (work / "models" / "meta.json").write_text("{}")
    out.mkdir()
    G._pack(work, out, ("v2/triton", "base_v2/triton"), "v2-base_v2-triton")
    with tarfile.open(out / "results-v2-base_v2-triton.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"v2/triton/phases.jsonl", "base_v2/triton/phases.jsonl", "models-meta.json"} <= names
    assert "doctor/triton/phases.jsonl" in names
    assert not any(n.startswith("v1") for n in names)  # another command's engine
    assert [p.name for p in out.iterdir()] == ["results-v2-base_v2-triton.tar.gz"]


SITTING_V2 = [
    "--paths",
    "v2,base_v2",
    "--attn",
    "triton",
    "--concurrency",
    "1,4,16,64,128",
    "--ramp-s",
    "30",
    "--budget-s",
    "570",
]


def test_dry_run_prints_the_plan_with_estimates_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = G.main(
        ["device", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "o"), *SITTING_V2, "--dry-run"]
    )
    text = capsys.readouterr().out
    assert rc == 0 and not (tmp_path / "w").exists() and not (tmp_path / "o").exists()
    assert "engine v2/triton" in text and "engine base_v2/triton" in text and "CUT" not in text
    assert "perf      60 phase(s)" in text and "resume     4 phase(s)" in text
    total = float(text.rsplit("total ~", 1)[1].split(" ")[0])
    assert total <= 570


#: The EAGLE-3 sitting (docs/results/methodology.md, "One run").
SITTING_EAGLE3 = [
    "--paths",
    "eagle3_v1,eagle3_v2,eagle3tree_v1,base_v1",
    "--attn",
    "triton",
    "--concurrency",
    "1,16,128",
    "--repeats",
    "2",
    "--min-batch-s",
    "0.5",
    "--perf",
    "static,static-0,cost_model",
    "--resume-k=",
    "--ramp-s",
    "0",
    "--pair-k",
    "1,64",
    "--skip-k",
    "8",
]


def test_dry_run_of_the_eagle3_sitting_fits_its_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work, out = str(tmp_path / "w"), str(tmp_path / "o")
    assert G.main(["device", "--work", work, "--out", out, *SITTING_EAGLE3, "--dry-run"]) == 0
    text = capsys.readouterr().out
    for eid in ("eagle3_v1/triton", "eagle3_v2/triton", "eagle3tree_v1/triton", "base_v1/triton"):
        assert f"engine {eid}" in text
    assert "CUT" not in text and "check     10 phase(s)" in text and "perf      18 phase(s)" in text
    assert float(text.rsplit("total ~", 1)[1].split(" ")[0]) <= 540 - 10


def test_doctor_command_runs_the_smoke_test_on_the_test_models(tmp_path: Path) -> None:
    cmd = G.doctor_command(tmp_path, "flashinfer")
    assert cmd[1:6] == ["-m", "specpolicy.cli", "doctor", "--engine", "sglang"] and "--smoke" in cmd
    assert cmd[cmd.index("--model") + 1] == str(tmp_path / "target")
    assert cmd[cmd.index("--draft") + 1] == str(tmp_path / "draft")
    assert cmd[cmd.index("--algorithm") + 1] == "STANDALONE"
    kw = json.loads(cmd[cmd.index("--engine-args") + 1])
    assert kw["attention_backend"] == "flashinfer" and kw["cuda_graph_max_bs"] == 8
    assert "model_path" not in kw and "speculative_algorithm" not in kw


_HAVE_TORCH = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "safetensors", "tokenizers"))


@pytest.mark.skipif(
    not _HAVE_TORCH, reason="needs torch, transformers, safetensors and tokenizers (CPU is enough)"
)
def test_build_models_tiny_writes_loadable_target_and_draft(tmp_path: Path) -> None:
    assert G.main(["build-models", "--work", str(tmp_path), "--tiny"]) == 0
    meta = json.loads((tmp_path / "models" / "meta.json").read_text())
    for name in ("target", "draft"):
        cfg = json.loads((tmp_path / "models" / name / "config.json").read_text())
        assert cfg["num_hidden_layers"] == meta[name]["layers"]
        assert (tmp_path / "models" / name / "tokenizer.json").exists()
    agree = sum(a == b for a, b in zip(meta["pi"][4:], meta["pi_draft"][4:], strict=True)) / (
        meta["chain_vocab"] - 4
    )
    assert 0.5 < agree < 0.9  # default 0.7
    assert G.main(["build-models", "--work", str(tmp_path), "--tiny"]) == 0  # second call keeps them


@pytest.mark.skipif(
    not _HAVE_TORCH, reason="needs torch, transformers, safetensors and tokenizers (CPU is enough)"
)
def test_build_models_eagle3_adds_the_head_beside_the_draft(tmp_path: Path) -> None:
    assert G.main(["build-models", "--work", str(tmp_path), "--tiny"]) == 0
    assert not (tmp_path / "models" / "eagle3").exists()  # not built by default
    work = tmp_path / "e"
    assert G.main(["build-models", "--work", str(work), "--tiny", "--eagle3"]) == 0
    meta = json.loads((work / "models" / "meta.json").read_text())
    cfg = json.loads((work / "models" / "eagle3" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and meta["target"]["layers"] == 4
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == meta["eagle3"]["layer_ids"]
    assert len(meta["eagle3"]["with_hidden"]) == meta["chain_vocab"]
    for table in ("accept", "accept_no_hidden"):  # per root, what the analysis's acceptance oracle reads
        got = meta["eagle3"][table]
        assert len(got) == meta["chain_vocab"] and all(0 <= a <= 8 for a in got) and got[:4] == [0] * 4
    assert (work / "models" / "draft" / "config.json").exists()


def _fake_device(tmp_path: Path, meta: dict[str, Any]) -> tuple[Path, Path, dict[str, str], list[str]]:
    """A work folder with the bigram meta (plus ``meta``) and the environment that runs the SGLang check
    against the fake SGLang in tests/fakes: (work, out, env, the module's ``-m`` arguments)."""

    work, out = tmp_path / "w", tmp_path / "o"
    (work / "models" / "target").mkdir(parents=True)
    pi = bm.bigram_map(60, 1)
    full = {"chain_vocab": 60, "pi": pi.tolist(), "pi_draft": bm.draft_map(pi, 0.7, 2).tolist(), **meta}
    (work / "models" / "meta.json").write_text(json.dumps(full))
    return work, out, child_env(FAKES, POLICIES_PROJECT), MODULE


def test_device_flow_end_to_end_with_a_fake_engine(tmp_path: Path) -> None:
    """The driver's own plumbing on CPU: engine processes per path, phases, control file, packing."""
    import subprocess
    import sys

    work, out, env, script = _fake_device(tmp_path, {"agree": 0.7})
    args = [
        "device",
        "--work",
        str(work),
        "--out",
        str(out),
        "--paths",
        "v2,base_v2",
        "--concurrency",
        "1,3",
        "--perf-tokens",
        "12",
        "--repeats",
        "2",
        "--min-batch-s",
        "0",
        "--ramp-s",
        "2",
        "--ramp-peak",
        "8",
        "--resume-k",
        "1,8",
        "--min-engine-s",
        "1",
    ]
    proc = subprocess.run(
        [sys.executable, *script, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "GC ENGINE v2/triton rc=0" in proc.stdout and "GC ENGINE base_v2/triton rc=0" in proc.stdout
    res = tmp_path / "res"
    with tarfile.open(out / "results-v2-base_v2-triton.tar.gz") as tar:
        tar.extractall(res, filter="data")
    log = (res / "v2" / "triton" / "engine.log").read_text()
    assert "FAKE specpolicy config ok, candidate steps (0, 3)" in log
    phases = [json.loads(x) for x in (res / "v2" / "triton" / "phases.jsonl").read_text().splitlines()]
    assert phases[0]["kind"] == "engine" and phases[0]["kw"]["disable_overlap_schedule"] is False
    assert phases[0]["kw"]["attention_backend"] == "triton" and phases[0]["backend"] == "triton"
    names = [p["name"] for p in phases[1:]]
    assert "check:raise" in names and "perf:hysteresis:3:r1" in names and "resume:resume-8" in names
    assert names[-2:] == ["ramp:cost_model", "ramp:static"]
    ramp = phases[-1]
    assert ramp["phase_kind"] == "ramp" and len(ramp["requests"]) == ramp["concurrency"] > 1
    assert all(r["finish_s"] >= r["first_token_s"] >= r["arrival_s"] for r in ramp["requests"])
    assert (res / "v2" / "triton" / "control.txt").read_text().split()[1] == "static"  # the last phase's
    assert "kw" in json.loads((res / "base_v2" / "triton" / "phases.jsonl").read_text().splitlines()[0])
    rep = G.main(["analyze", str(res), "--json", str(tmp_path / "r.json")])
    report = json.loads((tmp_path / "r.json").read_text())
    for eng in report["engines"].values():
        assert eng["verdicts"]["exact_token_counts"] and eng["verdicts"]["lossless_all_phases"]
        assert eng["verdicts"]["all_served"]
    assert set(report["ramp"]["v2/triton"]) == {"cost_model", "static", "never"}
    assert rep == 1  # the fake has no adapter: no live-path line, no trace, so the report must fail


def test_device_flow_serves_the_eagle3_pairs_on_chain_shifted_prompts(tmp_path: Path) -> None:
    """The EAGLE-3 engine through the driver: the head's arguments, the pairs' prompts and their records."""
    import subprocess
    import sys

    work, out, env, script = _fake_device(tmp_path, {"eagle3": {}})
    pi = bm.bigram_map(60, 1)  # the chain the fake device's meta holds
    args = [
        "device",
        "--work",
        str(work),
        "--out",
        str(out),
        "--paths",
        "eagle3tree_v1",
        "--concurrency",
        "1",
    ]
    args += ["--perf-tokens", "12", "--repeats", "1", "--min-batch-s", "0", "--ramp-s", "0", "--resume-k="]
    args += ["--pair-k", "1,8", "--skip-k", "8", "--min-engine-s", "1"]
    proc = subprocess.run(
        [sys.executable, *script, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = [
        json.loads(x)
        for x in (work / "runs" / "eagle3tree_v1" / "triton" / "phases.jsonl").read_text().splitlines()
    ]
    kw = recs[0]["kw"]
    assert kw["speculative_algorithm"] == "EAGLE3" and kw["speculative_eagle_topk"] == 4
    assert kw["speculative_draft_model_path"] == str(work / "models" / "eagle3")
    by = {r["name"]: r for r in recs[1:]}
    for k in (1, 8):
        ref, once = by[f"check:ref-{k}"], by[f"check:resume-once-{k}"]
        assert ref["chain_shift"] == k and once["reference"] == ref["name"] and ref["policy"] == "always-on"
        for a, b in zip(once["prompt_last"], ref["prompt_last"], strict=True):
            t = a
            for _ in range(k):
                t = int(pi[t])
            assert b == t  # the reference's prompts end k chain tokens further on
        for x, r in zip(once["requests"], ref["requests"], strict=True):
            assert x["output_ids"][k:] == r["output_ids"]  # so its output is the rest of the paired request's
    assert by["check:skip-catch-up-8"]["reference"] == "check:ref-8"
    log = (work / "runs" / "eagle3tree_v1" / "triton" / "engine.log").read_text()
    assert "FAKE specpolicy config ok, candidate steps (0, 4)" in log  # every policy at the tree's depth


def test_device_skips_phases_past_the_engine_deadline(tmp_path: Path) -> None:
    """An engine that has no time left after its start serves nothing and still shuts down cleanly."""
    import subprocess
    import sys

    from specpolicy_livecheck import plan as P

    work = tmp_path / "w"
    (work / "models" / "target").mkdir(parents=True)
    pi = bm.bigram_map(60, 1)
    meta = {"chain_vocab": 60, "agree": 0.7, "pi": pi.tolist(), "pi_draft": bm.draft_map(pi, 0.7, 2).tolist()}
    (work / "models" / "meta.json").write_text(json.dumps(meta))
    run = P.build_plan(("base_v2",), concurrency=(1,), repeats=1, ramp_s=0, perf_tokens=8)[0]
    d = work / "runs" / run.id
    d.mkdir(parents=True)
    (d / "run.json").write_text(run.to_json())
    env = child_env(FAKES)
    args = ["engine", "--run", str(d / "run.json"), "--work", str(work), "--out", str(d), "--deadline", "1"]
    proc = subprocess.run(
        [sys.executable, *MODULE, *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = [json.loads(x) for x in (d / "phases.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in recs] == ["engine"] + ["skip"] * len(run.phases)
    assert "GC DONE" in proc.stdout


class _ShortEngine:
    """generate() that returns at once: the batch guard must submit it again until the whole lasts."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(
        self, input_ids: list[list[int]], sampling_params: list[dict[str, object]]
    ) -> list[dict[str, object]]:
        self.calls += 1
        return [{"output_ids": [1, 2], "meta_info": {"completion_tokens": 2}} for _ in input_ids]


def test_a_short_batch_is_repeated_until_it_lasts_min_wall_s() -> None:
    from specpolicy_livecheck import plan as P

    ph = P.Phase("perf:x:2:r0", "perf", "x", 2, 4, (2, 2), seed=0, min_wall_s=0.05)
    eng = _ShortEngine()
    served = G._serve_batch(eng, ph, [[5, 6, 7, 8]] * 2)
    assert served["wall_s"] >= 0.05 or served["passes"] == 16
    assert served["passes"] == eng.calls > 1 and len(served["requests"]) == 2 * served["passes"]
    once = G._serve_batch(_ShortEngine(), P.Phase("p", "perf", "x", 1, 4, (2,), seed=0), [[5, 6, 7, 8]])
    assert once["passes"] == 1  # min_wall_s 0: one pass


def test_pace_scales_estimates_by_what_the_served_phases_took() -> None:
    import time

    from specpolicy_livecheck import plan as P

    ph = P.Phase("p", "perf", "x", 1, 4, (2,), seed=0, est_s=10.0)
    pace = G._Pace()
    now = time.time()
    assert pace.fits(ph, now + 10 + P.SHUTDOWN_S + 1) and not pace.fits(ph, now + 10)
    pace.add(ph, 20.0)  # phases take twice their estimate
    assert not pace.fits(ph, now + 10 + P.SHUTDOWN_S + 1) and pace.fits(ph, now + 20 + P.SHUTDOWN_S + 1)
    pace.add(ph, 1000.0)  # the ratio is clipped at 3
    assert pace.fits(ph, now + 30 + P.SHUTDOWN_S + 1)


def test_ramp_request_reads_cumulative_and_delta_chunks() -> None:
    import asyncio
    from collections.abc import AsyncIterator

    class Eng:
        """Streams (output_ids, completion_tokens so far) chunks."""

        def __init__(self, chunks: list[tuple[list[int], int]]) -> None:
            self.chunks = chunks

        async def async_generate(self, **kw: object) -> AsyncIterator[dict[str, object]]:
            async def gen() -> AsyncIterator[dict[str, object]]:
                for ids, n in self.chunks:
                    yield {"output_ids": ids, "meta_info": {"completion_tokens": n}}

            return gen()

    cumulative = Eng([([1], 1), ([1, 2, 3], 3), ([1, 2, 3, 4], 4)])
    deltas = Eng([([1], 1), ([2, 3], 3), ([4], 4)])
    for eng in (cumulative, deltas):
        rec = asyncio.run(G._ramp_request(eng, [9], {}, 0.0, 0.5))
        assert rec["output_ids"] == [1, 2, 3, 4] and rec["completion_tokens"] == 4
        assert rec["scheduled_s"] == 0.5 and rec["finish_s"] >= rec["first_token_s"] >= rec["arrival_s"]


def test_an_engine_start_clears_what_an_earlier_start_left_in_its_folder(tmp_path: Path) -> None:
    """Phases and traces are appended to: a second command on the same host must not inherit the first's."""
    out = tmp_path / "v2" / "triton"
    out.mkdir(parents=True)
    left = [
        "phases.jsonl",
        "trace.jsonl",
        "trace.rank1.jsonl",
        "dispatch.jsonl",
        "server_info.json",
        "control.txt",
    ]
    for name in [*left, "run.json", "engine.log", "notes.txt"]:
        (out / name).write_text("earlier\n")
    assert sorted(G.clear_results(out)) == sorted(left)
    assert sorted(p.name for p in out.iterdir()) == ["engine.log", "notes.txt", "run.json"]
    assert G.clear_results(out) == []


def test_device_does_not_start_an_engine_that_would_serve_nothing(tmp_path: Path) -> None:
    """With a budget where the later engine's reserve leaves v2 no phase, the device command skips v2
    (said, exit status 1) and base_v2 gets the budget; the dry run says the same."""
    import subprocess
    import sys

    from specpolicy_livecheck import plan as P

    work, out, env, script = _fake_device(tmp_path, {"agree": 0.7})
    opts = ["--paths", "v2,base_v2", "--concurrency", "1", "--perf-tokens", "12", "--repeats", "1"]
    opts += ["--min-batch-s", "0", "--ramp-s", "0", "--resume-k", "", "--min-engine-s", "1"]
    runs = P.build_plan(
        ("v2", "base_v2"), concurrency=(1,), perf_tokens=12, repeats=1, min_batch_s=0.0, ramp_s=0, resume_k=()
    )
    reserve = P.core_s(runs[1]) + P.START_WARM_S + P.SHUTDOWN_S
    budget = str(round(reserve + P.START_COLD_S - P.START_WARM_S + 10.0 + 30.0))  # margin 10 s
    base = [sys.executable, *script, "device", "--work", str(work), "--out", str(out), *opts]
    dry = subprocess.run([*base, "--budget-s", budget, "--dry-run"], env=env, capture_output=True, text=True)
    assert "engine v2/triton: NOT STARTED" in dry.stdout, dry.stdout
    proc = subprocess.run([*base, "--budget-s", budget], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "GC SKIP v2/triton: its start" in proc.stdout and "GC ENGINE v2/triton" not in proc.stdout
    assert "GC ENGINE base_v2/triton rc=0" in proc.stdout
