"""Per-step cost of the control-file check (``runtime.control_file``) against decide()'s own cost.

Usage (from the repository root)::

    python benchmarks/bench_control_check.py                     # static and cost_model, every 64 and 256
    python benchmarks/bench_control_check.py --every 16 256 --repeats 41 --json out.json

What a step pays for the check, three ways, all medians over ``--repeats`` rounds:

* ``step`` columns: one guarded step (``AdapterRuntime.decide`` on ``next_stats``, then ``outcome``) with no
  control file, and with one checked every N steps (the file exists and does not change), interleaved in
  each round; the extra per step is the difference of the two medians (``on-off``), a bound within the
  machine's noise: the check's own cost is far below a loaded machine's spread between two loops.
* ``check``: one check of an unchanged file (``ControlWatch.poll``: one ``os.stat``), and that divided by N.
* ``compare``: the comparison every decision makes (``step >= _poll_at``), timed in a loop of its own
  against the same loop without it; every step pays it, control file or not.

What watching adds per step is check / N plus the comparison, given relative to decide()'s cost: the
policy's ``decide()`` alone on the same stats, and the whole guarded step without a control file
(``/step``). The figures are per step of the engine's thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specpolicy.registry import parse_config
from specpolicy.runtime.control_file import write_control
from specpolicy.runtime.runtime import AdapterRuntime
from specpolicy.runtime.settings import AdapterSettings

DEPTH = 3
BATCH = 8


def _spec(policy: str) -> Any:
    return {"name": "static", "num_steps": DEPTH} if policy == "static" else policy


def _runtime(policy: str, control: Path | None, every: int) -> AdapterRuntime:
    fields: dict[str, Any] = {"metrics": False}
    if control is not None:
        fields.update(control_path=control, control_every=every)
    return AdapterRuntime(
        AdapterSettings.build(_spec(policy), **fields),
        engine="bench",
        engine_version="0",
        path="bench",
        allowed_steps=range(8),
        default_steps=DEPTH,
    )


def _step_loop(rt: AdapterRuntime) -> Callable[[int], None]:
    c = rt.controller
    decide, next_stats, outcome = rt.decide, c.next_stats, c.outcome
    accs = [[(i + j) % (DEPTH + 1) for j in range(BATCH)] for i in range(16)]

    def step(i: int) -> None:
        decide(next_stats(BATCH, 0, 512.0))
        outcome(c.step, accs[i & 15], 0.02)

    return step


def _ns(step: Callable[[int], None], steps: int) -> float:
    t0 = time.perf_counter_ns()
    for i in range(steps):
        step(i)
    return (time.perf_counter_ns() - t0) / steps


def _decide_only(policy: str) -> Callable[[int], None]:
    rt = _runtime(policy, None, 1)
    pol = rt.policy
    c = rt.controller
    stats = [c.next_stats(BATCH, 0, 512.0)]
    for i in range(64):  # stats with an outcome, as in the step loop
        rt.decide(stats[-1])
        c.outcome(c.step, [(i + j) % (DEPTH + 1) for j in range(BATCH)], 0.02)
        stats.append(c.next_stats(BATCH, 0, 512.0))
    ring = stats[-16:]
    decide = pol.decide

    def step(i: int) -> None:
        decide(ring[i & 15])

    return step


class _Holder:
    __slots__ = ("step", "_poll_at")

    def __init__(self) -> None:
        self.step = 0
        self._poll_at = 1 << 62


def _compare_ns(steps: int) -> float:
    """The decision's comparison, against the same loop without it (ns per comparison)."""
    h = _Holder()

    def with_it(n: int) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            if h.step >= h._poll_at:
                pass
        return (time.perf_counter_ns() - t0) / n

    def without(n: int) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            pass
        return (time.perf_counter_ns() - t0) / n

    return with_it(steps) - without(steps)


def run(
    policies: Sequence[str], everies: Sequence[int], steps: int, repeats: int, root: Path
) -> dict[str, Any]:
    ctl = root / "control.json"
    write_control(ctl, parse_config({"name": "static", "num_steps": DEPTH}))
    out: dict[str, Any] = {"batch_size": BATCH, "steps": steps, "repeats": repeats, "policies": {}}
    # the check alone: ControlWatch.poll on an unchanged file
    watch_rt = _runtime("static", ctl, 1)
    assert watch_rt.control is not None and watch_rt.control.watch is not None
    poll = watch_rt.control.watch.poll
    check = statistics.median(_ns(poll, 2000) for _ in range(repeats))
    compare = statistics.median(_compare_ns(steps * 4) for _ in range(repeats))
    out["check_ns"] = check
    out["compare_ns"] = compare
    for policy in policies:
        loops: dict[str, Callable[[int], None]] = {"off": _step_loop(_runtime(policy, None, 1))}
        for n in everies:
            loops[f"every {n}"] = _step_loop(_runtime(policy, ctl, n))
        loops["decide only"] = _decide_only(policy)
        for loop in loops.values():  # warm-up: first touches, learning policies' tables
            _ns(loop, steps)
        samples: dict[str, list[float]] = {k: [] for k in loops}
        for _ in range(repeats):  # interleaved: a slow spell of the machine falls on every row
            for name, loop in loops.items():
                samples[name].append(_ns(loop, steps))
        med = {k: statistics.median(v) for k, v in samples.items()}
        row: dict[str, Any] = {"decide_ns": med["decide only"], "step_off_ns": med["off"], "every": {}}
        for n in everies:
            extra = med[f"every {n}"] - med["off"]
            amortised = check / n
            row["every"][str(n)] = {
                "step_ns": med[f"every {n}"],
                "extra_step_ns": extra,
                "extra_vs_decide": extra / med["decide only"],
                "check_per_step_ns": amortised,
                "check_per_step_vs_decide": amortised / med["decide only"],
                "check_per_step_vs_step": amortised / med["off"],
                # what watching adds per step, from its two parts: the check over N, and the comparison
                "total_vs_decide": (amortised + compare) / med["decide only"],
                "total_vs_step": (amortised + compare) / med["off"],
            }
        row["compare_vs_decide"] = compare / med["decide only"]
        out["policies"][policy] = row
    return out


def format_report(res: dict[str, Any]) -> str:
    lines = [
        f"control-file check, batch {res['batch_size']}, medians of {res['repeats']} rounds of "
        f"{res['steps']} steps (ns per step)",
        f"one check of an unchanged file (os.stat): {res['check_ns']:.0f} ns; "
        f"the comparison every decision makes: {res['compare_ns']:.1f} ns",
        "policy      decide()  step(off)  every N  step(on)  on-off  check/N  (check/N+compare)/decide  "
        "/step",
    ]
    for policy, row in res["policies"].items():
        for n, e in row["every"].items():
            lines.append(
                f"{policy:<11} {row['decide_ns']:8.0f}  {row['step_off_ns']:9.0f}  {n:>7}  "
                f"{e['step_ns']:8.0f}  {e['extra_step_ns']:6.0f}  {e['check_per_step_ns']:7.1f}  "
                f"{e['total_vs_decide']:24.2%}  {e['total_vs_step']:5.2%}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--policies", nargs="+", default=["static", "cost_model"])
    ap.add_argument("--every", nargs="+", type=int, default=[64, 256])
    ap.add_argument("--steps", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        res = run(args.policies, args.every, args.steps, args.repeats, Path(tmp))
    print(format_report(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
