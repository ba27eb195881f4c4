"""Fakes for the legacy-adapter tests: the smallest stand-ins for what needs a GPU, built from SGLang's own
types.

Every fake here replaces one GPU-only piece and is listed in docs/sglang-legacy.md:

* ``greedy_tree_verify``: torch version of ``sgl_kernel.verify_tree_greedy`` (``verify_tree_greedy_func`` is a
  no-op on CPU). Follows the kernel's contract: walk the draft tree from the root, accept a child whose token
  equals the target's prediction at its parent, emit the target's prediction after the last accepted node.
* ``assign_req_to_token_pool``: torch version of the triton kernel of the same name (writes the allocated KV
  slots into ``req_to_token[req, start:end]``).
* ``fill_bonus_tokens``: torch version of the v2 triton kernel (the token at ``i*stride + accept_len - 1``).
* ``FakeAllocator``: the KV slot allocator (hands out increasing slot ids, records frees).
* ``FakeTargetWorker``: the target model forward; its logits make the target predict ``token_after(pos)``
  at every position, and it records which attention backend / graph runner were installed when it ran.
* ``ScheduleBatch`` / ``Scheduler`` instances are real classes made with ``object.__new__`` and only the
  fields the code under test reads; ``get_model_worker_batch`` (which would pack a full GPU batch) is
  replaced.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any

import torch

VOCAB = 512
HIDDEN = 8


def token_after(position: int, req_index: int) -> int:
    """The token the fake target predicts after ``position`` for request ``req_index`` (deterministic)."""
    return 7 + (31 * req_index + 13 * position) % (VOCAB - 8)


def legacy_runtime(policy: Any, *, launch_depth: int, path: str) -> Any:
    """The production legacy assembly (``make_runtime``) running ``policy``, with metrics off."""
    from specpolicy.adapters.sglang.legacy.runtime import make_runtime
    from specpolicy.runtime.settings import AdapterSettings

    settings = AdapterSettings.build("static", metrics=False)
    return make_runtime(settings, policy=policy, launch_depth=launch_depth, path=path)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ kernel fakes


def greedy_tree_verify(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrieve_index: torch.Tensor | None = None,
    retrieve_next_token: torch.Tensor | None = None,
    retrieve_next_sibling: torch.Tensor | None = None,
    target_predict: torch.Tensor | None = None,
    topk: int = -1,
    *,
    retrive_index: torch.Tensor | None = None,  # 0.5.10.post1 spelling
    retrive_next_token: torch.Tensor | None = None,
    retrive_next_sibling: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    retrieve_index = retrieve_index if retrieve_index is not None else retrive_index
    retrieve_next_token = retrieve_next_token if retrieve_next_token is not None else retrive_next_token
    retrieve_next_sibling = (
        retrieve_next_sibling if retrieve_next_sibling is not None else retrive_next_sibling
    )
    assert retrieve_index is not None and retrieve_next_token is not None
    assert retrieve_next_sibling is not None and target_predict is not None
    assert candidates.dtype == torch.int64, "the kernel requires int64 candidates"
    bs = candidates.shape[0]
    for b in range(bs):
        node = 0
        accept_index[b, 0] = int(retrieve_index[b, 0])
        n = 0
        while True:
            child = int(retrieve_next_token[b, node])
            found = -1
            while child != -1:
                if int(candidates[b, child]) == int(target_predict[b, node]):
                    found = child
                    break
                child = int(retrieve_next_sibling[b, child])
            if found == -1:
                break
            predicts[int(retrieve_index[b, node])] = int(target_predict[b, node])
            n += 1
            accept_index[b, n] = int(retrieve_index[b, found])
            node = found
        predicts[int(retrieve_index[b, node])] = int(target_predict[b, node])
        accept_token_num[b] = n
    return predicts, accept_index, accept_token_num


def assign_req_to_token_pool(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    batch_size: int,
) -> None:
    pos = 0
    for i in range(batch_size):
        s, e = int(start_offset[i]), int(end_offset[i])
        req_to_token[int(req_pool_indices[i]), s:e] = out_cache_loc[pos : pos + e - s].to(req_to_token.dtype)
        pos += e - s


def fill_bonus_tokens(accept_tokens: torch.Tensor, accept_lens: torch.Tensor, stride: int) -> torch.Tensor:
    idx = torch.arange(accept_lens.shape[0]) * stride + accept_lens.to(torch.int64) - 1
    return accept_tokens.reshape(-1)[idx].to(torch.int32)  # the kernel reads a flat pointer


# ----------------------------------------------------------------------------------------- engine fakes


class FakeAllocator:
    def __init__(self, start: int = 1000) -> None:
        self.next = start
        self.freed: list[int] = []
        self.page_size = 1

    def alloc(self, n: int) -> torch.Tensor:
        out = torch.arange(self.next, self.next + n, dtype=torch.int64)
        self.next += n
        return out

    def free(self, slots: torch.Tensor) -> None:
        self.freed.extend(int(x) for x in slots)

    def free_group_begin(self) -> None:
        pass

    def free_group_end(self) -> None:
        pass

    def backup_state(self) -> int:
        return self.next

    def restore_state(self, state: int) -> None:
        self.next = state


class FakeTargetWorker:
    """Target forward: at every input position p of request i, the logits peak at ``token_after(p, i)``."""

    def __init__(self) -> None:
        self.model_runner = SimpleNamespace(
            attn_backend="launch-attn",
            graph_runner="launch-graph",
            hybrid_gdn_config=None,
            mamba2_config=None,
            hybrid_lightning_config=None,
            server_args=None,
        )
        self.calls: list[dict[str, Any]] = []

    def forward_batch_generation(self, model_worker_batch: Any = None, **kwargs: Any) -> Any:
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.managers.utils import GenerationBatchResult

        spec = model_worker_batch.spec_info
        positions = spec.positions
        bs = model_worker_batch.seq_lens.shape[0]
        per_req = positions.shape[0] // bs
        logits = torch.full((positions.shape[0], VOCAB), -10.0)
        hidden = torch.zeros(positions.shape[0], HIDDEN)
        for row in range(positions.shape[0]):
            i = row // per_req
            logits[row, token_after(int(positions[row]), i)] = 10.0
            hidden[row, 0] = float(positions[row])
            hidden[row, 1] = float(i)
        self.calls.append(
            {
                "attn_backend": self.model_runner.attn_backend,
                "graph_runner": self.model_runner.graph_runner,
                "draft_token_num": spec.draft_token_num,
                "topk": spec.topk,
                "num_tokens_per_req": spec.num_tokens_per_req,
                "input_ids": model_worker_batch.input_ids.clone(),
                "kwargs": kwargs,
            }
        )
        return GenerationBatchResult(
            logits_output=LogitsProcessorOutput(next_token_logits=logits, hidden_states=hidden),
            can_run_cuda_graph=False,
        )


def make_server_args(steps: int = 3, topk: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        speculative_num_steps=steps,
        speculative_num_draft_tokens=steps + 1,
        speculative_eagle_topk=topk,
        speculative_algorithm="EAGLE",
        speculative_adaptive=False,
        enable_dp_attention=False,
        enable_multi_layer_eagle=False,
        disable_cuda_graph=False,
        pp_size=1,
        tp_size=1,
        enable_mamba_extra_buffer=lambda: False,
        speculative_accept_threshold_single=1.0,
        speculative_accept_threshold_acc=1.0,
        disaggregation_decode_enable_offload_kvcache=False,
    )


def make_reqs(prompt_lens: list[int], first_tokens: list[int]) -> list[Any]:
    """Real ``Req`` objects after prefill (one output token each, KV committed for the prompt)."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    reqs = []
    for i, (n, tok) in enumerate(zip(prompt_lens, first_tokens, strict=True)):
        sp = SamplingParams(max_new_tokens=64, temperature=0)
        sp.normalize(None)
        sp.verify(VOCAB)
        r = Req(f"r{i}", "", list(range(1, n + 1)), sp, vocab_size=VOCAB)
        r.output_ids.append(tok)
        r.kv_committed_len = n
        r.kv_allocated_len = n
        r.req_pool_idx = i  # the batches below hold request i in pool row i (``req_pool_indices``)
        reqs.append(r)
    return reqs


