#!/usr/bin/env python3
"""Paired runs: one offline SGLang engine per variant on the GPU machine, serving the same batches, in turn or
(``--paired``) side by side, for throughput, acceptance and losslessness variant against variant.

A live check's engine runs every policy in turn on one engine; a variant here is one engine configured one
way for its whole life, as in serving. The variants (``VARIANTS``; each names its engine path of
``specpolicy-livecheck run``):

- SGLang 0.5.13 and later (the v2 worker only), ``<policy>_<drafter>_<ov|nov>``: policy ``sglang``
  (SGLang's own fixed depth, specpolicy installed but not configured), ``adaptive`` (SGLang's
  ``--speculative-adaptive``, EAGLE-3 only), ``static``, ``static0`` (every step off) or ``cm``
  (cost_model); drafter ``draft`` (a STANDALONE draft model) or ``eagle3``; ``ov`` overlap or ``nov``
  non-overlap scheduling; ``never_<ov|nov>`` is the speculation-free engine. ``paired_report`` turns
  their run into the report's goal ratios.
- By engine path (``_v1``: non-overlap scheduling; on 0.5.12.post1 the v1 worker): ``base_v1`` /
  ``base_v2`` speculation-free; ``off_v1`` / ``off_v2`` every step off in the draft-model engine;
  ``on`` / ``on_v1`` specpolicy's static (depth 3); ``plain`` / ``plain_v1`` SGLang's own speculation;
  ``cm_v1`` / ``cm_v2`` and ``hyst_v1`` / ``hyst_v2`` the live check's cost_model and tuned hysteresis.
- EAGLE-3: ``off_eagle3_v1`` / ``off_eagle3_v2``, ``on_eagle3_v1`` / ``on_eagle3_v2``, ``cm_eagle3_v1`` /
  ``cm_eagle3_v2`` (topk 1) and ``off_eagle3tree_v1`` / ``on_eagle3tree_v1`` / ``cm_eagle3tree_v1`` (the
  4 x 4 draft tree at its own launch depth).
- ``mixed_v1`` / ``mixed_v2``: one engine switched between static-0 and static by the dispatcher: off
  batches before any speculative step (``off_fresh``), on and off batches in turn (``on``,
  ``off_after_on``), then off batches in a row (``off_late``), each profiled; under ``--paired`` each of
  its batches follows an untimed speculative one.

Per variant and concurrency: ``--repeats`` batches of at least ``--min-s`` seconds (tokens/s, accept length,
and how many requests equal the bigram oracle's greedy chain, counted outside the timed span), then, at the
``--profile`` concurrencies, SGLang's torch profiler over 40 decode steps summarised as GPU-busy time, the
profiled window, kernel count, the CUDA runtime calls and the host-side ATen ops by count and time.
``--paired``: the listed variants' engines all at once, the batches rotating across them, the ratios to the
first variant batch by batch (``paired``: a drift of the host's speed hits every variant alike).
``--control-variant V`` (``control_phase``): after them, on V's engine alone (started with a control file),
a batch with per-request hints and a policy swap to static-0 and back, each batch checked. Usage:

    specpolicy-livecheck paired --work /tmp/gc --out OUT --variants base_v2,off_v2,on,plain \
        --concurrency 1,16,64 --profile 1,16 --budget-s 480
    specpolicy-livecheck paired --paired --work /tmp/gc --out OUT \
        --variants never_ov,sglang_eagle3_ov,static0_eagle3_ov,cm_eagle3_ov --concurrency 1,16,64,128

Needs the test models (``specpolicy-livecheck build-models``, with ``--eagle3`` for the EAGLE-3 variants),
SGLang, specpolicy and the test policies installed. Each variant runs in its own process; results go to
``OUT/ab-<variant>.json`` (``OUT/ab-paired.json`` under ``--paired``).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specpolicy_livecheck import control_phase, paired
from specpolicy_livecheck import plan as planmod
from specpolicy_livecheck._proc import child_env, module_command

STATIC = {"name": "static", "num_steps": 3}
OFF = {"name": "static", "num_steps": 0}
#: the live check's perf policies, each configured as the engine's only policy (no dispatcher, no resets)
COST_MODEL = planmod.perf_policies()["cost_model"]
HYSTERESIS = planmod.perf_policies()["hysteresis"]
TREE = planmod.perf_policies(planmod.TREE_STEPS)  # the draft tree's engine launches at its own depth
#: variant -> (engine path, environment; None = SGLang's own speculation)
VARIANTS: dict[str, tuple[str, dict[str, str] | None]] = {
    # SGLang's own speculation and specpolicy's static, on the overlap (v2) and the non-overlap (v1) worker
    "plain": ("v2", None),
    "on": ("v2", {"SPECPOLICY_POLICY": json.dumps(STATIC)}),
    "plain_v1": ("v1", None),
    "on_v1": ("v1", {"SPECPOLICY_POLICY": json.dumps(STATIC)}),
    # Where an EAGLE-3 off step loses to a speculation-free step (0.81-0.88x live, against 0.94-0.99x for
    # a draft model's): every step off in the EAGLE-3 engine and the draft-model engine, beside the
    # speculation-free engine of the same worker.
    "base_v1": ("base_v1", None),
    "off_v1": ("v1", {"SPECPOLICY_POLICY": json.dumps(OFF)}),
    "off_eagle3_v1": ("eagle3_v1", {"SPECPOLICY_POLICY": json.dumps(OFF)}),
    "base_v2": ("base_v2", None),
    "off_v2": ("v2", {"SPECPOLICY_POLICY": json.dumps(OFF)}),
    "off_eagle3_v2": ("eagle3_v2", {"SPECPOLICY_POLICY": json.dumps(OFF)}),
    # One engine switched between off and on by the dispatcher (filled in run_variant): the off step before
    # and after speculative steps.
    "mixed_v1": ("v1", {}),
    "mixed_v2": ("v2", {}),
    # The policies as deployed: one policy for the engine's life, beside never / static-0 / static / SGLang's
    # own under --paired.
    "cm_v1": ("v1", {"SPECPOLICY_POLICY": json.dumps(COST_MODEL)}),
    "cm_v2": ("v2", {"SPECPOLICY_POLICY": json.dumps(COST_MODEL)}),
    "hyst_v1": ("v1", {"SPECPOLICY_POLICY": json.dumps(HYSTERESIS)}),
    "hyst_v2": ("v2", {"SPECPOLICY_POLICY": json.dumps(HYSTERESIS)}),
    # The same policies in the EAGLE-3 engines (topk 1, and the seed deployment's draft tree at its own
    # launch depth): with base_v1 / base_v2 and off_eagle3_* every ratio of the EAGLE-3 keys side by side.
    "on_eagle3_v1": ("eagle3_v1", {"SPECPOLICY_POLICY": json.dumps(STATIC)}),
    "cm_eagle3_v1": ("eagle3_v1", {"SPECPOLICY_POLICY": json.dumps(COST_MODEL)}),
    "on_eagle3_v2": ("eagle3_v2", {"SPECPOLICY_POLICY": json.dumps(STATIC)}),
    "cm_eagle3_v2": ("eagle3_v2", {"SPECPOLICY_POLICY": json.dumps(COST_MODEL)}),
    "off_eagle3tree_v1": ("eagle3tree_v1", {"SPECPOLICY_POLICY": json.dumps(OFF)}),
    "on_eagle3tree_v1": ("eagle3tree_v1", {"SPECPOLICY_POLICY": json.dumps(TREE["static"])}),
    "cm_eagle3tree_v1": ("eagle3tree_v1", {"SPECPOLICY_POLICY": json.dumps(TREE["cost_model"])}),
}

#: SGLang 0.5.13 and later have no v1 worker: EAGLEWorkerV2 / StandaloneWorkerV2 serve overlap scheduling
#: and, with ``disable_overlap_schedule=True`` (the ``*_v1`` paths' engine arguments), non-overlap
#: scheduling. Their variants are named ``<policy>_<drafter>_<ov|nov>`` (``never_<ov|nov>`` has no
#: drafter): ``sglang``: SGLang's own fixed depth (specpolicy installed, not configured); ``adaptive``:
#: SGLang's ``--speculative-adaptive`` with its default config (its steps=0 tier included); ``static``,
#: ``static0``, ``cm``: specpolicy's static, static-0 and cost_model, each the engine's one policy.
#: policy -> (the report's label, specpolicy's configuration or None for SGLang's own)
V2_POLICIES: dict[str, tuple[str, dict[str, Any] | None]] = {
    "sglang": ("sglang-static", None),
    "adaptive": ("sglang-adaptive", None),
    "static": ("static", STATIC),
    "static0": ("static-0", OFF),
    "cm": ("cost_model", COST_MODEL),
}
#: drafter -> the engine path per scheduling (non-overlap, overlap)
V2_DRAFTERS: dict[str, tuple[str, str]] = {"draft": ("v1", "v2"), "eagle3": ("eagle3_v1", "eagle3_v2")}
V2_SCHEDULING = ("nov", "ov")
#: why a STANDALONE engine has no SGLang-adaptive variant
ADAPTIVE_DRAFT_SKIP = (
    "SGLang's --speculative-adaptive supports EAGLE / EAGLE3 with topk 1 only; with a STANDALONE draft model"
    " it falls back to its fixed depth (0.5.17) or refuses it, so the variant would not measure it"
)


def v2_variants() -> tuple[
    dict[str, tuple[str, dict[str, str] | None]], dict[str, str], dict[str, dict[str, Any]], dict[str, str]
]:
    """The v2-only variants: variant -> (path, environment), variant -> report label, variant -> engine
    arguments on top of its path's, and variant -> why it is skipped."""
    variants: dict[str, tuple[str, dict[str, str] | None]] = {}
    labels: dict[str, str] = {}
    engine_kw: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for i, sched in enumerate(V2_SCHEDULING):
        variants[f"never_{sched}"] = (("base_v1", "base_v2")[i], None)
        labels[f"never_{sched}"] = "never"
        for drafter, paths in V2_DRAFTERS.items():
            for policy, (label, cfg) in V2_POLICIES.items():
                v = f"{policy}_{drafter}_{sched}"
                variants[v] = (paths[i], None if cfg is None else {"SPECPOLICY_POLICY": json.dumps(cfg)})
                labels[v] = label
                if policy == "adaptive":
                    engine_kw[v] = {"speculative_adaptive": True}
                    if drafter == "draft":
                        skipped[v] = ADAPTIVE_DRAFT_SKIP
    return variants, labels, engine_kw, skipped


