"""``specpolicy-sglang`` without SGLang installed: configuration errors first, then the refusal; version
rules."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from specpolicy.adapters.sglang import launch, releases, versions
from specpolicy.adapters.sglang.versions import UnsupportedVersion, check_version, route_for, worker_path

NO_SGLANG = importlib.util.find_spec("sglang") is None


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specpolicy.adapters.sglang", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--spec-policy", '{"name": "static", "num_steps": 65}'], "policy.static.num_steps"),
        (["--spec-policy", '{"name": "static", "depth": 2}'], "policy.static.depth"),
        (["--spec-policy", "no_such_policy"], "policy.name: unknown policy 'no_such_policy'"),
        (["--spec-policy", "static", "--spec-policy-trace-backups", "-3"], "trace_backups"),
        (
            ["--spec-policy", "static", "--spec-policy-trace-max-mb", "-3"],
            "--spec-policy-trace-max-mb: must be from 0.00390625 to 1,048,576 MB, got -3",
        ),
        (["--spec-policy", "static", "--spec-policy-trace-max-mb", "nan"], "trace-max-mb: must be from"),
        (["--spec-policy", "static", "--spec-policy-trace-max-mb", "2e6"], "to 1,048,576 MB, got 2e+06"),
        (["--model-path", "m"], "policy: missing"),
    ],
)
def test_bad_configuration_exits_2_naming_the_field(args: list[str], named: str) -> None:
    proc = _cli(*args, "--speculative-algorithm", "EAGLE3")
    assert proc.returncode == launch.EXIT_CONFIG
    assert named in proc.stderr


@pytest.mark.skipif(not NO_SGLANG, reason="checks the message when SGLang is absent")
def test_without_sglang_a_valid_policy_is_refused_with_the_supported_list() -> None:
    proc = _cli("--spec-policy", "static", "--speculative-algorithm", "EAGLE3", "--model-path", "m")
    assert proc.returncode == launch.EXIT_REFUSED
    assert (
        "SGLang is not installed" in proc.stderr
        and "0.5.10.post1, 0.5.12.post1, 0.5.17, 0.5.23" in proc.stderr
    )
    assert f"pip install 'sglang=={releases.tested()[-1]}'" in proc.stderr  # how to get the newest tested


def test_help_works_without_sglang() -> None:
    proc = _cli("--help")
    assert proc.returncode == 0
    assert "--spec-policy NAME|JSON|FILE" in proc.stdout and "--spec-policy-on-install-failure" in proc.stdout


def test_warn_mode_runs_sglang_untouched_when_the_policy_cannot_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(versions, "installed_version", lambda: "0.4.0")
    monkeypatch.setattr(launch, "installed_version", lambda: "0.4.0")
    argv = ["--model-path", "m", "--speculative-algorithm", "EAGLE3"]
    plan = launch.prepare([*argv, "--spec-policy", "static", "--spec-policy-on-install-failure", "warn"])
    assert plan.route == "none" and plan.env == {} and plan.sglang_argv == argv
    assert "NOT ACTIVE" in plan.notes[0] and "0.4.0 is not supported" in plan.notes[0]
    with pytest.raises(UnsupportedVersion):
        launch.prepare([*argv, "--spec-policy", "static"])


def test_version_rules() -> None:
    for v in versions.SUPPORTED:
        assert check_version(v) == v
    with pytest.raises(
        UnsupportedVersion,
        match=r"0\.5\.22 is not supported.*0\.5\.10\.post1, 0\.5\.12\.post1, 0\.5\.17, 0\.5\.23",
    ):
        check_version("0.5.22")
    assert check_version("0.5.22", allow_untested=True) == "0.5.22"
    with pytest.raises(UnsupportedVersion):
        check_version("0.4.9", allow_untested=True)  # too old for any code layout the adapter knows
    assert [
        route_for(v)
        for v in ("0.5.10.post1", "0.5.12.post1", "0.5.13", "0.5.19", "0.5.20", "0.5.23", "0.6.0")
    ] == ["legacy", "legacy", "v2", "v2", "v2", "v2", "v2"]
    assert worker_path("0.5.17", overlap=False) == "v2 (EAGLEWorkerV2, non-overlap)"
    assert worker_path("0.5.12.post1", overlap=False).startswith("v1 (EAGLEWorker")
    assert worker_path("0.5.12.post1", overlap=True).startswith("v2 (EAGLEWorkerV2")
    assert worker_path("0.5.23", overlap=False) == "v2 (EAGLEWorkerV2, non-overlap)"


def test_equals_syntax_and_order_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "installed_version", lambda: "0.5.12.post1")  # legacy: argv passes unchanged
    argv = ["--model-path=m", "--speculative-algorithm=EAGLE3", "--tp-size", "2", "--mem-fraction-static=0.8"]
    plan = launch.prepare(
        [argv[0], "--spec-policy=static", *argv[1:3], "--spec-policy-trace=/tmp/t", argv[3], argv[4]]
    )
    assert plan.sglang_argv == argv
    assert str(plan.settings.trace_path) == "/tmp/t" and plan.settings.policy.name == "static"
    assert launch._opt(argv, "--speculative-algorithm") == "EAGLE3" and launch._opt(argv, "--tp-size") == "2"


def test_off_step_options_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "installed_version", lambda: "0.5.12.post1")
    sglang = ["--model-path=m", "--speculative-algorithm=STANDALONE"]
    plan = launch.prepare(
        [*sglang, "--spec-policy=static", "--spec-policy-off-step", "verify"]
        + ["--spec-policy-draft-catch-up=per_step", "--spec-policy-step-clock", "host"]
    )
    assert (plan.settings.off_step, plan.settings.draft_catch_up) == ("verify", "per_step")
    assert plan.settings.step_clock == "host"
    assert plan.sglang_argv == sglang
    default = launch.prepare([*sglang, "--spec-policy=static"]).settings
    assert (default.off_step, default.draft_catch_up, default.step_clock) == ("decode", "auto", "auto")
    eagle = launch.prepare(
        ["--model-path=m", "--speculative-algorithm=EAGLE3", "--spec-policy=static"]
        + ["--spec-policy-draft-catch-up=lazy", "--spec-policy-draft-catch-up-window", "64"]
    ).settings
    assert (eagle.draft_catch_up, eagle.draft_catch_up_window) == ("lazy", 64)
    assert default.draft_catch_up_window == 32
