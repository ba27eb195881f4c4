"""What cost_model's probing costs in steady state, per shipped profile and concurrency, in the simulator.

Usage (from the repository root)::

    python benchmarks/bench_probe_cost.py                        # every shipped profile, 1, 8, 64, 256
    python benchmarks/bench_probe_cost.py --profiles seed-k25-tp8-pcie --concurrency 64 --json out.json

Per profile and concurrency: a steady closed loop (requests already mid-output), cost_model configured as
``specpolicy simulate`` configures it for the profile, and every ``static-k`` on the same requests. The
first ``--warm`` decode steps (the first explorations of a fresh policy) are left out; the measurement
window is then ``AUDIT_WINDOW`` steps (the window over which audits are priced, so it holds their steady
spacing), in simulated seconds from the profile's off step. The figure is the throughput lost against the
best static depth over that window: what probing costs where one depth is right throughout. The goal: at
most 0.5% on every row. (At small batches cost_model prices each request by its own acceptance, so it can
beat every fixed depth: a negative loss.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specpolicy.policies.cost_model.probes import AUDIT_WINDOW
from specpolicy.profiles import available_profiles
from specpolicy.sim.comparators import build_decider, default_comparators
from specpolicy.sim.engine import EngineConfig, simulate
from specpolicy.sim.run import resolve_profile
from specpolicy.sim.scenario import Scenario
from specpolicy.sim.steady_state import ClosedLoop

GOAL = 0.005
WARM_STEPS = 2000


def window_s(profile: Any, concurrency: int, steps: int) -> float:
    """Simulated seconds of ``steps`` off steps at this concurrency, prefills included."""
    loop = ClosedLoop()
    step = loop.step_s(profile, concurrency, 0)
    _, prefill = loop._per_step(concurrency, 1.0, profile.prefill_fixed_s, profile.prefill_per_token_s)
    return steps * (step + prefill)


def measure(
    name: str,
    concurrency: int,
    warm: int = WARM_STEPS,
    steps: int = AUDIT_WINDOW,
    seed: int = 0,
    statics: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """One row: tok/s of cost_model and of the best static depth over the window, and the loss
    (``statics``: the static depths compared, default all)."""
    profile = resolve_profile(name, "lazy")  # what `specpolicy simulate` runs by default
    comps, _ = default_comparators(profile.max_steps, ("cost_model",), profile_ref=name)
    warm_s = window_s(profile, concurrency, warm)
    scenario = Scenario(
        "steady",
        warm_s + window_s(profile, concurrency, steps),
        concurrency=concurrency,
        closed_loop=((0.0, concurrency),),
        warmup_s=warm_s,
        prewarmed=True,
    )
    config = EngineConfig(seed=seed, decide_cost_s=1e-6)
    rates: dict[str, float] = {}
    window_steps: dict[str, int] = {}
    for comp in comps:
        if comp.label != "cost_model" and not (
            comp.is_static and (statics is None or int(comp.label[7:]) in statics)
        ):
            continue
        res = simulate(scenario, profile, build_decider(comp, profile), config)
        rates[comp.label] = res.output_tokens / res.window_s
        window_steps[comp.label] = res.decode_steps
    best = max((k for k in rates if k.startswith("static-")), key=rates.__getitem__)
    return {
        "profile": name,
        "concurrency": concurrency,
        "best_static": best,
        "cost_model_tok_s": round(rates["cost_model"], 3),
        "best_static_tok_s": round(rates[best], 3),
        "loss": round(1.0 - rates["cost_model"] / rates[best], 5),
        "window_steps": window_steps["cost_model"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profiles", nargs="+", default=sorted(available_profiles()))
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64, 256])
    p.add_argument("--warm", type=int, default=WARM_STEPS, help="decode steps left out at the start")
    p.add_argument("--steps", type=int, default=AUDIT_WINDOW, help="decode steps measured")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    rows = []
    print(f"{'profile':22} {'conc':>4} {'best':>9} {'loss':>8} {'steps':>6}")
    for name in args.profiles:
        for c in args.concurrency:
            r = measure(name, c, args.warm, args.steps, args.seed)
            rows.append(r)
            print(
                f"{r['profile']:22} {r['concurrency']:>4} {r['best_static']:>9} {r['loss']:>8.2%} "
                f"{r['window_steps']:>6}",
                flush=True,
            )
    worst = max(rows, key=lambda r: r["loss"])
    print(f"worst: {worst['loss']:.2%} ({worst['profile']} at {worst['concurrency']}); goal <= {GOAL:.1%}")
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k != "json"}
        args.json.write_text(json.dumps({"goal": GOAL, "settings": settings, "rows": rows}))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
