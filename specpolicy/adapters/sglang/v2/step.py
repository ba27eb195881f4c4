"""The per-step work on SGLang 0.5.13+: the decision, the decode off step, and the drafter's catch-up.

``V2State`` is what ``install.attach`` puts on a worker. Every decode step the forward wrapper asks the
policy for a depth (``SpecPolicyParams.get_steps_for_batch``, as SGLang's controller would); depth 0 runs
``off_step`` and returns without touching the drafter, any other depth first catches the drafter up
(``catch_up``) and then runs SGLang's own draft / verify / draft extend, with the controller (when there is
one) switched to that depth by ``activate_step_by_batch``.

The off step follows SGLang's spec-v2 convention (``batch.seq_lens`` excludes the bonus token, whose KV is
not written yet; the scheduler reserved its slot in ``req_to_token``): it feeds the bonus token at position
``seq_len`` to the target's decode forward, publishes ``seq_lens + 1`` before the forward (they do not
depend on its output, so the overlap scheduler can prepare the next batch while it runs), and returns
``accept_lens`` of one and the sampled token as the next bonus token. The draft input it hands on keeps the
proposals and hidden states it received: placeholders, since every request of an off step has a missed
position, and the catch-up rewrites them before any draft step reads them. No GPU value is read on the
host.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..adaptive import SpecPolicyParams
from ..legacy.catch_up import keep_exact_rows
from ..legacy.decode_target import DecodeTarget
from ..legacy.draft_lag import DraftLag

__all__ = ["V2State", "forward_wrapper", "activate_wrapper", "feedback_wrapper", "off_step", "catch_up"]

log = logging.getLogger("specpolicy.sglang.v2")

ATTR = "_specpolicy_v2"  # the V2State on a worker


@dataclass
class V2State:
    """One worker's policy bridge and off-step machinery (owned by its scheduler process)."""

    params: SpecPolicyParams
    decode: DecodeTarget
    lag: DraftLag
    launch: int
    topk: int
    capture_hidden_mode: Any
    controller: Any = None
    held: int = 0  # the depth decided for the step being run (read by ``activate_step_by_batch``)
    off_steps: int = 0
    forced_steps: int = 0  # steps the policy turned off that ran SGLang's own step (``_forced_on``)
    seq_len_syncs: int = 0  # catch-ups that had to copy the sequence lengths to the host
    ones: tuple[int, Any, Any] | None = None  # (batch size, device, int32 ones): an off step's accept lengths

    def engine_counts(self) -> dict[str, int]:
        lag = self.lag
        return {  # the names the legacy adapter reports too (``legacy.off_path.OffPath.counts``)
            "off_steps": self.off_steps,
            "forced_steps": self.forced_steps,
            "draft_positions_skipped": lag.skipped_positions,
            "draft_positions_caught_up": lag.caught_up_positions,
            "draft_catch_ups": lag.catch_ups,
            "draft_unrecoverable": lag.unrecoverable,
            "catch_up_seq_len_syncs": self.seq_len_syncs,
        }


def _forced_on(batch: Any) -> bool:
    """Batches the off step does not serve: logprobs, hidden states and grammars run SGLang's own step."""
    return bool(batch.return_logprob or getattr(batch, "return_hidden_states", False) or batch.has_grammar)


def forward_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``EAGLEWorkerV2.forward_batch_generation`` (inherited by ``StandaloneWorkerV2``)."""

    def forward_batch_generation(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        st: V2State | None = getattr(self, ATTR, None)
        if st is None:
            return orig(self, batch, *args, **kwargs)
        mode = batch.forward_mode
        if mode.is_extend() or batch.is_extend_in_batch:
            if batch.reqs:  # the drafter's prefill covers each of these requests' whole input
                st.lag.on_extend(batch.reqs)
            return orig(self, batch, *args, **kwargs)
        if mode.is_idle():
            return orig(self, batch, *args, **kwargs)
        k = st.params.get_steps_for_batch(int(batch.seq_lens.shape[0]))
        if k == 0:
            if not _forced_on(batch):
                return off_step(self, batch, st, kwargs.get("on_publish"))
            st.forced_steps += 1
        st.held = k or st.launch
        if st.lag.behind() and batch.reqs:
            catch_up(self, batch, st)
        return orig(self, batch, *args, **kwargs)

    return forward_batch_generation


def activate_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``EAGLEWorkerV2.activate_step_by_batch``: apply the depth already decided for this step (SGLang's
    own call would ask the policy a second time)."""

    def activate_step_by_batch(self: Any, batch_size: int) -> None:
        st: V2State | None = getattr(self, ATTR, None)
        if st is None:
            return orig(self, batch_size)  # type: ignore[no-any-return]
        ctrl = st.controller
        if ctrl is not None and st.held != self.speculative_num_steps:
            ctrl._activate(st.held)
        return None

    return activate_step_by_batch