_V2, V2_LABELS, ENGINE_KW, SKIPPED = v2_variants()
VARIANTS.update(_V2)


def runnable(variants: list[str]) -> list[str]:
    """``variants`` less the skipped ones, each skip logged with its reason."""
    for v in variants:
        if v in SKIPPED:
            print(f"skipped {v}: {SKIPPED[v]}", flush=True)
    return [v for v in variants if v not in SKIPPED]


#: the switched variants: one engine, its dispatcher switching between static-0 and static
MIXED = frozenset({"mixed_v1", "mixed_v2"})
#: output tokens per request by concurrency, so that a batch lasts about a second
TOKENS = {1: 600, 4: 500, 16: 400, 64: 300, 128: 200}
#: engine arguments of every ``--paired`` engine, on top of the live check's. Five engines share the GPU:
#: each KV pool is capped at what the largest batch needs (128 x (128 + 200) tokens plus the draft reserve,
#: with room), and the static fraction is raised because SGLang sizes a pool from the memory free when the
#: engine starts (free x fraction, less the weights), which the engines started before it have taken; with
#: the cap, the fraction no longer sizes anything. An idle scheduler waits on its sockets instead of
#: spinning a core while the others serve (SGLang's ``sleep_on_idle``; a request wakes it at once). The
#: largest batch's prompts are prefilled in one chunk: chunked at SGLang's default 8,192 tokens, 127 of the
#: 128 requests were admitted and the last one waited for a free slot, then decoded alone (found in the
#: engines' batch lines, 2026-12-06), so the "128" batches measured a 127-request decode plus a one-request
#: tail. SGLang compiles piecewise prefill graphs up to the chunk size; they stay at its default 8,192
#: tokens (to 32,768, four engines compiling at once took 6.5 minutes to start), a larger prefill runs eager.
PAIRED_ENGINE_KW: dict[str, Any] = {
    "max_total_tokens": 65536,
    "mem_fraction_static": 0.88,
    "sleep_on_idle": True,
    "chunked_prefill_size": 32768,
    "max_prefill_tokens": 32768,
    "piecewise_cuda_graph_max_tokens": 8192,
}


