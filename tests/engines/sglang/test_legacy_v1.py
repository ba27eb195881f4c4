"""The v1 (non-overlap, ``EAGLEWorker``) off step through SGLang's own worker, verify and scheduler code.

What runs for real (0.5.10.post1 and 0.5.12.post1): ``EAGLEWorker.forward_batch_generation`` (decode branch)
and ``EAGLEWorker.verify`` with specpolicy's wrappers installed, ``EagleVerifyInput.prepare_for_verify`` and
``EagleVerifyInput.verify`` (token acceptance, ``req.output_ids``, KV slot bookkeeping, ``seq_lens``), and the
scheduler's ``process_batch_result_decode`` (v1 branch). Faked because they need a GPU (see legacy_support):
the greedy tree-verify kernel, the req-to-token triton kernel, the target model forward, the draft-extend
forward. Not proven here: the one-token CUDA graph and the numerics of the draft catch-up (GPU smoke test).
"""

from __future__ import annotations

from typing import Any

import legacy_support as ls
import pytest
import torch
from conftest import SGLANG_VERSION

from specpolicy.adapters.sglang.legacy.targets import SUPPORTED_VERSIONS

if SGLANG_VERSION not in SUPPORTED_VERSIONS:
    pytest.skip(f"legacy paths need sglang {' or '.join(SUPPORTED_VERSIONS)}", allow_module_level=True)
pytest.importorskip("sglang.srt.speculative.eagle_worker")

from sglang.srt.speculative.eagle_info import EagleVerifyInput  # noqa: E402

from specpolicy.adapters import _patch as patching  # noqa: E402
from specpolicy.adapters.sglang.legacy import hooks  # noqa: E402
from specpolicy.adapters.sglang.legacy.off_path import OffPath  # noqa: E402
from specpolicy.adapters.sglang.legacy.one_token import FieldNames, OneTokenTarget  # noqa: E402
from specpolicy.adapters.sglang.legacy.runtime import StepRuntime  # noqa: E402
from specpolicy.policies.static import StaticConfig, StaticPolicy  # noqa: E402

PROMPTS = [5, 9, 2]
FIRST = [11, 12, 13]


@pytest.fixture
def names() -> FieldNames:
    return FieldNames.detect()


@pytest.fixture
def wrapped(names: FieldNames, monkeypatch: pytest.MonkeyPatch) -> Any:
    ls.patch_kernels(monkeypatch)
    ls.wrap_v1_hooks(names)
    yield
    patching.unwrap_all()


def _attach(setup: Any, depth: int) -> StepRuntime:
    rt = ls.legacy_runtime(StaticPolicy(StaticConfig(num_steps=depth)), launch_depth=3, path="v1")
    w = setup.worker
    one = OneTokenTarget("one-token-attn", "one-token-graph", [setup.server_args])
    # The one-token verify off step (the fallback when no decode target could be built).
    setattr(w, hooks.OT, OffPath(names=FieldNames.detect(), sizes=one, decode=None, lag=None))
    setattr(w, hooks.RT, rt)
    return rt


def test_off_step_runs_a_one_token_verify_and_grows_each_request_by_one(
    names: FieldNames, wrapped: Any
) -> None:
    setup = ls.make_v1_worker(names)
    rt = _attach(setup, depth=0)
    batch = ls.make_v1_batch(names, PROMPTS, FIRST, setup.alloc)

    result = setup.worker.forward_batch_generation(batch)

    expected = [ls.token_after(n, i) for i, n in enumerate(PROMPTS)]  # target's token after the last one
    assert [r.output_ids for r in batch.reqs] == [[f, e] for f, e in zip(FIRST, expected, strict=True)]
    assert batch.seq_lens.tolist() == [n + 1 for n in PROMPTS]
    assert batch.seq_lens_cpu.tolist() == [n + 1 for n in PROMPTS]
    assert [r.kv_committed_len for r in batch.reqs] == [n + 1 for n in PROMPTS]
    assert result.next_token_ids.tolist() == expected
    assert getattr(result, names.accepted_per_req) == [0, 0, 0]
    # The target ran once, on one token per request (the previous bonus token), with the one-token state.
    (call,) = setup.target.calls
    assert call["draft_token_num"] == 1 and call["num_tokens_per_req"] == 1
    assert call["input_ids"].tolist() == FIRST
    assert (call["attn_backend"], call["graph_runner"]) == ("one-token-attn", "one-token-graph")
    # ... and the launch state is back for the next step.
    mr = setup.target.model_runner
    assert (mr.attn_backend, mr.graph_runner) == ("launch-attn", "launch-graph")
    assert (setup.worker.speculative_num_steps, setup.worker.speculative_num_draft_tokens) == (3, 4)
    assert (setup.server_args.speculative_num_steps, setup.server_args.speculative_num_draft_tokens) == (3, 4)
    # One KV slot per request, written at position seq_len, none freed (nothing rejected).
    rtt = batch.req_to_token_pool.req_to_token
    slots = [int(rtt[i, n]) for i, n in enumerate(PROMPTS)]
    assert len(set(slots)) == 3 and all(s >= 1000 for s in slots)
    assert setup.alloc.freed == []
    # The draft catch-up still ran, on exactly the new token of each request.
    (ext,) = setup.extends
    new_tokens = getattr(ext, "input_ids", None)
    if new_tokens is None:  # 0.5.10.post1 hands the draft input (verified_id) to the extend
        new_tokens = getattr(ext, names.root)
    assert new_tokens.tolist() == expected
    assert rt.skipped_steps == 1