def feedback_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``EAGLEWorkerV2.on_verify_complete_cpu``: the scheduler's accepted-draft counts, after its own
    asynchronous copy (off steps report zeros), go to the policy bridge, with or without a controller."""

    def on_verify_complete_cpu(self: Any, num_correct_drafts_per_req: list[int], batch_size: int = 0) -> None:
        st: V2State | None = getattr(self, ATTR, None)
        if st is None:
            return orig(self, num_correct_drafts_per_req, batch_size=batch_size)  # type: ignore[no-any-return]
        st.params.on_verify_complete(num_correct_drafts_per_req, batch_size)
        return None

    return on_verify_complete_cpu


def run_batch_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``Scheduler.run_batch``: the waiting queue and context lengths of the batch about to run."""

    def run_batch(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        st: V2State | None = getattr(getattr(self, "model_worker", None), ATTR, None)
        if st is not None:
            st.params.note_batch(self, batch)
        return orig(self, batch, *args, **kwargs)

    return run_batch


# ----------------------------------------------------------------------------------------------- off step


def _ones(st: V2State, n: int, device: Any) -> Any:
    """``n`` int32 ones kept across steps: the scheduler only copies an off step's accept lengths."""
    import torch

    kept = st.ones
    if kept is not None and kept[0] == n and kept[1] == device:
        return kept[2]
    ones = torch.ones(n, dtype=torch.int32, device=device)
    st.ones = (n, device, ones)
    return ones


def _hand_over_read_done(worker: Any, runner: Any) -> None:
    """Give the decode graph's read-done event to the runner the scheduler's WAR barrier reads it from.

    SGLang 0.5.17's scheduler orders its next writes of the shared ``req_to_token`` after the step's last
    reader of it: the fast path waits on the event that reader's graph recorded once its inputs were read,
    else on the whole forward. A speculative worker names its draft runner (the draft extend reads last);
    after an off step the target's decode is the last reader (the off step reads ``req_to_token`` before
    the forward only), so without the hand-over every off step would take the whole-forward wait that a
    speculation-free engine does not. Releases without the barrier have neither attribute."""
    event = getattr(runner, "war_fastpath_read_done_event", None)
    if event is None:
        return
    fast = getattr(worker, "war_fastpath_runner", None)
    if fast is not None and fast is not runner:
        runner.war_fastpath_read_done_event = None
        fast.war_fastpath_read_done_event = event


def off_step(worker: Any, batch: Any, st: V2State, on_publish: Callable[[Any], None] | None) -> Any:
    """The whole decode step of an off step; returns the GenerationBatchResult the scheduler consumes."""
    import torch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    lag = st.lag
    bs = int(batch.seq_lens.shape[0])
    lag.on_off_step(bs)
    st.off_steps += 1
    if lag.full():  # the hidden-state window would overwrite a position still needed
        catch_up(worker, batch, st, now=lag.off_steps - 1)
    spec = batch.spec_info
    seq_lens = batch.seq_lens
    req_to_token = worker.req_to_token_pool.req_to_token
    out_loc = req_to_token[batch.req_pool_indices, seq_lens].to(torch.int64)
    new_seq_lens = seq_lens + 1
    if on_publish is not None:
        on_publish(new_seq_lens)
    view = copy.copy(batch)  # the scheduler's batch keeps its spec-v2 form
    dt = st.decode
    view.forward_mode = dt._decode
    view.spec_algorithm = dt._none
    view.spec_info = None
    view.input_ids = spec.bonus_tokens.to(torch.int64)
    view.out_cache_loc = out_loc
    view.seq_lens = new_seq_lens
    seq_cpu = batch.seq_lens_cpu
    view.seq_lens_cpu = None if seq_cpu is None else seq_cpu + 1
    view.seq_lens_sum = None if batch.seq_lens_sum is None else batch.seq_lens_sum + bs
    orig_lens = batch.orig_seq_lens
    view.orig_seq_lens = None if orig_lens is None else orig_lens + 1
    target = worker.target_worker
    capture = st.capture_hidden_mode
    out = dt.forward(
        lambda b: target.forward_batch_generation(b, capture_hidden_mode=capture), target.model_runner, view
    )
    _hand_over_read_done(worker, target.model_runner)
    next_ids = out.next_token_ids
    if lag.hidden is not None:  # EAGLE: keep the target's hidden state of the position written
        lag.record(batch.req_pool_indices, out.logits_output.hidden_states)
    next_draft = EagleDraftInput(
        bonus_tokens=next_ids.to(torch.int32),
        topk_p=spec.topk_p,
        topk_index=spec.topk_index,
        hidden_states=spec.hidden_states,
        num_tokens_per_req=1,
        num_tokens_for_logprob_per_req=1,
    )
    return GenerationBatchResult(
        logits_output=out.logits_output,
        next_token_ids=next_ids,
        can_run_cuda_graph=out.can_run_cuda_graph,
        speculative_num_draft_tokens=1,
        next_draft_input=next_draft,
        accept_lens=_ones(st, bs, next_ids.device),
        new_seq_lens=new_seq_lens,
    )


# ----------------------------------------------------------------------------------------------- catch-up


def catch_up(worker: Any, batch: Any, st: V2State, now: int | None = None) -> bool:
    """Bring the drafter's state of ``batch``'s requests up to date (before a speculative step, or to off
    step ``now`` inside an off step whose hidden-state window is full); True when an extend ran.

    The extend is the form SGLang's own draft prefill uses: each request's missing positions as new tokens
    after a cached prefix, fed the token of the next position (and the target's hidden state of the
    position), the drafter's next proposal taken from each last position as SGLang's draft extend takes
    it. Without host sequence lengths (overlap with a backend that needs none) one copy of them is made
    here, once per resume, counted in ``catch_up_seq_len_syncs``."""
    import torch
    from sglang.srt.model_executor import forward_batch_info as fbi
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    lag = st.lag
    seq_cpu = batch.seq_lens_cpu
    if seq_cpu is None:
        seq_cpu = batch.seq_lens.cpu()
        st.seq_len_syncs += 1
    plan = lag.plan(batch.reqs, seq_cpu.tolist(), now)
    if plan is None:
        return False
    spec = batch.spec_info
    req_to_token = worker.req_to_token_pool.req_to_token
    inputs = lag.extend_inputs(plan, bonus_tokens=spec.bonus_tokens, req_to_token=req_to_token)
    missing, seq_lens = list(plan.missing), list(plan.seq_lens)
    view = copy.copy(batch)
    view.forward_mode = fbi.ForwardMode.EXTEND
    view.input_ids = inputs.input_ids
    view.out_cache_loc = inputs.out_cache_loc
    view.seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int64)
    view.seq_lens_sum = sum(seq_lens)
    view.extend_lens = missing
    view.prefix_lens = [s - m for s, m in zip(seq_lens, missing, strict=True)]
    view.extend_num_tokens = sum(missing)
    view.extend_logprob_start_lens = list(missing)
    view.extend_input_logprob_token_ids = None
    view.return_logprob = False
    view.top_logprobs_nums = None
    view.token_ids_logprobs = None
    view.is_extend_in_batch = True
    view.decoding_reqs = view.reqs  # running requests, not a prefill's last chunk (0.5.23 asks)
    view.spec_info = EagleDraftExtendInput(
        hidden_states=inputs.hidden, num_tokens_per_req=1, num_tokens_for_logprob_per_req=1
    )
    dw = worker.draft_worker
    runner = dw.draft_runner
    with _draft_context(dw):
        forward_batch = fbi.ForwardBatch.init_new(
            view,
            runner,
            capture_hidden_mode=inputs.capture_hidden_mode,
            return_hidden_states_before_norm=False,
        )
        forward_batch.return_logprob = False
        logits = runner.forward(forward_batch).logits_output
    topk_p, topk_index = propose(logits.next_token_logits, batch.sampling_info, st.topk)
    hidden = logits.hidden_states if lag.hidden is not None else None
    if hidden is not None and plan.exact:
        keep_exact_rows(plan.exact, spec, topk_p, topk_index, hidden)
    spec.topk_p, spec.topk_index = topk_p, topk_index
    if hidden is not None:
        spec.hidden_states = hidden
    lag.mark_caught_up(batch.reqs, plan)
    return True


