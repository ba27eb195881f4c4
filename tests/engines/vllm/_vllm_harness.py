"""Helpers for the vLLM contract tests (imported by conftest.py and the tests): a tested vLLM release on CPU.

Everything here is real vLLM code (EngineArgs -> VllmConfig, the scheduler, SchedulerOutput,
ModelRunnerOutput, Request); only the model runner is replaced by ``FakeRunner``, which returns sampled
tokens with a chosen number of accepted drafts per request. ``drive`` reproduces the call order of
``EngineCore.step`` (sync scheduling) and ``EngineCore.step_with_batch_queue`` (async scheduling, two
batches in flight). ``RELEASE`` is the row of the installed release in ``versions.RELEASES``: tests gate on
its fields, never on version strings.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

pytest.importorskip("vllm")

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

from pydantic import Field  # noqa: E402

from specpolicy.adapters.vllm.versions import installed_version, release  # noqa: E402

VERSION = installed_version()
RELEASE = release(VERSION)
assert RELEASE is not None, f"vLLM {VERSION} is not a tested release"
# vLLM reads its environment lazily, so this still comes before it is read. A release with both runners gets
# the V1 one pinned (its default depends on Triton); one without it refuses any value but 1.
if RELEASE.v1_runner:
    os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")


def _use_cpu_platform() -> None:
    """Make vLLM's platform its CPU one.

    vLLM 0.33 picks the CPU platform from ``VLLM_TARGET_DEVICE=cpu`` (set above); 0.26 picks it only for a CPU
    build (a ``+cpu`` version) or on macOS, so with the CUDA wheel on a machine without a GPU it resolves
    the empty ``UnspecifiedPlatform`` while ``import vllm`` runs, and every ``create_engine_config`` then
    fails ("Device string must not be empty"). Only ``vllm.platforms`` holds that object, so replacing it
    there gives both releases the same platform; on 0.33 this changes nothing. 0.34's CPU platform refuses
    an x86 machine without Triton (its CPU model runner compiles Triton kernels); the scheduler and configs
    under test never run one, so the platform check is told Triton is there.
    """
    import vllm.platforms as platforms
    import vllm.triton_utils
    from vllm.platforms.cpu import CpuPlatform

    if not isinstance(platforms.current_platform, CpuPlatform):
        platforms._current_platform = CpuPlatform()
    assert RELEASE is not None
    if not RELEASE.v1_runner:
        vllm.triton_utils.HAS_TRITON = True


_use_cpu_platform()

from specpolicy import PolicyConfig, SpecMode, StepStats  # noqa: E402

K_MAX = 3
BLOCK = 16


# ---------------------------------------------------------------- a scripted policy, registered for the tests
class ScriptedConfig(PolicyConfig):
    """Returns ``depths`` in order (then repeats the last one); raises at the decisions in ``fail_at``."""

    name: Literal["scripted"] = "scripted"
    depths: tuple[int, ...] = (K_MAX,)
    fail_at: tuple[int, ...] = ()
    candidates: tuple[int, ...] = Field(default=tuple(range(K_MAX + 1)))
    read_ids: bool = False  # declare that the policy reads request ids

    def candidate_steps(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.candidates)))

    def needs_request_ids(self) -> bool:
        return self.read_ids


class ScriptedPolicy:
    def __init__(self, config: ScriptedConfig) -> None:
        self.config = config
        self.seen: list[StepStats] = []

    def decide(self, stats: StepStats) -> SpecMode:
        i = len(self.seen)
        self.seen.append(stats)
        if i in self.config.fail_at:
            raise RuntimeError(f"scripted failure at decision {i}")
        d = self.config.depths
        return SpecMode.of(d[min(i, len(d) - 1)])

    def reset(self) -> None:
        self.seen.clear()


def use_model_runner(monkeypatch: pytest.MonkeyPatch, runner: str) -> None:
    """Make the configurations built next use the model runner ``runner`` ("MRV1" or "MRV2").

    Forced to MRV2, vLLM 0.26 refuses the configuration when Triton is missing (0.33 only falls back to MRV1
    when it picks the default itself). The environments have no Triton and the scheduler never runs it, so
    for MRV2 the check is told Triton is there. A release without the V1 runner (0.34) skips an MRV1 test
    and needs nothing for MRV2, the only runner it has.
    """
    assert RELEASE is not None
    if not RELEASE.v1_runner:
        if runner == "MRV1":
            pytest.skip(f"vLLM {VERSION} has no V1 model runner")
        return
    import vllm.config.vllm as config_vllm

    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1" if runner == "MRV2" else "0")
    if runner == "MRV2":
        monkeypatch.setattr(config_vllm, "HAS_TRITON", True)


# ---------------------------------------------------------------- model config dirs and engine configs
def write_model_dirs(root: Path) -> tuple[Path, Path]:
    """config.json of a tiny Llama target and of an EAGLE-3 drafter for it (no weights: nothing is loaded)."""
    target, draft = root / "target", root / "draft"
    target.mkdir()
    draft.mkdir()
    cfg = dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=2,
        vocab_size=256,
        head_dim=16,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        torch_dtype="float32",
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    (target / "config.json").write_text(json.dumps(cfg))
    dcfg = dict(cfg, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1, draft_vocab_size=256)
    (draft / "config.json").write_text(json.dumps(dcfg))
    return target, draft


DEFAULT_SCHEDULE = [[1, 5, 3], [6, 6, 2], [7, 7, 1], [8, 8, 0]]


def engine_args(model_dirs: tuple[Path, Path], **kw: Any) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    target, draft = model_dirs
    spec: dict[str, Any] = {
        "method": "eagle3",
        "model": str(draft),
        "num_speculative_tokens": K_MAX,
        "num_speculative_tokens_per_batch_size": DEFAULT_SCHEDULE,
    }
    spec.update(kw.pop("spec", {}))
    spec = {k: v for k, v in spec.items() if v is not None}
    args: dict[str, Any] = dict(
        model=str(target),
        skip_tokenizer_init=True,
        max_model_len=512,
        max_num_seqs=8,
        max_num_batched_tokens=512,
        block_size=BLOCK,  # the KV cache below has 16-token blocks; 0.26 on CPU defaults to 128
        speculative_config=spec,
        scheduler_cls="specpolicy.adapters.vllm.Scheduler",
        additional_config={"specpolicy": {"policy": {"name": "scripted"}, "metrics": False}},
    )
    args.update(kw)
    return EngineArgs(**args)


def kv_cache_config(num_blocks: int = 256) -> Any:
    """One full-attention group of ``num_blocks`` blocks (the scheduler never touches tensors)."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=16, dtype=torch.float32)
    return KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l"], spec)]
    )