def _by_name(
    events: list[dict[str, Any]], width: int | None = None
) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Count and total duration (us) of trace events per name (the first ``width`` characters)."""
    count: collections.Counter[str] = collections.Counter()
    us: collections.Counter[str] = collections.Counter()
    for e in events:
        name = e["name"][:width]
        count[name] += 1
        us[name] += e["dur"]
    return count, us


def summarize(trace_path: str) -> dict[str, Any]:
    """GPU-busy time, window, kernels, CUDA runtime calls and host-side ATen ops of one profiler trace."""
    opener = gzip.open if trace_path.endswith(".gz") else open
    with opener(trace_path, "rt") as f:
        events = [e for e in json.load(f).get("traceEvents", []) if e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    runtime = [e for e in events if e.get("cat") == "cuda_runtime"]
    cpu_ops = [e for e in events if e.get("cat") == "cpu_op"]
    if not kernels:
        return {"error": "no kernels in the trace"}
    t0 = min(e["ts"] for e in kernels)
    t1 = max(e["ts"] + e["dur"] for e in kernels)
    _, by_name = _by_name(kernels, width=80)
    calls, call_us = _by_name(runtime)
    # Host-side ATen ops (eager work outside the CUDA graphs): where two engines' GPU-busy times agree and
    # their windows do not, the difference is in these counts.
    op_count, op_us = _by_name(cpu_ops)
    return {
        "window_ms": round((t1 - t0) / 1e3, 2),
        "gpu_busy_ms": round(sum(e["dur"] for e in kernels) / 1e3, 2),
        "kernels": len(kernels),
        "top_kernels_ms": [(n, round(us / 1e3, 2)) for n, us in by_name.most_common(12)],
        "runtime_calls": calls.most_common(12),
        "runtime_ms": [(n, round(us / 1e3, 2)) for n, us in call_us.most_common(8)],
        "cpu_ops": len(cpu_ops),
        "cpu_op_calls": op_count.most_common(),  # every op: two variants are compared name by name
        "cpu_op_ms": [(n, round(us / 1e3, 3)) for n, us in op_us.most_common(12)],
    }


def fresh_dir(path: Path) -> Path:
    """``path``, emptied: a later command on the same host reuses the profile folders, and a trace left there
    by an earlier variant (or backend) must not be summarised as this one's."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def newest_trace(folder: Path) -> Path | None:
    """The most recently written profiler trace under ``folder`` (SGLang writes one per profiled rank and
    stage; the decode steps' trace is the last one written)."""
    files = [f for f in folder.rglob("*.json*") if f.is_file()]
    return max(files, key=lambda f: f.stat().st_mtime_ns) if files else None


