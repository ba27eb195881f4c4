"""What an off step runs on each legacy worker, given the pieces built at start-up.

v1 (``EAGLEWorker``): the whole decode step is a speculation-free engine's (``v1_off_step``): one KV slot
per request as ``ScheduleBatch.prepare_for_decode`` allocates it, a decode forward with the engine's
sampler, and the per-request bookkeeping SGLang's verify does for an accepted token (append, finishing
checks, grammar, KV lengths, spec counters), so the scheduler's v1 result processing consumes it
unchanged. With ``per_step`` EAGLE drafters then get SGLang's own draft extend over the new token, from the
hidden state the decode forward captured; a lazy drafter gets nothing (an EAGLE one has that hidden state
kept in its ``HiddenWindow``). Measured live, keeping SGLang's one-token verify around the decode forward
cost 3x the kernel launches and 5x the stream syncs of a speculation-free step.

v2 (``EAGLEWorkerV2``, overlap): the step is a decode forward with the engine's normal sampler, and the
result is built in the shape the overlap scheduler consumes (one token per request, accept length 1, the
next draft input with ``new_seq_lens = seq_lens + 1`` and a ``verify_done`` event, the FutureMap fields).
No value is read back to the CPU.

With ``lazy`` the drafter does not run at all (``draft_lag`` catches it up on resume, and inside the off
step whose hidden state would overflow the window); otherwise the draft extend of the one new token runs as
SGLang's own code would after a verify.
"""

from __future__ import annotations

from typing import Any

from .catch_up import catch_up_v1, catch_up_v2
from .off_path import PLACEHOLDERS, OffPath
from .one_token import pad_v2_result, v2_launch_cache_locs

__all__ = [
    "root_ids_for_draft",
    "v1_off_step",
    "v2_off_step",
]


# ---------------------------------------------------------------------------------------------------- v1


def _scratch(off: OffPath, n: int, width: int, dtype: Any, device: Any, zero: bool) -> Any:
    """``n`` rows of a placeholder buffer kept across steps (grown by doubling): an off step allocates no
    placeholder of its own. Nothing writes into placeholders; a catch-up replaces them before any draft."""
    import torch

    key = (width, dtype, str(device), zero)
    buf = off.scratch.get(key)
    if buf is None or int(buf.shape[0]) < n:
        rows = max(n, 2 * int(buf.shape[0]) if buf is not None else 64)
        make = torch.zeros if zero else torch.empty
        buf = off.scratch[key] = make((rows, width), dtype=dtype, device=device)
    return buf[:n]


def _lazy_draft_input(off: OffPath, roots: Any) -> Any:
    """An ``EagleDraftInput`` rooted at ``roots`` (the sampled tokens as they are: a lazy drafter reads none
    of them before ``root_ids_for_draft``) with placeholder proposals (and, for an EAGLE drafter,
    placeholder hidden states, so that SGLang's batch merges keep every field aligned)."""
    n = int(roots.shape[0])
    dtype = off.prev_draft_dtype or _REFS.float32
    ph = off.placeholders
    if ph is None or ph[0] != n or ph[1] != dtype:
        device = roots.device
        hidden = None
        if off.draft_hidden is not None:
            width, hidden_dtype = off.draft_hidden
            hidden = _scratch(off, n, width, hidden_dtype, device, zero=True)
        # proposal ids zeroed once (token 0): even a placeholder read by mistake is a valid token id
        topk_p = _scratch(off, n, off.topk, dtype, device, zero=False)
        topk_index = _scratch(off, n, off.topk, _REFS.int64, device, zero=True)
        ph = off.placeholders = (n, dtype, topk_p, topk_index, hidden)
    _, _, topk_p, topk_index, hidden = ph
    d = off.draft_input
    if d is not None:  # the last off step's, still the batch's (``v1_off_step`` checked): refill it
        setattr(d, off.names.root, roots)
        d.topk_p, d.topk_index, d.hidden_states = topk_p, topk_index, hidden
        return d
    d = off.draft_input = _REFS.EagleDraftInput(
        **{off.names.root: roots},
        hidden_states=hidden,
        topk_p=topk_p,
        topk_index=topk_index,
        capture_hidden_mode=_REFS.capture_null if hidden is None else _REFS.capture_last,
    )
    return d


def root_ids_for_draft(off: OffPath, spec_info: Any) -> None:
    """Before SGLang's own draft (a speculative step after lazy off steps): the draft input's roots as
    int32, the dtype SGLang's verify leaves them in. A lazy off step hands over the sampled tokens as they
    are (int64 from a greedy sampler), so that the next off step feeds them without a conversion; besides
    the off steps, only the catch-up inside a full-window off step reads them (as int64 ids)."""
    off.draft_input = None
    if spec_info is None:
        return
    roots = getattr(spec_info, off.names.root, None)
    if roots is not None and roots.dtype != _REFS.int32:
        setattr(spec_info, off.names.root, roots.to(_REFS.int32))


