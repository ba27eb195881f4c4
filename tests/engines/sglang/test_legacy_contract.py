"""Contract tests for the legacy adapter against the installed SGLang (0.5.10.post1 / 0.5.12.post1).

Every hook target exists with the parameters the adapter relies on; installing patches exactly those and can
be undone; the launch plan and the scheduler entry carry the settings into spawned processes; attaching to a
worker builds the one-token target state under the right server-args override, logs the live path, and refuses
configurations it cannot run with the reason.
"""

from __future__ import annotations

import importlib
import logging
import pickle
from types import SimpleNamespace
from typing import Any

import legacy_support as ls
import pytest
import torch
from conftest import requires_version

from specpolicy.adapters import _patch as patching
from specpolicy.adapters.sglang import legacy
from specpolicy.adapters.sglang.legacy import hooks, scheduler_entry
from specpolicy.adapters.sglang.legacy.gpu_timer import GpuStepTimer
from specpolicy.adapters.sglang.legacy.one_token import FieldNames, build_one_token_target
from specpolicy.adapters.sglang.legacy.targets import (
    SUPPORTED_VERSIONS,
    TARGETS,
    check_targets,
    release_tuple,
)
from specpolicy.runtime.settings import AdapterSettings

LEGACY = requires_version(*SUPPORTED_VERSIONS)
install_mod = importlib.import_module("specpolicy.adapters.sglang.legacy.install")  # the package shadows it


@pytest.fixture
def clean() -> Any:
    patching.unwrap_all()
    install_mod._STATE.__init__()
    yield
    patching.unwrap_all()
    install_mod._STATE.__init__()


def _settings(**kw: Any) -> AdapterSettings:
    return AdapterSettings.build(kw.pop("policy", "static"), metrics=False, **kw)


@LEGACY
def test_every_hook_target_exists_with_the_expected_parameters(sglang_version: str) -> None:
    assert check_targets(sglang_version) == []


@LEGACY
def test_the_other_release_table_does_not_match(sglang_version: str) -> None:
    other = next(v for v in SUPPORTED_VERSIONS if v != sglang_version)
    problems = check_targets(other)
    assert problems, "the two releases' tables must differ, or the per-version table is pointless"
    assert any("verify" in p or "resolve_spec_overlap" in p or "fields" in p for p in problems)


@LEGACY
def test_field_names_follow_the_release(sglang_version: str) -> None:
    names = FieldNames.detect()
    if sglang_version == "0.5.12.post1":
        assert names == FieldNames(
            "bonus_tokens", "retrieve_", "num_correct_drafts_per_req_cpu", "num_correct_drafts", True
        )
    else:
        assert names == FieldNames(
            "verified_id", "retrive_", "accept_length_per_req_cpu", "num_accepted_tokens", False
        )


@LEGACY
def test_install_wraps_each_target_once_and_can_be_undone(sglang_version: str, clean: Any) -> None:
    from sglang.srt.managers.overlap_utils import FutureMap
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.speculative.eagle_worker import EAGLEWorker
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2

    originals = {
        (c, n): c.__dict__.get(n)
        for c, n in [
            (EAGLEWorker, "forward_batch_generation"),
            (EAGLEWorker, "verify"),
            (EAGLEWorker, "draft"),
            (EAGLEWorkerV2, "forward_batch_generation"),
            (EAGLEWorkerV2, "verify"),
            (EagleDraftWorker, "draft"),
            (Scheduler, "run_batch"),
            (Scheduler, "maybe_init_draft_worker"),
            (FutureMap, "store_to_map_for_new_batch"),
            (FutureMap, "resolve_future"),
        ]
    }
    info = legacy.install(_settings())
    assert info.installed and info.version == sglang_version
    resolve = (
        "_resolve_spec_overlap_tokens"
        if sglang_version == "0.5.12.post1"
        else "_resolve_spec_overlap_token_ids"
    )
    assert f"sglang.srt.managers.scheduler.Scheduler.{resolve}" in info.patched
    assert len(info.patched) == len(originals) + 1
    for (cls, name), orig in originals.items():
        wrapped = cls.__dict__[name]
        assert wrapped is not orig and wrapped.__specpolicy_wrapped__ is orig
    assert hasattr(getattr(Scheduler, resolve), "__specpolicy_wrapped__")
    again = legacy.install(_settings(policy="static"))
    assert (
        again is info
        and EAGLEWorker.__dict__["verify"].__specpolicy_wrapped__ is originals[(EAGLEWorker, "verify")]
    )
    patching.unwrap_all()
    for (cls, name), orig in originals.items():
        assert cls.__dict__.get(name) is orig
    assert resolve not in Scheduler.__dict__  # inherited from the output-processor mixin again