def build_scheduler(vllm_config: Any, cls: Any = None, num_blocks: int = 256) -> Any:
    """Construct the scheduler the way EngineCore does: class from the config, keyword arguments."""
    from vllm.v1.structured_output import StructuredOutputManager

    if cls is None:
        cls = vllm_config.scheduler_config.get_scheduler_cls()
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config(num_blocks),
        structured_output_manager=StructuredOutputManager(vllm_config),
        include_finished_set=False,
        log_stats=True,
        block_size=BLOCK,
        hash_block_size=BLOCK,
    )


def block_hasher(vllm_config: Any) -> Any:
    """The prefix-cache block hasher EngineCore gives every request (prefix caching is on by default).

    vLLM 0.33 caches only the blocks a request has hashes for, so a request without a hasher simply caches
    nothing; 0.26 indexes the hashes of every full block and fails on a request that has none.
    """
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(fn)
    return get_request_block_hasher(BLOCK, fn)


def add_request(sched: Any, req_id: str, prompt_len: int = 20, max_tokens: int = 200) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    req = Request(
        request_id=req_id,
        prompt_token_ids=[10 + (i % 200) for i in range(prompt_len)],
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        block_hasher=block_hasher(sched.vllm_config),
    )
    sched.add_request(req)
    return req


# ---------------------------------------------------------------- the fake model runner and the step driver
Accept = Callable[[int, str, int], int]  # (step index, request id, drafts scheduled) -> accepted drafts


class FakeRunner:
    """Samples one token per finished prefill, 1 + accepted tokens per verified request."""

    def __init__(self, sched: Any, accept: Accept) -> None:
        self.sched = sched
        self.accept = accept
        self.step = 0

    def run(self, so: Any) -> Any:
        from vllm.v1.outputs import ModelRunnerOutput

        ids = list(so.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in ids:
            req = self.sched.requests[rid]
            if req.is_prefill_chunk:  # this chunk does not reach the end of the prompt: nothing sampled
                sampled.append([])
                continue
            drafts = len(so.scheduled_spec_decode_tokens.get(rid, ()))
            n_acc = max(0, min(drafts, self.accept(self.step, rid, drafts)))
            sampled.append([7] * (1 + n_acc))
        self.step += 1
        extra: dict[str, Any] = {}
        if "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}:
            extra["req_id_to_index"] = {r: i for i, r in enumerate(ids)}  # 0.34 uses positions in req_ids
        return ModelRunnerOutput(req_ids=ids, sampled_token_ids=sampled, **extra)

    def drafts(self, so: Any) -> Any:
        """Sync scheduling: the drafter's proposals after the step (``take_draft_token_ids``)."""
        from vllm.v1.outputs import DraftTokenIds

        reqs = self.sched.requests
        ids = [r for r in so.num_scheduled_tokens if r in reqs and not reqs[r].is_prefill_chunk]
        # MRV1's drafter proposes the scheduled depth; 0.33's MRV2 proposes nothing for a step vLLM marks
        # skip_drafts (0.26 has no such flag; its MRV2 drafts the depth through the adapter's hook).
        k = 0 if getattr(so, "skip_drafts", False) else so.num_spec_tokens_to_schedule
        return DraftTokenIds(req_ids=ids, draft_token_ids=[[5] * k for _ in ids])


def drive(sched: Any, runner: FakeRunner, steps: int, mode: str) -> list[Any]:
    """Run ``steps`` schedule() calls in EngineCore's order; return the SchedulerOutputs in schedule order."""
    outputs: list[Any] = []
    if mode == "sync":
        for _ in range(steps):
            so = sched.schedule()
            outputs.append(so)
            out = runner.run(so)
            sched.update_from_output(so, out)
            if so.total_num_scheduled_tokens > 0:
                sched.update_draft_token_ids(runner.drafts(so))
        return outputs
    queue: deque[tuple[Any, Any]] = deque()
    for _ in range(steps):  # step_with_batch_queue, batch_queue_size=2
        so = sched.schedule()
        outputs.append(so)
        queue.appendleft((so, runner.run(so)))
        if len(queue) < 2:
            continue
        done, out = queue.pop()
        sched.update_from_output(done, out)
    while queue:
        done, out = queue.pop()
        sched.update_from_output(done, out)
    return outputs
