"""Per-step CPU cost of the specpolicy scheduler's own code, on the real vLLM 0.33.0 scheduler (CPU).

Run: .venvs/vllm-0.33.0/bin/python tests/engines/vllm/bench_overhead.py [BATCH ...]

For each batch size it reports (best of 3, microseconds per decode step):
* ``vllm``: vLLM's own Scheduler, schedule() + update_from_output() with a fake runner accepting every draft;
* ``hooks``: the adapter's added work alone: the decode scan and guarded decide() of
  ``_update_after_schedule``, one ``make_spec_decoding_stats`` record per request, and the close of the
  step in ``update_from_output``.
The two are measured separately: a whole-loop difference of ~1% drowns in run-to-run timer noise.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import _vllm_harness as conftest  # noqa: E402


def setup(cls: Any, cfg: Any, batch: int) -> tuple[Any, Any, list[Any]]:
    sched = conftest.build_scheduler(cfg, cls=cls, num_blocks=64 + batch * 40)
    for i in range(batch):
        conftest.add_request(sched, f"r{i}", prompt_len=16, max_tokens=100_000)
    runner = conftest.FakeRunner(sched, lambda s, r, d: d)
    return sched, runner, conftest.drive(sched, runner, steps=3, mode="sync")  # prefill + warm-up


def vllm_step(cfg: Any, batch: int, steps: int = 100) -> float:
    from vllm.v1.core.sched.scheduler import Scheduler

    sched, runner, _ = setup(Scheduler, cfg, batch)
    t0 = time.perf_counter()
    conftest.drive(sched, runner, steps=steps, mode="sync")
    return (time.perf_counter() - t0) / steps


def hooks_alone(cfg: Any, batch: int, reps: int = 2000) -> float:
    from specpolicy.adapters.vllm import PolicyScheduler

    sched, _, outs = setup(PolicyScheduler, cfg, batch)
    so = outs[-1]  # a decode step of `batch` requests
    sp = sched._specpolicy
    ledger = sp.ledger
    t0 = time.perf_counter()
    for _ in range(reps):
        sp.schedule(sched, so)
        for _ in range(batch):
            ledger.on_draft(3, 2)
        ledger.on_update(so, time.perf_counter())
    return (time.perf_counter() - t0) / reps


def main() -> None:
    batches = [int(a) for a in sys.argv[1:]] or [8, 64, 256]
    dirs = conftest.write_model_dirs(Path(tempfile.mkdtemp()))
    print("batch  vllm_us/step  hooks_us/step  hooks_share")
    for batch in batches:
        args = conftest.engine_args(
            dirs,
            max_num_seqs=max(batch, 8),
            max_num_batched_tokens=max(batch * 4, 512),
            spec={"num_speculative_tokens_per_batch_size": [[1, max(batch, 8), 3]]},
            additional_config={
                "specpolicy": {"policy": {"name": "static", "num_steps": 3}, "metrics": False}
            },
        )
        cfg = args.create_engine_config()
        cfg.cache_config.num_gpu_blocks = 64 + batch * 40
        base = min(vllm_step(cfg, batch) for _ in range(3))
        hooks = min(hooks_alone(cfg, batch) for _ in range(3))
        print(f"{batch:5d}  {base * 1e6:12.1f}  {hooks * 1e6:13.1f}  {hooks / base:11.1%}")


if __name__ == "__main__":
    main()
