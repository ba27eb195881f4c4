#!/usr/bin/env python3
"""Live check of the vLLM adapter inside real vLLM 0.26.0 engines on one GPU (issue 13), and its report.

Engines (one offline ``vllm.LLM`` each, all alive at once in their own processes, ``paired.Child``):

- ``never``: no speculation (the speculation-free baseline);
- ``vllm-k``: vLLM's own speculation, the draft model at a fixed K (``num_speculative_tokens`` = 3);
- ``vllm-table``: vLLM's own ``num_speculative_tokens_per_batch_size`` table (its documented EAGLE-3
  example, clamped to K as the simulator's ``vllm-eagle3`` comparator does), no specpolicy;
- ``sp``: the same draft model with specpolicy's scheduler class (``specpolicy vllm-args``: the scheduler,
  a covering schedule, the ``additional_config`` section) running the test dispatcher
  (``gpucheck_dispatch``), so one engine serves every specpolicy label: the checks ``always-on``,
  ``always-off``, ``switch`` (on/off every 3 steps), ``raise`` (decide() raises on calls 5-24), and the
  perf labels ``static``, ``static-0``, ``cost_model`` (each batch starts its policy fresh).

Target and draft are the bigram models of ``bigram_model.py`` (``specpolicy-livecheck build-models``):
greedy output is a known chain, so every request of every batch is checked against the oracle. Every
engine runs bf16, triton attention (target and draft), the V1 model runner, sync scheduling (vLLM's
default for the draft-model method), stats logging on (the per-step spec-decode stats are read from
vLLM's own ``SchedulerStats.spec_decoding_stats`` through a stat logger added to the engine's
``StatLoggerManager``), the same KV pool size (``kv_cache_memory_bytes``), CUDA graphs and torch.compile
as vLLM defaults them.

Order: start all engines at once; warm every batch size of every label; the checks (in ``sp``, and the
``always-on`` batch in ``never`` and ``vllm-k`` as controls); the perf sweep, interleaved
(``plan.interleave``: repeat r runs every level and label before r+1, the label order rotating);
profiles of ``static-0``, ``never`` and ``static`` at ``--profile`` concurrencies (vLLM's torch profiler
over 40 steps: where the off step's time goes, whether the drafter still runs at K=0); then
``--doctor-smoke`` if the budget allows. Results go to ``OUT/vllm-check.json`` (written after each stage)
and ``OUT/report-vllm.json`` (the report's shape: ``perf`` keyed by path, policy -> concurrency -> median
tok/s, ``perf_spread``, ...). Usage on the GPU host (bundle installed by ``vllm-probe``)::

    PYTHONPATH=/tmp/vsite:tools/livecheck/src python3 -m specpolicy_livecheck vllm \
        --work /tmp/gc --out $OUT --budget-s 560

``--dry-run`` prints the plan with estimated seconds, on any machine. ``doctor --work W --out O`` runs
``specpolicy doctor --engine vllm --smoke`` on the test models (four engines in turn: a call of its own).
``report RAW.json --report FILE [--doctor doctor-vllm.json]`` rebuilds the report from a run's raw results
(any machine).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specpolicy_livecheck import paired, vllm_bundle
from specpolicy_livecheck import plan as planmod
from specpolicy_livecheck._proc import child_env, module_command

#: The draft model's depth on every speculative engine (SGLang's check launched at 3 as well).
K = planmod.LAUNCH_DEPTH
#: The report key of these engines: V1 model runner, triton attention (``"<path>/<backend>"``).
PATH_KEY = "mrv1/triton"
MAX_NUM_SEQS = 128
#: One KV pool per engine, the same size everywhere: ~60k tokens of target and draft (~104 KiB a token),
#: where the largest batch needs 128 x (128 + 200) = 42k.
KV_CACHE_BYTES = 6 << 30
#: gpu_memory_utilization only gates start-up here (free memory >= this share), the KV pool is fixed: four
#: engines of ~15 GiB (5.2 GB target, 0.4 GB draft, the pool, graphs and activations) share one card.
GPU_MEMORY_UTILIZATION = 0.2
MAX_MODEL_LEN = 2048
ENGINE_NAMES: tuple[str, ...] = ("never", "vllm-k", "vllm-table", "sp")
#: Controls run on request: the speculation-free and fixed-K engines held to the piecewise CUDA graphs that
#: vLLM 0.26.0's V1 runner falls back to whenever the verify length may change per step (``sp``, the table).
PIECEWISE_ENGINES: tuple[str, ...] = ("never-pw", "vllm-k-pw")
SP_CHECKS: tuple[str, ...] = ("always-on", "always-off", "switch", "raise")
#: perf label -> (engine, dispatcher label in that engine or None)
PERF_LABELS: dict[str, tuple[str, str | None]] = {
    "never": ("never", None),
    "never-pw": ("never-pw", None),
    "vllm-static": ("vllm-k", None),
    "vllm-static-pw": ("vllm-k-pw", None),
    "vllm-table": ("vllm-table", None),
    "static": ("sp", "static"),
    "static-0": ("sp", "static-0"),
    "cost_model": ("sp", "cost_model"),
    "cost_model-kept": ("sp", "cost_model-kept"),
    "hysteresis": ("sp", "hysteresis"),
}
DEFAULT_PERF: tuple[str, ...] = ("never", "vllm-static", "vllm-table", "static", "static-0", "cost_model")
#: Labels whose step time the plan estimates with the SGLang reference rates (plan.REF_TOK_S) until vLLM
#: rates exist: a guess, on the slow side for the speculative ones.
REF_LABEL = {"never": "never", "vllm-static": "static", "vllm-table": "static", "static-0": "static-0"}
#: Estimates (seconds). Start: four engines at once on a fresh H100 host (imports, weights, torch.compile of
#: target and draft, CUDA graphs) were all up 67-69 s after the command began (2026-12-06), 90 with margin.
#: The doctor took 292 s there. Shutdown, profile and batch times are guesses on the slow side.
START_S, SHUTDOWN_S, PROFILE_S, WARMUP_BATCH_S, CHECK_BATCH_S = 90.0, 20.0, 15.0, 0.4, 2.0
DOCTOR_S = 420.0
PROFILE_LABELS: tuple[str, ...] = ("static-0", "never", "static")
#: The model facts the report carries (from models/meta.json).
MODEL_KEYS = ("target", "draft", "target_params", "draft_params", "agree", "chain_vocab")
#: vLLM's torch profiler: skip 8 steps of the batch, record 40.
PROFILE_DELAY, PROFILE_STEPS = 8, 40


def vllm_table(k: int = K, max_num_seqs: int = MAX_NUM_SEQS) -> list[list[int]]:
    """vLLM's documented EAGLE-3 example table, depths clamped to ``k`` and ranges cut at ``max_num_seqs``
    (the simulator's ``vllm-eagle3`` comparator)."""
    from specpolicy.sim.comparators import VLLM_EAGLE3_TABLE

    out = []
    for lo, hi, d in VLLM_EAGLE3_TABLE:
        if lo > max_num_seqs:
            break
        out.append([lo, min(hi, max_num_seqs), min(d, k)])
    return out


def sp_policies(perf: Sequence[str]) -> dict[str, Any]:
    """The dispatcher's labels in the ``sp`` engine: the checks, then the perf labels it serves."""
    perf_specs = planmod.perf_policies(K)
    out: dict[str, Any] = dict(planmod.check_policies(K))
    for label in perf:
        engine, dispatch = PERF_LABELS[label]
        if engine == "sp" and dispatch is not None:
            out[dispatch] = perf_specs[dispatch]
    return out


@dataclass(frozen=True)
class Options:
    work: str = "/tmp/gc"
    out: str = "/tmp/vllm-check-out"
    engines: tuple[str, ...] = ENGINE_NAMES
    perf: tuple[str, ...] = DEFAULT_PERF
    concurrency: tuple[int, ...] = planmod.SITTING_CONCURRENCY
    repeats: int = 3
    min_batch_s: float = 1.0
    check_concurrency: int = 32
    profile: tuple[int, ...] = (64,)
    budget_s: float = 560.0
    eager: bool = False
    doctor_smoke: bool = False


def engine_kwargs(engine: str, models: Path, opts: Options, control: str = "", log: str = "",
                  trace: str = "") -> dict[str, Any]:  # fmt: skip
    """``vllm.LLM(**kw)`` for one engine. ``control``/``log``/``trace``: the ``sp`` dispatcher's control
    file, switch log and the adapter's step trace."""
    from specpolicy.adapters.vllm.args import build_vllm_args

    kw: dict[str, Any] = {
        "model": str(models / "target"),
        "skip_tokenizer_init": True,
        "dtype": "bfloat16",
        "seed": 0,
        "max_model_len": MAX_MODEL_LEN,
        "max_num_seqs": MAX_NUM_SEQS,
        "gpu_memory_utilization": GPU_MEMORY_UTILIZATION,
        "kv_cache_memory_bytes": KV_CACHE_BYTES,
        "attention_config": {"backend": "TRITON_ATTN"},
        "async_scheduling": False,
        "disable_log_stats": False,
        "enforce_eager": opts.eager,
        "profiler_config": {
            "profiler": "torch",
            # under the work folder: the traces are tens of MB, the summaries go to the results
            "torch_profiler_dir": str(Path(opts.work).resolve() / "profiles" / engine),
            "torch_profiler_with_stack": False,
            "delay_iterations": PROFILE_DELAY,
            "max_iterations": PROFILE_STEPS,
        },
    }
    if engine in PIECEWISE_ENGINES:
        kw["compilation_config"] = {"cudagraph_mode": "PIECEWISE"}
        engine = engine.removesuffix("-pw")
    if engine == "never":
        return kw
    spec: dict[str, Any] = {
        "method": "draft_model",
        "model": str(models / "draft"),
        "num_speculative_tokens": K,
        "attention_backend": "TRITON_ATTN",
    }
    if engine == "vllm-table":
        spec["num_speculative_tokens_per_batch_size"] = vllm_table()
    if engine != "sp":
        return {**kw, "speculative_config": spec}
    policies = sp_policies(opts.perf)
    dispatch = planmod.dispatch_config(policies, control or "/tmp/vllm-control-sp.txt",
                                       log or "/tmp/vllm-dispatch-sp.jsonl", "always-on")  # fmt: skip
    settings: dict[str, Any] = {"metrics": False}
    if trace:
        settings.update(trace_path=trace, trace_max_bytes=1 << 30)
    args = build_vllm_args(dispatch, K, max_num_seqs=MAX_NUM_SEQS, speculative_config=spec, settings=settings)
    return {**kw, **args.as_kwargs()}


# ----------------------------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class Batch:
    """One request batch for one label: ``lengths`` output tokens per request (equal for perf)."""

    kind: str  # warmup | check | perf | profile
    label: str  # a PERF_LABELS key, or an sp check label (engine "sp"), or "<engine>:always-on"
    engine: str
    dispatch: str | None
    c: int
    lengths: tuple[int, ...]
    seed: int
    repeat: int = 0
    min_s: float = 0.0
    est_s: float = 0.0
    steps: bool = False  # reply with the per-step spec-decode stats


def _rate(label: str, c: int) -> float:
    return planmod.ref_rate("v2", REF_LABEL.get(label, label), c)


def _est(label: str, c: int, tokens: int, min_s: float) -> float:
    one = c * tokens / _rate(label, c) + planmod.BATCH_OVERHEAD_S
    return one * max(1, math.ceil(min_s / one))


def check_lengths(c: int) -> tuple[int, ...]:
    """Output lengths of a check batch (24-96, the SGLang check's): requests finish on different steps."""
    return tuple(planmod._check_lengths(c, seed=11))


def build_plan(opts: Options) -> list[Batch]:
    """Every batch in run order: warm-ups, checks, the interleaved perf sweep, the profiles."""
    labels = [p for p in opts.perf if PERF_LABELS[p][0] in opts.engines]
    out: list[Batch] = []
    for c in sorted({*opts.concurrency, opts.check_concurrency}):
        for label in labels:
            engine, dispatch = PERF_LABELS[label]
            out.append(Batch("warmup", label, engine, dispatch, c, (8,) * c, 100 + c, est_s=WARMUP_BATCH_S))
    lengths = check_lengths(opts.check_concurrency)
    if "sp" in opts.engines:
        for label in SP_CHECKS:
            out.append(Batch("check", label, "sp", label, opts.check_concurrency, lengths, 11,
                             est_s=CHECK_BATCH_S, steps=True))  # fmt: skip
    for engine in ("never", "vllm-k", "vllm-table"):
        if engine in opts.engines:
            label = f"{engine}:{'no-spec' if engine == 'never' else 'always-on'}"
            out.append(Batch("check", label, engine, None, opts.check_concurrency, lengths, 11,
                             est_s=CHECK_BATCH_S, steps=True))  # fmt: skip
    for r, c, label in planmod.interleave(labels, opts.repeats, opts.concurrency):
        n = planmod.perf_tokens_for(c, "v2", opts.min_batch_s)
        engine, dispatch = PERF_LABELS[label]
        out.append(Batch("perf", label, engine, dispatch, c, (n,) * c, 100 * r + c, r, opts.min_batch_s,
                         round(_est(label, c, n, opts.min_batch_s), 3)))  # fmt: skip
    for c in opts.profile:
        for label in PROFILE_LABELS:
            if label in labels:
                engine, dispatch = PERF_LABELS[label]
                n = (PROFILE_DELAY + PROFILE_STEPS) * (K + 1) + 16  # enough steps at depth K too
                out.append(Batch("profile", label, engine, dispatch, c, (n,) * c, 999, est_s=PROFILE_S))
    return out


def estimate(opts: Options, batches: Sequence[Batch]) -> dict[str, float]:
    est = {"start": START_S, "warmup": 0.0, "check": 0.0, "perf": 0.0, "profile": 0.0, "shutdown": SHUTDOWN_S}
    for b in batches:
        est[b.kind] += b.est_s
    if opts.doctor_smoke:
        est["doctor"] = DOCTOR_S
    est["total"] = sum(est.values())
    return {k: round(v, 1) for k, v in est.items()}


def format_plan(opts: Options, batches: Sequence[Batch]) -> str:
    est = estimate(opts, batches)
    by_kind = Counter(b.kind for b in batches)
    perf = [b for b in batches if b.kind == "perf"]
    tokens = sorted({(b.c, b.lengths[0]) for b in perf})
    lines = [
        f"vllm_check plan: engines {', '.join(opts.engines)} ({PATH_KEY}, K={K}), "
        f"budget {opts.budget_s:.0f} s",
        f"  start   all engines at once                       ~{est['start']:6.0f} s",
        f"  warmup  {by_kind['warmup']:4d} batches                              ~{est['warmup']:6.1f} s",
        f"  check   {by_kind['check']:4d} batches ({', '.join(SP_CHECKS)} in sp; controls)"
        f"  ~{est['check']:6.1f} s",
        f"  perf    {by_kind['perf']:4d} batches, {opts.repeats} repeats of {len(opts.concurrency)} levels x "
        f"{len({b.label for b in perf})} labels ~{est['perf']:6.1f} s",
        f"          labels: {', '.join(dict.fromkeys(b.label for b in perf))}",
        "          tokens per request by level: " + ", ".join(f"{c}:{n}" for c, n in tokens),
        f"  profile {by_kind['profile']:4d} batches (vLLM torch profiler, {PROFILE_STEPS} steps)"
        f"   ~{est['profile']:6.1f} s",
        f"  shutdown                                          ~{est['shutdown']:6.0f} s",
    ]  # fmt: skip
    if opts.doctor_smoke:
        lines.append(f"  doctor  specpolicy doctor --engine vllm --smoke     ~{est['doctor']:6.0f} s")
    over = est["total"] - opts.budget_s
    lines.append(f"total ~{est['total']:.0f} s of {opts.budget_s:.0f} s"
                 + (f": {over:.0f} s over, the perf sweep stops at the deadline (whole repeats first)"
                    if over > 0 else ""))  # fmt: skip
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- verdicts
def depths(steps: Sequence[Sequence[int]]) -> list[float]:
    """Depth verified in each step: draft tokens over drafts (0 for a step with no drafts)."""
    return [(s[1] / s[0]) if s[0] else 0.0 for s in steps]


def verdict_always_on(steps: Sequence[Sequence[int]], k: int = K) -> dict[str, Any]:
    """Every request with drafts gets exactly K of them; at most the first and last steps draft nothing."""
    d = depths(steps)
    drafting = [x for x in d if x > 0]
    exact = sum(1 for x in drafting if x == k)
    idle = sum(1 for x in d[1:-1] if x == 0)
    return {"steps": len(d), "drafting": len(drafting), "at_k": exact, "idle_mid": idle,
            "ok": bool(drafting) and exact == len(drafting) and idle == 0}  # fmt: skip


def verdict_always_off(steps: Sequence[Sequence[int]]) -> dict[str, Any]:
    drafted = sum(s[1] for s in steps)
    return {"steps": len(steps), "draft_tokens": drafted, "ok": bool(steps) and drafted == 0}


def runs(values: Sequence[float]) -> list[tuple[float, int]]:
    """(value, run length) of consecutive equal values."""
    out: list[tuple[float, int]] = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1] = (v, out[-1][1] + 1)
        else:
            out.append((v, 1))
    return out


