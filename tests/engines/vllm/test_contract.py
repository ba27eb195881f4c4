"""Contract tests: every vLLM-internal name the adapter reads, overrides or calls, and the meaning it needs.

A vLLM release that renames or re-purposes one of these fails here, in CI, instead of in a user's server.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from _vllm_harness import K_MAX, RELEASE, VERSION, FakeRunner, add_request, build_scheduler, drive

from specpolicy.adapters.vllm import PolicyAsyncScheduler, PolicyScheduler


def params(fn: Any) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def test_scheduler_methods_the_adapter_overrides_keep_their_signatures() -> None:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    assert params(Scheduler._update_after_schedule) == ["scheduler_output"]
    assert params(AsyncScheduler._update_after_schedule) == ["scheduler_output"]
    assert params(Scheduler.make_spec_decoding_stats) == [
        "spec_decoding_stats",
        "num_draft_tokens",
        "num_accepted_tokens",
        "num_invalid_spec_tokens",
        "request_id",
    ]
    assert params(Scheduler.update_from_output) == ["scheduler_output", "model_runner_output"]
    assert params(Scheduler.shutdown) == []
    assert params(Scheduler.get_request_counts) == []
    # our overrides are the ones that run, on both bases
    for cls in (PolicyScheduler, PolicyAsyncScheduler):
        for name in ("_update_after_schedule", "make_spec_decoding_stats", "update_from_output", "shutdown"):
            assert getattr(cls, name).__qualname__.startswith("_PolicyMixin."), (cls, name)


def test_scheduler_output_fields() -> None:
    from vllm.v1.core.sched.output import SchedulerOutput

    fields = {f.name for f in dataclasses.fields(SchedulerOutput)}
    assert {
        "num_scheduled_tokens",
        "num_spec_tokens_to_schedule",
        "scheduled_spec_decode_tokens",
        "total_num_scheduled_tokens",
    } <= fields
    skip_drafts = "vllm.v1.core.sched.output.SchedulerOutput.skip_drafts" not in RELEASE.absent
    assert ("skip_drafts" in fields) == skip_drafts


def test_request_counters_the_decode_test_reads() -> None:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    r = Request(
        request_id="x",
        prompt_token_ids=[1, 2, 3],
        sampling_params=SamplingParams(max_tokens=4),
        pooling_params=None,
    )
    assert (r.num_computed_tokens, r.num_output_placeholders, r.num_tokens, r.num_output_tokens) == (
        0,
        0,
        3,
        0,
    )


def test_config_fields_the_checks_read(make_config: Any) -> None:
    cfg = make_config()
    spec = cfg.speculative_config
    assert spec.method == "eagle3" and spec.num_speculative_tokens == K_MAX
    assert [tuple(e) for e in spec.num_speculative_tokens_per_batch_size] == [
        (1, 5, 3),
        (6, 6, 2),
        (7, 7, 1),
        (8, 8, 0),
    ]
    if "vllm.config.vllm.VllmConfig.use_v2_model_runner" in RELEASE.absent:  # one runner: the V2 one
        assert not hasattr(cfg, "use_v2_model_runner") and not RELEASE.v1_runner
    else:
        assert isinstance(cfg.use_v2_model_runner, bool)
    assert cfg.additional_config["specpolicy"]["policy"]["name"] == "scripted"
    par = cfg.parallel_config
    assert (par.data_parallel_size, par.tensor_parallel_size, par.pipeline_parallel_size) == (1, 1, 1)
    assert par.data_parallel_rank == 0
    assert cfg.scheduler_config.max_num_seqs == 8
    assert cfg.scheduler_config.async_scheduling in (True, False)


def test_scheduler_cls_string_resolves_to_our_class(make_config: Any) -> None:
    from specpolicy.adapters.vllm import Scheduler

    assert make_config().scheduler_config.get_scheduler_cls() is Scheduler


def test_vllm_auto_disables_its_schedule_under_data_parallel() -> None:
    """Why the adapter checks DP first: vLLM drops the schedule; the adapter must say DP, not 'missing'."""
    from vllm.config.vllm import VllmConfig

    assert hasattr(VllmConfig, "_maybe_disable_dynamic_sd_for_data_parallel")
    src = inspect.getsource(VllmConfig._maybe_disable_dynamic_sd_for_data_parallel)
    assert "num_speculative_tokens_per_batch_size = None" in src


def test_plugin_hooks() -> None:
    import vllm.plugins
    from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs

    assert vllm.plugins.DEFAULT_PLUGINS_GROUP == "vllm.general_plugins"
    assert callable(vllm.plugins.load_general_plugins)
    assert hasattr(vllm.plugins, "plugins_loaded")
    # the front-end builds its VllmConfig with EngineArgs.create_engine_config (AsyncEngineArgs inherits it)
    assert "create_engine_config" not in AsyncEngineArgs.__dict__
    assert params(EngineArgs.create_engine_config)[:1] == ["usage_context"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vllm_uses_num_spec_tokens_to_schedule_for_the_next_steps_drafts(make_config: Any, mode: str) -> None:
    """The one number the adapter writes is what vLLM turns into the next step's scheduled draft tokens."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    cfg = make_config(async_scheduling=mode == "async")
    base = AsyncScheduler if mode == "async" else Scheduler
    overrides = iter([2, 0, 1, 3])

    class Probe(base):  # type: ignore[misc,valid-type]
        def _update_after_schedule(self, so: Any) -> None:
            so.num_spec_tokens_to_schedule = next(overrides)
            super()._update_after_schedule(so)

    sched = build_scheduler(cfg, cls=Probe)
    add_request(sched, "a")
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=4, mode=mode)
    assert [len(so.scheduled_spec_decode_tokens.get("a", ())) for so in outs] == [0, 2, 0, 1]


