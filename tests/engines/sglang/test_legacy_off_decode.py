"""The decode off step and the lazy draft catch-up on SGLang's legacy workers (0.5.10.post1, 0.5.12.post1).

What runs for real: ``EAGLEWorker.forward_batch_generation`` / ``verify`` / ``EagleVerifyInput.verify`` (v1),
``Scheduler.run_batch`` with the FutureMap and ``process_batch_result_decode`` (v2), ``ModelWorkerBatch``
copies, ``ForwardBatch.init_new`` for the catch-up extend, specpolicy's wrappers. Faked (GPU-only): the
kernels, the target and draft model forwards (``off_decode_support``), which follow SGLang's contracts: the
target predicts ``token_after(position, request)``, the drafter writes the KV of each position from the
token of the next one.
"""

from __future__ import annotations

from types import MethodType
from typing import Any

import legacy_support as ls
import off_decode_support as ods
import pytest
import torch
from conftest import SGLANG_VERSION

from specpolicy.adapters.sglang.legacy.targets import SUPPORTED_VERSIONS

if SGLANG_VERSION not in SUPPORTED_VERSIONS:
    pytest.skip(f"legacy paths need sglang {' or '.join(SUPPORTED_VERSIONS)}", allow_module_level=True)

from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from specpolicy.adapters.sglang.legacy import hooks  # noqa: E402
from specpolicy.adapters.sglang.legacy import off_step as off_mod  # noqa: E402
from specpolicy.adapters.sglang.legacy.draft_lag import DraftLag  # noqa: E402
from specpolicy.adapters.sglang.legacy.off_path import OffPath  # noqa: E402
from specpolicy.adapters.sglang.legacy.one_token import FieldNames, sizes_only_target  # noqa: E402
from specpolicy.policies.static import StaticConfig, StaticPolicy  # noqa: E402

PROMPTS = [5, 9, 2]
FIRST = [11, 12, 13]
STEPS = 3


@pytest.fixture
def names() -> FieldNames:
    return FieldNames.detect()


@pytest.fixture
def wrapped(names: FieldNames, monkeypatch: pytest.MonkeyPatch) -> Any:
    ls.patch_kernels(monkeypatch)
    ods.patch_forward_batch(monkeypatch)
    ls.wrap_v1_hooks(names)
    yield
    hooks.unwrap_all()


def _runtime(depth: int) -> Any:
    return ls.legacy_runtime(StaticPolicy(StaticConfig(num_steps=depth)), launch_depth=STEPS, path="v1")


