"""A specpolicy policy driving SGLang's REAL AdaptiveController (0.5.20+ route).

The only fake is the worker (``FakeWorker``): building real runtime states needs a GPU (attention backends,
CUDA graphs). It is the smallest object satisfying SGLang's own ``AdaptiveSpecWorker`` Protocol and returns
SGLang's own ``SpecRuntimeState`` dataclass, the same pattern as SGLang's CPU test
``test/registered/unit/spec/test_adaptive_runtime_state.py``. Where a method of the real ``EAGLEWorkerV2`` is
involved (``activate_step_by_batch``, ``on_verify_complete_cpu``), the real function is called on the fake.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import requires_version

from specpolicy import SpecMode, StepStats
from specpolicy.adapters.runtime import AdapterInstallError
from specpolicy.adapters.settings import AdapterSettings
from specpolicy.policy import PolicyConfig, PolicyEntry

pytestmark = requires_version("0.5.23")


class FakeWorker:
    """Smallest AdaptiveSpecWorker: records which state is live; states carry no GPU resources."""

    def __init__(self, steps: int) -> None:
        self.speculative_num_steps = steps
        self.speculative_num_draft_tokens = steps + 1
        self.built: list[tuple[int, int, list[int] | None]] = []
        self.applied: list[int] = []
        self.adaptive_controller: Any = None
        self._hosts_draft = True

    def build_adaptive_runtime_state(
        self,
        speculative_num_steps: int,
        speculative_num_draft_tokens: int,
        cuda_graph_bs: list[int] | None = None,
    ) -> Any:
        from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState

        self.built.append((speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs))
        return SpecRuntimeState(
            speculative_num_steps=speculative_num_steps,
            speculative_num_draft_tokens=speculative_num_draft_tokens,
            draft_attn_backend=None,
            cuda_graph_runner=None,
            target_attn_backend=None,
            target_graph_runner=None,
            draft_extend_attn_backend=None,
            cuda_graph_runner_for_draft_extend=None,
        )

    def apply_runtime_state(self, state: Any) -> None:
        self.speculative_num_steps = state.speculative_num_steps
        self.speculative_num_draft_tokens = state.speculative_num_draft_tokens
        self.applied.append(state.speculative_num_steps)


def _adaptive_config(tmp_path: Path, steps: list[int], extra: dict[str, Any] | None = None) -> str:
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({"1": {"candidate_steps": steps}, **(extra or {})}))
    return str(path)


def _worker_with_sglang_controller(cfg: str, initial: int) -> FakeWorker:
    """A worker as EAGLEWorkerV2.__init__ leaves it: SGLang's own policy inside a real AdaptiveController."""
    from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    worker = FakeWorker(initial)
    worker.adaptive_controller = AdaptiveController(
        worker, AdaptiveSpeculativeParams(initial_steps=initial, cfg_path=cfg)
    )
    return worker


def _start(worker: FakeWorker, cuda_graph_bs: list[int] | None = None) -> None:
    """What EAGLEWorkerV2.init_cuda_graphs does: register the launch state, then build the others."""
    ctl = worker.adaptive_controller
    ctl.register(
        worker.build_adaptive_runtime_state(worker.speculative_num_steps, worker.speculative_num_steps + 1)
    )
    ctl.init_states(cuda_graph_bs=cuda_graph_bs)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SPECPOLICY_CONFIG", "SPECPOLICY_POLICY"):
        monkeypatch.delenv(var, raising=False)


# A deterministic policy written for these tests: off when the batch is large, else depth 3 (or 1 after
# a round with no accepted drafts). Its expected decisions are computed here from the rule, not by the code.
class _RuleConfig(PolicyConfig):
    name: str = "rule_for_tests"
    big: int = 16

    def candidate_steps(self) -> tuple[int, ...]:
        return (0, 1, 3)


class _Rule:
    def __init__(self, config: _RuleConfig) -> None:
        self.big = config.big
        self.seen: list[StepStats] = []

    def decide(self, stats: StepStats) -> SpecMode:
        self.seen.append(stats)
        if stats.batch_size >= self.big:
            return SpecMode.off()
        if stats.has_acceptance and max(stats.accepted_draft_tokens or [0]) == 0:
            return SpecMode.on(1)
        return SpecMode.on(3)

    def reset(self) -> None:
        pass


