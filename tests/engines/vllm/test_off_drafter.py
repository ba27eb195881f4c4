"""Depth-0 steps without the draft-model drafter, and the exact catch-up on resume (``off_drafter``).

The drafter is vLLM's ``StandaloneARSpeculator`` built by the release's ``init_speculator`` from a
draft-model engine configuration, driven through its own ``propose``. Only what cannot run on a CPU is
replaced: the Triton kernels (``prepare_prefill_inputs``, re-stated per request as the kernel's docstring
lays out its output; the block table's slot-mapping kernel, by ``slot = slot_row * 512 + position``), the
attention metadata (read only by attention layers), and the draft model (no weights), by one whose
"KV" at a slot is a hash of the token, the position and the KV of the previous position of that request:
a row written out of order, from a wrong token, or over a missing row differs. Its proposal is its last
KV value, so proposals carry the whole history too.

Each scenario is run twice over the same target steps: once with vLLM's own ``propose`` (its first pass
runs at depth 0 and keeps the drafter in step), once with the hook; the drafter's KV of every committed
position and every proposal must agree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _vllm_harness import RELEASE
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy.adapters import _patch
from specpolicy.adapters.vllm import catch_up, off_drafter, runner_hooks

pytestmark = pytest.mark.skipif(
    not RELEASE.mrv2_off_drafter, reason=f"vLLM {RELEASE.version} has no off-drafter hook"
)

ROW = 512  # slots per request-state slot (max_model_len)
PRIME = 1_000_003


def _needs_triton() -> None:
    pytest.importorskip("triton", reason="0.34's drafter modules import Triton (not its kernels) at import")


class CausalDraft:
    """Stands in for the draft model: writes kv[slot] from (token, position, kv of the position before)."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self.kv: dict[int, int] = {}
        self.forwards = 0

    def __call__(self, input_ids: Any, positions: Any, **_: Any) -> Any:
        import torch
        from vllm.forward_context import get_forward_context

        self.forwards += 1
        slots = get_forward_context().slot_mapping["draft"].tolist()
        out = torch.zeros(len(slots), 4)
        for t, (tok, pos, slot) in enumerate(
            zip(input_ids.tolist(), positions.tolist(), slots, strict=False)
        ):
            if slot < 0:
                continue
            assert slot % ROW == pos, (slot, pos)
            prev = self.kv.get(slot - 1, -1) if pos > 0 else 0
            self.kv[slot] = (prev * 31 + tok * 7 + pos) % PRIME
            out[t, 0] = self.kv[slot]
        return out

    def compute_logits(self, hidden: Any) -> Any:
        import torch

        logits = torch.zeros(hidden.shape[0], self.vocab)
        logits[torch.arange(hidden.shape[0]), hidden[:, 0].long() % self.vocab] = 1.0
        return logits


class SlotTable:
    """The block table's slot mapping for one KV group, in torch: ``slot_row * ROW + position``."""

    num_kv_cache_groups = 1

    def __init__(self, max_num_reqs: int) -> None:
        import torch

        self.input_block_tables = (torch.zeros(max_num_reqs, 32, dtype=torch.int32),)

    def compute_slot_mappings(
        self, idx_mapping: Any, query_start_loc: Any, positions: Any, num_tokens: int, out: Any = None
    ) -> Any:
        import torch

        qsl = query_start_loc.tolist()
        res = torch.full((1, num_tokens), -1, dtype=torch.int64)
        for i, slot_row in enumerate(idx_mapping.tolist()):
            if slot_row >= 0:
                res[0, qsl[i] : qsl[i + 1]] = slot_row * ROW + positions[qsl[i] : qsl[i + 1]]
        if out is not None:
            out[:, :num_tokens] = res
        return res


def _prepare_prefill_inputs(
    input_buffers: Any,
    input_batch: Any,
    last_sampled: Any,
    num_rejected: Any,
    expanded_input_ids: Any,
    expanded_positions: Any,
    last_token_indices: Any,
    max_num_reqs: int,
    max_model_len: int,
) -> int:
    """The kernel's outputs, request by request: accepted tokens, the correction token, rejected slots."""
    n = input_batch.num_reqs
    qsl = input_batch.query_start_loc.tolist()
    for i in range(n):
        r = int(input_batch.idx_mapping[i])
        q = qsl[i + 1] - qsl[i]
        valid = q - int(num_rejected[i])
        start = int(input_batch.positions[qsl[i]])
        out = qsl[i] + i
        for j in range(q + 1):
            tok = (
                int(last_sampled[r])
                if j == valid
                else (int(input_batch.input_ids[qsl[i] + j]) if j < valid else 0)
            )
            expanded_input_ids[out + j] = tok
            expanded_positions[out + j] = min(start + j, max_model_len - 1)
        last_token_indices[i] = out + valid
        input_buffers.query_start_loc[i] = out
        input_buffers.seq_lens[i] = min(int(input_batch.seq_lens[i]) + 1, max_model_len)
    total = input_batch.num_tokens + n
    input_buffers.query_start_loc[n:] = total
    input_buffers.seq_lens[n:] = 0
    last_token_indices[n:] = 0
    return total