class V1:
    """A real EAGLEWorker (``object.__new__``) and decode batch, with the decode off step attached."""

    def __init__(self, names: FieldNames, *, lazy: bool) -> None:
        self.names = names
        self.setup = ls.make_v1_worker(names, steps=STEPS)
        w = self.setup.worker
        w.target_worker = self.target = ods.DecodingFakeTarget()
        self.batch = b = ls.make_v1_batch(names, PROMPTS, FIRST, self.setup.alloc)
        b.seq_lens_sum = sum(PROMPTS)
        b.out_cache_loc = None

        def get_model_worker_batch(seq_lens_cpu_cache: Any = None) -> Any:
            return ods.model_worker_batch(
                forward_mode=b.forward_mode,
                input_ids=b.input_ids,
                req_pool_indices=b.req_pool_indices,
                seq_lens=b.seq_lens,
                seq_lens_cpu=b.seq_lens_cpu if seq_lens_cpu_cache is None else seq_lens_cpu_cache,
                seq_lens_sum=b.seq_lens_sum,
                out_cache_loc=b.out_cache_loc,
                spec_info=b.spec_info,
                spec_algorithm=b.spec_algorithm,
                capture_hidden_mode=b.spec_info.capture_hidden_mode,
                sampling_info=b.sampling_info,
                reqs=b.reqs,
                return_logprob=False,
            )

        b.get_model_worker_batch = get_model_worker_batch
        self.kv = ods.DraftKV()
        w.req_to_token_pool = b.req_to_token_pool
        w._model_runner = self.draft_runner = ods.KVDraftRunner(self.kv, b.req_to_token_pool)
        w.device = "cpu"
        w.speculative_algorithm = SpeculativeAlgorithm.STANDALONE if lazy else SpeculativeAlgorithm.EAGLE
        capture = CaptureHiddenMode.NULL if lazy else CaptureHiddenMode.FULL
        self.off = OffPath(
            names=names,
            sizes=sizes_only_target(self.target.model_runner, self.setup.server_args),
            decode=ods.decode_target(capture),
            lag=DraftLag() if lazy else None,
            topk=1,
        )
        setattr(w, hooks.OT, self.off)
        if self.off.lag is not None:
            self.off.lag.on_extend(b.reqs)  # the prefill left every request's draft state exact
        self.extend_calls: list[dict[str, Any]] = []
        # SGLang's per-step draft extend (a draft forward on the GPU): records its input and the batch it
        # sees, and returns the next draft input as 0.5.12.post1 does (0.5.10.post1 updates in place).
        w.forward_draft_extend_after_decode = MethodType(self._draft_extend, w)

    def _draft_extend(self, worker: Any, batch: Any) -> Any:
        from sglang.srt.speculative.eagle_info import EagleDraftInput

        spec = batch.spec_info
        self.extend_calls.append({"spec": spec, "out_cache_loc": batch.out_cache_loc.tolist()})
        if isinstance(spec, EagleDraftInput):
            return None
        n = int(spec.input_ids.shape[0])
        return EagleDraftInput(
            **{self.names.root: spec.input_ids.clone()},
            topk_p=torch.ones(n, 1),
            topk_index=torch.zeros(n, 1, dtype=torch.int64),
            hidden_states=spec.hidden_states,
        )

    def step(self, depth: int) -> Any:
        w = self.setup.worker
        setattr(w, hooks.RT, _runtime(depth))
        return w.forward_batch_generation(self.batch)

    def tokens(self, i: int) -> list[int]:
        r = self.batch.reqs[i]
        return list(r.origin_input_ids) + list(r.output_ids)


def _oracle(i: int, n: int, k: int) -> list[int]:
    """The output after ``k`` steps from prompt length ``n``: the first token, then the target's chain."""
    return [FIRST[i]] + [ls.token_after(n + j, i) for j in range(k)]


