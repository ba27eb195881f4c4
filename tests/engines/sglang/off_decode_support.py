"""Fakes for the decode off step and the lazy draft catch-up, built from SGLang's own types.

On top of ``legacy_support``:

* ``model_worker_batch``: a real ``ModelWorkerBatch`` (every field SGLang declares, unset ones empty), so
  the adapter's ``dataclasses.replace`` copies run on the real type.
* ``DecodeTarget`` stand-in pieces: a decode attention backend and graph runner that only carry a name;
  ``DecodingFakeTarget`` answers both verify-shaped and decode-shaped batches with the same oracle
  (``token_after(position, request)``), records the forward mode, sequence lengths and the backend installed.
* ``DraftKV``: the draft model's KV cache as ``slot -> (input token, position)``, written by every draft
  forward the way SGLang's draft model writes it (the token of the next position, at each position).
* ``KVDraftRunner``: a draft model runner whose forward writes ``DraftKV`` and proposes
  ``draft_token_after(token)`` from each request's last input; it runs on the real ``ForwardBatch``.
* ``EagleKVDraftRunner``: the same for an EAGLE drafter, which also reads the target's hidden state of each
  position (the fake target's is ``(position, pool row)``): its KV records that hidden state, its proposal
  depends on it (``eagle_proposal``), and it returns its own last hidden state (``eagle_draft_hidden``).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import legacy_support as ls
import torch


def model_worker_batch(**fields: Any) -> Any:
    from sglang.srt.managers.schedule_batch import ModelWorkerBatch

    kw: dict[str, Any] = {}
    for f in dataclasses.fields(ModelWorkerBatch):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        kw[f.name] = False if f.type in ("bool", bool) else None
    kw.update(fields)
    return ModelWorkerBatch(**kw)


def decode_target(capture_hidden_mode: Any) -> Any:
    from specpolicy.adapters.sglang.legacy.decode_target import DecodeTarget

    return DecodeTarget(
        SimpleNamespace(name="decode-attn", init_forward_metadata=lambda fb: None),
        SimpleNamespace(name="decode-graph", can_run=lambda fb: True),
        capture_hidden_mode,
    )


class DecodingFakeTarget(ls.FakeV2Target):
    """The fake target, also answering decode batches: one position per request at ``seq_len - 1``."""

    def __init__(self) -> None:
        super().__init__()
        self.decode_calls: list[dict[str, Any]] = []

    def forward_batch_generation(self, model_worker_batch: Any = None, **kwargs: Any) -> Any:
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.managers.utils import GenerationBatchResult

        mwb = model_worker_batch
        if mwb is None or not mwb.forward_mode.is_decode():
            return super().forward_batch_generation(mwb, **kwargs)
        positions = mwb.seq_lens - 1
        bs = int(positions.shape[0])
        logits = torch.full((bs, ls.VOCAB), -10.0)
        hidden = torch.zeros(bs, ls.HIDDEN)
        rows = mwb.req_pool_indices.tolist()
        for i in range(bs):
            logits[i, ls.token_after(int(positions[i]), rows[i])] = 10.0
            hidden[i, 0] = float(positions[i])
            hidden[i, 1] = float(rows[i])
        self.decode_calls.append(
            {
                "forward_mode": mwb.forward_mode,
                "seq_lens": mwb.seq_lens.tolist(),
                "seq_lens_cpu": None if mwb.seq_lens_cpu is None else mwb.seq_lens_cpu.tolist(),
                "input_ids": mwb.input_ids.tolist(),
                "input_ids_tensor": mwb.input_ids,
                "out_cache_loc": mwb.out_cache_loc.tolist(),
                "spec_info": mwb.spec_info,
                "capture_hidden_mode": mwb.capture_hidden_mode,
                "attn_backend": self.model_runner.attn_backend,
                "graph_runner": self.model_runner.graph_runner,
                "is_verify": kwargs.get("is_verify", False),
            }
        )
        out = GenerationBatchResult(
            logits_output=LogitsProcessorOutput(next_token_logits=logits, hidden_states=hidden),
            can_run_cuda_graph=True,
        )
        if not kwargs.get("is_verify", False):
            out.next_token_ids = logits.argmax(-1)
        return out


class DraftKV(dict[int, tuple[int, int]]):
    """slot -> (input token, position) of the draft model's KV cache."""

    def write(self, slots: Any, tokens: Any, positions: Any) -> None:
        for s, t, p in zip(slots.tolist(), tokens.tolist(), positions.tolist(), strict=True):
            self[int(s)] = (int(t), int(p))


def expected_draft_kv(req: Any, rtt_row: Any, start: int, stop: int) -> dict[int, tuple[int, int]]:
    """What an always-on engine holds for positions ``start .. stop-1``: the token of ``p+1`` at ``p``."""
    seq = list(req.origin_input_ids) + list(req.output_ids)
    return {int(rtt_row[p]): (seq[p + 1], p) for p in range(start, stop)}


