"""Start-up line, JSONL trace and metrics of the vLLM adapter, through the shared observers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from _vllm_harness import RELEASE, VERSION, FakeRunner, add_request, build_scheduler, drive, use_model_runner

from specpolicy.adapters.vllm import drafter_depth
from specpolicy.trace import read_trace


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.parametrize("runner", ["MRV1", "MRV2"])
def test_startup_line_names_version_model_runner_policy_and_depths(
    make_config: Any, monkeypatch: pytest.MonkeyPatch, runner: str
) -> None:
    use_model_runner(monkeypatch, runner)
    # a V2 runner that drafts every token whatever the depth is refused with sync scheduling (test_startup);
    # 0.26's EAGLE-3 drafter follows the depth through the adapter's hook
    drafts_all = runner == "MRV2" and not RELEASE.mrv2_drafts_k and "eagle3" not in drafter_depth.METHODS
    cfg = make_config(
        async_scheduling=drafts_all,
        additional_config={
            "specpolicy": {"policy": {"name": "scripted", "candidates": [0, 1, 3]}, "metrics": False}
        },
    )
    cap = _Capture()
    logger = logging.getLogger("vllm.specpolicy")
    logger.addHandler(cap)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        build_scheduler(cfg)
    finally:
        logger.removeHandler(cap)
        logger.setLevel(old_level)
    line = next(x for x in cap.lines if x.startswith("specpolicy active"))
    assert f"vllm {VERSION}" in line
    assert f"path={runner} " in line
    # the graph mode vLLM resolved (the CPU platform turns graphs off)
    mode = cfg.compilation_config.cudagraph_mode.name
    assert mode == "NONE" and f"cudagraphs={mode} " in line
    assert '"name":"scripted"' in line and "candidate_steps=[0, 1, 3]" in line
    assert ("async-scheduler" if drafts_all else "sync-scheduler") in line
    warned = [x for x in cap.lines if "saves verification, not drafting" in x]
    assert len(warned) == (1 if drafts_all else 0)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_trace_records_each_decision_with_the_time_of_the_step_that_verified_it(
    make_config: Any, tmp_path: Path, mode: str
) -> None:
    depths = [3, 0, 2, 1, 3, 0]
    trace = tmp_path / "trace.jsonl"
    cfg = make_config(
        async_scheduling=mode == "async",
        additional_config={
            "specpolicy": {
                "policy": {"name": "scripted", "depths": depths},
                "metrics": False,
                "trace_path": str(trace),
            }
        },
    )
    sched = build_scheduler(cfg)
    add_request(sched, "a")
    add_request(sched, "b")
    drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=len(depths) + 2, mode=mode)
    sched.shutdown()
    records = list(read_trace(trace))
    assert [r.num_steps for r in records[: len(depths)]] == depths
    assert [r.step for r in records] == list(range(1, len(records) + 1))
    assert [r.batch_size for r in records[:3]] == [0, 2, 2]
    # every decision whose drafts were verified before shutdown carries that step's time
    assert all(r.step_time_s is not None and r.step_time_s >= 0 for r in records[: len(depths)])
    header = trace.read_text().splitlines()[0]
    runner = "MRV1" if RELEASE.v1_runner else "MRV2"  # the harness pins V1 where a release has it
    assert '"engine":"vllm"' in header and f'"model_runner":"{runner}"' in header


def test_metrics_count_steps_by_depth(make_config: Any) -> None:
    from prometheus_client import REGISTRY

    def count(depth: int) -> float:
        labels = {"engine": "vllm", "rank": "0", "depth": str(depth)}
        return REGISTRY.get_sample_value("specpolicy_steps_total", labels) or 0.0

    before = {k: count(k) for k in range(4)}
    depths = [1, 1, 0, 2, 2, 2]
    cfg = make_config(additional_config={"specpolicy": {"policy": {"name": "scripted", "depths": depths}}})
    sched = build_scheduler(cfg)
    add_request(sched, "a")
    drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=len(depths), mode="sync")
    sched.shutdown()
    assert {k: count(k) - before[k] for k in range(4)} == {0: 1, 1: 2, 2: 3, 3: 0}