def _prompts(c: int, vocab: int, seed: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(4, vocab) for _ in range(128)] for _ in range(c)]


def _batch(
    eng: Any, prompts: list[list[int]], tokens: int, min_s: float, pi: Any = None, passes: int | None = None
) -> dict[str, Any]:
    """Serve ``prompts`` greedily, again until ``min_s`` has passed, or exactly ``passes`` times. With the
    bigram map ``pi`` every request's tokens are compared with the oracle's chain after the timed span
    (``requests``, ``lossless``).

    A pass after the first skips its prompts' prefill (``paired.more_passes``): one against two passes of
    the same 128 requests measured 7% apart (flashinfer, 2026-12-06)."""
    sp = {"temperature": 0.0, "max_new_tokens": tokens, "ignore_eos": True}
    wall0 = time.time()
    t0 = time.perf_counter()
    out_tokens = verifies = done = 0
    served: list[Any] = []
    while paired.more_passes(done, passes, t0, min_s):
        outs = eng.generate(input_ids=prompts, sampling_params=sp)
        done += 1
        for o in outs:
            meta = o.get("meta_info", {})
            out_tokens += int(meta.get("completion_tokens") or 0)
            verifies += int(meta.get("spec_verify_ct") or 0)
        if pi is not None:
            served.append(outs)
    wall = time.perf_counter() - t0
    res: dict[str, Any] = {
        "tok_s": round(out_tokens / wall, 1),
        "wall_s": round(wall, 3),
        "passes": done,
        "accept_len": round(out_tokens / verifies, 3) if verifies else None,
        "t0": round(wall0, 4),
        "t1": round(wall0 + wall, 4),
    }
    if pi is not None:
        from specpolicy_livecheck.bigram_model import lossless_count

        n = ok = 0
        for outs in served:
            ids = [o.get("output_ids") or [] for o in outs]
            a, b = lossless_count(ids, prompts[: len(ids)], [tokens] * len(ids), pi)
            n, ok = n + a, ok + b
        res["requests"], res["lossless"] = n, ok
    return res


def checked_env(
    out: Path,
    variant: str,
    label: str,
    policy: dict[str, Any],
    others: dict[str, Any] | None = None,
    trace: bool = True,
) -> dict[str, str]:
    """The live check's adapter settings: the dispatcher over a control file (``ab-control-<variant>.txt``)
    selecting ``label``, among ``others`` if given, and the JSONL trace (both files per variant)."""
    from specpolicy_gpucheck import write_control

    control = control_path(out, variant)
    write_control(control, 1, label)
    log = f"/tmp/ab-dispatch-{variant}.jsonl"
    cfg = planmod.dispatch_config({**(others or {}), label: policy}, str(control), log, label)
    env = {"SPECPOLICY_POLICY": json.dumps(cfg)}
    if trace:
        env["SPECPOLICY_TRACE"] = f"/tmp/ab-trace-{variant}.jsonl"
        env["SPECPOLICY_TRACE_MAX_BYTES"] = str(1 << 30)  # as the check sets it
    return env


def control_path(out: Path, variant: str) -> Path:
    return out / f"ab-control-{variant}.txt"


def mixed_env(out: Path, variant: str) -> dict[str, str]:
    """A switched variant's settings: the dispatcher holding static-0 and static, starting off; no trace."""
    return checked_env(out, variant, "static-0", OFF, {"static": STATIC}, trace=False)


def paired_timers_path(folder: str | Path, variant: str) -> Path:
    return Path(folder) / f"timers-{variant}.jsonl"


def attach_host_times(perf: dict[str, list[dict[str, Any]]], path: Path) -> int:
    """Give every batch the scheduler's host time per engine method over its span (``host``); returns how
    many batches got one."""
    from specpolicy_gpucheck.host_timers import deltas

    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    n = 0
    for runs in perf.values():
        for b in runs:
            d = deltas(lines, b["t0"], b["t1"])
            if d is not None:
                b["host"] = d
                n += 1
    return n


class Switch:
    """Selects the dispatcher's policy between batches: each call writes a new generation."""

    def __init__(self, control: Path) -> None:
        self.control = control
        self.generation = 1

    def __call__(self, label: str) -> None:
        from specpolicy_gpucheck import write_control

        self.generation += 1
        write_control(self.control, self.generation, label)


def _profile(eng: Any, pdir: Path, c: int, vocab: int) -> dict[str, Any]:
    """SGLang's profiler over 40 decode steps of a fresh batch of ``c`` requests, summarised."""
    out: dict[str, Any] = {}
    try:
        eng.start_profile(output_dir=fresh_dir(pdir), num_steps=40, activities=["CPU", "GPU"])
        _batch(eng, _prompts(c, vocab, 999), 300, 0.0)
        time.sleep(2)
        try:
            eng.stop_profile()
        except Exception as exc:  # already stopped after num_steps
            out["stop"] = repr(exc)
        time.sleep(2)
        trace = newest_trace(pdir)
        out.update(summarize(str(trace)) if trace else {"error": "no trace written"})
    except Exception as exc:
        out["error"] = repr(exc)
    return out