@pytest.fixture
def rule_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    from specpolicy import policy as policy_mod

    entry = PolicyEntry("rule_for_tests", _RuleConfig, _Rule)
    reg = policy_mod._registry()
    monkeypatch.setitem(reg.entries, "rule_for_tests", entry)


def test_policy_drives_real_controller_including_steps_zero(tmp_path: Path, rule_policy: None) -> None:
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    from specpolicy.adapters.sglang import v0_5_23

    cfg = _adaptive_config(tmp_path, [0, 1, 3, 5])
    worker = _worker_with_sglang_controller(cfg, initial=3)
    settings = AdapterSettings.build({"name": "rule_for_tests"}, metrics=False)
    params = v0_5_23.attach(worker, settings, cfg)
    assert params is not None and worker.adaptive_controller.params is params
    _start(worker, cuda_graph_bs=[1, 2, 4, 8, 16, 32])
    # Only the policy's depths (plus the launch depth) get a runtime state: 5 is configured but never used.
    assert sorted(b[0] for b in worker.built) == [0, 1, 3]
    graphs = [1, 2, 4, 8, 16, 32]
    assert {b[0]: b[2] for b in worker.built[1:]} == {0: graphs, 1: graphs}  # every depth at every graph size

    applied: list[int] = []
    for bs, accepted in [(4, [2, 3, 1, 0]), (32, None), (2, [0, 0]), (4, [1, 1, 1, 1])]:
        EAGLEWorkerV2.activate_step_by_batch(worker, bs)  # the real per-round decision point
        applied.append(worker.speculative_num_steps)
        drafts = accepted if accepted is not None else [0] * bs
        EAGLEWorkerV2.on_verify_complete_cpu(worker, drafts, batch_size=bs)
    # round 1: bs 4 -> 3; round 2: bs 32 -> off; round 3: bs 2, last round was off (no acceptance) -> 3;
    # round 4: the previous round ran depth 3 and accepted nothing -> 1.
    assert applied == [3, 0, 3, 1]
    seen = params.runtime.policy.seen  # type: ignore[attr-defined]
    assert [s.batch_size for s in seen] == [4, 32, 2, 4]
    assert seen[1].last_num_steps == 3 and list(seen[1].accepted_draft_tokens) == [2, 3, 1, 0]
    assert (
        seen[2].last_num_steps == 0 and seen[2].accepted_draft_tokens is None
    )  # off is not "zero acceptance"
    assert seen[3].last_num_steps == 3 and list(seen[3].accepted_draft_tokens) == [0, 0]
    assert params.runtime.controller.switches == 3


def test_overlap_feedback_is_matched_to_the_round_that_produced_it(tmp_path: Path, rule_policy: None) -> None:
    """With overlap, round N+1 is decided before round N's acceptance arrives; depths must not be mixed up."""
    from specpolicy.adapters.sglang import v0_5_23

    cfg = _adaptive_config(tmp_path, [0, 1, 3])
    worker = _worker_with_sglang_controller(cfg, initial=3)
    params = v0_5_23.attach(worker, AdapterSettings.build({"name": "rule_for_tests"}, metrics=False), cfg)
    assert params is not None
    _start(worker)
    ctl = worker.adaptive_controller
    ctl.activate_step_by_batch(4)  # round A runs 3
    ctl.activate_step_by_batch(32)  # round B runs 0, decided before A's feedback
    ctl.on_verify_complete([1, 2, 0, 1], 4)  # A's feedback
    ctl.activate_step_by_batch(4)  # round C sees A (depth 3) as the latest known round
    ctl.on_verify_complete([0] * 32, 32)  # B's feedback: depth 0
    ctl.activate_step_by_batch(4)
    seen = params.runtime.policy.seen  # type: ignore[attr-defined]
    assert (seen[2].last_num_steps, list(seen[2].accepted_draft_tokens)) == (3, [1, 2, 0, 1])
    assert (seen[3].last_num_steps, seen[3].accepted_draft_tokens) == (0, None)


