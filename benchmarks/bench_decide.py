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
requests replaced per step. By default the loop is closed, as in an engine: each step reports the depth the
policy decided for it (counts capped at that depth, none when off; a step time that grows with the depth,
more so at large batches, so speculation pays at a batch of one and not at 256; an engine that runs at most
``CLOSED_MAX_DEPTH``), all prebuilt, so the loop only picks the StepStats of the decided depth.
``--open-loop`` feeds the same depth-3 step whatever the policy decides (the figures before the loop was
closed: a policy whose probes are never answered keeps re-planning them). SGLang's
``AdaptiveSpeculativeParams`` is measured in the same loop, with the same per-request lists, as
``get_steps_for_batch(bs)`` + ``on_verify_complete(accepted, bs)``, once with
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

from specpolicy import MAX_NUM_STEPS, StepStats, available_policies, make_policy

BATCH_SIZES = (1, 64, 256)
DEPTH = 3
#: SGLang's policy cost when it cannot be measured here (its measured cost on a 2-core CPU).
SGLANG_FALLBACK_S = 1e-6


#: The deepest depth the closed loop's engine runs: a deeper decision gets this depth's step.
CLOSED_MAX_DEPTH = 8

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
        pool.append(
            (
                batch,
                rng.randint(0, 8),
                ctx,
                DEPTH,
                acc,
                None,
                0.01 + rng.random() * 1e-3,
                None,
                batch,
                DEPTH,
                ctx,
            )
        )
    out = []
    running = [f"{rng.getrandbits(128):032x}" for _ in range(batch)]
    prev: list[str] | None = None
    for i in range(n):
        running = [f"{rng.getrandbits(128):032x}" if rng.random() < FINISH_PER_STEP else r for r in running]
        out.append(pool[i % distinct] + ((prev, running) if ids else (None, None)))
        prev = running
    return out


def _step_time(t: float, batch: int, depth: int) -> float:
    """The closed loop's engine: each draft position adds 4% at a batch of one and more as the batch
    grows (a step turns compute-bound), so that the policies' choices differ between batch sizes."""
    return t * (1.0 + depth * (0.04 + batch / 400.0))


def _closed_rows(raw: Sequence[tuple[Any, ...]]) -> list[list[StepStats]]:
    """Per step, the StepStats an engine reports after running each depth 0 .. MAX_NUM_STEPS (deeper than
    ``CLOSED_MAX_DEPTH``: that depth's), so a closed loop indexes the row by the decided depth."""
    rows = []
    for a in raw:
        batch, waiting, ctx, _, acc, _, t, _, last_b, _, last_ctx, prev, running = a
        row = [
            StepStats.fast(
                batch,
                waiting,
                ctx,
                k,
                [min(x, k) for x in acc] if k else None,
                None,
                _step_time(t, batch, k),
                None,
                last_b,
                k,
                last_ctx,
                prev,
                running,
            )
            for k in range(CLOSED_MAX_DEPTH + 1)
        ]
        rows.append(row + [row[-1]] * (MAX_NUM_STEPS - CLOSED_MAX_DEPTH))
    return rows


def _capped(accs: Sequence[list[int]]) -> list[list[list[int]]]:
    """Per step, the accepted counts after a step at each depth 0 .. MAX_NUM_STEPS (capped there; deeper
    than ``CLOSED_MAX_DEPTH``: that depth's), for a closed loop of SGLang's built-in."""
    out = []
    for acc in accs:
        row = [[min(x, k) for x in acc] for k in range(CLOSED_MAX_DEPTH + 1)]
        out.append(row + [row[-1]] * (MAX_NUM_STEPS - CLOSED_MAX_DEPTH))
    return out


def _time_interleaved(
    bodies: dict[str, Callable[[], None]], repeats: int, steps: int
) -> dict[str, list[float]]:
    """Seconds per step of every body, ``repeats`` samples each, taken in turn (body 1, 2, ..., 1, 2, ...)
    so that a slow spell of the machine falls on all of them alike."""
    for body in bodies.values():
        body()  # warm-up: first-touch allocations and caches are not what a running engine sees
    samples: dict[str, list[float]] = {label: [] for label in bodies}
    pc = time.perf_counter_ns
    for _ in range(repeats):
        for label, body in bodies.items():
            t0 = pc()
            body()
            samples[label].append((pc() - t0) / steps * 1e-9)
    return samples


def _summing(accs: Sequence[list[int]]) -> Callable[[], None]:
    def run() -> None:
        for a in accs:
            sum(a)

    return run


def construction_bodies(args_list: Sequence[tuple[Any, ...]]) -> dict[str, Callable[[], None]]:
    fast, full = StepStats.fast, StepStats

    def run_fast() -> None:
        for a in args_list:
            fast(*a)

    def run_full() -> None:
        for a in args_list:
            full(*a)

    return {"StepStats.fast": run_fast, "StepStats (validating)": run_full}


def policy_body(name: str, stats: Sequence[StepStats]) -> Callable[[], None]:
    """decide() over the same prebuilt stats whatever it decides (the open loop)."""
    policy = make_policy(name)
    decide = policy.decide
    for s in stats[: min(len(stats), 500)]:  # warm state (EWMAs, learned costs) before timing
        decide(s)

    def run() -> None:
        for s in stats:
            decide(s)

    return run


