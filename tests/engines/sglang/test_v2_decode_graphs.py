"""The off step's decode CUDA graphs on 0.5.13+: built by SGLang's real ``DecodeCudaGraphRunner`` beside the
verify graphs, replayed by the off step through SGLang's real ``ModelRunner._forward_raw``.

On CPU nothing can be captured, so the runner's ``capture`` is replaced by a record of what the captured
graphs would bake in (forward mode, tokens per request, hidden-state mode, the runner's speculative
algorithm), and a replay reads the runner's static input buffers only (``v2_support.BufferReplay``), as a
graph does: a field of the off step's batch that does not reach those buffers changes the tokens.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
import v2_support as vs
from conftest import requires_version

pytestmark = requires_version("0.5.17", "0.5.23")

STRIDE = 100  # req_to_token[row, p] = row * STRIDE + p


@pytest.fixture(autouse=True)
def _single_process() -> Any:
    from sglang.srt import runtime_context
    from sglang.srt.runtime_context import get_parallel

    known = getattr(runtime_context, "_PARALLEL_FIELDS", None)  # 0.5.17; 0.5.23 has a function
    known = known if known is not None else runtime_context._parallel_fields()
    with get_parallel().override(**{k: v for k, v in vs.SINGLE_PROCESS.items() if k in known}):
        yield


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What each ``DecodeCudaGraphRunner.capture`` would have captured."""
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    seen: list[dict[str, Any]] = []

    def capture(self: Any) -> None:
        seen.append(
            {
                "spec_algorithm": self.model_runner.spec_algorithm,
                "forward_mode": self.capture_forward_mode,
                "tokens_per_req": self.captured_req_width,
                "hidden": self.capture_hidden_mode,
                "capture_bs": list(self.capture_bs),
            }
        )

    monkeypatch.setattr(DecodeCudaGraphRunner, "capture", capture)
    return seen


def _engine(algorithm: str, **server_fields: Any) -> tuple[Any, Any, Any]:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    override, args = vs.resolved_server_args(
        speculative_algorithm=algorithm,
        speculative_num_steps=3,
        speculative_num_draft_tokens=4,
        speculative_eagle_topk=1,
        **server_fields,
    )
    algo = SpeculativeAlgorithm.from_string(algorithm)
    return override, args, vs.graph_model_runner(args, algo, rows=8)