def verdict_switch(steps: Sequence[Sequence[int]], k: int = K, period: int = 3) -> dict[str, Any]:
    """``gpucheck_cycle`` [K, 0] every ``period`` steps: the verified depths are K and 0 only, in runs of
    ``period`` (a run at the ends, or where prefill steps sample nothing, may be shorter)."""
    d = depths(steps)
    inner = runs(d)[1:-1]
    seen = sorted({x for x in d})
    return {
        "steps": len(d),
        "depths_seen": seen,
        "runs": len(inner) + 2 if len(d) > 1 else len(d),
        "inner_runs_of_period": sum(1 for _, n in inner if n == period),
        "inner_runs": len(inner),
        "ok": set(seen) <= {0.0, float(k)} and {0.0, float(k)} <= set(seen)
        and all(n <= period for _, n in inner) and len(inner) >= max(1, len(d) // period - 4),
    }  # fmt: skip


def verdict_raise(steps: Sequence[Sequence[int]], trace: dict[str, Any] | None, error_logs: int | None,
                  k: int = K, raise_count: int = 20) -> dict[str, Any]:  # fmt: skip
    """``gpucheck_raise``: off except decide() calls 5..24, which raise; those steps run the default depth
    K (vLLM's stats: ``raise_count`` steps verify K drafts, the rest none), the adapter's trace marks them
    ``fallback`` at depth K, and the error is logged once."""
    d = depths(steps)
    at_k = sum(1 for x in d if x == k)
    other = sorted({x for x in d if x not in (0.0, float(k))})
    out: dict[str, Any] = {"steps": len(d), "steps_at_k": at_k, "other_depths": other}
    if trace is not None:
        out["trace_fallbacks"] = trace.get("fallbacks")
        out["trace_fallback_depths"] = trace.get("fallback_depths")
    out["policy_error_logs"] = error_logs
    out["ok"] = (
        abs(at_k - raise_count) <= 1
        and not other
        and (trace is None or (trace.get("fallbacks") == raise_count and trace.get("fallback_depths") == [k]))
        and (error_logs is None or error_logs == 1)
    )
    return out


# ----------------------------------------------------------------------------------------------- report
def build_report(raw: dict[str, Any], device: str | None = None) -> dict[str, Any]:
    """The report (``results/2026-12-06-vllm-0.26.0-v1-runner/report-vllm.json``) from a run's raw results:
    ``perf`` keyed by path, label -> concurrency -> median tok/s, ``perf_spread`` the min-max,
    ``perf_samples``, ``off_ratio`` (static-0 / never per level, medians), ``ratios`` (per repeat, batch next
    to batch: static-0 to never; cost_model to the better of never and vllm-static; static to vllm-static),
    ``checks`` with their verdicts, ``lossless``, ``depth_by_label`` (mean verified depth per level from
    vLLM's stats),
    ``profiles``, ``doctor``, ``engines``, ``ok``."""
    batches: dict[str, dict[str, list[dict[str, Any]]]] = raw.get("perf", {})
    perf: dict[str, dict[str, float | None]] = {}
    spread: dict[str, dict[str, list[float]]] = {}
    samples: dict[str, dict[str, list[float]]] = {}
    depth: dict[str, dict[str, float | None]] = {}
    for label, by_c in batches.items():
        perf[label] = {c: paired.median(rows) for c, rows in by_c.items()}
        vals = {c: sorted(b["tok_s"] for b in rows if b.get("tok_s")) for c, rows in by_c.items()}
        spread[label] = {c: [v[0], v[-1]] for c, v in vals.items() if v}
        samples[label] = vals
        depth[label] = {
            c: (
                round(sum(b.get("draft_tokens", 0) for b in rows) / d, 3)
                if (d := sum(b.get("drafts", 0) for b in rows))
                else 0.0
            )  # fmt: skip
            for c, rows in by_c.items()
        }
    off_ratio = {
        c: round(perf["static-0"][c] / n, 4)  # type: ignore[operator]
        for c, n in perf.get("never", {}).items()
        if n and perf.get("static-0", {}).get(c)
    }
    ratios: dict[str, Any] = {}
    if "static-0" in batches and "never" in batches:
        ratios["static-0/never"] = paired.ratios(batches, "static-0", "never")
    fixed = [v for v in ("never", "vllm-static") if v in batches]
    for label in ("cost_model", "cost_model-kept", "hysteresis", "static", "vllm-table"):
        if label in batches and fixed:
            ratios[f"{label}/max(never,vllm-static)"] = paired.ratios(batches, label, fixed)
    if "static" in batches and "vllm-static" in batches:
        ratios["static/vllm-static"] = paired.ratios(batches, "static", "vllm-static")
    # The piecewise controls split the cost of "off": the graph mode vLLM forces (never-pw / never) and
    # what is left with the same graphs (static-0 / never-pw); likewise for the speculative step.
    for num, den in (("never-pw", "never"), ("static-0", "never-pw"), ("static", "vllm-static-pw")):
        if num in batches and den in batches:
            ratios[f"{num}/{den}"] = paired.ratios(batches, num, den)
    lossless = {label: paired.lossless_total(by_c) for label, by_c in batches.items()}
    checks = raw.get("checks", {})
    check_ok = [v.get("verdict", {}).get("ok") for v in checks.values() if "verdict" in v]
    all_lossless = all(v["requests"] == v["lossless"] and not v["errors"] for v in lossless.values()) and all(
        c.get("requests") == c.get("lossless") for c in checks.values() if "requests" in c
    )
    return {
        "engine": raw.get("engine", "vllm 0.26.0"),
        "device": device or raw.get("device"),
        "path": PATH_KEY,
        "model": raw.get("model"),
        "engines": raw.get("engines", {}),
        "perf": {PATH_KEY: perf},
        "perf_spread": {PATH_KEY: spread},
        "perf_samples": {PATH_KEY: samples},
        "off_ratio": {PATH_KEY: off_ratio},
        "ratios": {PATH_KEY: ratios},
        "depth_by_label": {PATH_KEY: depth},
        "checks": checks,
        "lossless": lossless,
        "profiles": raw.get("profiles", {}),
        "doctor": raw.get("doctor"),
        "skipped": raw.get("skipped", []),
        "ok": bool(batches) and all_lossless and bool(check_ok) and all(x is True for x in check_ok),
    }


# ----------------------------------------------------------------------------------------------- engine side
class SpecStatsLogger:
    """A stat logger added to the engine's ``StatLoggerManager``: vLLM calls ``record`` once per engine
    step with that step's ``SchedulerStats``; ``spec_decoding_stats`` (None when nothing was verified) says
    how many requests verified drafts, how many draft tokens were scheduled and how many were accepted."""

    def __init__(self) -> None:
        self.steps: list[list[int]] = []

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0) -> None:  # fmt: skip
        if scheduler_stats is None:
            return
        s = scheduler_stats.spec_decoding_stats
        self.steps.append(
            [0, 0, 0] if s is None else [s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens]
        )

    def take(self) -> list[list[int]]:
        out, self.steps = self.steps, []
        return out

    def log(self) -> None:
        pass

    def log_engine_initialized(self) -> None:
        pass

    def record_sleep_state(self, is_awake: int, level: int) -> None:
        pass