@pytest.fixture
def speculator(make_config: Any, model_dirs: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    _needs_triton()
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.v1.worker.gpu.spec_decode import init_speculator
    from vllm.v1.worker.gpu.spec_decode.autoregressive import speculator as ar
    from vllm.v1.worker.gpu.spec_decode.standalone_ar import speculator as sar

    vc = make_config(spec={"method": "draft_model", "model": str(model_dirs[0])})
    monkeypatch.setattr(sar, "prepare_prefill_inputs", _prepare_prefill_inputs)
    for mod in (sar, ar):
        monkeypatch.setattr(mod, "build_slot_mappings_by_layer", lambda sm, cfg: {"draft": sm[0]})
    with set_current_vllm_config(vc):
        spec = init_speculator(vc, torch.device("cpu"), None)
        assert isinstance(spec, sar.StandaloneARSpeculator)
        spec.model = CausalDraft(spec.vocab_size)
        spec.block_tables = SlotTable(spec.max_num_reqs)
        spec.kv_cache_config = object()
        spec.expanded_slot_mappings = torch.zeros(
            1, spec.max_num_tokens + spec.max_num_reqs, dtype=torch.int64
        )
        spec._build_attn_metadata = lambda **kw: None  # the stand-in model reads no attention metadata
        # no graphs on a CPU (propose dispatches eagerly: is_profile); _prefill only asserts a manager
        spec.prefill_cudagraph_manager = object()
        yield spec
    _patch.unwrap_all()


def reset_slot(spec: Any, slot: int) -> None:
    """What the model runner does when a new request takes ``slot`` (the hook's ``runner_add_requests``:
    the slot's missed count cleared; tested below)."""
    lag = spec.__dict__.get(catch_up.STATE)
    if lag is not None:
        lag.reset(slot)


# ------------------------------------------------------------------ the target side: requests and steps
@dataclasses.dataclass
class Req:
    slot: int
    truth: list[int]  # the tokens the target produces, by position (the prompt first)
    prompt: int
    length: int = 0  # tokens committed
    drafts: int = 0  # drafts scheduled for the next step (the previous step's depth)


def truth(seed: int, n: int = 200) -> list[int]:
    return [(seed * 37 + i * 11) % 200 + 3 for i in range(n)]


@dataclasses.dataclass
class TargetStep:
    """One target step over every request: vLLM's ``InputBatch``, each row's query length and rejected
    drafts, and each request's query positions."""

    batch: Any
    qlens: list[int]
    rejected: list[int]
    queries: dict[str, list[int]]


def target_step(spec: Any, reqs: dict[str, Req], accept: int, tokens: Any, last_sampled: Any) -> TargetStep:
    """A prefill runs the whole prompt; a decode verifies the previous step's drafts, of which the first
    ``accept`` are right (a rejected draft is a wrong token). The token history and the sampled tokens are
    updated as the runner's are."""
    import torch
    from vllm.v1.worker.gpu.input_batch import InputBatch

    ids, pos, qlens, rej, seq, queries = [], [], [], [], [], {}
    for rid, r in reqs.items():
        if r.length == 0:  # prefill: the whole prompt, the target samples the next token
            q = list(range(r.prompt))
            toks = r.truth[: r.prompt]
            a, new = 0, r.prompt + 1
        else:
            start = r.length - 1
            a = min(accept, r.drafts)
            q = list(range(start, start + 1 + r.drafts))
            toks = [r.truth[start]] + [r.truth[p] if k < a else 1 for k, p in enumerate(q[1:])]
            new = r.length + a + 1
        ids += toks
        pos += q
        queries[rid] = q
        qlens.append(len(q))
        rej.append(len(q) - 1 - a if r.length else 0)
        seq.append(q[-1] + 1)
        r.length = new
        tokens[r.slot, :new] = torch.tensor(r.truth[:new], dtype=torch.int32)
        last_sampled[r.slot] = r.truth[new - 1]
    n = len(qlens)
    base = InputBatch.make_dummy(n, sum(qlens), spec.input_buffers)
    qsl = np.concatenate([[0], np.cumsum(qlens)]).astype(np.int32)
    slots = np.array([r.slot for r in reqs.values()], dtype=np.intp)
    batch = dataclasses.replace(
        base,
        req_ids=list(reqs),
        idx_mapping=torch.from_numpy(slots.astype(np.int64)),
        idx_mapping_np=slots,
        num_scheduled_tokens=np.array(qlens, dtype=np.int32),
        num_draft_tokens=sum(r.drafts for r in reqs.values()),
        query_start_loc=torch.from_numpy(qsl.copy()),
        query_start_loc_np=qsl,
        seq_lens=torch.tensor(seq, dtype=torch.int32),
        seq_lens_cpu_upper_bound=torch.tensor(seq, dtype=torch.int32),
        input_ids=torch.tensor(ids, dtype=torch.int32),
        positions=torch.tensor(pos, dtype=torch.int64),
        **({"decode_graph_eligible": False} if hasattr(base, "decode_graph_eligible") else {}),
    )
    return TargetStep(batch, qlens, rej, queries)


class Engine:
    """Drives ``propose`` as vLLM's model runner does after each target step, with scripted acceptance."""

    def __init__(self, spec: Any) -> None:
        import torch

        self.spec = spec
        self.tokens = torch.full((spec.max_num_reqs, ROW), -7, dtype=torch.int32)
        self.last_sampled = torch.zeros(spec.max_num_reqs, dtype=torch.int64)
        self.reqs: dict[str, Req] = {}
        self.proposals: list[dict[str, list[int]]] = []
        self.forwards: list[int] = []
        self.kv: dict[int, int] = {}  # the drafter's KV at the end of the run
        self.dropped = 0
        lag = spec.__dict__.get(catch_up.STATE)
        if lag is not None:  # the runner hands the speculator its token history (tested below)
            lag.tokens = self.tokens

    def add(self, rid: str, slot: int, prompt: int, seed: int) -> None:
        self.reqs[rid] = Req(slot, truth(seed), prompt)
        self.tokens[slot] = -7
        reset_slot(self.spec, slot)

    def finish(self, rid: str) -> None:
        r = self.reqs.pop(rid)
        lag = self.spec.__dict__.get(catch_up.STATE)
        if lag is not None:
            self.dropped += int(lag.missed[r.slot])  # missed while off, never to be caught up

    def step(self, depth: int, dummy: bool = False) -> None:
        """One target step over every request, then ``propose`` at ``depth``; of the previous step's drafts
        the first ``steps % 3`` are accepted (a rejected draft is a wrong token)."""
        import torch

        spec = self.spec
        step = target_step(spec, self.reqs, len(self.forwards) % 3, self.tokens, self.last_sampled)
        batch, n, qlens, rej = step.batch, step.batch.num_reqs, step.qlens, step.rejected
        before = spec.model.forwards
        drafts = spec.propose(
            batch,
            None,
            None,
            torch.zeros(sum(qlens), 4),
            None,
            torch.ones(n, dtype=torch.int32),
            torch.tensor(rej, dtype=torch.int32),
            self.last_sampled,
            torch.zeros(1, spec.max_num_reqs, dtype=torch.int64),
            torch.zeros(spec.max_num_reqs),
            torch.zeros(spec.max_num_reqs, dtype=torch.int64),
            num_speculative_tokens=depth,
            dummy_run=dummy,
            is_profile=True,  # eager dispatch: no CUDA graph manager on a CPU
        )
        self.forwards.append(spec.model.forwards - before)
        if depth:
            self.proposals.append({rid: drafts[i, :depth].tolist() for i, rid in enumerate(self.reqs)})
        for r in self.reqs.values():
            r.drafts = depth

    def committed_kv(self) -> dict[str, list[int | None]]:
        kv = self.kv
        return {rid: [kv.get(r.slot * ROW + p) for p in range(r.length)] for rid, r in self.reqs.items()}


Script = list[tuple[str, Any]]

# on, off x k, on; switching every step; a prefill while off; a request finishing while off
SCRIPT: Script = [
    ("add", ("a", 0, 20, 1)), ("add", ("b", 1, 9, 2)), ("add", ("c", 2, 33, 3)),
    ("step", 3), ("step", 2), ("step", 0), ("step", 0), ("step", 0), ("step", 0), ("step", 3),
    ("step", 0), ("step", 1), ("step", 0), ("step", 0), ("step", 2), ("step", 0), ("step", 3),
    ("step", 0), ("add", ("d", 3, 17, 4)), ("step", 0), ("finish", "b"), ("step", 0), ("step", 0),
    ("add", ("e", 1, 12, 5)), ("step", 0), ("step", 3), ("step", 3),
]  # fmt: skip


def run(spec: Any, script: Script) -> Engine:
    spec.model.kv.clear()
    eng = Engine(spec)
    for op, arg in script:
        if op == "add":
            eng.add(*arg)
        elif op == "finish":
            eng.finish(arg)
        else:
            eng.step(arg)
    eng.kv = dict(spec.model.kv)
    return eng


def _depths(script: Script) -> list[int]:
    return [arg for op, arg in script if op == "step"]


@pytest.fixture
def always_on(speculator: Any) -> Engine:
    """vLLM's own propose: the first pass runs at depth 0 as well."""
    _patch.unwrap_all()
    return run(speculator, SCRIPT)


def _hooked(spec: Any) -> catch_up.SlotLag:
    runner_hooks.install(RELEASE.version)
    lag = catch_up.SlotLag(spec.max_num_reqs, None)
    setattr(spec, catch_up.STATE, lag)
    return lag


def test_off_steps_run_no_drafter_forward_and_the_resume_catches_up_exactly(
    speculator: Any, always_on: Engine
) -> None:
    _hooked(speculator)
    eng = run(speculator, SCRIPT)
    lag = speculator.__dict__[catch_up.STATE]
    depths = _depths(SCRIPT)
    # vLLM's own: its first pass every step, then a forward per further draft; the hook: no forward on a
    # depth-0 step verifying no drafts (the first depth-0 step after a speculative one verifies its drafts)
    assert always_on.forwards == [max(d, 1) for d in depths]
    expected = [0 if d == 0 and i > 0 and depths[i - 1] == 0 else max(d, 1) for i, d in enumerate(depths)]
    assert eng.forwards == expected
    assert eng.committed_kv() == always_on.committed_kv()
    assert all(v is not None for kv in eng.committed_kv().values() for v in kv)
    assert eng.proposals == always_on.proposals
    assert lag.own_passes == 0 and lag.skipped_steps == expected.count(0) > 0
    # "b" finished while off: its skipped positions were never caught up; "e" took its slot afresh
    assert eng.dropped > 0
    assert lag.caught_up_positions + eng.dropped == lag.skipped_positions


def test_without_the_catch_up_the_drafters_kv_differs(
    speculator: Any, always_on: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above fails when the resume step does not feed the missed positions."""
    _hooked(speculator)
    monkeypatch.setattr(catch_up.SlotLag, "take", lambda self, slots: np.zeros(len(slots), dtype=np.int64))
    eng = run(speculator, SCRIPT)
    assert eng.committed_kv() != always_on.committed_kv()
    assert eng.proposals != always_on.proposals


def test_a_catch_up_beyond_the_token_budget_runs_in_passes_of_its_own(
    speculator: Any, always_on: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With room for only a few missed positions next to the step's tokens, the missed positions are fed
    first in chunks, each request's chunk ending where the next begins; the result is the same."""
    lag = _hooked(speculator)
    monkeypatch.setattr(speculator, "max_num_tokens", 12)
    eng = run(speculator, [op for op in SCRIPT if op != ("add", ("c", 2, 33, 3))])
    monkeypatch.setattr(speculator, "max_num_tokens", 512)
    _patch.unwrap_all()
    ref = run(speculator, [op for op in SCRIPT if op != ("add", ("c", 2, 33, 3))])
    assert lag.own_passes > 1
    assert eng.committed_kv() == ref.committed_kv()
    assert eng.proposals == ref.proposals


def test_dummy_runs_vllms_own_scheduler_and_adaptive_verification_keep_vllms_first_pass(
    speculator: Any,
) -> None:
    runner_hooks.install(RELEASE.version)
    eng = run(speculator, SCRIPT[:9])  # no SlotLag: the runner found vLLM's own scheduler
    assert eng.forwards == [3, 2, 1, 1, 1, 1]
    _hooked(speculator)
    eng = run(speculator, SCRIPT[:9])
    assert eng.forwards == [3, 2, 1, 0, 0, 0]
    eng.step(0, dummy=True)  # warm-up and capture runs (idx_mapping all -1: nothing is written)
    assert eng.forwards[-1] == 1
    speculator.enable_adaptive_verification = True  # it reads the drafter's confidences every step
    assert run(speculator, SCRIPT[:9]).forwards == [3, 2, 1, 1, 1, 1]


@settings(max_examples=60, deadline=None)
@given(
    missed=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    spare=st.integers(0, 30),
)
def test_lag_passes_feed_every_missed_position_once_in_order_within_the_budget(
    missed: list[int], spare: int
) -> None:
    """Every pass feeds each row at least one position and stays within the budget; each row's chunks
    are consecutive and end at its first query position; a row with nothing left gets its first query
    token only."""
    m = np.array(missed, dtype=np.int64)
    budget = len(missed) + spare
    passes = catch_up.lag_passes(m, budget)
    fed: list[list[int]] = [[] for _ in missed]
    for ext in passes:
        assert int((ext.count + ext.own).sum()) <= budget
        assert np.all(ext.count + ext.own >= 1) and np.all(ext.own <= 1) and np.all(ext.count <= ext.back)
        assert np.all((ext.own == 1) == (ext.count == 0))
        for i in range(len(missed)):
            fed[i] += range(-int(ext.back[i]), -int(ext.back[i]) + int(ext.count[i]))
    assert fed == [list(range(-k, 0)) for k in missed]
    assert (len(passes) == 0) == (sum(missed) == 0)


def test_lag_passes_refuse_a_budget_below_one_token_per_row() -> None:
    with pytest.raises(ValueError, match="budget 3 below the batch's 4 rows"):
        catch_up.lag_passes(np.array([0, 7, 3, 12]), 3)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_extend_batch_feeds_the_named_positions_with_their_tokens(data: st.DataObject) -> None:
    """On vLLM's InputBatch: each row's query becomes ``count`` positions starting ``back`` before its
    first query position (tokens from the history), then its first ``own`` query tokens; the sequence
    length ends at the last position fed; the rest of the batch is untouched."""
    _needs_triton()
    import torch
    from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers

    n = data.draw(st.integers(1, 5))
    firsts = data.draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))
    qlens = data.draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    back = np.array([data.draw(st.integers(0, f)) for f in firsts], dtype=np.int64)
    # a merged row (the missed positions, then its own tokens) or a chunk of missed positions alone
    merged = [data.draw(st.booleans()) or b == 0 for b in back]
    count = np.array(
        [b if m else data.draw(st.integers(1, int(b))) for b, m in zip(back, merged, strict=True)],
        dtype=np.int64,
    )
    own = np.array(
        [
            data.draw(st.integers(0 if c else 1, q)) if m else 0
            for m, c, q in zip(merged, count, qlens, strict=True)
        ],
        dtype=np.int64,
    )
    slots = np.array(data.draw(st.permutations(range(8)))[:n], dtype=np.intp)
    history = torch.arange(8 * ROW, dtype=torch.int32).reshape(8, ROW) + 10_000
    qsl = np.concatenate([[0], np.cumsum(qlens)]).astype(np.int32)
    pos = [f + j for f, q in zip(firsts, qlens, strict=True) for j in range(q)]
    base = InputBatch.make_dummy(n, int(qsl[-1]), InputBuffers(8, 64, torch.device("cpu")))
    batch = dataclasses.replace(
        base,
        idx_mapping=torch.from_numpy(slots.astype(np.int64)),
        idx_mapping_np=slots,
        num_scheduled_tokens=np.array(qlens, dtype=np.int32),
        query_start_loc=torch.from_numpy(qsl.copy()),
        query_start_loc_np=qsl,
        seq_lens=torch.tensor([f + q for f, q in zip(firsts, qlens, strict=True)], dtype=torch.int32),
        seq_lens_cpu_upper_bound=torch.tensor([f + q for f, q in zip(firsts, qlens, strict=True)]).int(),
        input_ids=torch.tensor([-p - 1 for p in pos], dtype=torch.int32),  # the batch's own: -(position+1)
        positions=torch.tensor(pos, dtype=torch.int64),
    )
    out = catch_up.extend_batch(batch, catch_up.Extension(back, count, own), history)
    nq = out.query_start_loc_np
    assert out.num_tokens == int((count + own).sum()) == int(nq[-1]) and out.query_start_loc.tolist() == list(
        nq
    )
    for i in range(n):
        want = list(range(firsts[i] - int(back[i]), firsts[i] - int(back[i]) + int(count[i])))
        want += list(range(firsts[i], firsts[i] + int(own[i])))
        got = out.positions[nq[i] : nq[i + 1]].tolist()
        assert got == want
        tokens = [int(history[slots[i], p]) if p < firsts[i] else -p - 1 for p in want]
        assert out.input_ids[nq[i] : nq[i + 1]].tolist() == tokens
        assert int(out.seq_lens[i]) == int(out.seq_lens_cpu_upper_bound[i]) == want[-1] + 1
    assert out.idx_mapping is batch.idx_mapping and not out.decode_graph_eligible
    if n == 1 and back[0] > 1 and own[0] == 0:  # a gap between missed and own positions is refused
        gap = catch_up.Extension(back, back - 1, np.ones(1, dtype=np.int64))
        with pytest.raises(ValueError, match="consecutive"):
            catch_up.extend_batch(batch, gap, history)


