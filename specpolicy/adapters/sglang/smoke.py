"""The SGLang GPU smoke test behind ``specpolicy doctor --smoke``.

Four offline engines run the same prompts greedily, each in a fresh process so GPU memory is returned between
them: a speculation-free engine (the reference, and the cost of "off" is measured against it), SGLang's own
speculation at the launch depth ("on"), specpolicy holding speculation off every step ("off"), and specpolicy
alternating off / launch depth every step ("switching"). Speculative decoding is lossless, so the switching
run must reproduce the static runs' tokens; bf16 kernels of different batch shapes can flip a near-tie, so the
bar is relative: switching must agree with "on" and with "off" at least as well as "on" and "off" agree with
each other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["RUNS", "smoke_test", "agreement", "compare", "run_one"]

PROMPTS = (
    "The capital of France is",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List the first ten prime numbers, separated by commas:",
    "Explain in two sentences why the sky is blue.",
    "Translate to German: The weather is nice today and we are going for a walk.",
    "Count from one to twenty in words:",
    "def quicksort(xs):",
    "A haiku about autumn leaves:",
)

#: name -> (speculative engine?, specpolicy policy spec or None)
RUNS: dict[str, tuple[bool, Any]] = {
    "reference": (False, None),
    "on": (True, None),
    "off": (True, {"name": "static", "num_steps": 0}),
    "switching": (True, "ALTERNATE"),
}

Runner = Callable[[dict[str, Any]], dict[str, Any]]


def agreement(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> float:
    """Mean over prompts of the fraction of tokens before the first divergence (1.0 = identical outputs)."""
    if len(a) != len(b) or not a:
        return 0.0
    total = 0.0
    for x, y in zip(a, b, strict=True):
        n = max(len(x), len(y))
        same = 0
        for p, q in zip(x, y, strict=False):
            if p != q:
                break
            same += 1
        total += same / n if n else 1.0
    return total / len(a)


def compare(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Agreement between runs, tokens/s relative to the reference, and the verdict."""
    tok = {k: v["tokens"] for k, v in results.items()}
    floor = agreement(tok["on"], tok["off"])
    sw_on = agreement(tok["switching"], tok["on"])
    sw_off = agreement(tok["switching"], tok["off"])
    ref_tps = results["reference"]["tokens_per_s"]
    speed = {
        k: {
            "tokens_per_s": v["tokens_per_s"],
            "vs_reference": v["tokens_per_s"] / ref_tps if ref_tps else None,
        }
        for k, v in results.items()
    }
    ok = min(sw_on, sw_off) >= floor
    verdict = (
        f"switching agrees with on {sw_on:.3f} and with off {sw_off:.3f}; "
        f"on vs off (noise floor) {floor:.3f}: "
        + ("OK" if ok else "FAIL: switching changes tokens beyond the static runs' own disagreement")
    )
    return {
        "agreement": {
            "on_vs_off": floor,
            "switching_vs_on": sw_on,
            "switching_vs_off": sw_off,
            "on_vs_reference": agreement(tok["on"], tok["reference"]),
            "off_vs_reference": agreement(tok["off"], tok["reference"]),
        },
        "speed": speed,
        "ok": ok,
        "verdict": verdict,
    }


def smoke_test(
    model: str,
    draft: str | None,
    *,
    algorithm: str = "EAGLE3",
    num_steps: int = 3,
    max_new_tokens: int = 128,
    engine_kw: dict[str, Any] | None = None,
    runner: Runner | None = None,
) -> dict[str, Any]:
    """Run the four engines (each via ``runner``, default: a fresh subprocess) and compare them.

    ``engine_kw`` are extra ``sglang.Engine`` arguments for every run (attention backend, dtype, TP size...).
    """
    run = runner or _subprocess_runner
    results: dict[str, dict[str, Any]] = {}
    for name, (spec, policy) in RUNS.items():
        if policy == "ALTERNATE":
            policy = {"name": "alternate", "depths": [0, num_steps], "period": 1}
        results[name] = run(
            {
                "model": model,
                "draft": draft,
                "algorithm": algorithm,
                "num_steps": num_steps,
                "speculative": spec,
                "policy": policy,
                "prompts": list(PROMPTS),
                "max_new_tokens": max_new_tokens,
                "engine_kw": dict(engine_kw or {}),
            }
        )
    out = compare(results)
    out["runs"] = {k: {kk: vv for kk, vv in v.items() if kk != "tokens"} for k, v in results.items()}
    return out


def _subprocess_runner(spec: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "specpolicy.adapters.sglang.smoke", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("SPECPOLICY_SMOKE "):
            return json.loads(line[len("SPECPOLICY_SMOKE ") :])  # type: ignore[no-any-return]
    raise RuntimeError(f"smoke run failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """One offline engine (in this process): generate greedily, time it, return tokens and tokens/s."""
    import sglang

    from ...runtime.settings import AdapterSettings
    from .versions import installed_version, route_for

    kwargs: dict[str, Any] = {
        "model_path": spec["model"],
        "log_level": "warning",
        **spec.get("engine_kw", {}),
    }
    if spec["speculative"]:
        k = int(spec["num_steps"])
        kwargs.update(
            speculative_algorithm=spec["algorithm"],
            speculative_num_steps=k,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=k + 1,
        )
        if spec.get("draft"):
            kwargs["speculative_draft_model_path"] = spec["draft"]
    policy = spec.get("policy")
    version = installed_version() or ""
    if policy is not None:
        settings = AdapterSettings.build(policy, metrics=False)
        os.environ.update(settings.to_env())
        # 0.5.13+ (v2 route): the plugin reads the settings from the environment in the scheduler; every
        # run's policy has one positive depth, so no adaptive controller is needed
        if route_for(version) == "legacy":
            from . import legacy

            plan = legacy.prepare_launch(settings)
            os.environ.update(plan.env)
            sglang.Engine.run_scheduler_process_func = staticmethod(plan.run_scheduler_process_func)
    engine = sglang.Engine(**kwargs)
    try:
        params = {"temperature": 0.0, "max_new_tokens": int(spec["max_new_tokens"]), "ignore_eos": True}
        engine.generate(
            prompt=spec["prompts"][:1], sampling_params={**params, "max_new_tokens": 8}
        )  # warm-up
        t0 = time.perf_counter()
        outs = engine.generate(prompt=spec["prompts"], sampling_params=params)
        dt = time.perf_counter() - t0
    finally:
        engine.shutdown()
    # token ids where the release returns them; otherwise the characters of the text stand in for tokens
    tokens = [list(o.get("output_ids") or [ord(c) for c in o.get("text", "")]) for o in outs]
    n = sum(
        int(o.get("meta_info", {}).get("completion_tokens", len(t)))
        for o, t in zip(outs, tokens, strict=True)
    )
    return {
        "tokens": tokens,
        "seconds": dt,
        "completion_tokens": n,
        "tokens_per_s": n / dt if dt > 0 else 0.0,
    }


if __name__ == "__main__":
    print("SPECPOLICY_SMOKE " + json.dumps(run_one(json.loads(sys.argv[1]))), flush=True)