class _Sampling(SimpleNamespace):
    def __len__(self) -> int:
        return int(self.bs)


def sampling_info(bs: int) -> Any:
    return _Sampling(
        bs=bs,
        penalizer_orchestrator=SimpleNamespace(is_required=False),
        is_all_greedy=True,
        logit_bias=None,
        has_custom_logit_processor=False,
        vocab_size=VOCAB,
        vocab_mask=None,
        acc_additive_penalties=None,
        acc_scaling_penalties=None,
    )


def quiet_sglang_logs() -> None:
    logging.getLogger("sglang").setLevel(logging.ERROR)


def no_context(*args: Any, **kwargs: Any) -> Any:
    return nullcontext()


# ------------------------------------------------------------------------------------ assembled set-ups


def wrap_v1_hooks(names: Any) -> None:
    """Wrap SGLang's v1 worker (``EAGLEWorker``) with the adapter's hooks from install's own hook plan;
    undo with ``patching.unwrap_all()``."""
    import sglang
    from sglang.srt.speculative.eagle_worker import EAGLEWorker

    from specpolicy.adapters import _patch as patching
    from specpolicy.adapters.sglang.legacy.install import hook_plan

    for cls, name, make in hook_plan(sglang.__version__, names):
        if cls is EAGLEWorker:
            patching.wrap(cls, name, make)