def test_policy_failure_runs_the_launch_depth_and_keeps_serving(tmp_path: Path, rule_policy: None) -> None:
    from specpolicy.adapters.sglang import v0_5_23

    cfg = _adaptive_config(tmp_path, [0, 1, 3])
    worker = _worker_with_sglang_controller(cfg, initial=1)
    params = v0_5_23.attach(worker, AdapterSettings.build({"name": "rule_for_tests"}, metrics=False), cfg)
    assert params is not None
    _start(worker)

    def broken(stats: StepStats) -> SpecMode:
        raise RuntimeError("boom")

    params.runtime.policy.decide = broken  # type: ignore[method-assign]
    worker.adaptive_controller.activate_step_by_batch(32)
    assert worker.speculative_num_steps == 1
    assert params.runtime.controller.errors == 1


def test_depth_outside_the_configured_candidates_is_refused(tmp_path: Path) -> None:
    from specpolicy.adapters.sglang import v0_5_23

    cfg = _adaptive_config(tmp_path, [1, 3])
    worker = _worker_with_sglang_controller(cfg, initial=3)
    settings = AdapterSettings.build({"name": "static", "num_steps": 0}, metrics=False)
    with pytest.raises(AdapterInstallError, match=r"depth\(s\) \[0\].*only prepared \[1, 3\]"):
        v0_5_23.attach(worker, settings, cfg)
    # warn mode: SGLang keeps its own policy and serves without specpolicy
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    warn = AdapterSettings.build({"name": "static", "num_steps": 0}, metrics=False, on_install_failure="warn")
    assert v0_5_23.attach(worker, warn, cfg) is None
    assert isinstance(worker.adaptive_controller.params, AdaptiveSpeculativeParams)


def test_no_adaptive_controller_is_refused_with_the_reason(tmp_path: Path) -> None:
    from specpolicy.adapters.sglang import v0_5_23

    worker = FakeWorker(3)
    settings = AdapterSettings.build("static", metrics=False)
    with pytest.raises(AdapterInstallError, match="--speculative-adaptive"):
        v0_5_23.attach(worker, settings, None, adaptive_on=False)
    worker._hosts_draft = False  # a non-last pipeline stage has no controller by design
    assert v0_5_23.attach(worker, settings, None, adaptive_on=False) is None


def test_settings_ride_in_the_adaptive_config_json(tmp_path: Path) -> None:
    from specpolicy.adapters.sglang import v0_5_23

    cfg = _adaptive_config(
        tmp_path, [0, 3], {"specpolicy": {"policy": {"name": "static", "num_steps": 0}, "metrics": False}}
    )
    settings = v0_5_23.resolve_settings(cfg)
    assert settings is not None and settings.policy.candidate_steps() == (0,) and settings.metrics is False
    # SGLang's own loader still routes on the integer keys only
    from sglang.srt.speculative.adaptive_spec_params import resolve_candidate_steps_from_config

    assert resolve_candidate_steps_from_config(cfg) == [0, 3]
    plain = _adaptive_config(tmp_path, [0, 3])
    assert v0_5_23.resolve_settings(plain) is None


def test_trace_is_written_from_a_real_controller_run(tmp_path: Path, rule_policy: None) -> None:
    from specpolicy.adapters.sglang import v0_5_23
    from specpolicy.trace import read_trace

    cfg = _adaptive_config(tmp_path, [0, 1, 3])
    worker = _worker_with_sglang_controller(cfg, initial=3)
    trace = tmp_path / "steps.jsonl"
    settings = AdapterSettings.build({"name": "rule_for_tests"}, metrics=False, trace_path=trace)
    params = v0_5_23.attach(worker, settings, cfg)
    assert params is not None
    _start(worker)
    for bs in (4, 4, 32, 4):
        worker.adaptive_controller.activate_step_by_batch(bs)
        worker.adaptive_controller.on_verify_complete([1] * bs, bs)
    params.close()
    records = list(read_trace(trace))
    assert [(r.batch_size, r.num_steps) for r in records] == [(4, 3), (4, 3), (32, 0), (4, 3)]
    # a round's time is the interval from the previous round's feedback to its own, written with the round it
    # describes; the first round has no earlier feedback to measure from
    assert records[0].step_time_s is None
    assert all(r.step_time_s is not None and r.step_time_s >= 0 for r in records[1:])
    header = json.loads(trace.read_text().splitlines()[0])
    assert (
        header["kind"] == "header" and header["engine"] == "sglang" and header["engine_version"] == "0.5.23"
    )
    assert "adaptive-controller" in header["path"] and header["policy"]["name"] == "rule_for_tests"


