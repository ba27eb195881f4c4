"""Host time of one legacy-SGLang off step on the v1 worker, by drafter, on the CPU with a stand-in forward.

Usage, inside an engine venv (the real SGLang 0.5.12.post1 or 0.5.10.post1 worker and batch code)::

    .venvs/sglang-0.5.12.post1/bin/python benchmarks/bench_off_step.py [--steps 40] [--repeats 31] [--ops]

It drives the real ``EAGLEWorker.forward_batch_generation`` with the adapter's off step, over the CPU test
batch of ``tests/engines/sglang`` (3 requests; the target's forward and the drafter are stand-ins that cost
next to nothing), and prints the median per off step of each configuration, their loops interleaved: a
draft model with the lazy catch-up, an EAGLE drafter with the lazy catch-up (hidden states kept), and an
EAGLE drafter with SGLang's per-step draft extend (a stand-in here, so its own GPU cost is not in the
figure). What it separates: the host work the adapter and SGLang's bookkeeping add to an off step for each
drafter, from what the GPU forward costs (measured live instead). ``--ops`` also counts the tensor ops each
off step dispatches (on a GPU most of them launch a kernel outside the CUDA graph; views do not).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "engines" / "sglang"))


def _medians(rows: dict[str, Callable[[], Any]], steps: int, repeats: int) -> dict[str, float]:
    """Median seconds per off step of each row, the rows' loops interleaved (a drift hits them alike)."""
    per_step: dict[str, list[float]] = {label: [] for label in rows}
    for _ in range(repeats):
        for label, make in rows.items():
            v = make()
            t0 = time.perf_counter()
            for _ in range(steps):
                v.step(0)
            per_step[label].append((time.perf_counter() - t0) / steps)
    return {label: statistics.median(x) for label, x in per_step.items()}


def _op_counts(rows: dict[str, Callable[[], Any]], steps: int) -> dict[str, collections.Counter[str]]:
    """Tensor ops dispatched per row over ``steps`` off steps (on a GPU most launch a kernel outside the CUDA
    graph): where two drafters' off steps differ in launches, these counts say which ops."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: collections.Counter[str] = collections.Counter()

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.ops[str(func.overloadpacket.__name__)] += 1
            return func(*args, **(kwargs or {}))

    out: dict[str, collections.Counter[str]] = {}
    for label, make in rows.items():
        v = make()
        with Count() as c:
            for _ in range(steps):
                v.step(0)
        out[label] = c.ops
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40, help="off steps per loop (default 40)")
    p.add_argument("--repeats", type=int, default=31, help="loops, each on a fresh batch (default 31)")
    p.add_argument("--ops", action="store_true", help="also count the tensor ops of each off step")
    args = p.parse_args(argv)
    import _stubs

    _stubs.install()
    import legacy_support as ls
    import off_decode_support as ods
    import pytest
    import test_legacy_eagle_lazy as tel
    import test_legacy_off_decode as tod

    from specpolicy.adapters.sglang.legacy import hooks
    from specpolicy.adapters.sglang.legacy.one_token import FieldNames

    names = FieldNames.detect()
    tel.W = args.steps + 1  # no catch-up inside the loop: every step is a plain off step
    rows = {
        "draft model, lazy": lambda: tod.V1(names, lazy=True),
        "EAGLE, lazy (hidden states kept)": lambda: tel.V1Eagle(names),
        "EAGLE, per_step (extend stand-in)": lambda: tod.V1(names, lazy=False),
    }
    with pytest.MonkeyPatch.context() as mp:
        ls.patch_kernels(mp)
        ods.patch_forward_batch(mp)
        ls.wrap_v1_hooks(names)
        try:
            out = _medians(rows, args.steps, args.repeats)
            ops = _op_counts(rows, args.steps) if args.ops else {}
        finally:
            hooks.unwrap_all()
    for label, s in out.items():
        print(f"{label:36s} {s * 1e6:8.1f} us per off step")
    for label, c in ops.items():
        top = ", ".join(f"{name} {n / args.steps:g}" for name, n in c.most_common(8))
        print(f"{label:36s} {sum(c.values()) / args.steps:8.1f} tensor ops per off step ({top})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
