"""A specpolicy policy driving SGLang's REAL AdaptiveController through the v2 route (0.5.13+; 0.5.23 is
what ``pip install '.[sglang]'`` installs).

The worker is a real ``EAGLEWorkerV2`` (built with ``object.__new__``, as in ``test_v2_off_step``) whose
target and drafter are ``v2_support``'s fakes on SGLang's real types; its two GPU-only members that the
controller calls (``build_adaptive_runtime_state``, ``apply_runtime_state``) record what they are asked and
return SGLang's own ``SpecRuntimeState``. Attaching runs the route's own ``init_cuda_graphs`` wrapper around
the controller part of SGLang's ``init_cuda_graphs`` (register the launch state, then ``init_states``); the
decode graphs are stand-ins (CPU). Decisions go through the route's ``forward_batch_generation`` wrapper,
whose speculative branch is a stand-in for SGLang's step that calls the worker's (wrapped) real
``activate_step_by_batch``; feedback through the worker's (wrapped) real ``on_verify_complete_cpu``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import v2_support as vs
from conftest import requires_version
from test_v2_off_step import Engine, _single_process  # noqa: F401 - the fixture applies here too

from specpolicy import SpecMode, StepStats
from specpolicy.errors import ConfigError
from specpolicy.policy import PolicyConfig, PolicyEntry
from specpolicy.runtime.runtime import AdapterInstallError
from specpolicy.runtime.settings import AdapterSettings

pytestmark = requires_version("0.5.17", "0.5.23")

GRAPH_BS = [1, 2, 4, 8, 16, 32]


def _install() -> Any:
    """The route's install module (the package re-exports its ``install`` function under the same name)."""
    import importlib

    return importlib.import_module("specpolicy.adapters.sglang.v2.install")


