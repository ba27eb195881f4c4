"""The lazy EAGLE catch-up on SGLang's legacy workers (0.5.10.post1, 0.5.12.post1, v1 and v2).

While off, each decode forward's hidden state of the position it wrote is kept in a ``HiddenWindow``; on
resume one batched draft extend feeds the drafter, at each missed position ``p``, the token of ``p+1`` and
the target's hidden state at ``p``, what SGLang's verify-then-draft-extend feeds an always-on drafter. The
fakes (``off_decode_support``) follow SGLang's contracts: the target's hidden state at ``p`` is
``(p, pool row)``; the EAGLE drafter records the hidden state it was fed in its KV and proposes from its
last token and hidden state, so a missing or wrong hidden state changes both.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import legacy_support as ls
import off_decode_support as ods
import pytest
import torch
from conftest import SGLANG_VERSION
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy.adapters.sglang.legacy.targets import SUPPORTED_VERSIONS

if SGLANG_VERSION not in SUPPORTED_VERSIONS:
    pytest.skip(f"legacy paths need sglang {' or '.join(SUPPORTED_VERSIONS)}", allow_module_level=True)

import test_legacy_off_decode as tod  # noqa: E402
from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402
from test_legacy_off_decode import PROMPTS, STEPS  # noqa: E402

from specpolicy.adapters import _patch as patching  # noqa: E402
from specpolicy.adapters.hidden_window import HiddenWindow  # noqa: E402
from specpolicy.adapters.sglang.legacy import hooks  # noqa: E402
from specpolicy.adapters.sglang.legacy.draft_lag import DraftLag  # noqa: E402
from specpolicy.adapters.sglang.legacy.off_path import OffPath  # noqa: E402
from specpolicy.adapters.sglang.legacy.one_token import FieldNames, sizes_only_target  # noqa: E402
from specpolicy.policies.static import StaticConfig, StaticPolicy  # noqa: E402

W = 4


@pytest.fixture(name="names")
def _names() -> FieldNames:
    return FieldNames.detect()


@pytest.fixture(name="wrapped")
def _wrapped(names: FieldNames, monkeypatch: pytest.MonkeyPatch) -> Any:
    ls.patch_kernels(monkeypatch)
    ods.patch_forward_batch(monkeypatch)
    ls.wrap_v1_hooks(names)
    yield
    patching.unwrap_all()


@pytest.fixture(name="wrapped_v2")
def _wrapped_v2(names: FieldNames, monkeypatch: pytest.MonkeyPatch, sglang_version: str) -> Any:
    from specpolicy.adapters.sglang.legacy.install import _patch

    ls.patch_v2(monkeypatch)
    ods.patch_forward_batch(monkeypatch)
    _patch("0.5.12.post1" if sglang_version == "0.5.12.post1" else "0.5.10.post1", names)
    yield
    patching.unwrap_all()


def _window(rows: int) -> HiddenWindow:
    return HiddenWindow(rows=rows, window=W, width=ls.HIDDEN, dtype=torch.float32, device="cpu")


def _prefill_rows(tokens: list[int], seq_lens: list[int]) -> tuple[Any, Any, Any]:
    """The draft input SGLang's EAGLE prefill leaves: proposal and drafter hidden state from the last
    prompt position ``n - 1``, fed the first output token."""
    idx = torch.tensor([[ods.eagle_proposal(t, n - 1)] for t, n in zip(tokens, seq_lens, strict=True)])
    pairs = enumerate(zip(tokens, seq_lens, strict=True))
    hid = torch.tensor([ods.eagle_draft_hidden(t, n - 1, i) for i, (t, n) in pairs])
    return torch.ones(len(tokens), 1), idx, hid


class V1Eagle(tod.V1):
    """The v1 worker of ``test_legacy_off_decode`` with an EAGLE drafter and the lazy catch-up."""

    def __init__(self, names: FieldNames) -> None:
        super().__init__(names, lazy=True)
        w = self.setup.worker
        b = self.batch
        w.speculative_algorithm = SpeculativeAlgorithm.EAGLE
        w._model_runner = self.draft_runner = ods.EagleKVDraftRunner(self.kv, b.req_to_token_pool)
        self.window = _window(int(b.req_to_token_pool.req_to_token.shape[0]))
        self.off = OffPath(
            names=names,
            sizes=sizes_only_target(self.target.model_runner, self.setup.server_args),
            decode=ods.decode_target(CaptureHiddenMode.FULL),
            lag=DraftLag(self.window),
            topk=1,
            draft_hidden=(ls.HIDDEN, torch.float32),
        )
        setattr(w, hooks.OT, self.off)
        self.off.lag.on_extend(b.reqs)
        spec = b.spec_info
        spec.topk_p, spec.topk_index, spec.hidden_states = _prefill_rows(tod.FIRST, PROMPTS)
        spec.capture_hidden_mode = CaptureHiddenMode.LAST
        self.seen: list[tuple[list[int], list[list[float]]]] = []

    def resume(self) -> None:
        """A speculative step: what the drafter starts from is recorded (the step itself is not run)."""

        def on_step(worker: Any, batch: Any) -> None:
            spec = batch.spec_info
            self.seen.append((spec.topk_index.view(-1).tolist(), spec.hidden_states.tolist()))

        setattr(self.setup.worker, hooks.RT, tod._runtime(STEPS))
        hooks.v1_forward(on_step, self.names)(self.setup.worker, self.batch)

    def exact(self, start: list[int]) -> bool:
        """Whether the draft KV from ``start[i]`` to the current length equals an always-on engine's."""
        rtt = self.batch.req_to_token_pool.req_to_token
        for i, n in enumerate(start):
            stop = int(self.batch.seq_lens_cpu[i])
            exp = ods.expected_eagle_kv(self.batch.reqs[i], rtt[i], i, n, stop)
            if {s: self.kv.get(s) for s in exp} != exp:
                return False
        return True

    def expected_start(self) -> tuple[list[int], list[list[float]]]:
        """The proposal and drafter hidden state an always-on engine starts the next draft from."""
        out = []
        hid = []
        for i in range(len(PROMPTS)):
            last, pos = self.tokens(i)[-1], int(self.batch.seq_lens_cpu[i]) - 1
            out.append(ods.eagle_proposal(last, pos))
            hid.append(ods.eagle_draft_hidden(last, pos, i))
        return out, hid


