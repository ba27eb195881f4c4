"""The 0.5.13+ off step and the drafter's catch-up, on the real SGLang 0.5.17 types (``v2_support``).

Sequence under test, as the scheduler drives it: a prefill leaves the drafter exact, ``k`` off steps run the
target's decode only, then the catch-up before a speculative step must leave the draft KV exactly as an
always-on drafter's: at every position ``p`` below the sequence length the token of ``p + 1`` (and for
EAGLE the target's hidden state of ``p``).
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
    """No process groups on CPU: SGLang's own override says this process is its whole parallel world."""
    from sglang.srt.runtime_context import get_parallel

    widths = {"moe_ep_size": 1, "attn_dcp_size": 1}  # 0.5.17 knows the first only
    try:
        override = get_parallel().override(**widths)
        override.__enter__()
    except (ValueError, KeyError, TypeError):
        widths.pop("attn_dcp_size")
        override = get_parallel().override(**widths)
        override.__enter__()
    try:
        yield
    finally:
        override.__exit__(None, None, None)


def _slot(row: int, p: int) -> int:
    return row * STRIDE + p


def _params() -> Any:
    from specpolicy.adapters.sglang.adaptive import SpecPolicyParams
    from specpolicy.runtime.runtime import AdapterRuntime
    from specpolicy.runtime.settings import AdapterSettings

    settings = AdapterSettings.build({"name": "static", "num_steps": 0}, metrics=False)
    rt = AdapterRuntime(
        settings, engine="sglang", engine_version="0.5.17", path="test", allowed_steps=(0, 3), default_steps=3
    )
    return SpecPolicyParams(rt, 3, engine_candidates=[3])