def test_off_step_result_goes_through_the_scheduler_v1_branch(names: FieldNames, wrapped: Any) -> None:
    setup = ls.make_v1_worker(names)
    _attach(setup, depth=0)
    batch = ls.make_v1_batch(names, PROMPTS, FIRST, setup.alloc)
    result = setup.worker.forward_batch_generation(batch)
    sched = ls.make_scheduler(enable_overlap=False, draft_worker=setup.worker)
    lengths_before = [len(r.output_ids) for r in batch.reqs]

    sched.process_batch_result_decode(batch, result)

    assert sched.num_generated_tokens == len(PROMPTS)
    assert sched.spec_metrics == [(len(PROMPTS), 0)]  # zero accepted drafts reported, not an error
    assert sched.streamed == [[r.rid for r in batch.reqs]]
    # v1 appends tokens in verify; the scheduler must not append again.
    assert [len(r.output_ids) for r in batch.reqs] == lengths_before
    assert not any(r.finished() for r in batch.reqs)


def test_consecutive_off_steps_keep_growing_by_one(names: FieldNames, wrapped: Any) -> None:
    setup = ls.make_v1_worker(names)
    _attach(setup, depth=0)
    batch = ls.make_v1_batch(names, PROMPTS, FIRST, setup.alloc)
    for step in range(1, 4):
        # the scheduler installs the draft input the extend produced; here: the new tokens as next roots
        new = [r.output_ids[-1] for r in batch.reqs]
        from sglang.srt.speculative.eagle_info import EagleDraftInput

        batch.spec_info = EagleDraftInput(**{names.root: torch.tensor(new, dtype=torch.int32)})
        setup.worker.forward_batch_generation(batch)
        assert batch.seq_lens.tolist() == [n + step for n in PROMPTS]
        assert [len(r.output_ids) for r in batch.reqs] == [1 + step] * 3
    assert [c["input_ids"].tolist() for c in setup.target.calls][1] == [r.output_ids[1] for r in batch.reqs]


def test_on_step_calls_the_original_draft_and_verify() -> None:
    calls: list[str] = []

    def orig_draft(self: Any, batch: Any) -> str:
        calls.append("draft")
        return "tree"

    def orig_verify(self: Any, batch: Any) -> str:
        calls.append("verify")
        return "verified"

    names = FieldNames(
        "bonus_tokens", "retrieve_", "num_correct_drafts_per_req_cpu", "num_correct_drafts", True
    )
    draft = hooks.v1_draft(orig_draft, names)
    verify = hooks.v1_verify(orig_verify)
    rt = ls.legacy_runtime(StaticPolicy(StaticConfig(num_steps=3)), launch_depth=3, path="v1")
    worker = type("W", (), {})()
    setattr(worker, hooks.RT, rt)
    assert rt.begin_decode(2, 10) is False  # policy says on
    assert draft(worker, None) == "tree" and verify(worker, None) == "verified"
    assert calls == ["draft", "verify"]


def test_worker_without_runtime_is_untouched() -> None:
    seen: list[Any] = []

    def orig(self: Any, batch: Any) -> str:
        seen.append(batch)
        return "sglang"

    names = FieldNames(
        "bonus_tokens", "retrieve_", "num_correct_drafts_per_req_cpu", "num_correct_drafts", True
    )
    fwd = hooks.v1_forward(orig, names)
    assert fwd(object(), "batch") == "sglang" and seen == ["batch"]


def test_one_token_input_is_rooted_at_the_last_verified_token(names: FieldNames, wrapped: Any) -> None:
    setup = ls.make_v1_worker(names)
    batch = ls.make_v1_batch(names, PROMPTS, FIRST, setup.alloc)
    vi = hooks.v1_one_token_input(setup.worker, batch, names, EagleVerifyInput)
    r = names.retrieve
    assert vi.draft_token.tolist() == FIRST
    assert vi.positions.tolist() == PROMPTS and vi.positions.dtype == torch.int64
    assert (vi.spec_steps, vi.draft_token_num, vi.topk) == (0, 1, 1)
    assert getattr(vi, f"{r}index").tolist() == [[0], [1], [2]]
    assert getattr(vi, f"{r}next_token").tolist() == [[-1]] * 3
    assert vi.custom_mask.numel() == sum(PROMPTS) + 3 and bool(vi.custom_mask.all())
    assert batch.seq_lens_sum == sum(PROMPTS)
    assert [r.decode_batch_idx for r in batch.reqs] == [1, 1, 1]


def test_off_step_on_a_tree_worker_verifies_a_one_node_chain(names: FieldNames, wrapped: Any) -> None:
    setup = ls.make_v1_worker(names)
    setup.worker.topk = 4  # a topk > 1 tree (v1 only): the off step is still one token per request
    setup.worker.speculative_num_draft_tokens = 8
    _attach(setup, depth=0)
    batch = ls.make_v1_batch(names, PROMPTS, FIRST, setup.alloc)
    setup.worker.forward_batch_generation(batch)
    (call,) = setup.target.calls
    assert (call["topk"], call["draft_token_num"]) == (1, 1)
    assert [r.output_ids[-1] for r in batch.reqs] == [ls.token_after(n, i) for i, n in enumerate(PROMPTS)]
    assert (setup.worker.topk, setup.worker.speculative_num_draft_tokens) == (4, 8)