@pytest.mark.parametrize("k", [1, W - 1, W, 3 * W])
def test_v1_eagle_lazy_resume_is_exact(names: FieldNames, wrapped: Any, k: int) -> None:
    """on, off x k, on: the drafter's KV, the hidden states it was fed and its next proposal equal an
    always-on run's; no extend is longer than the window."""
    v = V1Eagle(names)
    for _ in range(k):
        v.step(0)
    assert v.extend_calls == []  # SGLang's per-step draft extend never ran
    assert len(v.target.decode_calls) == k
    assert all(c["capture_hidden_mode"] == CaptureHiddenMode.FULL for c in v.target.decode_calls)
    in_off = len(v.draft_runner.extends)
    assert in_off == (k - 1) // W  # caught up inside the off step that would overflow the window
    v.resume()
    assert v.exact(PROMPTS)
    assert v.seen == [v.expected_start()]
    lens = [e["lens"] for e in v.draft_runner.extends]
    assert all(max(x) <= W for x in lens) and [sum(x[0] for x in lens)] == [k]
    assert v.off.lag is not None and v.off.lag.catch_ups == in_off + 1
    v.resume()  # nothing missed since: O(1) check, no extend
    assert len(v.draft_runner.extends) == in_off + 1


def test_v1_eagle_lazy_control_without_the_buffer(
    names: FieldNames, wrapped: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for the test above: with the hidden states not kept, the same checks fail."""
    monkeypatch.setattr(HiddenWindow, "write", lambda self, step, rows, hidden: None)
    v = V1Eagle(names)
    for _ in range(W):
        v.step(0)
    v.resume()
    assert not v.exact(PROMPTS)
    assert v.seen != [v.expected_start()]


def test_v1_eagle_lazy_switching_every_step(names: FieldNames, wrapped: Any) -> None:
    v = V1Eagle(names)
    for round_ in range(5):
        v.step(0)
        v.resume()
        assert [e["lens"] for e in v.draft_runner.extends] == [[1, 1, 1]] * (round_ + 1)
        assert v.seen[-1] == v.expected_start()
    assert v.exact(PROMPTS)


def test_v1_eagle_lazy_request_prefilled_while_off(names: FieldNames, wrapped: Any) -> None:
    """Request 1 is (re-)prefilled after two off steps and request 2 right before the resume: request 1
    misses only the positions since; request 2 has nothing missing, keeps the proposal and hidden state
    its prefill left, and its recompute writes only SGLang's padding slot 0."""
    v = V1Eagle(names)
    lag = v.off.lag
    assert lag is not None
    v.step(0)
    v.step(0)
    lag.on_extend(v.batch.reqs[1:2])
    v.step(0)
    lag.on_extend(v.batch.reqs[2:])
    spec = v.batch.spec_info  # the prefill's draft input, merged into the running batch's
    seq = v.batch.seq_lens_cpu.tolist()
    _, idx2, hid2 = _prefill_rows([v.tokens(2)[-1]], [seq[2]])
    spec.topk_index[2], spec.hidden_states[2] = idx2[0], hid2[0]
    before = dict(v.kv)
    v.resume()
    (ext,) = v.draft_runner.extends
    assert ext["lens"] == [3, 1, 1]
    assert v.exact([PROMPTS[0], seq[1] - 1, seq[2]])
    rtt = v.batch.req_to_token_pool.req_to_token
    changed = {s for s in v.kv if v.kv[s] != before.get(s)}
    assert changed == {int(rtt[0, p]) for p in range(PROMPTS[0], seq[0])} | {int(rtt[1, seq[1] - 1]), 0}
    proposals, hidden = v.seen[0]
    exp_p, exp_h = v.expected_start()
    assert proposals == exp_p and hidden[:2] == exp_h[:2]
    assert hidden[2] == hid2[0].tolist()  # the prefill's, kept


def test_v1_eagle_lazy_every_request_finishes_off(names: FieldNames, wrapped: Any) -> None:
    """Requests that finish on an off step never pay: no extend, an empty next draft input."""
    v = V1Eagle(names)
    v.step(0)
    for r in v.batch.reqs:
        r.sampling_params.max_new_tokens = len(r.output_ids) + 1
    v.step(0)
    assert all(r.finished() for r in v.batch.reqs)
    assert v.draft_runner.extends == [] and v.extend_calls == []
    spec = v.batch.spec_info
    assert int(spec.topk_p.shape[0]) == 0 and tuple(spec.hidden_states.shape) == (0, ls.HIDDEN)


def test_v1_eagle_lazy_placeholders_keep_merges_aligned(names: FieldNames, wrapped: Any) -> None:
    """The off step's draft input carries hidden states of the drafter's width, so SGLang's
    ``merge_batch`` with a freshly prefilled request's input keeps every field one row per request."""
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    v = V1Eagle(names)
    v.step(0)
    spec = v.batch.spec_info
    fresh = EagleDraftInput(
        **{names.root: torch.tensor([7], dtype=torch.int32)},
        topk_p=torch.ones(1, 1),
        topk_index=torch.tensor([[9]]),
        hidden_states=torch.full((1, ls.HIDDEN), 2.0),
    )
    spec.merge_batch(fresh)
    assert spec.hidden_states.shape[0] == spec.topk_index.shape[0] == getattr(spec, names.root).shape[0] == 4


def test_v1_eagle_lazy_memory_is_bounded(names: FieldNames, wrapped: Any) -> None:
    """The buffer is allocated once and never grows, however long the off stretch."""
    v = V1Eagle(names)
    buf = v.window.buf
    rows = int(v.batch.req_to_token_pool.req_to_token.shape[0])
    assert v.window.nbytes == rows * W * ls.HIDDEN * 4
    for _ in range(5 * W + 1):
        v.step(0)
    assert v.window.buf is buf and tuple(buf.shape) == (W, rows, ls.HIDDEN) and not v.window.resized
    assert all(max(e["lens"]) <= W for e in v.draft_runner.extends)
    v.resume()
    assert v.exact(PROMPTS)


# ---------------------------------------------------------------------------------------------------- v2


def _v2_eagle(names: FieldNames) -> Any:
    s, sched, batch, rt, off, kv = tod._v2(names, lazy=True)
    window = _window(int(s.pool.req_to_token.shape[0]))
    off = OffPath(
        names=names,
        sizes=off.sizes,
        decode=ods.decode_target(CaptureHiddenMode.FULL),
        lag=DraftLag(window),
        draft_hidden=(ls.HIDDEN, torch.float32),
    )
    setattr(s.worker, hooks.OT, off)
    off.lag.on_extend(batch.reqs)
    s.draft_worker.draft_runner = s.draft_runner = ods.EagleKVDraftRunner(kv, s.pool)
    return s, sched, batch, off, kv, window


def _v2_resume(names: FieldNames, s: Any, sched: Any, batch: Any) -> Any:
    mwb = batch.get_model_worker_batch()
    sched.future_map.resolve_future(mwb)
    mwb.seq_lens_cpu = mwb.seq_lens.clone()
    policy = StaticPolicy(StaticConfig(num_steps=STEPS))
    setattr(s.worker, hooks.RT, ls.legacy_runtime(policy, launch_depth=STEPS, path="v2"))
    hooks.v2_forward(lambda worker, m: tod.off_mod)(s.worker, mwb)
    return mwb


def _v2_exact(batch: Any, s: Any, kv: Any, start: list[int] | None = None) -> bool:
    """Whether the draft KV from ``start[i]`` (default: the prompt's end) to the current length equals an
    always-on engine's."""
    for i, n in enumerate(PROMPTS if start is None else start):
        exp = ods.expected_eagle_kv(batch.reqs[i], s.pool.req_to_token[i], i, n, int(batch.seq_lens[i]))
        if {sl: kv.get(sl) for sl in exp} != exp:
            return False
    return True


@pytest.mark.parametrize("k", [1, W - 1, W, 3 * W])
def test_v2_eagle_lazy_resume_is_exact(names: FieldNames, wrapped_v2: Any, k: int) -> None:
    s, sched, batch, off, kv, window = _v2_eagle(names)
    buf = window.buf
    for _ in range(k):
        r = Scheduler.run_batch(sched, batch)
        sched.process_batch_result_decode(batch, r)
    # SGLang's per-step draft extend never ran (the fake drafter refuses DRAFT_EXTEND batches)
    assert all(c["capture_hidden_mode"] == CaptureHiddenMode.FULL for c in s.target.decode_calls)
    assert len(s.draft_runner.extends) == (k - 1) // W
    mwb = _v2_resume(names, s, sched, batch)
    assert all(max(e["lens"]) <= W for e in s.draft_runner.extends)
    assert sum(e["lens"][0] for e in s.draft_runner.extends) == k
    assert _v2_exact(batch, s, kv)
    last = [r.output_ids[-1] for r in batch.reqs]
    seq = [int(x) for x in batch.seq_lens]
    assert mwb.spec_info.topk_index.view(-1).tolist() == [
        ods.eagle_proposal(t, n - 1) for t, n in zip(last, seq, strict=True)
    ]
    assert mwb.spec_info.hidden_states.tolist() == [
        ods.eagle_draft_hidden(t, n - 1, i) for i, (t, n) in enumerate(zip(last, seq, strict=True))
    ]
    assert window.buf is buf


def test_v2_eagle_lazy_control_without_the_buffer(
    names: FieldNames, wrapped_v2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(HiddenWindow, "write", lambda self, step, rows, hidden: None)
    s, sched, batch, off, kv, window = _v2_eagle(names)
    for _ in range(W):
        r = Scheduler.run_batch(sched, batch)
        sched.process_batch_result_decode(batch, r)
    _v2_resume(names, s, sched, batch)
    assert not _v2_exact(batch, s, kv)


def test_v2_eagle_lazy_switching_every_step(names: FieldNames, wrapped_v2: Any) -> None:
    s, sched, batch, off, kv, window = _v2_eagle(names)
    for round_ in range(3):
        off_policy = StaticPolicy(StaticConfig(num_steps=0))
        setattr(s.worker, hooks.RT, ls.legacy_runtime(off_policy, launch_depth=STEPS, path="v2"))
        r = Scheduler.run_batch(sched, batch)
        sched.process_batch_result_decode(batch, r)
        _v2_resume(names, s, sched, batch)
        assert [e["lens"] for e in s.draft_runner.extends] == [[1, 1, 1]] * (round_ + 1)
        assert _v2_exact(batch, s, kv)


def test_v2_eagle_lazy_request_prefilled_while_off(names: FieldNames, wrapped_v2: Any) -> None:
    """Request 2 is (re-)prefilled after two off steps: it misses only the one position since, and every
    missed position is fed the token and target hidden state an always-on engine would have fed."""
    s, sched, batch, off, kv, window = _v2_eagle(names)
    for i in range(3):
        if i == 2:
            off.lag.on_extend(batch.reqs[2:])
        r = Scheduler.run_batch(sched, batch)
        sched.process_batch_result_decode(batch, r)
    _v2_resume(names, s, sched, batch)
    (ext,) = s.draft_runner.extends
    assert ext["lens"] == [3, 3, 1]
    assert _v2_exact(batch, s, kv, [PROMPTS[0], PROMPTS[1], PROMPTS[2] + 2])
    assert ext["positions"][-1] == PROMPTS[2] + 2


# ------------------------------------------------------------------------------------------------ start-up


def _cfg(width: int, dtype: Any) -> Any:
    from types import SimpleNamespace

    hf = SimpleNamespace()
    return SimpleNamespace(hidden_size=width, spec_hidden_size=width, dtype=dtype, hf_config=hf)


def _eagle_worker(names: FieldNames, path: str, algo: str) -> tuple[Any, Any]:
    """A v1 or v2 worker with the configuration SGLang gives an EAGLE / EAGLE-3 engine: target hidden 16
    (bfloat16), draft hidden 16, a request pool of 10 rows."""
    from types import SimpleNamespace

    import test_legacy_contract as tlc

    if path == "v1":
        setup = tlc._v1_worker(names)
        w = dw = setup.worker
        w._model_runner = SimpleNamespace(tp_group=None, model_config=_cfg(16, torch.bfloat16))
        mr = w.target_worker.model_runner
    else:
        setup = ls.make_v2_worker()
        w, dw = setup.worker, setup.draft_worker
        mr = tlc._model_runner(setup.server_args)
        w._target_worker.model_runner = mr
        dw.target_worker = w._target_worker
        dw.draft_runner = SimpleNamespace(tp_group=None, model_config=_cfg(16, torch.bfloat16))
    sa = setup.server_args
    sa.speculative_algorithm = algo
    for x in {id(w): w, id(dw): dw}.values():
        x.speculative_algorithm = SpeculativeAlgorithm.from_string(algo)
        x.eagle_use_aux_hidden_state = algo == "EAGLE3"
    mr.model_config = _cfg(16, torch.bfloat16)
    w.req_to_token_pool = SimpleNamespace(req_to_token=torch.zeros(10, 64, dtype=torch.int32))
    return w, sa


def _fake_decode_target(mr: Any, sa: Any, *, graphs: bool, capture_hidden_mode: Any) -> Any:
    return ods.decode_target(capture_hidden_mode)


@pytest.mark.parametrize("path", ["v1", "v2"])
@pytest.mark.parametrize(("algo", "width"), [("EAGLE", 16), ("EAGLE3", 48)])
def test_lazy_eagle_allocates_the_window_once_at_start_up(
    names: FieldNames, monkeypatch: pytest.MonkeyPatch, path: str, algo: str, width: int
) -> None:
    """draft_catch_up=lazy: a window of pool rows x W x the target's hidden width (EAGLE-3: three
    auxiliary layers), its bytes in the start-up label; auto is lazy with the default window, per_step keeps
    SGLang's per-step extend."""
    from specpolicy.runtime.settings import AdapterSettings

    install_mod = importlib.import_module("specpolicy.adapters.sglang.legacy.install")

    monkeypatch.setattr(install_mod, "build_decode_target", _fake_decode_target)
    w, sa = _eagle_worker(names, path, algo)
    lazy = AdapterSettings.build("static", draft_catch_up="lazy", draft_catch_up_window=8)
    off = install_mod.build_off_path(w, sa, lazy, names)
    assert off.lag is not None and off.lag.hidden is not None
    h = off.lag.hidden
    assert (h.rows, h.window, h.width, h.dtype) == (10, 8, width, torch.bfloat16)
    assert h.nbytes == 10 * 8 * width * 2 and tuple(h.buf.shape) == (8, 10, width)
    assert off.draft_hidden == (16, torch.bfloat16)
    assert f"kept for 8 positions (10 x 8 x {width} bfloat16, {h.nbytes / 2**20:.1f} MiB)" in off.label
    auto = install_mod.build_off_path(w, sa, AdapterSettings.build("static"), names)
    assert auto.lag is not None and auto.lag.hidden is not None and auto.lag.hidden.window == 32
    per_step = AdapterSettings.build("static", draft_catch_up="per_step")
    kept = install_mod.build_off_path(w, sa, per_step, names)
    assert kept.lag is None and kept.label.endswith("one-token draft extend per step")


def test_lazy_standalone_keeps_no_hidden_states(names: FieldNames, monkeypatch: pytest.MonkeyPatch) -> None:
    from specpolicy.runtime.settings import AdapterSettings

    install_mod = importlib.import_module("specpolicy.adapters.sglang.legacy.install")

    monkeypatch.setattr(install_mod, "build_decode_target", _fake_decode_target)
    w, sa = _eagle_worker(names, "v1", "STANDALONE")
    off = install_mod.build_off_path(w, sa, AdapterSettings.build("static"), names)
    assert off.lag is not None and off.lag.hidden is None and off.draft_hidden is None
    assert off.label.endswith("drafter skipped, lazy catch-up on resume")


def test_tree_drafts_get_topk_proposals_after_the_catch_up(names: FieldNames, wrapped: Any) -> None:
    """topk > 1 (the v1 tree): the catch-up hands the draft topk proposals per request, the best first."""
    v = V1Eagle(names)
    v.off.topk = 4
    v.batch.spec_info.topk_p = torch.ones(3, 4)
    v.batch.spec_info.topk_index = torch.zeros(3, 4, dtype=torch.int64)
    for _ in range(W):
        v.step(0)

    seen: list[Any] = []
    setattr(v.setup.worker, hooks.RT, tod._runtime(STEPS))
    hooks.v1_forward(lambda w, b: seen.append(b.spec_info.topk_index.clone()), names)(v.setup.worker, v.batch)
    (idx,) = seen
    assert tuple(idx.shape) == (3, 4)
    assert idx[:, 0].tolist() == v.expected_start()[0] and v.exact(PROMPTS)


# ------------------------------------------------------------------------------------------- the window


@settings(max_examples=60, deadline=None)
@given(
    window=st.integers(1, 6),
    batches=st.lists(
        st.lists(st.integers(0, 4), min_size=1, max_size=5, unique=True), min_size=1, max_size=20
    ),
    data=st.data(),
)
def test_window_returns_the_last_m_off_steps_of_each_row(
    window: int, batches: list[list[int]], data: Any
) -> None:
    """Whatever rows each off step writes, a row read back for its last ``m <= W`` steps (steps it was in
    the batch of) gives exactly what those steps wrote, oldest first."""
    h = HiddenWindow(rows=5, window=window, width=2, dtype=torch.float32, device="cpu")
    written: dict[int, dict[int, list[float]]] = {}
    for step, rows in enumerate(batches, start=1):
        hidden = torch.tensor([[float(step), float(r)] for r in rows])
        h.write(step, torch.tensor(rows), hidden)
        for r in rows:
            written.setdefault(r, {})[step] = [float(step), float(r)]
    now = len(batches)
    row = data.draw(st.sampled_from(sorted(written)))
    present = 0  # the steps up to now in which this row took part without a gap
    while now - present in written[row]:
        present += 1
    if present == 0:
        return
    m = data.draw(st.integers(1, min(present, window)))
    got = h.gather(now, [row], [m]).tolist()
    assert got == [written[row][s] for s in range(now - m + 1, now + 1)]
    assert tuple(h.buf.shape) == (window, 5, 2)


def test_window_rejects_more_than_it_holds_and_reallocates_for_another_width(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = HiddenWindow(rows=2, window=3, width=4, dtype=torch.float32, device="cpu")
    with pytest.raises(ValueError, match="exceed the hidden-state window of 3"):
        h.gather(5, [0], [4])
    with pytest.raises(ValueError, match="rows, window, width >= 1"):
        HiddenWindow(rows=0, window=3, width=4, dtype=torch.float32, device="cpu")
    with caplog.at_level("WARNING", logger="specpolicy.adapters"):
        h.write(1, torch.tensor([1]), torch.ones(1, 6))
    assert h.resized and tuple(h.buf.shape) == (3, 2, 6) and "reallocated" in caplog.text
    assert h.gather(1, [1], [1]).tolist() == [[1.0] * 6]


@pytest.mark.parametrize(("mode", "refused"), [("auto", False), ("lazy", True)])
def test_a_window_that_cannot_be_built_falls_back_to_the_per_step_extend_under_auto_only(
    names: FieldNames,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    refused: bool,
) -> None:
    """auto (the default) keeps the engine serving with SGLang's per-step extend and says why; an explicit
    lazy fails the start-up, where the install's refuse-or-warn setting takes over."""
    from specpolicy.runtime.settings import AdapterSettings

    install_mod = importlib.import_module("specpolicy.adapters.sglang.legacy.install")

    monkeypatch.setattr(install_mod, "build_decode_target", _fake_decode_target)
    w, sa = _eagle_worker(names, "v1", "EAGLE3")
    del w.req_to_token_pool
    settings = AdapterSettings.build("static", draft_catch_up=mode)
    if refused:
        with pytest.raises(AttributeError, match="req_to_token_pool"):
            install_mod.build_off_path(w, sa, settings, names)
        return
    with caplog.at_level(logging.INFO, logger=install_mod.log.name):
        off = install_mod.build_off_path(w, sa, settings, names)
    assert off.lag is None and off.draft_hidden is None
    assert off.label.endswith("one-token draft extend per step")
    assert any("no hidden-state window (AttributeError" in r.getMessage() for r in caplog.records)


@given(
    window=st.integers(1, 4096),
    rows=st.integers(1, 1024),
    width=st.integers(1, 30000),
    itemsize=st.sampled_from([1, 2, 4]),
    free=st.one_of(st.none(), st.integers(0, 2**40)),
)
@settings(max_examples=300, deadline=None)
def test_an_auto_window_fits_its_share_of_the_free_memory_or_is_refused(
    window: int, rows: int, width: int, itemsize: int, free: int | None
) -> None:
    install_mod = importlib.import_module("specpolicy.adapters.sglang.legacy.install")
    per_position = rows * width * itemsize
    try:
        w = install_mod.fitted_window(window, rows=rows, width=width, itemsize=itemsize, free=free)
    except MemoryError as exc:
        assert free is not None and (install_mod._MIN_AUTO_WINDOW * per_position > free * 0.1)
        assert "MiB free" in str(exc)
        return
    if free is None or window * per_position <= free * install_mod._WINDOW_FREE_SHARE:
        assert w == window  # unknown memory, or it fits: the configured window
    else:
        assert install_mod._MIN_AUTO_WINDOW <= w < window
        assert w * per_position <= free * install_mod._WINDOW_FREE_SHARE < (w + 1) * per_position


@pytest.mark.parametrize(
    ("mode", "free", "window"),
    [("auto", None, 32), ("auto", 10**12, 32), ("auto", 10 * 10 * 48 * 2 * 10, 10), ("lazy", 1, 32)],
)
def test_auto_shortens_the_window_to_the_free_memory_and_lazy_keeps_what_was_asked(
    names: FieldNames, monkeypatch: pytest.MonkeyPatch, mode: str, free: int | None, window: int
) -> None:
    """10 pool rows x 48 wide (EAGLE-3 over 16) x bf16 = 960 bytes a position: 10% of 96,000 bytes holds
    10 positions, fewer than the 32 asked; an explicit ``lazy`` is not shortened (nor refused)."""
    from specpolicy.runtime.settings import AdapterSettings

    install_mod = importlib.import_module("specpolicy.adapters.sglang.legacy.install")
    monkeypatch.setattr(install_mod, "build_decode_target", _fake_decode_target)
    monkeypatch.setattr(install_mod, "_free_gpu_bytes", lambda device: free)
    w, sa = _eagle_worker(names, "v1", "EAGLE3")
    off = install_mod.build_off_path(w, sa, AdapterSettings.build("static", draft_catch_up=mode), names)
    assert off.lag is not None and off.lag.hidden is not None and off.lag.hidden.window == window


def test_auto_runs_the_per_step_extend_where_not_even_a_short_window_fits(
    names: FieldNames, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from specpolicy.runtime.settings import AdapterSettings

    install_mod = importlib.import_module("specpolicy.adapters.sglang.legacy.install")
    monkeypatch.setattr(install_mod, "build_decode_target", _fake_decode_target)
    monkeypatch.setattr(install_mod, "_free_gpu_bytes", lambda device: 10 * 960 * 3)  # 3 positions
    w, sa = _eagle_worker(names, "v2", "EAGLE3")
    with caplog.at_level(logging.INFO, logger=install_mod.log.name):
        off = install_mod.build_off_path(w, sa, AdapterSettings.build("static"), names)
    assert off.lag is None and off.label.endswith("one-token draft extend per step")
    assert any("no hidden-state window (MemoryError: 4 positions" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------- per-step host work


def _dispatched(fn: Any) -> tuple[list[str], int]:
    """The tensor ops ``fn()`` dispatches and how many of them allocate a tensor of their own."""
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: list[str] = []
    allocs = 0

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            nonlocal allocs
            out = func(*args, **(kwargs or {}))
            ops.append(str(func.overloadpacket.__name__))
            inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
            if isinstance(out, torch.Tensor) and out.untyped_storage().data_ptr() not in inputs:
                allocs += 1
            return out

    with Count():
        fn()
    return ops, allocs


def test_a_window_write_is_one_index_copy_into_a_column_made_at_start_up() -> None:
    h = HiddenWindow(rows=6, window=3, width=4, dtype=torch.float32, device="cpu")
    rows, hidden = torch.tensor([4, 1]), torch.tensor([[1.0] * 4, [2.0] * 4])
    assert _dispatched(lambda: h.write(5, rows, hidden)) == (["index_copy_"], 0)
    assert h.buf[1, 4].tolist() == [1.0] * 4 and h.buf[1, 1].tolist() == [2.0] * 4  # column (5 - 1) % 3
    assert int(h.buf.count_nonzero()) == 8


def test_the_catch_up_reads_nothing_back_from_the_device(
    names: FieldNames, wrapped: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its indices are built on the host and cross in one copy: none of the ops that wait for a device value
    (``repeat_interleave`` with a tensor of repeats, ``.item()``, ``nonzero``, ``any``) runs in the
    adapter's catch-up (SGLang's ``ForwardBatch.init_new`` and the stand-in drafter are left out)."""
    import sglang.srt.model_executor.forward_batch_info as fbi

    v = V1Eagle(names)
    for _ in range(W):
        v.step(0)
    inside = [False]

    def excluded(fn: Any) -> Any:
        def run(*a: Any, **kw: Any) -> Any:
            inside[0] = True
            try:
                return fn(*a, **kw)
            finally:
                inside[0] = False

        return run

    monkeypatch.setattr(fbi.ForwardBatch, "init_new", excluded(fbi.ForwardBatch.init_new))
    monkeypatch.setattr(v.draft_runner, "forward", excluded(v.draft_runner.forward))
    orig = DraftLag.catch_up
    seen: list[str] = []

    def catch_up(self: Any, **kw: Any) -> Any:
        from torch.utils._python_dispatch import TorchDispatchMode

        class Watch(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                if not inside[0]:
                    seen.append(str(func.overloadpacket.__name__))
                return func(*args, **(kwargs or {}))

        with Watch():
            return orig(self, **kw)

    monkeypatch.setattr(DraftLag, "catch_up", catch_up)
    v.resume()
    assert seen and not {"repeat_interleave", "_local_scalar_dense", "nonzero", "any"} & set(seen)
    assert seen.count("lift_fresh") + seen.count("tensor") <= 2  # the packed indices (and SGLang's lengths)
    assert v.exact(PROMPTS) and v.seen == [v.expected_start()]


def test_an_unrecoverable_request_takes_the_catch_ups_own_proposal() -> None:
    """Only requests whose draft state was exact keep what they have; one the scheduler's ordering should
    have ruled out (its tokens do not reach its missing positions) is recomputed at one position and takes
    the catch-up's proposal, never a placeholder."""
    from types import SimpleNamespace

    from specpolicy.adapters.sglang.legacy.draft_lag import ATTR

    lag = DraftLag(HiddenWindow(rows=4, window=4, width=2, dtype=torch.float32, device="cpu"))
    reqs = [SimpleNamespace(origin_input_ids=[1, 2, 3], output_ids=[4, 5], req_pool_idx=i) for i in range(3)]
    lag.on_extend(reqs)
    lag.on_off_step(3)
    lag.on_off_step(3)
    setattr(reqs[1], ATTR, 2)  # exact: prefilled after both off steps
    reqs[2].output_ids = []  # too short for its sequence length: unrecoverable
    plan = lag.plan(reqs, [5, 5, 5])
    assert plan is not None
    assert plan.missing == (2, 1, 1) and plan.recomputed == (1, 2) and plan.exact == (1,)
    assert plan.rows == (0, 1, 2) and lag.unrecoverable == 1


def test_v1_off_steps_of_one_batch_hand_out_the_same_placeholders(names: FieldNames, wrapped: Any) -> None:
    """No slicing per step: the same views while the batch keeps its size; proposal ids are token 0. The
    draft input itself is the last off step's, refilled."""
    v = V1Eagle(names)
    v.step(0)
    first = v.batch.spec_info
    views = [getattr(first, field) for field in ("topk_p", "topk_index", "hidden_states")]
    v.step(0)
    second = v.batch.spec_info
    assert second is first
    assert [getattr(second, field) for field in ("topk_p", "topk_index", "hidden_states")] == views
    assert second.topk_index.tolist() == [[0]] * 3
    assert _dispatched(lambda: v.step(0))[0].count("slice") == 0


# ---------------------------------------------------------------------------------- v2: the FutureMap


def _store_counts(fm: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which FutureMap proposal and hidden-state buffers get written (by name), on every ``__setitem__``."""
    written: list[str] = []
    orig = torch.Tensor.__setitem__

    class Spy(torch.Tensor):
        spy_name = ""

    def setitem(self: Any, key: Any, value: Any) -> None:
        written.append(self.spy_name)
        orig(self, key, value)

    monkeypatch.setattr(Spy, "__setitem__", setitem)
    for name in ("topk_p_buf", "topk_index_buf", "hidden_states_buf"):
        spy = getattr(fm, name).as_subclass(Spy)
        spy.spy_name = name
        setattr(fm, name, spy)
    return written


def test_v2_lazy_off_steps_neither_store_nor_gather_their_placeholders(
    names: FieldNames, wrapped_v2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of off steps stores only the root tokens and lengths in SGLang's FutureMap and, batch after
    unchanged batch, gathers only those back: the draft input keeps the placeholder tensors it has (the
    values the map would have returned). The resume is exact."""
    s, sched, batch, off, kv, window = _v2_eagle(names)
    fm = sched.future_map
    written = _store_counts(fm, monkeypatch)
    held = []
    for _ in range(3):
        r = Scheduler.run_batch(sched, batch)
        sched.process_batch_result_decode(batch, r)
        held.append(batch.spec_info.topk_p)
    assert written == []  # no proposal or hidden state copied into the map
    assert held[0] is held[1] is held[2]  # nor gathered from it
    from specpolicy.adapters.sglang.legacy.off_path import PLACEHOLDERS

    stored = getattr(batch.spec_info, PLACEHOLDERS)
    assert stored[0] is batch.spec_info.future_indices
    mwb = _v2_resume(names, s, sched, batch)
    assert _v2_exact(batch, s, kv)
    _assert_proposals_follow_the_chain(batch, mwb)


def test_v2_a_merged_or_filtered_batch_resolves_as_sglang_and_the_resume_stays_exact(
    names: FieldNames, wrapped_v2: Any
) -> None:
    """After a merge (a new ``FutureIndices``) the map is read as SGLang reads it: the skipped entries give
    whatever they held, and the catch-up rewrites every one before the drafter reads it."""
    from sglang.srt.managers.overlap_utils import FutureIndices

    s, sched, batch, off, kv, window = _v2_eagle(names)
    fm = sched.future_map
    for _ in range(2):
        r = Scheduler.run_batch(sched, batch)
        sched.process_batch_result_decode(batch, r)
    fm.topk_p_buf.fill_(-1.0)  # the skipped entries: what SGLang would gather now
    fm.topk_index_buf.fill_(10**9)
    fm.hidden_states_buf.fill_(float("nan"))
    spec = batch.spec_info
    spec.future_indices = FutureIndices(indices=spec.future_indices.indices.clone())  # as merge_batch makes
    r = Scheduler.run_batch(sched, batch)  # one more off step, on the stale entries
    sched.process_batch_result_decode(batch, r)
    mwb = _v2_resume(names, s, sched, batch)
    assert _v2_exact(batch, s, kv)
    assert not torch.isnan(mwb.spec_info.hidden_states).any()
    _assert_proposals_follow_the_chain(batch, mwb)


def _assert_proposals_follow_the_chain(batch: Any, mwb: Any) -> None:
    """After the resume each request's next proposal is the head's own for its last token and length."""
    last = [r.output_ids[-1] for r in batch.reqs]
    seq = [int(x) for x in batch.seq_lens]
    assert mwb.spec_info.topk_index.view(-1).tolist() == [
        ods.eagle_proposal(t, n - 1) for t, n in zip(last, seq, strict=True)
    ]


def test_v2_future_map_hooks_leave_every_other_draft_input_to_sglang(
    names: FieldNames, wrapped_v2: Any
) -> None:
    """A draft input not marked by an off step (a prefill's, a speculative step's) is stored and gathered
    whole, exactly as SGLang's own methods do."""
    from sglang.srt.managers.overlap_utils import FutureMap
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    fm = FutureMap(8, 0, 128, "cpu", SpeculativeAlgorithm.EAGLE)
    first = EagleDraftInput(
        **{names.root: torch.tensor([1, 2], dtype=torch.int32)},
        topk_p=torch.tensor([[0.5], [0.25]]),
        topk_index=torch.tensor([[3], [4]]),
        hidden_states=torch.ones(2, ls.HIDDEN),
        new_seq_lens=torch.tensor([7, 8]),
    )
    fi = fm.alloc_future_indices(2)
    fm.store_to_map_for_new_batch(fi, first)
    nxt = EagleDraftInput(future_indices=fi)
    from types import SimpleNamespace

    fm.resolve_future(SimpleNamespace(spec_info=nxt))
    assert nxt.topk_index.tolist() == [[3], [4]] and nxt.topk_p.tolist() == [[0.5], [0.25]]
    assert getattr(nxt, names.root).tolist() == [1, 2] and nxt.new_seq_lens.tolist() == [7, 8]
    assert nxt.hidden_states.tolist() == first.hidden_states.tolist()