def _generate(llm: Any, prompts: list[list[int]], lengths: Sequence[int]) -> tuple[list[list[int]], float]:
    from vllm import SamplingParams

    params = [
        SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, detokenize=False) for n in lengths
    ]
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs], time.perf_counter() - t0


def serve_batch(llm: Any, rec: SpecStatsLogger, cmd: dict[str, Any], vocab: int, pi: Any) -> dict[str, Any]:
    """One batch, repeated until ``min_s`` or exactly ``passes`` times (``paired.more_passes``); tokens/s
    over the whole, vLLM's spec-decode stats summed (and per step when asked), every request against the
    oracle (outside the timed span)."""
    from specpolicy_livecheck import ab_static

    c, lengths = int(cmd["c"]), [int(n) for n in cmd["lengths"]]
    prompts = ab_static._prompts(c, vocab, int(cmd["seed"]))
    rec.take()
    wall0, t0 = time.time(), time.perf_counter()
    tokens = passes = 0
    fixed = None if cmd.get("passes") is None else int(cmd["passes"])
    outputs: list[list[list[int]]] = []
    while paired.more_passes(passes, fixed, t0, float(cmd.get("min_s", 0.0))):
        got, _ = _generate(llm, prompts, lengths)
        passes += 1
        tokens += sum(map(len, got))
        outputs.append(got)
    wall = time.perf_counter() - t0
    steps = rec.take()
    drafts, draft_tokens, accepted = (sum(s[i] for s in steps) for i in range(3))
    res: dict[str, Any] = {
        "tok_s": round(tokens / wall, 1),
        "wall_s": round(wall, 3),
        "passes": passes,
        "t0": round(wall0, 4),
        "t1": round(wall0 + wall, 4),
        "engine_steps": len(steps),
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted": accepted,
        "accept_len": round(1 + accepted / drafts, 3) if drafts else None,
        "depth_hist": dict(Counter(str(round(d, 2)) for d in depths(steps))),
    }
    if cmd.get("steps"):
        res["step_stats"] = steps
    from specpolicy_livecheck.bigram_model import lossless_count

    n = ok = 0
    for got in outputs:
        a, b = lossless_count(got, prompts, lengths, pi)
        n, ok = n + a, ok + b
    res["requests"], res["lossless"] = n, ok
    return res


