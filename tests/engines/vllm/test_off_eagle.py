"""Depth-0 steps without the EAGLE / EAGLE-3 drafter, and the exact catch-up on resume (``off_eagle``).

The drafter is vLLM's ``EagleSpeculator`` built by the release's ``init_speculator`` from the harness's
EAGLE-3 engine configuration, driven through its own ``TargetDependentARSpeculator.propose`` (0.26:
``AutoRegressiveSpeculator.propose``, which takes no depth: the step's depth is ``drafter_depth``'s note, and
the hook wraps ``drafter_depth``'s propose). Only what
cannot run on a CPU is replaced: the Triton kernel ``prepare_prefill_inputs`` (re-stated per request as
the kernel lays out its output: the target's tokens shifted by one, the sampled token last), the block
table's slot-mapping kernel (``off_drafter``'s test: ``slot = slot_row * 512 + position``), the attention
metadata builders (read only by attention layers), and the draft model (no weights), by one whose "KV" at
a slot is a hash of its input token, its position, the target hidden state it is given and the KV of the
previous position of that request, and whose output hidden state is that KV: a row written out of order,
from a wrong token, from a wrong hidden state, or over a missing row differs, and so do the proposals and
the drafter's hidden state that follow. The target's hidden states are small integers per (request,
position, layer), so every sum is exact.

Each scenario runs twice over the same target steps: once with vLLM's own ``propose`` (its first pass runs
at depth 0 and keeps the drafter in step; on 0.26 with ``drafter_depth``'s, since vLLM's own there drafts
every token), once with the hook; the drafter's KV of every committed
position, every proposal and the drafter's hidden state after every drafting step must agree. Depths are
0 and 1 (the first pass is what the hook changes; deeper draft steps run vLLM's loop unchanged).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _vllm_harness import K_MAX, RELEASE
from hypothesis import given, settings
from hypothesis import strategies as st
from test_off_drafter import PRIME, ROW, Req, SlotTable, reset_slot, target_step, truth

from specpolicy.adapters import _patch
from specpolicy.adapters.vllm import catch_up, drafter_depth, off_eagle, runner_hooks

pytestmark = pytest.mark.skipif(
    not RELEASE.mrv2_off_eagle, reason=f"vLLM {RELEASE.version} has no EAGLE off-drafter hook"
)

WINDOW = 16
LAYERS = 3  # EAGLE-3's auxiliary layers
#: 0.26: vLLM's propose takes no depth; the step's depth is ``drafter_depth``'s note, and vLLM's own propose
#: drafts every token (Triton kernels past the first pass), so the always-on run is ``drafter_depth``'s
DEPTH_NOTE = runner_hooks.pieces(RELEASE.version).depth
BASE = off_eagle.targets(DEPTH_NOTE)[0].rsplit(".", 1)[0]  # the drafters' base class, dotted


class CausalEagle:
    """Stands in for the EAGLE drafter: kv[slot] from (token, position, hidden input, kv a position back)."""

    def __init__(self, vocab: int, width: int) -> None:
        self.vocab, self.width = vocab, width
        self.kv: dict[int, int] = {}
        self.forwards = 0

    def combine_hidden_states(self, x: Any) -> Any:
        return x.view(x.shape[0], LAYERS, self.width).sum(1) + x[:, :1]  # not symmetric in the layers

    def __call__(self, input_ids: Any, positions: Any, hidden_states: Any, **_: Any) -> Any:
        import torch
        from vllm.forward_context import get_forward_context

        self.forwards += 1
        slots = get_forward_context().slot_mapping["draft"].tolist()
        weights = torch.arange(1, self.width + 1, dtype=hidden_states.dtype)
        mixed = (hidden_states * weights).sum(-1).long().tolist()
        out = torch.zeros(len(slots), self.width)
        for t, (tok, pos, slot) in enumerate(
            zip(input_ids.tolist(), positions.tolist(), slots, strict=False)
        ):
            if slot < 0:
                continue
            assert slot % ROW == pos, (slot, pos)
            prev = self.kv.get(slot - 1, -1) if pos > 0 else 0
            self.kv[slot] = (prev * 31 + tok * 7 + pos + mixed[t] * 3) % PRIME
            out[t, 0] = self.kv[slot]
        return out

    def compute_logits(self, hidden: Any) -> Any:
        import torch

        logits = torch.zeros(hidden.shape[0], self.vocab)
        logits[torch.arange(hidden.shape[0]), hidden[:, 0].long() % self.vocab] = 1.0
        return logits


def _prepare_prefill_inputs(
    last_token_indices: Any,
    current_draft_step: Any,
    input_buffers: Any,
    input_batch: Any,
    num_sampled: Any,
    num_rejected: Any,
    last_sampled: Any,
    next_prefill_tokens: Any,
    max_num_reqs: int,
) -> Any:
    """The kernel's outputs, request by request: each position's token is the next one's, the sampled token
    (or the next prompt token of a chunk) last; rejected positions keep their (real) positions."""
    n = input_batch.num_reqs
    qsl = input_batch.query_start_loc.tolist()
    ids, pos = input_buffers.input_ids, input_buffers.positions
    for i in range(n):
        r = int(input_batch.idx_mapping[i])
        s, e = qsl[i], qsl[i + 1]
        q = e - s - int(num_rejected[i])
        nxt = int(last_sampled[r]) if int(num_sampled[i]) > 0 else int(next_prefill_tokens[r])
        ids[s : s + q - 1] = input_batch.input_ids[s + 1 : s + q]
        ids[s + q - 1] = nxt
        ids[s + q : e] = 0
        pos[s:e] = input_batch.positions[s:e]
        last_token_indices[i] = s + q - 1
        input_buffers.query_start_loc[i] = s
        input_buffers.seq_lens[i] = input_batch.seq_lens[i]
    current_draft_step.fill_(0)
    input_buffers.query_start_loc[n:] = qsl[n]
    last_token_indices[n:] = 0
    return last_token_indices


class States:
    """The model state's attention builder: the drafter's own metadata (read only by attention layers)."""

    def __init__(self) -> None:
        self.built = 0

    def prepare_attn(self, *args: Any, **kwargs: Any) -> None:
        self.built += 1


class Table(SlotTable):
    """``SlotTable`` with the block tables' own slot-mapping buffer (written when no ``out`` is given)."""

    def __init__(self, max_num_reqs: int) -> None:
        import torch

        super().__init__(max_num_reqs)
        self.slot_mappings = torch.full((1, 1024), -1, dtype=torch.int64)

    def compute_slot_mappings(
        self, idx_mapping: Any, qsl: Any, positions: Any, n: int, out: Any = None
    ) -> Any:
        return super().compute_slot_mappings(
            idx_mapping, qsl, positions, n, self.slot_mappings if out is None else out
        )