class _Refs:
    """SGLang and torch names the per-step code uses, imported on first use (not per step)."""

    def __getattr__(self, name: str) -> Any:
        import torch
        from sglang.srt.managers.utils import GenerationBatchResult
        from sglang.srt.mem_cache.common import alloc_for_decode
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.speculative.eagle_info import EagleDraftInput

        refs = {
            "int32": torch.int32,
            "int64": torch.int64,
            "float32": torch.float32,
            "tensor": torch.tensor,
            "ones": torch.ones,
            "GenerationBatchResult": GenerationBatchResult,
            "alloc_for_decode": alloc_for_decode,
            "EagleDraftInput": EagleDraftInput,
            "capture_null": CaptureHiddenMode.NULL,
            "capture_last": CaptureHiddenMode.LAST,
        }
        self.__dict__.update(refs)
        if name not in refs:
            raise AttributeError(name)
        return refs[name]


_REFS: Any = _Refs()


def v1_off_step(worker: Any, batch: Any, off: OffPath, seq_lens_sum: int | None = None) -> Any:
    """The whole decode step of an off step on the non-overlap worker; returns its result.

    ``batch`` is the running ``ScheduleBatch`` (``seq_lens`` exclude the root token, whose KV is not
    written yet). Afterwards it holds what SGLang's verify and draft extend leave: ``seq_lens`` one longer,
    the new token appended to each request, and a draft input for the unfinished requests only (the
    scheduler filters it as already filtered): placeholders with a lazy drafter, else the result of
    SGLang's draft extend over the new token (EAGLE drafters read the target's hidden state of every
    token, captured by the decode forward). ``seq_lens_sum``: the sum of ``batch.seq_lens_cpu`` when the
    caller has it (the batch's own ``seq_lens_sum`` is stale after a speculative step: SGLang's verify does
    not update it); None sums them here.
    """
    refs = _REFS
    dt = off.decode
    assert dt is not None
    names = off.names
    reqs = batch.reqs
    bs = len(reqs)
    lag = off.lag
    if off.draft_input is not None and batch.spec_info is not off.draft_input:
        off.draft_input = None  # the scheduler installed another draft input: build a fresh one
    if lag is not None and lag.full():
        catch_up_v1(worker, batch, off, now=lag.off_steps - 1)
    # The decode forward reads int64 ids, as a speculation-free engine's ``prepare_for_decode`` makes them:
    # a lazy off step's own roots already are when its sampler gave int64 (no conversion).
    root = getattr(batch.spec_info, names.root)
    if root.dtype != refs.int64:
        root = root.to(refs.int64)
    # The bookkeeping of the draft's preprocessing (SWA eviction runs inside alloc_for_decode).
    for req in reqs:
        req.decode_batch_idx += 1
    penalizer = batch.sampling_info.penalizer_orchestrator
    if penalizer.is_required:
        penalizer.cumulate_output_tokens(root)
    batch.out_cache_loc = refs.alloc_for_decode(batch, token_per_req=1)  # also writes req_to_token[seq_len]
    # What SGLang's verify leaves after one accepted token, done before the forward as a speculation-free
    # engine's prepare_for_decode does: the forward's decode lengths are the batch's own (no copy).
    if seq_lens_sum is None:
        seq_lens_sum = int(batch.seq_lens_cpu.sum())
    batch.seq_lens.add_(1)
    batch.seq_lens_cpu.add_(1)
    orig = batch.orig_seq_lens
    if orig is not None:
        orig.add_(1)
    batch.seq_lens_sum = seq_lens_sum + bs
    batch.input_ids = root
    batch.return_hidden_states = False
    mwb = dt.as_decode(batch.get_model_worker_batch())
    target = worker.target_worker
    out = dt.forward(target.forward_batch_generation, target.model_runner, mwb)
    next_ids = out.next_token_ids
    if lag is not None and lag.hidden is not None:  # EAGLE: keep the hidden state of the position written
        lag.hidden.write(lag.off_steps, mwb.req_pool_indices, out.logits_output.hidden_states)
    tokens = next_ids.tolist()  # v1 reads tokens on the CPU every step (verify does the same)
    unfinished = _accept_one(reqs, tokens, batch.model_config)
    keep = None
    if len(unfinished) != bs:
        keep = refs.tensor(unfinished, dtype=refs.int64, device=next_ids.device)
    if lag is not None:
        batch.spec_info = _lazy_draft_input(off, next_ids if keep is None else next_ids[keep])
    else:
        _v1_draft_extend_new_tokens(
            worker, batch, next_ids, out.logits_output.hidden_states, keep, unfinished
        )
    return refs.GenerationBatchResult(
        logits_output=out.logits_output,
        next_token_ids=next_ids,
        can_run_cuda_graph=out.can_run_cuda_graph,
        **{names.accepted_total: 0, names.accepted_per_req: [0] * bs},
    )


