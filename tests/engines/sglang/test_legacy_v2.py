"""The v2 (overlap, ``EAGLEWorkerV2``) off step through SGLang's own scheduler, worker and result processing.

What runs for real (0.5.10.post1 and 0.5.12.post1): ``Scheduler.run_batch`` (overlap branch: FutureMap store,
``copy_to_cpu``, ``batch.spec_info = next_draft_input``, ``batch.seq_lens = new_seq_lens``),
``EAGLEWorkerV2.forward_batch_generation`` / ``verify`` with specpolicy's wrappers, ``prepare_for_v2_verify``,
``EagleVerifyInput.sample`` (acceptance), ``EagleDraftWorker._draft_extend_for_decode`` (the draft catch-up's
bookkeeping: which rows feed the next draft input), ``FutureMap.resolve_future`` for the next step, and
``process_batch_result_decode`` (is_spec_v2 branch, ``_resolve_spec_overlap_tokens``). Faked because they need
a GPU (see legacy_support): the triton kernels, CUDA stream bookkeeping, ``ForwardBatch`` packing, the target
and draft model forwards. Not proven here: the one-token CUDA graph and the draft catch-up's numerics.
"""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any

import legacy_support as ls
import pytest
import torch
from conftest import SGLANG_VERSION

from specpolicy.adapters.sglang.legacy.targets import SUPPORTED_VERSIONS

if SGLANG_VERSION not in SUPPORTED_VERSIONS:
    pytest.skip(f"legacy paths need sglang {' or '.join(SUPPORTED_VERSIONS)}", allow_module_level=True)
pytest.importorskip("sglang.srt.speculative.eagle_worker_v2")

from sglang.srt.managers.overlap_utils import FutureMap  # noqa: E402
from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative.eagle_info import EagleDraftInput  # noqa: E402
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from specpolicy.adapters import _patch as patching  # noqa: E402
from specpolicy.adapters.sglang.legacy import hooks  # noqa: E402
from specpolicy.adapters.sglang.legacy.install import _patch  # noqa: E402
from specpolicy.adapters.sglang.legacy.off_path import OffPath  # noqa: E402
from specpolicy.adapters.sglang.legacy.one_token import FieldNames, OneTokenTarget  # noqa: E402
from specpolicy.adapters.sglang.legacy.runtime import StepRuntime  # noqa: E402
from specpolicy.policies.static import StaticConfig, StaticPolicy  # noqa: E402
from specpolicy.runtime.decision import Decision  # noqa: E402

PROMPTS = [5, 9, 2]
FIRST = [11, 12, 13]
STEPS = 3
D = STEPS + 1


@pytest.fixture
def names() -> FieldNames:
    return FieldNames.detect()


@pytest.fixture
def wrapped(names: FieldNames, monkeypatch: pytest.MonkeyPatch, sglang_version: str) -> Any:
    ls.patch_v2(monkeypatch)
    table = "0.5.12.post1" if sglang_version == "0.5.12.post1" else "0.5.10.post1"
    _patch(table, names)
    yield
    patching.unwrap_all()


def _setup(names: FieldNames, depth: int) -> tuple[Any, Any, Any, StepRuntime]:
    s = ls.make_v2_worker(STEPS)
    rt = ls.legacy_runtime(StaticPolicy(StaticConfig(num_steps=depth)), launch_depth=STEPS, path="v2")
    one = OneTokenTarget(
        SimpleNamespace(init_forward_metadata=lambda fb: None, name="one-token-attn"),
        SimpleNamespace(can_run=lambda fb: False, name="one-token-graph"),
        [s.server_args],
    )
    # The one-token verify off step (the fallback when no decode target could be built).
    setattr(s.worker, hooks.OT, OffPath(names=names, sizes=one, decode=None, lag=None))
    setattr(s.worker, hooks.RT, rt)
    setattr(s.draft_worker, hooks.RT, rt)
    # KV slots the scheduler's prepare_for_decode reserved: row i, column j -> slot 100*i + j
    for i in range(len(PROMPTS)):
        s.pool.req_to_token[i] = torch.arange(128) + 100 * i
    sched = ls.make_scheduler(enable_overlap=True, draft_worker=s.worker)
    sched.forward_ct = 0
    sched._profile_batch_predicate = lambda batch: None
    sched.forward_sleep_time = None
    sched.is_generation = True
    sched.spec_algorithm = SpeculativeAlgorithm.EAGLE
    sched.enable_pdmux = False
    sched.future_map = FutureMap(8, 0, 128, "cpu", SpeculativeAlgorithm.EAGLE)
    sched.forward_stream_ctx = nullcontext()
    sched.forward_stream = SimpleNamespace(wait_stream=lambda stream: None)
    sched.schedule_stream = None
    sched.device_module = torch.cpu
    sched.batch_record_ct = 0
    sched.batch_record_buf = [None, None]
    batch = _batch(names, sched)
    return s, sched, batch, rt