def _req() -> Any:
    """A request as far as SGLang's result processing touches it (a Req needs a tokenizer and a KV pool)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        is_retracted=False,
        finished=lambda: False,
        grammar=None,
        kv=SimpleNamespace(kv_committed_len=10),
        spec_verify_ct=0,
        spec_num_correct_drafts=0,
        update_spec_correct_drafts_histogram=lambda n: None,
    )


def test_acceptance_reaches_the_policy_through_the_real_scheduler_result_code(
    tmp_path: Path, rule_policy: None
) -> None:
    """SGLang's own ``_resolve_spec_v2_tokens`` turns a verify result into per-request tokens and calls
    ``model_worker.on_verify_complete_cpu``; the real EAGLEWorkerV2 method forwards to the controller.
    Checked for a depth-3 round and a steps=0 round (one token per request, stride 1)."""
    from types import SimpleNamespace

    import torch
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    from specpolicy.adapters.sglang import v0_5_23

    cfg = _adaptive_config(tmp_path, [0, 1, 3])
    worker = _worker_with_sglang_controller(cfg, initial=3)
    params = v0_5_23.attach(worker, AdapterSettings.build({"name": "rule_for_tests"}, metrics=False), cfg)
    assert params is not None
    _start(worker)
    model_worker = SimpleNamespace(
        on_verify_complete_cpu=lambda drafts, batch_size=0: EAGLEWorkerV2.on_verify_complete_cpu(
            worker, drafts, batch_size=batch_size
        )
    )
    processor = SimpleNamespace(
        metrics_reporter=SimpleNamespace(snapshot_spec_decode_metrics=lambda *a: None),
        model_worker=model_worker,
        advance_grammar_fsm=lambda *a: None,
    )
    batch = SimpleNamespace(reqs=[_req(), _req()])

    worker.adaptive_controller.activate_step_by_batch(2)  # round 1: depth 3
    assert worker.speculative_num_steps == 3
    deep = GenerationBatchResult(
        next_token_ids=torch.tensor([11, 12, 13, 0, 21, 0, 0, 0]),  # stride 4: 3 tokens, then 1 token
        accept_lens=torch.tensor([3, 1]),
        speculative_num_draft_tokens=4,
    )
    tokens = SchedulerBatchResultProcessor._resolve_spec_v2_tokens(processor, deep, batch)
    assert tokens == [[11, 12, 13], [21]]
    worker.adaptive_controller.activate_step_by_batch(32)  # round 2: large batch -> off
    assert worker.speculative_num_steps == 0
    seen = params.runtime.policy.seen  # type: ignore[attr-defined]
    assert (seen[1].last_num_steps, list(seen[1].accepted_draft_tokens)) == (3, [2, 0])

    zero = GenerationBatchResult(  # what the steps=0 trivial verify hands the scheduler
        next_token_ids=torch.tensor([14, 22]),
        accept_lens=torch.tensor([1, 1]),
        speculative_num_draft_tokens=1,
    )
    tokens = SchedulerBatchResultProcessor._resolve_spec_v2_tokens(processor, zero, batch)
    assert tokens == [[14], [22]]  # one new token per request
    assert [r.kv.kv_committed_len for r in batch.reqs] == [10 + 3 + 1, 10 + 1 + 1]
    worker.adaptive_controller.activate_step_by_batch(2)
    assert (seen[2].last_num_steps, seen[2].accepted_draft_tokens) == (0, None)  # off is not zero acceptance
    assert worker.speculative_num_steps == 3


def test_worker_init_hook_takes_settings_from_env_or_config_and_otherwise_does_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The function the plugin registers as AFTER hook on EAGLEWorkerV2.__init__, with SGLang's resolved spec
    config (``get_spec()``, published by SGLang at start-up) replaced by its two fields the hook reads."""
    from types import SimpleNamespace

    import sglang.srt.runtime_context as rc
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    from specpolicy.adapters.sglang import v0_5_23

    cfg = _adaptive_config(tmp_path, [0, 1, 3])
    monkeypatch.setattr(
        rc, "get_spec", lambda: SimpleNamespace(speculative_adaptive_config=cfg, speculative_adaptive=True)
    )
    untouched = _worker_with_sglang_controller(cfg, initial=3)
    v0_5_23._after_worker_init(None, untouched)  # nothing configured: SGLang keeps its own policy
    assert isinstance(untouched.adaptive_controller.params, AdaptiveSpeculativeParams)

    monkeypatch.setenv(
        "SPECPOLICY_CONFIG", AdapterSettings.build("static", metrics=False).to_env()["SPECPOLICY_CONFIG"]
    )
    worker = _worker_with_sglang_controller(cfg, initial=3)
    v0_5_23._after_worker_init(None, worker)
    assert isinstance(worker.adaptive_controller.params, v0_5_23.SpecPolicyParams)
    assert v0_5_23.active_params() is worker.adaptive_controller.params

    monkeypatch.setattr(
        rc, "get_spec", lambda: SimpleNamespace(speculative_adaptive_config=None, speculative_adaptive=False)
    )
    with pytest.raises(AdapterInstallError, match="adaptive speculation is off"):
        v0_5_23._after_worker_init(None, FakeWorker(3))


