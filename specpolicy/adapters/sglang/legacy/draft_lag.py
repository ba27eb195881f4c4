"""Off steps that leave the drafter alone, and the one batched draft extend that catches it up on resume.

A draft model (STANDALONE) keeps its own KV cache in the slots the target allocates for each position (the
two share ``req_to_token`` and the slot allocator). SGLang feeds the drafter the token of the *next*
position: after a verify it extends positions ``L_old .. L_new-1`` with the accepted tokens
``t[L_old+1] .. t[L_new]``. An off step writes the target's KV at position ``L`` and produces ``t[L+1]``;
the draft KV at ``L`` is left unwritten, so after ``m`` off steps positions ``L-m .. L-1`` are missing, and
their inputs ``t[L-m+1] .. t[L]`` are exactly the tokens the off steps produced (the last one is the
current bonus token, still on the GPU). Before the next speculative step, ``catch_up`` runs one extend of
the draft model over those positions for every request of the batch, with the same inputs an always-on
engine would have used, and takes the draft's top-k proposal from the last one: the drafter then proposes
exactly what it would have proposed had it never been skipped. The draft state only steers which tokens
are proposed; the target verifies every one of them, so a wrong catch-up could cost acceptance, never
change an output token.

Counting is O(1) per off step: ``DraftLag`` numbers the off steps, and each request remembers the number at
which its draft state was last exact (after its prefill, or after a catch-up); a running request is in
every decode batch, so its missing positions are the difference. A request with nothing missing (a fresh
prefill) is recomputed at its last position, which rewrites the value already there, so the batch stays
whole. A request that finishes while off never pays.

EAGLE / EAGLE-3 drafters also read the target's hidden state of every position. With a ``HiddenWindow``
the off steps keep those (``record``), and the catch-up feeds position ``p`` the token of ``p+1`` and the
target's hidden state at ``p``, as SGLang's verify-then-draft-extend feeds an always-on drafter; it also
returns the drafter's last hidden state, which the next draft step reads. The window holds ``W``
positions: an off step that would exceed it first catches the batch up (``full``), one extend of ``W``
positions per request every ``W`` off steps. A request with nothing missing cannot be recomputed without
its hidden state, so its row writes SGLang's padding slot 0 and keeps the proposal it already has.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ...hidden_window import HiddenWindow

__all__ = ["DraftLag", "CatchUpPlan", "ExtendInputs", "tokens_between"]

ATTR = "_specpolicy_draft_exact_at"  # on Req: the off-step number at which its draft state was exact


def tokens_between(req: Any, start: int, stop: int) -> list[int]:
    """Token ids at positions ``start .. stop-1`` of a request's sequence (prompt, then output)."""
    prompt = req.origin_input_ids
    n = len(prompt)
    if stop <= n:
        return list(prompt[start:stop])
    out = req.output_ids
    if start >= n:
        return list(out[start - n : stop - n])
    return list(prompt[start:]) + list(out[: stop - n])


@dataclasses.dataclass(frozen=True)
class CatchUpPlan:
    """Per request of a batch: positions ``seq_len - missing .. seq_len - 1`` are extended, with the known
    tokens of positions ``seq_len - missing + 1 .. seq_len - 1`` (the bonus token completes each run)."""

    missing: tuple[int, ...]
    seq_lens: tuple[int, ...]
    known_tokens: tuple[int, ...]  # flat, ``missing[i] - 1`` per request
    stale: int  # requests that really missed positions (the others are recomputed at one position)
    recomputed: tuple[int, ...] = ()  # indices of the requests recomputed at one position
    now: int = 0  # the off-step number the plan catches up to
    rows: tuple[int, ...] = ()  # each request's request-pool row (``req_pool_idx``): host-side indexing
    #: indices of the recomputed requests whose draft state was exact (not ``unrecoverable``): they keep the
    #: proposal and drafter hidden state they have
    exact: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class ExtendInputs:
    """The catch-up extend's device tensors (``DraftLag.extend_inputs``): one row per position fed."""

    input_ids: Any
    out_cache_loc: Any
    hidden: Any  # the target's hidden states of the positions fed (None: a draft model needs none)
    capture_hidden_mode: Any  # SGLang's CaptureHiddenMode for the drafter's forward


