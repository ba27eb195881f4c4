"""The wrappers installed on SGLang's legacy classes, in the scheduler process.

Every wrapper is a plain function around the original method (kept in ``ORIGINALS``), so that installing
twice is a no-op and each wrapper costs one attribute lookup when specpolicy is not attached to the worker.

v1 (``EAGLEWorker``, non-overlap): ``forward_batch_generation`` decides; ``draft`` returns the one-token
verify input on an off step; ``verify`` runs with the one-token target state swapped in; the accepted-draft
counts are read from the returned result (verify already synced them to the CPU).

v2 (``EAGLEWorkerV2``, overlap): ``forward_batch_generation`` decides; ``EagleDraftWorker.draft`` returns the
one-token verify input; ``verify`` runs with the one-token state swapped in and pads its result to the launch
stride; the accepted-draft counts arrive one step late in the scheduler's ``_resolve_spec_overlap_tokens``
(``_resolve_spec_overlap_token_ids`` in 0.5.10.post1), after the scheduler's own asynchronous copy: no new
sync.

Scheduler: ``run_batch`` records the waiting-queue length for the next decision; ``maybe_init_draft_worker``
attaches a runtime to the freshly built worker (see ``attach``).

With the decode off step (``off_path.OffPath.decode``, the default) an off step is a plain decode: with a
lazy draft (``OffPath.lag``) both workers bypass draft and verify entirely (``off_step.v1_off_step``,
``off_step.v2_off_step``) and the drafter is caught up before the next speculative step; with a per-step
draft extend (EAGLE) v1's verify runs its target forward as a decode and v2 runs SGLang's draft extend
after its own decode. The one-token verify described above is the fallback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..request_ids import request_ids
from .catch_up import catch_up_v1, catch_up_v2
from .off_path import PLACEHOLDERS, OffPath
from .off_step import root_ids_for_draft, v1_off_step, v2_off_step
from .one_token import FieldNames, build_verify_input, pad_v2_result, v2_launch_cache_locs
from .runtime import StepRuntime

log = logging.getLogger("specpolicy.sglang.legacy")

RT = "_specpolicy_rt"  # attribute holding the StepRuntime on a worker (and the v2 draft worker)
OT = "_specpolicy_off_path"  # attribute holding the OffPath (off-step machinery) on a worker
STEP = "_specpolicy_step"  # attribute carrying a v2 result's decision number to the scheduler's resolve


def _is_decode(batch: Any) -> bool:
    fm = batch.forward_mode
    return not (fm.is_extend() or getattr(batch, "is_extend_in_batch", False) or fm.is_idle())


def _forced_on(batch: Any) -> bool:
    """Batches the off step does not serve: logprobs, hidden states and grammars always speculate."""
    return bool(
        getattr(batch, "return_logprob", False)
        or getattr(batch, "return_hidden_states", False)
        or getattr(batch, "has_grammar", False)
    )


def _capture_mode(worker: Any) -> Any:
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    algo = getattr(worker, "speculative_algorithm", None)
    if algo is not None and algo.is_standalone():
        return CaptureHiddenMode.NULL
    return CaptureHiddenMode.FULL


# ---------------------------------------------------------------------------------------------------- v1


def v1_forward(orig: Callable[..., Any], names: FieldNames) -> Callable[..., Any]:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    acc_field = names.accepted_per_req
    decode_mode = ForwardMode.DECODE

    def forward_batch_generation(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        rt: StepRuntime | None = getattr(self, RT, None)
        if rt is None:
            return orig(self, batch, *args, **kwargs)
        off: OffPath = getattr(self, OT)
        # a running batch's mode is DECODE: the general test only for other modes
        if (batch.forward_mode is not decode_mode or batch.is_extend_in_batch) and not _is_decode(batch):
            rt.on_non_decode(batch.reqs)
            off.draft_input = None
            if off.lag is not None and not batch.forward_mode.is_idle():
                off.lag.on_extend(batch.reqs)
            return orig(self, batch, *args, **kwargs)
        seq_cpu = batch.seq_lens_cpu
        seq_sum = None if seq_cpu is None else int(seq_cpu.sum())
        n = len(batch.reqs)
        skip = rt.begin_decode(
            n,
            seq_sum,
            _forced_on(batch),
            request_ids(batch.reqs) if rt.wants_ids else None,
            batch.reqs,
        )
        try:
            result = None
            lag = off.lag
            if skip and lag is not None:
                lag.on_off_step(n)
                topk_p = getattr(batch.spec_info, "topk_p", None)
                if topk_p is not None:
                    off.prev_draft_dtype = topk_p.dtype
            if skip and off.decode is not None:
                result = v1_off_step(self, batch, off, seq_sum)
            elif lag is not None:  # speculating: the drafter reads int32 roots, caught up first
                root_ids_for_draft(off, batch.spec_info)
                if lag.behind():
                    catch_up_v1(self, batch, off)
            if result is None:
                result = orig(self, batch, *args, **kwargs)
        finally:
            rt.skip = False  # ``rt.end_decode()``, inlined
        rt.on_result(rt.current_step, getattr(result, acc_field, None))
        return result

    return forward_batch_generation


def v1_draft(orig: Callable[..., Any], names: FieldNames) -> Callable[..., Any]:
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    def draft(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        rt: StepRuntime | None = getattr(self, RT, None)
        if rt is None or not rt.skip:
            return orig(self, batch, *args, **kwargs)
        return v1_one_token_input(self, batch, names, EagleVerifyInput)

    return draft


def v1_one_token_input(worker: Any, batch: Any, names: FieldNames, verify_cls: Any) -> Any:
    """What ``EAGLEWorker.draft`` returns on an off step.

    The batch bookkeeping of ``_draft_preprocess_decode`` (SWA eviction, decode index, penalty accumulation),
    without the draft forward or its scratch KV slots.
    """
    import torch

    if hasattr(batch, "maybe_evict_swa"):
        batch.maybe_evict_swa()
    for req in batch.reqs:
        req.decode_batch_idx += 1
    spec_info = batch.spec_info
    root = getattr(spec_info, names.root)
    penalizer = batch.sampling_info.penalizer_orchestrator
    if penalizer.is_required:
        penalizer.cumulate_output_tokens(root.to(torch.int64))
    seq_lens_cpu = batch.seq_lens_cpu
    batch.seq_lens_sum = int(seq_lens_cpu.sum())
    batch.return_hidden_states = False
    return build_verify_input(
        verify_cls,
        names,
        root,
        batch.seq_lens,
        topk=1,  # a one-node tree is a topk-1 chain, whatever the launch topk
        capture_hidden_mode=_capture_mode(worker),
        seq_lens_sum=batch.seq_lens_sum,
        seq_lens_cpu=seq_lens_cpu,
    )


def v1_verify(orig: Callable[..., Any]) -> Callable[..., Any]:
    def verify(self: Any, *args: Any, **kwargs: Any) -> Any:
        rt: StepRuntime | None = getattr(self, RT, None)
        if rt is None or not rt.skip:
            return orig(self, *args, **kwargs)
        off: OffPath = getattr(self, OT)
        off.sizes.swap_in(self, self.target_worker.model_runner)
        try:
            return orig(self, *args, **kwargs)
        finally:
            off.sizes.swap_out()

    return verify


# ---------------------------------------------------------------------------------------------------- v2


def v2_forward(orig: Callable[..., Any]) -> Callable[..., Any]:
    def forward_batch_generation(self: Any, model_worker_batch: Any, *args: Any, **kwargs: Any) -> Any:
        rt: StepRuntime | None = getattr(self, RT, None)
        if rt is None:
            return orig(self, model_worker_batch, *args, **kwargs)
        off: OffPath = getattr(self, OT)
        mwb = model_worker_batch
        if not _is_decode(mwb):
            rt.on_non_decode(mwb.reqs)
            if off.lag is not None and not mwb.forward_mode.is_idle() and mwb.reqs:
                off.lag.on_extend(mwb.reqs)
            return orig(self, mwb, *args, **kwargs)
        n = len(mwb.seq_lens)
        ids = request_ids(mwb.reqs, n) if rt.wants_ids else None
        skip = rt.begin_decode(n, mwb.seq_lens_sum, _forced_on(mwb), ids, mwb.reqs)
        try:
            if skip and off.decode is not None:
                if off.lag is not None:
                    off.lag.on_off_step(len(mwb.seq_lens))
                result = v2_off_step(self, mwb, off)
            else:
                if off.lag is not None and off.lag.behind() and mwb.reqs:
                    catch_up_v2(self, mwb, off)
                result = orig(self, mwb, *args, **kwargs)
        finally:
            rt.end_decode()
        setattr(result, STEP, rt.current_step)
        return result

    return forward_batch_generation


def v2_draft(orig: Callable[..., Any], names: FieldNames) -> Callable[..., Any]:
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    def draft(self: Any, model_worker_batch: Any, *args: Any, **kwargs: Any) -> Any:
        rt: StepRuntime | None = getattr(self, RT, None)
        if rt is None or not rt.skip:
            return orig(self, model_worker_batch, *args, **kwargs)
        mwb = model_worker_batch
        return build_verify_input(
            EagleVerifyInput,
            names,
            getattr(mwb.spec_info, names.root),
            mwb.seq_lens,
            topk=1,
            capture_hidden_mode=None,  # as the v2 draft: prepare_for_v2_verify sets it
            seq_lens_sum=mwb.seq_lens_sum,
            seq_lens_cpu=None,
        )

    return draft


def v2_verify(orig: Callable[..., Any], names: FieldNames) -> Callable[..., Any]:
    def verify(self: Any, *args: Any, **kwargs: Any) -> Any:
        rt: StepRuntime | None = getattr(self, RT, None)
        if rt is None or not rt.skip:
            return orig(self, *args, **kwargs)
        off: OffPath = getattr(self, OT)
        launch_tokens = self.speculative_num_draft_tokens
        off.sizes.swap_in(self, self.target_worker.model_runner)
        try:
            result = orig(self, *args, **kwargs)
        finally:
            off.sizes.swap_out()
        v2_launch_cache_locs(self, args[0] if args else kwargs["batch"], launch_tokens)
        pad_v2_result(result, launch_tokens, names)
        return result

    return verify


def v2_resolve(orig: Callable[..., Any], names: FieldNames) -> Callable[..., Any]:
    """Scheduler-side: feed the accepted-draft counts the scheduler just computed on the CPU."""
    acc_field = names.accepted_per_req

    def resolve(self: Any, result: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, result, batch, *args, **kwargs)
        rt: StepRuntime | None = getattr(getattr(self, "draft_worker", None), RT, None)
        step = getattr(result, STEP, None)
        if rt is not None and step is not None:
            rt.on_result(step, getattr(result, acc_field, None))
        return out

    return resolve


# ---------------------------------------------------------------------------------------- v2 FutureMap


def future_store(orig: Callable[..., Any], names: FieldNames) -> Callable[..., Any]:
    """``FutureMap.store_to_map_for_new_batch``: a lazy off step's draft input stores only its root tokens
    and next lengths. Its proposals and hidden states are placeholders that nothing reads before a catch-up
    rewrites them (every request of an off step has a missed position), so copying them into the map is
    dead work: 3 copies on an EAGLE engine, 2 on a draft-model one (SGLang keeps no hidden states for
    STANDALONE)."""
    root_buf = f"{names.root}_buf"
    root = names.root

    def store_to_map_for_new_batch(self: Any, future_indices: Any, draft_input: Any) -> Any:
        if getattr(draft_input, PLACEHOLDERS, None) is not True or not self.buf_initialized:
            return orig(self, future_indices, draft_input)
        intv = future_indices.interval
        if self.is_empty_slice(intv):
            return None
        getattr(self, root_buf)[intv] = getattr(draft_input, root)
        self.new_seq_lens_buf[intv] = draft_input.new_seq_lens
        setattr(draft_input, PLACEHOLDERS, (future_indices, future_indices.indices))
        return None

    return store_to_map_for_new_batch


def future_resolve(orig: Callable[..., Any], names: FieldNames) -> Callable[..., Any]:
    """``FutureMap.resolve_future``: the next batch of a lazy off step, unfiltered and unmerged (the same
    ``FutureIndices`` and index tensor the store saw), gathers only its root tokens and lengths and keeps
    the placeholders its draft input already holds, the values the map would have returned. Any other batch
    (filtered, merged, speculative) resolves as SGLang does; rows whose store was skipped then read stale
    map entries, which are placeholders too (the catch-up rewrites every one before a draft)."""
    import torch

    root_buf = f"{names.root}_buf"
    root = names.root

    def resolve_future(self: Any, model_worker_batch: Any) -> Any:
        draft_input = model_worker_batch.spec_info
        stored = getattr(draft_input, PLACEHOLDERS, None)
        if type(stored) is not tuple:
            return orig(self, model_worker_batch)
        fi = draft_input.future_indices
        indices = fi.indices
        if stored[0] is not fi or stored[1] is not indices:
            return orig(self, model_worker_batch)
        indices.record_stream(torch.get_device_module(self.device).current_stream())  # as SGLang does
        setattr(draft_input, root, getattr(self, root_buf)[indices])
        draft_input.new_seq_lens = self.new_seq_lens_buf[indices]
        return None

    return resolve_future


# ---------------------------------------------------------------------------------------------- scheduler


def scheduler_run_batch(orig: Callable[..., Any]) -> Callable[..., Any]:
    def run_batch(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        rt: StepRuntime | None = getattr(getattr(self, "draft_worker", None), RT, None)
        if rt is not None:
            rt.num_waiting = len(self.waiting_queue)
        return orig(self, batch, *args, **kwargs)

    return run_batch


def scheduler_init_draft(orig: Callable[..., Any], attach: Callable[[Any], object]) -> Callable[..., Any]:
    def maybe_init_draft_worker(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, *args, **kwargs)
        attach(self)
        return out

    return maybe_init_draft_worker
