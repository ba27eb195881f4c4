"""Per-step CPU cost of the specpolicy scheduler against vLLM's own, on the real 0.33.0 scheduler (CPU).

Run: .venvs/vllm-0.33.0/bin/python tests/engines/vllm/bench_overhead.py [BATCH ...]
Each row drives ``steps`` decode steps (sync call order, every draft accepted) of ``batch`` requests through
vLLM's Scheduler and through PolicyScheduler with a ``schedule`` policy, and reports the mean wall time of
schedule() + update_from_output() per step and the difference (what the adapter adds per step).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import tempfile  # noqa: E402

import conftest  # noqa: E402


def per_step(cls: Any, cfg: Any, batch: int, steps: int) -> float:
    sched = conftest.build_scheduler(cfg, cls=cls)
    for i in range(batch):
        conftest.add_request(sched, f"r{i}", prompt_len=16, max_tokens=10_000)
    runner = conftest.FakeRunner(sched, lambda s, r, d: d)
    conftest.drive(sched, runner, steps=3, mode="sync")  # prefill + warm-up
    t0 = time.perf_counter()
    conftest.drive(sched, runner, steps=steps, mode="sync")
    return (time.perf_counter() - t0) / steps


def main() -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    from specpolicy.adapters.vllm import PolicyScheduler

    batches = [int(a) for a in sys.argv[1:]] or [8, 64, 256]
    dirs = Path(tempfile.mkdtemp())
    (dirs / "t").mkdir()
    (dirs / "d").mkdir()
    import json

    cfgj = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64, intermediate_size=128,
                num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=2, vocab_size=256, head_dim=16,
                max_position_embeddings=8192, rms_norm_eps=1e-5, torch_dtype="float32")
    (dirs / "t" / "config.json").write_text(json.dumps(cfgj))
    (dirs / "d" / "config.json").write_text(json.dumps(dict(cfgj, architectures=["LlamaForCausalLMEagle3"],
                                                            num_hidden_layers=1, draft_vocab_size=256)))
    print("batch  vllm_us/step  specpolicy_us/step  added_us/step")
    for batch in batches:
        policy = {"name": "schedule", "table": [[1, 7, 3], [8, 63, 2], [64, 255, 1], [256, 256, 0]]}
        args = conftest.engine_args(
            (dirs / "t", dirs / "d"), max_num_seqs=max(batch, 8), max_num_batched_tokens=max(batch * 4, 512),
            spec={"num_speculative_tokens_per_batch_size": [[1, max(batch, 8), 3]]},
            additional_config={"specpolicy": {"policy": policy, "metrics": False}},
        )
        cfg = args.create_engine_config()
        cfg.cache_config.num_gpu_blocks = 256 + batch * 40
        conftest.kv_cache_config.__defaults__ = (cfg.cache_config.num_gpu_blocks,)
        steps = 300
        base = min(per_step(Scheduler, cfg, batch, steps) for _ in range(3))
        ours = min(per_step(PolicyScheduler, cfg, batch, steps) for _ in range(3))
        print(f"{batch:5d}  {base * 1e6:12.1f}  {ours * 1e6:18.1f}  {(ours - base) * 1e6:13.1f}")


if __name__ == "__main__":
    main()
