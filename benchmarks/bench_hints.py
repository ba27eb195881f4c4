"""Per-step cost of the per-request hints, relative to decide()'s own cost.

Usage (from the repository root)::

    PYTHONPATH=$PWD python benchmarks/bench_hints.py                 # batch 1, 64, 256
    PYTHONPATH=$PWD python benchmarks/bench_hints.py --json out.json --repeats 31 --steps 4000

What a step pays for hints, measured on its own, in a plain loop over prebuilt inputs (median over
``--repeats`` of loop time / ``--steps``, loop overhead included):

* ``idle``: no request has a hint (the common case): the adapter's check that no hinted request is alive
  and the controller's check that the StepStats carry no hints.
* ``sglang``: ``--hinted`` of the batch's requests have a hint: SGLang's ``RequestHints.of_batch`` (one
  dict lookup per request of the batch, the aggregate) and the controller's batch rule.
* ``vllm``: the same batch on vLLM: the per-decode-request lookup in the scheduler's loop, the aggregate,
  the per-request trim of the hinted requests' drafts before ``schedule()`` and the controller's rule.

Each is reported beside the median cost of ``decide()`` of ``cost_model`` and ``threshold`` on the same
batch (a StepStats of a step that speculated 3 deep, as ``bench_decide`` builds them), as a percentage.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from specpolicy import StepStats, make_policy
from specpolicy.adapters.sglang.hints import RequestHints as SglangHints
from specpolicy.adapters.vllm.hints import RequestHints as VllmHints
from specpolicy.hints import HINT_KEY, HintBook, aggregate
from specpolicy.runtime.controller import StepController

BATCH_SIZES = (1, 64, 256)
DEPTH = 3
POLICIES = ("cost_model", "threshold")


def _median_per_step(run: Callable[[], None], steps: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def _stats(batch: int, rng: random.Random, n: int, hints: Any = None) -> list[StepStats]:
    out = []
    for i in range(n):
        acc = [rng.randint(0, DEPTH) for _ in range(batch)]
        out.append(
            StepStats.fast(
                batch, 0, 1000.0 + i, DEPTH, acc, None, 0.02, None, batch, DEPTH, 1000.0, None, None, hints
            )
        )
    return out


def _decide_cost(name: str, stats: list[StepStats], steps: int, repeats: int) -> float:
    policy = make_policy(name)
    decide = policy.decide
    n = len(stats)

    def run() -> None:
        for i in range(steps):
            decide(stats[i % n])

    run()  # warm
    return _median_per_step(run, steps, repeats)


class _Req:
    """The fields the adapters read of a request: SGLang's ``rid`` / ``sampling_params.custom_params`` /
    ``finished()``, vLLM's ``spec_token_ids`` / ``is_finished()``."""

    __slots__ = ("rid", "sampling_params", "spec_token_ids")

    def __init__(self, rid: str, params: Any) -> None:
        self.rid = rid
        self.sampling_params = SimpleNamespace(custom_params=params)
        self.spec_token_ids = [5] * DEPTH

    def finished(self) -> bool:
        return False

    def is_finished(self) -> bool:
        return False


