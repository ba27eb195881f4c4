"""Per-step cost of StepStats construction and of decide(), per registered policy, against SGLang's built-in.

Usage (from the repository root)::

    python benchmarks/bench_decide.py                    # every registered policy, batch 1, 64, 256
    .venvs/sglang-0.5.23/bin/python benchmarks/bench_decide.py   # also measures SGLang's own policy
    python benchmarks/bench_decide.py --json out.json --repeats 31 --steps 4000

Each measurement runs ``--steps`` calls in a plain ``for`` loop over prebuilt StepStats, cycling through
``--distinct`` different loads and acceptance lists (default 32: warm in cache, as the list an adapter has
just built is, yet varied so stateful policies move), ``--repeats`` times; the reported figure is the
median over repeats of (loop time / steps), loop overhead included (it is the same for every row). Short
loops and many repeats keep the median clear of scheduler preemption on a busy machine. Inputs model a step
that speculated 3 deep: ``accepted_draft_tokens`` filled with a value in 0..3 per request, a step time, a
context length and (unless ``--no-ids``) the request ids of the batch and of the step reported on, 1% of the
requests replaced per step. SGLang's ``AdaptiveSpeculativeParams`` is measured in the same loop, with the
same per-request lists, as ``get_steps_for_batch(bs)`` + ``on_verify_complete(accepted, bs)``, once with
its shipped default config (which routes batch >= 64 to steps 0, where it skips its EMA update) and once
with a config that keeps speculating at every batch size (so it does its O(batch) work, as specpolicy's
acceptance policy does). When SGLang is not importable the comparison falls back to the ~1 us/step figure
and says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

from specpolicy import StepStats, available_policies, make_policy

BATCH_SIZES = (1, 64, 256)
DEPTH = 3
#: SGLang's policy cost when it cannot be measured here (its measured cost on a 2-core CPU).
SGLANG_FALLBACK_S = 1e-6


#: A request of the benchmark's batches finishes (and a new one takes its place) with this chance per step.
FINISH_PER_STEP = 0.01


def _inputs(batch: int, n: int, distinct: int, seed: int, ids: bool = True) -> list[tuple[Any, ...]]:
    """StepStats fields of ``n`` consecutive steps, the load and acceptance cycling through ``distinct``
    values; with ``ids``, the request ids of the batch (32-character hex strings, as SGLang's) and of the
    step reported on, requests finishing and being replaced at ``FINISH_PER_STEP``."""
    rng = random.Random(seed)
    pool = []
    for _ in range(distinct):
        acc = [rng.randint(0, DEPTH) for _ in range(batch)]
        ctx = 1000.0 + rng.random() * 500
        pool.append((batch, rng.randint(0, 8), ctx, DEPTH, acc, None, 0.01 + rng.random() * 1e-3, None, batch,
                     DEPTH, ctx))
    out = []
    running = [f"{rng.getrandbits(128):032x}" for _ in range(batch)]
    prev: list[str] | None = None
    for i in range(n):
        running = [f"{rng.getrandbits(128):032x}" if rng.random() < FINISH_PER_STEP else r for r in running]
        out.append(pool[i % distinct] + ((prev, running) if ids else (None, None)))
        prev = running
    return out


def _time_loop(body: Callable[[], None], repeats: int, steps: int) -> float:
    body()  # warm-up: first-touch allocations and caches are not what a running engine sees
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        body()
        samples.append((time.perf_counter_ns() - t0) / steps)
    return statistics.median(samples) * 1e-9


def _summing(accs: Sequence[list[int]]) -> Callable[[], None]:
    def run() -> None:
        for a in accs:
            sum(a)

    return run


def bench_construction(args_list: Sequence[tuple[Any, ...]], repeats: int) -> dict[str, float]:
    fast, full = StepStats.fast, StepStats

    def run_fast() -> None:
        for a in args_list:
            fast(*a)

    def run_full() -> None:
        for a in args_list:
            full(*a)

    return {
        "StepStats.fast": _time_loop(run_fast, repeats, len(args_list)),
        "StepStats (validating)": _time_loop(run_full, repeats, len(args_list)),
    }


def bench_policy(name: str, stats: Sequence[StepStats], repeats: int) -> float:
    policy = make_policy(name)
    decide = policy.decide
    for s in stats[: min(len(stats), 500)]:  # warm state (EWMAs, learned costs) before timing
        decide(s)

    def run() -> None:
        for s in stats:
            decide(s)

    return _time_loop(run, repeats, len(stats))


def load_sglang_params() -> tuple[type[Any] | None, str]:
    """SGLang's AdaptiveSpeculativeParams without running sglang/__init__ (pulls in the whole frontend)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None, "sglang not installed in this Python"
    if "sglang" not in sys.modules:
        bare = types.ModuleType("sglang")
        bare.__path__ = list(spec.submodule_search_locations)
        sys.modules["sglang"] = bare
    try:
        from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
    except Exception as exc:  # a missing optional dependency in a partial install
        return None, f"cannot import sglang.srt.speculative.adaptive_spec_params: {exc}"
    from importlib import metadata

    return AdaptiveSpeculativeParams, f"sglang {metadata.version('sglang')}"


def bench_sglang(cls: type[Any], cfg_path: str | None, batch: int, accs: Sequence[list[int]],
                 repeats: int) -> float:
    import logging

    logging.getLogger("sglang").setLevel(logging.WARNING)
    params = cls(DEPTH, cfg_path)
    get, feed = params.get_steps_for_batch, params.on_verify_complete
    for acc in accs[:500]:
        get(batch)
        feed(acc, batch)

    def run() -> None:
        for acc in accs:
            get(batch)
            feed(acc, batch)

    return _time_loop(run, repeats, len(accs))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=256, help="decide() calls per timed loop")
    ap.add_argument("--repeats", type=int, default=201, help="timed loops per measurement (median reported)")
    ap.add_argument("--distinct", type=int, default=32, help="different StepStats cycled through per loop")
    ap.add_argument("--policies", nargs="*", default=None, help="default: every registered policy")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--no-ids", action="store_true", help="leave the request-id fields None")
    args = ap.parse_args(argv)

    names = args.policies or available_policies()
    sglang_cls, sglang_note = load_sglang_params()
    always_on_cfg = None
    if sglang_cls is not None:
        fd, always_on_cfg = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"1": {"candidate_steps": [1, 3, 5, 7]}}, f)

    results: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "steps": args.steps,
        "repeats": args.repeats,
        "distinct": args.distinct,
        "sglang": sglang_note,
        "per_step_s": {},
    }
    table: dict[str, dict[int, float]] = {}
    for b in BATCH_SIZES:
        raw = _inputs(b, args.steps, args.distinct, seed=b, ids=not args.no_ids)
        stats = [StepStats.fast(*a) for a in raw]
        for label, v in bench_construction(raw, args.repeats).items():
            table.setdefault(label, {})[b] = v
        for name in names:
            table.setdefault(f"decide: {name}", {})[b] = bench_policy(name, stats, args.repeats)
        if "acceptance" in names:  # the adapter-side alternative: the mean computed where it is free
            pre = [
                StepStats.fast(b, w, L, k, None, None, t, sum(acc) / len(acc), *rest)
                for b, w, L, k, acc, _, t, _, *rest in raw
            ]
            table.setdefault("decide: acceptance (mean_accepted given)", {})[b] = bench_policy(
                "acceptance", pre, args.repeats
            )
        accs = [a[4] for a in raw]
        if sglang_cls is not None:
            table.setdefault("sglang built-in (default config)", {})[b] = bench_sglang(
                sglang_cls, None, b, accs, args.repeats
            )
            table.setdefault("sglang built-in (speculating at every bs)", {})[b] = bench_sglang(
                sglang_cls, always_on_cfg, b, accs, args.repeats
            )
        table.setdefault("reference: sum(accepted) alone", {})[b] = _time_loop(
            _summing(accs), args.repeats, len(accs)
        )
    if always_on_cfg:
        os.unlink(always_on_cfg)

    ref_row = "sglang built-in (default config)" if sglang_cls is not None else None
    print(f"# decide() and StepStats cost, median of {args.repeats} loops x {args.steps} steps; "
          f"Python {results['python']} {results['machine']}; {sglang_note}")
    if ref_row is None:
        print(f"# SGLang not importable: ratios are against {SGLANG_FALLBACK_S * 1e6:.1f} us/step instead")
    vs = "vs SGLang default" if ref_row else f"vs {SGLANG_FALLBACK_S * 1e6:.0f} us"
    head = "| | " + " | ".join(f"bs={b} (us)" for b in BATCH_SIZES) + f" | {vs} (bs 1/64/256) |"
    print(head)
    print("|---|" + "---:|" * (len(BATCH_SIZES) + 1))
    for label, row in table.items():
        ref = [table[ref_row][b] if ref_row else SGLANG_FALLBACK_S for b in BATCH_SIZES]
        ratio = " / ".join(f"{row[b] / r:.2f}x" for b, r in zip(BATCH_SIZES, ref, strict=True))
        print(f"| {label} | " + " | ".join(f"{row[b] * 1e6:.3f}" for b in BATCH_SIZES) + f" | {ratio} |")
        results["per_step_s"][label] = {str(b): row[b] for b in BATCH_SIZES}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