class Engine:
    """One worker and its requests, advanced the way SGLang's scheduler advances them."""

    def __init__(self, *, eagle: bool, prompts: dict[int, int], window: int = 16, topk: int = 1) -> None:
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        from specpolicy.adapters.hidden_window import HiddenWindow
        from specpolicy.adapters.sglang.legacy.decode_target import DecodeTarget
        from specpolicy.adapters.sglang.legacy.draft_lag import DraftLag
        from specpolicy.adapters.sglang.v2 import step

        algo = SpeculativeAlgorithm.from_string("EAGLE" if eagle else "STANDALONE")
        self.target = vs.OracleTarget(algo)
        self.draft = vs.KVDraftRunner(algo)
        w = object.__new__(EAGLEWorkerV2)
        w._target_worker = self.target
        w._draft_worker = vs.DraftWorker(self.draft)
        rows = max(prompts) + 1
        w.req_to_token_pool = SimpleNamespace(
            req_to_token=torch.arange(rows * STRIDE, dtype=torch.int32).reshape(rows, STRIDE)
        )
        self.worker = w
        capture = CaptureHiddenMode.FULL if eagle else CaptureHiddenMode.NULL
        hidden = (
            HiddenWindow(rows=rows, window=window, width=vs.HIDDEN, dtype=torch.float32, device="cpu")
            if eagle
            else None
        )
        decode = DecodeTarget(
            SimpleNamespace(name="decode-attn"),
            SimpleNamespace(name="decode-graph"),
            capture,
            graph_attr="decode_cuda_graph_runner",
        )
        self.st = step.V2State(
            params=_params(),
            decode=decode,
            lag=DraftLag(hidden),
            launch=3,
            topk=topk,
            capture_hidden_mode=capture,
        )
        self.algo = algo
        self.eagle = eagle
        # after the prefill: the prompt's KV written by target and drafter, the bonus token sampled
        self.reqs = [
            vs.Req(
                rid=f"r{row}",
                origin_input_ids=[(row * 7 + i) % 50 + 1 for i in range(n)],
                output_ids=[],
                req_pool_idx=row,
            )
            for row, n in sorted(prompts.items())
        ]
        self.st.lag.on_extend(self.reqs)
        self.seq = [len(r.origin_input_ids) for r in self.reqs]
        self.bonus = [vs.token_after(s - 1, r.req_pool_idx) for s, r in zip(self.seq, self.reqs, strict=True)]
        for r, s, b in zip(self.reqs, self.seq, self.bonus, strict=True):
            r.output_ids.append(b)  # the prefill's sampled token, processed before the next step
            toks = r.origin_input_ids + [b]
            for p in range(s):  # SGLang's draft prefill: position p fed the token of p + 1
                self.draft.kv[_slot(r.req_pool_idx, p)] = (toks[p + 1], p, p if eagle else None)
        self.topk_p = torch.ones(len(self.reqs), topk)
        self.topk_index = torch.zeros(len(self.reqs), topk, dtype=torch.int64)
        self.hidden = torch.zeros(len(self.reqs), vs.HIDDEN) if eagle else None
        self.published: list[list[int]] = []

    def batch(self) -> Any:
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.speculative.eagle_info import EagleDraftInput

        spec = EagleDraftInput(
            bonus_tokens=torch.tensor(self.bonus, dtype=torch.int32),
            topk_p=self.topk_p,
            topk_index=self.topk_index,
            hidden_states=self.hidden,
        )
        return vs.schedule_batch(
            reqs=list(self.reqs),
            forward_mode=ForwardMode.DECODE,
            seq_lens=torch.tensor(self.seq, dtype=torch.int64),
            seq_lens_cpu=torch.tensor(self.seq, dtype=torch.int64),
            seq_lens_sum=sum(self.seq),
            req_pool_indices=torch.tensor([r.req_pool_idx for r in self.reqs], dtype=torch.int64),
            spec_info=spec,
            spec_algorithm=self.algo,
            sampling_info=vs.sampling_info(),
            return_logprob=False,
        )

    def off(self) -> Any:
        from specpolicy.adapters.sglang.v2 import step

        batch = self.batch()
        result = step.off_step(self.worker, batch, self.st, lambda lens: self.published.append(lens.tolist()))
        # what the scheduler does with the result: lengths, next draft input, the tokens appended
        self.seq = result.new_seq_lens.tolist()
        nd = result.next_draft_input
        self.bonus = nd.bonus_tokens.tolist()
        self.topk_p, self.topk_index, self.hidden = nd.topk_p, nd.topk_index, nd.hidden_states
        for r, t in zip(self.reqs, result.next_token_ids.tolist(), strict=True):
            r.output_ids.append(t)
        return result

    def catch_up(self) -> Any:
        from specpolicy.adapters.sglang.v2 import step

        batch = self.batch()
        ran = step.catch_up(self.worker, batch, self.st)
        return ran, batch.spec_info

    def expected_kv_problems(self) -> list[str]:
        """Positions whose draft KV differs from an always-on drafter's."""
        out = []
        for r, s, b in zip(self.reqs, self.seq, self.bonus, strict=True):
            toks = r.origin_input_ids + r.output_ids
            assert len(toks) == s + 1 and toks[-1] == b, "positions 0 .. seq_len, the bonus token last"
            for p in range(s):
                want = (toks[p + 1], p, p if self.eagle else None)
                got = self.draft.kv.get(_slot(r.req_pool_idx, p))
                if got != want:
                    out.append(f"row {r.req_pool_idx} position {p}: {got} != {want}")
        return out


@pytest.mark.parametrize("eagle", [False, True], ids=["draft-model", "eagle"])
def test_off_step_is_a_plain_decode_and_leaves_the_drafter_alone(eagle: bool) -> None:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    e = Engine(eagle=eagle, prompts={1: 5, 2: 7})
    seq0, bonus0 = list(e.seq), list(e.bonus)
    result = e.off()
    call = e.target.calls[-1]
    assert call["forward_mode"] == ForwardMode.DECODE
    assert call["input_ids"] == bonus0  # the bonus token, fed at its own position
    assert call["positions"] == seq0
    assert call["seq_lens"] == [s + 1 for s in seq0]
    assert call["out_cache_loc"] == [_slot(r, s) for r, s in zip((1, 2), seq0, strict=True)]
    assert (call["attn_backend"], call["graph_runner"]) == ("decode-attn", "decode-graph")
    mr = e.target.model_runner  # the verify backend and graphs are back after the step
    assert (mr.attn_backend.name, mr.decode_cuda_graph_runner.name) == ("verify-attn", "verify-graph")
    assert e.draft.forwards == []  # no drafter forward at all while off
    # SGLang's steps=0 result shape: one accepted token, stride 1, lengths grown by one, published before
    assert result.accept_lens.tolist() == [1, 1] and result.accept_lens.dtype == torch.int32
    assert result.speculative_num_draft_tokens == 1
    assert e.published == [[s + 1 for s in seq0]]
    assert result.next_token_ids.tolist() == [vs.token_after(s, r) for r, s in zip((1, 2), seq0, strict=True)]
    assert result.next_draft_input.bonus_tokens.dtype == torch.int32


