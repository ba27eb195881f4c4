"""Print a policy's ratios to the references on every shipped profile x workload x acceptance population.

    python scripts/goals_matrix.py [--policy cost_model] [--profile NAME ...] [--workload NAME ...]
        [--population NAME ...] [--seed N] [--jobs N] [--scale F] [--durations short|default]

Workloads: sweep (levels 1, 8, 64), ramp, bursty, transition and a daily-cycle requests file; populations:
reference (Beta(7, 3)), low-0.35, mixed-0.9/0.2 (specpolicy/sim/matrix.py). ``--durations default`` runs
every workload for ``specpolicy simulate``'s own default duration (60 s per sweep level, at every default
level 1, 2, 4, ..., 256; 600 s for the others and the daily cycle: about 20 minutes on two cores with
``--jobs 2``); ``short`` (the default) is 10 s per level at 1, 8 and 64 and 60-120 s for the others, a few
minutes. ``--scale`` multiplies every duration. SGLang's rule appears when its class is
importable or SPECPOLICY_SGLANG_DIR names its package directory (docs/getting-started/simulator.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from specpolicy.profiles import available_profiles
from specpolicy.sim.matrix import (
    POPULATIONS,
    SWEEP_LEVELS,
    WORKLOADS,
    command_inputs,
    format_matrix,
    run_matrix,
)
from specpolicy.sim.workloads import BUILTIN, DEFAULT_SWEEP_LEVELS

#: ``--durations default``: the simulator's own default duration of each workload (the daily cycle as long
#: as the other time-varying ones).
DEFAULT_DURATIONS = {**{w: b.duration_s for w, b in BUILTIN.items()}, "daily": 600.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", default="cost_model", help="name or JSON config (default cost_model)")
    p.add_argument("--profile", action="append", help="profiles (default: every shipped one)")
    p.add_argument("--workload", action="append", choices=tuple(WORKLOADS), help="default: all")
    p.add_argument("--population", action="append", choices=tuple(POPULATIONS), help="default: all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int)
    p.add_argument("--scale", type=float, default=1.0, help="multiply every duration (default 1)")
    p.add_argument(
        "--durations",
        choices=("short", "default"),
        default="short",
        help="short: the matrix's quick durations and sweep levels 1, 8, 64; default: the simulator's own",
    )
    args = p.parse_args(argv)
    if not args.scale > 0:
        p.error(f"--scale must be > 0, got {args.scale!r}")
    profiles = args.profile or available_profiles()
    try:
        policy, label = command_inputs(args.policy, profiles)
    except ValueError as exc:
        p.error(str(exc))
    base = DEFAULT_DURATIONS if args.durations == "default" else WORKLOADS
    levels = DEFAULT_SWEEP_LEVELS if args.durations == "default" else SWEEP_LEVELS
    workloads = {w: base[w] * args.scale for w in WORKLOADS if not args.workload or w in args.workload}
    pops = {n: m for n, m in POPULATIONS.items() if not args.population or n in args.population}
    with tempfile.TemporaryDirectory() as tmp:
        cells = run_matrix(
            profiles,
            workloads=workloads,
            populations=pops,
            policy=policy,
            seed=args.seed,
            workdir=Path(tmp),
            jobs=args.jobs,
            sweep_levels=levels,
            on_cell=lambda c: print(f"  {c.profile} {c.workload} {c.population}", file=sys.stderr),
        )
    print(format_matrix(cells, label))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
