"""Host work of one legacy-SGLang off step, by worker and drafter, on the CPU with a stand-in forward.

Usage, inside an engine venv (the real SGLang 0.5.12.post1 or 0.5.10.post1 worker, scheduler and batch code)::

    .venvs/sglang-0.5.12.post1/bin/python benchmarks/bench_off_step.py [--steps 40] [--repeats 31] [--ops]

It drives the adapter's off step through the real ``EAGLEWorker.forward_batch_generation`` (v1) and the real
``Scheduler.run_batch`` with its FutureMap and ``process_batch_result_decode`` around
``EAGLEWorkerV2.forward_batch_generation`` (v2), over the CPU test batch of ``tests/engines/sglang`` (3
requests; the target's forward and the drafter are stand-ins that cost next to nothing), and prints the
median per off step of each configuration, their loops interleaved: a draft model with the lazy catch-up,
an EAGLE drafter with the lazy catch-up (hidden states kept), and on v1 an EAGLE drafter with SGLang's
per-step draft extend (a stand-in here, so its own GPU cost is not in the figure). Each configuration runs
with the global server arguments of its engine (``speculative_algorithm`` STANDALONE for the draft model,
which decides what SGLang's v2 FutureMap carries). An EAGLE-3 drafter runs the EAGLE code path with a wider
hidden-state window (the target's auxiliary layers): the same ops, larger copies.

The first row is the control: what a speculation-free engine runs per decode step for the same batch, in
the places the v1 off step does it (``ScheduleBatch.prepare_for_decode``, SGLang's own
``get_model_worker_batch``, which the v1 rows run too, the same stand-in forward, then the tokens read and
each request's append and finish check, which ``process_batch_result_decode`` does there). Each row's time
is printed whole and less the stand-in forwards' own time.

What it separates: the host work the adapter and SGLang's bookkeeping add to an off step for each drafter,
from what the GPU forward costs (measured live instead). ``--ops`` also counts, per off step, the tensor
ops dispatched (on a GPU most of them launch a kernel outside the CUDA graph; views do not), the tensors
allocated (ops whose output owns fresh storage) and the Python calls, leaving out what the stand-in model
forwards themselves dispatch and call (on a GPU: the target's decode graph, the drafter's extend); then
the same for the catch-up that an off step runs when the EAGLE hidden-state window is full (once every
``W`` off steps, W = 32 by default: divide by W for its share of each off step).
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

ROWS = (
    "speculation-free decode (v1 baseline)",
    "v1 draft model, lazy",
    "v1 EAGLE, lazy (hidden states kept)",
    "v1 EAGLE, per_step (extend stand-in)",
    "v2 draft model, lazy",
    "v2 EAGLE, lazy (hidden states kept)",
)


class _Row:
    """One configuration: ``make()`` builds a fresh worker and batch, ``step()`` runs one off step."""

    def __init__(self, algorithm: str | None, build: Callable[[], Callable[[], Any]]) -> None:
        self.algorithm = algorithm
        self.build = build
        self.step: Callable[[], Any] = lambda: None

    def make(self) -> _Row:
        from sglang.srt.server_args import get_global_server_args

        get_global_server_args().speculative_algorithm = self.algorithm
        self.step = self.build()
        return self


def _rows(names: Any) -> dict[str, _Row]:
    import legacy_support as ls
    import test_legacy_eagle_lazy as tel
    import test_legacy_off_decode as tod
    from sglang.srt.managers.scheduler import Scheduler

    from specpolicy.adapters.sglang.legacy import hooks
    from specpolicy.policies.static import StaticConfig, StaticPolicy

    def v1(make: Callable[[], Any]) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            v = make()
            v.batch.__dict__.pop("get_model_worker_batch", None)  # SGLang's own, as the live engine runs it
            w = v.setup.worker
            setattr(w, hooks.RT, tod._runtime(0))  # every step off: one runtime for the whole loop
            return lambda: w.forward_batch_generation(v.batch)

        return build

    def v2(make: Callable[[], tuple[Any, Any, Any]]) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            s, sched, batch = make()
            rt = ls.legacy_runtime(StaticPolicy(StaticConfig(num_steps=0)), launch_depth=3, path="v2")
            setattr(s.worker, hooks.RT, rt)
            setattr(s.draft_worker, hooks.RT, rt)

            def step() -> None:
                sched.process_batch_result_decode(batch, Scheduler.run_batch(sched, batch))

            return step

        return build

    def speculation_free() -> Callable[[], Any]:
        """What a speculation-free engine runs per decode step for the same batch, in the same places:
        ``ScheduleBatch.prepare_for_decode`` and ``get_model_worker_batch`` (the scheduler), the target
        forward (the same stand-in, left out), then the tokens read and each request's append and finish
        check (``process_batch_result_decode``, where a v1 off step does them inside its body)."""
        import off_decode_support as ods
        import torch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        alloc = ls.FakeAllocator()
        b = ls.make_v1_batch(names, tod.PROMPTS, tod.FIRST, alloc)
        b.__dict__.pop("get_model_worker_batch", None)
        b.spec_algorithm = SpeculativeAlgorithm.NONE
        b.spec_info = None
        b.seq_lens_sum = sum(tod.PROMPTS)
        b.output_ids = torch.tensor(tod.FIRST, dtype=torch.int64)
        b.orig_seq_lens = b.seq_lens.clone()
        for req, first in zip(b.reqs, tod.FIRST, strict=True):
            req.output_ids = [first]
        target = ods.DecodingFakeTarget()

        def step() -> None:
            b.prepare_for_decode()
            out = target.forward_batch_generation(b.get_model_worker_batch())
            b.output_ids = out.next_token_ids
            for req, tok in zip(b.reqs, out.next_token_ids.tolist(), strict=True):
                req.output_ids.append(tok)
                req.check_finished()

        return step

    def v2_draft() -> tuple[Any, Any, Any]:
        s, sched, batch, _, _, _ = tod._v2(names, lazy=True)
        return s, sched, batch

    def v2_eagle() -> tuple[Any, Any, Any]:
        s, sched, batch, _, _, _ = tel._v2_eagle(names)
        return s, sched, batch

    return dict(
        zip(
            ROWS,
            (
                _Row(None, speculation_free),
                _Row("STANDALONE", v1(lambda: tod.V1(names, lazy=True))),
                _Row("EAGLE", v1(lambda: tel.V1Eagle(names))),
                _Row("EAGLE", v1(lambda: tod.V1(names, lazy=False))),
                _Row("STANDALONE", v2(v2_draft)),
                _Row("EAGLE", v2(v2_eagle)),
            ),
            strict=True,
        )
    )


def _medians(rows: dict[str, _Row], steps: int, repeats: int) -> dict[str, tuple[float, float]]:
    """Median seconds per off step of each row, whole and less the stand-in forwards' own time, the rows'
    loops interleaved (a drift hits them alike)."""
    per_step: dict[str, list[tuple[float, float]]] = {label: [] for label in rows}
    for _ in range(repeats):
        for label, row in rows.items():
            step = row.make().step
            _STAND_IN_NS[0] = 0
            t0 = time.perf_counter_ns()
            for _ in range(steps):
                step()
            whole = time.perf_counter_ns() - t0
            per_step[label].append((whole / steps * 1e-9, (whole - _STAND_IN_NS[0]) / steps * 1e-9))
    return {
        label: (statistics.median(x[0] for x in xs), statistics.median(x[1] for x in xs))
        for label, xs in per_step.items()
    }


#: set while a stand-in model forward runs: what it dispatches is not the off step's (on a GPU the target's
#: decode forward is a CUDA graph replay, the drafter's catch-up extend its own forward)
_IN_STAND_IN = [False]
#: nanoseconds spent inside the stand-in forwards (left out of the "less stand-ins" figure)
_STAND_IN_NS = [0]


def _exclude_stand_ins(mp: Any) -> None:
    import off_decode_support as ods
    import test_legacy_off_decode as tod

    def outside(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            _IN_STAND_IN[0] = True
            t0 = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                _STAND_IN_NS[0] += time.perf_counter_ns() - t0
                _IN_STAND_IN[0] = False

        return run

    for cls, name in (
        (ods.DecodingFakeTarget, "forward_batch_generation"),
        (ods.KVDraftRunner, "forward"),
        (ods.EagleKVDraftRunner, "forward"),
        (tod.V1, "_draft_extend"),
    ):
        mp.setattr(cls, name, outside(cls.__dict__[name]))


class Counts:
    """Tensor ops (by name), allocations (ops whose output owns storage no input has) and Python calls."""

    def __init__(self) -> None:
        self.ops: collections.Counter[str] = collections.Counter()
        self.allocs: collections.Counter[str] = collections.Counter()
        self.calls = 0

    def __sub__(self, other: Counts) -> Counts:
        out = Counts()
        out.ops, out.allocs = self.ops - other.ops, self.allocs - other.allocs
        out.calls = self.calls - other.calls
        return out


def _count(fn: Callable[[], Any]) -> Counts:
    """The tensor ops and allocations of ``fn()``."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = Counts()

    def storages(xs: Any) -> set[int]:
        out: set[int] = set()
        for x in xs:
            if isinstance(x, (list, tuple)):
                out |= storages(x)
            elif isinstance(x, torch.Tensor):
                out.add(x.untyped_storage().data_ptr())
        return out

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            result = func(*args, **kwargs)
            if _IN_STAND_IN[0]:
                return result
            name = str(func.overloadpacket.__name__)
            counts.ops[name] += 1
            inputs = storages(list(args) + list(kwargs.values()))
            outs = result if isinstance(result, (list, tuple)) else (result,)
            if any(
                isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() not in inputs for o in outs
            ):
                counts.allocs[name] += 1
            return result

    with Count():
        fn()
    return counts


