#!/usr/bin/env python3
"""Live check of the SGLang adapter inside a real SGLang engine on a GPU, and the analysis of its results.

On the GPU machine (SGLang and specpolicy installed, plus the test policies of tools/livecheck/policies):

    specpolicy-livecheck run --work /tmp/gc --out OUTDIR --paths v2,base_v2 --attn triton \
        --concurrency 1,4,16,64,128 --ramp-s 30 --budget-s 555 [--doctor-smoke] [--dry-run]

builds the test models (bigram_model.py: greedy output known in advance; with an EAGLE-3 path,
``eagle3_v1``, ``eagle3_v2`` or the draft tree ``eagle3tree_v1``, also the EAGLE-3 head of
eagle3_model.py, whose acceptance is known in advance too), then starts one offline
``sglang.Engine`` per worker path and attention backend (``<path>/<backend>``) in its own process
(``engine`` subcommand) with specpolicy installed through SGLang's plugin entry point (``SPECPOLICY_POLICY``
/ ``SPECPOLICY_TRACE``), serves the phases of plan.py (warm-ups, checks, interleaved perf
repeats, resume cost, an open-loop ramp) until the engine's share of the budget ends, optionally runs
``specpolicy doctor --smoke``, and packs everything (per-request results, the adapter's JSONL trace, logs)
into ``OUTDIR/results-<paths>-<backends>.tar.gz`` after every engine. ``--dry-run`` prints the plan with
estimated seconds and what the budget would cut, and runs nothing.

Anywhere (no GPU needed):

    specpolicy-livecheck analyze RESULTS_DIR [--json OUT.json] [--md OUT.md]

checks exact token counts, lossless output against the bigram oracle (every request of every phase),
accept-length bookkeeping, the failing policy's fallbacks, on EAGLE-3 engines the acceptance against the
head's computed proposals and after each off stretch against an always-on run (and that skipping the
hidden-state catch-up fails that), and prints the perf tables (median and min-max of the repeats), the
off step against a speculation-free step, the ramp (tokens/s, TPOT and TTFT percentiles), the resume cost
and the doctor's output.
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

from specpolicy_livecheck import plan as planmod
from specpolicy_livecheck._proc import child_env, module_command


def spec_kwargs(path: str, depth: int = planmod.LAUNCH_DEPTH) -> dict[str, Any]:
    """The speculative arguments of a path (plan.spec_shape); none for a speculation-free path."""
    shape = planmod.spec_shape(path, depth)
    if shape is None:
        return {}
    return {
        "speculative_algorithm": shape.algorithm,
        "speculative_num_steps": shape.num_steps,
        "speculative_eagle_topk": shape.topk,
        "speculative_num_draft_tokens": shape.draft_tokens,
    }


#: The draft-model paths' speculative arguments (v1, v2, plain_*).
SPEC_KW: dict[str, Any] = spec_kwargs("v2")


def engine_kwargs(
    path: str, models: Path, backend: str | None = None, depth: int = planmod.LAUNCH_DEPTH, tp: int = 1
) -> dict[str, Any]:
    """sglang.Engine arguments for a worker path (v1: non-overlap EAGLEWorker; v2: overlap EAGLEWorkerV2;
    eagle3*: the EAGLE-3 head in ``models/eagle3``) and attention backend (default: $GC_ATTN, else
    triton); ``depth``: the topk-1 paths' launch depth (the plan's); ``tp``: SGLang's tp_size."""
    kw: dict[str, Any] = {
        "model_path": str(models / "target"),
        "tokenizer_path": str(models / "target"),
        "dtype": "bfloat16",
        "attention_backend": backend or os.environ.get("GC_ATTN", "triton"),
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
    if tp > 1:
        kw["tp_size"] = tp
    shape = planmod.spec_shape(path, depth)
    if shape is not None:
        kw.update(spec_kwargs(path, depth), speculative_draft_model_path=str(models / shape.draft))
    extra = os.environ.get("GC_EXTRA_KW")
    if extra:
        kw.update(json.loads(extra))
    return kw


#: Engine arguments SGLang renamed (the name ``engine_kwargs`` writes -> the later release's name). From
#: 0.5.13 the CUDA graph settings are per phase (``cuda_graph_config``) and the old names survive only as
#: command-line aliases, which ``sglang.Engine(**kw)`` does not read.
RENAMED_ARGS: dict[str, str] = {
    "cuda_graph_max_bs": "cuda_graph_max_bs_decode",
    "cuda_graph_bs": "cuda_graph_bs_decode",
    "piecewise_cuda_graph_max_tokens": "cuda_graph_max_bs_prefill",
}


def server_arg_fields() -> frozenset[str]:
    """The field names of the installed SGLang's ServerArgs (what ``sglang.Engine(**kw)`` accepts)."""
    import dataclasses

    from sglang.srt.server_args import ServerArgs

    return frozenset(f.name for f in dataclasses.fields(ServerArgs))


def for_release(kw: dict[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    """``kw`` with each renamed argument under the name the installed release's ServerArgs has
    (``fields``); a ValueError names every argument that release has under neither name."""
    out: dict[str, Any] = {}
    for k, v in kw.items():
        new = RENAMED_ARGS.get(k)
        out[new if k not in fields and new in fields else k] = v
    unknown = sorted(k for k in out if k not in fields)
    if unknown:
        raise ValueError(f"engine arguments {unknown} are not SGLang ServerArgs fields of this release")
    return out


# ----------------------------------------------------------------------------------------------- models
def cmd_build_models(args: argparse.Namespace) -> int:
    from specpolicy_livecheck import bigram_model as bm

    models = Path(args.work) / "models"
    meta_path = models / "meta.json"
    eagle3 = getattr(args, "eagle3", False)
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if not eagle3 or "eagle3" in meta:
            print(f"models already in {models}")
            return 0
        return _build_eagle3(models, meta, meta_path)
    t0 = time.time()
    target, draft = bm.TARGET, bm.DRAFT
    if args.tiny:
        target, draft = bm.TINY, bm.ModelShape(**{**bm.TINY.__dict__, "layers": 1})
        if eagle3:  # SGLang needs 3 distinct capture layers, at most L - 2 (eagle3_model.aux_layer_ids)
            target = bm.ModelShape(**{**bm.TINY.__dict__, "layers": 4})
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
    return _build_eagle3(models, meta, meta_path) if eagle3 else 0


def _build_eagle3(models: Path, meta: dict[str, Any], meta_path: Path) -> int:
    """The EAGLE-3 head for the bigram target (eagle3_model.py) in ``models/eagle3``; its
    capture layers, hidden-sensitive token set, proposal maps and per-root accepted drafts (with the
    target's hidden state and with none) go to ``meta["eagle3"]``."""
    import numpy as np

    from specpolicy_livecheck import eagle3_model as em

    t0 = time.time()
    info = em.write_checkpoint(
        str(models / "eagle3"),
        str(models / "target"),
        np.asarray(meta["pi"]),
        np.asarray(meta["pi_draft"]),
        seed=4,
    )
    info["build_s"] = round(time.time() - t0, 1)
    meta["eagle3"] = info
    meta_path.write_text(json.dumps(meta))
    print(
        f"EAGLE-3 head built in {info['build_s']} s: capture layers {info['layer_ids']}, "
        f"{len(info['hidden_set'])} hidden-sensitive tokens"
    )
    return 0


# ----------------------------------------------------------------------------------------------- engine
def _request_record(o: dict[str, Any]) -> dict[str, Any]:
    """The fields of one finished request the analysis checks (tokens, SGLang's own speculation counters)."""
    m = o.get("meta_info", {})
    return {
        "output_ids": o.get("output_ids"),
        "completion_tokens": m.get("completion_tokens"),
        "verify_ct": m.get("spec_verify_ct"),
        "correct_drafts": m.get("spec_num_correct_drafts", m.get("spec_accepted_drafts")),
        "histogram": m.get("spec_correct_drafts_histogram", m.get("spec_accept_histogram")),
        "e2e_latency": m.get("e2e_latency"),
    }


def _serve_batch(eng: Any, phase: planmod.Phase, prompts: list[list[int]]) -> dict[str, Any]:
    """Submit the batch; while the whole has lasted less than ``min_wall_s``, submit it again (at most 16
    passes) and count tokens over wall time of all passes, so a short batch cannot be timing noise."""
    sp = [{"temperature": 0.0, "max_new_tokens": n, "ignore_eos": True} for n in phase.max_new_tokens]
    ts0, c0 = time.time(), time.perf_counter()
    reqs: list[dict[str, Any]] = []
    err, passes = None, 0
    while passes < 16:
        try:
            outs = eng.generate(input_ids=prompts, sampling_params=sp)
        except Exception as exc:  # record and go on: one failing phase must not hide the others
            err = repr(exc)
            break
        passes += 1
        reqs.extend(_request_record(o) for o in ([outs] if isinstance(outs, dict) else outs))
        if time.perf_counter() - c0 >= phase.min_wall_s:
            break
    wall = time.perf_counter() - c0
    return {
        "t_start": ts0,
        "t_end": ts0 + wall,
        "wall_s": round(wall, 4),
        "passes": passes,
        "requests": reqs,
        "error": err,
    }


async def _ramp_request(
    eng: Any, prompt: list[int], sp: dict[str, Any], t0: float, scheduled: float
) -> dict[str, Any]:
    """One streamed request: its arrival, first-token and finish times (s from the ramp's start)."""
    arrival = time.perf_counter() - t0
    first: float | None = None
    ids: list[int] = []
    last: dict[str, Any] = {}
    gen = await eng.async_generate(input_ids=prompt, sampling_params=sp, stream=True)
    async for chunk in gen:
        if first is None:
            first = time.perf_counter() - t0
        last = chunk
        got = chunk.get("output_ids") or []
        n = chunk.get("meta_info", {}).get("completion_tokens")
        ids = got if n is None or len(got) == n else ids + got  # cumulative chunks (no copy), or deltas
    rec = _request_record({**last, "output_ids": list(ids)})
    rec.update(
        scheduled_s=round(scheduled, 4),
        arrival_s=round(arrival, 4),
        first_token_s=None if first is None else round(first, 4),
        finish_s=round(time.perf_counter() - t0, 4),
    )
    return rec


async def _ramp(eng: Any, phase: planmod.Phase, prompts: list[list[int]]) -> list[Any]:
    """Open loop: each request's task starts at its arrival time, whatever the engine's backlog."""
    import asyncio

    t0 = time.perf_counter()
    tasks = []
    for prompt, n, at in zip(prompts, phase.max_new_tokens, phase.arrivals, strict=True):
        delay = t0 + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        sp = {
            "temperature": 0.0,
            "max_new_tokens": n,
            "ignore_eos": True,
            "stream_interval": planmod.RAMP_STREAM_INTERVAL,
        }
        tasks.append(asyncio.create_task(_ramp_request(eng, prompt, sp, t0, at)))
    return list(await asyncio.gather(*tasks, return_exceptions=True))


def _serve_ramp(eng: Any, phase: planmod.Phase, prompts: list[list[int]]) -> dict[str, Any]:
    """The ramp on the engine's own event loop (the one its tokenizer manager serves)."""
    ts0, c0 = time.time(), time.perf_counter()
    try:
        got = eng.loop.run_until_complete(_ramp(eng, phase, prompts))
        err = None
    except Exception as exc:
        got, err = [], repr(exc)
    wall = time.perf_counter() - c0
    reqs = [r if isinstance(r, dict) else {"error": repr(r), "output_ids": None} for r in got]
    failed = sum(1 for r in reqs if "error" in r)
    if failed and err is None:
        err = f"{failed} request(s) failed, first: {next(r['error'] for r in reqs if 'error' in r)}"
    return {
        "t_start": ts0,
        "t_end": ts0 + wall,
        "wall_s": round(wall, 4),
        "passes": 1,
        "requests": reqs,
        "error": err,
    }


class _Pace:
    """Measured over planned seconds of the phases served so far (clipped to 0.5-3): the engine scales the
    remaining estimates by it when deciding whether a phase still fits before its deadline."""

    def __init__(self) -> None:
        self.planned = self.actual = 0.0

    def add(self, phase: planmod.Phase, wall_s: float) -> None:
        if phase.kind in ("perf", "resume", "ramp") and phase.est_s > 0:
            self.planned += phase.est_s
            self.actual += wall_s

    def fits(self, phase: planmod.Phase, deadline: float) -> bool:
        ratio = min(3.0, max(0.5, self.actual / self.planned)) if self.planned else 1.0
        return time.time() + phase.est_s * ratio + planmod.SHUTDOWN_S <= deadline


# What one engine start writes into its folder (run.json and engine.log are written anew by ``device``).
RESULT_GLOBS = ("phases.jsonl", "trace*.jsonl", "dispatch.jsonl", "server_info.json", "control.txt")


def clear_results(out: Path) -> list[str]:
    """Remove an earlier start's results from ``out`` (a later command on the same host reuses the work
    folder; phases and traces are appended to), so that a results folder holds one engine start only;
    returns the names removed."""
    gone = []
    for pattern in RESULT_GLOBS:
        for f in sorted(out.glob(pattern)):
            f.unlink()
            gone.append(f.name)
    return gone


def _configure_adapter(run: planmod.EngineRun, out: Path) -> Path:
    """Environment that installs specpolicy's dispatcher in the engine's scheduler; returns the control
    file that selects its policy."""
    from specpolicy_gpucheck import write_control

    control = out / "control.txt"
    first = next(p.policy for p in run.phases if p.policy)
    write_control(control, 0, first or "")
    cfg = planmod.dispatch_config(run.policies, str(control), str(out / "dispatch.jsonl"), first or "")
    os.environ["SPECPOLICY_POLICY"] = json.dumps(cfg)
    os.environ["SPECPOLICY_TRACE"] = str(out / "trace.jsonl")
    os.environ["SPECPOLICY_TRACE_MAX_BYTES"] = str(1 << 30)
    return control


def _phase_record(
    run: planmod.EngineRun, phase: planmod.Phase, prompts: list[list[int]], served: dict[str, Any]
) -> dict[str, Any]:
    tokens = sum(r.get("completion_tokens") or 0 for r in served["requests"])
    wall = served["wall_s"]
    return {
        "kind": "phase",
        "path": run.path,
        "backend": run.backend,
        "name": phase.name,
        "phase_kind": phase.kind,
        "policy": phase.policy,
        "concurrency": phase.concurrency,
        "repeat": phase.repeat,
        "prompt_len": phase.prompt_len,
        "max_new_tokens": list(phase.max_new_tokens) * max(1, served["passes"]),
        "seed": phase.seed,
        "chain_shift": phase.chain_shift,
        "reference": phase.reference,
        "prompt_last": [p[-1] for p in prompts] * max(1, served["passes"]),
        "est_s": phase.est_s,
        "tokens": tokens,
        "tok_per_s": round(tokens / wall, 1) if wall else None,
        **served,
    }


def cmd_engine(args: argparse.Namespace) -> int:
    """Run one engine through its phases; results are appended one JSON line per phase as they finish, and
    a phase that would end past ``--deadline`` is skipped (recorded), so the engine shuts down cleanly."""
    run = planmod.EngineRun.from_json(Path(args.run).read_text())
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clear_results(out)
    meta = json.loads((work / "models" / "meta.json").read_text())
    control = _configure_adapter(run, out) if run.adapter else None
    os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")
    t0 = time.time()
    import sglang as sgl

    kw = engine_kwargs(run.path, work / "models", run.backend, run.depth, run.tp)
    kw = for_release(kw, server_arg_fields())
    print("GC ENGINE KW", json.dumps(kw), flush=True)
    eng = sgl.Engine(**kw)
    init_s = time.time() - t0
    print(f"GC ENGINE UP {run.id} in {init_s:.1f}s", flush=True)
    res_path = out / "phases.jsonl"
    head = {"kind": "engine", "path": run.path, "backend": run.backend, "init_s": round(init_s, 2), "kw": kw}
    _append(res_path, head)
    pace = _Pace()
    for gen, phase in enumerate(run.phases, 1):
        if not pace.fits(phase, args.deadline):
            _append(
                res_path, {"kind": "skip", "name": phase.name, "phase_kind": phase.kind, "est_s": phase.est_s}
            )
            print(f"GC SKIP PHASE {run.id} {phase.name}: ~{phase.est_s:.1f}s does not fit", flush=True)
            continue
        if control is not None and phase.policy:
            from specpolicy_gpucheck import write_control

            write_control(control, gen, phase.policy)
        prompts = planmod.prompts_for(phase, meta["chain_vocab"], pi=meta["pi"])
        served = (_serve_ramp if phase.kind == "ramp" else _serve_batch)(eng, phase, prompts)
        rec = _phase_record(run, phase, prompts, served)
        pace.add(phase, rec["wall_s"])
        _append(res_path, rec)
        err = rec["error"]
        print(
            f"GC PHASE {run.id} {phase.name}: {rec['tokens']} tokens in {rec['wall_s']:.2f}s "
            f"({rec['passes']} pass) = {rec['tok_per_s']} tok/s{' ERROR ' + err if err else ''}",
            flush=True,
        )
    time.sleep(1.5)  # the trace writer flushes every 0.5 s
    try:
        info = eng.get_server_info()
        (out / "server_info.json").write_text(json.dumps(info.get("internal_states"), default=str))
    except Exception as exc:
        print("GC server_info failed", repr(exc), flush=True)
    eng.shutdown()
    print(f"GC DONE {run.id} total {time.time() - t0:.1f}s", flush=True)
    return 0


def _append(path: Path, rec: dict[str, Any]) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(rec) + "\n")


# ----------------------------------------------------------------------------------------------- device
def _pack(work: Path, out: Path, ids: tuple[str, ...], tag: str) -> None:
    """One tarball per device command (the GPU machine returns a handful of files, not folders)."""
    tmp = out / f".results-{tag}.tar.gz"
    with tarfile.open(tmp, "w:gz") as tar:
        for name in (*ids, "doctor"):
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
    from specpolicy.registry import parse_config

    specs = planmod.perf_policies()
    keep = []
    for label in labels:
        try:
            parse_config(specs[label])
            keep.append(label)
        except Exception as exc:
            print(f"GC DROP perf policy {label}: {exc}")
    return tuple(keep)


def _csv(text: str) -> tuple[str, ...]:
    return tuple(x for x in text.split(",") if x)


def _plan(args: argparse.Namespace) -> list[planmod.EngineRun]:
    return planmod.build_plan(
        _csv(args.paths),  # type: ignore[arg-type]
        backends=_csv(args.attn),  # type: ignore[arg-type]
        concurrency=tuple(int(c) for c in _csv(args.concurrency)),
        repeats=args.repeats,
        min_batch_s=args.min_batch_s,
        perf_tokens=args.perf_tokens,
        perf=_usable_policies(_csv(args.perf)),
        ramp_s=args.ramp_s,
        ramp_policies=_csv(args.ramp_policies),
        ramp_peak=args.ramp_peak,
        resume_k=tuple(int(k) for k in _csv(args.resume_k)),
        pair_k=tuple(int(k) for k in _csv(args.pair_k)),
        skip_k=args.skip_k,
        tp=args.tp,
    )


def _build_models(work: Path, agree: float, eagle3: bool = False) -> int:
    """The test models (and the EAGLE-3 head when an EAGLE-3 engine is planned), unless already built."""
    meta = work / "models" / "meta.json"
    if meta.exists() and (not eagle3 or "eagle3" in json.loads(meta.read_text())):
        return 0
    cmd = module_command(
        "sglang_check",
        "build-models",
        "--work",
        str(work),
        "--device",
        "cuda",
        "--agree",
        str(agree),
        *(["--eagle3"] if eagle3 else []),
    )
    rc = subprocess.call(cmd, env=child_env())
    if rc:
        print(f"GC model build failed rc={rc}")
    return rc


def _run_engine(run: planmod.EngineRun, work: Path, deadline: float, kill_at: float) -> int:
    """One engine process; killed only if it overruns the whole budget (it stops itself at ``deadline``)."""
    d = work / "runs" / run.id
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(run.to_json())
    cmd = module_command(
        "sglang_check",
        "engine",
        "--run",
        str(d / "run.json"),
        "--work",
        str(work),
        "--out",
        str(d),
        "--deadline",
        str(deadline),
    )
    t0 = time.time()
    with open(d / "engine.log", "w") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=child_env()
        )
        try:
            rc = proc.wait(timeout=max(1.0, kill_at - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = -9
            print(f"GC TIMEOUT {run.id}: killed after {time.time() - t0:.0f}s")
    print(f"GC ENGINE {run.id} rc={rc} in {time.time() - t0:.0f}s")
    for line in open(d / "engine.log", errors="replace"):
        if line.startswith("GC ") or "specpolicy" in line.lower() or "Traceback" in line or "Error" in line:
            print("  " + line.rstrip()[:400])
    return rc


def doctor_command(models: Path, backend: str) -> list[str]:
    """``specpolicy doctor --smoke`` on the test models: four short engines (speculation-free, SGLang's own
    speculation, always off, switching every step), CUDA graphs only for the few batch sizes it uses."""
    kw = {
        k: v
        for k, v in engine_kwargs("base_v2", models, backend).items()
        if k
        in (
            "dtype",
            "attention_backend",
            "sampling_backend",
            "grammar_backend",
            "mem_fraction_static",
            "max_total_tokens",
            "random_seed",
        )
    }
    kw.update(cuda_graph_max_bs=8, cuda_graph_bs=[1, 2, 4, 8])
    return [
        sys.executable,
        "-m",
        "specpolicy.cli",
        "doctor",
        "--engine",
        "sglang",
        "--smoke",
        "--json",
        "--model",
        str(models / "target"),
        "--draft",
        str(models / "draft"),
        "--algorithm",
        "STANDALONE",
        "--num-steps",
        str(planmod.LAUNCH_DEPTH),
        "--engine-args",
        json.dumps(kw),
    ]


def _text(out: bytes | str | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


def _run_doctor(work: Path, backend: str, timeout: float) -> int:
    d = work / "runs" / "doctor" / backend
    d.mkdir(parents=True, exist_ok=True)
    cmd = doctor_command(work / "models", backend)
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:  # its output arrives as bytes, whatever ``text`` says
        rc, stdout, stderr = -9, _text(exc.stdout), _text(exc.stderr)
    (d / "doctor.json").write_text(stdout)
    (d / "doctor.log").write_text(stderr)
    (d / "doctor.rc").write_text(json.dumps({"rc": rc, "seconds": round(time.time() - t0, 1), "cmd": cmd}))
    print(f"GC DOCTOR {backend} rc={rc} in {time.time() - t0:.0f}s")
    return rc


def cmd_device(args: argparse.Namespace) -> int:
    """Build the models if needed, then run each engine in its own process within the time budget, then
    (optionally) ``specpolicy doctor --smoke``. ``--dry-run`` prints the plan and its estimate and stops."""
    t_end = time.time() + args.budget_s
    runs = _plan(args)
    if args.dry_run:
        print(planmod.format_plan(runs, args.budget_s, margin_s=args.margin_s))
        if args.doctor_smoke:
            print(f"doctor --smoke: ~{planmod.DOCTOR_S:.0f} s per backend, if that much is left")
        return 0
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rc = _build_models(work, args.agree, eagle3=any(r.path in planmod.EAGLE3_PATHS for r in runs))
    if rc:
        return rc
    ids = tuple(r.id for r in runs)
    tag = "-".join([*(_csv(args.paths) or ("doctor",)), *_csv(args.attn)])
    started: list[str] = []
    status = 0
    for i, run in enumerate(runs):
        left = t_end - time.time()
        if left < args.min_engine_s:
            print(f"GC SKIP {run.id}: {left:.0f}s left < {args.min_engine_s}s")
            status = 1
            continue
        start, *later = planmod.engine_starts(runs[i:], started)
        deadline = planmod.engine_deadline(time.time(), t_end - args.margin_s, runs[i + 1 :], later)
        if planmod.serves_nothing(time.time(), deadline, start, run):
            print(f"GC SKIP {run.id}: its start (~{start:.0f}s) would leave it no phase before its deadline")
            status = 1
            continue
        started.append(run.backend)
        status |= _run_engine(run, work, deadline, t_end - args.margin_s) != 0
        _pack(work, out, ids, tag)
    if args.doctor_smoke:
        for backend in _csv(args.attn):
            left = t_end - time.time() - args.margin_s
            if left < planmod.DOCTOR_S:
                print(f"GC SKIP doctor --smoke ({backend}): {left:.0f}s left < ~{planmod.DOCTOR_S:.0f}s")
                continue
            status |= _run_doctor(work, backend, left) != 0
            _pack(work, out, ids, tag)
    _pack(work, out, ids, tag)
    return status


# ----------------------------------------------------------------------------------------------- analyze
def cmd_analyze(args: argparse.Namespace) -> int:
    from specpolicy_livecheck import analysis

    report = analysis.analyze_dir(Path(args.results))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    text = analysis.render_markdown(report)
    if args.md:
        Path(args.md).write_text(text)
    print(text)
    return 0 if report["ok"] else 1


def _engine_arguments(d: argparse.ArgumentParser) -> None:
    """The plan's arguments, shared by ``run`` and ``plan``."""
    d.add_argument(
        "--paths",
        default="v2,base_v2,v1,base_v1",
        help="among v1,v2,base_v1,base_v2,plain_v1,plain_v2 (plain: SGLang's own speculation; optional), "
        "eagle3_v1,eagle3_v2 (the EAGLE-3 head, topk 1) and eagle3tree_v1 (the head with a 4 x 4 tree)",
    )
    d.add_argument(
        "--attn", default=os.environ.get("GC_ATTN", "triton"), help="attention backends: triton,flashinfer"
    )
    d.add_argument("--perf", default=",".join(planmod.PERF_POLICIES))
    d.add_argument("--concurrency", default=",".join(map(str, planmod.CONCURRENCY)))
    d.add_argument("--repeats", type=int, default=3, help="measurements per perf point, interleaved")
    d.add_argument("--min-batch-s", type=float, default=1.0, help="shortest perf batch (repeated until then)")
    d.add_argument("--perf-tokens", type=int, default=0, help="output tokens per request; 0: sized per level")
    d.add_argument(
        "--ramp-s", type=float, default=60.0, help="ramp arrivals span (1 -> peak -> 1); 0: no ramp"
    )
    d.add_argument("--ramp-peak", type=int, default=128)
    d.add_argument("--ramp-policies", default=",".join(planmod.RAMP_POLICIES))
    d.add_argument(
        "--resume-k", default=",".join(map(str, planmod.RESUME_K)), help="off stretches; empty: none"
    )
    d.add_argument(
        "--pair-k",
        default=",".join(map(str, planmod.PAIR_K)),
        help="EAGLE-3 engines: off stretches whose acceptance afterwards is compared with an always-on run",
    )
    d.add_argument(
        "--skip-k",
        type=int,
        default=planmod.SKIP_K,
        help="EAGLE-3 engines: off stretch of the phase that skips the hidden-state catch-up; 0: none",
    )
    d.add_argument(
        "--tp",
        type=int,
        default=1,
        help="tensor-parallel size of every engine (one GPU per rank); results under tp<N>/<path>/<backend>",
    )
    d.add_argument("--doctor-smoke", action="store_true", help="after the engines: specpolicy doctor --smoke")
    d.add_argument("--budget-s", type=float, default=540.0)
    d.add_argument("--margin-s", type=float, default=10.0)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build-models", help="write the bigram target and draft checkpoints")
    b.add_argument("--work", required=True)
    b.add_argument("--device", default="cpu")
    b.add_argument("--agree", type=float, default=0.7, help="fraction of tokens where the draft agrees")
    b.add_argument("--tiny", action="store_true", help="tiny shapes (CPU tests)")
    b.add_argument(
        "--eagle3",
        action="store_true",
        help="also write the EAGLE-3 head (models/eagle3); with --tiny the target gets 4 layers",
    )
    e = sub.add_parser("engine", help="run one engine through its phases (internal)")
    e.add_argument("--run", required=True)
    e.add_argument("--work", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--deadline", type=float, default=float("inf"), help="epoch seconds: skip phases past it")
    d = sub.add_parser(
        "run", aliases=["device"], help="build the models and run the engines on the GPU machine"
    )
    d.add_argument("--work", required=True)
    d.add_argument("--out", required=True)
    _engine_arguments(d)
    d.add_argument("--dry-run", action="store_true", help="print the plan with estimated seconds and exit")
    d.add_argument("--agree", type=float, default=0.7)
    d.add_argument("--min-engine-s", type=float, default=90.0)
    pl = sub.add_parser("plan", help="print the plan of `run` with its estimated seconds (any machine)")
    _engine_arguments(pl)
    pl.set_defaults(dry_run=True)
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
        "run": cmd_device,
        "device": cmd_device,
        "plan": cmd_device,
        "analyze": cmd_analyze,
    }[args.cmd]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
