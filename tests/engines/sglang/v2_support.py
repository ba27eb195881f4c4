"""Fakes for the 0.5.13+ (v2 route) tests, built from SGLang's own types.

* ``schedule_batch``: a real ``ScheduleBatch`` (every dataclass field at its default, then the fields a
  decode batch of the spec-v2 worker carries), so the adapter's ``copy.copy`` views and SGLang's own
  ``ForwardBatch.init_new`` run on the real type.
* ``Req``: the fields of ``sglang.srt.managers.schedule_batch.Req`` the catch-up reads (prompt, output,
  request-pool row).
* ``OracleTarget``: the target worker. Its ``forward_batch_generation`` builds SGLang's real
  ``ForwardBatch`` from the batch and answers with the token ``token_after(position, row)`` and the hidden
  state ``(position, row)``; it records the forward mode, inputs, positions, KV slots and the attention
  backend and graph runner installed on its model runner.
* ``KVDraftRunner``: the drafter. Its ``forward`` (on the real ``ForwardBatch``) writes the draft KV as
  ``slot -> (input token, position, target hidden position)`` at every position it is fed, the way SGLang's
  draft model writes it, and proposes ``draft_token_after(last input)``.
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any

import torch

VOCAB = 512
HIDDEN = 8
TREE_RANKS = 4  # the drafter's logits rank this many tokens above the rest


def token_after(position: int, row: int) -> int:
    """The token the fake target predicts after ``position`` for pool row ``row`` (deterministic)."""
    return 7 + (31 * row + 13 * position) % (VOCAB - 8)


def draft_token_after(token: int) -> int:
    return (token * 5 + 3) % VOCAB


def schedule_batch(**fields: Any) -> Any:
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    batch = object.__new__(ScheduleBatch)
    for f in dataclasses.fields(ScheduleBatch):
        if f.default is not dataclasses.MISSING:
            value: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None
        object.__setattr__(batch, f.name, value)
    for k, v in fields.items():
        object.__setattr__(batch, k, v)
    return batch


@dataclasses.dataclass
class Req:
    rid: str
    origin_input_ids: list[int]
    output_ids: list[int]
    req_pool_idx: int
    lora_id: Any = None
    bootstrap_room: Any = None
    grammar: Any = None
    dimensions: Any = None
    token_type_ids: Any = None


def _kv_index_translator(is_draft: bool) -> Any:
    """0.5.23+: the runner's real translator of KV ids, for a plain (non-translating) pool; None before."""
    try:
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
    except ImportError:
        return None
    return KVIndexTranslator(
        req_to_token=torch.zeros(1, 1, dtype=torch.int32),
        token_to_kv_pool_allocator=object(),
        token_to_kv_pool=object(),
        page_size=1,
        device="cpu",
        is_draft_worker=is_draft,
    )


def model_runner(*, is_draft: bool, spec: Any) -> Any:
    """The model-runner attributes ``ForwardBatch.init_new`` reads on CPU."""
    return SimpleNamespace(
        kv_index_translator=_kv_index_translator(is_draft),
        lora_manager=None,
        prefill_attention_backend_str="torch_native",
        device="cpu",
        is_draft_worker=is_draft,
        spec_algorithm=spec,
        server_args=SimpleNamespace(
            attention_backend="torch_native",
            enable_lora=False,
            return_hidden_states_mode=None,
            enable_return_hidden_states=False,
        ),
        model_config=SimpleNamespace(
            model_is_mrope=False,
            is_encoder_decoder=False,
            hidden_size=HIDDEN,
            requires_mm_token_modalities=False,
        ),
        ngram_embedding_manager=SimpleNamespace(enabled=False),
        dcp_size=1,
        attn_backend=SimpleNamespace(name="verify-attn"),
        decode_cuda_graph_runner=SimpleNamespace(name="verify-graph"),
    )


def sampling_info() -> Any:
    return SimpleNamespace(grammars=None, penalizer_orchestrator=SimpleNamespace(is_required=False))


