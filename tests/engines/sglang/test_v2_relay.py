"""The overlap scheduler's relay of an off step's result, through SGLang's real ``FutureMap`` (0.5.17+).

With overlap scheduling the scheduler stashes each step's next draft input in the FutureMap and the next
step gathers it back by request-pool row (``resolve_forward_inputs``, a GPU kernel: here its buffers are
read directly), with the lengths the worker published. An off step must survive that round trip: the next
step sees the sampled token as its bonus token, the lengths grown by one, and the proposals and hidden
states it handed on (the placeholders the catch-up rewrites) unchanged.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import requires_version
from test_v2_off_step import Engine, _single_process  # noqa: F401 - the fixture is used by name

pytestmark = requires_version("0.5.17", "0.5.23")


@pytest.mark.parametrize("eagle", [False, True], ids=["draft-model", "eagle"])
def test_an_off_step_result_round_trips_through_the_future_map(
    eagle: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sglang.srt.speculative.spec_utils as spec_utils
    from sglang.srt.managers.overlap_utils import FutureMap, RelayPayload

    # SGLang reads this from the published server args (none on CPU): EAGLE relays hidden states
    monkeypatch.setattr(spec_utils, "spec_need_hidden_states", lambda server_args=None: eagle)

    e = Engine(eagle=eagle, prompts={1: 5, 2: 7})
    pool = e.worker.req_to_token_pool
    fmap = FutureMap(torch.device("cpu"), e.algo, pool, needs_cpu_seq_lens=True)
    batch = e.batch()
    rows = batch.req_pool_indices
    topk_p, topk_index, hidden = e.topk_p.clone(), e.topk_index.clone(), e.hidden
    from specpolicy.adapters.sglang.v2 import step

    result = step.off_step(e.worker, batch, e.st, lambda lens: fmap.publish(rows, lens))
    # the scheduler: stash the next draft input by row, hand the batch the draft input with its rows
    fmap.stash(rows, RelayPayload.from_draft_input(result.next_draft_input))
    batch.spec_info = result.next_draft_input
    batch.spec_info.future_indices = rows
    nxt: Any = batch
    fmap.resolve_seq_lens_cpu(nxt)
    assert nxt.seq_lens.tolist() == [s + 1 for s in e.seq]
    assert nxt.seq_lens_cpu.tolist() == [s + 1 for s in e.seq]
    # what the next step's gather (a GPU kernel) reads back by row
    assert fmap.output_tokens_buf[rows].tolist() == result.next_token_ids.tolist()
    assert torch.equal(fmap.topk_index_buf[rows].to(topk_index.dtype), topk_index)
    assert torch.equal(fmap.topk_p_buf[rows].to(topk_p.dtype), topk_p)
    if eagle:
        assert torch.equal(fmap.hidden_states_buf[rows], hidden)
