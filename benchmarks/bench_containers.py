"""decide() p50 / p99 per registered policy with per-request fields held in numpy arrays.

Usage (from the repository root)::

    python benchmarks/bench_containers.py --batch 4096 --steps 400

Each step passes fresh numpy arrays of accepted counts (0..3 at depth 3) and request ids of ``--batch``
requests, with the outcome fields an adapter fills in; the figures are the median and the 99th percentile
of single decide() calls, in microseconds (single calls, so the timer's overhead is included).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from specpolicy import StepStats, available_policies, make_policy, parse_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=400)
    args = ap.parse_args(argv)
    b, n = args.batch, args.steps
    rng = np.random.default_rng(0)
    print(f"batch {b}, {n} steps, numpy per-request fields: decide() us")
    for name in available_policies():
        policy = make_policy(parse_config(name))
        times = []
        for i in range(n):
            acc: Any = rng.integers(0, 4, b)
            ids: Any = np.arange(i * b, (i + 1) * b)
            stats = StepStats.fast(b, 0, 1000.0, 3, acc, None, 0.02, None, b, 3, 1000.0, ids, ids + b)
            t0 = time.perf_counter()
            policy.decide(stats)
            times.append(time.perf_counter() - t0)
        times.sort()
        print(f"{name:12s} p50 {times[n // 2] * 1e6:9.1f}  p99 {times[int(n * 0.99)] * 1e6:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