def _empty(steps: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(steps):
            pass

    return run


def _vllm_request(r: _Req) -> Any:
    """A vLLM request as the adapter reads it: a decoding request with K drafts."""
    return SimpleNamespace(
        request_id=r.rid,
        sampling_params=SimpleNamespace(extra_args=r.sampling_params.custom_params),
        num_computed_tokens=99,
        num_output_placeholders=0,
        num_tokens=100,
        num_output_tokens=10,
        spec_token_ids=[5] * DEPTH,
        is_finished=lambda: False,
    )


def measure(batch: int, hinted: float, steps: int, repeats: int, seed: int = 0) -> dict[str, Any]:
    """One batch size: the hint paths and decide(), per step, in ns, loop overhead subtracted."""
    rng = random.Random(seed)
    n_hint = max(1, round(batch * hinted)) if hinted > 0 else 0
    reqs = [
        _Req(f"r{i}", {HINT_KEY: "off" if i % 2 else "max_depth=2"} if i < n_hint else None)
        for i in range(batch)
    ]
    book = HintBook()
    sglang = SglangHints(book)
    sglang.on_extend(reqs)
    idle = SglangHints(HintBook())
    ctl = StepController(make_policy("static"), allowed_steps=range(DEPTH + 1), default_steps=DEPTH)
    plain = _stats(batch, rng, 1)[0]
    hinted_stats = _stats(batch, rng, 1, aggregate(book.live.values()))[0]
    limit = ctl._hinted
    hints_index = StepStats._fields.index("hints")

    live = idle.live

    def run_idle() -> None:  # the adapter's check, then the controller's, as the step path has them
        for _ in range(steps):
            h = idle.of_batch(reqs) if live else None
            if plain[hints_index] is not None and h is not None:
                limit(DEPTH, plain)

    def run_sglang() -> None:  # the same batch as the last step (a membership change rescans: see below)
        for _ in range(steps):
            h = sglang.of_batch(reqs)
            if h is not None:
                limit(DEPTH, hinted_stats)

    def run_sglang_rescan() -> None:  # every step a new batch list: the O(batch) scan
        lists = [list(reqs), list(reqs)]
        for i in range(steps):
            h = sglang.of_batch(lists[i & 1])
            if h is not None:
                limit(DEPTH, hinted_stats)

    vreqs = {r.rid: _vllm_request(r) for r in reqs}
    vllm = VllmHints(HintBook())
    for v in vreqs.values():
        vllm.admit(v)
    scheduled = {rid: 1 + DEPTH for rid in vreqs}
    hinted_v = [vreqs[rid] for rid in vllm.live]

    def run_vllm() -> None:  # the trim before schedule(), the hints of the step, the controller's rule
        for _ in range(steps):
            for v in hinted_v:  # the drafter proposed K for everyone (engine work, subtracted below)
                v.spec_token_ids = [5] * DEPTH
            vllm.trim(vreqs)
            if vllm.of_step(scheduled, vreqs) is not None:
                limit(DEPTH, hinted_stats)

    def refill() -> None:
        for _ in range(steps):
            for v in hinted_v:
                v.spec_token_ids = [5] * DEPTH

    loop = _median_per_step(_empty(steps), steps, repeats)
    out: dict[str, Any] = {"batch": batch, "hinted_requests": n_hint}
    for label, fn in (
        ("idle", run_idle),
        ("sglang", run_sglang),
        ("sglang_rescan", run_sglang_rescan),
        ("vllm", run_vllm),
    ):
        fn()
        out[f"{label}_ns"] = max(0.0, (_median_per_step(fn, steps, repeats) - loop) * 1e9)
    out["vllm_ns"] = max(0.0, out["vllm_ns"] - (_median_per_step(refill, steps, repeats) - loop) * 1e9)
    stats = _stats(batch, rng, 32)
    for name in POLICIES:
        out[f"decide_{name}_ns"] = max(0.0, (_decide_cost(name, stats, steps, repeats) - loop) * 1e9)
    return out


_COLS = ("idle", "sglang", "sglang_rescan", "vllm")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--hinted", type=float, default=0.05, help="share of the batch with a hint (0.05)")
    ap.add_argument("--json", metavar="OUT.json")
    args = ap.parse_args(argv)
    rows = [measure(b, args.hinted, args.steps, args.repeats) for b in BATCH_SIZES]
    print(f"per-step cost of hints, ns (median of {args.repeats} x {args.steps} steps, loop overhead out)")
    print(f"{'batch':>5} {'hinted':>6} " + " ".join(f"{c:>13}" for c in _COLS)
          + " " + " ".join(f"{'decide ' + p:>18}" for p in POLICIES))
    for r in rows:
        cells = " ".join(f"{r[c + '_ns']:>13.1f}" for c in _COLS)
        decides = " ".join(f"{r['decide_' + p + '_ns']:>18.1f}" for p in POLICIES)
        print(f"{r['batch']:>5} {r['hinted_requests']:>6} {cells} {decides}")
    for p in POLICIES:
        print(f"as % of {p}'s decide():")
        for r in rows:
            d = r[f"decide_{p}_ns"] or float("nan")
            print(f"{r['batch']:>5} {r['hinted_requests']:>6} "
                  + " ".join(f"{100 * r[c + '_ns'] / d:>12.1f}%" for c in _COLS))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            doc = {"steps": args.steps, "repeats": args.repeats, "hinted": args.hinted, "rows": rows}
            json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