def profile_batch(
    llm: Any, rec: SpecStatsLogger, cmd: dict[str, Any], vocab: int, pi: Any, folder: Path
) -> dict[str, Any]:
    """vLLM's torch profiler over ``PROFILE_STEPS`` steps of one batch (after ``PROFILE_DELAY``), summarised
    like ab_static's profiles: GPU-busy time, kernels, CUDA runtime calls, host ops, and per step."""
    from specpolicy_livecheck import ab_static

    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} if folder.exists() else {}
    llm.start_profile()
    res = serve_batch(llm, rec, {**cmd, "min_s": 0.0}, vocab, pi)
    try:
        llm.stop_profile()
    except Exception as exc:  # noqa: BLE001  (stopped by max_iterations already)
        res["stop"] = repr(exc)[:200]
    trace = _new_trace(folder, before)
    res["trace"] = str(trace) if trace else None
    summary: dict[str, Any] = ab_static.summarize(str(trace)) if trace else {"error": "no trace written"}
    if "kernels" in summary:
        marked = sum(
            1 for name, _ in summary.get("cpu_op_calls", []) if str(name).startswith("ProfilerStep#")
        )
        steps = marked or max(1, min(PROFILE_STEPS, int(res.get("engine_steps", 0)) - PROFILE_DELAY))
        summary["steps"] = steps
        summary["steps_from"] = "trace" if marked else "engine stats"
        summary["kernels_per_step"] = round(summary["kernels"] / steps, 1)
        summary["gpu_busy_ms_per_step"] = round(summary["gpu_busy_ms"] / steps, 3)
        summary["window_ms_per_step"] = round(summary["window_ms"] / steps, 3)
    res["summary"] = summary
    return res


