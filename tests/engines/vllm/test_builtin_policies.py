"""Every registered policy, at its defaults, runs inside the real vLLM scheduler through `vllm-args` flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _vllm_harness import FakeRunner, add_request, build_scheduler, drive

from specpolicy import available_policies, parse_config
from specpolicy.adapters.vllm.args import build_vllm_args

POLICIES = [n for n in available_policies() if n != "scripted"]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("name", POLICIES)
def test_policy_runs_without_fallbacks_and_stays_within_its_depths(
    model_dirs: tuple[Path, Path], name: str, mode: str
) -> None:
    from vllm.engine.arg_utils import EngineArgs

    target, draft = model_dirs
    kwargs: dict[str, Any] = build_vllm_args(
        name, max_num_seqs=16, draft_model=str(draft), settings={"metrics": False}
    ).as_kwargs()
    cfg = EngineArgs(
        model=str(target), skip_tokenizer_init=True, max_model_len=1024, max_num_batched_tokens=1024, **kwargs
    ).create_engine_config()
    cfg.scheduler_config.async_scheduling = mode == "async"
    cfg.cache_config.num_gpu_blocks = 512
    sched = build_scheduler(cfg)
    for i in range(12):
        add_request(sched, f"r{i}", prompt_len=16 + i, max_tokens=20 + 10 * i)  # the batch shrinks over time
    # request i accepts i % 3 drafts per step: mixed acceptance
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: int(r[1:]) % 3), steps=80, mode=mode)
    controller = sched._specpolicy.runtime.controller
    assert controller.errors == 0
    allowed = set(parse_config(name).candidate_steps())
    applied = {so.num_spec_tokens_to_schedule for so in outs if so.num_scheduled_tokens}
    assert applied <= allowed
    assert sum(controller.steps_by_depth.values()) == controller.step > 40
