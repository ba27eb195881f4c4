"""The vLLM live check's coordinator and engine processes end to end on the CPU, against a stand-in vLLM.

``specpolicy-livecheck vllm`` cannot run before a GPU sitting, so its plumbing runs here with a fake
``vllm`` package on ``PYTHONPATH``: an ``LLM`` whose ``generate`` walks the bigram chain step by step,
choosing each step's depth as the engine would (vLLM's own K, or the specpolicy dispatcher's active label
read from the control file the check writes, the test policies' rules included), feeding the stat
loggers the check attaches, writing the adapter's trace and its one error line, and a profiler trace.
Four engine processes start, answer the coordinator over their pipes, serve warm-ups, checks,
interleaved perf batches and profiles, and quit; the results and the report are then read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from lc_env import POLICIES_PROJECT, REPO, child_env
from specpolicy_livecheck import bigram_model as bm
from specpolicy_livecheck import vllm_check as vc

ROOT = REPO

FAKE_VLLM = r'''
"""A stand-in for vllm.LLM on the CPU (tests only)."""
import gzip, json, os, sys, time
from pathlib import Path
from types import SimpleNamespace

__version__ = "0.26.0"


class SamplingParams:
    def __init__(self, temperature=1.0, max_tokens=16, ignore_eos=False, detokenize=True):
        self.max_tokens = max_tokens


def _chain(pi, t, n):
    out = []
    for _ in range(n):
        t = pi[t]
        out.append(t)
    return out


class LLM:
    def __init__(self, model, **kw):
        self.kw = kw
        spec = kw.get("speculative_config") or {}
        self.k = spec.get("num_speculative_tokens", 0)
        self.table = spec.get("num_speculative_tokens_per_batch_size")
        self.policy = ((kw.get("additional_config") or {}).get("specpolicy") or {}).get("policy")
        self.trace = ((kw.get("additional_config") or {}).get("specpolicy") or {}).get("trace_path")
        self.pi = json.loads((Path(model).parent / "meta.json").read_text())["pi"]
        cfg = SimpleNamespace(
            scheduler_config=SimpleNamespace(scheduler_cls=kw.get("scheduler_cls"), async_scheduling=False),
            use_v2_model_runner=False,
            compilation_config=SimpleNamespace(cudagraph_mode="PIECEWISE"),
        )
        self.llm_engine = SimpleNamespace(logger_manager=SimpleNamespace(stat_loggers=[]), vllm_config=cfg)
        self.gen, self.label, self.n, self.logged = b"", None, 0, False
        self.prof = None

    def _depth(self, batch):
        if not self.k:
            return 0
        if not self.policy:  # vLLM's own: its table, else K; the specpolicy scheduler overrides the table
            return next((d for lo, hi, d in self.table or () if lo <= batch <= hi), self.k)
        path = self.policy["control_file"]
        if os.path.exists(path):
            data = open(path, "rb").read(64)
            if data[:12] != self.gen:
                self.gen, self.label, self.n = data[:12], data[13:].rstrip().decode(), 0
        spec = self.policy["policies"][self.label or self.policy["initial"]]
        n, self.n = self.n, self.n + 1
        fallback = False
        if spec["name"] == "static":
            d = spec["num_steps"]
        elif spec["name"] == "gpucheck_cycle":
            d = spec["depths"][(n // spec["period"]) % len(spec["depths"])]
        elif spec["name"] == "gpucheck_raise":
            fallback = spec["raise_from"] <= n < spec["raise_from"] + spec["raise_count"]
            d = self.k if fallback else spec["num_steps"]
            if fallback and not self.logged:
                print("ERROR specpolicy rank 0: policy error (step %d): GpuCheckFailure" % n, file=sys.stderr)
                self.logged = True
        else:
            d = self.k
        if self.trace:
            with open(self.trace, "a") as fh:
                fh.write(json.dumps({"step": n, "num_steps": d, "fallback": fallback, "ts": time.time(),
                                     "decide_us": 1.0}) + "\n")
        return d

    def generate(self, prompts, params, use_tqdm=True):
        want = [p.max_tokens for p in params]
        out = [[] for _ in prompts]
        last = [p["prompt_token_ids"][-1] for p in prompts]
        first = True
        while any(len(o) < w for o, w in zip(out, want)):
            live = [i for i, (o, w) in enumerate(zip(out, want)) if len(o) < w]
            d = 0 if first else self._depth(len(live))
            first = False
            for i in live:
                toks = _chain(self.pi, last[i], min(1 + d, want[i] - len(out[i])))
                out[i] += toks
                last[i] = toks[-1]
            stats = SimpleNamespace(spec_decoding_stats=SimpleNamespace(
                num_drafts=len(live), num_draft_tokens=d * len(live), num_accepted_tokens=d * len(live))
                if d else None)
            for logger in self.llm_engine.logger_manager.stat_loggers:
                logger.record(stats, None)
            if self.prof is not None:
                self.prof.append({"ph": "X", "cat": "kernel", "name": "gemm", "ts": len(self.prof), "dur": 1})
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=o)]) for o in out]

    def start_profile(self):
        self.prof = []

    def stop_profile(self):
        folder = Path(self.kw["profiler_config"]["torch_profiler_dir"])
        folder.mkdir(parents=True, exist_ok=True)
        with gzip.open(folder / "worker.pt.trace.json.gz", "wt") as fh:
            json.dump({"traceEvents": self.prof}, fh)
        self.prof = None
'''


def _entry_points() -> str:
    """The ``[project.entry-points."specpolicy.policies"]`` table of the test policies' pyproject.toml."""
    text = (POLICIES_PROJECT / "pyproject.toml").read_text()
    table = text.split('[project.entry-points."specpolicy.policies"]', 1)[1].split("\n[", 1)[0]
    lines = [ln.replace('"', "").strip() for ln in table.strip().splitlines() if "=" in ln]
    return "[specpolicy.policies]\n" + "".join(ln + "\n" for ln in lines)