class KVDraftRunner:
    """A draft model runner: writes DraftKV, proposes ``draft_token_after`` of each request's last input."""

    def __init__(self, kv: DraftKV, req_to_token_pool: Any) -> None:
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.kv = kv
        self.tp_group = None
        self.device = "cpu"
        self.spec_algorithm = SpeculativeAlgorithm.STANDALONE
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool = None
        self.attn_backend = SimpleNamespace(init_forward_metadata=lambda fb: None)
        self.server_args = SimpleNamespace(attention_backend="torch_native", enable_lora=False)
        self.use_ngram_embedding = False
        self.model_is_mrope = False
        self.is_hybrid_swa = False
        self.model_config = SimpleNamespace(
            spec_hidden_size=ls.HIDDEN, hidden_size=ls.HIDDEN, dtype=torch.float32
        )
        self.extends: list[dict[str, Any]] = []

    def forward(self, forward_batch: Any, skip_attn_backend_init: bool = False) -> Any:
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput

        fb = forward_batch
        assert fb.forward_mode.is_extend() and not fb.forward_mode.is_draft_extend()
        self.kv.write(fb.out_cache_loc, fb.input_ids, fb.positions)
        lens = fb.extend_seq_lens_cpu
        last = torch.tensor(lens).cumsum(0) - 1
        self.extends.append(
            {"input_ids": fb.input_ids.tolist(), "positions": fb.positions.tolist(), "lens": list(lens)}
        )
        logits = torch.full((len(lens), ls.VOCAB), -10.0)
        for i, t in enumerate(fb.input_ids[last].tolist()):
            logits[i, ls.draft_token_after(t)] = 10.0
        return SimpleNamespace(logits_output=LogitsProcessorOutput(next_token_logits=logits))


def patch_forward_batch(monkeypatch: Any) -> None:
    """The real ``ForwardBatch.init_new`` on CPU: the expert-parallel query needs a process group."""
    import sglang.srt.model_executor.forward_batch_info as fbi

    monkeypatch.setattr(fbi, "enable_num_token_non_padded", lambda *args: False)


def eagle_proposal(token: int, hidden_position: int) -> int:
    """What the fake EAGLE drafter proposes from its last input token and target hidden state: a wrong or
    missing hidden state changes the proposal."""
    return ls.draft_token_after((token + 7 * hidden_position + 1) % ls.VOCAB)


def eagle_draft_hidden(token: int, hidden_position: int, row: int) -> list[float]:
    """The fake EAGLE drafter's own hidden state after its last input (what its next draft step reads)."""
    return [1000.0 + hidden_position, float(token), float(row)] + [0.0] * (ls.HIDDEN - 3)


def expected_eagle_kv(req: Any, rtt_row: Any, row: int, start: int, stop: int) -> dict[int, tuple[int, ...]]:
    """What an always-on EAGLE engine's drafter holds for positions ``start .. stop-1``: at ``p`` the token
    of ``p+1`` and the target's hidden state at ``p`` (the fake target's is ``(p, row)``)."""
    seq = list(req.origin_input_ids) + list(req.output_ids)
    return {int(rtt_row[p]): (seq[p + 1], p, p, row) for p in range(start, stop)}


class EagleKVDraftRunner(KVDraftRunner):
    """An EAGLE draft model runner on the real ``ForwardBatch``: reads ``spec_info.hidden_states``."""

    def __init__(self, kv: DraftKV, req_to_token_pool: Any) -> None:
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        super().__init__(kv, req_to_token_pool)
        self.spec_algorithm = SpeculativeAlgorithm.EAGLE

    def forward(self, forward_batch: Any, skip_attn_backend_init: bool = False) -> Any:
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

        fb = forward_batch
        assert fb.forward_mode.is_extend() and not fb.forward_mode.is_draft_extend()
        hidden = fb.spec_info.hidden_states
        assert hidden is not None and tuple(hidden.shape) == (int(fb.input_ids.shape[0]), ls.HIDDEN)
        assert fb.capture_hidden_mode == CaptureHiddenMode.LAST
        toks, poss = fb.input_ids.tolist(), fb.positions.tolist()
        for s_, t, p, h in zip(fb.out_cache_loc.tolist(), toks, poss, hidden.tolist(), strict=True):
            self.kv[int(s_)] = (int(t), int(p), int(h[0]), int(h[1]))
        lens = fb.extend_seq_lens_cpu
        last = (torch.tensor(lens).cumsum(0) - 1).tolist()
        self.extends.append({"input_ids": toks, "positions": poss, "lens": list(lens)})
        logits = torch.full((len(lens), ls.VOCAB), -10.0)
        out_hidden = torch.zeros(len(lens), ls.HIDDEN)
        for i, j in enumerate(last):
            logits[i, eagle_proposal(toks[j], int(hidden[j, 0]))] = 10.0
            out_hidden[i] = torch.tensor(eagle_draft_hidden(toks[j], int(hidden[j, 0]), int(hidden[j, 1])))
        out = LogitsProcessorOutput(next_token_logits=logits, hidden_states=out_hidden)
        return SimpleNamespace(logits_output=out)
