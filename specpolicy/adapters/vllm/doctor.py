"""The vLLM part of ``specpolicy doctor``: is the adapter usable with the installed vLLM, and (on a GPU) does
it keep outputs identical while switching depths, at what speed.

``report()`` works with or without a GPU: installed version and whether it is supported, the plugin entry
point, every vLLM-internal name the adapter relies on (``contract.TARGETS``), the scheduler classes, the GPU.
``report(smoke=True, model=..., draft_model=...)`` also runs the smoke test, one fresh process per engine so
GPU memory is returned between runs: greedy generation of the same prompts by a speculation-free engine
(the reference), then by the specpolicy scheduler at a static depth, with speculation off (depth 0), and with
a ``schedule`` policy that switches depth as requests finish and the batch shrinks. Speculative decoding is
lossless, so every run must produce the reference's tokens; the static run shows the GPU's numeric noise
floor (different kernel shapes can flip a near-tie), and the other runs must do no worse. Tokens/s of each
run is given against the reference.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from .._support import entry_point_registered, gpu_name
from ..doctor_section import (
    REINSTALL_FIX,
    SMOKE_REPORT_FIX,
    SMOKE_RUN_FIX,
    finish,
    install_fix,
    internals_fix,
    new_section,
    print_section,
    problem,
    target_problems,
)
from .contract import check_targets
from .versions import SUPPORTED, UnsupportedVersion, check_version, installed_version

__all__ = ["report", "smoke_test", "compare_runs", "smoke_plan"]

ENTRY_POINT = "specpolicy.adapters.vllm.plugin:register"

Runner = Callable[[dict[str, Any]], dict[str, Any]]


def _entry_point_registered() -> bool:
    return entry_point_registered("vllm.general_plugins", ENTRY_POINT)


def report(
    *,
    smoke: bool = False,
    model: str | None = None,
    draft_model: str | None = None,
    method: str = "eagle3",
    num_speculative_tokens: int = 3,
    out: TextIO | None = None,
    runner: Runner | None = None,
) -> dict[str, Any]:
    """Check the installation (and run the smoke test when asked); print a summary to ``out``, return it."""
    version = installed_version()
    result = new_section("vllm", version, SUPPORTED)
    problems: list[str] = []
    try:
        check_version(version)
        result["supported"] = True
    except UnsupportedVersion as exc:
        what = "vLLM is not installed" if version is None else str(exc)
        problems.append(problem(what, install_fix("vllm", SUPPORTED)))
    if version is not None:
        result["route"] = "scheduler class (--scheduler-cls specpolicy.adapters.vllm.Scheduler)"
        result["paths"] = ["sync scheduling (EngineCore.step)", "async scheduling (step_with_batch_queue)"]
        result["entry_point"] = _entry_point_registered()
        if not result["entry_point"]:
            problems.append(problem("the vllm.general_plugins entry point is not registered", REINSTALL_FIX))
        result["targets"] = {k: v or "ok" for k, v in check_targets().items()}
        problems += target_problems(result["targets"], "vllm", SUPPORTED)
        sched = _scheduler_problem()
        if sched:
            problems.append(problem(sched, internals_fix(sched, "vllm", SUPPORTED)))
        result["gpu"] = gpu_name()
    if smoke:
        if version is None or not result["gpu"]:
            problems.append(
                problem("smoke test skipped: it needs vLLM and a CUDA GPU", "run it on a GPU host with vLLM")
            )
        elif not model or not draft_model:
            problems.append(
                problem(
                    "smoke test skipped: no model",
                    "give the target model and the drafter (--model, --draft)",
                )
            )
        else:
            try:
                result["smoke"] = smoke_test(
                    model, draft_model, method, num_speculative_tokens, runner=runner
                )
            except Exception as exc:
                problems.append(problem(f"smoke test failed to run: {exc}", SMOKE_RUN_FIX))
            else:
                if not result["smoke"]["ok"]:
                    problems.append(problem("smoke test: " + result["smoke"]["verdict"], SMOKE_REPORT_FIX))
    finish(result, problems)
    _print(result, out or sys.stdout)
    return result


def _scheduler_problem() -> str | None:
    try:
        from . import scheduler  # noqa: F401
    except Exception as exc:
        return f"specpolicy.adapters.vllm.Scheduler cannot be imported: {type(exc).__name__}: {exc}"
    return None


def _print(result: dict[str, Any], out: TextIO) -> None:
    details = []
    s = result.get("smoke")
    if s:
        for run in s["runs"]:
            details.append(
                f"smoke {run['name']:<10} {run['tokens_per_s']:9.1f} tok/s  x{run['speedup']:.2f} vs "
                f"reference  identical {run['identical']}/{run['prompts']}"
            )
        details.append(f"smoke verdict: {s['verdict']}")
    print_section(result, "vLLM", out, details)


def smoke_plan(
    model: str, draft_model: str, method: str, num_speculative_tokens: int, num_prompts: int = 8
) -> list[dict[str, Any]]:
    """The engine runs of the smoke test: the reference, then the specpolicy scheduler three ways."""
    from .args import build_vllm_args

    k = num_speculative_tokens
    prompts = [[100 + 7 * i + j for j in range(24 + 8 * i)] for i in range(num_prompts)]
    # staggered lengths: requests finish one by one, the batch shrinks and the schedule policy switches depth
    max_tokens = [32 + 24 * i for i in range(num_prompts)]
    switching = {
        "name": "schedule",
        "table": [[1, 1, k], [2, 3, max(k - 1, 0)], [4, 5, 0], [6, max(6, num_prompts), 1 if k > 1 else k]],
    }
    max_num_seqs = max(num_prompts, 8)
    base = {"model": model, "prompts": prompts, "max_tokens": max_tokens, "max_num_seqs": max_num_seqs}
    runs = [dict(base, name="reference")]
    for name, policy in (
        ("static", {"name": "static", "num_steps": k}),
        ("off", {"name": "static", "num_steps": 0}),
        ("switching", switching),
    ):
        args = build_vllm_args(
            policy,
            k,
            max_num_seqs=max_num_seqs,
            method=method,
            draft_model=draft_model,
            settings={"metrics": False},
        )
        runs.append(dict(base, name=name, engine=args.as_kwargs()))
    return runs


def compare_runs(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Identity against the reference run and tokens/s ratios; ``ok`` when switching is as exact as static."""
    ref = results[0]
    ref_tps = ref["tokens"] / ref["seconds"] if ref["seconds"] > 0 else 0.0
    runs = []
    for r in results:
        same = sum(a == b for a, b in zip(r["token_ids"], ref["token_ids"], strict=True))
        tps = r["tokens"] / r["seconds"] if r["seconds"] > 0 else 0.0
        runs.append(
            {
                "name": r["name"],
                "identical": same,
                "prompts": len(ref["token_ids"]),
                "tokens_per_s": tps,
                "speedup": tps / ref_tps if ref_tps else 0.0,
            }
        )
    by = {r["name"]: r for r in runs}
    n = len(ref["token_ids"])
    floor = by["static"]["identical"] if "static" in by else n
    ok = all(by[name]["identical"] >= floor for name in ("off", "switching") if name in by)
    if ok and floor == n:
        verdict = "all outputs identical to the speculation-free reference"
    elif ok:
        verdict = (
            f"switching matches static speculation ({floor}/{n} identical; the rest differ by GPU numerics "
            "in the reference comparison too)"
        )
    else:
        verdict = "switching changed outputs beyond the static run's numeric noise: please report this"
    return {"ok": ok, "verdict": verdict, "runs": runs}


