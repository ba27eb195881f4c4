"""MetricsObserver: what reaches Prometheus, in a private registry and in multiprocess mode."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

prom = pytest.importorskip("prometheus_client")

from specpolicy import SpecMode, StepStats  # noqa: E402
from specpolicy.runtime.controller import StepController  # noqa: E402
from specpolicy.runtime.decision import StepRecord  # noqa: E402
from specpolicy.runtime.metrics import MetricsObserver  # noqa: E402


class _Estimating:
    def __init__(self) -> None:
        self.depths = [3, 3, 0, 5, 0]
        self.i = 0

    def decide(self, stats: StepStats) -> SpecMode:
        k = self.depths[self.i % len(self.depths)]
        self.i += 1
        return SpecMode.of(k)

    def reset(self) -> None:
        pass

    def estimates(self) -> Mapping[str, float]:
        return {"ewma_acceptance": 2.5, "tokens_per_s@3": 1234.0}


def _value(reg: object, metric: str, **labels: str) -> float | None:
    return reg.get_sample_value(metric, labels)  # type: ignore[attr-defined,no-any-return]


def test_counts_switches_errors_and_estimates_reach_the_registry() -> None:
    reg = prom.CollectorRegistry()
    policy = _Estimating()
    obs = MetricsObserver(engine="sglang", rank=1, policy=policy, registry=reg, push_every=4)
    ctl = StepController(policy, allowed_steps=[0, 3], default_steps=3, observers=[obs])
    for _ in range(10):
        ctl.decide(StepStats(8))
    ctl.close()  # decisions whose outcome never came reach the observers
    obs.close()
    lab = {"engine": "sglang", "rank": "1"}
    # depths 3,3,0,5,0 repeated twice; 5 is not allowed -> fallback to 3 (counted as a policy error)
    assert _value(reg, "specpolicy_steps_total", depth="3", **lab) == 6
    assert _value(reg, "specpolicy_steps_total", depth="0", **lab) == 4
    assert _value(reg, "specpolicy_policy_errors_total", **lab) == 2
    # 3,3,0,3,0,3,3,0,3,0 -> switches at every change
    assert _value(reg, "specpolicy_switches_total", **lab) == 7
    assert _value(reg, "specpolicy_decide_seconds_count", **lab) == 10
    assert _value(reg, "specpolicy_depth", **lab) == 0
    assert _value(reg, "specpolicy_estimate", name="ewma_acceptance", **lab) == 2.5
    assert _value(reg, "specpolicy_estimate", name="tokens_per_s@3", **lab) == 1234.0


def test_over_budget_decide_calls_are_counted_and_bad_estimates_skipped() -> None:
    reg = prom.CollectorRegistry()

    class Odd(_Estimating):
        def estimates(self) -> Mapping[str, float]:
            return {"good": 1.0, "text": "n/a", "obj": object()}  # type: ignore[dict-item]

    obs = MetricsObserver(engine="e", rank=0, policy=Odd(), registry=reg, decide_budget_s=1e-3)
    for i, dt in enumerate([1e-6, 2e-3, 5e-4, 0.05]):
        obs.on_record(StepRecord(i, StepStats(1), 3, dt, False, 0.0))
    obs.close()
    lab = {"engine": "e", "rank": "0"}
    assert _value(reg, "specpolicy_decide_over_budget_total", **lab) == 2
    assert _value(reg, "specpolicy_estimate", name="good", **lab) == 1.0
    assert _value(reg, "specpolicy_estimate", name="text", **lab) is None


def test_engine_counts_reach_the_registry_as_increments_and_a_failing_report_is_skipped() -> None:
    reg = prom.CollectorRegistry()
    totals = {"forced_steps": 3, "draft_catch_ups": 1}
    fail = [False]

    def counts() -> Mapping[str, int]:
        if fail[0]:
            raise RuntimeError("engine state gone")
        return dict(totals)

    obs = MetricsObserver(engine="sglang", registry=reg, push_every=1, engine_counts=counts)
    obs.on_record(StepRecord(1, StepStats(1), 0, 1e-6, False, 0.0))
    totals.update(forced_steps=5, draft_catch_ups=1, draft_positions_caught_up=40)
    obs.on_record(StepRecord(2, StepStats(1), 0, 1e-6, False, 0.0))
    fail[0] = True
    obs.on_record(StepRecord(3, StepStats(1), 0, 1e-6, False, 0.0))  # a failing report changes nothing
    lab = {"engine": "sglang", "rank": "0"}
    assert _value(reg, "specpolicy_engine_events_total", event="forced_steps", **lab) == 5
    assert _value(reg, "specpolicy_engine_events_total", event="draft_catch_ups", **lab) == 1
    assert _value(reg, "specpolicy_engine_events_total", event="draft_positions_caught_up", **lab) == 40


def test_nothing_is_pushed_between_push_intervals() -> None:
    reg = prom.CollectorRegistry()
    obs = MetricsObserver(engine="vllm", registry=reg, push_every=100)
    for step in range(1, 51):
        obs.on_record(StepRecord(step, StepStats(1), 2, 1e-6, False, 0.0))
    assert _value(reg, "specpolicy_steps_total", engine="vllm", rank="0", depth="2") is None
    obs.push()
    assert _value(reg, "specpolicy_steps_total", engine="vllm", rank="0", depth="2") == 50


def test_push_every_must_be_positive() -> None:
    with pytest.raises(ValueError, match="push_every must be >= 1"):
        MetricsObserver(engine="x", registry=prom.CollectorRegistry(), push_every=0)


def test_multiprocess_directory_collects_metrics_from_a_worker_process(tmp_path: Path) -> None:
    """As in an engine with metrics on: a worker process writes, the HTTP process's collector reads the
    dir."""
    worker = textwrap.dedent(
        """
        from specpolicy.runtime.metrics import MetricsObserver
        from specpolicy.runtime.decision import StepRecord
        from specpolicy.stats import StepStats
        obs = MetricsObserver(engine="sglang", rank=0, push_every=1)
        for step in range(1, 6):
            obs.on_record(StepRecord(step, StepStats(4), 3 if step % 2 else 0, 2e-6, False, 0.0))
        """
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", worker], env=env, check=True, timeout=60)
    from prometheus_client import multiprocess

    reg = prom.CollectorRegistry()
    multiprocess.MultiProcessCollector(reg, path=str(tmp_path))  # type: ignore[no-untyped-call]
    assert _value(reg, "specpolicy_steps_total", engine="sglang", rank="0", depth="3") == 3
    assert _value(reg, "specpolicy_steps_total", engine="sglang", rank="0", depth="0") == 2
    assert _value(reg, "specpolicy_switches_total", engine="sglang", rank="0") == 4


def test_estimate_series_are_bounded_and_what_is_dropped_is_counted() -> None:
    from specpolicy.runtime.metrics import MAX_ESTIMATE_NAMES

    reg = prom.CollectorRegistry()

    class Fresh(_Estimating):
        """New names on every push (a per-request key), 16 of them, plus a value that is no number."""

        def estimates(self) -> Mapping[str, float]:
            self.push = getattr(self, "push", 0) + 1
            fresh = {f"req{self.push}_{j}": float(j) for j in range(16)}
            return {"n/a": "text", **fresh}  # type: ignore[dict-item]

    obs = MetricsObserver(engine="e", rank=0, policy=Fresh(), registry=reg, push_every=1)
    pushes = 2000
    for i in range(pushes):
        obs.on_record(StepRecord(i, StepStats(1), 3, 1e-6, False, 0.0))
    series = [s for m in reg.collect() if m.name == "specpolicy_estimate" for s in m.samples]
    assert len(series) == MAX_ESTIMATE_NAMES
    # 17 values a push: the first MAX_ESTIMATE_NAMES names are exported, everything else is counted
    assert obs.estimates_dropped == 17 * pushes - MAX_ESTIMATE_NAMES
    assert _value(reg, "specpolicy_estimates_dropped_total", engine="e", rank="0") == obs.estimates_dropped