@pytest.mark.parametrize("eagle", [False, True], ids=["draft-model", "eagle"])
@pytest.mark.parametrize("k", [1, 3, 9])
def test_catch_up_leaves_the_draft_kv_of_an_always_on_drafter(eagle: bool, k: int) -> None:
    e = Engine(eagle=eagle, prompts={1: 5, 2: 7, 3: 2})
    for _ in range(k):
        e.off()
    assert len(e.expected_kv_problems()) == k * 3  # every off position missing before the catch-up
    ran, spec = e.catch_up()
    assert ran
    assert e.expected_kv_problems() == []
    assert len(e.draft.forwards) == 1  # one batched extend for the whole batch and every missed position
    # the proposal an always-on drafter makes from its last position: the bonus token's successor
    assert spec.topk_index.flatten().tolist() == [vs.draft_token_after(b) for b in e.bonus]
    assert spec.topk_p.flatten().tolist() == [1.0] * 3
    if eagle:  # and the drafter's own hidden state at each last position
        assert spec.hidden_states[:, 0].tolist() == [float(s - 1) for s in e.seq]
    assert e.catch_up()[0] is False  # nothing behind any more


@pytest.mark.parametrize("k", [1, 4])
def test_a_tree_drafter_resumes_with_the_top_k_of_its_last_position(k: int) -> None:
    """EAGLE-3 trees (topk > 1): the catch-up writes the same draft KV as a chain's, and the proposal the
    next tree grows from is the top-k of the drafter's softmax at each last position, in rank order, the
    form SGLang's draft extend after a verify hands on."""
    import math

    topk = 4
    e = Engine(eagle=True, prompts={1: 5, 2: 7, 3: 2}, topk=topk)
    for _ in range(k):
        e.off()
    off_spec = e.batch().spec_info
    assert tuple(off_spec.topk_p.shape) == (3, topk)  # an off step hands the tree's shapes on
    ran, spec = e.catch_up()
    assert ran and e.expected_kv_problems() == []
    assert len(e.draft.forwards) == 1
    want_index = [[(vs.draft_token_after(b) + r) % vs.VOCAB for r in range(topk)] for b in e.bonus]
    assert spec.topk_index.tolist() == want_index
    # softmax over the drafter's logits: TREE_RANKS graded values, the rest of the vocabulary at -10
    weights = [math.exp(10.0 - 2.0 * r) for r in range(vs.TREE_RANKS)]
    total = sum(weights) + (vs.VOCAB - vs.TREE_RANKS) * math.exp(-10.0)
    for row in spec.topk_p.tolist():
        assert row == pytest.approx([w / total for w in weights[:topk]], rel=1e-5)
    assert spec.hidden_states[:, 0].tolist() == [float(s - 1) for s in e.seq]


def test_window_full_catches_up_inside_off_steps() -> None:
    e = Engine(eagle=True, prompts={1: 4, 2: 6}, window=2)
    for _ in range(7):
        e.off()
    assert e.st.lag.catch_ups >= 2  # each full window was caught up before its positions were overwritten
    e.catch_up()
    assert e.expected_kv_problems() == []
    assert e.st.lag.unrecoverable == 0


def test_a_request_prefilled_while_off_keeps_its_exact_state() -> None:
    e = Engine(eagle=False, prompts={1: 5, 2: 3})
    e.off()
    e.off()
    # a new request arrives: its prefill (drafter included) is exact at the current off step
    b = vs.token_after(3, 3)
    new = vs.Req(rid="r3", origin_input_ids=[9, 8, 7, 6], output_ids=[b], req_pool_idx=3)
    e.worker.req_to_token_pool.req_to_token = torch.arange(4 * STRIDE, dtype=torch.int32).reshape(4, STRIDE)
    e.st.lag.on_extend([new])
    for p in range(4):
        e.draft.kv[_slot(3, p)] = ((new.origin_input_ids + [b])[p + 1], p, None)
    e.reqs.append(new)
    e.seq.append(4)
    e.bonus.append(b)
    e.topk_p = torch.ones(3, 1)
    e.topk_index = torch.zeros(3, 1, dtype=torch.int64)
    e.off()
    ran, _ = e.catch_up()
    assert ran and e.expected_kv_problems() == []