def _v1_draft_extend_new_tokens(
    worker: Any, batch: Any, new_ids: Any, hidden: Any, keep: Any, unfinished: list[int]
) -> None:
    """SGLang's draft extend over the one new token of each running request, with the input SGLang's
    verify builds when it accepts no draft: the new token, the target's hidden state at the position fed,
    the slot just written, accept length 1. ``keep`` indexes the running requests (None: all)."""
    import torch
    from sglang.srt.layers.moe.utils import (
        speculative_moe_a2a_backend_context,
        speculative_moe_backend_context,
    )
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.speculative import eagle_info

    def sel(t: Any) -> Any:
        return t if keep is None or t is None else t[keep]

    n = len(unfinished)
    extend_cls = getattr(eagle_info, "EagleDraftExtendInput", None)  # 0.5.12.post1; 0.5.10.post1 has none
    if n == 0:  # every request finished: what SGLang installs after such a verify
        if extend_cls is not None:
            worker._draft_preprocess_idle(batch)
        else:
            batch.spec_info = eagle_info.EagleDraftInput.create_idle_input(
                device=batch.device,
                hidden_size=batch.model_config.hidden_size,
                dtype=batch.model_config.dtype,
                topk=worker.topk,
                capture_hidden_mode=CaptureHiddenMode.LAST,
            )
        return
    device = new_ids.device
    ids = sel(new_ids).to(torch.int32)
    zeros = torch.zeros(n, dtype=torch.int32, device=device)
    seq_lens, req_pool = sel(batch.seq_lens), sel(batch.req_pool_indices)
    seq_cpu = batch.seq_lens_cpu if keep is None else batch.seq_lens_cpu[unfinished]
    batch.out_cache_loc = sel(batch.out_cache_loc)
    if extend_cls is not None:
        batch.spec_info = extend_cls(
            hidden_states=sel(hidden),
            num_correct_drafts=zeros,
            num_accept_tokens=zeros + 1,
            num_accept_tokens_cpu=[1] * n,
            input_ids=ids,
            seq_lens=seq_lens,
            seq_lens_cpu=seq_cpu,
            req_pool_indices=req_pool,
        )
    else:
        batch.spec_info = eagle_info.EagleDraftInput(
            hidden_states=sel(hidden),
            verified_id=ids,
            accept_length=zeros,
            accept_length_cpu=[0] * n,
            seq_lens_for_draft_extend=seq_lens,
            seq_lens_for_draft_extend_cpu=seq_cpu,
            req_pool_indices_for_draft_extend=req_pool,
        )
    with (
        worker.draft_tp_context(worker.draft_model_runner.tp_group),
        speculative_moe_backend_context(),
        speculative_moe_a2a_backend_context(),
    ):
        next_input = worker.forward_draft_extend_after_decode(batch)
    if extend_cls is not None:  # 0.5.10.post1 updates its input in place and returns None
        batch.spec_info = next_input


def _accept_one(reqs: Any, tokens: list[int], model_config: Any) -> list[int]:
    """Per request, what SGLang's v1 verify does for one accepted token and no correct draft; returns the
    indices of the requests still running."""
    think_end_id = getattr(model_config, "think_end_id", None)
    unfinished: list[int] = []
    if not reqs:
        return unfinished
    # the spec-acceptance histogram's method, by release (0.5.12.post1 renamed it)
    histogram = (
        "update_spec_correct_drafts_histogram"
        if hasattr(reqs[0], "update_spec_correct_drafts_histogram")
        else "update_spec_acceptance_histogram"
    )
    for i, (req, tok) in enumerate(zip(reqs, tokens, strict=True)):
        req.output_ids.append(tok)
        if think_end_id is not None and getattr(req, "require_reasoning", False):
            req.update_reasoning_tokens(tok, think_end_id)
        req.check_finished()
        if req.grammar is not None and not req.finished():
            req.grammar.accept_token(tok)
            req.check_finished()
        req.kv_committed_len += 1
        req.kv_allocated_len = req.kv_committed_len
        req.spec_verify_ct += 1
        getattr(req, histogram)(0)
        if not req.finished():
            unfinished.append(i)
    return unfinished