def _calls(fn: Callable[[], Any]) -> int:
    """The Python function calls of ``fn()`` (a run of its own: the op counter's frames are not in it)."""
    n = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal n
        if event == "call" and not _IN_STAND_IN[0]:
            n += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


def _op_counts(rows: dict[str, _Row], steps: int) -> dict[str, Counts]:
    """What each row dispatches over ``steps`` off steps, each on a fresh batch after one untimed step."""
    out: dict[str, Counts] = {}
    for label, row in rows.items():
        measured = []
        for count in (_count, _calls):
            step = row.make().step
            step()

            def loop(step: Callable[[], Any] = step) -> None:
                for _ in range(steps):
                    step()

            measured.append(count(loop))
        c = measured[0]
        assert isinstance(c, Counts) and isinstance(measured[1], int)
        c.calls = measured[1]
        out[label] = c
    return out


def _catch_up_counts(rows: dict[str, _Row]) -> dict[str, Counts]:
    """The catch-up an off step runs when the EAGLE window is full: that step's counts less a plain one's
    (a window of 4 positions here; the count of ops does not depend on it)."""
    import test_legacy_eagle_lazy as tel

    out: dict[str, Counts] = {}
    saved = tel.W
    tel.W = 4
    try:
        for label in (ROWS[2], ROWS[5]):
            full, plain = Counts(), Counts()
            for count in (_count, _calls):
                step = rows[label].make().step
                for _ in range(tel.W):
                    step()
                a = count(step)  # off step W + 1: catches the batch up to off step W first
                b = count(step)
                if isinstance(a, Counts) and isinstance(b, Counts):
                    full, plain = a, b
                else:
                    full.calls, plain.calls = int(a), int(b)
            out[label.split(",")[0] + ", catch-up of a full window"] = full - plain
    finally:
        tel.W = saved
    return out