def patch_kernels(monkeypatch: Any) -> None:
    """Route the GPU kernels verify calls to the torch fakes above; set the global server args."""
    import sglang.srt.server_args as server_args_module
    import sglang.srt.speculative.eagle_info as info
    import sglang.srt.speculative.eagle_info_v2 as info_v2

    monkeypatch.setattr(info, "verify_tree_greedy_func", greedy_tree_verify)
    monkeypatch.setattr(info_v2, "verify_tree_greedy_func", greedy_tree_verify)
    monkeypatch.setattr(info, "assign_req_to_token_pool_func", assign_req_to_token_pool)
    monkeypatch.setattr(server_args_module, "_global_server_args", make_server_args())


def root_tokens(names: Any, spec_info: Any) -> torch.Tensor:
    out: torch.Tensor = getattr(spec_info, names.root)
    return out


def make_v1_worker(names: Any, steps: int = 3) -> SimpleNamespace:
    """A real ``EAGLEWorker`` (``object.__new__``) with a fake target, allocator and draft extend."""
    from sglang.srt.speculative.eagle_worker import EAGLEWorker
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    w = object.__new__(EAGLEWorker)
    sa = make_server_args(steps)
    w.server_args = sa
    w.page_size = 1
    w.topk = 1
    w.speculative_num_steps = steps
    w.speculative_num_draft_tokens = steps + 1
    w.speculative_algorithm = SpeculativeAlgorithm.EAGLE
    w.draft_tp_context = no_context
    w._model_runner = SimpleNamespace(tp_group=None)
    target = FakeTargetWorker()
    w.target_worker = target
    alloc = FakeAllocator()
    w.token_to_kv_pool_allocator = alloc
    w.adaptive_controller = None
    extends: list[Any] = []

    def draft_extend(batch: Any) -> Any:  # the draft model forward (GPU): record what it was asked to extend
        extends.append(batch.spec_info)
        return None

    w.forward_draft_extend_after_decode = draft_extend
    return SimpleNamespace(worker=w, target=target, alloc=alloc, extends=extends, server_args=sa)


