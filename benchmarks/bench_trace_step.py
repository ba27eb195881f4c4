"""Step-path latency with the JSONL trace on: p50 / p99 / p99.9 / max of the controller's per-step calls.

Usage (from the repository root)::

    python benchmarks/bench_trace_step.py                         # batch 256, 100 000 steps, trace on and off
    python benchmarks/bench_trace_step.py --steps 20000 --batch 64 --json out.json

Each step is what an engine adapter does per step: ``step, k = controller.decide(stats)`` then
``controller.outcome(step, accepted, t)`` (which hands the completed record to the trace), timed together,
with ``--work-us`` of engine work in between (by default a wait that releases the GIL, as an engine waiting
on the device does; ``--spin`` holds it), so the writer thread runs concurrently, as it does in an engine.
The policy is ``cost_model``; ``accepted_draft_tokens`` has one entry per request. "trace on" writes the
trace to a temporary directory with the default writer settings. The figures are wall-clock percentiles of
the step-path calls only (the busy work is excluded).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specpolicy import StepStats, make_policy
from specpolicy.runtime.controller import StepController
from specpolicy.runtime.trace_writer import TraceWriter


def _spin(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def _wait(us: float) -> None:
    time.sleep(us * 1e-6)


def run(steps: int, batch: int, work_us: float, trace_dir: Path | None, spin: bool = False) -> dict[str, Any]:
    work = _spin if spin else _wait
    rng = random.Random(batch)
    pool = [
        StepStats.fast(batch, 0, 1000.0 + i, 3, [rng.randint(0, 3) for _ in range(batch)], None, 0.02)
        for i in range(64)
    ]
    writer = TraceWriter(trace_dir / "trace.jsonl") if trace_dir is not None else None
    ctl = StepController(
        make_policy("cost_model"),
        allowed_steps=range(8),
        default_steps=3,
        observers=[writer] if writer is not None else [],
    )
    lat = [0.0] * steps
    perf = time.perf_counter
    for i in range(steps):
        stats = pool[i & 63]
        t0 = perf()
        ctl.outcome(ctl.decide(stats)[0], stats[4], 0.02)
        lat[i] = perf() - t0
        work(work_us)
    out: dict[str, Any] = {}
    if writer is not None:
        t0 = perf()
        writer.close()
        out["close_s"] = perf() - t0
        out.update(offered=writer.offered, written=writer.written, dropped=writer.dropped)
    lat.sort()
    q = statistics.quantiles(lat, n=1000, method="inclusive")
    out.update(
        p50_us=q[499] * 1e6,
        p99_us=q[989] * 1e6,
        p999_us=q[998] * 1e6,
        max_us=lat[-1] * 1e6,
        over_1ms=sum(x > 1e-3 for x in lat),
        steps=steps,
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--work-us", type=float, default=50.0, help="engine work per step outside the step path")
    ap.add_argument(
        "--spin",
        action="store_true",
        help="the engine work holds the GIL (a CPU-bound loop) instead of waiting without it, "
        "as an engine waiting on the device does",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    results: dict[str, Any] = {}
    results["trace off"] = run(args.steps, args.batch, args.work_us, None, args.spin)
    with tempfile.TemporaryDirectory() as d:
        results["trace on"] = run(args.steps, args.batch, args.work_us, Path(d), args.spin)
    print(
        f"# step path (decide + outcome), batch {args.batch}, {args.steps} steps, "
        f"{args.work_us} us work per step"
    )
    print("| | p50 (us) | p99 (us) | p99.9 (us) | max (us) | > 1 ms | offered / written / dropped |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, r in results.items():
        counts = f"{r['offered']} / {r['written']} / {r['dropped']}" if "offered" in r else "-"
        print(
            f"| {label} | {r['p50_us']:.2f} | {r['p99_us']:.2f} | {r['p999_us']:.2f} | {r['max_us']:.0f} | "
            f"{r['over_1ms']} | {counts} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