def _new_trace(folder: Path, before: dict[Path, int], timeout_s: float = 30.0) -> Path | None:
    """The trace file the profiler wrote (or rewrote) after ``before`` (path -> mtime) was listed, once its
    size stops changing."""
    deadline = time.time() + timeout_s
    last: tuple[Path, int] | None = None
    while time.time() < deadline:
        new = [p for p in folder.rglob("*.json*") if p.is_file() and before.get(p) != p.stat().st_mtime_ns]
        if new:
            newest = max(new, key=lambda p: p.stat().st_mtime_ns)
            size = newest.stat().st_size
            if last == (newest, size) and size > 0:
                return newest
            last = (newest, size)
        time.sleep(1.0)
    return last[0] if last else None


def serve_engine(args: argparse.Namespace) -> int:
    """``--serve ENGINE``: start the engine, say so, then answer the coordinator's commands."""
    out = Path(args.out)
    log = open(out / f"engine-{args.serve}.log", "ab", buffering=0)  # noqa: SIM115  (the process's lifetime)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    commands = os.fdopen(args.cmd_fd, "r")
    replies = os.fdopen(args.reply_fd, "w")

    def reply(obj: dict[str, Any]) -> None:
        replies.write(json.dumps(obj) + "\n")
        replies.flush()

    opts = options_from(args)
    try:
        import numpy as np
        from vllm import LLM

        models = Path(args.work) / "models"
        meta = json.loads((models / "meta.json").read_text())
        vocab, pi = int(meta["chain_vocab"]), np.asarray(meta["pi"])
        kw = engine_kwargs(args.serve, models, opts, str(control_path(out)), str(out / "dispatch-sp.jsonl"),
                           str(out / "trace-sp.jsonl"))  # fmt: skip
        t0 = time.time()
        llm = LLM(**kw)
        up = round(time.time() - t0, 1)
        rec = SpecStatsLogger()
        manager = llm.llm_engine.logger_manager
        if manager is None:
            raise RuntimeError("stats logging is off: no StatLoggerManager to read spec-decode stats from")
        manager.stat_loggers.append(rec)
        select = None
        if args.serve == "sp":
            from specpolicy_livecheck import ab_static

            select = ab_static.Switch(control_path(out))
        vc = llm.llm_engine.vllm_config
        info = {
            "engine": args.serve,
            "engine_up_s": up,
            "kwargs": {k: v for k, v in kw.items() if k != "profiler_config"},
            "scheduler_cls": str(vc.scheduler_config.scheduler_cls),
            "async_scheduling": vc.scheduler_config.async_scheduling,
            "use_v2_model_runner": vc.use_v2_model_runner,
            "cudagraph_mode": str(vc.compilation_config.cudagraph_mode),
        }
    except BaseException as exc:  # noqa: BLE001  (answered, then exit)
        reply({"ready": False, "error": repr(exc)[:1000]})
        raise
    reply({"ready": True, **info})
    for line in commands:
        try:
            cmd = json.loads(line)
            if cmd.get("op") == "quit":
                reply({"bye": True})
                break
            if cmd.get("dispatch"):
                if select is None:
                    raise ValueError(f"{args.serve} has no dispatcher")
                select(str(cmd["dispatch"]))
            if cmd.get("op") == "profile":
                res = profile_batch(
                    llm, rec, cmd, vocab, pi, Path(kw["profiler_config"]["torch_profiler_dir"])
                )
            elif cmd.get("op") == "batch":
                res = serve_batch(llm, rec, cmd, vocab, pi)
            else:
                raise ValueError(f"unknown op {cmd.get('op')!r}")
        except Exception as exc:  # noqa: BLE001  (answered: the coordinator records it and goes on)
            res = {"error": repr(exc)[:500]}
        reply(res)
    return 0