def _fmt(c: Counts, per: int) -> str:
    top = ", ".join(f"{name} {n / per:g}" for name, n in c.ops.most_common())
    allocs = ", ".join(f"{name} {n / per:g}" for name, n in c.allocs.most_common())
    return (
        f"{sum(c.ops.values()) / per:6.1f} tensor ops, {sum(c.allocs.values()) / per:5.1f} allocations,"
        f" {c.calls / per:6.1f} Python calls ({top}; allocating: {allocs or 'none'})"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40, help="off steps per loop (default 40, at most 60)")
    p.add_argument("--repeats", type=int, default=31, help="loops, each on a fresh batch (default 31)")
    p.add_argument("--ops", action="store_true", help="also count ops, allocations and calls per off step")
    args = p.parse_args(argv)
    if not 1 <= args.steps <= 60:
        p.error("--steps must be 1-60 (the test requests stop at 64 new tokens)")
    import _stubs

    _stubs.install()
    import legacy_support as ls
    import off_decode_support as ods
    import pytest
    import sglang
    import test_legacy_eagle_lazy as tel

    from specpolicy.adapters import _patch as patching
    from specpolicy.adapters.sglang.legacy.install import _patch
    from specpolicy.adapters.sglang.legacy.one_token import FieldNames

    names = FieldNames.detect()
    with pytest.MonkeyPatch.context() as mp:
        ls.patch_v2(mp)  # the v1 kernels too
        ods.patch_forward_batch(mp)
        _exclude_stand_ins(mp)
        mp.setattr(tel, "W", args.steps + 2)  # no catch-up inside the timed loops: plain off steps
        _patch("0.5.12.post1" if sglang.__version__ == "0.5.12.post1" else "0.5.10.post1", names)
        try:
            rows = _rows(names)
            out = _medians(rows, args.steps, args.repeats)
            ops = _op_counts(rows, args.steps) if args.ops else {}
            catch_ups = _catch_up_counts(rows) if args.ops else {}
        finally:
            patching.unwrap_all()
    import specpolicy

    print(
        f"sglang {sglang.__version__}, specpolicy from {Path(specpolicy.__file__).parent};"
        f" median of {args.repeats} loops of {args.steps} off steps"
    )
    for label, (whole, own) in out.items():
        print(
            f"{label:38s} {whole * 1e6:8.1f} us per off step, {own * 1e6:6.1f} us less the stand-in forwards"
        )
    for label, c in ops.items():
        print(f"{label:38s} per off step: {_fmt(c, args.steps)}")
    for label, c in catch_ups.items():
        print(f"{label:38s} once per W off steps: {_fmt(c, 1)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