def _base_module() -> Any:
    """The drafters' base module. 0.34's drafter modules import Triton (not its kernels) at import; 0.26's
    and 0.33's take vLLM's placeholder."""
    import importlib

    try:
        return importlib.import_module(BASE.rsplit(".", 1)[0])
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"vLLM's V2 drafter modules do not import here: {exc}")


@pytest.fixture
def speculator(make_config: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import inspect

    import torch
    from vllm.config import set_current_vllm_config
    from vllm.v1.worker.gpu import attn_utils
    from vllm.v1.worker.gpu.spec_decode import init_speculator

    base = _base_module()
    from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator

    vc = make_config()  # the harness's EAGLE-3 drafter
    monkeypatch.setattr(base, "prepare_prefill_inputs", _prepare_prefill_inputs)
    monkeypatch.setattr(attn_utils, "build_slot_mappings_by_layer", lambda sm, cfg: {"draft": sm[0]})
    with set_current_vllm_config(vc):
        extra = (None,) * (len(inspect.signature(init_speculator).parameters) - 2)  # 0.33: a PCP manager
        spec = init_speculator(vc, torch.device("cpu"), *extra)
        assert type(spec) is EagleSpeculator
        spec.model = CausalEagle(spec.vocab_size, spec.hidden_size)
        spec.block_tables = Table(spec.max_num_reqs)
        spec.kv_cache_config = object()
        spec.model_state = States()
        spec.attn_groups = []
        spec.prefill_cudagraph_manager = object()  # no graphs on a CPU (is_profile dispatches eagerly)
        yield spec
    _patch.unwrap_all()


def hidden(seed: int, pos: int, width: int, layer: int = 0) -> list[float]:
    return [float((seed * 13 + pos * 7 + layer * 5 + j) % 17) for j in range(width)]


class Engine:
    """Drives ``propose`` as vLLM's model runner does after each target step, with scripted acceptance and
    the target's hidden states (``aux``: EAGLE-3's auxiliary layers, else the last layer's)."""

    def __init__(self, spec: Any, aux: bool, is_profile: bool = True) -> None:
        import torch

        self.spec, self.aux, self.is_profile = spec, aux, is_profile
        self.tokens = torch.full((spec.max_num_reqs, ROW), -7, dtype=torch.int32)
        self.last_sampled = torch.zeros(spec.max_num_reqs, dtype=torch.int64)
        self.reqs: dict[str, Req] = {}
        self.seeds: dict[str, int] = {}
        self.proposals: list[dict[str, list[int]]] = []
        self.drafter_hidden: list[dict[str, list[float]]] = []
        self.forwards: list[int] = []
        self.kv: dict[int, int] = {}
        self.dropped = 0
        lag = spec.__dict__.get(catch_up.STATE)
        if lag is not None:
            lag.tokens = self.tokens

    def add(self, rid: str, slot: int, prompt: int, seed: int) -> None:
        self.reqs[rid] = Req(slot, truth(seed), prompt)
        self.seeds[rid] = seed
        self.tokens[slot] = -7
        reset_slot(self.spec, slot)

    def finish(self, rid: str) -> None:
        r = self.reqs.pop(rid)
        lag = self.spec.__dict__.get(catch_up.STATE)
        if lag is not None:
            self.dropped += int(lag.missed[r.slot])

    def step(self, depth: int) -> None:
        """One target step (of the previous drafts, alternately none and one accepted), then ``propose``."""
        import torch

        spec = self.spec
        step = target_step(spec, self.reqs, len(self.forwards) % 2, self.tokens, self.last_sampled)
        batch, n, t = step.batch, step.batch.num_reqs, step.batch.num_tokens
        layers = LAYERS if self.aux else 1
        width = spec.hidden_size
        hid = [
            sum((hidden(self.seeds[rid], p, width, k) for k in range(layers)), [])
            for rid, q in step.queries.items()
            for p in q
        ]
        target = torch.tensor(hid, dtype=torch.float32)
        aux = list(target.split(spec.hidden_size, dim=-1)) if self.aux else None
        last = torch.zeros(t, spec.hidden_size) if self.aux else target
        slots = batch.idx_mapping_np
        target_slots = {
            "draft": torch.tensor(
                [int(slots[i]) * ROW + p for i, q in enumerate(step.queries.values()) for p in q]
            )
        }
        before = spec.model.forwards
        if DEPTH_NOTE:  # as the runner's execute_model notes it
            setattr(spec, drafter_depth.DEPTH, depth)
        by_arg = {} if DEPTH_NOTE else {"num_speculative_tokens": depth}
        drafts = spec.propose(
            batch,
            None,
            target_slots,
            last,
            aux,
            torch.ones(n, dtype=torch.int32),
            torch.tensor(step.rejected, dtype=torch.int32),
            self.last_sampled,
            torch.zeros(spec.max_num_reqs, dtype=torch.int32),
            torch.zeros(spec.max_num_reqs),
            torch.zeros(spec.max_num_reqs, dtype=torch.int64),
            is_profile=self.is_profile,
            **by_arg,
        )
        self.forwards.append(spec.model.forwards - before)
        if depth:
            self.proposals.append({rid: drafts[i, :depth].tolist() for i, rid in enumerate(self.reqs)})
            self.drafter_hidden.append(
                {rid: spec.hidden_states[i].tolist() for i, rid in enumerate(self.reqs)}
            )
        for r in self.reqs.values():
            r.drafts = depth

    def committed_kv(self) -> dict[str, list[int | None]]:
        """The drafter's KV of every committed position but the last (whose next token is not known yet)."""
        kv = self.kv
        return {rid: [kv.get(r.slot * ROW + p) for p in range(r.length - 1)] for rid, r in self.reqs.items()}


Script = list[tuple[str, Any]]

# on, off x k (k > WINDOW: the window forces a catch-up), on; switching every step; a short prefill while off
# (kept in the window), a long one (forces a catch-up); a request finishing while off
SCRIPT: Script = [
    ("add", ("a", 0, 20, 1)), ("add", ("b", 1, 9, 2)), ("add", ("c", 2, 13, 3)),
    ("step", 1), ("step", 1), ("step", 0), ("step", 0), ("step", 0), ("step", 0), ("step", 1),
    ("step", 0), ("step", 1), ("step", 0), ("step", 0), ("step", 1), ("step", 0), ("step", 1),
    ("step", 0), ("add", ("d", 3, 5, 4)), ("step", 0), ("finish", "b"), ("step", 0), ("step", 0),
    ("add", ("e", 1, 40, 5)), ("step", 0), ("step", 0), ("step", 1),
    *[("step", 0)] * (WINDOW + 3), ("step", 1), ("step", 1),
]  # fmt: skip


def run(spec: Any, script: Script, aux: bool, is_profile: bool = True) -> Engine:
    """``script`` driven through ``propose`` (``is_profile``: eager dispatch, as on a CPU without graphs)."""
    spec.model.kv.clear()
    eng = Engine(spec, aux, is_profile)
    for op, a in script:
        if op == "add":
            eng.add(*a)
        elif op == "finish":
            eng.finish(a)
        else:
            eng.step(a)
    eng.kv = dict(spec.model.kv)
    return eng


def _always_on(spec: Any, script: Script, aux: bool) -> Engine:
    """The drafter's first pass every step: vLLM's own propose (0.26: with ``drafter_depth``'s)."""
    _patch.unwrap_all()
    if DEPTH_NOTE:
        _patch.apply(drafter_depth.hook_plan())
    return run(spec, script, aux)


def _hooked(spec: Any, window: int = WINDOW) -> off_eagle.EagleLag:
    _patch.unwrap_all()
    runner_hooks.install(RELEASE.version)
    lag = off_eagle.EagleLag(spec.max_num_reqs, None, window)
    setattr(spec, catch_up.STATE, lag)
    return lag


@pytest.mark.parametrize("aux", [True, False], ids=["eagle3-aux", "last-hidden"])
def test_off_steps_run_no_drafter_forward_and_the_resume_catches_up_exactly(
    speculator: Any, aux: bool
) -> None:
    ref = _always_on(speculator, SCRIPT, aux)
    lag = _hooked(speculator)
    eng = run(speculator, SCRIPT, aux)
    depths = [a for op, a in SCRIPT if op == "step"]
    assert ref.forwards == [1] * len(depths)  # vLLM's own: the first pass every step
    off = [i for i, d in enumerate(depths) if d == 0 and i > 0 and depths[i - 1] == 0]
    # an off step runs no forward, unless the window forces a catch-up (one forward); a depth-0 step right
    # after a speculative one verifies its drafts and runs the first pass
    assert sum(eng.forwards[i] for i in off) == lag.forced >= 2
    assert [eng.forwards[i] for i in off].count(0) == len(off) - lag.forced
    assert all(eng.forwards[i] == 1 for i in range(len(depths)) if i not in off)
    assert eng.committed_kv() == ref.committed_kv()
    assert all(v is not None for kv in eng.committed_kv().values() for v in kv)
    assert eng.proposals == ref.proposals
    assert eng.drafter_hidden == ref.drafter_hidden
    assert lag.own_passes == 0 and lag.skipped_steps > 0
    assert eng.dropped > 0  # "b" finished while off: its skipped positions were never caught up
    assert lag.caught_up_positions + eng.dropped == lag.skipped_positions
    assert lag.window is not None and lag.window.width == speculator.hidden_size * (LAYERS if aux else 1)
    assert speculator.model_state.built > 0  # the catch-up's longer batch got the drafter's own metadata


def test_without_the_catch_up_the_drafters_state_differs(
    speculator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = _always_on(speculator, SCRIPT, True)
    _hooked(speculator)
    monkeypatch.setattr(off_eagle.EagleLag, "take", lambda self, slots: np.zeros(len(slots), dtype=np.int64))
    eng = run(speculator, SCRIPT, True)
    assert eng.committed_kv() != ref.committed_kv()
    assert eng.proposals != ref.proposals


def test_hidden_states_from_the_wrong_positions_are_caught(
    speculator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window's columns are keyed by position: reading them one position off changes the result."""
    ref = _always_on(speculator, SCRIPT, False)
    _hooked(speculator)
    real = off_eagle.HiddenWindow.take
    monkeypatch.setattr(
        off_eagle.HiddenWindow,
        "take",
        lambda self, flat, blank=None: real(self, (flat + self.rows) % (self.rows * self.window)),
    )
    eng = run(speculator, SCRIPT, False)
    assert eng.committed_kv() != ref.committed_kv()


def test_a_catch_up_beyond_the_token_budget_runs_in_passes_of_its_own(
    speculator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = [op for op in SCRIPT if op != ("add", ("e", 1, 40, 5))]
    ref = _always_on(speculator, script, True)
    lag = _hooked(speculator)
    monkeypatch.setattr(speculator, "max_num_tokens", 24)
    eng = run(speculator, script, True)
    assert lag.own_passes > 1
    assert eng.committed_kv() == ref.committed_kv()
    assert eng.proposals == ref.proposals
    assert eng.drafter_hidden == ref.drafter_hidden


class PrefillGraphs:
    """The drafter's prefill graph manager as 0.26 dispatches it: a FULL graph for a uniform batch of the
    captured query length (1 + K), else eager; a replay is recorded (its metadata is the target's)."""

    def __init__(self) -> None:
        self.replayed: list[int] = []

    def dispatch(self, num_reqs: int, num_tokens: int, uniform: int | None, num_active_loras: int = 0) -> Any:
        from vllm.config.compilation import CUDAGraphMode
        from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

        mode = CUDAGraphMode.FULL if uniform == K_MAX + 1 else CUDAGraphMode.NONE
        return BatchExecutionDescriptor(cg_mode=mode, num_tokens=num_tokens, num_reqs=num_reqs)

    def run_fullgraph(self, desc: Any) -> None:
        self.replayed.append(desc.num_tokens)


# two requests: a speculative step, then K off steps, then one that drafts: each row feeds K missed positions
# and its one query token, a uniform batch of 1 + K tokens per row
UNIFORM: Script = [
    ("add", ("a", 0, 7, 1)), ("add", ("b", 1, 5, 2)), ("step", 1), ("step", 1), ("step", 0),
    *[("step", 0)] * K_MAX, ("step", 1), ("step", 1),
]  # fmt: skip


def test_a_uniform_catch_up_batch_never_replays_the_full_prefill_graph(
    speculator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.v1.worker.gpu.input_batch import InputBatch

    if "decode_graph_eligible" in InputBatch.__dataclass_fields__:
        pytest.skip("the catch-up batch is marked ineligible for decode graphs (extended)")
    ref = _always_on(speculator, UNIFORM, True)
    lag = _hooked(speculator)
    speculator.prefill_cudagraph_manager = graphs = PrefillGraphs()
    eng = run(speculator, UNIFORM, True, is_profile=False)
    assert lag.caught_up_positions == 2 * K_MAX and graphs.replayed == []
    assert eng.committed_kv() == ref.committed_kv() and eng.proposals == ref.proposals
    monkeypatch.setattr(off_eagle, "_off_graph", lambda batch, kw: kw)  # without the guard: replayed
    _hooked(speculator)
    run(speculator, UNIFORM, True, is_profile=False)
    assert graphs.replayed == [2 * (K_MAX + 1)]


@settings(max_examples=60, deadline=None)
@given(missed=st.lists(st.integers(0, 40), min_size=1, max_size=8), spare=st.integers(0, 30))
def test_eagle_passes_feed_each_chunk_and_the_position_after_it(missed: list[int], spare: int) -> None:
    """Within the budget, every missed position is fed in order, each pass's chunk followed by the position
    after it (the next chunk's first, or the row's first query token), which the next pass feeds again."""
    m = np.array(missed, dtype=np.int64)
    budget = 2 * len(missed) + spare
    fed: list[list[int]] = [[] for _ in missed]
    for ext in off_eagle.eagle_passes(m, budget):
        assert int((ext.count + ext.own).sum()) <= budget
        assert np.all(ext.count + ext.own >= 1) and np.all(ext.own <= 1) and np.all(ext.count <= ext.back)
        for i in range(len(missed)):
            got = list(range(-int(ext.back[i]), -int(ext.back[i]) + int(ext.count[i]))) + [0] * int(
                ext.own[i]
            )
            if fed[i] and got:
                assert got[0] == fed[i][-1]  # the last position of a pass is fed again first
                got = got[1:]
            fed[i] += got
    assert [f[: len(f) - (f[-1:] == [0])] for f in fed] == [list(range(-k, 0)) for k in missed]


def test_the_runner_gives_an_eagle_drafter_its_window_from_the_settings(
    make_config: Any, speculator: Any
) -> None:
    import torch
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    wrapped = runner_hooks.runner_execute_model(runner_hooks.pieces(RELEASE.version))(lambda *a, **k: None)
    runner = object.__new__(GPUModelRunner)
    runner.vllm_config = make_config(
        additional_config={
            "specpolicy": {"policy": {"name": "scripted"}, "metrics": False, "draft_catch_up_window": 8}
        }
    )
    runner.speculator = speculator
    history = torch.zeros(speculator.max_num_reqs, ROW, dtype=torch.int32)
    runner.req_states = type("S", (), {"all_token_ids": type("T", (), {"gpu": history})()})()
    so = SchedulerOutput.make_empty()
    so.num_spec_tokens_to_schedule = 0
    speculator.__dict__.pop(catch_up.STATE, None)
    wrapped(runner, so)
    lag = speculator.__dict__[catch_up.STATE]
    assert isinstance(lag, off_eagle.EagleLag) and lag.size == 8 and lag.tokens is history
    # 0.26: the same wrapper notes the step's depth, which the off-step propose reads
    assert speculator.__dict__.get(drafter_depth.DEPTH, "none") == (0 if DEPTH_NOTE else "none")
    speculator.__dict__.pop(catch_up.STATE)
    speculator.supports_mm_inputs = True  # the catch-up has no multimodal inputs for missed positions
    wrapped(runner, so)
    assert speculator.__dict__[catch_up.STATE] is None


def test_a_sliding_window_kv_group_keeps_vllms_first_pass(make_config: Any, speculator: Any) -> None:
    """A sliding-window group's blocks below the window may be freed before a catch-up reads them: such a
    drafter gets no bookkeeping (0.26's block tables carry no flag for it: its KV cache groups are read)."""
    import torch
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        SlidingWindowSpec,
    )

    runner = type("R", (), {"vllm_config": make_config()})()
    history = torch.zeros(speculator.max_num_reqs, ROW, dtype=torch.int32)
    shape = {"block_size": 16, "num_kv_heads": 1, "head_size": 8, "dtype": torch.float32}
    full = KVCacheGroupSpec(["full"], FullAttentionSpec(**shape))  # type: ignore[arg-type]
    swa = KVCacheGroupSpec(["swa"], SlidingWindowSpec(sliding_window=64, **shape))  # type: ignore[arg-type]
    for groups, covered in (([full], True), ([full, swa], False)):
        speculator.kv_cache_config = KVCacheConfig(num_blocks=8, kv_cache_tensors=[], kv_cache_groups=groups)
        assert isinstance(off_eagle.new_lag(runner, speculator, history), off_eagle.EagleLag) == covered


def test_the_plugin_wraps_the_eagle_drafter_and_the_contract_lists_its_names(
    restore_engine_args: None,
) -> None:
    import vllm.plugins

    from specpolicy.adapters._support import resolve
    from specpolicy.adapters.vllm.contract import check_targets, targets_for

    _patch.unwrap_all()
    vllm.plugins.plugins_loaded = False
    base = resolve(BASE)
    original = base.__dict__["propose"]
    try:
        vllm.plugins.load_general_plugins()
        wrapped = base.__dict__["propose"]
        assert wrapped.__specpolicy_wrapped__ is original  # one wrapper around vLLM's own
        assert (BASE.rsplit(".", 1)[1] == "AutoRegressiveSpeculator") == DEPTH_NOTE
    finally:
        _patch.unwrap_all()
    names = off_eagle.targets(DEPTH_NOTE)
    assert set(names) <= set(targets_for(RELEASE.version))
    checked = check_targets()
    assert all(checked[t] is None for t in names)