def smoke_test(
    model: str, draft_model: str, method: str, num_speculative_tokens: int, *, runner: Runner | None = None
) -> dict[str, Any]:
    run = runner or _run_in_subprocess
    results = [run(spec) for spec in smoke_plan(model, draft_model, method, num_speculative_tokens)]
    return compare_runs(results)


def _run_in_subprocess(spec: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "specpolicy.adapters.vllm.doctor", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"smoke run {spec['name']!r} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """One engine, greedy: the token ids per prompt, generated tokens and wall seconds (after a warm-up)."""
    from vllm import LLM, SamplingParams

    engine = dict(spec.get("engine", {}))
    llm = LLM(
        model=spec["model"],
        max_num_seqs=engine.pop("max_num_seqs", spec["max_num_seqs"]),
        gpu_memory_utilization=0.8,
        **engine,
    )
    prompts = [{"prompt_token_ids": p} for p in spec["prompts"]]
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for m in spec["max_tokens"]]
    llm.generate(prompts[:1], params[:1], use_tqdm=False)  # warm-up (graph capture, allocator)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    token_ids = [list(o.outputs[0].token_ids) for o in outs]
    return {
        "name": spec["name"],
        "token_ids": token_ids,
        "tokens": sum(map(len, token_ids)),
        "seconds": seconds,
    }


if __name__ == "__main__":
    print(json.dumps(_run_one(json.loads(sys.argv[1]))))
