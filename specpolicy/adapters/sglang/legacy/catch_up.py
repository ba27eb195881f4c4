"""The drafter's catch-up on a legacy worker: before a speculative step (or inside an off step whose
hidden-state window is full) the positions the drafter missed while off are run in one batched extend
(``draft_lag.DraftLag``), and the proposal and hidden state of each request are set from it.
"""

from __future__ import annotations

from typing import Any

from .off_path import OffPath

__all__ = ["catch_up_if_behind", "catch_up_v1", "catch_up_v2", "keep_exact_rows"]


def catch_up_v1(worker: Any, batch: Any, off: OffPath, now: int | None = None) -> bool:
    """``catch_up_if_behind`` for a v1 worker's ScheduleBatch (before a speculative step, or inside an off
    step whose hidden-state window is full: ``now``)."""
    runner = worker.draft_model_runner
    return catch_up_if_behind(
        off=off,
        reqs=batch.reqs,
        seq_lens_cpu=batch.seq_lens_cpu,
        base_mwb=batch.get_model_worker_batch(),
        spec_info=batch.spec_info,
        draft_runner=runner,
        req_to_token=worker.req_to_token_pool.req_to_token,
        tp_context=worker.draft_tp_context(runner.tp_group),
        now=now,
    )


def catch_up_v2(worker: Any, mwb: Any, off: OffPath, now: int | None = None) -> bool:
    """``catch_up_if_behind`` for a v2 worker's ModelWorkerBatch (as ``catch_up_v1``)."""
    dw = worker.draft_worker
    return catch_up_if_behind(
        off=off,
        reqs=mwb.reqs,
        seq_lens_cpu=mwb.seq_lens_cpu,
        base_mwb=mwb,
        spec_info=mwb.spec_info,
        draft_runner=dw.draft_runner,
        req_to_token=worker.req_to_token_pool.req_to_token,
        tp_context=dw.draft_tp_context(dw.draft_runner.tp_group),
        now=now,
    )


def catch_up_if_behind(
    *,
    off: OffPath,
    reqs: Any,
    seq_lens_cpu: Any,
    base_mwb: Any,
    spec_info: Any,
    draft_runner: Any,
    req_to_token: Any,
    tp_context: Any,
    now: int | None = None,
) -> bool:
    """Bring the draft state of ``reqs`` up to date (before a speculative step, or to off step ``now``
    inside an off step whose hidden-state window is full); True when an extend ran."""
    lag = off.lag
    if lag is None or seq_lens_cpu is None:
        return False
    plan = lag.plan(reqs, seq_lens_cpu.tolist(), now)
    if plan is None:
        return False
    with tp_context:
        topk_p, topk_index, hidden = lag.catch_up(
            plan=plan,
            base_mwb=base_mwb,
            bonus_tokens=getattr(spec_info, off.names.root),
            draft_runner=draft_runner,
            req_to_token=req_to_token,
            topk=off.topk,
            root_field=off.names.root,
        )
    if hidden is not None and plan.exact:
        keep_exact_rows(plan.exact, spec_info, topk_p, topk_index, hidden)
    spec_info.topk_p, spec_info.topk_index = topk_p, topk_index
    if hidden is not None:
        spec_info.hidden_states = hidden
    lag.mark_caught_up(reqs, plan)
    return True


def keep_exact_rows(rows: Any, spec_info: Any, topk_p: Any, topk_index: Any, hidden: Any) -> None:
    """Requests whose draft state was already exact keep the proposal and hidden state they have (the
    catch-up had no target hidden state to recompute them with and wrote the padding slot). An
    ``unrecoverable`` request takes the catch-up's own (valid token ids), not a placeholder."""
    import torch

    idx = torch.tensor(list(rows), dtype=torch.int64).to(topk_p.device, non_blocking=True)
    old_rows = (spec_info.topk_p, spec_info.topk_index, spec_info.hidden_states)
    for new, old in zip((topk_p, topk_index, hidden), old_rows, strict=True):
        if old is not None and old.shape[0] == new.shape[0] and old.shape[1:] == new.shape[1:]:
            new[idx] = old[idx].to(new.dtype)