@LEGACY
def test_unsupported_release_is_refused_with_the_supported_list(
    monkeypatch: pytest.MonkeyPatch, clean: Any
) -> None:
    monkeypatch.setattr(install_mod, "sglang_version", lambda: "0.5.9")
    with pytest.raises(legacy.InstallError, match=r"0\.5\.9 .*supported: 0\.5\.10\.post1, 0\.5\.12\.post1"):
        legacy.install(_settings())
    info = legacy.install(_settings(on_install_failure="warn"))
    assert not info.installed and "0.5.9" in info.reason
    assert patching.ORIGINALS == {}


@LEGACY
def test_allow_untested_installs_with_a_loud_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, sglang_version: str, clean: Any
) -> None:
    fake = "0.5.12.post2" if sglang_version == "0.5.12.post1" else "0.5.10.post2"
    monkeypatch.setattr(install_mod, "sglang_version", lambda: fake)
    with caplog.at_level(logging.WARNING, logger="specpolicy.sglang.legacy"):
        info = legacy.install(_settings(allow_untested=True))
    assert info.installed
    assert any("UNTESTED" in r.message and fake in r.message for r in caplog.records)


def test_release_tuple_orders_releases() -> None:
    assert release_tuple("0.5.10.post1") < release_tuple("0.5.11") <= release_tuple("0.5.12.post1")
    assert release_tuple("0.5.9") < release_tuple("0.5.10")


@LEGACY
def test_prepare_launch_carries_the_settings_to_spawned_processes(sglang_version: str) -> None:
    settings = _settings(policy='{"name": "static", "num_steps": 0}', trace_path="/tmp/t.jsonl")
    plan = legacy.prepare_launch(settings)
    assert AdapterSettings.from_env(plan.env) == settings
    assert plan.route == ("plugin+scheduler-func" if sglang_version == "0.5.12.post1" else "scheduler-func")
    # spawn pickles the scheduler target by reference: it must be importable at module level
    assert (
        pickle.loads(pickle.dumps(plan.run_scheduler_process_func)) is scheduler_entry.run_scheduler_process
    )
    assert plan.warnings == ()


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"speculative_algorithm": None}, "no --speculative-algorithm"),
        ({"speculative_algorithm": "NGRAM"}, "NGRAM is not supported"),
        ({"enable_dp_attention": True}, "--enable-dp-attention"),
        ({"pp_size": 2}, "--pp-size"),
        ({"speculative_adaptive": True}, "--speculative-adaptive"),
    ],
)
def test_prepare_launch_refuses_what_it_cannot_run(overrides: dict[str, Any], fragment: str) -> None:
    sa = ls.make_server_args()
    for k, v in overrides.items():
        setattr(sa, k, v)
    with pytest.raises(legacy.InstallError, match=fragment):
        legacy.prepare_launch(_settings(), sa)
    plan = legacy.prepare_launch(_settings(on_install_failure="warn"), sa)
    assert any(fragment in w for w in plan.warnings)
    assert legacy.server_args_problems(ls.make_server_args()) == []