def run_mixed(
    eng: Any, args: argparse.Namespace, variant: str, levels: list[int], vocab: int, pi: Any = None
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Off before any speculative step, on and off in turn, then off in a row: batches and profiles."""
    select = Switch(control_path(Path(args.out), variant))
    perf: dict[str, list[dict[str, Any]]] = {}
    profiles: dict[str, Any] = {}
    prof_levels = [int(c) for c in args.profile.split(",") if c]
    root = Path(args.prof_root)

    def measure(kind: str, c: int, r: int) -> None:
        tokens = TOKENS.get(c, 200)
        perf.setdefault(f"{kind}:{c}", []).append(
            _batch(eng, _prompts(c, vocab, 100 * r + c), tokens, args.min_s, pi)
        )

    select("static-0")
    for c in levels:
        _batch(eng, _prompts(c, vocab, 7), 32, 0.0)
    for r in range(args.repeats):
        for c in levels:
            measure("off_fresh", c, r)
    for c in prof_levels:
        profiles[f"off_fresh:{c}"] = _profile(eng, root / f"{variant}-fresh-{c}", c, vocab)
    select("static")
    for c in levels:
        _batch(eng, _prompts(c, vocab, 8), 32, 0.0)
    for r in range(args.repeats):
        for c in levels:
            select("static")
            measure("on", c, r)
            select("static-0")
            measure("off_after_on", c, r)
    for c in prof_levels:
        select("static")
        _batch(eng, _prompts(c, vocab, 9), 64, 0.0)
        select("static-0")
        profiles[f"off_after_on:{c}"] = _profile(eng, root / f"{variant}-after-{c}", c, vocab)
    for r in range(args.repeats):
        for c in levels:
            measure("off_late", c, r)
    return perf, profiles


def run_variant(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    eng, res, vocab, pi = start_engine(args, variant)
    levels = [int(c) for c in args.concurrency.split(",") if c]
    if variant in MIXED:
        res["perf"], res["profile"] = run_mixed(eng, args, variant, levels, vocab, pi)
        res["median_tok_s"] = {k: paired.median(v) for k, v in res["perf"].items()}
        eng.shutdown()
        return res
    for c in levels:  # warm every shape first
        _batch(eng, _prompts(c, vocab, 7), 32, 0.0)
    perf: dict[str, list[dict[str, Any]]] = {str(c): [] for c in levels}
    for r in range(args.repeats):
        for c in levels:
            prompts = _prompts(c, vocab, 100 * r + c)
            perf[str(c)].append(_batch(eng, prompts, TOKENS.get(c, 200), args.min_s, pi))
    res["perf"] = perf
    res["median_tok_s"] = {c: paired.median(v) for c, v in perf.items()}
    res["profile"] = {
        str(c): _profile(eng, Path(args.prof_root) / f"{variant}-{c}", c, vocab)
        for c in [int(c) for c in args.profile.split(",") if c]
    }
    eng.shutdown()
    return res


def trace_path(args: argparse.Namespace, variant: str) -> Path | None:
    """Where the variant's step trace goes: ``--trace-dir``, for the ``--trace-variants`` only (default
    every variant; one that is not specpolicy's writes none)."""
    trace_dir = getattr(args, "trace_dir", None)
    only = getattr(args, "trace_variants", None)
    if not trace_dir or (only and variant not in only.split(",")):
        return None
    return Path(trace_dir) / f"trace-{variant}.jsonl"


def start_engine(args: argparse.Namespace, variant: str) -> tuple[Any, dict[str, Any], int, Any]:
    """The variant's engine, configured through the environment (and ``PAIRED_ENGINE_KW`` when it serves a
    ``--paired`` run); its description; the chain vocabulary; the bigram map (the oracle)."""
    import numpy as np
    import sglang

    from specpolicy_livecheck import sglang_check

    path, env = VARIANTS[variant]
    for k in [k for k in os.environ if k.startswith("SPECPOLICY_")]:
        del os.environ[k]
    out = Path(args.out)
    if variant in MIXED:
        env = mixed_env(out, variant)
    timers_dir = getattr(args, "host_timers_dir", None)
    if timers_dir:  # every variant, specpolicy or not: SGLang's plugin loader installs them
        from specpolicy_gpucheck.host_timers import ENV as TIMERS_ENV

        Path(timers_dir).mkdir(parents=True, exist_ok=True)
        paired_timers_path(timers_dir, variant).unlink(missing_ok=True)  # an earlier command's lines
        os.environ[TIMERS_ENV] = str(paired_timers_path(timers_dir, variant))
    trace = trace_path(args, variant)
    if trace is not None and env is not None:  # the adapter's step trace, one file per variant
        env = {**env, "SPECPOLICY_TRACE": str(trace)}
        trace.parent.mkdir(parents=True, exist_ok=True)
    if getattr(args, "serve", None) and getattr(args, "control_variant", None) == variant:
        control_phase.control_file(out, variant).unlink(missing_ok=True)  # the file at start is the baseline
        env = {**(env or {}), **control_phase.control_env(out, variant)}
    os.environ.update(env or {})
    models = Path(args.work) / "models"
    meta = json.loads((models / "meta.json").read_text())
    vocab, pi = int(meta["chain_vocab"]), np.asarray(meta["pi"])
    kw = {**sglang_check.engine_kwargs(path, models), **ENGINE_KW.get(variant, {})}
    kw["log_level"] = "warning"
    if getattr(args, "engine_log_level", None):
        kw["log_level"] = args.engine_log_level
    if getattr(args, "serve", None):
        kw.update(PAIRED_ENGINE_KW)
    kw = sglang_check.for_release(kw, sglang_check.server_arg_fields())
    t0 = time.time()
    eng = sglang.Engine(**kw)
    up = round(time.time() - t0, 1)
    res: dict[str, Any] = {
        "variant": variant,
        "path": path,
        "attention_backend": kw["attention_backend"],
        "env": env,
        "engine_up_s": up,
        "engine_kw": {
            k: kw[k]
            for k in ("max_total_tokens", "mem_fraction_static", "sleep_on_idle", "speculative_adaptive")
            if k in kw
        },
        "sglang": sglang.__version__,
    }
    return eng, res, vocab, pi


def _select(select_label: Callable[[str], None] | None, label: str) -> None:
    if select_label is None:
        raise ValueError("this variant has no dispatcher to select a policy with")
    select_label(label)


def serve(
    eng: Any,
    vocab: int,
    commands: Any,
    replies: Any,
    select_label: Callable[[str], None] | None,
    pi: Any = None,
    control: Callable[[], dict[str, Any]] | None = None,
) -> int:
    """The engine's side of ``paired``: one reply line per command line until ``quit``; returns the
    batches served. ``batch`` takes ``c``, ``tokens``, ``seed``, ``min_s`` and, for a dispatcher variant,
    ``label`` (the policy it selects first); an error is answered, not raised, so the run goes on. With
    the bigram map ``pi`` each measured batch's reply counts its requests equal to the oracle. ``passes``
    (optional) fixes the batch's passes instead of ``min_s``. ``control`` (``--control-variant``'s engine
    only) answers ``{"op": "control"}`` with ``control_phase.run``'s record."""
    served = 0
    for line in commands:
        try:
            cmd = json.loads(line)
            op = cmd.get("op")
            if op == "quit":
                replies.write(json.dumps({"bye": True}) + "\n")
                replies.flush()
                return served
            if op == "control" and control is not None:
                replies.write(json.dumps(control()) + "\n")
                replies.flush()
                continue
            if op != "batch":
                raise ValueError(f"unknown op {op!r}")
            c = int(cmd["c"])
            if cmd.get("pre_label"):  # an untimed batch under another policy first (speculative steps)
                _select(select_label, str(cmd["pre_label"]))
                _batch(eng, _prompts(c, vocab, int(cmd["seed"]) + 1), int(cmd.get("pre_tokens", 64)), 0.0)
            if cmd.get("label"):
                _select(select_label, str(cmd["label"]))
            prompts = _prompts(c, vocab, int(cmd["seed"]))
            n = None if cmd.get("passes") is None else int(cmd["passes"])
            reply = _batch(eng, prompts, int(cmd["tokens"]), float(cmd["min_s"]), pi, n)
            served += 1
        except Exception as exc:  # answered: the coordinator records it and goes on
            reply = {"error": repr(exc)[:500]}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return served


def serve_variant(args: argparse.Namespace, variant: str) -> int:
    """``--serve``: start the variant's engine, say so, then serve the coordinator's batches."""
    commands = os.fdopen(args.cmd_fd, "r")
    replies = os.fdopen(args.reply_fd, "w")
    try:
        if args.cpus:  # before the engine starts: its scheduler and detokenizer processes inherit the set
            os.sched_setaffinity(0, [int(c) for c in args.cpus.split(",")])
        eng, res, vocab, pi = start_engine(args, variant)
        if args.cpus:
            res = {**res, "cpus": sorted(os.sched_getaffinity(0))}
    except Exception as exc:
        replies.write(json.dumps({"ready": False, "error": repr(exc)[:500]}) + "\n")
        replies.flush()
        return 1
    select_label = Switch(control_path(Path(args.out), variant)) if variant in MIXED else None
    control = None
    if getattr(args, "control_variant", None) == variant:
        ctl_file, trace = control_phase.control_file(Path(args.out), variant), trace_path(args, variant)

        def control() -> dict[str, Any]:
            return control_phase.run(eng, ctl_file, vocab, pi, STATIC, OFF, trace)

    replies.write(json.dumps({"ready": True, **res}) + "\n")
    replies.flush()
    try:
        serve(eng, vocab, commands, replies, select_label, pi, control)
    finally:
        eng.shutdown()
    return 0


#: per paired variant: the dispatcher label its batches select, and the label of an untimed batch run just
#: before each (a switched variant measures its off step right after speculative steps)
PAIRED_LABEL = {v: "static-0" for v in MIXED}
PAIRED_PRE_LABEL = {v: "static" for v in MIXED}


def run_paired(
    args: argparse.Namespace, variants: list[str], pins: list[list[int]] | None = None
) -> dict[str, Any]:
    """Every variant's engine at once, the batches rotating across them; the ratios of each variant to the
    first one, batch next to batch. ``pins``: each variant's CPUs (``paired.cpu_sets``), or None."""
    argv = module_command("ab_static", *[a for a in args.argv if a not in ("--paired", "--pin-cpus")])
    children: dict[str, paired.Child] = {}
    started = time.time()
    for i, v in enumerate(variants):
        pin = ["--cpus", ",".join(map(str, pins[i]))] if pins else []
        children[v] = paired.Child(v, [*argv, "--serve", v, *pin], env=child_env())

    def stop(signum: int, _frame: Any) -> None:
        # a command cut short by `timeout` must not leave engines behind: each runs in a session of its own
        # and would go on (compiling, serving) beside the next command's engines
        for child in children.values():
            child.kill()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    ready: dict[str, Any] = {}
    for v, child in list(children.items()):
        left = max(30.0, started + args.budget_s - time.time())
        try:
            ready[v] = child.recv(left)
        except paired.ChildError as exc:
            ready[v] = {"ready": False, "error": str(exc)}
        if not ready[v].get("ready"):
            print(f"paired: {v} did not start: {ready[v].get('error')}", flush=True)
            child.close(10.0)
            del children[v]
    levels = [int(c) for c in args.concurrency.split(",") if c]

    passes: dict[str, int] = {}  # per level, once calibrated: every measured batch makes that many

    def command(
        r: int, c: int, v: str, tokens: int | None = None, min_s: float | None = None
    ) -> dict[str, Any]:
        cmd: dict[str, Any] = {
            "op": "batch",
            "c": c,
            "tokens": TOKENS.get(c, 200) if tokens is None else tokens,
            "seed": 100 * r + c,
            "min_s": args.min_s if min_s is None else min_s,
        }
        if str(c) in passes and tokens is None:
            cmd["passes"] = passes[str(c)]
        if v in PAIRED_LABEL:
            cmd["label"] = PAIRED_LABEL[v]
        if v in PAIRED_PRE_LABEL and tokens is None:  # measured batches only
            cmd["pre_label"] = PAIRED_PRE_LABEL[v]
        return cmd

    names = list(children)
    warm = [(0, c, v) for c in levels for v in names]  # every shape of every engine before any measurement
    paired.paired_batches(
        children, warm, lambda r, c, v: command(7, c, v, 32, 0.0), timeout_s=args.batch_timeout_s
    )
    # one batch of every engine at every level, passes chosen by min_s (seeds apart from the measured ones):
    # the most passes any engine needed is what every measured batch of that level makes
    calibration = paired.paired_batches(
        children,
        [(8, c, v) for c in levels for v in names],
        command,
        timeout_s=args.batch_timeout_s,
        deadline=started + args.budget_s - 30,
    )
    passes.update(paired.fixed_passes(calibration))
    print(f"paired: passes per level {passes}", flush=True)
    order = planmod.interleave(names, args.repeats, levels)
    batches = paired.paired_batches(
        children, order, command, timeout_s=args.batch_timeout_s, deadline=started + args.budget_s - 30
    )
    base = variants[0]  # the reference; its ratios are absent if it did not start
    res = {
        "variants": variants,
        "engines": ready,
        "passes": passes,
        "calibration": calibration,
        "batches": batches,
        "median_tok_s": {
            v: {c: paired.median(rows) for c, rows in by_c.items()} for v, by_c in batches.items()
        },
        "ratio_to_first": {v: paired.ratios(batches, v, base) for v in batches if v != base},
        "lossless": {v: paired.lossless_total(by_c) for v, by_c in batches.items()},
    }
    if args.host_timers_dir:
        res["host_timed_batches"] = {
            v: attach_host_times(by_c, paired_timers_path(args.host_timers_dir, v))
            for v, by_c in batches.items()
        }
    # written before the engines shut down: a command cut short while five engines close keeps its results
    (Path(args.out) / "ab-paired.json").write_text(json.dumps(res, indent=1))
    if getattr(args, "control_variant", None):
        left = started + args.budget_s - time.time()
        res["control"] = (
            control_run(children, args.control_variant, min(args.batch_timeout_s * 4, left))
            if left >= CONTROL_MIN_S
            else {"variant": args.control_variant, "skipped": f"budget: {left:.0f} s left"}
        )
        (Path(args.out) / "ab-paired.json").write_text(json.dumps(res, indent=1))
    for child in children.values():
        child.close(20.0)
    return res


#: ``--control-variant``: the least budget left after the measured batches for its phase to start (the
#: phase takes about 10 s on the small test models)
CONTROL_MIN_S = 20.0


def control_run(children: dict[str, paired.Child], variant: str, timeout_s: float) -> dict[str, Any]:
    """``--control-variant``: the hint and swap phase on that variant's engine (``control_phase``), after
    the measured batches; what went wrong instead, where it did not run."""
    out: dict[str, Any] = {"variant": variant}
    if variant not in children:
        return {**out, "error": "its engine did not start"}
    try:
        reply = children[variant].request({"op": "control"}, timeout_s)
    except paired.ChildError as exc:
        return {**out, "error": str(exc)}
    print(f"paired: control phase on {variant}: {json.dumps(control_phase.checks(reply))}", flush=True)
    return {**out, **reply}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", default="base_v2,off_v2,on,plain", help="comma-separated (listed above)")
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--profile", default="1,16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-s", type=float, default=1.0)
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--variant-s", type=float, default=100.0, help="expected seconds per variant")
    ap.add_argument("--prof-root", default="/tmp/ab-prof", help="profile folders (each emptied before use)")
    ap.add_argument(
        "--paired",
        action="store_true",
        help="start every variant's engine at once and rotate the batches across them (the first variant is"
        " the reference of the ratios); no profiles",
    )
    ap.add_argument(
        "--trace-dir",
        help="write each specpolicy variant's step trace to DIR/trace-<variant>.jsonl (which depth ran at"
        " which batch size, and each step's time)",
    )
    ap.add_argument(
        "--trace-variants",
        help="with --trace-dir: only these variants (comma-separated) write a trace; a trace costs its engine"
        " 1-3%%, so leave out those whose ratios count",
    )
    ap.add_argument(
        "--host-timers-dir",
        help="time the scheduler process's engine methods in every variant (specpolicy_gpucheck.host_timers,"
        " DIR/timers-<variant>.jsonl) and give each paired batch its host time per method",
    )
    ap.add_argument(
        "--engine-log-level",
        choices=["debug", "info", "warning", "error"],
        help="the engines' log level for every variant (info shows SGLang's batch lines: requests running,"
        " queued, KV use)",
    )
    ap.add_argument(
        "--pin-cpus",
        action="store_true",
        help="with --paired: pin each engine's processes to its own CPUs (the host's cut into disjoint sets),"
        " so that one engine's host work never shares a core with another's",
    )
    ap.add_argument(
        "--control-variant",
        metavar="VARIANT",
        help="with --paired: after the measured batches, on this variant's engine (one of the listed, running"
        " specpolicy's static; it alone starts with a control file), serve a batch whose requests carry"
        " per-request hints (off, max_depth=1, none), swap the policy to static-0 through the control file"
        " and back, each batch checked against the oracle (ab-paired.json's 'control'; about 10 s)",
    )
    ap.add_argument("--cpus", help=argparse.SUPPRESS)
    ap.add_argument("--batch-timeout-s", type=float, default=120.0, help=argparse.SUPPRESS)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--cmd-fd", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--reply-fd", type=int, help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    args.argv = argv
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.serve:
        return serve_variant(args, args.serve)
    if args.pin_cpus and not args.paired:
        print("--pin-cpus needs --paired (engines side by side)", file=sys.stderr)
        return 2
    if args.control_variant and not args.paired:
        print("--control-variant needs --paired (it runs on a serving engine)", file=sys.stderr)
        return 2
    if args.paired:
        variants = args.variants.split(",")
        unknown = [v for v in variants if v not in VARIANTS]
        variants = runnable(variants)
        if unknown or len(variants) < 2:
            print(f"--paired needs two or more known variants; unknown: {unknown}", file=sys.stderr)
            return 2
        if args.control_variant and (
            args.control_variant not in variants
            or not control_phase.eligible(VARIANTS[args.control_variant][1], STATIC)
        ):
            print(
                f"--control-variant {args.control_variant}: must be one of --variants running specpolicy's"
                f" static (e.g. static_draft_ov)",
                file=sys.stderr,
            )
            return 2
        pins = None
        if args.pin_cpus:
            try:
                pins = paired.cpu_sets(len(variants), sorted(os.sched_getaffinity(0)))
            except ValueError as exc:
                print(f"--pin-cpus: {exc}", file=sys.stderr)
                return 2
        res = run_paired(args, variants, pins)
        print(json.dumps({k: res[k] for k in ("median_tok_s", "ratio_to_first", "lossless")}), flush=True)
        return 0
    if args.one:
        res = run_variant(args, args.one)
        (Path(args.out) / f"ab-{args.one}.json").write_text(json.dumps(res, indent=1))
        print(json.dumps({k: res[k] for k in ("variant", "engine_up_s", "median_tok_s")}), flush=True)
        return 0
    deadline = time.time() + args.budget_s
    for v in args.variants.split(","):
        if v not in VARIANTS:
            print(f"unknown variant {v!r}; known: {', '.join(VARIANTS)}", file=sys.stderr)
            return 2
    for v in runnable(args.variants.split(",")):
        if time.time() + args.variant_s > deadline:
            print(f"skipped {v}: budget", flush=True)
            continue
        left = max(30.0, deadline - time.time())
        cmd = module_command("ab_static", "--one", v, *argv)
        proc = subprocess.Popen(cmd, start_new_session=True, env=child_env())
        try:
            rc = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the engine's scheduler processes too
            rc = 124
        print(f"variant {v}: rc={rc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