# ----------------------------------------------------------------------------------------------- coordinator
def control_path(out: Path) -> Path:
    return out / "control-sp.txt"


def options_from(args: argparse.Namespace) -> Options:
    def ints(text: str) -> tuple[int, ...]:
        return tuple(int(x) for x in text.split(",") if x)

    return Options(
        work=args.work,
        out=args.out,
        engines=tuple(e for e in args.engines.split(",") if e),
        perf=tuple(p for p in args.perf.split(",") if p),
        concurrency=ints(args.concurrency),
        repeats=args.repeats,
        min_batch_s=args.min_batch_s,
        check_concurrency=args.check_concurrency,
        profile=ints(args.profile),
        budget_s=args.budget_s,
        eager=args.eager,
        doctor_smoke=args.doctor_smoke,
    )


def _command(b: Batch) -> dict[str, Any]:
    return {"op": "profile" if b.kind == "profile" else "batch", "c": b.c, "lengths": list(b.lengths),
            "seed": b.seed, "min_s": b.min_s, "dispatch": b.dispatch, "steps": b.steps}  # fmt: skip


#: Added to a perf batch's seed for its calibration batch: prompts the measured batches do not share.
CALIBRATION_SEED = 7919

#: A device call brings back at most 8 files: the engines' logs, the step trace and the dispatcher's files
#: travel as one archive beside the results (the first sitting lost ``vllm-check.json`` to that limit).
SIDE_ARCHIVE = "side-files.tgz"
SIDE_PATTERNS: tuple[str, ...] = ("engine-*.log", "trace-*.jsonl", "dispatch-*.jsonl", "control-*.txt")


def pack_side_files(out: Path) -> list[str]:
    """Move the run's side files (``SIDE_PATTERNS``) of ``out`` into ``SIDE_ARCHIVE``; the names packed."""
    files = sorted({p for pat in SIDE_PATTERNS for p in out.glob(pat) if p.is_file()})
    if files:
        with tarfile.open(out / SIDE_ARCHIVE, "w:gz") as tar:
            for p in files:
                tar.add(p, arcname=p.name)
        for p in files:
            p.unlink()
    return [p.name for p in files]


def _write(out: Path, raw: dict[str, Any]) -> None:
    (out / "vllm-check.json").write_text(json.dumps(raw, indent=1))
    (out / "report-vllm.json").write_text(json.dumps(build_report(raw), indent=1))