def policy_body_closed(name: str, rows: Sequence[Sequence[StepStats]]) -> Callable[[], None]:
    """decide() in a closed loop: each step's stats are those of the depth decided for it."""
    policy = make_policy(name)
    decide = policy.decide
    state = [DEPTH]

    def run() -> None:
        k = state[0]
        for row in rows:
            k = decide(row[k]).num_steps
        state[0] = k

    for _ in range(max(1, 500 // len(rows))):  # warm state before timing, as open loop
        run()
    return run


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


def sglang_body(
    cls: type[Any], cfg_path: str | None, batch: int, accs: Sequence[list[int]], closed: bool
) -> Callable[[], None]:
    """SGLang's built-in: ``get_steps_for_batch`` + ``on_verify_complete`` per step; closed, it is fed the
    counts of the depth it chose (capped there), open, the depth-3 counts."""
    import logging

    logging.getLogger("sglang").setLevel(logging.WARNING)
    params = cls(DEPTH, cfg_path)
    get, feed = params.get_steps_for_batch, params.on_verify_complete
    capped = _capped(accs)

    def run_open() -> None:
        for acc in accs:
            get(batch)
            feed(acc, batch)

    def run_closed() -> None:
        for row in capped:
            feed(row[get(batch)], batch)

    run = run_closed if closed else run_open
    for _ in range(max(1, 500 // len(accs))):
        run()
    return run


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=256, help="decide() calls per timed loop")
    ap.add_argument("--repeats", type=int, default=201, help="timed loops per measurement (median reported)")
    ap.add_argument("--distinct", type=int, default=32, help="different StepStats cycled through per loop")
    ap.add_argument("--policies", nargs="*", default=None, help="default: every registered policy")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--no-ids", action="store_true", help="leave the request-id fields None")
    ap.add_argument(
        "--open-loop",
        action="store_true",
        help="feed a depth-3 step whatever was decided (the figures before the loop was closed)",
    )
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
        "loop": "open" if args.open_loop else "closed",
        "sglang": sglang_note,
        "per_step_s": {},
        "vs_sglang_default": {},
    }
    ref_row = "sglang built-in (default config)" if sglang_cls is not None else None
    table: dict[str, dict[int, float]] = {}
    ratios: dict[str, dict[int, float]] = {}
    for b in BATCH_SIZES:
        raw = _inputs(b, args.steps, args.distinct, seed=b, ids=not args.no_ids)
        stats = [StepStats.fast(*a) for a in raw]
        bodies = construction_bodies(raw)
        rows = None if args.open_loop else _closed_rows(raw)
        for name in names:
            bodies[f"decide: {name}"] = (
                policy_body(name, stats) if rows is None else policy_body_closed(name, rows)
            )
        if "acceptance" in names:  # the adapter-side alternative: the mean computed where it is free
            pre = [
                StepStats.fast(b, w, L, k, None, None, t, sum(acc) / len(acc), *rest)
                for b, w, L, k, acc, _, t, _, *rest in raw
            ]
            bodies["decide: acceptance (mean_accepted given)"] = policy_body("acceptance", pre)
        accs = [a[4] for a in raw]
        if sglang_cls is not None:
            closed = not args.open_loop
            bodies["sglang built-in (default config)"] = sglang_body(sglang_cls, None, b, accs, closed)
            bodies["sglang built-in (speculating at every bs)"] = sglang_body(
                sglang_cls, always_on_cfg, b, accs, closed
            )
        bodies["reference: sum(accepted) alone"] = _summing(accs)
        samples = _time_interleaved(bodies, args.repeats, args.steps)
        for label, xs in samples.items():
            table.setdefault(label, {})[b] = statistics.median(xs)
            ref = samples[ref_row] if ref_row else [SGLANG_FALLBACK_S] * len(xs)
            # the ratio of each turn's pair: both loops ran within a millisecond of each other
            ratios.setdefault(label, {})[b] = statistics.median(x / r for x, r in zip(xs, ref, strict=True))
    if always_on_cfg:
        os.unlink(always_on_cfg)

    print(
        f"# decide() and StepStats cost, {results['loop']} loop, median of {args.repeats} loops x "
        f"{args.steps} steps, every row's loops taken in turn; "
        f"Python {results['python']} {results['machine']}; {sglang_note}"
    )
    if ref_row is None:
        print(f"# SGLang not importable: ratios are against {SGLANG_FALLBACK_S * 1e6:.1f} us/step instead")
    vs = "vs SGLang default, median of paired loops" if ref_row else f"vs {SGLANG_FALLBACK_S * 1e6:.0f} us"
    head = "| | " + " | ".join(f"bs={b} (us)" for b in BATCH_SIZES) + f" | {vs} (bs 1/64/256) |"
    print(head)
    print("|---|" + "---:|" * (len(BATCH_SIZES) + 1))
    for label, row in table.items():
        ratio = " / ".join(f"{ratios[label][b]:.2f}x" for b in BATCH_SIZES)
        print(f"| {label} | " + " | ".join(f"{row[b] * 1e6:.3f}" for b in BATCH_SIZES) + f" | {ratio} |")
        results["per_step_s"][label] = {str(b): row[b] for b in BATCH_SIZES}
        results["vs_sglang_default"][label] = {str(b): ratios[label][b] for b in BATCH_SIZES}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