@pytest.fixture(autouse=True)
def _installed(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The route's hooks installed on the real classes, no settings from the environment."""
    install = _install()

    for var in ("SPECPOLICY_CONFIG", "SPECPOLICY_POLICY"):
        monkeypatch.delenv(var, raising=False)
    install.install(AdapterSettings.build("static", metrics=False))
    monkeypatch.setattr(install._STATE, "settings", None)
    monkeypatch.setattr(
        install,
        "build_decode_target",
        lambda mr, graphs, capture_hidden_mode: _decode_target(capture_hidden_mode),
    )
    monkeypatch.setattr(install, "_hidden_window", lambda worker, settings: _window())
    return install


def _window() -> Any:
    from specpolicy.adapters.hidden_window import HiddenWindow

    return HiddenWindow(rows=64, window=16, width=vs.HIDDEN, dtype=torch.float32, device="cpu")


def _decode_target(capture: Any) -> Any:
    from specpolicy.adapters.sglang.legacy.decode_target import DecodeTarget

    return DecodeTarget(
        SimpleNamespace(name="decode-attn"),
        SimpleNamespace(name="decode-graph"),
        capture,
        graph_attr="decode_cuda_graph_runner",
    )


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
    from specpolicy import registry as policy_mod

    entry = PolicyEntry("rule_for_tests", _RuleConfig, _Rule)
    monkeypatch.setitem(policy_mod._registry().entries, "rule_for_tests", entry)


def _adaptive_config(tmp_path: Path, steps: list[int], extra: dict[str, Any] | None = None) -> str:
    path = tmp_path / f"adaptive-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps({"1": {"candidate_steps": steps}, **(extra or {})}))
    return str(path)


def _controller(worker: Any, cfg: str, initial: int) -> Any:
    """SGLang's controller, built as the release's ``EAGLEWorkerV2.__init__`` builds it (0.5.20+: around
    SGLang's own policy object; before: from the config path)."""
    import inspect

    from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    if "policy" in inspect.signature(AdaptiveController).parameters:
        return AdaptiveController(worker, AdaptiveSpeculativeParams(initial_steps=initial, cfg_path=cfg))
    return AdaptiveController(worker, config_path=cfg)


class Served:
    """An ``Engine`` (target, drafter, requests) whose worker runs SGLang's real AdaptiveController."""

    def __init__(self, cfg: str | None, *, initial: int = 3, prompts: dict[int, int] | None = None) -> None:
        self.e = Engine(eagle=True, prompts=prompts or {1: 5, 2: 7})
        w = self.e.worker
        w.server_args = SimpleNamespace(
            speculative_algorithm="EAGLE",
            speculative_num_steps=initial,
            speculative_adaptive=cfg is not None,
            speculative_adaptive_config=cfg,
            disable_overlap_schedule=False,
            disable_cuda_graph=True,
            page_size=1,
        )
        w.speculative_num_steps = initial
        w.speculative_num_draft_tokens = initial + 1
        w._hosts_draft = True
        w.topk = 1
        self.built: list[tuple[int, list[int] | None]] = []
        self.applied: list[int] = []
        w.build_adaptive_runtime_state = self._build
        w.apply_runtime_state = self._apply
        w.adaptive_controller = None if cfg is None else _controller(w, cfg, initial)
        self.worker = w
        self.spec_rounds: list[int] = []  # the depth SGLang's own step ran with, per speculative round

    def _build(
        self, speculative_num_steps: int, speculative_num_draft_tokens: int, cuda_graph_bs: Any = None
    ) -> Any:
        from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState

        self.built.append((speculative_num_steps, cuda_graph_bs))
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

    def _apply(self, state: Any) -> None:
        self.worker.speculative_num_steps = state.speculative_num_steps
        self.worker.speculative_num_draft_tokens = state.speculative_num_draft_tokens
        self.applied.append(state.speculative_num_steps)

    def _sglang_init_cuda_graphs(self, worker: Any) -> None:
        """The controller part of ``EAGLEWorkerV2.init_cuda_graphs``: the launch state, then the others."""
        ctl = worker.adaptive_controller
        if ctl is not None:
            ctl.register(self._build(worker.speculative_num_steps, worker.speculative_num_steps + 1))
            ctl.init_states(cuda_graph_bs=GRAPH_BS)

    def start(self) -> Any:
        """SGLang's ``init_cuda_graphs`` through the route's wrapper; the attached state, or None."""
        from specpolicy.adapters.sglang.v2 import step

        install = _install()
        install._init_cuda_graphs_wrapper(self._sglang_init_cuda_graphs)(self.worker)
        st = getattr(self.worker, step.ATTR, None)
        if st is not None:
            self.e.st = st
        return st

    def round(self, feedback: list[int] | None = None) -> str:
        """One decode round through the route's ``forward_batch_generation``; "off" or "spec"."""
        from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

        from specpolicy.adapters.sglang.v2 import step

        def sglang_step(worker: Any, batch: Any, **kwargs: Any) -> Any:
            EAGLEWorkerV2.activate_step_by_batch(worker, int(batch.seq_lens.shape[0]))  # SGLang's own call
            self.spec_rounds.append(worker.speculative_num_steps)
            assert self.e.expected_kv_problems() == [], "the drafter is exact before SGLang's own step"
            return "spec"

        batch = self.e.batch()
        out = step.forward_wrapper(sglang_step)(self.worker, batch, on_publish=lambda lens: None)
        n = len(self.e.reqs)
        if out == "spec":
            drafts = feedback if feedback is not None else [1] * n
        else:
            self.e.seq = out.new_seq_lens.tolist()
            self.e.bonus = out.next_draft_input.bonus_tokens.tolist()
            for r, t in zip(self.e.reqs, out.next_token_ids.tolist(), strict=True):
                r.output_ids.append(t)
            drafts = [0] * n
        EAGLEWorkerV2.on_verify_complete_cpu(self.worker, drafts, batch_size=n)
        return "spec" if out == "spec" else "off"


def _resize(s: Served, n: int) -> None:
    """Give the engine ``n`` running requests (rows 1..n), all exact in the drafter."""
    fresh = Engine(eagle=True, prompts={r: 4 + r % 3 for r in range(1, n + 1)})
    s.e.reqs, s.e.seq, s.e.bonus = fresh.reqs, fresh.seq, fresh.bonus
    s.e.topk_p, s.e.topk_index, s.e.hidden = fresh.topk_p, fresh.topk_index, fresh.hidden
    s.e.worker.req_to_token_pool = fresh.worker.req_to_token_pool
    s.e.draft.kv.update(fresh.draft.kv)
    s.e.st.lag.on_extend(s.e.reqs)


def test_the_controller_builds_the_policys_depths_and_the_decode_step_serves_depth_0(
    tmp_path: Path, rule_policy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    install = _install()

    cfg = _adaptive_config(tmp_path, [0, 1, 3, 5])  # the user's own config, 0 included
    s = Served(cfg, initial=3)
    monkeypatch.setattr(
        install._STATE, "settings", AdapterSettings.build({"name": "rule_for_tests"}, metrics=False)
    )
    st = s.start()
    assert st is not None and st.controller is s.worker.adaptive_controller
    # states for the policy's speculative depths (launch 3 registered first, then 1); none for depth 0,
    # none for 5 (configured, never chosen); every depth at every captured batch size
    assert [b[0] for b in s.built] == [3, 1] and s.built[1][1] == GRAPH_BS
    assert sorted(s.worker.adaptive_controller._states) == [1, 3]
    assert s.worker.adaptive_controller.params is st.params and st.params.candidate_steps == [1, 3]

    kinds = [s.round([0, 0]), s.round([1, 0])]  # two requests: depth 3, then 1 after no acceptance
    _resize(s, 20)
    drafts_before = len(s.e.draft.forwards)
    kinds.append(s.round())  # bs 20 >= 16: off
    off_call = s.e.target.calls[-1]
    assert len(s.e.draft.forwards) == drafts_before  # nothing of the drafter while off
    _resize(s, 2)
    kinds.append(s.round([1, 1]))  # after an off round (no acceptance): 3
    assert kinds == ["spec", "spec", "off", "spec"]
    assert s.spec_rounds == [3, 1, 3]
    assert off_call["forward_mode"] == ForwardMode.DECODE and off_call["graph_runner"] == "decode-graph"
    assert s.applied == [3, 1, 3]  # start-up, then the switches; never a steps=0 state
    assert st.off_steps == 1
    seen = st.params.runtime.policy.seen  # type: ignore[attr-defined]
    assert [x.batch_size for x in seen] == [2, 2, 20, 2]
    assert (seen[1].last_num_steps, list(seen[1].accepted_draft_tokens)) == (3, [0, 0])
    assert (seen[3].last_num_steps, seen[3].accepted_draft_tokens) == (0, None)  # off is not zero acceptance


def _req() -> Any:
    """A request as far as SGLang's result processing touches it (a Req needs a tokenizer and a KV pool)."""
    return SimpleNamespace(
        is_retracted=False,
        finished=lambda: False,
        grammar=None,
        kv=SimpleNamespace(kv_committed_len=10),
        spec_verify_ct=0,
        spec_num_correct_drafts=0,
        update_spec_correct_drafts_histogram=lambda n: None,
    )


@requires_version("0.5.23")
def test_acceptance_reaches_the_policy_through_the_real_scheduler_result_code(
    tmp_path: Path, rule_policy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SGLang's own ``_resolve_spec_v2_tokens`` turns a result into per-request tokens and calls
    ``model_worker.on_verify_complete_cpu`` (the route's wrapper of the real method). Checked for a depth-3
    round and for the result of the route's decode step (one token per request, stride 1)."""
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
    from sglang.srt.managers.utils import GenerationBatchResult

    from specpolicy.adapters.sglang.v2 import step

    install = _install()

    cfg = _adaptive_config(tmp_path, [1, 3])
    s = Served(cfg, initial=3)
    monkeypatch.setattr(
        install._STATE, "settings", AdapterSettings.build({"name": "rule_for_tests"}, metrics=False)
    )
    st = s.start()
    assert st is not None
    processor = SimpleNamespace(
        metrics_reporter=SimpleNamespace(snapshot_spec_decode_metrics=lambda *a: None),
        model_worker=s.worker,
        advance_grammar_fsm=lambda *a: None,
    )
    reqs = SimpleNamespace(reqs=[_req(), _req()])
    assert st.params.get_steps_for_batch(2) == 3  # round 1, as the forward wrapper asks
    deep = GenerationBatchResult(
        next_token_ids=torch.tensor([11, 12, 13, 0, 21, 0, 0, 0]),  # stride 4: 3 tokens, then 1 token
        accept_lens=torch.tensor([3, 1]),
        speculative_num_draft_tokens=4,
    )
    assert SchedulerBatchResultProcessor._resolve_spec_v2_tokens(processor, deep, reqs) == [
        [11, 12, 13],
        [21],
    ]
    _resize(s, 20)  # 20 running requests: the rule turns speculation off
    batch = s.e.batch()
    assert st.params.get_steps_for_batch(20) == 0
    seen = st.params.runtime.policy.seen  # type: ignore[attr-defined]
    assert (seen[1].last_num_steps, list(seen[1].accepted_draft_tokens)) == (3, [2, 0])
    zero = step.off_step(s.worker, batch, st, None)  # what the decode step hands the scheduler
    reqs20 = SimpleNamespace(reqs=[_req() for _ in range(20)])
    tokens = SchedulerBatchResultProcessor._resolve_spec_v2_tokens(processor, zero, reqs20)
    assert tokens == [[t] for t in zero.next_token_ids.tolist()]  # one new token per request
    assert [r.kv.kv_committed_len for r in reqs20.reqs] == [11] * 20
    assert st.params.get_steps_for_batch(2) == 3
    assert (seen[2].last_num_steps, seen[2].accepted_draft_tokens) == (0, None)  # off is not zero acceptance


def test_overlap_feedback_is_matched_to_the_round_that_produced_it(
    tmp_path: Path, rule_policy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With overlap, round N+1 is decided before round N's acceptance arrives; depths must not be mixed up."""
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    install = _install()

    s = Served(_adaptive_config(tmp_path, [0, 1, 3]), initial=3)
    monkeypatch.setattr(
        install._STATE, "settings", AdapterSettings.build({"name": "rule_for_tests"}, metrics=False)
    )
    st = s.start()
    assert st is not None
    p, feed = st.params, EAGLEWorkerV2.on_verify_complete_cpu
    assert p.get_steps_for_batch(4) == 3  # round A
    assert p.get_steps_for_batch(32) == 0  # round B, decided before A's feedback
    feed(s.worker, [1, 2, 0, 1], batch_size=4)  # A's feedback
    p.get_steps_for_batch(4)  # round C sees A (depth 3) as the latest known round
    feed(s.worker, [0] * 32, batch_size=32)  # B's feedback: the decode step's zeros
    p.get_steps_for_batch(4)
    seen = p.runtime.policy.seen  # type: ignore[attr-defined]
    assert (seen[2].last_num_steps, list(seen[2].accepted_draft_tokens)) == (3, [1, 2, 0, 1])
    assert (seen[3].last_num_steps, seen[3].accepted_draft_tokens) == (0, None)


def test_policy_failure_runs_the_launch_depth_and_keeps_serving(
    tmp_path: Path, rule_policy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    install = _install()

    s = Served(_adaptive_config(tmp_path, [0, 1, 3]), initial=1)
    monkeypatch.setattr(
        install._STATE, "settings", AdapterSettings.build({"name": "rule_for_tests"}, metrics=False)
    )
    st = s.start()
    assert st is not None

    def broken(stats: StepStats) -> SpecMode:
        raise RuntimeError("boom")

    st.params.runtime.policy.decide = broken  # type: ignore[method-assign]
    _resize(s, 20)  # the rule would turn speculation off here; the failure runs the launch depth instead
    assert s.round() == "spec" and s.spec_rounds == [1]
    assert st.params.runtime.controller.errors == 1


def test_depth_outside_the_configured_candidates_is_refused_and_depth_0_needs_no_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    from specpolicy.adapters.sglang.v2 import step

    install = _install()

    cfg = _adaptive_config(tmp_path, [1, 3])
    two = {"name": "alternate", "depths": [0, 2]}
    monkeypatch.setattr(install._STATE, "settings", AdapterSettings.build(two, metrics=False))
    with pytest.raises(AdapterInstallError, match=r"depth\(s\) \[2\].*only prepared \[1, 3\]"):
        Served(cfg).start()
    # warn mode: SGLang keeps its own policy and serves without specpolicy
    warn = AdapterSettings.build(two, metrics=False, on_install_failure="warn")
    monkeypatch.setattr(install._STATE, "settings", warn)
    s = Served(cfg)
    assert s.start() is None and getattr(s.worker, step.ATTR, None) is None
    assert isinstance(s.worker.adaptive_controller.params, AdaptiveSpeculativeParams)
    # depth 0 is the decode step: a config without 0 serves "always off"
    monkeypatch.setattr(
        install._STATE, "settings", AdapterSettings.build({"name": "static", "num_steps": 0}, metrics=False)
    )
    s = Served(cfg)
    st = s.start()
    assert st is not None and s.round() == "off" and s.round() == "off" and s.spec_rounds == []


def test_settings_ride_in_the_adaptive_config_json(tmp_path: Path) -> None:
    """No settings at install time (the plugin found no SPECPOLICY_* variable): the worker's adaptive config
    carries them; without them SGLang is left exactly as it is."""
    from sglang.srt.speculative.adaptive_spec_params import (
        AdaptiveSpeculativeParams,
        resolve_candidate_steps_from_config,
    )

    from specpolicy.adapters.sglang.v2 import step

    ours = {"specpolicy": {"policy": {"name": "static", "num_steps": 0}, "metrics": False}}
    cfg = _adaptive_config(tmp_path, [0, 3], ours)
    assert resolve_candidate_steps_from_config(cfg) == [0, 3]  # SGLang routes on the integer keys only
    s = Served(cfg)
    st = s.start()
    assert st is not None and st.params.runtime.settings.policy.candidate_steps() == (0,)
    assert st.params.runtime.settings.metrics is False and [b[0] for b in s.built] == [3]
    assert s.round() == "off"

    plain = Served(_adaptive_config(tmp_path, [0, 3]))
    assert plain.start() is None and getattr(plain.worker, step.ATTR, None) is None
    assert isinstance(plain.worker.adaptive_controller.params, AdaptiveSpeculativeParams)
    assert [b[0] for b in plain.built] == [3, 0]  # SGLang's own controller, its own states, untouched
    assert Served(None).start() is None  # no adaptive config, nothing in the environment

    bad = _adaptive_config(tmp_path, [3], {"specpolicy": {"policy": {"name": "static", "num_steps": -1}}})
    with pytest.raises(ConfigError, match=r"static\.num_steps"):
        Served(bad).start()


def test_settings_from_the_environment_come_before_the_adaptive_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = AdapterSettings.build({"name": "static", "num_steps": 1}, metrics=False).to_env()
    monkeypatch.setenv("SPECPOLICY_CONFIG", env["SPECPOLICY_CONFIG"])
    ours = {"specpolicy": {"policy": {"name": "static", "num_steps": 0}, "metrics": False}}
    st = Served(_adaptive_config(tmp_path, [1, 3], ours)).start()
    assert st is not None and st.params.runtime.settings.policy.candidate_steps() == (1,)


def test_without_a_controller_the_policy_runs_on_off_at_the_launch_depth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No ``--speculative-adaptive`` (or a setup SGLang's controller refuses): the depths the policy asks
    for run at the launch depth, and 0 is still the decode step."""
    install = _install()
    policy = {"name": "alternate", "depths": [0, 1]}
    monkeypatch.setattr(install._STATE, "settings", AdapterSettings.build(policy, metrics=False))
    s = Served(None, initial=3)
    st = s.start()
    assert st is not None and st.controller is None and s.built == []
    assert [s.round() for _ in range(4)] == ["off", "spec", "off", "spec"]
    assert s.spec_rounds == [3, 3]


def test_trace_is_written_from_a_real_controller_run(
    tmp_path: Path, rule_policy: None, monkeypatch: pytest.MonkeyPatch, sglang_version: str
) -> None:
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    install = _install()
    from specpolicy.trace import read_trace

    trace = tmp_path / "steps.jsonl"
    settings = AdapterSettings.build({"name": "rule_for_tests"}, metrics=False, trace_path=trace)
    monkeypatch.setattr(install._STATE, "settings", settings)
    s = Served(_adaptive_config(tmp_path, [0, 1, 3]), initial=3)
    st = s.start()
    assert st is not None
    for bs in (4, 4, 32, 4):
        st.params.get_steps_for_batch(bs)
        EAGLEWorkerV2.on_verify_complete_cpu(s.worker, [1] * bs, batch_size=bs)
    st.params.close()
    records = list(read_trace(trace))
    assert [(r.batch_size, r.num_steps) for r in records] == [(4, 3), (4, 3), (32, 0), (4, 3)]
    # a round's time is the interval from the previous round's feedback to its own, written with the round it
    # describes; the first round has no earlier feedback to measure from
    assert records[0].step_time_s is None
    assert all(r.step_time_s is not None and r.step_time_s >= 0 for r in records[1:])
    header = json.loads(trace.read_text().splitlines()[0])
    assert header["kind"] == "header" and header["engine"] == "sglang"
    assert header["engine_version"] == sglang_version and header["off_step"] == "decode"
    assert "EAGLEWorkerV2" in header["path"] and header["policy"]["name"] == "rule_for_tests"
    assert header["engine_candidate_steps"] == [1, 3]


# --- step time paired with the round it describes --------------------------------------------------------
# A discrete-event model of SGLang's spec-v2 scheduler loop on a simulated clock. The order of events is
# SGLang's: ``event_loop_overlap`` launches round N (``run_batch`` -> ``forward_batch_generation``, where the
# route decides) and THEN processes round N-1's result (``copy_done.synchronize``, then
# ``_resolve_spec_v2_tokens`` -> ``on_verify_complete_cpu``); before deciding, ``run_batch`` waits for the
# previous round's verify (``FutureMap.resolve_seq_lens_cpu``, published between verify and draft-extend)
# only when an attention backend needs CPU sequence lengths (``needs_cpu_seq_lens``: True by default, e.g.
# FlashInfer; False for FA3, Triton, TRT-LLM MHA). ``event_loop_normal`` runs and processes each round
# before the next. The GPU runs rounds back to back; a round's GPU time depends on its depth and batch size.
# The route (its ``Scheduler.run_batch`` and ``on_verify_complete_cpu`` wrappers, the real bridge behind
# SGLang's controller) must report each round's time with that round's depth and accepted drafts, whichever
# loop runs.

_CPU_S = 0.0004  # scheduler work per iteration (small: the GPU is the bottleneck, as in steady serving)


def _gpu_parts(depth: int, bs: int) -> tuple[float, float]:
    """(draft + verify, draft-extend) seconds of one round; distinct for every (depth, batch size) used."""
    return 0.004 + 0.003 * depth + 0.0001 * bs, 0.002 + 0.0015 * depth + 0.00003 * bs


def _run_loop(
    s: Served, st: Any, clock: list[float], plan: list[Any], *, overlap: bool, sync: bool
) -> list[tuple[int | None, float | None]]:
    """Run ``plan`` (decode batch sizes; "prefill" for a prefill batch) through the modelled loop. Returns,
    per decision, what the model says the latest round with results was: (its depth, its time) where the
    time is the span from the end of the GPU work before it to its own end (None after a prefill or for the
    first round)."""
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    from specpolicy.adapters.sglang.v2 import step

    scheduler = SimpleNamespace(waiting_queue=[], model_worker=s.worker)
    run_batch = step.run_batch_wrapper(lambda sched, batch: None)
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
            EAGLEWorkerV2.on_verify_complete_cpu(s.worker, accepted, batch_size=bs)
            known = (item["depth"], item["time"])

    for entry in plan:
        clock[0] += _CPU_S  # ingest requests, get_next_batch_to_run
        kind = "prefill" if entry == "prefill" else "decode"
        bs = 0 if kind == "prefill" else int(entry)
        mode = SimpleNamespace(is_decode=lambda kind=kind: kind == "decode")
        reqs = [SimpleNamespace(seqlen=100 + i, rid=f"r{i}") for i in range(bs)]
        run_batch(scheduler, SimpleNamespace(forward_mode=mode, reqs=reqs))  # the route's run_batch wrapper
        item: dict[str, Any] = {"kind": kind, "bs": bs}
        if kind == "decode":
            if overlap and sync and pending and pending[-1]["kind"] == "decode":
                clock[0] = max(clock[0], pending[-1]["published"])  # resolve_seq_lens_cpu
            expected.append(known)
            item["depth"] = st.params.get_steps_for_batch(bs)  # the forward wrapper's decision call
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
    from specpolicy.adapters.sglang import adaptive

    install = _install()

    clock = [100.0]
    monkeypatch.setattr(adaptive, "_clock", lambda: clock[0])
    monkeypatch.setattr(
        install._STATE, "settings", AdapterSettings.build({"name": "rule_for_tests"}, metrics=False)
    )
    s = Served(_adaptive_config(tmp_path, [0, 1, 3]), initial=3)
    st = s.start()
    assert st is not None
    # the rule policy runs 0 for a batch >= 16, else 3, or 1 after a known round that accepted nothing
    plan: list[Any] = [4, 20, 4, 1, 6, 24, 2, "prefill", 8, 32, 3, 1, 5, 16, 4, 2]
    expected = _run_loop(s, st, clock, plan, overlap=overlap, sync=sync)
    seen = st.params.runtime.policy.seen  # type: ignore[attr-defined]
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