def test_the_runner_hands_its_token_history_only_on_the_specpolicy_scheduler(
    make_config: Any, speculator: Any
) -> None:
    """``execute_model`` gives the speculator a ``SlotLag`` over ``req_states.all_token_ids`` once, on an
    engine running the specpolicy scheduler; on vLLM's own scheduler it gives none (so nothing skips)."""
    import torch
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    history = torch.zeros(speculator.max_num_reqs, ROW, dtype=torch.int32)
    wrapped = runner_hooks.runner_execute_model(runner_hooks.pieces(RELEASE.version))(
        lambda self, so, *a, **k: "ran"
    )
    for cls, gets in (
        ("specpolicy.adapters.vllm.Scheduler", True),
        ("vllm.v1.core.sched.scheduler.Scheduler", False),
    ):
        speculator.__dict__.pop(catch_up.STATE, None)
        runner = object.__new__(GPUModelRunner)
        runner.vllm_config = make_config(scheduler_cls=cls)
        runner.speculator = speculator
        runner.req_states = type("States", (), {"all_token_ids": type("T", (), {"gpu": history})()})()
        assert wrapped(runner, None) == "ran"
        lag = speculator.__dict__.get(catch_up.STATE)
        assert (lag is not None) == gets
        if gets:
            assert lag.tokens is history
            wrapped(runner, None)
            assert speculator.__dict__[catch_up.STATE] is lag  # kept across steps


