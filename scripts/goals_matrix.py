"""Print a policy's ratios to the references on every shipped profile x workload x acceptance population.

    python scripts/goals_matrix.py [--policy cost_model] [--profile NAME ...] [--workload NAME ...]
        [--population NAME ...] [--seed N] [--jobs N] [--scale F]

Workloads: sweep (levels 1, 8, 64), ramp, bursty, transition and a daily-cycle requests file; populations:
reference (Beta(7, 3)), low-0.35, mixed-0.9/0.2 (specpolicy/sim/matrix.py). ``--scale`` multiplies every
duration (1 = the short defaults, a few minutes on two cores). SGLang's rule appears when its class is
importable or SPECPOLICY_SGLANG_DIR names its package directory (docs/simulator.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from specpolicy.sim.matrix import POPULATIONS, WORKLOADS, format_matrix, run_matrix
from specpolicy.sim.profile import available_profiles


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", default="cost_model", help="name or JSON config (default cost_model)")
    p.add_argument("--profile", action="append", help="profiles (default: every shipped one)")
    p.add_argument("--workload", action="append", choices=tuple(WORKLOADS), help="default: all")
    p.add_argument("--population", action="append", choices=tuple(POPULATIONS), help="default: all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int)
    p.add_argument("--scale", type=float, default=1.0, help="multiply every duration (default 1)")
    args = p.parse_args(argv)
    if not args.scale > 0:
        p.error(f"--scale must be > 0, got {args.scale!r}")
    policy = json.loads(args.policy) if args.policy.lstrip().startswith("{") else args.policy
    workloads = {w: d * args.scale for w, d in WORKLOADS.items() if not args.workload or w in args.workload}
    pops = {n: m for n, m in POPULATIONS.items() if not args.population or n in args.population}
    with tempfile.TemporaryDirectory() as tmp:
        cells = run_matrix(
            args.profile or available_profiles(),
            workloads=workloads,
            populations=pops,
            policy=policy,
            seed=args.seed,
            workdir=Path(tmp),
            jobs=args.jobs,
            on_cell=lambda c: print(f"  {c.profile} {c.workload} {c.population}", file=sys.stderr),
        )
    name = policy if isinstance(policy, str) else str(policy.get("name"))
    print(format_matrix(cells, name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