def test_v1_off_step_runs_the_target_as_a_decode(
    names: FieldNames, wrapped: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EAGLE: the decode forward captures the hidden states, the engine samples, and SGLang's draft extend
    runs over the new token with the input its verify builds when no draft is accepted; no verify code."""
    from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput

    def refuse(*a: Any, **kw: Any) -> Any:
        raise AssertionError("verify-shaped code ran on an off step")

    monkeypatch.setattr(EagleVerifyInput, "verify", refuse)
    v = V1(names, lazy=False)
    result = v.step(0)

    (call,) = v.target.decode_calls
    assert call["forward_mode"] == ForwardMode.DECODE and call["spec_info"] is None
    assert call["seq_lens"] == [n + 1 for n in PROMPTS]  # the new token is part of the decode's context
    assert call["input_ids"] == FIRST and not call["is_verify"]  # the engine's sampler
    assert (call["attn_backend"].name, call["graph_runner"].name) == ("decode-attn", "decode-graph")
    assert call["capture_hidden_mode"] == CaptureHiddenMode.FULL  # EAGLE's drafter reads hidden states
    assert v.target.calls == []  # no verify-shaped target forward ran
    mr = v.target.model_runner
    assert (mr.attn_backend, mr.graph_runner) == ("launch-attn", "launch-graph")
    assert not hasattr(v.target, "__dict__") or "forward_batch_generation" not in vars(v.target)
    assert [v.tokens(i)[PROMPTS[i] :] for i in range(3)] == [_oracle(i, n, 1) for i, n in enumerate(PROMPTS)]
    new = [ls.token_after(n, i) for i, n in enumerate(PROMPTS)]
    assert result.next_token_ids.tolist() == new
    assert getattr(result, names.accepted_per_req) == [0, 0, 0]
    rtt = v.batch.req_to_token_pool.req_to_token
    slots = [int(rtt[i, n]) for i, n in enumerate(PROMPTS)]
    assert call["out_cache_loc"] == slots
    assert v.batch.seq_lens.tolist() == [n + 1 for n in PROMPTS]
    # One draft extend over the new token, at the slot just written, from the hidden state of its input.
    (ext,) = v.extend_calls
    spec = ext["spec"]
    assert ext["out_cache_loc"] == slots
    if isinstance(spec, EagleDraftInput):  # 0.5.10.post1
        ids, lens, seq = spec.verified_id, spec.accept_length_cpu, spec.seq_lens_for_draft_extend
        assert lens == [0, 0, 0]
    else:
        ids, seq = spec.input_ids, spec.seq_lens
        assert spec.num_accept_tokens_cpu == [1, 1, 1] and spec.num_accept_tokens.tolist() == [1, 1, 1]
    assert ids.tolist() == new and seq.tolist() == [n + 1 for n in PROMPTS]
    assert spec.hidden_states[:, 0].tolist() == [float(n) for n in PROMPTS]  # the fake's hidden = position
    assert isinstance(v.batch.spec_info, EagleDraftInput)
    assert getattr(v.batch.spec_info, names.root).tolist() == new


def test_v1_eagle_off_step_extends_only_running_requests(names: FieldNames, wrapped: Any) -> None:
    """A request that finishes on the off step is left out of the draft extend, as SGLang's verify does."""
    v = V1(names, lazy=False)
    middle = v.batch.reqs[1]
    middle.sampling_params.max_new_tokens = len(middle.output_ids) + 1
    v.step(0)
    (ext,) = v.extend_calls
    spec = ext["spec"]
    ids = getattr(spec, "input_ids", None)
    ids = spec.verified_id if ids is None else ids
    assert ids.tolist() == [ls.token_after(PROMPTS[i], i) for i in (0, 2)]
    rtt = v.batch.req_to_token_pool.req_to_token
    assert ext["out_cache_loc"] == [int(rtt[i, PROMPTS[i]]) for i in (0, 2)]
    assert spec.hidden_states[:, 0].tolist() == [float(PROMPTS[0]), float(PROMPTS[2])]


def test_v1_result_goes_through_the_scheduler(names: FieldNames, wrapped: Any) -> None:
    v = V1(names, lazy=True)
    result = v.step(0)
    sched = ls.make_scheduler(enable_overlap=False, draft_worker=v.setup.worker)
    before = [len(r.output_ids) for r in v.batch.reqs]
    sched.process_batch_result_decode(v.batch, result)
    assert sched.num_generated_tokens == 3 and sched.spec_metrics == [(3, 0)]
    assert [len(r.output_ids) for r in v.batch.reqs] == before  # verify appended; the scheduler did not


def test_v1_lazy_off_step_is_a_plain_decode_step(
    names: FieldNames, wrapped: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the drafter skipped, none of SGLang's draft or verify code runs: one KV slot per request, the
    engine's sampler, and the bookkeeping verify would have done for the one accepted token."""
    from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput

    def refuse(*a: Any, **kw: Any) -> Any:
        raise AssertionError("verify-shaped code ran on an off step")

    monkeypatch.setattr(EagleVerifyInput, "verify", refuse)
    monkeypatch.setattr(EagleVerifyInput, "prepare_for_verify", refuse)
    v = V1(names, lazy=True)
    start = v.setup.alloc.next
    before = [(r.kv_committed_len, r.spec_verify_ct, r.decode_batch_idx) for r in v.batch.reqs]
    result = v.step(0)

    (call,) = v.target.decode_calls
    assert call["forward_mode"] == ForwardMode.DECODE and not call["is_verify"]  # the engine samples
    assert call["capture_hidden_mode"] == CaptureHiddenMode.NULL  # a draft model reads no hidden states
    assert v.setup.alloc.next - start == 3  # one slot per request, none for drafts
    rtt = v.batch.req_to_token_pool.req_to_token
    slots = [int(rtt[i, n]) for i, n in enumerate(PROMPTS)]
    assert call["out_cache_loc"] == slots == list(range(start, start + 3))
    assert v.batch.seq_lens.tolist() == v.batch.seq_lens_cpu.tolist() == [n + 1 for n in PROMPTS]
    assert [v.tokens(i)[PROMPTS[i] :] for i in range(3)] == [_oracle(i, n, 1) for i, n in enumerate(PROMPTS)]
    after = [(r.kv_committed_len, r.spec_verify_ct, r.decode_batch_idx) for r in v.batch.reqs]
    assert after == [(k + 1, c + 1, d + 1) for k, c, d in before]
    assert getattr(result, names.accepted_per_req) == [0, 0, 0] and getattr(result, names.accepted_total) == 0
    spec = v.batch.spec_info
    assert isinstance(spec, EagleDraftInput) and spec.topk_index.shape == (3, 1)
    assert getattr(spec, names.root).tolist() == [ls.token_after(n, i) for i, n in enumerate(PROMPTS)]
    assert v.extend_calls == [] and v.draft_runner.extends == []


def test_v1_lazy_off_step_drops_finished_requests_from_the_draft_input(
    names: FieldNames, wrapped: Any
) -> None:
    """A request that finishes on an off step leaves the next draft input, which then holds the unfinished
    requests in batch order, as SGLang's verify leaves it (the scheduler filters it as already filtered)."""
    v = V1(names, lazy=True)
    middle = v.batch.reqs[1]
    middle.sampling_params.max_new_tokens = len(middle.output_ids) + 1  # its next token is its last
    v.step(0)
    assert middle.finished() and not v.batch.reqs[0].finished() and not v.batch.reqs[2].finished()
    spec = v.batch.spec_info
    expected = [ls.token_after(PROMPTS[i], i) for i in (0, 2)]
    assert getattr(spec, names.root).tolist() == expected and spec.topk_p.shape[0] == 2
    # The finished request's one token still counts: its KV slot is committed.
    assert middle.kv_committed_len == PROMPTS[1] + 1


def test_v1_consecutive_off_steps_feed_their_sampled_roots_and_refill_one_draft_input(
    names: FieldNames, wrapped: Any
) -> None:
    """A run of off steps converts no token ids and builds no draft input of its own: the roots are the
    tensor the sampler returned (int64 here, what the next decode forward reads), fed as they are, also
    after the scheduler replaced them (a filter); the draft input is the last one, refilled, with the same
    placeholder views."""
    v = V1(names, lazy=True)
    v.step(0)
    first = v.batch.spec_info
    sampled = getattr(first, names.root)
    assert sampled.dtype == torch.int64
    assert v.off.draft_input is first
    v.step(0)
    assert v.target.decode_calls[1]["input_ids_tensor"] is sampled
    assert v.batch.spec_info is first and getattr(first, names.root) is not sampled
    placeholders = (first.topk_p, first.topk_index)
    assert [v.tokens(i)[PROMPTS[i] :] for i in range(3)] == [_oracle(i, n, 2) for i, n in enumerate(PROMPTS)]
    # the scheduler filters the draft input as already filtered: its roots become a new tensor (a slice)
    setattr(first, names.root, getattr(first, names.root)[:3])
    filtered = getattr(first, names.root)
    v.step(0)
    assert v.target.decode_calls[2]["input_ids_tensor"] is filtered
    assert v.batch.spec_info is first and (first.topk_p, first.topk_index) == placeholders
    assert [v.tokens(i)[PROMPTS[i] :] for i in range(3)] == [_oracle(i, n, 3) for i, n in enumerate(PROMPTS)]


def test_v1_off_step_after_another_draft_input_builds_its_own(names: FieldNames, wrapped: Any) -> None:
    """The refill is only for the draft input the last off step installed: one that the scheduler or a
    speculative step put on the batch in between is left alone, and int32 roots are converted for the
    forward."""
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    v = V1(names, lazy=True)
    v.step(0)
    ours = v.batch.spec_info
    other = EagleDraftInput(**{names.root: getattr(ours, names.root).to(torch.int32)})
    v.batch.spec_info = other
    v.step(0)
    assert v.batch.spec_info is not other and v.batch.spec_info is not ours
    assert getattr(other, names.root).dtype == torch.int32  # untouched
    fed = v.target.decode_calls[1]["input_ids_tensor"]
    assert fed.dtype == torch.int64
    assert [v.tokens(i)[PROMPTS[i] :] for i in range(3)] == [_oracle(i, n, 2) for i, n in enumerate(PROMPTS)]


def test_v1_speculative_step_after_off_steps_drafts_from_int32_roots(names: FieldNames, wrapped: Any) -> None:
    """The roots a lazy off step hands over keep the sampler's dtype; SGLang's draft, the next speculative
    step, gets them as int32 (what its verify leaves), with the values the off steps sampled."""
    v = V1(names, lazy=True)
    v.step(0)
    v.step(0)
    assert getattr(v.batch.spec_info, names.root).dtype == torch.int64
    seen: list[Any] = []

    def on_step(worker: Any, batch: Any) -> str:
        seen.append(getattr(batch.spec_info, names.root))
        return "on"

    setattr(v.setup.worker, hooks.RT, _runtime(STEPS))
    hooks.v1_forward(on_step, names)(v.setup.worker, v.batch)
    (roots,) = seen
    assert roots.dtype == torch.int32
    assert roots.tolist() == [v.tokens(i)[-1] for i in range(3)]
    assert v.off.draft_input is None  # the next off step builds a fresh draft input


def test_v1_off_step_after_a_speculative_step_sets_the_exact_seq_lens_sum(
    names: FieldNames, wrapped: Any
) -> None:
    """SGLang's v1 verify lengthens ``seq_lens`` without updating ``seq_lens_sum`` (its draft recomputes it
    every step); the off step's decode forward sizes attention buffers from it (triton's eager decode
    allocates ``kv_indices`` of that length), so it is summed from the lengths, not incremented."""
    v = V1(names, lazy=True)
    v.step(0)
    assert v.batch.seq_lens_sum == int(v.batch.seq_lens.sum())
    # what a speculative step leaves: two tokens accepted per request, seq_lens_sum as its draft set it
    v.batch.seq_lens.add_(2)
    v.batch.seq_lens_cpu.add_(2)
    stale = v.batch.seq_lens_sum
    v.off.lag.on_extend(v.batch.reqs)  # (the drafter is exact: only the lengths matter here)
    calls: list[Any] = []
    orig = v.batch.get_model_worker_batch

    def spy(*a: Any, **kw: Any) -> Any:
        mwb = orig(*a, **kw)
        calls.append(mwb.seq_lens_sum)
        return mwb

    v.batch.get_model_worker_batch = spy
    v.step(0)
    assert calls == [int(v.batch.seq_lens.sum())] and calls[0] == stale + 6 + 3
    assert v.batch.seq_lens_sum == int(v.batch.seq_lens_cpu.sum())


@pytest.mark.parametrize("k", [1, 2, 7])
def test_v1_lazy_off_steps_skip_the_drafter_and_resume_exactly(
    names: FieldNames, wrapped: Any, k: int
) -> None:
    v = V1(names, lazy=True)
    for _ in range(k):
        v.step(0)
    assert v.extend_calls == [] and v.draft_runner.extends == []  # nothing of the drafter ran while off
    assert len(v.target.decode_calls) == k
    assert v.off.lag is not None and v.off.lag.skipped_positions == 3 * k

    seen: list[Any] = []

    def on_step(worker: Any, batch: Any) -> str:  # the speculative step itself: what the drafter starts from
        seen.append(batch.spec_info.topk_index.view(-1).tolist())
        return "on"

    setattr(v.setup.worker, hooks.RT, _runtime(STEPS))
    assert hooks.v1_forward(on_step, names)(v.setup.worker, v.batch) == "on"

    # One batched extend over each request's k missing positions, with the tokens an always-on engine used.
    (ext,) = v.draft_runner.extends
    assert ext["lens"] == [k] * 3
    rtt = v.batch.req_to_token_pool.req_to_token
    for i, n in enumerate(PROMPTS):
        assert {s: v.kv[s] for s in ods.expected_draft_kv(v.batch.reqs[i], rtt[i], n, n + k)} == (
            ods.expected_draft_kv(v.batch.reqs[i], rtt[i], n, n + k)
        )
    # The drafter proposes from the current last token, as if it had never been skipped.
    assert seen == [[ls.draft_token_after(v.tokens(i)[-1]) for i in range(3)]]
    assert v.off.lag.missing(v.batch.reqs[0]) == 0 and v.off.lag.catch_ups == 1
    # With no off step since, the next speculative step checks in O(1) and extends nothing.
    assert not v.off.lag.behind()
    hooks.v1_forward(on_step, names)(v.setup.worker, v.batch)
    assert len(v.draft_runner.extends) == 1 and v.off.lag.catch_ups == 1


def test_v1_without_the_catch_up_the_draft_state_is_stale(
    names: FieldNames, wrapped: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for the test above: skip the catch-up and the checked KV entries are missing."""
    from specpolicy.adapters.sglang.legacy import catch_up

    monkeypatch.setattr(catch_up, "catch_up_if_behind", lambda **kw: False)
    v = V1(names, lazy=True)
    for _ in range(3):
        v.step(0)
    setattr(v.setup.worker, hooks.RT, _runtime(STEPS))
    hooks.v1_forward(lambda w, b: None, names)(v.setup.worker, v.batch)
    rtt = v.batch.req_to_token_pool.req_to_token
    expected = ods.expected_draft_kv(v.batch.reqs[0], rtt[0], PROMPTS[0], PROMPTS[0] + 3)
    assert not any(v.kv.get(s) == e for s, e in expected.items())


def test_v1_catch_up_covers_requests_prefilled_while_off(names: FieldNames, wrapped: Any) -> None:
    """A request whose prefill ran after some off steps misses only the positions since its prefill."""
    v = V1(names, lazy=True)
    lag = v.off.lag
    assert lag is not None
    v.step(0)
    lag.on_extend(v.batch.reqs[2:])  # request 2 was (re-)prefilled here: its draft state is exact again
    v.step(0)
    v.step(0)
    setattr(v.setup.worker, hooks.RT, _runtime(STEPS))
    hooks.v1_forward(lambda w, b: None, names)(v.setup.worker, v.batch)
    (ext,) = v.draft_runner.extends
    assert ext["lens"] == [3, 3, 2]
    assert ext["positions"][-2:] == [PROMPTS[2] + 1, PROMPTS[2] + 2]


def test_switching_every_step_keeps_the_draft_exact(names: FieldNames, wrapped: Any) -> None:
    """off, on, off, on ...: each resume extends exactly the one missed position of each request."""
    v = V1(names, lazy=True)
    setattr(v.setup.worker, hooks.RT, _runtime(STEPS))
    on = hooks.v1_forward(lambda w, b: None, names)
    for round_ in range(4):
        v.step(0)
        setattr(v.setup.worker, hooks.RT, _runtime(STEPS))
        on(v.setup.worker, v.batch)
        assert [e["lens"] for e in v.draft_runner.extends] == [[1, 1, 1]] * (round_ + 1)
    rtt = v.batch.req_to_token_pool.req_to_token
    for i, n in enumerate(PROMPTS):
        exp = ods.expected_draft_kv(v.batch.reqs[i], rtt[i], n, n + 4)
        assert {s: v.kv.get(s) for s in exp} == exp


# ---------------------------------------------------------------------------------------------------- v2


@pytest.fixture
def wrapped_v2(names: FieldNames, monkeypatch: pytest.MonkeyPatch, sglang_version: str) -> Any:
    from specpolicy.adapters.sglang.legacy.install import _patch

    ls.patch_v2(monkeypatch)
    ods.patch_forward_batch(monkeypatch)
    _patch("0.5.12.post1" if sglang_version == "0.5.12.post1" else "0.5.10.post1", names)
    yield
    hooks.unwrap_all()


def _v2(names: FieldNames, *, lazy: bool) -> Any:
    import test_legacy_v2 as t2

    s, sched, batch, rt = t2._setup(names, depth=0)
    target = ods.DecodingFakeTarget()
    target.model_runner = s.target.model_runner
    s.worker._target_worker = s.target = target
    off = OffPath(
        names=names,
        sizes=sizes_only_target(target.model_runner, s.server_args),
        decode=ods.decode_target(CaptureHiddenMode.NULL if lazy else CaptureHiddenMode.FULL),
        lag=DraftLag() if lazy else None,
    )
    setattr(s.worker, hooks.OT, off)
    if off.lag is not None:
        off.lag.on_extend(batch.reqs)  # the prefill left every request's draft state exact
    simple = batch.get_model_worker_batch

    def get_model_worker_batch() -> Any:
        m = simple()
        return ods.model_worker_batch(**{k: getattr(m, k) for k in vars(m) if k != "return_hidden_states"})

    batch.get_model_worker_batch = get_model_worker_batch
    kv = ods.DraftKV()
    if lazy:
        s.draft_worker.draft_runner = s.draft_runner = ods.KVDraftRunner(kv, s.pool)
    return s, sched, batch, rt, off, kv


def test_v2_off_step_is_a_decode_with_the_engine_sampler(names: FieldNames, wrapped_v2: Any) -> None:
    s, sched, batch, rt, off, kv = _v2(names, lazy=True)
    result = Scheduler.run_batch(sched, batch)

    (call,) = s.target.decode_calls
    assert call["forward_mode"] == ForwardMode.DECODE and not call["is_verify"]  # sampled, not verified
    assert call["seq_lens"] == [n + 1 for n in PROMPTS] and call["input_ids"] == FIRST
    assert call["out_cache_loc"] == [100 * i + n for i, n in enumerate(PROMPTS)]  # the reserved slot at L
    assert s.target.calls == [] and s.draft_runner.extends == []  # no verify, no drafter
    expected = [ls.token_after(n, i) for i, n in enumerate(PROMPTS)]
    assert result.accept_lens.tolist() == [1, 1, 1]
    stride = 1 if names.has_result_stride else STEPS + 1
    assert result.next_token_ids.tolist() == [t for t in expected for _ in range(stride)]
    assert batch.seq_lens.tolist() == [n + 1 for n in PROMPTS]
    sched.process_batch_result_decode(batch, result)
    assert [r.output_ids[-1] for r in batch.reqs] == expected
    assert [r.kv_committed_len for r in batch.reqs] == [n + 1 for n in PROMPTS]


def test_v2_lazy_off_step_shares_its_lengths_and_keeps_its_accept_lengths(
    names: FieldNames, wrapped_v2: Any
) -> None:
    """One ``seq_lens + 1`` per step: the decode forward's lengths are the draft input's next lengths; the
    accept lengths (ones, which the scheduler only copies to the host) are one kept tensor while the batch
    keeps its size."""
    s, sched, batch, rt, off, kv = _v2(names, lazy=True)
    fed: list[Any] = []
    forward = s.target.forward_batch_generation

    def spy(model_worker_batch: Any = None, **kwargs: Any) -> Any:
        fed.append(model_worker_batch.seq_lens)
        return forward(model_worker_batch, **kwargs)

    s.target.forward_batch_generation = spy
    results = []
    for _ in range(2):
        r = Scheduler.run_batch(sched, batch)
        results.append((r.next_draft_input.new_seq_lens, r.accept_lens))
        sched.process_batch_result_decode(batch, r)
    assert all(new is seq for (new, _), seq in zip(results, fed, strict=True))
    assert [t.tolist() for t in fed] == [[n + 1 for n in PROMPTS], [n + 2 for n in PROMPTS]]
    assert results[0][1] is results[1][1] and results[0][1].tolist() == [1, 1, 1]
    assert [r.output_ids[-2:] for r in batch.reqs] == [_oracle(i, n, 2)[-2:] for i, n in enumerate(PROMPTS)]


def test_v2_lazy_resume_extends_the_missing_positions(names: FieldNames, wrapped_v2: Any) -> None:
    s, sched, batch, rt, off, kv = _v2(names, lazy=True)
    for _ in range(3):
        r = Scheduler.run_batch(sched, batch)
        sched.process_batch_result_decode(batch, r)
    assert s.draft_runner.extends == []
    # The next (speculative) step: the worker sees the resolved draft input and the CPU sequence lengths.
    mwb = batch.get_model_worker_batch()
    sched.future_map.resolve_future(mwb)
    mwb.seq_lens_cpu = mwb.seq_lens.clone()
    seen: list[Any] = []

    def on_step(worker: Any, m: Any) -> Any:
        seen.append(m.spec_info.topk_index.view(-1).tolist())
        return off_mod  # any object: the wrapper tags it with the executed depth

    on_policy = StaticPolicy(StaticConfig(num_steps=STEPS))
    setattr(s.worker, hooks.RT, ls.legacy_runtime(on_policy, launch_depth=STEPS, path="v2"))
    hooks.v2_forward(on_step)(s.worker, mwb)
    (ext,) = s.draft_runner.extends
    assert ext["lens"] == [3, 3, 3]
    for i, n in enumerate(PROMPTS):
        exp = ods.expected_draft_kv(batch.reqs[i], s.pool.req_to_token[i], n, n + 3)
        assert {sl: kv.get(sl) for sl in exp} == exp
    last = [r.output_ids[-1] for r in batch.reqs]
    assert seen == [[ls.draft_token_after(t) for t in last]]
    proposals = torch.tensor([ls.draft_token_after(t) for t in last])
    assert torch.equal(mwb.spec_info.topk_index.view(-1), proposals)


def test_v2_eagle_off_step_runs_sglangs_draft_extend_on_the_new_token(
    names: FieldNames, wrapped_v2: Any
) -> None:
    """per_step (EAGLE): the decode captures hidden states and SGLang's own draft extend runs at the launch
    stride on the new token, so the next draft input comes from it, as after an all-rejected verify."""
    s, sched, batch, rt, off, kv = _v2(names, lazy=False)
    result = Scheduler.run_batch(sched, batch)
    (call,) = s.target.decode_calls
    assert call["capture_hidden_mode"] == CaptureHiddenMode.FULL and s.target.calls == []
    d = STEPS + 1
    expected = [ls.token_after(n, i) for i, n in enumerate(PROMPTS)]
    assert result.next_token_ids.tolist() == [t for t in expected for _ in range(d)]
    if names.has_result_stride:
        assert result.speculative_num_draft_tokens == d
    (ids,) = s.draft_runner.calls
    assert ids.tolist() == [t for t in expected for _ in range(d)]
    (locs,) = s.draft_runner.cache_locs
    assert locs.tolist() == [100 * i + n + j for i, n in enumerate(PROMPTS) for j in range(d)]
    nd = result.next_draft_input
    assert nd.topk_index.view(-1).tolist() == [ls.draft_token_after(t) for t in expected]
    sched.process_batch_result_decode(batch, result)
    assert [r.output_ids[-1] for r in batch.reqs] == expected


@pytest.mark.parametrize("lazy", [True, False])
def test_v1_off_step_where_every_request_finishes(names: FieldNames, wrapped: Any, lazy: bool) -> None:
    """The batch's last step: no draft extend runs and the next draft input is empty, as SGLang leaves it."""
    v = V1(names, lazy=lazy)
    for r in v.batch.reqs:
        r.sampling_params.max_new_tokens = len(r.output_ids) + 1
    v.step(0)
    assert all(r.finished() for r in v.batch.reqs)
    assert v.extend_calls == []
    assert int(v.batch.spec_info.topk_p.shape[0]) == 0