class OracleTarget:
    """The target worker (see the module docstring)."""

    def __init__(self, spec: Any) -> None:
        self.model_runner = model_runner(is_draft=False, spec=spec)
        self.calls: list[dict[str, Any]] = []

    def forward_batch_generation(self, batch: Any, capture_hidden_mode: Any = None, **_: Any) -> Any:
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.managers.utils import GenerationBatchResult
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch

        fb = ForwardBatch.init_new(
            batch,
            self.model_runner,
            capture_hidden_mode=capture_hidden_mode,
            return_hidden_states_before_norm=False,
        )
        positions = fb.positions.tolist()
        rows = fb.req_pool_indices.tolist()
        ids = [token_after(p, r) for p, r in zip(positions, rows, strict=True)]
        hidden = torch.zeros(len(ids), HIDDEN)
        for i, (p, r) in enumerate(zip(positions, rows, strict=True)):
            hidden[i, 0], hidden[i, 1] = float(p), float(r)
        mr = self.model_runner
        self.calls.append(
            {
                "forward_mode": fb.forward_mode,
                "input_ids": fb.input_ids.tolist(),
                "positions": positions,
                "seq_lens": fb.seq_lens.tolist(),
                "out_cache_loc": fb.out_cache_loc.tolist(),
                "capture_hidden_mode": fb.capture_hidden_mode,
                "attn_backend": getattr(mr.attn_backend, "name", None),
                "graph_runner": getattr(mr.decode_cuda_graph_runner, "name", None),
            }
        )
        logits = torch.full((len(ids), VOCAB), -10.0)
        logits[torch.arange(len(ids)), torch.tensor(ids)] = 10.0
        out = LogitsProcessorOutput(next_token_logits=logits, hidden_states=hidden)
        return GenerationBatchResult(
            logits_output=out, next_token_ids=torch.tensor(ids, dtype=torch.int64), can_run_cuda_graph=True
        )


class KVDraftRunner:
    """The drafter's model runner (see the module docstring)."""

    def __init__(self, spec: Any) -> None:
        for k, v in vars(model_runner(is_draft=True, spec=spec)).items():
            setattr(self, k, v)
        self.kv: dict[int, tuple[int, int, int | None]] = {}
        self.forwards: list[Any] = []
        self.tp_group = None

    def forward(self, fb: Any) -> Any:
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput

        self.forwards.append(fb.forward_mode)
        ids, pos, loc = fb.input_ids.tolist(), fb.positions.tolist(), fb.out_cache_loc.tolist()
        hidden = getattr(fb.spec_info, "hidden_states", None)
        for i, (t, p, slot) in enumerate(zip(ids, pos, loc, strict=True)):
            h = None if hidden is None else int(hidden[i, 0])
            self.kv[int(slot)] = (int(t), int(p), h)
        lens = fb.extend_seq_lens.tolist()
        last = torch.tensor(lens).cumsum(0) - 1
        n = len(lens)
        logits = torch.full((n, VOCAB), -10.0)
        for i, j in enumerate(last.tolist()):  # graded: a tree's top-k has one order
            for rank in range(TREE_RANKS):
                logits[i, (draft_token_after(ids[j]) + rank) % VOCAB] = 10.0 - 2.0 * rank
        out_hidden = torch.zeros(n, HIDDEN)
        out_hidden[:, 0] = torch.tensor([float(pos[j]) for j in last.tolist()])
        return SimpleNamespace(
            logits_output=LogitsProcessorOutput(next_token_logits=logits, hidden_states=out_hidden)
        )


class DraftWorker:
    """The draft worker's placement: 0.5.20+ resolves a ``parallel_layout`` (no TP group here), earlier
    releases enter ``draft_tp_context`` with the runner's group."""

    def __init__(self, runner: KVDraftRunner) -> None:
        import inspect

        import sglang.srt.speculative.spec_utils as su

        self.draft_runner = runner
        if "layout" in inspect.signature(su.draft_tp_context).parameters:
            self.parallel_layout = SimpleNamespace(tp_group=None, disable_cp=False)

    def draft_tp_context(self, group: Any) -> Any:
        return nullcontext()


# ------------------------------------------------------------------------- the decode graph runner, on CPU

#: what ``get_parallel()`` answers for a single-process engine (no process groups exist on CPU)
SINGLE_PROCESS = {
    "world_size": 1,
    "world_rank": 0,
    "tp_size": 1,
    "tp_rank": 0,
    "pp_size": 1,
    "pp_rank": 0,
    "moe_ep_size": 1,
    "moe_tp_size": 1,
    "moe_dp_size": 1,
    "attn_tp_size": 1,
    "attn_tp_rank": 0,
    "attn_dp_size": 1,
    "attn_dp_rank": 0,
    "attn_cp_size": 1,
    "attn_cp_rank": 0,
    "dcp_size": 1,
    "dcp_rank": 0,
    "attn_dcp_size": 1,
    "attn_dcp_rank": 0,
    "tp_group": None,
}

CAPTURE_BS = [1, 2, 4, 8]


def resolved_server_args(**fields: Any) -> Any:
    """SGLang's own test override: a resolved ``ServerArgs`` (read-only, like a running engine's) published
    with ``fields`` and decode CUDA graphs for ``CAPTURE_BS``. Returns the override (``restore()`` it) and
    the args."""
    from sglang.srt.model_executor.cuda_graph_config import default_cuda_graph_config
    from sglang.srt.runtime_context import get_context

    cfg = default_cuda_graph_config()
    cfg.decode.bs, cfg.decode.max_bs = list(CAPTURE_BS), max(CAPTURE_BS)
    override = get_context().override_server_args(cuda_graph_config=cfg, **fields)
    return override, override.install()