def test_the_check_runs_end_to_end_against_a_stand_in_vllm(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    dist = fake / "specpolicy_gpucheck-0.1.0.dist-info"  # the test policies' entry points, as pip writes them
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: specpolicy-gpucheck\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(_entry_points())
    work, out = tmp_path / "work", tmp_path / "out"
    models = work / "models"
    for name in ("target", "draft"):
        (models / name).mkdir(parents=True)
    pi = bm.bigram_map(300, seed=1)
    (models / "meta.json").write_text(json.dumps({"chain_vocab": 300, "pi": pi.tolist(), "agree": 0.7}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECPOLICY_", "VLLM_"))}
    env = child_env(fake, POLICIES_PROJECT, REPO, base=env)
    cmd = [sys.executable, "-m", "specpolicy_livecheck", "vllm", "--work", str(work),
           "--out", str(out), "--concurrency", "1,4", "--repeats", "2", "--min-batch-s", "0",
           "--check-concurrency", "8", "--profile", "4", "--budget-s", "300"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    # the side files travel as one archive (a device call returns at most 8 files)
    assert not list(out.glob("engine-*.log")) and not (out / "control-sp.txt").exists()
    if (out / vc.SIDE_ARCHIVE).exists():
        with tarfile.open(out / vc.SIDE_ARCHIVE) as tar:
            tar.extractall(out, filter="data")
    logs = {p.name: p.read_text()[-2000:] for p in out.glob("engine-*.log")}
    assert {f"engine-{e}.log" for e in vc.ENGINE_NAMES} <= set(logs)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:] + json.dumps(logs)[-4000:]
    raw = json.loads((out / "vllm-check.json").read_text())
    report = json.loads((out / "report-vllm.json").read_text())
    assert all(e["ready"] for e in raw["engines"].values()) and set(raw["engines"]) == set(vc.ENGINE_NAMES)
    assert raw["engines"]["sp"]["scheduler_cls"] == "specpolicy.adapters.vllm.Scheduler"
    # the checks: every verdict computed from the stats the engine's stat logger received, all passing
    assert set(raw["checks"]) == {*vc.SP_CHECKS, "never:no-spec", "vllm-k:always-on", "vllm-table:always-on"}
    for label, res in raw["checks"].items():
        assert res["verdict"]["ok"], (label, res["verdict"])
        assert res["requests"] == res["lossless"] == 8
    assert raw["checks"]["raise"]["verdict"]["trace_fallbacks"] == 20
    assert raw["checks"]["raise"]["verdict"]["policy_error_logs"] == 1
    # the perf sweep: every label at every level, twice, with the depth each engine ran
    perf = report["perf"][vc.PATH_KEY]
    assert set(perf) == set(vc.DEFAULT_PERF) and all(set(v) == {"1", "4"} for v in perf.values())
    assert all(len(rows) == 2 for by_c in raw["perf"].values() for rows in by_c.values())
    # one calibration batch per engine label and level first, then every measured batch of a level makes
    # the passes it fixed (a later pass skips the prefill: unequal passes are not like for like)
    assert all(set(by_c) == {"1", "4"} for by_c in raw["calibration"].values())
    assert set(raw["calibration"]) == set(raw["perf"]) and raw["passes"] == {"1": 1, "4": 1}
    assert {b["passes"] for by_c in raw["perf"].values() for rows in by_c.values() for b in rows} == {1}
    depth = report["depth_by_label"][vc.PATH_KEY]
    assert depth["static-0"] == {"1": 0.0, "4": 0.0} and depth["never"] == {"1": 0.0, "4": 0.0}
    assert depth["static"] == depth["vllm-static"] == {"1": 3.0, "4": 3.0}
    assert report["lossless"]["static"] == {"requests": 10, "lossless": 10, "errors": 0}
    # the dispatcher's labels were switched by the engine process, batch by batch
    control = (out / "control-sp.txt").read_text()
    assert control.split()[1] in vc.sp_policies(vc.DEFAULT_PERF)
    assert set(raw["profiles"]) == {f"{label}:4" for label in vc.PROFILE_LABELS}
    for key, prof in raw["profiles"].items():  # two labels of one engine profile into the same folder
        assert prof["summary"]["kernels"] > 0, key
    assert report["ok"] is True