def test_a_new_request_clears_its_slots_missed_positions(speculator: Any) -> None:
    """``add_requests`` (after vLLM's own, which assigns the slots) clears the count of every slot a new
    request took, and only those; without the bookkeeping it does nothing."""
    import types

    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    lag = catch_up.SlotLag(speculator.max_num_reqs, None)
    lag.missed[:4] = [5, 6, 7, 8]
    runner = object.__new__(GPUModelRunner)
    runner.speculator = speculator
    runner.req_states = types.SimpleNamespace(req_id_to_index={})

    def assign(self: Any, so: Any) -> str:
        self.req_states.req_id_to_index.update({"x": 2, "y": 0})
        return "added"

    wrapped = off_drafter.runner_add_requests(assign)
    so = types.SimpleNamespace(scheduled_new_reqs=[types.SimpleNamespace(req_id="x")])
    assert wrapped(runner, so) == "added"  # no bookkeeping yet
    setattr(speculator, catch_up.STATE, lag)
    assert wrapped(runner, so) == "added"
    assert lag.missed[:4].tolist() == [5, 6, 0, 8]


def test_the_plugin_installs_the_hook_and_the_contract_lists_its_names(restore_engine_args: None) -> None:
    _needs_triton()
    import vllm.plugins
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

    from specpolicy.adapters.vllm.contract import check_targets, targets_for

    _patch.unwrap_all()
    vllm.plugins.plugins_loaded = False
    try:
        vllm.plugins.load_general_plugins()
        assert StandaloneARSpeculator.propose.__specpolicy_wrapped__ is not None  # type: ignore[attr-defined]
        assert GPUModelRunner.add_requests.__specpolicy_wrapped__ is not None  # type: ignore[attr-defined]
    finally:
        _patch.unwrap_all()
    assert set(off_drafter.TARGETS) <= set(targets_for(RELEASE.version))
    checked = check_targets()
    assert all(checked[t] is None for t in off_drafter.TARGETS)
