"""A policy against SGLang's rule and ``static-0`` at each sweep level, over several seeds.

    python scripts/sweep_seeds.py --profile h200-live-sglang [--population reference ...] \
        [--levels 64,128,256] [--seeds 5] [--policy cost_model] [--duration-s 60]

The goals matrix takes each sweep cell's worst level at one seed. Where two policies make the same decisions
in a level's measured window, the closed loop still tells them apart: a few different steps in the warm-up
move every later finish and prefill, and the window's tokens with them. This prints, per profile,
population and level, the policy's throughput over SGLang's rule's and over ``static-0``'s across seeds
``0 .. N-1`` (mean, standard deviation, min, max) and the policy's speculative steps in each seed's window,
so that a gap can be read as a bias (every seed below) or as that noise (seeds on both sides, mean at 1).
SGLang's rule appears when its class is importable or SPECPOLICY_SGLANG_DIR names its package directory.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specpolicy.sim.matrix import POPULATIONS, command_inputs
from specpolicy.sim.run import Simulation, SimulationSpec, run_simulation


@dataclass(frozen=True)
class LevelRun:
    """One seed's outcome at one level: the policy's tokens/s over SGLang's rule's (None without it) and
    over ``static-0``'s, and the policy's speculative decode steps in the measured window."""

    vs_sglang: float | None
    vs_static0: float
    spec_steps: int


def level_runs(sim: Simulation, label: str) -> dict[int, LevelRun]:
    """Per sweep level of one simulation: the policy labelled ``label`` against the two references."""
    by_level: dict[int, dict[str, tuple[float, int]]] = {}
    for o in sim.outcomes:
        level = o.scenario.concurrency
        if level is None:
            raise ValueError(f"workload {sim.workload!r} is not a sweep")
        by_level.setdefault(level, {})[o.comparator.label] = (o.result.output_tok_s, o.result.spec_steps)
    out: dict[int, LevelRun] = {}
    for level, tok in sorted(by_level.items()):
        mine, spec = tok[label]
        sgl = tok.get("sglang-adaptive")
        out[level] = LevelRun(mine / sgl[0] if sgl else None, mine / tok["static-0"][0], spec)
    return out


def spread(values: Sequence[float]) -> str:
    """``mean (sd, min-max)`` of the values, four decimals."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} (sd {sd:.4f}, {min(values):.4f}-{max(values):.4f})"


def table(runs: dict[tuple[str, str, int], list[LevelRun]]) -> Iterable[str]:
    yield "| profile | population | level | x sglang-adaptive | x static-0 | speculative steps per seed |"
    yield "|---|---|---:|---|---|---|"
    for (profile, population, level), rs in runs.items():
        sgl = [r.vs_sglang for r in rs if r.vs_sglang is not None]
        steps = ", ".join(str(r.spec_steps) for r in rs)
        yield (
            f"| {profile} | {population} | {level} | {spread(sgl) if sgl else '-'} |"
            f" {spread([r.vs_static0 for r in rs])} | {steps} |"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", default="cost_model", help="name or JSON config (default cost_model)")
    p.add_argument("--profile", action="append", required=True, help="a step-cost profile (repeatable)")
    p.add_argument("--population", action="append", choices=tuple(POPULATIONS), help="default: all")
    p.add_argument("--levels", default="64,128,256", help="comma-separated sweep levels (default 64,128,256)")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (default 5)")
    p.add_argument("--duration-s", type=float, help="seconds per level (default: the simulator's, 60)")
    args = p.parse_args(argv)
    try:
        levels = tuple(int(x) for x in args.levels.split(","))
    except ValueError:
        p.error(f"--levels must be comma-separated integers, got {args.levels!r}")
    if not levels or min(levels) < 1:
        p.error(f"--levels must be >= 1, got {args.levels!r}")
    if args.seeds < 1:
        p.error(f"--seeds must be >= 1, got {args.seeds}")
    try:
        policy, label = command_inputs(args.policy, args.profile)
    except ValueError as exc:
        p.error(str(exc))
    runs: dict[tuple[str, str, int], list[LevelRun]] = {}
    for profile in args.profile:
        for population in args.population or POPULATIONS:
            for seed in range(args.seeds):
                spec = SimulationSpec(
                    profile=profile,
                    workload="sweep",
                    policies=(policy,),
                    seed=seed,
                    duration_s=args.duration_s,
                    concurrency=levels,
                    decide_cost_us=1.0,
                    acceptance=POPULATIONS[population],
                    jobs=1,
                )
                for level, run in level_runs(run_simulation(spec, progress=False), label).items():
                    runs.setdefault((profile, population, level), []).append(run)
                print(f"  {profile} {population} seed {seed}", file=sys.stderr)
    for line in table(runs):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