def _batch(names: FieldNames, sched: Any) -> Any:
    """The running batch after prefill; its draft input lives in the FutureMap, as the prefill left it."""
    bs = len(PROMPTS)
    b = object.__new__(ScheduleBatch)
    b.reqs = ls.make_reqs(PROMPTS, FIRST)
    for r, n in zip(b.reqs, PROMPTS, strict=True):
        # 0.5.12.post1's prepare_for_decode pre-claims the bonus slot (result processing subtracts it again)
        r.kv_committed_len = n + (1 if names.has_result_stride else 0)
    b.forward_mode = ForwardMode.DECODE
    b.spec_algorithm = SpeculativeAlgorithm.EAGLE
    b.enable_overlap = True
    b.return_logprob = False
    b.return_hidden_states = False
    b.seq_lens = torch.tensor(PROMPTS, dtype=torch.int64)
    prefill_out = EagleDraftInput(
        **{names.root: torch.tensor(FIRST, dtype=torch.int32)},
        topk_p=torch.ones(bs, 1),
        topk_index=torch.tensor([[ls.draft_token_after(t)] for t in FIRST]),
        hidden_states=torch.zeros(bs, ls.HIDDEN),
        new_seq_lens=b.seq_lens.clone(),
    )
    fi = sched.future_map.alloc_future_indices(bs)
    sched.future_map.store_to_map_for_new_batch(fi, prefill_out)
    b.spec_info = EagleDraftInput(future_indices=fi)

    def get_model_worker_batch() -> Any:
        return SimpleNamespace(
            forward_mode=b.forward_mode,
            is_extend_in_batch=False,
            seq_lens=b.seq_lens,
            seq_lens_cpu=b.seq_lens.clone(),
            seq_lens_sum=int(b.seq_lens.sum()),
            spec_info=b.spec_info,
            sampling_info=SimpleNamespace(copy_for_forward=lambda: ls.sampling_info(len(b.reqs))),
            reqs=b.reqs,
            req_pool_indices=torch.arange(len(b.reqs)),
            input_ids=None,
            out_cache_loc=None,
            return_logprob=False,
            return_hidden_states=False,
            has_grammar=False,
            capture_hidden_mode=None,
        )

    b.get_model_worker_batch = get_model_worker_batch
    return b


