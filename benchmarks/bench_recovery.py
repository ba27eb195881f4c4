"""cost_model after a transient episode: steps from the episode's end until it decides right again.

Usage (from the repository root)::

    python benchmarks/bench_recovery.py                     # the table: factors 4x and 10x, 1 and 8 buckets
    python benchmarks/bench_recovery.py --json out.json

A closed loop against a small synthetic engine (deterministic, seeded): per-request acceptance drawn at a
fixed per-draft rate, step time growing with the batch and the depth. Two directions:

- ``spec-slow``: a good drafter (speculation pays at every batch size) whose speculative steps run
  ``factor`` times slow for the first ``length`` steps; the right decision afterwards is to speculate.
- ``off-slow``: off steps run ``factor`` times slow for ``length`` steps, and the drafter is useless (accepts
  nothing); the right decision afterwards is off.
- ``outliers``: a good drafter; the first ``entries`` entries into the best depth (the steps after each
  switch into it) are ``factor`` times slow; the right decision afterwards is a speculative depth.

The batch size is one value (one bucket) or moves over ``buckets`` batch sizes of distinct buckets (a new
one every ``dwell`` steps). Recovery: the steps from the episode's end to the end of the last
``WINDOW``-step window in which fewer than ``RIGHT`` of the decisions are right (from then on it decides
right; probes are wrong decisions by design). Also counted: switches per 1,000 steps after the episode.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specpolicy import StepStats, make_policy

#: Decisions after a step that must be mostly right for the step to count as recovered.
WINDOW = 200
#: The share of right decisions in a window from which it counts as right (probes are wrong by design)
RIGHT = 0.75
#: Batch sizes in distinct cost_model buckets (default grid).
BATCHES = (1, 2, 3, 4, 6, 9, 14, 24)


@dataclass(frozen=True)
class Episode:
    """One closed-loop run: what is slow, how much, for how long, and the batch mix."""

    kind: str  # "spec-slow", "off-slow" or "outliers"
    factor: float
    length: int  # steps of the episode (``outliers``: entries into the depth)
    buckets: int = 1
    dwell: int = 10
    after: int = 20_000
    seed: int = 0


@dataclass(frozen=True)
class Result:
    recovery: int  # steps from the episode's end until it decides right for good; -1: not within ``after``
    switches_per_1000: float
    right_share: float


def step_time(batch: int, k: int) -> float:
    """A steady step: a base, per request and per verified token."""
    return 0.010 * (1.0 + 0.02 * batch) * (1.0 + 0.08 * k)


def run(ep: Episode, config: dict[str, Any] | None = None) -> Result:
    policy = make_policy({"name": "cost_model", **(config or {})})
    rng = random.Random(ep.seed)
    good = ep.kind != "off-slow"
    rate = 0.8 if good else 0.0
    batches = BATCHES[: ep.buckets]
    total = (ep.length if ep.kind != "outliers" else 0) + ep.after
    last: tuple[int, int, float] | None = None  # batch, depth, time of the step run last
    batch = batches[0]
    decided: list[int] = []
    entries, prev_k = 0, -1
    end = ep.length if ep.kind != "outliers" else -1
    for step in range(total + WINDOW):
        if step % ep.dwell == 0:
            batch = batches[rng.randrange(len(batches))]
        if last is None:
            stats = StepStats.fast(batch, 0, 1000.0)
        else:
            lb, lk, lt = last
            acc = None
            if lk:
                acc = []
                for _ in range(min(lb, 8)):
                    n = 0
                    while n < lk and rng.random() < rate:
                        n += 1
                    acc.append(n)
                acc = acc + [acc[0]] * (lb - len(acc))
            stats = StepStats.fast(batch, 0, 1000.0, lk, acc, None, lt, None, lb, lk, 1000.0)
        k = policy.decide(stats).num_steps
        decided.append(k)
        t = step_time(batch, k) * (1.0 + 0.01 * rng.random())
        if ep.kind == "spec-slow" and step < ep.length and k > 0:
            t *= ep.factor
        elif ep.kind == "off-slow" and step < ep.length and k == 0:
            t *= ep.factor
        elif ep.kind == "outliers" and k > 0 and k != prev_k:
            entries += 1
            if entries <= ep.length:
                t *= ep.factor
                end = step + 1
        prev_k = k
        last = (batch, k, t)
    end = max(end, 0)
    right = [(k > 0) == good for k in decided]
    # the last window after the episode with too few right decisions: recovered after it
    rec = 0
    ok = sum(right[end + ep.after - WINDOW : end + ep.after])
    for s in range(end + ep.after - WINDOW, end - 1, -1):
        if s < end + ep.after - WINDOW:
            ok += right[s] - right[s + WINDOW]
        if ok < RIGHT * WINDOW:
            rec = s - end + WINDOW
            break
    if rec > ep.after - 2 * WINDOW:
        rec = -1  # still wrong near the end of the run
    tail = decided[end : end + ep.after]
    switches = sum(a != b for a, b in zip(tail, tail[1:], strict=False))
    return Result(rec, 1000.0 * switches / max(len(tail), 1), sum(right[end : end + ep.after]) / ep.after)


def table(factors: Sequence[float], seeds: int) -> list[dict[str, Any]]:
    rows = []
    for kind, length in (("spec-slow", 1000), ("off-slow", 1000), ("outliers", 3)):
        for factor in factors:
            for buckets in (1, 8):
                res = [run(Episode(kind, factor, length, buckets, seed=s)) for s in range(seeds)]
                worst = max(r.recovery if r.recovery >= 0 else 10**9 for r in res)
                rows.append(
                    {
                        "kind": kind,
                        "factor": factor,
                        "length": length,
                        "buckets": buckets,
                        "worst_recovery": worst if worst < 10**9 else -1,
                        "recoveries": [r.recovery for r in res],
                        "switches_per_1000": max(r.switches_per_1000 for r in res),
                        "results": [asdict(r) for r in res],
                    }
                )
                print(
                    f"| {kind} | {factor:g}x | {length} | {buckets} | {rows[-1]['recoveries']} | "
                    f"{rows[-1]['switches_per_1000']:.1f} |",
                    flush=True,
                )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--factors", type=float, nargs="+", default=[4.0, 10.0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    print("| episode | factor | length | buckets | steps to recover (per seed) | switches/1000 after |")
    print("|---|---:|---:|---:|---|---:|")
    rows = table(args.factors, args.seeds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