# --- step time paired with the round it describes --------------------------------------------------------
# A discrete-event model of SGLang 0.5.23's scheduler loop on a simulated clock. The order of events is
# SGLang's: ``event_loop_overlap`` launches round N (``run_batch`` -> ``forward_batch_generation`` ->
# ``activate_step_by_batch``, the decision) and THEN processes round N-1's result
# (``copy_done.synchronize``, then ``_resolve_spec_v2_tokens`` -> ``on_verify_complete_cpu``); before
# deciding, ``run_batch`` waits for the previous round's verify (``FutureMap.resolve_seq_lens_cpu``,
# published between verify and draft-extend) only when an attention backend needs CPU sequence lengths
# (``needs_cpu_seq_lens``: True by default, e.g. FlashInfer; False for FA3, Triton, TRT-LLM MHA).
# ``event_loop_normal`` runs and processes each round before the next. The GPU runs rounds back to back; a
# round's GPU time depends on its depth and batch size.
# The adapter (real SpecPolicyParams behind SGLang's real AdaptiveController) must report each round's time
# with that round's depth and accepted drafts, whichever loop runs.

_CPU_S = 0.0004  # scheduler work per iteration (small: the GPU is the bottleneck, as in steady serving)


def _gpu_parts(depth: int, bs: int) -> tuple[float, float]:
    """(draft + verify, draft-extend) seconds of one round; distinct for every (depth, batch size) used."""
    return 0.004 + 0.003 * depth + 0.0001 * bs, 0.002 + 0.0015 * depth + 0.00003 * bs