def test_off_step_through_run_batch_and_result_processing(names: FieldNames, wrapped: Any) -> None:
    s, sched, batch, rt = _setup(names, depth=0)

    result = Scheduler.run_batch(sched, batch)

    expected = [ls.token_after(n, i) for i, n in enumerate(PROMPTS)]
    # The target verified one token per request (the previous bonus token) with the one-token state swapped
    # in.
    (call,) = s.target.calls
    assert call["draft_token_num"] == 1 and call["input_ids"].tolist() == FIRST
    assert (call["attn_backend"].name, call["graph_runner"].name) == ("one-token-attn", "one-token-graph")
    assert s.target.model_runner.attn_backend.name == "launch-attn"
    assert (s.worker.speculative_num_steps, s.worker.speculative_num_draft_tokens) == (STEPS, D)
    # The result has the launch stride with one accepted token per request: an all-rejected step's shape.
    assert result.accept_lens.tolist() == [1, 1, 1]
    assert result.next_token_ids.tolist() == [t for t in expected for _ in range(D)]
    if names.has_result_stride:
        assert result.speculative_num_draft_tokens == D
    # The scheduler's overlap branch took the next draft input and sequence lengths from it.
    nd = result.next_draft_input
    assert batch.spec_info is nd
    assert batch.seq_lens.tolist() == [n + 1 for n in PROMPTS]
    assert getattr(nd, names.root).tolist() == expected
    # The draft catch-up ran at the launch depth (D positions per request) on the new token, and the next
    # draft input was taken from each request's first position: the drafter continues from the new token.
    (ids,) = s.draft_runner.calls
    assert ids.tolist() == [t for t in expected for _ in range(D)]
    # ... writing its KV into the D slots reserved after each sequence (the first one is the verified token's)
    (locs,) = s.draft_runner.cache_locs
    assert locs.tolist() == [100 * i + n + j for i, n in enumerate(PROMPTS) for j in range(D)]
    assert nd.topk_index.view(-1).tolist() == [ls.draft_token_after(t) for t in expected]
    assert nd.hidden_states[:, 0].tolist() == [float(t) for t in expected]
    assert nd.hidden_states[:, 1].tolist() == [float(i * D) for i in range(3)]

    before = [list(r.output_ids) for r in batch.reqs]
    sched.process_batch_result_decode(batch, result)

    assert [r.output_ids for r in batch.reqs] == [b + [t] for b, t in zip(before, expected, strict=True)]
    assert [r.kv_committed_len for r in batch.reqs] == [n + 1 for n in PROMPTS]
    assert sched.spec_metrics == [(3, 0)]
    # Feedback reached the runtime through the scheduler: the step ran at depth 0, no acceptance data.
    assert rt.runtime.controller.steps_by_depth[0] == 1
    stats_after = _next_stats(rt)
    assert stats_after.last_num_steps == 0 and stats_after.accepted_draft_tokens is None


def test_two_off_steps_chain_through_the_future_map(names: FieldNames, wrapped: Any) -> None:
    s, sched, batch, rt = _setup(names, depth=0)
    r1 = Scheduler.run_batch(sched, batch)
    sched.process_batch_result_decode(batch, r1)
    # Next step: the scheduler resolves the future draft input (bonus token, new_seq_lens) for the next batch.
    mwb = batch.get_model_worker_batch()
    sched.future_map.resolve_future(mwb)
    first = [ls.token_after(n, i) for i, n in enumerate(PROMPTS)]
    assert getattr(mwb.spec_info, names.root).tolist() == first
    assert mwb.spec_info.new_seq_lens.tolist() == [n + 1 for n in PROMPTS]

    r2 = Scheduler.run_batch(sched, batch)
    sched.process_batch_result_decode(batch, r2)
    second = [ls.token_after(n + 1, i) for i, n in enumerate(PROMPTS)]
    assert s.target.calls[1]["input_ids"].tolist() == first
    assert [r.output_ids[-2:] for r in batch.reqs] == [[a, b] for a, b in zip(first, second, strict=True)]
    assert batch.seq_lens.tolist() == [n + 2 for n in PROMPTS]
    assert rt.skipped_steps == 2


def test_return_logprob_batches_always_speculate(names: FieldNames, wrapped: Any) -> None:
    calls: list[str] = []

    def orig_draft(self: Any, mwb: Any) -> str:
        calls.append("draft")
        return "tree"

    draft = hooks.v2_draft(orig_draft, names)
    rt = ls.legacy_runtime(StaticPolicy(StaticConfig(num_steps=0)), launch_depth=STEPS, path="v2")
    holder = SimpleNamespace(**{hooks.RT: rt})
    assert rt.begin_decode(3, 30, forced_on=True) is False
    assert draft(holder, None) == "tree" and calls == ["draft"]
    assert rt.runtime.controller.steps_by_depth[STEPS] == 1


def _next_stats(rt: StepRuntime) -> Any:
    seen: list[Any] = []

    def record(stats: Any) -> Decision:
        seen.append(stats)
        return (rt.current_step + 1, 0)

    rt.decide = record
    rt.begin_decode(3, 30)
    return seen[0]


def test_wrapped_classes_keep_the_originals_reachable(names: FieldNames, wrapped: Any) -> None:
    for cls, name in [(EAGLEWorkerV2, "verify"), (EagleDraftWorker, "draft"), (Scheduler, "run_batch")]:
        fn = getattr(cls, name)
        assert hasattr(fn, "__specpolicy_wrapped__")
        assert fn.__name__ == name