@pytest.mark.parametrize(
    ("algorithm", "server_fields", "hidden"),
    [
        ("EAGLE", {}, "FULL"),
        ("EAGLE3", {"return_hidden_states_mode": "last"}, "FULL"),
        ("STANDALONE", {}, "NULL"),
    ],
    ids=["eagle", "eagle3-server-returns-last", "draft-model"],
)
def test_decode_graphs_are_captured_as_a_speculation_free_engine_captures_them(
    captured: list[dict[str, Any]], algorithm: str, server_fields: dict[str, Any], hidden: str
) -> None:
    """Built from a resolved (read-only) ``ServerArgs``: one token per request in ``ForwardMode.DECODE``,
    for every captured batch size, with the hidden states the drafter needs; the runner's speculative state
    and the engine's server args are as they were."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from specpolicy.adapters.sglang.v2.install import build_decode_target

    override, args, mr = _engine(algorithm, **server_fields)
    try:
        before = dict(vars(args))
        want_hidden = CaptureHiddenMode[hidden]
        decode = build_decode_target(mr, graphs=True, capture_hidden_mode=want_hidden)
    finally:
        override.restore()
    assert captured == [
        {
            "spec_algorithm": SpeculativeAlgorithm.NONE,
            "forward_mode": ForwardMode.DECODE,
            "tokens_per_req": 1,
            "hidden": want_hidden,
            "capture_bs": vs.CAPTURE_BS,
        }
    ]
    assert decode.mode == "graph" and decode.graph_runner.max_num_token == max(vs.CAPTURE_BS)
    assert decode.attn_backend.graph_state == (max(vs.CAPTURE_BS), max(vs.CAPTURE_BS))  # decode-sized
    # the runner is the launch one again, and the engine's record was never written
    assert mr.spec_algorithm == SpeculativeAlgorithm.from_string(algorithm)
    assert (mr.attn_backend.name, mr.decode_cuda_graph_runner.name) == ("verify-attn", "verify-graph")
    assert mr.server_args is args and vars(args) == before


@pytest.mark.parametrize("host_lens", [True, False], ids=["host-lengths", "overlap-gpu-only-lengths"])
@pytest.mark.parametrize("eagle", [False, True], ids=["draft-model", "eagle"])
def test_an_off_step_replays_the_decode_graphs_with_the_tokens_of_a_plain_decode(
    captured: list[dict[str, Any]], eagle: bool, host_lens: bool
) -> None:
    """The off step's batch goes through SGLang's own decode dispatch onto the decode graphs (not the
    verify graphs), padded to a captured batch size; what the graphs read from their static buffers is the
    bonus token at position ``seq_len`` of each request, and the hidden states the window keeps are the
    graph's rows of the real requests. Under overlap with a backend that needs no host lengths (triton)
    the scheduler hands no host lengths, and the replay plans without them (no copy to the host)."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftInput
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    from specpolicy.adapters.hidden_window import HiddenWindow
    from specpolicy.adapters.sglang.legacy.draft_lag import DraftLag
    from specpolicy.adapters.sglang.v2 import step
    from specpolicy.adapters.sglang.v2.install import build_decode_target

    override, _, mr = _engine("EAGLE" if eagle else "STANDALONE")
    capture = CaptureHiddenMode.FULL if eagle else CaptureHiddenMode.NULL
    try:
        decode = build_decode_target(mr, graphs=True, capture_hidden_mode=capture)
        graphs = decode.graph_runner
        graphs.backend = vs.BufferReplay(graphs)
        target = vs.GraphTarget(mr)
        w = object.__new__(EAGLEWorkerV2)
        w._target_worker = target
        draft_runner = SimpleNamespace(war_fastpath_read_done_event=None)
        w._draft_worker = SimpleNamespace(draft_runner=draft_runner)
        w.req_to_token_pool = SimpleNamespace(
            req_to_token=torch.arange(8 * STRIDE, dtype=torch.int64).reshape(8, STRIDE)
        )
        window = HiddenWindow(rows=8, window=4, width=vs.HIDDEN, dtype=torch.float32, device="cpu")
        st = step.V2State(
            params=SimpleNamespace(),  # not asked: the off step is called directly
            decode=decode,
            lag=DraftLag(window if eagle else None),
            launch=3,
            topk=1,
            capture_hidden_mode=capture,
        )
        rows, seq = [2, 5, 7], [6, 3, 9]  # three requests: padded to the captured batch size 4
        reqs = [
            vs.Req(rid=f"r{r}", origin_input_ids=[1] * s, output_ids=[], req_pool_idx=r)
            for r, s in zip(rows, seq, strict=True)
        ]
        bonus = [11, 12, 13]
        spec = EagleDraftInput(
            bonus_tokens=torch.tensor(bonus, dtype=torch.int64),  # the future map's relay is int64
            topk_p=torch.ones(3, 1),
            topk_index=torch.zeros(3, 1, dtype=torch.int64),
            hidden_states=torch.zeros(3, vs.HIDDEN) if eagle else None,
        )
        batch = vs.schedule_batch(
            reqs=reqs,
            forward_mode=ForwardMode.DECODE,
            seq_lens=torch.tensor(seq, dtype=torch.int64),
            seq_lens_cpu=torch.tensor(seq, dtype=torch.int64) if host_lens else None,
            seq_lens_sum=sum(seq) if host_lens else None,
            orig_seq_lens=torch.tensor(seq, dtype=torch.int64),
            req_pool_indices=torch.tensor(rows, dtype=torch.int64),
            spec_info=spec,
            spec_algorithm=mr.spec_algorithm,
            sampling_info=vs.sampling_info(),
            return_logprob=False,
        )
        result = step.off_step(w, batch, st, None)
    finally:
        override.restore()
    assert target.runners == [graphs]  # the decode graphs were in place for the forward
    if hasattr(EAGLEWorkerV2, "war_fastpath_runner"):  # 0.5.17: the WAR barrier's fast path
        # the event the decode graph recorded once its inputs were read is where the scheduler looks for it
        assert draft_runner.war_fastpath_read_done_event is not None
        assert mr.war_fastpath_read_done_event is None
    else:
        assert draft_runner.war_fastpath_read_done_event is None
    assert [k.size for k in graphs.backend.keys] == [4]
    assert result.next_token_ids.tolist() == [vs.token_after(s, r) for r, s in zip(rows, seq, strict=True)]
    b = graphs.buffers
    assert b.input_ids[:3].tolist() == bonus
    assert b.out_cache_loc[:4].tolist() == [r * STRIDE + s for r, s in zip(rows, seq, strict=True)] + [0]
    assert b.seq_lens[:4].tolist() == [s + 1 for s in seq] + [1]  # padding: the backend's fill value
    (view,) = graphs.attn_backend.replays  # the decode backend planned the replay, lengths with the token
    assert view.seq_lens.tolist() == [s + 1 for s in seq] + [1]
    if host_lens:
        assert view.seq_lens_cpu.tolist() == [s + 1 for s in seq] + [1]
        assert view.seq_lens_sum == sum(seq) + 3 + 1
    else:
        assert view.seq_lens_cpu is None and view.seq_lens_sum is None
    assert view.spec_info is None
    if eagle:  # the window keeps the rows of the real requests, not the padding row
        assert result.logits_output.hidden_states.shape[0] == 3
        kept = window.buf[0][rows]
        assert kept[:, 0].tolist() == [float(s) for s in seq]
        assert kept[:, 1].tolist() == [float(r) for r in rows]