def _check_verdict(label: str, res: dict[str, Any], out: Path) -> dict[str, Any]:
    steps = res.get("step_stats", [])
    if label.endswith("always-on"):
        return verdict_always_on(steps)
    if label == "always-off" or label.endswith(":no-spec"):
        return verdict_always_off(steps)
    if label == "switch":
        return verdict_switch(steps)
    if label == "raise":
        from specpolicy_livecheck import analysis

        trace = analysis.trace_summary(analysis.phase_trace(analysis.load_trace(out, "trace-sp.jsonl"),
                                                            res["t0"], res["t1"]))  # fmt: skip
        logs = out / "engine-sp.log"
        n = len(analysis.POLICY_ERROR_RE.findall(logs.read_text(errors="replace"))) if logs.exists() else None
        return verdict_raise(steps, trace, n)
    return {"ok": None}


def run_doctor(work: Path, out: Path, timeout_s: float) -> dict[str, Any]:
    """``specpolicy doctor --engine vllm --smoke`` on the test models (four short engines in turn)."""
    models = work / "models"
    cmd = [sys.executable, "-m", "specpolicy.cli", "doctor", "--engine", "vllm", "--smoke", "--json",
           "--model",
           str(models / "target"), "--draft", str(models / "draft"), "--algorithm", "draft_model",
           "--num-steps", str(K)]  # fmt: skip
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False,
                              env={**os.environ, **vllm_bundle.ENGINE_ENV})  # fmt: skip
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = -9
        stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    (out / "doctor-vllm.log").write_text(stderr)
    try:
        report: Any = json.loads(stdout)
    except json.JSONDecodeError:
        report = stdout[-4000:]
    return {"rc": rc, "s": round(time.time() - t0, 1), "cmd": cmd, "report": report}