def _run_loop(
    params: Any,
    ctl: Any,
    worker: FakeWorker,
    clock: list[float],
    plan: list[Any],
    *,
    overlap: bool,
    sync: bool,
) -> list[tuple[int | None, float | None]]:
    """Run ``plan`` (decode batch sizes; "prefill" for a prefill batch) through the modelled loop. Returns,
    per decision, what the model says the latest round with results was: (its depth, its time) where the
    time is the span from the end of the GPU work before it to its own end (None after a prefill or for the
    first round)."""
    from types import SimpleNamespace

    scheduler = SimpleNamespace(waiting_queue=[])
    gpu_free = 0.0  # when the GPU finishes everything launched so far
    prev_kind: str | None = None
    pending: list[dict[str, Any]] = []  # launched, result not processed yet (overlap keeps one)
    known: tuple[int | None, float | None] = (None, None)  # latest processed round: depth, time
    expected: list[tuple[int | None, float | None]] = []

    def process(item: dict[str, Any]) -> None:
        nonlocal known
        clock[0] = max(clock[0], item["end"]) + _CPU_S  # copy_done.synchronize(), then result processing
        if item["kind"] == "decode":
            bs = item["bs"]
            # odd batch sizes accept nothing (the rule policy then picks depth 1), even ones accept some
            accepted = [0 if bs % 2 else min(item["depth"], 1 + i % 3) for i in range(bs)]
            ctl.on_verify_complete(accepted, bs)
            known = (item["depth"], item["time"])

    for entry in plan:
        clock[0] += _CPU_S  # ingest requests, get_next_batch_to_run
        kind = "prefill" if entry == "prefill" else "decode"
        bs = 0 if kind == "prefill" else int(entry)
        mode = SimpleNamespace(is_decode=lambda kind=kind: kind == "decode")
        reqs = [SimpleNamespace(seqlen=100 + i) for i in range(bs)]
        params.note_batch(scheduler, SimpleNamespace(forward_mode=mode, reqs=reqs))  # the run_batch hook
        item: dict[str, Any] = {"kind": kind, "bs": bs}
        if kind == "decode":
            if overlap and sync and pending and pending[-1]["kind"] == "decode":
                clock[0] = max(clock[0], pending[-1]["published"])  # resolve_seq_lens_cpu
            expected.append(known)
            ctl.activate_step_by_batch(bs)  # the decision, on the real controller
            item["depth"] = worker.speculative_num_steps
            main, extend = _gpu_parts(item["depth"], bs)
        else:
            main, extend = 0.03, 0.0
        start = max(clock[0], gpu_free)
        item["published"] = start + main
        item["end"] = start + main + extend
        item["time"] = item["end"] - gpu_free if prev_kind == "decode" and gpu_free > 0 else None
        if overlap and item["time"] is not None:  # the GPU never idles: the span is the round's own GPU time
            assert item["time"] == pytest.approx(main + extend, abs=1e-12)
        gpu_free = item["end"]
        prev_kind = kind
        clock[0] += _CPU_S  # launching is asynchronous
        if overlap:
            if pending:
                process(pending.pop())
            pending.append(item)
        else:
            process(item)
    return expected


@pytest.mark.parametrize(
    ("overlap", "sync"),
    [(True, True), (True, False), (False, False)],
    ids=["overlap-waits-on-verify", "overlap-no-wait", "no-overlap"],
)
def test_step_time_describes_the_same_round_as_depth_and_acceptance(
    tmp_path: Path, rule_policy: None, monkeypatch: pytest.MonkeyPatch, overlap: bool, sync: bool
) -> None:
    from specpolicy.adapters.sglang import v0_5_23

    clock = [100.0]
    monkeypatch.setattr(v0_5_23, "_clock", lambda: clock[0])
    cfg = _adaptive_config(tmp_path, [0, 1, 3])
    worker = _worker_with_sglang_controller(cfg, initial=3)
    params = v0_5_23.attach(worker, AdapterSettings.build({"name": "rule_for_tests"}, metrics=False), cfg)
    assert params is not None
    _start(worker)
    # the rule policy runs 0 for a batch >= 16, else 3, or 1 after a known round that accepted nothing
    plan: list[Any] = [4, 20, 4, 1, 6, 24, 2, "prefill", 8, 32, 3, 1, 5, 16, 4, 2]
    expected = _run_loop(params, worker.adaptive_controller, worker, clock, plan, overlap=overlap, sync=sync)
    seen = params.runtime.policy.seen  # type: ignore[attr-defined]
    assert len(seen) == len(expected) == len(plan) - 1
    assert len({k for k, _ in expected if k is not None}) == 3  # all three depths ran and were reported
    timed = 0
    for stats, (depth, time_s) in zip(seen, expected, strict=True):
        assert stats.last_num_steps == (depth or 0)
        if time_s is None:
            assert stats.last_step_time_s is None
        else:
            timed += 1
            assert stats.last_step_time_s == pytest.approx(time_s, abs=1e-9), (depth, time_s)
    assert timed >= 10