def make_v1_batch(names: Any, prompt_lens: list[int], first_tokens: list[int], alloc: FakeAllocator) -> Any:
    """A real ``ScheduleBatch`` in decode after prefill (``object.__new__``, the fields verify reads)."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftInput
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    bs = len(prompt_lens)
    b = object.__new__(ScheduleBatch)
    b.reqs = make_reqs(prompt_lens, first_tokens)
    b.forward_mode = ForwardMode.DECODE
    b.is_extend_in_batch = False
    b.seq_lens = torch.tensor(prompt_lens, dtype=torch.int64)
    b.seq_lens_cpu = b.seq_lens.clone()
    b.spec_info = EagleDraftInput(**{names.root: torch.tensor(first_tokens, dtype=torch.int32)})
    b.sampling_info = sampling_info(bs)
    b.tree_cache = SimpleNamespace(token_to_kv_pool_allocator=alloc, is_chunk_cache=lambda: True, page_size=1)
    b.req_to_token_pool = pool = object.__new__(ReqToTokenPool)  # the real type: its ``write`` runs
    pool.req_to_token = torch.zeros(bs + 2, 128, dtype=torch.int32)
    b.req_pool_indices = torch.arange(bs)
    b.return_logprob = False
    b.return_hidden_states = False
    b.has_grammar = False
    b.model_config = SimpleNamespace(
        think_end_id=None, is_encoder_decoder=False, hidden_size=HIDDEN, dtype=torch.float32
    )
    b.device = "cpu"
    b.token_to_kv_pool_allocator = alloc
    b.spec_algorithm = SpeculativeAlgorithm.EAGLE
    b.enable_overlap = False
    b.input_ids = None
    b.maybe_evict_swa = lambda: None
    b.get_model_worker_batch = lambda seq_lens_cpu_cache=None: SimpleNamespace(
        spec_info=b.spec_info,
        capture_hidden_mode=b.spec_info.capture_hidden_mode,
        seq_lens=b.seq_lens,
        input_ids=b.input_ids,
    )
    return b


def make_scheduler(enable_overlap: bool, draft_worker: Any = None) -> Any:
    """A real ``Scheduler`` (``object.__new__``) with what ``process_batch_result_decode`` reads.

    Output streaming and stats reporting (ZMQ sockets, Prometheus) are recorded instead of sent.
    """
    from sglang.srt.managers.scheduler import Scheduler

    s = object.__new__(Scheduler)
    s.enable_overlap = enable_overlap
    s.enable_overlap_mlx = False
    s.enable_metrics = False
    s.enable_hisparse = False
    s.num_generated_tokens = 0
    s.forward_ct_decode = 0
    s.server_args = make_server_args()
    s.model_config = SimpleNamespace(think_end_id=None)
    s.token_to_kv_pool_allocator = FakeAllocator()
    s.tree_cache = None
    s.draft_worker = draft_worker
    s.model_worker = draft_worker
    s.waiting_queue = []
    streamed: list[Any] = []
    spec_metrics: list[tuple[int, int]] = []
    s.streamed = streamed
    s.spec_metrics = spec_metrics
    s.stream_output = lambda reqs, return_logprob, skip_req=None: s.streamed.append([r.rid for r in reqs])
    s.update_spec_metrics = lambda bs, n: s.spec_metrics.append((bs, n))
    s.report_decode_stats = lambda *a, **k: None
    return s


# --------------------------------------------------------------------------------------------------- v2


def draft_token_after(token: int) -> int:
    """The token the fake drafter proposes after ``token``."""
    return 3 + (5 * token) % (VOCAB - 4)


class _Grid:
    """Stand-in for a launched triton kernel: ``kernel[grid](*args)``."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __getitem__(self, grid: Any) -> Any:
        return self.fn


def _fill_bonus_kernel(
    accept_tokens: torch.Tensor, accept_lens: torch.Tensor, out: torch.Tensor, stride: int
) -> None:
    out.copy_(fill_bonus_tokens(accept_tokens, accept_lens, stride))


def assign_extend_cache_locs(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    batch_size: int,
    draft_token_num: int,
    device: Any,
) -> torch.Tensor:
    out = [
        req_to_token[int(req_pool_indices[i]), int(start_offset[i]) : int(end_offset[i])]
        for i in range(batch_size)
    ]
    return torch.cat(out).to(torch.int64)


class FakeForwardBatch:
    """``ForwardBatch.init_new`` packs a GPU batch for a model runner; the fakes only read these fields."""

    @staticmethod
    def init_new(batch: Any, model_runner: Any) -> Any:
        return SimpleNamespace(
            spec_info=batch.spec_info,
            seq_lens=batch.seq_lens,
            input_ids=batch.input_ids,
            forward_mode=batch.forward_mode,
            batch_size=len(batch.seq_lens),
            out_cache_loc=getattr(batch, "out_cache_loc", None),
        )