def decode_attention() -> Any:
    """The decode attention backend ``build_decode_target`` builds: SGLang's ``AttentionBackend`` (its
    defaults for what a replay asks), recording the CUDA-graph state it is sized for and the replay views it
    is handed (what SGLang's backends plan the captured kernels from)."""
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

    class DecodeAttention(AttentionBackend):
        def __init__(self) -> None:
            self.graph_state: tuple[int, int] | None = None
            self.replays: list[Any] = []
            self.dllm_attention = None  # 0.5.23 asks

        def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int) -> None:
            self.graph_state = (max_bs, max_num_tokens)

        def get_cuda_graph_seq_len_fill_value(self) -> int:
            return 1

        def init_forward_metadata_out_graph(self, fb: Any, in_capture: bool = False) -> None:
            self.replays.append(fb)

    return DecodeAttention()


def graph_model_runner(server_args: Any, spec: Any, *, rows: int) -> Any:
    """A target ``ModelRunner`` (the real class, ``__init__`` skipped) with the attributes SGLang's
    ``DecodeCudaGraphRunner`` and ``ModelRunner._forward_raw`` read, on CPU, with the launch (verify)
    backend and graph runner in place."""
    from sglang.srt.model_executor.graph_shared_output import GraphSharedOutput
    from sglang.srt.model_executor.model_runner import ModelRunner

    mr = object.__new__(ModelRunner)
    fields = vars(model_runner(is_draft=False, spec=spec))
    fields.update(
        server_args=server_args,
        model_config=SimpleNamespace(
            **vars(fields["model_config"]),
            vocab_size=VOCAB,
            dtype=torch.float32,
            hf_config=SimpleNamespace(),
            hf_text_config=SimpleNamespace(),
        ),
        req_to_token_pool=SimpleNamespace(size=rows),
        graph_shared_output=GraphSharedOutput(device="cpu", max_rows=max(CAPTURE_BS) * 4),
        init_new_workspace=False,
        tp_group=None,
        hisparse_coordinator=None,
        device_timer=None,
        model=SimpleNamespace(shared_experts_config=None),  # 0.5.23 reads it around the forward
        get_pp_proxy_topk_size=lambda: None,
        get_pp_proxy_residual_num_blocks=lambda: None,
        get_pp_proxy_dspark_hidden_size=lambda: None,  # 0.5.23
        get_aux_hidden_states_width=lambda: None,
        _get_attention_backend=lambda init_new_workspace=False: decode_attention(),
    )
    for k, v in fields.items():
        object.__setattr__(mr, k, v)
    return mr


class BufferReplay:
    """Stands in for the captured graphs of a ``DecodeCudaGraphRunner``: a replay computes from the
    runner's static input buffers only, as a CUDA graph does, the answer ``OracleTarget`` computes (the
    token ``token_after(position, row)``, the hidden state ``(position, row)``), for every padded row."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.keys: list[Any] = []

    def replay_session(self) -> Any:
        return nullcontext()

    def replay(self, key: Any, forward_batch: Any) -> Any:
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput

        self.keys.append(key)
        b = self.runner.buffers
        n = key.size
        pos, rows = b.positions[:n].tolist(), b.req_pool_indices[:n].tolist()
        logits = torch.full((n, VOCAB), -10.0)
        hidden = torch.zeros(n, HIDDEN)
        for i, (p, r) in enumerate(zip(pos, rows, strict=True)):
            logits[i, token_after(p, r)] = 10.0
            hidden[i, 0], hidden[i, 1] = float(p), float(r)
        return LogitsProcessorOutput(next_token_logits=logits, hidden_states=hidden)


class GraphTarget:
    """The target worker, dispatching through SGLang's real ``ModelRunner._forward_raw`` (decode graphs
    when the installed graph runner can run the batch, which must be the case here) and sampling greedily;
    records the replayed graph runners."""

    def __init__(self, mr: Any) -> None:
        self.model_runner = mr
        self.runners: list[Any] = []

    def forward_batch_generation(self, batch: Any, capture_hidden_mode: Any = None, **_: Any) -> Any:
        from sglang.srt.managers.utils import GenerationBatchResult
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch
        from sglang.srt.model_executor.model_runner import ModelRunner

        mr = self.model_runner
        fb = ForwardBatch.init_new(
            batch, mr, capture_hidden_mode=capture_hidden_mode, return_hidden_states_before_norm=False
        )
        self.runners.append(mr.decode_cuda_graph_runner)
        out = ModelRunner._forward_raw(mr, fb, None)
        assert out.can_run_graph, "the off step's decode batch must replay the decode graphs"
        logits = out.logits_output
        return GenerationBatchResult(
            logits_output=logits,
            next_token_ids=logits.next_token_logits.argmax(-1),
            can_run_cuda_graph=out.can_run_graph,
        )
