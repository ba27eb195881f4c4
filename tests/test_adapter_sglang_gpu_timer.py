"""Step times on SGLang's overlap worker: CUDA events at each decode step's start, read without waiting."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy.adapters.sglang.legacy.gpu_timer import GpuStepTimer
from specpolicy.adapters.sglang.legacy.runtime import Path, StepRuntime, make_runtime
from specpolicy.mode import SpecMode
from specpolicy.runtime.decision import StepRecord
from specpolicy.runtime.settings import AdapterSettings
from specpolicy.stats import StepStats


class FakeGpu:
    """A GPU clock: ``done_until`` is how far the device has got; events recorded are stamped in order."""

    def __init__(self) -> None:
        self.queued = 0.0  # GPU time (ms) at which the last queued work starts
        self.done_until = 0.0
        self.made = 0

    def event(self) -> Any:
        gpu = self
        gpu.made += 1

        class Event:
            at: float | None = None

            def record(self) -> None:
                self.at = gpu.queued

            def query(self) -> bool:
                return self.at is not None and self.at <= gpu.done_until

            def elapsed_time(self, other: Any) -> float:
                assert self.query() and other.query(), "elapsed_time needs both events complete"
                return float(other.at - self.at)

        return Event()


@given(st.lists(st.floats(0.5, 50.0), min_size=3, max_size=60))
def test_each_step_time_is_reported_two_starts_later_and_exact(durations: list[float]) -> None:
    gpu = FakeGpu()
    timer = GpuStepTimer(gpu.event)
    seen: list[float | None] = []
    for d in durations:
        # SGLang's loop: before a step is launched, the GPU has reached the previous step's start.
        gpu.done_until = gpu.queued
        seen.append(timer.start())
        gpu.queued += d  # step i runs for d ms
    assert seen[:2] == [None, None]
    assert seen[2:] == pytest.approx([d / 1e3 for d in durations[: len(durations) - 2]])
    assert gpu.made <= 3  # events are reused, not allocated per step
    assert timer.incomplete == 0


def test_unfinished_steps_and_prefills_give_no_time() -> None:
    gpu = FakeGpu()
    timer = GpuStepTimer(gpu.event)
    for _ in range(2):
        timer.start()
        gpu.queued += 5.0
    assert timer.start() is None and timer.incomplete == 1  # the GPU has not reached the previous start
    gpu.done_until = gpu.queued
    timer.reset()  # a prefill ran: no interval spans it
    assert timer.start() is None
    gpu.queued += 3.0  # the first decode step after the prefill
    assert timer.start() is None
    gpu.queued += 4.0
    gpu.done_until = gpu.queued
    assert timer.start() == pytest.approx(3.0 / 1e3)  # that step's own time, not the prefill's
    assert gpu.made <= 4


class Recorder:
    def __init__(self) -> None:
        self.times: list[tuple[int, float | None]] = []
        self.stats: list[StepStats] = []

    def on_record(self, record: StepRecord) -> None:
        self.stats.append(record.stats)
        if record.step_time_s is not None:
            self.times.append((record.step, record.step_time_s))


class Alternate:
    """Off, on, off, on, ..."""

    n = 0

    def decide(self, stats: StepStats) -> SpecMode:
        self.n += 1
        return SpecMode.off() if self.n % 2 else SpecMode.on(3)

    def reset(self) -> None:
        pass


def _runtime(rec: Recorder, path: Path, policy: Any, ids: bool = True, **kw: Any) -> StepRuntime:
    """The production legacy assembly, with ``rec`` watching the controller; ``ids=False``: as for a policy
    that reads no request ids (outcomes go to the controller without them)."""
    settings = AdapterSettings.build("static", metrics=False)
    rt = make_runtime(settings, launch_depth=3, path=path, policy=policy, observers=[rec], **kw)
    if ids:
        return rt
    rt.runtime.wants_request_ids = False
    return StepRuntime(rt.runtime, launch_depth=3, path=path, gpu_timer=kw.get("gpu_timer"))


def test_overlap_runtime_bills_each_step_its_own_time() -> None:
    """Off every other step, off = 2 ms and on = 6 ms on the GPU. Each step is billed its own time, and the
    StepStats of a decision pairs one step's depth with that same step's time (both one step late, as the
    overlap scheduler delivers acceptance)."""
    rec = Recorder()
    gpu = FakeGpu()
    rt = _runtime(rec, "v2", Alternate(), gpu_timer=GpuStepTimer(gpu.event))
    depths: list[int] = []
    for j in range(12):
        if j >= 2:  # the scheduler resolved the acceptance of step j-2 before launching step j
            rt.on_result(j - 1, [1] * 8 if depths[j - 2] else None)  # decision numbers start at 1
        gpu.done_until = gpu.queued
        skip = rt.begin_decode(8, 800)
        depths.append(0 if skip else 3)
        rt.end_decode()
        gpu.queued += 2.0 if skip else 6.0
    rt.runtime.controller.close()
    cost = {0: 2.0 / 1e3, 3: 6.0 / 1e3}
    by_step = dict(rec.times)
    assert len(by_step) == 10 and all(t == pytest.approx(cost[depths[s - 1]]) for s, t in by_step.items())
    for j, stats in enumerate(rec.stats):
        if j >= 2:
            assert stats.last_num_steps == depths[j - 2]
            assert stats.last_step_time_s == pytest.approx(cost[depths[j - 2]])


class HostClock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("ids", [True, False])
@pytest.mark.parametrize("timing", ["cuda events", "host clock"])
@given(durations=st.lists(st.sampled_from([2.0, 6.0, 9.0]), min_size=3, max_size=30))
def test_overlap_stats_pair_depth_acceptance_batch_and_time_of_one_step(
    timing: str, ids: bool, durations: list[float]
) -> None:
    """SGLang's overlap loop (``event_loop_overlap``): ``run_batch(N)`` decides step N, then
    ``process_batch_result(N-1)`` delivers step N-1's acceptance. So the StepStats of step N+1 describe
    step N-1, and every outcome field must be step N-1's: its depth, its acceptance, its batch size and its
    own time (not the interval around step N). Step j lasts ``durations[j]`` ms, on the GPU and between
    two launches alike; batch sizes and acceptance differ per step, so a field from another step shows."""
    rec = Recorder()
    gpu = FakeGpu()
    clock = HostClock()
    timer = GpuStepTimer(gpu.event) if timing == "cuda events" else None
    rt = _runtime(rec, "v2", Alternate(), ids, gpu_timer=timer)
    rt._clock = clock
    depths: list[int] = []
    batch = [4 + j % 5 for j in range(len(durations))]
    accepted = [[j % 4] * batch[j] for j in range(len(durations))]
    for j, d in enumerate(durations):
        gpu.done_until = gpu.queued
        skip = rt.begin_decode(batch[j], (100 + j) * batch[j])  # run_batch(j): decision number j + 1
        depths.append(0 if skip else 3)
        rt.end_decode()
        if j >= 1:  # process_batch_result(j - 1)
            rt.on_result(j, accepted[j - 1] if depths[j - 1] else None)
        gpu.queued += d
        clock.t += d / 1e3
    rt.runtime.controller.close()
    for n, stats in enumerate(rec.stats):  # decision n + 1 of step n
        if stats.last_batch_size is None:
            continue  # nothing known yet
        src = n - 2  # the outcome fields describe the step two decisions back
        assert stats.last_batch_size == batch[src]
        assert stats.last_num_steps == stats.last_decided_steps == depths[src]
        assert stats.last_mean_seq_len == 100 + src
        assert stats.accepted_draft_tokens == (accepted[src] if depths[src] else None)
        if stats.last_step_time_s is not None:
            assert stats.last_step_time_s == pytest.approx(durations[src] / 1e3)
    timed = dict(rec.times)
    assert all(t == pytest.approx(durations[step - 1] / 1e3) for step, t in timed.items())
    assert len(timed) >= len(durations) - 3  # every step but the last few gets its own time


BATCHES = st.lists(
    st.tuples(
        st.sampled_from(["decode", "decode", "decode", "prefill"]),
        st.booleans(),  # the scheduler processes the previous result before running this batch (grammar)
        st.sampled_from([2.0, 6.0, 9.0]),  # how long the batch runs (ms)
    ),
    min_size=1,
    max_size=40,
)


@pytest.mark.parametrize("ids", [True, False])
@pytest.mark.parametrize("path,timing", [("v2", "cuda events"), ("v2", "host clock"), ("v1", "host clock")])
@given(batches=BATCHES)
def test_every_stats_describes_one_step_whatever_the_order(
    path: Path, timing: str, ids: bool, batches: list[tuple[str, bool, float]]
) -> None:
    """SGLang's loops with prefills in between and, on the overlap loop, batches whose previous result is
    processed first: whatever arrives when, the outcome fields of every StepStats come from one step (its
    depth, acceptance and batch size, each step's batch size unique) and its time, when given, is that
    step's own; each decision's trace record carries its own step's time or none."""
    rec = Recorder()
    gpu = FakeGpu()
    clock = HostClock()
    timer = GpuStepTimer(gpu.event) if timing == "cuda events" else None
    rt = _runtime(rec, path, Alternate(), ids, gpu_timer=timer)
    rt._clock = clock
    pending: list[int | None] = []  # results not yet processed, oldest first: decision number or None
    steps: list[tuple[int, int, float]] = []  # per decision: (depth, batch size, duration)

    def process() -> None:
        step = pending.pop(0)
        if step is not None:
            depth, bs, _ = steps[step - 1]
            rt.on_result(step, [step % 4] * bs if depth else None)

    for kind, first, duration in batches:
        gpu.done_until = gpu.queued  # the GPU has reached the start of the batch launched last
        if path == "v2" and first and pending:
            process()
        if kind == "decode":
            bs = len(steps) + 1
            skip = rt.begin_decode(bs, (10 + bs) * bs)
            rt.end_decode()
            steps.append((0 if skip else 3, bs, duration / 1e3))
            pending.append(rt.current_step)
        else:
            rt.on_non_decode()
            pending.append(None)
        gpu.queued += duration
        clock.t += duration / 1e3
        if path == "v1":
            process()  # non-overlap: each batch's result is processed right after it
        elif len(pending) > 1:
            process()  # overlap: the previous batch's result, after this one was launched
    rt.runtime.controller.close()
    timed = [step for step, _ in rec.times]
    assert timed == sorted(set(timed))  # each decision's record once, in order
    for n, stats in enumerate(rec.stats):
        if stats.last_batch_size is None:
            assert stats.last_num_steps == 0 and stats.last_step_time_s is None
            assert stats.last_decided_steps is None and stats.last_mean_seq_len is None
            continue
        src = stats.last_batch_size - 1
        assert src < n
        depth, bs, duration = steps[src]
        assert stats.last_num_steps == stats.last_decided_steps == depth
        assert stats.last_mean_seq_len == 10 + bs
        assert stats.accepted_draft_tokens == ([(src + 1) % 4] * bs if depth else None)
        if stats.last_step_time_s is not None:
            assert stats.last_step_time_s == pytest.approx(duration)
    for step, t in rec.times:
        assert t == pytest.approx(steps[step - 1][2])
