"""Tokens per second, tokens per decode step per request, decode and prefill steps of cost_model and each
static depth in bench_probe_cost's steady closed loop (one profile and concurrency).

    PYTHONPATH=benchmarks python3 \
        results/2026-12-08-cpu-probe-cost-and-transitions/decode_and_prefill_steps.py h200-llama70b 256
"""

from __future__ import annotations

import sys

import bench_probe_cost as b

from specpolicy.policies.cost_model.probes import AUDIT_WINDOW
from specpolicy.sim.comparators import build_decider, default_comparators
from specpolicy.sim.engine import EngineConfig, simulate
from specpolicy.sim.run import resolve_profile
from specpolicy.sim.scenario import Scenario

name, c = sys.argv[1], int(sys.argv[2])
warm = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
profile = resolve_profile(name, "lazy")
comps, _ = default_comparators(profile.max_steps, ("cost_model",), profile_ref=name)
warm_s = b.window_s(profile, c, warm)
scenario = Scenario(
    "steady",
    warm_s + b.window_s(profile, c, AUDIT_WINDOW),
    concurrency=c,
    closed_loop=((0.0, c),),
    warmup_s=warm_s,
    prewarmed=True,
)
print("| policy | tok/s | tokens/step/request | decode steps | prefill steps |")
print("|---|---:|---:|---:|---:|")
for comp in comps:
    if comp.label != "cost_model" and not comp.is_static:
        continue
    res = simulate(scenario, profile, build_decider(comp, profile), EngineConfig(seed=0, decide_cost_s=1e-6))
    per_step = res.output_tokens / res.decode_steps / c
    print(
        f"| {comp.label} | {res.output_tokens / res.window_s:.1f} | {per_step:.3f} | {res.decode_steps} |"
        f" {res.prefill_steps} |"
    )