@pytest.mark.parametrize(
    "name", __import__("specpolicy.adapters.vllm.contract", fromlist=["TARGETS"]).TARGETS
)
def test_every_listed_internal_name_resolves(name: str) -> None:
    """Each name resolves, except those the release's row lists as absent: those must really be missing."""
    from specpolicy.adapters.vllm.contract import check_targets, resolve

    if name in RELEASE.absent:
        with pytest.raises(AttributeError):
            resolve(name)
        assert name not in check_targets()
        return
    assert resolve(name) is not None or name.endswith("_per_batch_size")


def test_doctor_report_on_this_installation() -> None:
    import io

    from specpolicy.adapters.vllm.doctor import report

    buf = io.StringIO()
    res = report(out=buf)
    assert res["version"] == VERSION and res["supported"] and res["entry_point"]
    assert set(res["targets"].values()) == {"ok"}
    assert res["ok"], res["problems"]
    smoke = report(smoke=True, out=io.StringIO())  # no CUDA GPU here: skipped with the reason
    assert any("needs vLLM and a CUDA GPU" in p for p in smoke["problems"])


def test_the_release_row_says_which_model_runners_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    """``v1_runner`` is what the checks and the start-up line rely on: the V1 runner's module exists exactly
    where the row says so, and a release without it refuses to be asked for it."""
    import importlib.util

    assert (importlib.util.find_spec("vllm.v1.worker.gpu_model_runner") is not None) == RELEASE.v1_runner
    assert importlib.util.find_spec("vllm.v1.worker.gpu.model_runner") is not None  # MRV2, everywhere
    if not RELEASE.v1_runner:
        from vllm.platforms import current_platform

        monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
        with pytest.raises(ValueError, match="Model Runner V1 has been removed"):
            current_platform.validate_environ(True)


def test_the_v2_drafter_takes_the_per_step_depth_where_the_row_says_so() -> None:
    """``mrv2_drafts_k``: vLLM's EAGLE drafter takes the step's K itself; where it does not, the names the
    adapter's hook wraps resolve, and the contract (and ``specpolicy doctor``) checks them. The signature is
    read from the source: 0.34's drafter module imports Triton kernels that a CPU build lacks."""
    import ast
    import importlib.util
    from pathlib import Path

    from specpolicy.adapters.vllm import drafter_depth
    from specpolicy.adapters.vllm.contract import check_targets, targets_for

    # EagleSpeculator's base: TargetDependentARSpeculator from 0.33, AutoRegressiveSpeculator before
    pkg = "vllm.v1.worker.gpu.spec_decode"
    newer = importlib.util.find_spec(f"{pkg}.target_dependent_ar") is not None
    drafter = "target_dependent_ar" if newer else "autoregressive"
    spec = importlib.util.find_spec(f"{pkg}.{drafter}.speculator")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    (propose,) = [
        f for c in tree.body if isinstance(c, ast.ClassDef) for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "propose"
    ]  # fmt: skip
    takes_k = "num_speculative_tokens" in {a.arg for a in propose.args.args + propose.args.kwonlyargs}
    assert takes_k == RELEASE.mrv2_drafts_k == (not drafter_depth.needed(VERSION))
    hook = set(drafter_depth.TARGETS)
    assert (hook <= set(targets_for(VERSION))) == drafter_depth.needed(VERSION)
    if drafter_depth.needed(VERSION):
        assert set(check_targets()) >= hook and all(v is None for v in check_targets().values())


def test_the_drafter_hooks_of_a_release_are_one_plan_with_one_wrapper_per_method() -> None:
    """``runner_hooks`` installs what the row turns on as one plan: a method two pieces drive (0.26's
    ``execute_model`` and ``AutoRegressiveSpeculator.propose``) appears once, since a second wrap of the
    same method would be dropped; every method wrapped is a name the contract checks."""
    from specpolicy.adapters.vllm import off_eagle, runner_hooks
    from specpolicy.adapters.vllm.contract import targets_for

    which = runner_hooks.pieces(VERSION)
    assert which.depth == (not RELEASE.mrv2_drafts_k) and which.off_eagle == RELEASE.mrv2_off_eagle
    try:
        plan = runner_hooks.hook_plan(VERSION)
    except (ImportError, AttributeError) as exc:  # 0.34's drafter modules need Triton at import
        pytest.skip(f"vLLM's V2 drafter modules do not import here: {exc}")
    keys = [(cls, name) for cls, name, _ in plan]
    assert len(keys) == len(set(keys)) and bool(keys) == which.any
    wrapped = {f"{cls.__module__}.{cls.__qualname__}.{name}" for cls, name in keys}
    assert wrapped <= set(runner_hooks.targets(VERSION)) <= set(targets_for(VERSION))
    if which.off_eagle:  # the EAGLE drafters' base, as the source test above finds it
        base = "autoregressive" if which.depth else "target_dependent_ar"
        assert f".{base}.speculator." in off_eagle.targets(which.depth)[0]
        assert off_eagle.targets(which.depth)[0] in wrapped
