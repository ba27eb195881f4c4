"""``specpolicy-sglang`` with a real SGLang installed: help beside SGLang's, argv handed over, errors."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import requires_version

from specpolicy.adapters.sglang import launch
from specpolicy.runtime.runtime import AdapterInstallError
from specpolicy.runtime.settings import AdapterSettings

HERE = Path(__file__).parent
EAGLE = ["--model-path", "m", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d"]


def test_help_lists_our_options_beside_sglangs(capsys: pytest.CaptureFixture[str]) -> None:
    assert launch.main(["--help"]) == 0
    out = capsys.readouterr().out
    for opt in (
        "--spec-policy ",
        "--spec-policy-trace",
        "--spec-policy-on-install-failure",
        "--model-path",
        "--speculative-algorithm",
        "--tp-size",
    ):
        assert opt in out, opt


def test_our_options_are_removed_and_sglangs_pass_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECPOLICY_POLICY", raising=False)
    argv = [
        *EAGLE,
        "--spec-policy",
        "static",
        "--tp-size",
        "2",
        "--spec-policy-trace",
        "/tmp/t.jsonl",
        "--mem-fraction-static",
        "0.8",
        "--no-spec-policy-metrics",
    ]
    plan = launch.prepare(argv)
    assert plan.settings.trace_path == Path("/tmp/t.jsonl") and plan.settings.metrics is False
    assert not any(a.startswith("--spec-policy") for a in plan.sglang_argv)
    # SGLang's own arguments keep their order and values
    kept = [
        a
        for a in plan.sglang_argv
        if not a.startswith("--speculative-adaptive") and a != "--speculative-num-steps"
    ]
    assert kept[: len(EAGLE) + 4] == [*EAGLE, "--tp-size", "2", "--mem-fraction-static", "0.8"]
    env = json.loads(plan.env["SPECPOLICY_CONFIG"])
    assert env["policy"] == {"name": "static", "num_steps": 3}


DEPTHS = '{"name": "alternate", "depths": [0, 1, 3]}'  # several speculative depths, and off


@requires_version("0.5.17", "0.5.23")
def test_adaptive_options_are_added_for_several_eagle_depths_and_sglang_parses_them() -> None:
    from sglang.srt.server_args import ServerArgs

    plan = launch.prepare([*EAGLE, "--spec-policy", DEPTHS])
    assert plan.route == "v2"
    cfg_path = launch._opt(plan.sglang_argv, "--speculative-adaptive-config")
    assert cfg_path is not None
    cfg = json.loads(Path(cfg_path).read_text())
    # the policy's speculative depths, the deepest the launch depth; no 0: the decode step serves it
    assert cfg == {"1": {"candidate_steps": [1, 3]}}
    import argparse

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(plan.sglang_argv)
    assert ns.speculative_adaptive is True and ns.speculative_num_steps == 3
    assert ns.speculative_adaptive_config == cfg_path


@requires_version("0.5.17", "0.5.23")
@pytest.mark.parametrize(
    ("extra", "policy", "why"),
    [
        ([], '{"name": "static", "num_steps": 0}', None),
        ([], "static", None),
        (["--speculative-eagle-topk", "4"], DEPTHS, "on/off at the launch depth"),
        (["--speculative-algorithm", "STANDALONE"], DEPTHS, "on/off at the launch depth"),
    ],
    ids=["off-only", "one-depth", "eagle3-tree", "draft-model"],
)
def test_one_depth_trees_and_draft_models_pass_through(
    extra: list[str], policy: str, why: str | None
) -> None:
    """No adaptive controller where the policy has one speculative depth or SGLang's controller cannot
    run (trees, draft models): SGLang's arguments pass unchanged, the policy runs on/off at the launch
    depth."""
    argv = [*EAGLE, *extra]
    plan = launch.prepare([*argv, "--spec-policy", policy])
    assert plan.route == "v2" and plan.sglang_argv == argv
    said = [n for n in plan.notes if "on/off at the launch depth" in n]
    assert bool(said) == (why is not None), plan.notes


@requires_version("0.5.17", "0.5.23")
def test_user_adaptive_config_must_cover_the_policys_speculative_depths(tmp_path: Path) -> None:
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [1, 2]}, "32": {"candidate_steps": [1]}}))
    with pytest.raises(AdapterInstallError, match=r"\[3\].*\[1, 2\]"):
        launch.prepare([*EAGLE, "--speculative-adaptive-config", str(cfg), "--spec-policy", DEPTHS])
    cfg.write_text(json.dumps({"1": {"candidate_steps": [0, 1, 3]}}))  # 0 in the user's config is fine
    ok = launch.prepare([*EAGLE, "--speculative-adaptive-config", str(cfg), "--spec-policy", DEPTHS])
    assert launch._opt(ok.sglang_argv, "--speculative-adaptive-config") == str(cfg)
    assert "--speculative-adaptive" in ok.sglang_argv


def test_no_speculation_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert launch.main(["--model-path", "m", "--spec-policy", "static"]) == launch.EXIT_REFUSED
    assert "--speculative-algorithm" in capsys.readouterr().err


@requires_version("0.5.17", "0.5.23")
def test_main_hands_sglang_its_argv_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    called: dict[str, Any] = {}

    def fake_run_module(name: str, run_name: str, alter_sys: bool) -> None:
        import os

        called.update(name=name, argv=list(sys.argv), env=os.environ.get("SPECPOLICY_CONFIG"))

    monkeypatch.setattr(runpy, "run_module", fake_run_module)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.delenv("SPECPOLICY_CONFIG", raising=False)
    assert launch.main([*EAGLE, "--spec-policy", "static"]) == 0
    assert called["name"] == "sglang.launch_server"
    assert called["argv"][1 : 1 + len(EAGLE)] == EAGLE
    assert json.loads(called["env"])["policy"]["name"] == "static"
    monkeypatch.delenv("SPECPOLICY_CONFIG")


def test_module_entry_point_validates_before_importing_sglang() -> None:
    code = (
        'import sys, runpy; sys.argv=[\'x\',\'--spec-policy\',\'{"name":"static","num_steps":"deep"}\'];'
        "\ntry:\n  runpy.run_module('specpolicy.adapters.sglang', run_name='__main__')\n"
        "except SystemExit as e:\n  print('EXIT', e.code, 'sglang' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "EXIT 2 False" in proc.stdout, proc.stdout + proc.stderr
    assert "static.num_steps" in proc.stderr


@requires_version("0.5.10.post1", "0.5.12.post1")
def test_legacy_main_starts_sglang_with_the_scheduler_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's real argument parser and the legacy ``prepare_launch``. Stand-ins: ``http_server`` (the real
    one imports the OpenAI serving stack, not installed in the CPU venvs) and ``prepare_server_args`` (its
    ``__post_init__`` needs a GPU and a model directory); the stand-in parses with SGLang's own parser."""
    import argparse
    import types

    import sglang.srt.server_args as sgl_server_args
    import sglang.srt.utils as sgl_utils

    def parse_only(argv: list[str]) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        sgl_server_args.ServerArgs.add_cli_args(parser)
        return parser.parse_args(argv)

    monkeypatch.setattr(sgl_server_args, "prepare_server_args", parse_only)

    http_server = types.ModuleType("sglang.srt.entrypoints.http_server")
    monkeypatch.setitem(sys.modules, "sglang.srt.entrypoints.http_server", http_server)

    from specpolicy.adapters.sglang import legacy

    called: dict[str, Any] = {}

    def fake_launch_server(server_args: Any, run_scheduler_process_func: Any = None) -> None:
        import os

        called.update(
            args=server_args, func=run_scheduler_process_func, env=os.environ.get("SPECPOLICY_CONFIG")
        )

    http_server.launch_server = fake_launch_server  # type: ignore[attr-defined]
    monkeypatch.setattr(sgl_utils, "kill_process_tree", lambda *a, **k: None)
    monkeypatch.delenv("SPECPOLICY_CONFIG", raising=False)
    argv = [*EAGLE, "--speculative-num-steps", "3", "--spec-policy", "static"]
    assert launch.main(argv) == 0
    assert called["args"].speculative_algorithm == "EAGLE3" and called["args"].speculative_num_steps == 3
    assert called["func"] is legacy.prepare_launch(AdapterSettings.build("static")).run_scheduler_process_func
    assert json.loads(called["env"])["policy"]["name"] == "static"
    monkeypatch.delenv("SPECPOLICY_CONFIG")


def test_sglang_plugin_allow_list_is_extended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_PLUGINS", "other_plugin")
    plan = launch.prepare([*EAGLE, "--spec-policy", "static"])
    assert plan.env["SGLANG_PLUGINS"] == "other_plugin,specpolicy"
    monkeypatch.setenv("SGLANG_PLUGINS", "specpolicy, other_plugin")
    assert "SGLANG_PLUGINS" not in launch.prepare([*EAGLE, "--spec-policy", "static"]).env