class FakeDraftRunner:
    """Draft forward of the catch-up: logits peak at ``draft_token_after(input)``; hidden = (input, row)."""

    def __init__(self) -> None:
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.tp_group = None
        self.spec_algorithm = SpeculativeAlgorithm.EAGLE
        self.attn_backend = SimpleNamespace(init_forward_metadata=lambda fb: None)
        self.calls: list[torch.Tensor] = []
        self.cache_locs: list[torch.Tensor] = []

    def forward(self, forward_batch: Any, skip_attn_backend_init: bool = False) -> Any:
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput

        ids = forward_batch.input_ids
        self.calls.append(ids.clone())
        self.cache_locs.append(forward_batch.out_cache_loc.clone())
        logits = torch.full((ids.shape[0], VOCAB), -10.0)
        hidden = torch.zeros(ids.shape[0], HIDDEN)
        for row, t in enumerate(ids.tolist()):
            logits[row, draft_token_after(t)] = 10.0
            hidden[row, 0] = float(t)
            hidden[row, 1] = float(row)
        return SimpleNamespace(
            logits_output=LogitsProcessorOutput(next_token_logits=logits, hidden_states=hidden)
        )


class FakeV2Target(FakeTargetWorker):
    """v2 verify calls the target with a prepared ``forward_batch`` instead of a model worker batch."""

    def forward_batch_generation(self, model_worker_batch: Any = None, **kwargs: Any) -> Any:
        fb = kwargs.pop("forward_batch", None)
        return super().forward_batch_generation(
            fb if model_worker_batch is None else model_worker_batch, **kwargs
        )


def patch_v2(monkeypatch: Any) -> None:
    """The v2 GPU pieces: triton kernels, CUDA stream bookkeeping, GPU batch packing."""
    import sglang.srt.speculative.eagle_info_v2 as info_v2
    import sglang.srt.speculative.eagle_worker_v2 as worker_v2

    patch_kernels(monkeypatch)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None, raising=False)
    monkeypatch.setattr(info_v2, "assign_extend_cache_locs_func", assign_extend_cache_locs)
    monkeypatch.setattr(info_v2, "ForwardBatch", FakeForwardBatch)
    for name in ("fill_bonus_tokens", "fill_new_verified_id"):
        if hasattr(worker_v2, name):
            monkeypatch.setattr(worker_v2, name, _Grid(_fill_bonus_kernel))


def make_v2_worker(steps: int = 3) -> SimpleNamespace:
    """Real ``EAGLEWorkerV2`` and ``EagleDraftWorker`` (``object.__new__``) around the fake models."""
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    sa = make_server_args(steps)
    target = FakeV2Target()
    target.model_runner.spec_algorithm = SpeculativeAlgorithm.EAGLE
    draft_runner = FakeDraftRunner()
    req_to_token_pool = SimpleNamespace(req_to_token=torch.zeros(8, 128, dtype=torch.int32))

    dw = object.__new__(EagleDraftWorker)
    dw.server_args = sa
    dw.topk = 1
    dw.speculative_num_steps = steps
    dw.speculative_num_draft_tokens = steps + 1
    dw.device = "cpu"
    dw.plan_stream = None
    dw.plan_stream_ctx = nullcontext()
    dw.draft_runner = draft_runner
    dw.draft_tp_context = no_context
    dw.cuda_graph_runner_for_draft_extend = None
    dw.req_to_token_pool = req_to_token_pool

    w = object.__new__(EAGLEWorkerV2)
    w.server_args = sa
    w.topk = 1
    w.speculative_num_steps = steps
    w.speculative_num_draft_tokens = steps + 1
    w.device = "cpu"
    w.plan_stream = None
    w.plan_stream_ctx = nullcontext()
    w.speculative_algorithm = SpeculativeAlgorithm.EAGLE
    w.req_to_token_pool = req_to_token_pool
    w.adaptive_controller = None
    w._draft_worker = dw
    w._target_worker = target
    target.model_runner.graph_runner = SimpleNamespace(can_run=lambda fb: False, name="launch-graph")
    target.model_runner.attn_backend = SimpleNamespace(
        init_forward_metadata=lambda fb: None, name="launch-attn"
    )
    return SimpleNamespace(
        worker=w,
        draft_worker=dw,
        target=target,
        draft_runner=draft_runner,
        server_args=sa,
        pool=req_to_token_pool,
    )
