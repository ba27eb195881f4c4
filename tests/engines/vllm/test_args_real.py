"""``specpolicy vllm-args`` output fed to real vLLM: accepted as is, and the scheduler runs the policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _vllm_harness import FakeRunner, add_request, build_scheduler, drive

from specpolicy.adapters.vllm.args import build_vllm_args


@pytest.mark.parametrize("max_num_seqs", [8, 64])
def test_covering_schedule_is_read_by_vllm_as_intended(max_num_seqs: int) -> None:
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    args = build_vllm_args(
        '{"name": "schedule", "table": [[1, 3, 2], [4, 4, 0]]}', 3, max_num_seqs=max_num_seqs
    )
    schedule = args.speculative_config["num_speculative_tokens_per_batch_size"]
    dense = build_dynamic_sd_schedule_lookup(
        schedule, vllm_max_batch_size=max_num_seqs, vllm_num_speculative_tokens=3
    )
    assert set(dense[1:]) == {0, 2, 3}
    widest = {k: max(b for b in range(1, max_num_seqs + 1) if dense[b] == k) for k in (0, 2, 3)}
    assert min(widest.values()) >= max_num_seqs - 2


def test_vllm_args_kwargs_start_an_engine_config_that_runs_the_policy(model_dirs: tuple[Path, Path]) -> None:
    from vllm.engine.arg_utils import EngineArgs

    target, draft = model_dirs
    policy = '{"name": "schedule", "table": [[0, 1, 3], [2, 2, 0], [3, 8, 1]]}'
    kwargs: dict[str, Any] = build_vllm_args(
        policy, 3, max_num_seqs=8, draft_model=str(draft), settings={"metrics": False}
    ).as_kwargs()
    cfg = EngineArgs(
        model=str(target), skip_tokenizer_init=True, max_model_len=512, max_num_batched_tokens=512, **kwargs
    ).create_engine_config()
    cfg.cache_config.num_gpu_blocks = 256
    sched = build_scheduler(cfg)
    add_request(sched, "a", max_tokens=6)
    add_request(sched, "b", max_tokens=60)
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=6, mode="sync")
    # prefill (no decode yet: batch 0 -> 3), two decodes (batch 2 -> 0), then b alone (batch 1 -> 3)
    depths = [so.num_spec_tokens_to_schedule for so in outs]
    assert depths[:2] == [3, 0]
    assert depths[-1] == 3 and "a" not in outs[-1].num_scheduled_tokens