@LEGACY
def test_scheduler_entry_installs_before_running_sglang(monkeypatch: pytest.MonkeyPatch, clean: Any) -> None:
    import sglang.srt.managers.scheduler as scheduler_module

    seen: list[Any] = []

    def fake_run(server_args: Any, port_args: Any, *args: Any, **kwargs: Any) -> str:
        seen.append(((server_args, port_args, *args), kwargs, bool(patching.ORIGINALS)))
        return "ran"

    monkeypatch.setattr(scheduler_module, "run_scheduler_process", fake_run)
    monkeypatch.setenv("SPECPOLICY_POLICY", "static")
    monkeypatch.setenv("SPECPOLICY_METRICS", "false")
    assert scheduler_entry.run_scheduler_process(1, "two", pipe_writer=None) == "ran"
    assert seen == [((1, "two"), {"pipe_writer": None}, True)]


# ---------------------------------------------------------------------------------------------- attach


class FakeGraphRunner:
    """Stands in for CudaGraphRunner (capture needs a GPU); records the sizes it was built for."""

    built: list[dict[str, Any]] = []
    fail = False

    def __init__(self, model_runner: Any, **kwargs: Any) -> None:
        if FakeGraphRunner.fail:
            raise RuntimeError("capture failed")
        sa = model_runner.server_args
        FakeGraphRunner.built.append(
            {**kwargs, "sa_tokens": sa.speculative_num_draft_tokens, "attn": model_runner.attn_backend}
        )


def _model_runner(sa: Any) -> Any:
    mr = SimpleNamespace(
        server_args=sa, attn_backend="launch-attn", graph_runner=None, init_new_workspace=False
    )
    built: list[tuple[int, int]] = []

    def get_backend(init_new_workspace: bool = False) -> str:
        built.append((sa.speculative_num_steps, sa.speculative_num_draft_tokens))
        mr.init_new_workspace = init_new_workspace
        return f"attn-for-{sa.speculative_num_draft_tokens}-tokens"

    mr._get_attention_backend = get_backend
    mr.graph_runner = object.__new__(FakeGraphRunner)
    mr.built = built
    return mr


def _scheduler_with(worker: Any, sa: Any) -> Any:
    return SimpleNamespace(draft_worker=worker, server_args=sa, tp_rank=0)


def _v1_worker(names: FieldNames) -> Any:
    setup = ls.make_v1_worker(names)
    setup.worker.target_worker.model_runner = _model_runner(setup.server_args)
    return setup


def test_one_token_target_is_built_for_one_token_and_restores_the_launch_sizes() -> None:
    FakeGraphRunner.built.clear()
    FakeGraphRunner.fail = False
    sa = ls.make_server_args(steps=5)
    mr = _model_runner(sa)
    launch_runner = mr.graph_runner
    ot = build_one_token_target(mr, sa, graphs=True)
    assert mr.built == [(0, 1)]
    assert ot.attn_backend == "attn-for-1-tokens" and ot.mode == "graph"
    (b,) = FakeGraphRunner.built
    assert b["attn"] == "attn-for-1-tokens" and b["sa_tokens"] == 1
    assert (sa.speculative_num_steps, sa.speculative_num_draft_tokens) == (5, 6)
    assert (mr.attn_backend, mr.graph_runner, mr.init_new_workspace) == ("launch-attn", launch_runner, False)


def test_graph_capture_failure_falls_back_to_eager(caplog: pytest.LogCaptureFixture) -> None:
    FakeGraphRunner.fail = True
    try:
        sa = ls.make_server_args()
        with caplog.at_level(logging.WARNING, logger="specpolicy.sglang.legacy"):
            ot = build_one_token_target(_model_runner(sa), sa, graphs=True)
    finally:
        FakeGraphRunner.fail = False
    assert ot.mode == "eager" and ot.graph_runner is None
    assert "eagerly" in caplog.text
    sa.disable_cuda_graph = True
    assert build_one_token_target(_model_runner(sa), sa, graphs=True).mode == "eager"