def propose(next_token_logits: Any, sampling_info: Any, topk: int) -> tuple[Any, Any]:
    """The drafter's next proposal from its logits, as SGLang's draft extend after a verify makes it:
    the argmax with probability one for a top-1 chain, else the top-k of the renormalised probabilities."""
    import torch
    from sglang.srt.speculative.spec_utils import fast_topk, renorm_draft_probs

    if topk == 1:
        index = torch.argmax(next_token_logits, dim=-1, keepdim=True)
        return torch.ones_like(index, dtype=torch.float32), index
    probs = renorm_draft_probs(next_token_logits, sampling_info, False)
    return fast_topk(probs, topk, dim=-1)  # type: ignore[no-any-return]


class _draft_context:
    """The context SGLang runs every draft forward in: the draft TP group and the speculative MoE
    backends."""

    def __init__(self, draft_worker: Any) -> None:
        from contextlib import ExitStack

        from sglang.srt.layers.moe.utils import (
            speculative_moe_a2a_backend_context,
            speculative_moe_backend_context,
        )

        self._stack = ExitStack()
        layout = getattr(draft_worker, "parallel_layout", None)
        if layout is not None:  # 0.5.20+: a module function over the draft's resolved placement
            from sglang.srt.speculative.spec_utils import draft_tp_context

            tp = draft_tp_context(layout)
        else:  # 0.5.13 - 0.5.19: the draft worker's own method over its runner's TP group
            tp = draft_worker.draft_tp_context(draft_worker.draft_runner.tp_group)
        self._parts = (
            tp,
            speculative_moe_backend_context(),
            speculative_moe_a2a_backend_context(),
        )

    def __enter__(self) -> None:
        for part in self._parts:
            self._stack.enter_context(part)

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()
