"""StepController under hostile policies: odd exceptions, huge messages, slow and hung decide() calls."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from specpolicy import SpecMode, StepStats
from specpolicy.runtime.budget import RETRY_INTERVAL
from specpolicy.runtime.controller import StepController
from specpolicy.runtime.runtime import AdapterRuntime
from specpolicy.runtime.settings import AdapterSettings
from specpolicy.runtime.watchdog import DecideWatchdog


class _Raises:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.calls = 0

    def decide(self, stats: StepStats) -> SpecMode:
        self.calls += 1
        raise self.exc

    def reset(self) -> None:
        pass


class _StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken too")


class _NotAnException(BaseException):
    pass


@pytest.mark.parametrize(
    "exc", [_StrRaises(), _NotAnException("odd"), GeneratorExit(), RuntimeError("x" * 2**20)],
    ids=["str-raises", "base-exception", "generator-exit", "1MiB-message"],
)
def test_odd_policy_exceptions_fall_back_to_the_default_and_are_logged_once(
    exc: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    ctl = StepController(_Raises(exc), allowed_steps=[0, 3], default_steps=3)
    with caplog.at_level(logging.ERROR, logger="specpolicy.adapter"):
        assert [ctl.decide(StepStats(1))[1] for _ in range(50)] == [3] * 50
    assert ctl.errors == 50
    records = [r for r in caplog.records if "policy error" in r.getMessage()]
    assert len(records) == 1
    assert len(records[0].getMessage()) < 600  # the message is cut, whatever the exception holds
    assert "running the default depth 3" in records[0].getMessage()


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(1)])
def test_keyboard_interrupt_and_system_exit_still_propagate(exc: BaseException) -> None:
    ctl = StepController(_Raises(exc), allowed_steps=[0, 3], default_steps=3)
    with pytest.raises(type(exc)):
        ctl.decide(StepStats(1))
    assert ctl.busy_since == 0.0


def test_error_kinds_logged_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    class Varying:
        n = 0

        def decide(self, stats: StepStats) -> SpecMode:
            self.n += 1
            raise ValueError(f"message {self.n}")

        def reset(self) -> None:
            pass

    ctl = StepController(Varying(), allowed_steps=[3], default_steps=3)
    with caplog.at_level(logging.ERROR, logger="specpolicy.adapter"):
        for _ in range(200):
            ctl.decide(StepStats(1))
    assert ctl.errors == 200 and len(caplog.records) == 16


def test_an_invalid_mode_with_a_huge_repr_is_reported_briefly(caplog: pytest.LogCaptureFixture) -> None:
    class Huge:
        def decide(self, stats: StepStats) -> Any:
            return ["x"] * 10**6

        def reset(self) -> None:
            pass

    ctl = StepController(Huge(), allowed_steps=[0, 3], default_steps=0)
    with caplog.at_level(logging.ERROR, logger="specpolicy.adapter"):
        assert ctl.decide(StepStats(1))[1] == 0
    assert "<list of 1000000 items>" in caplog.records[0].getMessage()


def test_observer_errors_say_the_step_kept_its_depth(caplog: pytest.LogCaptureFixture) -> None:
    class Bad:
        calls = 0

        def on_record(self, *a: Any) -> None:
            self.calls += 1
            raise OSError("disk full") if self.calls == 1 else _StrRaises()

    class On1:
        def decide(self, stats: StepStats) -> SpecMode:
            return SpecMode.on(1)

        def reset(self) -> None:
            pass

    ctl = StepController(On1(), allowed_steps=[0, 1, 3], default_steps=3, observers=[Bad()])
    with caplog.at_level(logging.ERROR, logger="specpolicy.adapter"):
        assert ctl.decide(StepStats(1))[1] == 1
        ctl.outcome(ctl.step, [1], 0.01)
        assert ctl.decide(StepStats(1))[1] == 1
        ctl.outcome(ctl.step, [1], 0.01)
    text = [r.getMessage() for r in caplog.records]
    assert len(text) == 2 and ctl.errors == 0
    assert all("default depth" not in t for t in text)
    assert "keeps its depth 1" in text[0] and "step time is not recorded" in text[1]


class _Slow:
    """Sleeps ``sleep_s`` in each of its first ``slow_calls`` calls, then answers at once."""

    def __init__(self, slow_calls: int, sleep_s: float = 2e-3) -> None:
        self.slow_calls = slow_calls
        self.sleep_s = sleep_s
        self.calls = 0

    def decide(self, stats: StepStats) -> SpecMode:
        self.calls += 1
        if self.calls <= self.slow_calls:
            time.sleep(self.sleep_s)
        return SpecMode.on(1)

    def reset(self) -> None:
        pass


def test_a_slow_policy_is_logged_once_then_replaced_by_the_default_until_it_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = _Slow(slow_calls=5)
    ctl = StepController(
        policy, allowed_steps=[0, 1, 3], default_steps=3, decide_budget_s=1e-4, budget_steps=4
    )
    with caplog.at_level(logging.WARNING, logger="specpolicy.adapter"):
        got = [ctl.decide(StepStats(1))[1] for _ in range(2 * RETRY_INTERVAL + 10)]
    # four slow calls decide (over budget but within the allowed run), then the default runs; the policy is
    # consulted again at the retry step (still slow: the fifth call), and at the next one it is fast again.
    assert got[:4] == [1] * 4 and ctl.over_budget == 5
    assert policy.calls == 4 + 1 + 10  # the run, the slow retry, then every step from the fast retry on
    assert got[4:RETRY_INTERVAL] == [3] * (RETRY_INTERVAL - 4)
    assert got[2 * RETRY_INTERVAL:] == [1] * 10
    assert ctl.budget_fallbacks == len(got) - policy.calls
    messages = [r.getMessage() for r in caplog.records]
    assert sum("over the budget" in m for m in messages) == 1
    assert sum("recent calls" in m for m in messages) == 1
    assert sum("back within" in m for m in messages) == 1


def test_budget_steps_zero_never_replaces_the_policy() -> None:
    ctl = StepController(_Slow(slow_calls=20), allowed_steps=[1, 3], default_steps=3, decide_budget_s=1e-4,
                         budget_steps=0)
    assert [ctl.decide(StepStats(1))[1] for _ in range(20)] == [1] * 20 and ctl.over_budget == 20


def test_the_watchdog_logs_the_stack_of_a_hung_decide(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()

    class Hangs:
        def decide(self, stats: StepStats) -> SpecMode:
            release.wait(10)
            return SpecMode.on(1)

        def reset(self) -> None:
            pass

    ctl = StepController(Hangs(), allowed_steps=[1, 3], default_steps=3)
    dog = DecideWatchdog(ctl, timeout_s=0.05, poll_s=0.01)
    worker = threading.Thread(target=ctl.decide, args=(StepStats(1),))
    with caplog.at_level(logging.ERROR, logger="specpolicy.adapter"):
        worker.start()
        deadline = time.monotonic() + 5
        while dog.dumps == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        release.set()
        worker.join(5)
        dog.stop()
    assert dog.dumps == 1  # once per stuck call, however long it stays stuck
    text = caplog.records[0].getMessage()
    assert "inside decide()" in text and "release.wait(10)" in text
    assert not dog.check()  # nothing running now


def test_runtime_close_survives_garbage_estimates_and_still_closes_the_trace(tmp_path: Path) -> None:
    prom = pytest.importorskip("prometheus_client")

    class Garbage:
        def __init__(self, out: Any) -> None:
            self.out = out

        def decide(self, stats: StepStats) -> SpecMode:
            return SpecMode.on(3)

        def reset(self) -> None:
            pass

        def estimates(self) -> Any:
            if isinstance(self.out, BaseException):
                raise self.out
            return self.out

    for garbage in ({"a": "not a number", "b": object(), 7: 1.0, "ok": 2.0}, ["x"], None, RuntimeError("no")):
        trace = tmp_path / f"t{id(garbage)}.jsonl"
        s = AdapterSettings.build("static", trace_path=trace)
        rt = AdapterRuntime(
            s, engine="e", engine_version="1", path="p", allowed_steps=[0, 3], default_steps=3,
            metrics_registry=prom.CollectorRegistry(),
        )
        rt.policy = Garbage(garbage)
        assert rt.metrics is not None
        rt.metrics._estimates = rt.policy  # type: ignore[assignment]
        rt.decide(StepStats(1))
        rt.close()
        assert rt.trace is not None and rt.trace.closed and rt.trace.written == 1


def test_budget_and_watchdog_settings_reach_the_controller() -> None:
    s = AdapterSettings.from_env({"SPECPOLICY_POLICY": "static", "SPECPOLICY_DECIDE_BUDGET_S": "0.005",
                                  "SPECPOLICY_DECIDE_BUDGET_STEPS": "0", "SPECPOLICY_WATCHDOG_S": "30",
                                  "SPECPOLICY_METRICS": "0"})
    assert s is not None
    rt = AdapterRuntime(s, engine="e", engine_version="1", path="p", allowed_steps=[0, 3], default_steps=3)
    ctl = rt.controller
    assert (ctl.decide_budget_s, ctl.budget_steps) == (0.005, 0) and ctl.watchdog is not None
    assert ctl.watchdog.timeout_s == 30.0
    rt.close()
    assert not ctl.watchdog._thread.is_alive()


class _Clocked:
    """A policy whose call ``i`` takes 10 ms of a fake clock when ``slow(i)``, none otherwise."""

    def __init__(self, slow: Any, clock: list[float]) -> None:
        self.slow = slow
        self.clock = clock
        self.calls = 0

    def decide(self, stats: StepStats) -> SpecMode:
        self.calls += 1
        if self.slow(self.calls):
            self.clock[0] += 0.01
        return SpecMode.on(1)

    def reset(self) -> None:
        pass


def _clocked_run(monkeypatch: pytest.MonkeyPatch, slow: Any, steps: int = 400) -> tuple[list[int], Any]:
    from specpolicy.runtime import controller as controller_module

    clock = [0.0]
    monkeypatch.setattr(controller_module, "_perf", lambda: clock[0])
    ctl = StepController(
        _Clocked(slow, clock), allowed_steps=[1, 3], default_steps=3, decide_budget_s=1e-3, budget_steps=16
    )
    return [ctl.decide(StepStats(1))[1] for _ in range(steps)], ctl


def test_a_policy_slow_on_fifteen_calls_of_sixteen_is_replaced_by_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got, ctl = _clocked_run(monkeypatch, lambda i: i % 16 != 0)  # never 16 slow calls in a row
    assert 3 in got[:20]  # 16 slow calls and the one fast call's decay
    assert ctl.budget_fallbacks > 350 and ctl.policy.calls < 30


@pytest.mark.parametrize("every", [5, 16, 100])
def test_an_occasional_slow_call_never_replaces_the_policy(
    monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    got, ctl = _clocked_run(monkeypatch, lambda i: i % every == 0, steps=2000)
    assert got == [1] * 2000 and ctl.budget_fallbacks == 0 and ctl.over_budget == 2000 // every


def test_a_policy_slow_on_every_other_call_is_replaced_then_recovers(monkeypatch: pytest.MonkeyPatch) -> None:
    slow_phase = [True]
    got, ctl = _clocked_run(monkeypatch, lambda i: slow_phase[0] and i % 2 == 0, steps=300)
    assert 3 in got[:50]  # replaced within a few dozen steps (+4 and -1 per pair of calls, at 64)
    assert got[-200:].count(3) >= 197  # consulted once per RETRY_INTERVAL; out again at its next slow call
    slow_phase[0] = False  # it recovers: the next retry, within budget, makes it decide again
    after = [ctl.decide(StepStats(1))[1] for _ in range(2 * RETRY_INTERVAL)]
    assert after[-RETRY_INTERVAL:] == [1] * RETRY_INTERVAL


def test_an_outcome_with_an_odd_step_or_depth_is_understood_or_ignored_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import numpy as np

    ctl = StepController(_Slow(slow_calls=0), allowed_steps=[1, 3], default_steps=3)
    for _ in range(4):
        ctl.decide(StepStats(2))
    ctl.outcome(1.0, [1, 0], 0.01)  # type: ignore[arg-type]
    assert ctl.known[:2] == (1, [1, 0])  # step 1's own depth and counts
    ctl.outcome(np.int64(2), [1, 1], 0.02, num_steps=np.int64(3))  # type: ignore[arg-type]
    assert ctl.known[:2] == (3, [1, 1])
    with caplog.at_level(logging.ERROR, logger="specpolicy.adapter"):
        ctl.outcome(3.5, [0, 0], 0.03)  # type: ignore[arg-type]
        ctl.outcome("4", [0, 0], 0.03)  # type: ignore[arg-type]
        ctl.outcome(4, [0, 0], 0.03, num_steps=2.5)  # type: ignore[arg-type]
    assert ctl.bad_outcomes == 3 and ctl.known[:2] == (3, [1, 1])  # ignored: the last good one stands
    assert len([r for r in caplog.records if "outcome" in r.getMessage()]) == 3  # once per kind
    ctl.outcome(4, [0, 1], 0.03)
    assert ctl.known[:2] == (1, [0, 1])