@pytest.mark.parametrize("eagle", [False, True])
def test_decode_target_is_built_as_a_speculation_free_engine_builds_it(eagle: bool) -> None:
    """Backend and graphs are built with the runner's spec_algorithm NONE (decode shapes), an EAGLE target's
    graphs capture hidden states, and the launch state is restored afterwards."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from specpolicy.adapters.sglang.legacy.decode_target import build_decode_target

    seen: list[tuple[Any, Any, bool]] = []

    class Runner:
        def __init__(self, model_runner: Any, attn_backend: Any = None) -> None:
            sa = model_runner.server_args
            seen.append((model_runner.spec_algorithm, attn_backend, sa.enable_return_hidden_states))

    sa = ls.make_server_args()
    sa.enable_return_hidden_states = False
    mr = _model_runner(sa)
    mr.spec_algorithm = SpeculativeAlgorithm.EAGLE
    mr.graph_runner = object.__new__(Runner)
    launch = mr.graph_runner
    mode = CaptureHiddenMode.FULL if eagle else CaptureHiddenMode.NULL
    dt = build_decode_target(mr, sa, graphs=True, capture_hidden_mode=mode)
    assert dt.mode == "graph" and dt.capture_hidden_mode == mode
    assert seen == [(SpeculativeAlgorithm.NONE, dt.attn_backend, eagle)]
    assert mr.spec_algorithm == SpeculativeAlgorithm.EAGLE and mr.graph_runner is launch
    assert mr.attn_backend == "launch-attn" and sa.enable_return_hidden_states is False


@LEGACY
def test_attach_logs_the_live_path_policy_and_depths(
    sglang_version: str, caplog: pytest.LogCaptureFixture, clean: Any
) -> None:
    legacy.install(AdapterSettings.build('{"name": "static", "num_steps": 0}', metrics=True))
    names = FieldNames.detect()
    setup = _v1_worker(names)
    with caplog.at_level(logging.INFO, logger="specpolicy.sglang.legacy"):
        rt = install_mod.attach(_scheduler_with(setup.worker, setup.server_args))
    assert rt is not None and rt.path == "v1" and rt.launch_depth == 3
    assert getattr(setup.worker, hooks.RT) is rt
    line = next(r.message for r in caplog.records if "live path" in r.message)
    assert "v1 worker (EAGLEWorker, non-overlap scheduling)" in line
    assert "static" in line and "policy depths [0] run as [0]" in line and "CUDA graph" in line
    assert rt.begin_decode(2, 10) is True  # static 0: every step off
    # The metrics read the off path's running totals: a forced step (e.g. logprobs) is counted as such.
    rt.end_decode()
    assert rt.begin_decode(2, 10, forced_on=True) is False
    counts = setup.worker._specpolicy_runtime.metrics.engine_counts()
    assert (counts["decode_steps"], counts["off_steps"], counts["forced_steps"]) == (2, 1, 1)


@LEGACY
def test_attach_v2_shares_the_runtime_with_the_draft_worker(clean: Any) -> None:
    legacy.install(_settings())
    setup = ls.make_v2_worker()
    setup.worker._target_worker.model_runner = _model_runner(setup.server_args)
    rt = install_mod.attach(_scheduler_with(setup.worker, setup.server_args))
    assert rt is not None and rt.path == "v2"
    assert getattr(setup.draft_worker, hooks.RT) is rt


@pytest.mark.parametrize("clock", ["auto", "host"])
@LEGACY
def test_attach_v2_times_steps_with_cuda_events_unless_the_host_clock_is_asked_for(
    clock: str, clean: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[object] = []

    def fake_timer(worker: Any) -> Any:  # the worker has no CUDA device here
        made.append(worker)
        return GpuStepTimer(object)

    monkeypatch.setattr(install_mod, "_gpu_timer", fake_timer)
    legacy.install(AdapterSettings.build("static", step_clock=clock))
    setup = ls.make_v2_worker()
    setup.worker._target_worker.model_runner = _model_runner(setup.server_args)
    rt = install_mod.attach(_scheduler_with(setup.worker, setup.server_args))
    assert rt is not None and rt.path == "v2"
    assert (rt.gpu_timer is not None, len(made)) == ((True, 1) if clock == "auto" else (False, 0))


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda sa, w: setattr(sa, "enable_dp_attention", True), "attention data parallelism"),
        (lambda sa, w: setattr(sa, "pp_size", 2), "pipeline parallelism"),
        (lambda sa, w: setattr(sa, "speculative_adaptive", True), "--speculative-adaptive"),
        (lambda sa, w: setattr(sa, "speculative_algorithm", "NGRAM"), "not supported"),
    ],
)
@LEGACY
def test_attach_refuses_configurations_it_cannot_run(change: Any, fragment: str, clean: Any) -> None:
    legacy.install(_settings())
    setup = _v1_worker(FieldNames.detect())
    change(setup.server_args, setup.worker)
    with pytest.raises(legacy.InstallError, match=fragment):
        install_mod.attach(_scheduler_with(setup.worker, setup.server_args))
    assert getattr(setup.worker, hooks.RT, None) is None


@LEGACY
def test_attach_in_warn_mode_leaves_sglang_alone(caplog: pytest.LogCaptureFixture, clean: Any) -> None:
    legacy.install(_settings(on_install_failure="warn"))
    with caplog.at_level(logging.ERROR, logger="specpolicy.sglang.legacy"):
        assert (
            install_mod.attach(SimpleNamespace(draft_worker=object(), server_args=ls.make_server_args()))
            is None
        )
        assert (
            install_mod.attach(SimpleNamespace(draft_worker=None, server_args=ls.make_server_args())) is None
        )
    assert (
        "NOT ACTIVE" in caplog.text and "not supported" in caplog.text and "nothing to control" in caplog.text
    )


@LEGACY
def test_scheduler_hook_attaches_after_sglang_built_the_worker() -> None:
    order: list[str] = []

    def orig(self: Any) -> None:
        order.append("sglang builds the worker")

    wrapped = hooks.scheduler_init_draft(orig, lambda sched: order.append("attach"))
    wrapped(object())
    assert order == ["sglang builds the worker", "attach"]


def test_waiting_queue_reaches_the_runtime() -> None:
    from specpolicy.policies.static import StaticConfig, StaticPolicy

    rt = ls.legacy_runtime(StaticPolicy(StaticConfig(num_steps=3)), launch_depth=3, path="v2")
    worker = SimpleNamespace(**{hooks.RT: rt})
    run_batch = hooks.scheduler_run_batch(lambda self, batch: "ran")
    sched = SimpleNamespace(draft_worker=worker, waiting_queue=[1, 2, 3, 4])
    assert run_batch(sched, None) == "ran" and rt.num_waiting == 4


def test_pad_v2_result_gives_the_launch_stride() -> None:
    from specpolicy.adapters.sglang.legacy.one_token import pad_v2_result

    res = SimpleNamespace(
        next_token_ids=torch.tensor([7, 8]),
        logits_output=SimpleNamespace(hidden_states=torch.tensor([[1.0], [2.0]])),
        speculative_num_draft_tokens=1,
    )
    pad_v2_result(res, 3, FieldNames("bonus_tokens", "retrieve_", "x", "y", True))
    assert res.next_token_ids.tolist() == [7, 7, 7, 8, 8, 8]
    assert res.logits_output.hidden_states.view(-1).tolist() == [1, 1, 1, 2, 2, 2]
    assert res.speculative_num_draft_tokens == 3


def test_tables_cover_both_supported_releases() -> None:
    assert set(TARGETS) == set(SUPPORTED_VERSIONS)