def run_device(opts: Options, argv: Sequence[str]) -> int:
    t_start = time.time()
    t_end = t_start + opts.budget_s
    out, work = Path(opts.out), Path(opts.work)
    out.mkdir(parents=True, exist_ok=True)
    models = work / "models"
    if not (models / "meta.json").exists():
        print(
            f"VC no models in {models}: run specpolicy-livecheck build-models --work {work} first", flush=True
        )
        return 2
    meta = json.loads((models / "meta.json").read_text())
    plan = build_plan(opts)
    print(format_plan(opts, plan), flush=True)
    (out / SIDE_ARCHIVE).unlink(missing_ok=True)
    for f in (
        "trace-sp.jsonl",
        "dispatch-sp.jsonl",
        "control-sp.txt",
        *(f"engine-{e}.log" for e in (*ENGINE_NAMES, *PIECEWISE_ENGINES)),
    ):
        (out / f).unlink(missing_ok=True)  # an earlier command's lines on the same host
    env = child_env({**os.environ, **vllm_bundle.ENGINE_ENV, "PYTHONUNBUFFERED": "1"})
    base = module_command("vllm_check", *argv)
    children = {e: paired.Child(e, [*base, "--serve", e], env=env) for e in opts.engines}
    raw: dict[str, Any] = {
        "engine": "vllm 0.26.0",
        "options": asdict(opts),
        "model": {k: meta.get(k) for k in MODEL_KEYS},
        "engines": {},
        "checks": {},
        "perf": {},
        "profiles": {},
        "skipped": [],
    }  # fmt: skip
    try:
        import torch

        raw["device"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        raw["device"] = None
    for e, child in list(children.items()):
        try:
            raw["engines"][e] = child.recv(max(30.0, t_end - time.time() - 60))
        except paired.ChildError as exc:
            raw["engines"][e] = {"ready": False, "error": str(exc)}
        if not raw["engines"][e].get("ready"):
            print(f"VC engine {e} did not start: {raw['engines'][e].get('error')}", flush=True)
            child.close(10.0)
            del children[e]
        else:
            print(
                f"VC engine {e} up in {raw['engines'][e]['engine_up_s']} s at +{time.time() - t_start:.0f} s",
                flush=True,
            )
    _write(out, raw)
    by_label = {b.label: children.get(b.engine) for b in plan}
    live = {label: child for label, child in by_label.items() if child is not None}
    warm = [b for b in plan if b.kind == "warmup"]
    for b in warm:
        if b.label in live:
            try:
                live[b.label].request(_command(b), 120.0)
            except paired.ChildError as exc:
                print(f"VC warm-up {b.label} c={b.c}: {exc}", flush=True)
    print(f"VC warm-up done at +{time.time() - t_start:.0f} s", flush=True)
    for b in (b for b in plan if b.kind == "check"):
        engine_child = children.get(b.engine)
        if engine_child is None:
            continue
        try:
            res = engine_child.request(_command(b), 180.0)
        except paired.ChildError as exc:
            res = {"error": str(exc)}
        if "error" not in res:
            res["verdict"] = _check_verdict(b.label, res, out)
        raw["checks"][b.label] = res
        print(f"VC check {b.label}: lossless {res.get('lossless')}/{res.get('requests')}, "
              f"verdict {res.get('verdict', res.get('error'))}", flush=True)  # fmt: skip
    _write(out, raw)
    reserve = (
        SHUTDOWN_S
        + sum(b.est_s for b in plan if b.kind == "profile")
        + (DOCTOR_S if opts.doctor_smoke else 0)
    )
    perf = [b for b in plan if b.kind == "perf"]
    # one batch per engine and level first (other prompts): every measured batch of a level then makes the
    # most passes any engine needed, so that batch and batch compare like for like
    first = {(b.c, b.label): b for b in reversed(perf)}
    raw["calibration"] = paired.paired_batches(
        live,
        [(0, c, label) for (c, label) in sorted(first)],
        lambda r, c, v: {**_command(first[(c, v)]), "seed": first[(c, v)].seed + CALIBRATION_SEED},
        timeout_s=180.0,
        deadline=t_end - reserve,
        log=lambda s: print("VC calibration: " + s, flush=True),
    )
    raw["calibration"] = {k: v for k, v in raw["calibration"].items() if v}
    raw["passes"] = paired.fixed_passes(raw["calibration"])
    print(f"VC passes per level {raw['passes']}", flush=True)
    order = [(b.repeat, b.c, b.label) for b in perf]
    cmd_of = {(b.repeat, b.c, b.label): _command(b) for b in perf}
    for (_, c, _), cmd in cmd_of.items():
        if str(c) in raw["passes"]:
            cmd["passes"] = raw["passes"][str(c)]
    raw["perf"] = paired.paired_batches(
        live,
        order,
        lambda r, c, v: cmd_of[(r, c, v)],
        timeout_s=180.0,
        deadline=t_end - reserve,
        log=lambda s: print("VC " + s, flush=True),
    )
    raw["perf"] = {k: v for k, v in raw["perf"].items() if v}
    done = sum(len(rows) for by_c in raw["perf"].values() for rows in by_c.values())
    if done < len(perf):
        raw["skipped"].append(f"perf: {len(perf) - done} of {len(perf)} batches not run (deadline or errors)")
    print(f"VC perf: {done} of {len(perf)} batches at +{time.time() - t_start:.0f} s", flush=True)
    _write(out, raw)
    for b in (b for b in plan if b.kind == "profile"):
        if b.label in live and time.time() + b.est_s + SHUTDOWN_S < t_end:
            try:
                raw["profiles"][f"{b.label}:{b.c}"] = live[b.label].request(_command(b), 120.0)
            except paired.ChildError as exc:
                raw["profiles"][f"{b.label}:{b.c}"] = {"error": str(exc)}
    _write(out, raw)
    with ThreadPoolExecutor(max(1, len(children))) as pool:  # all at once: the call's time limit is near
        list(pool.map(lambda ch: ch.close(30.0), children.values()))
    # The adapter's trace is written off the hot path and complete only once its engine has shut down.
    if "raise" in raw["checks"] and "error" not in raw["checks"]["raise"]:
        raw["checks"]["raise"]["verdict"] = _check_verdict("raise", raw["checks"]["raise"], out)
    if opts.doctor_smoke:
        left = t_end - time.time()
        if left > 0.8 * DOCTOR_S:
            raw["doctor"] = run_doctor(work, out, left - 5)
        else:
            raw["skipped"].append(f"doctor --smoke: {left:.0f} s left")
    _write(out, raw)
    packed = pack_side_files(out)
    print(f"VC {len(packed)} side files in {out / SIDE_ARCHIVE}", flush=True)
    report = build_report(raw)
    print(json.dumps({k: report[k] for k in ("perf", "off_ratio", "ok")}), flush=True)
    print(f"VC done in {time.time() - t_start:.0f} s: ok={report['ok']}", flush=True)
    return 0 if report["ok"] else 1


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:
        dp = argparse.ArgumentParser(prog=f"{prog or 'vllm_check'} doctor", description=run_doctor.__doc__)
        dp.add_argument("--work", type=Path, default=Path("/tmp/gc"))
        dp.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/vllm-check-out")))
        dp.add_argument("--timeout-s", type=float, default=560.0)
        da = dp.parse_args(argv[1:])
        da.out.mkdir(parents=True, exist_ok=True)
        res = run_doctor(da.work, da.out, da.timeout_s)
        (da.out / "doctor-vllm.json").write_text(json.dumps(res, indent=1))
        print(json.dumps({k: res[k] for k in ("rc", "s")}), flush=True)
        return 0 if res["rc"] == 0 else 1
    if argv[:1] == ["report"]:
        rp = argparse.ArgumentParser(prog=f"{prog or 'vllm_check'} report")
        rp.add_argument("raw", type=Path)
        rp.add_argument("--report", type=Path, required=True)
        rp.add_argument("--device")
        rp.add_argument("--doctor", type=Path, help="doctor-vllm.json of a later call (vllm doctor)")
        ra = rp.parse_args(argv[1:])
        raw = json.loads(ra.raw.read_text())
        if ra.doctor:
            raw["doctor"] = json.loads(ra.doctor.read_text())
        ra.report.write_text(json.dumps(build_report(raw, ra.device), indent=1) + "\n")
        return 0
    ap = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--work", default="/tmp/gc", help="holds models/ (specpolicy-livecheck build-models)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/vllm-check-out"))
    ap.add_argument("--engines", default=",".join(ENGINE_NAMES))
    ap.add_argument("--perf", default=",".join(DEFAULT_PERF), help=f"among {', '.join(PERF_LABELS)}")
    ap.add_argument(
        "--concurrency",
        default=",".join(map(str, planmod.SITTING_CONCURRENCY)),
        help="levels (1,2,4,...,128 where the start leaves time)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-batch-s", type=float, default=1.0)
    ap.add_argument("--check-concurrency", type=int, default=32)
    ap.add_argument(
        "--profile", default="64", help="concurrencies profiled (static-0, never, static); empty: none"
    )
    ap.add_argument("--budget-s", type=float, default=560.0)
    ap.add_argument("--eager", action="store_true", help="enforce_eager (no torch.compile, no CUDA graphs)")
    ap.add_argument(
        "--doctor-smoke", action="store_true", help="then specpolicy doctor --engine vllm --smoke"
    )
    ap.add_argument("--dry-run", action="store_true", help="print the plan and its estimate, run nothing")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--cmd-fd", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--reply-fd", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    opts = options_from(args)
    unknown = [p for p in opts.perf if p not in PERF_LABELS] + [
        e for e in opts.engines if e not in (*ENGINE_NAMES, *PIECEWISE_ENGINES)
    ]
    if unknown:
        print(f"vllm_check: unknown labels or engines {unknown}", file=sys.stderr)
        return 2
    if args.serve:
        return serve_engine(args)
    if args.dry_run:
        print(format_plan(opts, build_plan(opts)))
        return 0
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    return run_device(opts, argv)


if __name__ == "__main__":
    sys.exit(main())
