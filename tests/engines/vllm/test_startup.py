"""Bad configurations fail early, in the front-end, with the field named; the plugin through vLLM's loader."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from _vllm_harness import K_MAX, FakeRunner, add_request, build_scheduler, drive, engine_args

from specpolicy import ConfigError
from specpolicy.runtime.runtime import AdapterInstallError


def _settings(**kw: Any) -> dict[str, Any]:
    return {"specpolicy": {"metrics": False, **kw}}


def test_plugin_installs_its_check_through_vllms_plugin_loader(restore_engine_args: None) -> None:
    import importlib.metadata

    import vllm.plugins
    from vllm.engine.arg_utils import EngineArgs

    eps = importlib.metadata.entry_points(group=vllm.plugins.DEFAULT_PLUGINS_GROUP)
    assert "specpolicy.adapters.vllm.plugin:register" in {ep.value for ep in eps if ep.name == "specpolicy"}
    raw = EngineArgs.create_engine_config
    while getattr(raw, "_specpolicy_guard", False):
        raw = raw.__wrapped__
    EngineArgs.create_engine_config = raw
    vllm.plugins.plugins_loaded = False
    vllm.plugins.load_general_plugins()
    assert getattr(EngineArgs.create_engine_config, "_specpolicy_guard", False)
    vllm.plugins.load_general_plugins()  # loading again must not wrap twice
    assert EngineArgs.create_engine_config.__wrapped__ is raw


def test_bad_environment_fails_when_plugins_load(
    restore_engine_args: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vllm.plugins

    monkeypatch.setenv("SPECPOLICY_POLICY", '{"name": "static", "num_steps": -1}')
    vllm.plugins.plugins_loaded = False
    with pytest.raises(ConfigError, match=r"static\.num_steps"):
        vllm.plugins.load_general_plugins()


@pytest.mark.parametrize(
    ("section", "field"),
    [
        (
            {"policy": {"name": "static", "num_steps": 99}},
            "additional_config.specpolicy.policy.static.num_steps",
        ),
        ({"policy": {"name": "no-such-policy"}}, "additional_config.specpolicy.policy.name"),
        ({"policy": "static", "trace_pth": "/tmp/x"}, "additional_config.specpolicy.trace_pth"),
        ({"trace_path": "/tmp/x"}, "additional_config.specpolicy.policy"),
    ],
)
def test_bad_policy_configuration_fails_in_create_engine_config(
    model_dirs: tuple[Path, Path], section: dict[str, Any], field: str
) -> None:
    args = engine_args(model_dirs, additional_config={"specpolicy": section})
    with pytest.raises(ConfigError) as info:
        args.create_engine_config()
    assert field in str(info.value)


def test_missing_policy_is_refused(model_dirs: tuple[Path, Path]) -> None:
    with pytest.raises(ConfigError, match="additional_config.specpolicy: missing"):
        engine_args(model_dirs, additional_config={}).create_engine_config()


def test_policy_from_the_environment(model_dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPOLICY_POLICY", '{"name": "scripted", "depths": [2, 0]}')
    monkeypatch.setenv("SPECPOLICY_METRICS", "false")
    cfg = engine_args(model_dirs, additional_config={}).create_engine_config()
    cfg.cache_config.num_gpu_blocks = 256
    sched = build_scheduler(cfg)
    add_request(sched, "a")
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=3, mode="sync")
    assert [so.num_spec_tokens_to_schedule for so in outs] == [2, 0, 0]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"spec": {"num_speculative_tokens_per_batch_size": None}},
            "num_speculative_tokens_per_batch_size is not set",
        ),
        (
            {"additional_config": _settings(policy={"name": "scripted", "candidates": [0, 3, 5]})},
            r"depth\(s\) \[5\]",
        ),
        ({"speculative_config": None}, "no speculative decoding is configured"),
        ({"spec": {"method": "ngram_gpu", "model": None, "prompt_lookup_max": 3}}, "ngram_gpu"),
    ],
)
def test_engine_configuration_the_policy_cannot_run_in_is_refused(
    model_dirs: tuple[Path, Path], kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(AdapterInstallError, match=message):
        engine_args(model_dirs, **kw).create_engine_config()


def test_data_parallel_is_refused_with_the_reason(make_config: Any) -> None:
    from specpolicy.adapters.vllm.plugin import check_engine_config

    cfg = make_config()
    cfg.parallel_config.data_parallel_size = 2
    with pytest.raises(AdapterInstallError, match="data_parallel_size=2.*deadlock"):
        check_engine_config(cfg)
    with pytest.raises(AdapterInstallError, match="data parallelism"):
        build_scheduler(cfg)


def test_warn_instead_of_refuse_runs_vllm_unchanged(model_dirs: tuple[Path, Path]) -> None:
    args = engine_args(
        model_dirs,
        spec={"num_speculative_tokens_per_batch_size": None},
        additional_config=_settings(policy={"name": "scripted", "depths": [0]}, on_install_failure="warn"),
    )
    cfg = args.create_engine_config()
    cfg.cache_config.num_gpu_blocks = 256
    sched = build_scheduler(cfg)
    assert sched._specpolicy is None
    add_request(sched, "a")
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=3, mode="sync")
    assert [so.num_spec_tokens_to_schedule for so in outs] == [K_MAX] * 3  # vLLM's static depth, not 0


@pytest.mark.parametrize("version", ["0.32.0", "0.34.0rc1", "0.33.0.dev5+gabc"])
def test_untested_vllm_version_is_refused_unless_allowed(
    model_dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    import specpolicy.adapters.vllm.versions as versions

    monkeypatch.setattr(versions, "installed_version", lambda: version)
    with pytest.raises(
        versions.UnsupportedVersion, match=rf"vLLM {re.escape(version)} is not supported.*allow_untested"
    ):
        engine_args(model_dirs).create_engine_config()
    allowed = _settings(policy={"name": "scripted"}, allow_untested=True)
    cfg = engine_args(model_dirs, additional_config=allowed).create_engine_config()
    cfg.cache_config.num_gpu_blocks = 256
    assert build_scheduler(cfg)._specpolicy is not None


def test_vllm_without_per_step_machinery_is_refused_even_if_untested_allowed(
    model_dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import specpolicy.adapters.vllm.versions as versions

    monkeypatch.setattr(versions, "installed_version", lambda: "0.23.0")
    allowed = _settings(policy={"name": "scripted"}, allow_untested=True)
    with pytest.raises(versions.UnsupportedVersion, match="predates num_speculative_tokens_per_batch_size"):
        engine_args(model_dirs, additional_config=allowed).create_engine_config()


def test_other_schedulers_are_left_alone(model_dirs: tuple[Path, Path]) -> None:
    bad = {"specpolicy": {"policy": {"name": "static", "num_steps": 99}}}
    cfg = engine_args(model_dirs, scheduler_cls=None, additional_config=bad).create_engine_config()
    assert cfg.speculative_config.num_speculative_tokens == K_MAX


def test_vllm_serve_flags_reach_the_front_end_check(model_dirs: tuple[Path, Path]) -> None:
    """The `vllm serve` path: vLLM's parser, AsyncEngineArgs.from_cli_args, create_engine_config."""
    import json

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from specpolicy.adapters.vllm.args import build_vllm_args

    target, draft = model_dirs
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    flags = build_vllm_args("static", 3, max_num_seqs=8, draft_model=str(draft)).as_cli()
    base = ["--model", str(target), "--skip-tokenizer-init", "--max-model-len", "512"]
    good = AsyncEngineArgs.from_cli_args(parser.parse_args([*base, *flags])).create_engine_config()
    assert good.additional_config == {"specpolicy": {"policy": {"name": "static"}}}
    i = flags.index("--additional-config")
    flags[i + 1] = json.dumps({"specpolicy": {"policy": {"name": "static", "num_steps": 7}}})
    bad = AsyncEngineArgs.from_cli_args(parser.parse_args([*base, *flags]))
    with pytest.raises(AdapterInstallError, match=r"depth\(s\) \[7\]"):
        bad.create_engine_config()