class DraftLag:
    """Which requests' draft state is behind, by how many positions, and the catch-up forward.

    Owned by one worker (one scheduler process). ``skipped_positions`` / ``caught_up_positions`` /
    ``catch_ups`` / ``unrecoverable`` are the counters the metrics report.
    """

    __slots__ = (
        "off_steps",
        "settled_at",
        "skipped_positions",
        "caught_up_positions",
        "catch_ups",
        "unrecoverable",
        "hidden",
    )

    def __init__(self, hidden: HiddenWindow | None = None) -> None:
        self.hidden = hidden  # the target's hidden states kept while off (EAGLE drafters); None: not needed
        self.off_steps = 0
        self.skipped_positions = 0
        self.caught_up_positions = 0
        self.catch_ups = 0
        self.unrecoverable = 0
        self.settled_at = 0  # off-step number at the last catch-up: none since means nothing is behind

    # ------------------------------------------------------------------------------------ bookkeeping
    def on_extend(self, reqs: Sequence[Any]) -> None:
        """A prefill (or re-prefill after retraction) ran the drafter over these requests' whole input."""
        now = self.off_steps
        for r in reqs:
            setattr(r, ATTR, now)

    def on_off_step(self, batch_size: int) -> None:
        self.off_steps += 1
        self.skipped_positions += batch_size

    def record(self, pool_rows: Any, hidden: Any) -> None:
        """After the current off step's forward: keep the target's hidden state of the position it wrote."""
        if self.hidden is not None:
            self.hidden.write(self.off_steps, pool_rows, hidden)

    def full(self) -> bool:
        """Whether the current off step (already counted) would overwrite a hidden state still needed: the
        batch must be caught up to the previous off step first."""
        return self.hidden is not None and self.off_steps - self.settled_at > self.hidden.window

    def missing(self, req: Any) -> int:
        return self.off_steps - getattr(req, ATTR, self.off_steps)

    def behind(self) -> bool:
        """Whether an off step ran since the last catch-up (O(1): checked before every speculative step;
        every running request is in each decode batch, so a catch-up of the batch settles them all)."""
        return self.off_steps != self.settled_at

    def plan(
        self, reqs: Sequence[Any], seq_lens_cpu: Sequence[int], now: int | None = None
    ) -> CatchUpPlan | None:
        """What to extend before a speculative step, or None when every request's draft state is exact.

        ``now`` (default: the off steps so far) is the off-step number to catch up to; a full window is
        caught up to the step before the current one, whose position is not written yet. A request whose
        known tokens do not reach its missing positions (which the scheduler's ordering rules out) is
        recomputed at its last position only and counted in ``unrecoverable``: acceptance may suffer for a
        few steps, the output cannot.
        """
        now = self.off_steps if now is None else now
        if all(getattr(r, ATTR, now) >= now for r in reqs):
            self.settled_at = now
            return None
        missing: list[int] = []
        known: list[int] = []
        recomputed: list[int] = []
        exact: list[int] = []
        stale = 0
        for i, (r, seq_len) in enumerate(zip(reqs, seq_lens_cpu, strict=True)):
            m = max(now - getattr(r, ATTR, now), 0)
            seq_len = int(seq_len)
            if m > 0:
                have = len(r.origin_input_ids) + len(r.output_ids)
                beyond = self.hidden is not None and m > self.hidden.window  # overwritten hidden states
                if m >= seq_len or have < seq_len or beyond:
                    self.unrecoverable += 1
                    m = 0
                else:
                    stale += 1
            else:
                exact.append(i)
            if m == 0:
                recomputed.append(i)
            m = max(m, 1)
            missing.append(m)
            known.extend(tokens_between(r, seq_len - m + 1, seq_len))
        seqs = tuple(int(s) for s in seq_lens_cpu)
        rows = tuple(int(r.req_pool_idx) for r in reqs)
        return CatchUpPlan(
            tuple(missing), seqs, tuple(known), stale, tuple(recomputed), now, rows, tuple(exact)
        )

    def mark_caught_up(self, reqs: Sequence[Any], plan: CatchUpPlan) -> None:
        now = plan.now
        for r in reqs:
            setattr(r, ATTR, now)
        self.settled_at = now
        self.catch_ups += 1
        self.caught_up_positions += sum(m for m in plan.missing)

    # ------------------------------------------------------------------------------------ the forward
    def extend_inputs(self, plan: CatchUpPlan, *, bonus_tokens: Any, req_to_token: Any) -> ExtendInputs:
        """The catch-up extend's device inputs for ``plan``, the same on every release: the known tokens
        with each run's last input the bonus token, the KV slots of the missing positions (slots the target
        allocated, shared with the drafter), and with a ``HiddenWindow`` the target's hidden state of each
        position fed. Every index is built on the host and crosses to the device in one copy; nothing waits
        for the GPU."""
        import torch
        from sglang.srt.model_executor import forward_batch_info as fbi

        device = bonus_tokens.device
        missing = list(plan.missing)
        total = sum(missing)
        stride = int(req_to_token.shape[1])
        known = plan.known_tokens
        window = self.hidden
        recomputed = set(plan.recomputed)
        ids: list[int] = []
        last: list[int] = []
        loc: list[int] = []
        gathered: list[int] = []  # positions whose hidden states the window holds (none for recomputed)
        pad: list[int] = []  # where the recomputed requests' inputs are: their KV goes to the padding slot
        k = 0
        for i, (row, s, m) in enumerate(zip(plan.rows, plan.seq_lens, missing, strict=True)):
            ids.extend(known[k : k + m - 1])
            ids.append(0)
            k += m - 1
            last.append(len(ids) - 1)
            loc.extend(range(row * stride + s - m, row * stride + s))
            gathered.append(0 if i in recomputed else m)
            if i in recomputed:
                pad.append(len(ids) - 1)
        hidden_idx: list[int] = []
        blank: list[int] = []
        if window is not None:
            hidden_idx, blank = window.flat_index(plan.now, plan.rows, gathered)
        else:
            pad = []
        sizes = [total, len(last), total, len(hidden_idx), len(blank), len(pad)]
        packed = torch.tensor(ids + last + loc + hidden_idx + blank + pad, dtype=torch.int64)
        input_ids, last_d, loc_d, hidden_d, blank_d, pad_d = packed.to(device, non_blocking=True).split(sizes)
        input_ids[last_d] = bonus_tokens.to(torch.int64)
        out_cache_loc = req_to_token.reshape(-1)[loc_d].to(torch.int64)
        hidden = None
        capture = fbi.CaptureHiddenMode.NULL
        if window is not None:
            capture = fbi.CaptureHiddenMode.LAST  # the drafter's last hidden state feeds its next draft step
            hidden = window.take(hidden_d, blank_d if blank else None)
            if pad:  # no hidden state for these: write the padding slot, keep their proposal
                out_cache_loc[pad_d] = 0
        return ExtendInputs(input_ids, out_cache_loc, hidden, capture)

    def catch_up(
        self,
        *,
        plan: CatchUpPlan,
        base_mwb: Any,
        bonus_tokens: Any,
        draft_runner: Any,
        req_to_token: Any,
        topk: int,
        root_field: str,
    ) -> tuple[Any, Any, Any]:
        """Extend the draft model over the planned positions; return its next ``(topk_p, topk_index,
        hidden_states)`` (``hidden_states``: the drafter's own at each last position, None without a
        ``HiddenWindow``).

        ``base_mwb`` is the decode ModelWorkerBatch of the coming step (``seq_lens`` = ``plan.seq_lens``);
        the extend batch is a copy in ``ForwardMode.EXTEND`` with each request's missing positions as the
        new tokens and everything before them as the cached prefix, the form SGLang's own draft prefill
        uses. Nothing here waits for the GPU.
        """
        import torch
        from sglang.srt.model_executor import forward_batch_info as fbi
        from sglang.srt.speculative.eagle_info import EagleDraftInput
        from sglang.srt.speculative.spec_utils import fast_topk

        inputs = self.extend_inputs(plan, bonus_tokens=bonus_tokens, req_to_token=req_to_token)
        input_ids, out_cache_loc, hidden, capture = (
            inputs.input_ids,
            inputs.out_cache_loc,
            inputs.hidden,
            inputs.capture_hidden_mode,
        )
        missing, seq_lens = list(plan.missing), list(plan.seq_lens)
        total, starts = sum(missing), [s - m for s, m in zip(seq_lens, missing, strict=True)]
        window = self.hidden
        spec = EagleDraftInput(
            **{root_field: bonus_tokens},
            hidden_states=hidden,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        spec.capture_hidden_mode = capture
        seq_cpu = torch.tensor(seq_lens, dtype=base_mwb.seq_lens.dtype)
        mwb = dataclasses.replace(
            base_mwb,
            forward_mode=fbi.ForwardMode.EXTEND,
            input_ids=input_ids,
            out_cache_loc=out_cache_loc,
            seq_lens=base_mwb.seq_lens,
            seq_lens_cpu=seq_cpu,
            seq_lens_sum=sum(seq_lens),
            extend_num_tokens=total,
            extend_seq_lens=missing,
            extend_prefix_lens=starts,
            extend_logprob_start_lens=list(missing),
            extend_input_logprob_token_ids=None,
            return_logprob=False,
            top_logprobs_nums=None,
            token_ids_logprobs=None,
            is_extend_in_batch=True,
            spec_info=spec,
            capture_hidden_mode=capture,
        )
        forward_batch = fbi.ForwardBatch.init_new(mwb, draft_runner)
        forward_batch.return_logprob = False
        logits = draft_runner.forward(forward_batch).logits_output
        probs = torch.softmax(logits.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, topk, dim=-1)
        return topk_p, topk_index, (logits.hidden_states if window is not None else None)
