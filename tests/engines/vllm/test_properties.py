"""Property tests on the real vLLM scheduler: random depth scripts, batch sizes and acceptance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _vllm_harness import K_MAX, FakeRunner, add_request, build_scheduler, drive, engine_args
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LAG = {"sync": 2, "async": 3}
_CONFIGS: dict[str, Any] = {}


def config_for(model_dirs: tuple[Path, Path], mode: str, depths: list[int]) -> Any:
    """One engine configuration per mode (building one takes ~0.5 s); only the policy changes per example."""
    cfg = _CONFIGS.get(mode)
    if cfg is None:
        cfg = _CONFIGS[mode] = engine_args(model_dirs).create_engine_config()
        cfg.scheduler_config.async_scheduling = mode == "async"
        cfg.cache_config.num_gpu_blocks = 256
    cfg.additional_config = {
        "specpolicy": {"policy": {"name": "scripted", "depths": depths}, "metrics": False}
    }
    return cfg


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    depths=st.lists(st.integers(0, K_MAX), min_size=2, max_size=12),
    accept=st.lists(st.integers(0, K_MAX), min_size=1, max_size=4),
    mode=st.sampled_from(["sync", "async"]),
)
def test_depths_are_applied_and_reported_back_for_any_script(
    make_config: Any, depths: list[int], accept: list[int], mode: str
) -> None:
    cfg = make_config(
        async_scheduling=mode == "async",
        additional_config={
            "specpolicy": {"policy": {"name": "scripted", "depths": depths}, "metrics": False}
        },
    )
    sched = build_scheduler(cfg)
    for i in range(len(accept)):
        add_request(sched, f"r{i}")
    want = {f"r{i}": a for i, a in enumerate(accept)}  # request i accepts up to accept[i] drafts per step
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: want[r]), steps=len(depths), mode=mode)
    assert [so.num_spec_tokens_to_schedule for so in outs] == depths
    for s in range(1, len(outs)):
        assert {len(v) for v in outs[s].scheduled_spec_decode_tokens.values()} <= {depths[s - 1]}
    seen = sched._specpolicy.runtime.policy.seen
    n = len(accept)
    for j, st_ in enumerate(seen):
        src = j - LAG[mode]
        if src < 0 or depths[src] == 0:
            assert st_.accepted_draft_tokens is None
            continue
        d = depths[src]
        assert st_.last_num_steps == d
        assert list(st_.drafted_tokens) == [d] * n
        assert list(st_.accepted_draft_tokens) == [min(a, d) for a in accept]
