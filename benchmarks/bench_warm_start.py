"""Steps cost_model takes to its steady decision after a restart, cold and warm, on each shipped profile.

Usage (from the repository root)::

    python benchmarks/bench_warm_start.py                       # every shipped profile, concurrency 1, 8, 64
    python benchmarks/bench_warm_start.py --profiles h200-llama8b --concurrency 1 --json out.json

In the simulator, per profile and concurrency: cost_model (as ``specpolicy simulate`` configures it for the
profile) serves a steady closed loop for ``--learn`` simulated seconds; the depth it runs most over the
second half of that run is its steady decision. Then the engine restarts: the same load, new requests
(another seed), ``--after`` seconds, once with a fresh policy (cold) and once with one loaded from the
first policy's ``state_dict()`` (warm). For each, the figure is the first step from which at least
``--share`` of the next ``--window`` decisions are the steady one (probes aside); ``never`` where that
does not happen within the run. The goal: warm within 10 steps. Where no depth has that share of the first
run's second half (a small batch is priced request by request, so its depth follows each request's
acceptance), there is no steady decision to reach: the row is shown, and left out of the goal's count.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from specpolicy.mode import SpecMode
from specpolicy.policy import Policy
from specpolicy.profiles import available_profiles
from specpolicy.registry import make_policy, parse_config
from specpolicy.sim.comparators import PolicyDecider, default_comparators
from specpolicy.sim.engine import EngineConfig, simulate
from specpolicy.sim.run import resolve_profile
from specpolicy.sim.scenario import Scenario
from specpolicy.stats import StepStats

GOAL_STEPS = 10


class Recorder:
    """A policy that keeps every depth its inner policy decides."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.depths: list[int] = []

    def decide(self, stats: StepStats) -> SpecMode:
        mode = self.inner.decide(stats)
        self.depths.append(mode.num_steps)
        return mode

    def reset(self) -> None:
        self.inner.reset()


def steps_to_steady(depths: list[int], steady: int, window: int, share: float) -> int | None:
    """The first step from which ``share`` of the next ``window`` decisions are ``steady`` (None: never)."""
    need = share * window
    for i in range(max(len(depths) - window + 1, 0)):
        if sum(1 for k in depths[i : i + window] if k == steady) >= need:
            return i
    return None


def _run(policy: Policy, profile: Any, concurrency: int, seconds: float, seed: int) -> list[int]:
    rec = Recorder(policy)
    scenario = Scenario("steady", seconds, closed_loop=((0.0, concurrency),), prewarmed=True)
    simulate(scenario, profile, PolicyDecider(rec), EngineConfig(seed=seed, decide_cost_s=1e-6))
    return rec.depths


def measure(name: str, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    profile = resolve_profile(name, None)
    comps, _ = default_comparators(
        profile.max_steps, ("cost_model",), profile_ref=name, include_references=False
    )
    spec = comps[0].spec
    learner = make_policy(parse_config(spec))
    learned = _run(learner, profile, concurrency, args.learn, seed=0)
    tail = learned[len(learned) // 2 :]
    steady, n_steady = Counter(tail).most_common(1)[0]
    state = json.loads(json.dumps(learner.state_dict(), allow_nan=False))  # type: ignore[attr-defined]
    cold = _run(make_policy(parse_config(spec)), profile, concurrency, args.after, seed=1)
    warm_policy = make_policy(parse_config(spec))
    warm_policy.load_state_dict(state)  # type: ignore[attr-defined]
    warm = _run(warm_policy, profile, concurrency, args.after, seed=1)
    row: dict[str, Any] = {
        "profile": name,
        "concurrency": concurrency,
        "steady_depth": steady,
        "steady_share": round(n_steady / len(tail), 3),
        "cold_steps": steps_to_steady(cold, steady, args.window, args.share),
        "warm_steps": steps_to_steady(warm, steady, args.window, args.share),
        "run_steps": len(cold),
        "state_bytes": len(json.dumps(state)),
    }
    row["steady"] = row["steady_share"] >= args.share
    row["warm_within_goal"] = row["warm_steps"] is not None and row["warm_steps"] <= GOAL_STEPS
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profiles", nargs="+", default=sorted(available_profiles()))
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--learn", type=float, default=30.0, help="simulated seconds before the restart")
    p.add_argument("--after", type=float, default=10.0, help="simulated seconds after it")
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--share", type=float, default=0.9)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    rows = [measure(name, c, args) for name in args.profiles for c in args.concurrency]
    print(f"{'profile':22} {'conc':>4} {'steady':>6} {'share':>6} {'cold':>6} {'warm':>6}  steps of the run")

    def fmt(n: int | None) -> str:
        return "never" if n is None else str(n)

    for r in rows:
        print(
            f"{r['profile']:22} {r['concurrency']:>4} {r['steady_depth']:>6} {r['steady_share']:>6.2f} "
            f"{fmt(r['cold_steps']):>6} "
            f"{fmt(r['warm_steps']):>6}  {r['run_steps']}{'' if r['steady'] else '  (no steady depth)'}"
        )
    steady = [r for r in rows if r["steady"]]
    met = sum(r["warm_within_goal"] for r in steady)
    print(
        f"warm within {GOAL_STEPS} steps: {met} of the {len(steady)} runs with a steady depth (one depth in "
        f"at least {args.share:.0%} of the second half of the first run); the others' depth follows each "
        "request's acceptance"
    )
    if args.json:
        report = {"goal_steps": GOAL_STEPS, "settings": {k: v for k, v in vars(args).items() if k != "json"}}
        args.json.write_text(json.dumps({**report, "rows": rows}, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