def test_switching_every_step_stays_exact() -> None:
    e = Engine(eagle=True, prompts={1: 5, 2: 7})
    for _ in range(4):
        e.off()
        ran, spec = e.catch_up()
        assert ran and e.expected_kv_problems() == []
        e.topk_p, e.topk_index, e.hidden = spec.topk_p, spec.topk_index, spec.hidden_states


class _Script:
    """A policy that plays a fixed list of depths and records what it was told."""

    def __init__(self, depths: list[int]) -> None:
        self.depths = depths
        self.seen: list[Any] = []

    def decide(self, stats: Any) -> Any:
        from specpolicy import SpecMode

        self.seen.append(stats)
        return SpecMode.of(self.depths[(len(self.seen) - 1) % len(self.depths)])

    def reset(self) -> None:
        pass


def test_the_worker_wrappers_route_each_decision_and_feed_acceptance_back() -> None:
    """``forward_batch_generation``: depth 0 runs the off step (SGLang's own step never runs), any other
    depth catches the drafter up first and then runs SGLang's own step with the depth activated; the
    scheduler's ``on_verify_complete_cpu`` reaches the policy as that step's acceptance."""
    from specpolicy.adapters.sglang.adaptive import SpecPolicyParams
    from specpolicy.adapters.sglang.v2 import step
    from specpolicy.runtime.runtime import AdapterRuntime
    from specpolicy.runtime.settings import AdapterSettings

    e = Engine(eagle=False, prompts={1: 5, 2: 7})
    policy = _Script([0, 0, 3, 0, 3])
    rt = AdapterRuntime(
        AdapterSettings.build({"name": "alternate", "depths": [0, 3]}, metrics=False),
        engine="sglang",
        engine_version="test",
        path="test",
        allowed_steps=(0, 3),
        default_steps=3,
        policy=policy,
    )
    e.st.params = SpecPolicyParams(rt, 3, engine_candidates=[3])
    setattr(e.worker, step.ATTR, e.st)  # what ``install.attach`` leaves on the worker
    activated: list[int] = []
    e.st.controller = SimpleNamespace(_activate=activated.append)
    e.worker.speculative_num_steps = 1  # the controller's live state differs from the decided depth
    ran_own: list[list[int]] = []

    def sglang_step(worker: Any, batch: Any, **kwargs: Any) -> Any:
        step.activate_wrapper(lambda *a: None)(worker, int(batch.seq_lens.shape[0]))
        ran_own.append(list(e.seq))
        assert e.expected_kv_problems() == [], "the drafter is exact before SGLang's own step"
        return "sglang-result"

    forward = step.forward_wrapper(sglang_step)
    feedback = step.feedback_wrapper(lambda *a, **k: None)
    kinds = []
    for _ in range(5):
        batch = e.batch()
        out = forward(e.worker, batch, on_publish=lambda lens: None)
        if out == "sglang-result":
            kinds.append("spec")
            feedback(e.worker, [2, 1], batch_size=2)
        else:
            kinds.append("off")
            e.seq = out.new_seq_lens.tolist()
            e.bonus = out.next_draft_input.bonus_tokens.tolist()
            for r, t in zip(e.reqs, out.next_token_ids.tolist(), strict=True):
                r.output_ids.append(t)
            feedback(e.worker, [0, 0], batch_size=2)
    assert kinds == ["off", "off", "spec", "off", "spec"]
    assert activated == [3, 3]
    assert len(ran_own) == 2 and e.st.lag.catch_ups == 2
    # each decision after the first saw the previous step's depth and acceptance
    last = [(s.last_num_steps, s.accepted_draft_tokens) for s in policy.seen[1:]]
    assert last[0] == (0, None) and last[2] == (3, [2, 1])
