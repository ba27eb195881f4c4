#!/usr/bin/env python3
"""Live check of the SGLang adapter inside a real SGLang engine on a GPU, and the analysis of its results.

On the GPU machine (SGLang and specpolicy installed, plus the test policies of scripts/gpu/gpucheck_policies):

    python3 scripts/gpu_check.py device --work /tmp/gc --out OUTDIR --paths v2,base_v2 --budget-s 540

builds the test models (scripts/gpu/bigram_model.py: greedy output known in advance), then starts one offline
``sglang.Engine`` per worker path in its own process (``engine`` subcommand) with specpolicy installed through
SGLang's plugin entry point (``SPECPOLICY_POLICY`` / ``SPECPOLICY_TRACE``), serves the phases of
scripts/gpu/plan.py and packs everything (per-request results, the adapter's JSONL trace, logs) into
``OUTDIR/results-<paths>.tar.gz``.

Anywhere (no GPU needed):

    python3 scripts/gpu_check.py analyze RESULTS_DIR [--json OUT.json] [--md OUT.md]

checks exact token counts, lossless output against the bigram oracle, accept-length bookkeeping, the failing
policy's fallbacks, and prints the performance table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "gpu"))

import plan as planmod  # noqa: E402

SPEC_KW: dict[str, Any] = {
    "speculative_algorithm": "STANDALONE",
    "speculative_num_steps": planmod.LAUNCH_DEPTH,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": planmod.LAUNCH_DEPTH + 1,
}


def engine_kwargs(path: str, models: Path) -> dict[str, Any]:
    """sglang.Engine arguments for a worker path (v1: non-overlap EAGLEWorker; v2: overlap EAGLEWorkerV2)."""
    kw: dict[str, Any] = {
        "model_path": str(models / "target"),
        "tokenizer_path": str(models / "target"),
        "dtype": "bfloat16",
        "attention_backend": os.environ.get("GC_ATTN", "triton"),
        "sampling_backend": "pytorch",
        "grammar_backend": "none",
        "disable_cuda_graph": os.environ.get("GC_CUDA_GRAPH", "1") != "1",
        "cuda_graph_max_bs": 128,
        # every concurrency level of the sweep, plus a few sizes for the shrinking check batches
        "cuda_graph_bs": [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128],
        "max_running_requests": 128,
        "mem_fraction_static": 0.4,
        "max_total_tokens": 131072,
        "chunked_prefill_size": 8192,
        "log_level": "info",
        "random_seed": 0,
        "skip_server_warmup": True,
        "disable_overlap_schedule": path.endswith("v1"),
    }
    if not path.startswith("base"):
        kw.update(SPEC_KW, speculative_draft_model_path=str(models / "draft"))
    extra = os.environ.get("GC_EXTRA_KW")
    if extra:
        kw.update(json.loads(extra))
    return kw


# ----------------------------------------------------------------------------------------------- models
def cmd_build_models(args: argparse.Namespace) -> int:
    import bigram_model as bm

    models = Path(args.work) / "models"
    meta_path = models / "meta.json"
    if meta_path.exists():
        print(f"models already in {models}")
        return 0
    t0 = time.time()
    target, draft = bm.TARGET, bm.DRAFT
    if args.tiny:
        target, draft = bm.TINY, bm.ModelShape(**{**bm.TINY.__dict__, "layers": 1})
    (models / "tokenizer").mkdir(parents=True, exist_ok=True)
    n_tok = min(bm.train_tokenizer(str(models / "tokenizer")), target.vocab)
    pi = bm.bigram_map(n_tok, seed=1)
    pi_d = bm.draft_map(pi, args.agree, seed=2)
    bm.write_checkpoint(
        str(models / "target"),
        target,
        pi,
        seed=0,
        device=args.device,
        tokenizer_from=str(models / "tokenizer"),
    )
    bm.write_checkpoint(
        str(models / "draft"),
        draft,
        pi_d,
        seed=3,
        device=args.device,
        tokenizer_from=str(models / "tokenizer"),
    )
    meta = {
        "chain_vocab": n_tok,
        "agree": args.agree,
        "pi": pi.tolist(),
        "pi_draft": pi_d.tolist(),
        "target": target.__dict__,
        "draft": draft.__dict__,
        "target_params": bm.param_count(target),
        "draft_params": bm.param_count(draft),
        "build_s": round(time.time() - t0, 1),
    }
    meta_path.write_text(json.dumps(meta))
    print(
        f"models built in {meta['build_s']} s: target {meta['target_params'] / 1e9:.2f} B params, "
        f"draft {meta['draft_params'] / 1e9:.2f} B, chain vocab {n_tok}, agree {args.agree}"
    )
    return 0


# ----------------------------------------------------------------------------------------------- engine
def cmd_engine(args: argparse.Namespace) -> int:
    """Run one engine through its phases; results are appended one JSON line per phase as they finish."""
    run = planmod.EngineRun.from_json(Path(args.run).read_text())
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = json.loads((work / "models" / "meta.json").read_text())
    control = out / "control.txt"
    if run.adapter:
        from specpolicy_gpucheck import write_control

        first = next(p.policy for p in run.phases if p.policy)
        write_control(control, 0, first or "")
        cfg = planmod.dispatch_config(run.policies, str(control), str(out / "dispatch.jsonl"), first or "")
        os.environ["SPECPOLICY_POLICY"] = json.dumps(cfg)
        os.environ["SPECPOLICY_TRACE"] = str(out / "trace.jsonl")
        os.environ["SPECPOLICY_TRACE_MAX_BYTES"] = str(1 << 30)
    os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")
    t0 = time.time()
    import sglang as sgl

    kw = engine_kwargs(run.path, work / "models")
    print("GC ENGINE KW", json.dumps(kw), flush=True)
    eng = sgl.Engine(**kw)
    init_s = time.time() - t0
    print(f"GC ENGINE UP {run.path} in {init_s:.1f}s", flush=True)
    res_path = out / "phases.jsonl"
    with open(res_path, "a") as fh:
        fh.write(
            json.dumps({"kind": "engine", "path": run.path, "init_s": round(init_s, 2), "kw": kw}) + "\n"
        )
    for gen, phase in enumerate(run.phases, 1):
        if run.adapter and phase.policy:
            write_control(control, gen, phase.policy)
        prompts = planmod.prompts_for(phase, meta["chain_vocab"])
        sp = [{"temperature": 0.0, "max_new_tokens": n, "ignore_eos": True} for n in phase.max_new_tokens]
        ts0, c0 = time.time(), time.perf_counter()
        try:
            outs = eng.generate(input_ids=prompts, sampling_params=sp)
            err = None
        except Exception as exc:  # record and go on: one failing phase must not hide the others
            outs, err = [], repr(exc)
        wall = time.perf_counter() - c0
        if isinstance(outs, dict):
            outs = [outs]
        reqs = []
        for o in outs:
            m = o.get("meta_info", {})
            reqs.append(
                {
                    "output_ids": o.get("output_ids"),
                    "completion_tokens": m.get("completion_tokens"),
                    "verify_ct": m.get("spec_verify_ct"),
                    "correct_drafts": m.get("spec_num_correct_drafts", m.get("spec_accepted_drafts")),
                    "histogram": m.get("spec_correct_drafts_histogram", m.get("spec_accept_histogram")),
                    "e2e_latency": m.get("e2e_latency"),
                }
            )
        tokens = sum(r["completion_tokens"] or 0 for r in reqs)
        rec = {
            "kind": "phase",
            "path": run.path,
            "name": phase.name,
            "phase_kind": phase.kind,
            "policy": phase.policy,
            "concurrency": phase.concurrency,
            "prompt_len": phase.prompt_len,
            "max_new_tokens": list(phase.max_new_tokens),
            "seed": phase.seed,
            "prompt_last": [p[-1] for p in prompts],
            "t_start": ts0,
            "t_end": ts0 + wall,
            "wall_s": round(wall, 4),
            "tokens": tokens,
            "tok_per_s": round(tokens / wall, 1) if wall else None,
            "error": err,
            "requests": reqs,
        }
        with open(res_path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        print(
            f"GC PHASE {run.path} {phase.name}: {tokens} tokens in {wall:.2f}s = "
            f"{rec['tok_per_s']} tok/s{' ERROR ' + err if err else ''}",
            flush=True,
        )
    time.sleep(1.5)  # the trace writer flushes every 0.5 s
    try:
        info = eng.get_server_info()
        (out / "server_info.json").write_text(json.dumps(info.get("internal_states"), default=str))
    except Exception as exc:
        print("GC server_info failed", repr(exc), flush=True)
    eng.shutdown()
    print(f"GC DONE {run.path} total {time.time() - t0:.1f}s", flush=True)
    return 0


# ----------------------------------------------------------------------------------------------- device
def _pack(work: Path, out: Path, paths: tuple[str, ...]) -> None:
    """One tarball per device command (the GPU machine returns a handful of files, not folders)."""
    tag = "-".join(paths)
    tmp = out / f".results-{tag}.tar.gz"
    with tarfile.open(tmp, "w:gz") as tar:
        for name in paths:
            p = work / "runs" / name
            if p.exists():
                tar.add(p, arcname=name)
        meta = work / "models" / "meta.json"
        if meta.exists():
            tar.add(meta, arcname="models-meta.json")
    os.replace(tmp, out / f"results-{tag}.tar.gz")


def _usable_policies(labels: tuple[str, ...]) -> tuple[str, ...]:
    """Drop perf policies this specpolicy build cannot configure: one bad child would stop the dispatcher,
    and with it the engine, at start-up."""
    from specpolicy.policy import parse_config

    specs = planmod.perf_policies()
    keep = []
    for label in labels:
        try:
            parse_config(specs[label])
            keep.append(label)
        except Exception as exc:
            print(f"GC DROP perf policy {label}: {exc}")
    return tuple(keep)


def cmd_device(args: argparse.Namespace) -> int:
    """Build the models if needed, then run each engine in its own process within the time budget."""
    t_end = time.time() + args.budget_s
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = tuple(p for p in args.paths.split(",") if p)
    if not (work / "models" / "meta.json").exists():
        rc = subprocess.call(
            [
                sys.executable,
                __file__,
                "build-models",
                "--work",
                str(work),
                "--device",
                "cuda",
                "--agree",
                str(args.agree),
            ]
        )
        if rc:
            print(f"GC model build failed rc={rc}")
            return rc
    perf = tuple(p for p in args.perf.split(",") if p)
    concurrency = tuple(int(c) for c in args.concurrency.split(","))
    perf = _usable_policies(perf)
    runs = planmod.build_plan(paths, concurrency=concurrency, perf_tokens=args.perf_tokens, perf=perf)
    status = 0
    for run in runs:
        left = t_end - time.time()
        if left < args.min_engine_s:
            print(f"GC SKIP {run.path}: {left:.0f}s left < {args.min_engine_s}s")
            status = 1
            continue
        d = work / "runs" / run.path
        d.mkdir(parents=True, exist_ok=True)
        (d / "run.json").write_text(run.to_json())
        log = open(d / "engine.log", "w")
        t0 = time.time()
        proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "engine",
                "--run",
                str(d / "run.json"),
                "--work",
                str(work),
                "--out",
                str(d),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=max(1.0, left - args.margin_s))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = -9
            print(f"GC TIMEOUT {run.path}: killed after {time.time() - t0:.0f}s")
        log.close()
        status |= rc != 0
        print(f"GC ENGINE {run.path} rc={rc} in {time.time() - t0:.0f}s")
        _pack(work, out, paths)
        for line in open(d / "engine.log", errors="replace"):
            if (
                line.startswith("GC ")
                or "specpolicy" in line.lower()
                or "Traceback" in line
                or "Error" in line
            ):
                print("  " + line.rstrip()[:400])
    _pack(work, out, paths)
    return status


# ----------------------------------------------------------------------------------------------- analyze
def cmd_analyze(args: argparse.Namespace) -> int:
    import analysis

    report = analysis.analyze_dir(Path(args.results))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    text = analysis.render_markdown(report)
    if args.md:
        Path(args.md).write_text(text)
    print(text)
    return 0 if report["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build-models", help="write the bigram target and draft checkpoints")
    b.add_argument("--work", required=True)
    b.add_argument("--device", default="cpu")
    b.add_argument("--agree", type=float, default=0.7, help="fraction of tokens where the draft agrees")
    b.add_argument("--tiny", action="store_true", help="tiny shapes (CPU tests)")
    e = sub.add_parser("engine", help="run one engine through its phases (internal)")
    e.add_argument("--run", required=True)
    e.add_argument("--work", required=True)
    e.add_argument("--out", required=True)
    d = sub.add_parser("device", help="build models and run engines on the GPU machine")
    d.add_argument("--work", required=True)
    d.add_argument("--out", required=True)
    d.add_argument(
        "--paths", default="v2,base_v2,v1,base_v1", help="among v1,v2,base_v1,base_v2,plain_v1,plain_v2"
    )
    d.add_argument("--perf", default=",".join(planmod.PERF_POLICIES))
    d.add_argument("--concurrency", default=",".join(map(str, planmod.CONCURRENCY)))
    d.add_argument("--perf-tokens", type=int, default=256)
    d.add_argument("--agree", type=float, default=0.7)
    d.add_argument("--budget-s", type=float, default=540.0)
    d.add_argument("--min-engine-s", type=float, default=90.0)
    d.add_argument("--margin-s", type=float, default=10.0)
    a = sub.add_parser("analyze", help="check and summarise results (any machine)")
    a.add_argument(
        "results", help="folder holding <path>/phases.jsonl, trace.jsonl, engine.log, models-meta.json"
    )
    a.add_argument("--json")
    a.add_argument("--md")
    args = ap.parse_args(argv)
    handler = {
        "build-models": cmd_build_models,
        "engine": cmd_engine,
        "device": cmd_device,
        "analyze": cmd_analyze,
    }[args.cmd]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