# ---------------------------------------------------------------------------------------------------- v2


def _ones(off: OffPath, n: int, device: Any) -> Any:
    """``n`` int32 ones kept across steps: a lazy v2 off step's accept lengths, which the scheduler only
    copies to the host (with a per-step draft extend SGLang's own code reads them: those get fresh ones)."""
    kept = off.ones
    if kept is not None and kept[0] == n and kept[1] == device:
        return kept[2]
    ones = _REFS.ones(n, dtype=_REFS.int32, device=device)
    off.ones = (n, device, ones)
    return ones


def v2_off_step(worker: Any, mwb: Any, off: OffPath) -> Any:
    """The whole decode step of an off step on the overlap worker; returns its GenerationBatchResult."""
    import torch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    dt = off.decode
    assert dt is not None
    names = off.names
    target = worker.target_worker
    device_module = torch.get_device_module(mwb.seq_lens.device)
    if mwb.seq_lens.is_cuda:  # allocated on the scheduler's stream, read on this one (as SGLang's verify)
        mwb.seq_lens.record_stream(device_module.current_stream())
    spec = mwb.spec_info
    req_to_token = worker.req_to_token_pool.req_to_token
    if off.lag is not None and off.lag.full() and mwb.reqs:
        catch_up_v2(worker, mwb, off, now=off.lag.off_steps - 1)
    root = getattr(spec, names.root)
    out_loc = req_to_token[mwb.req_pool_indices, mwb.seq_lens].to(torch.int64)
    # The next sequence lengths do not depend on this step's output. SGLang's scheduler waits on
    # ``verify_done`` before it prepares the next batch (a speculative step's lengths depend on its
    # acceptance); recording it before the forward lets the scheduler prepare the next batch while this
    # step's forward runs, as a speculation-free overlap engine does (measured live: the wait took 30% of an
    # off step's wall time at 4 requests when it was recorded after the forward). They are also the decode
    # forward's lengths (one tensor: nothing writes either in place).
    new_seq_lens = mwb.seq_lens + 1
    decode_mwb = dt.decode_batch(
        mwb, input_ids=root.to(torch.int64), out_cache_loc=out_loc, seq_lens=new_seq_lens
    )
    verify_done = device_module.Event() if mwb.seq_lens.is_cuda else None
    if verify_done is not None:
        verify_done.record()
    out = dt.forward(target.forward_batch_generation, target.model_runner, decode_mwb)
    next_ids = out.next_token_ids
    lag = off.lag
    if lag is not None and lag.hidden is not None:  # EAGLE: keep the hidden state of the position written
        lag.hidden.write(lag.off_steps, mwb.req_pool_indices, out.logits_output.hidden_states)
    bs = int(mwb.seq_lens.shape[0])
    next_draft = EagleDraftInput(
        **{names.root: next_ids.to(torch.int32)},
        new_seq_lens=new_seq_lens,
        verify_done=verify_done,
    )
    result_kw: dict[str, Any] = {}
    if names.has_result_stride:
        result_kw["speculative_num_draft_tokens"] = 1
    if off.lag is not None:  # the scheduler only copies them to the host: one kept tensor
        accept_lens = _ones(off, bs, next_ids.device)
    else:  # SGLang's draft extend reads them: fresh ones
        accept_lens = torch.ones(bs, dtype=torch.int32, device=next_ids.device)
    result = GenerationBatchResult(
        logits_output=out.logits_output,
        next_token_ids=next_ids,
        can_run_cuda_graph=out.can_run_cuda_graph,
        next_draft_input=next_draft,
        accept_lens=accept_lens,
        **result_kw,
    )
    launch_tokens = int(worker.speculative_num_draft_tokens)
    if off.lag is not None:
        # The proposals stay as they were (valid shapes for the FutureMap); the catch-up rewrites them. The
        # FutureMap neither stores nor gathers them again (``hooks.future_store`` / ``future_resolve``).
        next_draft.topk_p, next_draft.topk_index = spec.topk_p, spec.topk_index
        next_draft.hidden_states = spec.hidden_states
        setattr(next_draft, PLACEHOLDERS, True)
        if not names.has_result_stride:  # 0.5.10.post1 reads tokens at the launch stride
            pad_v2_result(result, launch_tokens, names)
        return result
    v2_launch_cache_locs(worker, mwb, launch_tokens)  # the draft extend writes D positions per request
    pad_v2_result(result, launch_tokens, names)
    dw = worker.draft_worker
    with dw.draft_tp_context(dw.draft_runner.tp_group):
        dw._draft_extend_for_decode(mwb, result)
    return result
