"""Per-step CPU cost of each adapter's own step path around decide(), without an engine.

Usage (from the repository root)::

    python benchmarks/bench_adapter_step.py                 # static and cost_model, batch 1, 64, 256
    python benchmarks/bench_adapter_step.py --policies static --repeats 51 --json out.json

What one step costs the engine's thread, per adapter, with the production assembly (``AdapterRuntime``,
metrics and trace off unless ``--metrics``):

* ``sglang 0.5.23``: ``SpecPolicyParams.get_steps_for_batch`` then ``on_verify_complete`` (SGLang's two
  calls per round);
* ``sglang legacy v1``: ``StepRuntime.begin_decode``, ``end_decode`` and ``on_result`` of the same step;
* ``sglang legacy v2``: the same, the acceptance one step late (the overlap scheduler's order), step times
  from (stand-in) CUDA events;
* ``vllm``: ``StepLedger.on_schedule``, one ``on_draft`` per request and ``on_update`` (sync scheduling).

Each figure is the median over ``--repeats`` loops of ``--steps`` steps, loop overhead included; ``--best``
reports the fastest loop instead, which a loaded machine disturbs less (compare trees with it, interleaved).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from specpolicy.runtime.runtime import AdapterRuntime
from specpolicy.runtime.settings import AdapterSettings

BATCH_SIZES = (1, 64, 256)
DEPTH = 3
#: Depths the engine runs (cost_model chooses among 0..7).
ALLOWED = range(8)


def _settings(policy: str, metrics: bool) -> AdapterSettings:
    spec: Any = {"name": "static", "num_steps": DEPTH} if policy == "static" else policy
    return AdapterSettings.build(spec, metrics=metrics)


def _runtime(settings: AdapterSettings, allowed: Sequence[int]) -> AdapterRuntime:
    return AdapterRuntime(
        settings, engine="bench", engine_version="0", path="bench", allowed_steps=allowed, default_steps=DEPTH
    )


def _time(step: Callable[[int], None], steps: int, repeats: int, best: bool = False) -> float:
    for i in range(steps):  # warm-up: first-touch allocations, learning policies' tables
        step(i)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for i in range(steps):
            step(i)
        samples.append((time.perf_counter_ns() - t0) / steps)
    return (min(samples) if best else statistics.median(samples)) * 1e-9


def sglang_adaptive(settings: AdapterSettings, batch: int) -> Callable[[int], None]:
    try:
        from specpolicy.adapters.sglang.adaptive import SpecPolicyParams
    except ImportError:  # its name at 1f76902
        from specpolicy.adapters.sglang.v0_5_23 import SpecPolicyParams  # type: ignore[no-redef]

    params = SpecPolicyParams(_runtime(settings, ALLOWED), DEPTH)
    get, feed = params.get_steps_for_batch, params.on_verify_complete
    accs = [[(i + j) % (DEPTH + 1) for j in range(batch)] for i in range(16)]

    def step(i: int) -> None:
        get(batch)
        feed(accs[i & 15], batch)

    return step


def sglang_legacy(settings: AdapterSettings, batch: int, path: str) -> Callable[[int], None]:
    import inspect

    from specpolicy.adapters.sglang.legacy import runtime as legacy

    if "settings" in inspect.signature(legacy.make_runtime).parameters:
        rt = legacy.make_runtime(settings, launch_depth=DEPTH, path=path)  # type: ignore[arg-type]
        by_step = True
    else:  # the production assembly before the controller paired outcomes (install.attach at 1f76902)
        art = _runtime(settings, ALLOWED)
        ctl = art.controller
        ctl.policy = legacy.OnOffAtDepth(art.policy, DEPTH)
        ctl.allowed_steps = frozenset({0, DEPTH})
        ctl.steps_by_depth = {0: 0, DEPTH: 0}
        rt = legacy.StepRuntime(art.decide, ctl, launch_depth=DEPTH, path=path)  # type: ignore[arg-type,call-arg]
        by_step = False
    if path == "v2":  # the overlap worker times steps with CUDA events: events that are always complete
        from specpolicy.adapters.sglang.legacy.gpu_timer import GpuStepTimer

        rt.gpu_timer = GpuStepTimer(_DoneEvent)
    accs = [[(i + j) % (DEPTH + 1) for j in range(batch)] for i in range(16)]
    begin, end, result = rt.begin_decode, rt.end_decode, rt.on_result
    lag = 1 if path == "v2" else 0
    if hasattr(rt, "controller"):  # before decisions came back with their number
        ctl = rt.controller

        def current() -> int:
            return int(ctl.step)
    else:

        def current() -> int:
            return rt.current_step

    def step(i: int) -> None:
        skip = begin(batch, 1000 * batch)
        end()
        n = current()
        if n > lag:
            result(n - lag if by_step else (0 if skip else DEPTH), accs[i & 15])

    return step


class _DoneEvent:
    """A CUDA event stand-in whose step has always finished (5 ms)."""

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: object) -> float:
        return 5.0


def vllm_ledger(settings: AdapterSettings, batch: int) -> Callable[[int], None]:
    import inspect

    from specpolicy.adapters.vllm.ledger import StepLedger

    art = _runtime(settings, ALLOWED)
    ctl = art.controller
    params = inspect.signature(StepLedger).parameters
    if "path" in params:  # as CoreBridge builds it: ids kept only for a policy that reads them
        ledger = StepLedger(art, request_ids=art.wants_request_ids)
    elif "request_ids" in params:
        ledger = StepLedger(art.decide, ctl, request_ids=art.wants_request_ids)
    elif "controller" in params:
        ledger = StepLedger(art.decide, ctl)
    else:
        ledger = StepLedger(art.decide, lambda: ctl.step, lambda d, t: ctl.step_time(t, d))  # type: ignore[arg-type,attr-defined]
    keys = [object() for _ in range(16)]
    clock = [0.0]
    schedule, draft, update = ledger.on_schedule, ledger.on_draft, ledger.on_update

    def step(i: int) -> None:
        key = keys[i & 15]
        clock[0] += 0.01
        schedule(key, batch, 0, 1000.0, True, clock[0])
        for j in range(batch):
            draft(DEPTH, j % (DEPTH + 1))
        update(key, clock[0] + 0.005)

    return step


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=101)
    ap.add_argument("--policies", nargs="*", default=["static", "cost_model"])
    ap.add_argument("--metrics", action="store_true", help="Prometheus metrics on, as in serving")
    ap.add_argument("--best", action="store_true", help="the fastest loop instead of the median")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    table: dict[str, dict[int, float]] = {}
    for policy in args.policies:
        settings = _settings(policy, args.metrics)
        for b in BATCH_SIZES:
            rows: dict[str, Callable[[int], None]] = {
                "sglang 0.5.23": sglang_adaptive(settings, b),
                "sglang legacy v1": sglang_legacy(settings, b, "v1"),
                "sglang legacy v2": sglang_legacy(settings, b, "v2"),
                "vllm": vllm_ledger(settings, b),
            }
            for label, step in rows.items():
                cell = _time(step, args.steps, args.repeats, args.best)
                table.setdefault(f"{label} ({policy})", {})[b] = cell
    stat = "fastest" if args.best else "median"
    print(
        f"# adapter step path, {stat} of {args.repeats} loops x {args.steps} steps, metrics "
        f"{'on' if args.metrics else 'off'}, trace off"
    )
    print("| | " + " | ".join(f"bs={b} (us)" for b in BATCH_SIZES) + " |")
    print("|---|" + "---:|" * len(BATCH_SIZES))
    for label, row in table.items():
        print(f"| {label} | " + " | ".join(f"{row[b] * 1e6:.3f}" for b in BATCH_SIZES) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: {str(b): v for b, v in row.items()} for k, row in table.items()}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
