"""The test command (scripts/test.sh) and the engine-env build: the groups run while the envs build, a group
that reads an env after that env, a progress line while an env builds, and a summary that keeps the expected
per-release skips apart."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from test_summary import summarise  # noqa: E402

# A stand-in for python3 that logs what it was asked to do: pip and pytest are not run, a pytest run writes
# an empty JUnit report, anything else (the summary script) runs in the real Python.
FAKE_PY = f"""#!/usr/bin/env bash
echo "python $*" >> "$FAKE_LOG"
if [ "$1" = "-m" ] && [ "$2" = "pytest" ]; then
  for a in "$@"; do
    case "$a" in --junitxml=*) echo '<testsuite tests="1"/>' > "${{a#--junitxml=}}";; esac
  done
  exit 0
fi
[ "$1" = "-m" ] && exit 0
[ "$1" = "--version" ] && {{ echo "Python 3"; exit 0; }}
exec {sys.executable} "$@"
"""


def _fake_python(tmp: Path) -> Path:
    fake = tmp / "python"
    fake.write_text(FAKE_PY)
    fake.chmod(0o755)
    return fake


def _fake_tree(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A copy of the test command whose engine-env build only logs (one env, sglang-x) and whose Python only
    logs pip and pytest: the command's steps, in order, in the log. The build ends only once the core group
    has started (or after 30 s), so the log shows whether the groups run while the envs build."""
    tree = tmp_path / "repo"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test.sh", tree / "scripts")
    shutil.copy(ROOT / "scripts" / "test_summary.py", tree / "scripts")
    log = tmp_path / "log"
    (tree / "scripts" / "engine-envs.sh").write_text(
        'if [ "${1:-}" = --list ]; then echo sglang-x; exit 0; fi\n'
        f'echo "build $*" >> {log}\n'
        f'for i in $(seq 300); do grep -q -- "-m pytest.*--ignore=tests/engines -m not" {log} && break\n'
        "  sleep 0.1\ndone\n"
        f'mkdir -p "$SPECPOLICY_ENV_DIR/sglang-x/bin"\n'
        f'cp {_fake_python(tmp_path)} "$SPECPOLICY_ENV_DIR/sglang-x/bin/python"\n'
        f'touch "$SPECPOLICY_ENV_DIR/sglang-x/.complete"\necho "built" >> {log}\n'
    )
    # the caller's knobs (a run of the test command with SPECPOLICY_OFFLINE=1, say) stay out
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECPOLICY_", "UV"))}
    env = dict(env, PYTHON=str(_fake_python(tmp_path)), FAKE_LOG=str(log),
               SPECPOLICY_ENV_DIR=str(tmp_path / "envs"))
    return tree, log, env


def _test_sh(tree: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["bash", str(tree / "scripts" / "test.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _pytest_runs(log: Path) -> list[str]:
    return [s for s in log.read_text().splitlines() if "-m pytest" in s]


def test_the_groups_run_while_the_envs_build_and_an_engine_group_after_its_env(tmp_path: Path) -> None:
    tree, log, env = _fake_tree(tmp_path)
    proc = _test_sh(tree, env)
    steps = log.read_text().splitlines()
    runs = {s.split("--junitxml=", 1)[1].split(" ", 1)[1]: i for i, s in enumerate(steps) if "-m pytest" in s}
    assert len(runs) == 4  # core, network, the engine group, harness: each once
    core = next(i for r, i in runs.items() if "--ignore=tests/engines -m not network" in r)
    engine = next(i for r, i in runs.items() if r.startswith("tests/engines/sglang"))
    # the core group started while the env was building; the engine group once it was built
    assert steps.index("build sglang-x") < core < steps.index("built") < engine
    assert any(r.endswith("tools/livecheck/tests") for r in runs)
    assert any("--ignore=tests/engines -m network" in r for r in runs)
    out = proc.stdout.splitlines()
    # each group's output under its title, and the summary: one line per group in name order, then the total
    assert {line for line in out if line.startswith("== ") and "tests" in line} >= {
        "== sglang-x contract tests", "== network tests (they ask the package index)",
        "== harness tests (tools/livecheck/tests: the live check on CPU)",
    }
    groups = [line.split(":")[0] for line in out if line.startswith("group ")]
    assert groups == ["group core", "group harness", "group network", "group sglang-x"]
    assert out[-1] == "total: 4 passed, 0 failed, 0 skipped"


def test_one_job_runs_one_group_at_a_time(tmp_path: Path) -> None:
    tree, log, env = _fake_tree(tmp_path)
    fake = Path(env["PYTHON"])
    # each pytest run logs its start and end, 0.3 s apart
    fake.write_text(FAKE_PY.replace(
        '  exit 0\nfi', '  echo "start" >> "$FAKE_LOG"; sleep 0.3; echo "end" >> "$FAKE_LOG"\n  exit 0\nfi', 1
    ))
    _test_sh(tree, {**env, "SPECPOLICY_TEST_JOBS": "1", "SPECPOLICY_SKIP_ENGINES": "1"})
    marks = [s for s in log.read_text().splitlines() if s in ("start", "end")]
    assert marks == ["start", "end"] * 3  # core, network, harness: never two at once


def test_the_core_suite_is_spread_over_two_workers_only_where_xdist_and_two_jobs_are(tmp_path: Path) -> None:
    tree, log, env = _fake_tree(tmp_path)
    fake = Path(env["PYTHON"])
    fake.write_text(FAKE_PY.replace("[ \"$1\" = \"-m\" ] && exit 0", "[ \"$1\" = \"-m\" ] && exit 0\n"
                                    "[ \"$*\" = \"-c import xdist\" ] && exit 0", 1))
    quiet = {**env, "SPECPOLICY_SKIP_ENGINES": "1", "SPECPOLICY_OFFLINE": "1"}
    for jobs, workers in (("4", " -n 2 --benchmark-disable tests "), ("1", None)):
        log.write_text("")
        _test_sh(tree, {**quiet, "SPECPOLICY_TEST_JOBS": jobs})
        core, harness = sorted(_pytest_runs(log), key=lambda r: r.endswith(" tools/livecheck/tests"))
        assert ("-n " in core) == (workers is not None) and "-n " not in harness
        assert workers is None or workers in core
    log.write_text("")
    _test_sh(tree, {**quiet, "SPECPOLICY_TEST_JOBS": "3"}, "--fast")
    assert " -n 3 --benchmark-disable tests " in _pytest_runs(log)[0]


def test_an_interrupt_stops_the_groups_running_in_the_background(tmp_path: Path) -> None:
    tree, log, env = _fake_tree(tmp_path)
    fake = Path(env["PYTHON"])
    # each pytest run logs its pid and runs for a minute
    fake.write_text(FAKE_PY.replace('  exit 0\nfi', '  echo "pid $$" >> "$FAKE_LOG"; exec sleep 60\nfi', 1))
    quiet = {**env, "SPECPOLICY_TEST_JOBS": "2", "SPECPOLICY_SKIP_ENGINES": "1", "SPECPOLICY_OFFLINE": "1"}
    proc = subprocess.Popen(["bash", str(tree / "scripts" / "test.sh")], env=quiet,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            lines = log.read_text().splitlines() if log.exists() else []
            pids = [int(s.split()[1]) for s in lines if s.startswith("pid ")]
            if len(pids) == 2:
                break
            time.sleep(0.1)
        assert len(pids) == 2  # core and harness at once
        # TERM, not INT: where this test itself runs in a background group, the shell starts with INT ignored
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 130
        for _ in range(100):
            if not any(_alive(p) for p in pids):
                break
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
    finally:
        proc.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_offline_leaves_out_the_network_group(tmp_path: Path) -> None:
    tree, log, env = _fake_tree(tmp_path)
    proc = _test_sh(tree, {**env, "SPECPOLICY_OFFLINE": "1", "SPECPOLICY_SKIP_ENGINES": "1"})
    runs = _pytest_runs(log)
    assert len(runs) == 2 and not any("-m network" in r for r in runs)
    assert "build" not in log.read_text()
    assert proc.stdout.splitlines()[-1] == "total: 2 passed, 0 failed, 0 skipped"


def test_fast_runs_the_core_suite_without_slow_and_network_tests_alone(tmp_path: Path) -> None:
    tree, log, env = _fake_tree(tmp_path)
    proc = _test_sh(tree, env, "--fast", "-k", "policy")
    steps = log.read_text().splitlines()
    # nothing installed, no env built, one pytest run; extra arguments reach it
    assert [s for s in steps if "pip" in s or s.startswith("build")] == []
    runs = _pytest_runs(log)
    assert len(runs) == 1
    assert "--ignore=tests/engines -m not slow and not network -k policy" in runs[0]
    assert proc.stdout.splitlines()[-2:] == ["skipped, other: 0", "total: 1 passed, 0 failed, 0 skipped"]


def test_a_group_that_selects_nothing_is_no_failure_but_a_failing_one_is(tmp_path: Path) -> None:
    tree, log, env = _fake_tree(tmp_path)
    fake = Path(env["PYTHON"])
    # pytest's status 5 (no test selected) for the harness group, 1 (a failure) for the network group
    fake.write_text(FAKE_PY.replace(
        'exit 0\nfi',
        'case "$*" in *" tools/livecheck/tests"*) exit 5;; *"-m network"*) exit 1;; esac\n  exit 0\nfi',
        1,
    ))
    proc = subprocess.run(["bash", str(tree / "scripts" / "test.sh")], capture_output=True, text=True,
                          env={**env, "SPECPOLICY_SKIP_ENGINES": "1"}, timeout=120, check=False)
    assert proc.returncode == 1
    env_ok = {**env, "SPECPOLICY_SKIP_ENGINES": "1", "SPECPOLICY_OFFLINE": "1"}
    assert _test_sh(tree, env_ok).returncode == 0


@pytest.mark.slow
def test_an_env_build_prints_progress_while_it_runs(tmp_path: Path) -> None:
    # A stand-in for uv: "venv" makes a venv whose python passes the torch check, each install takes 1 s.
    fake_uv = tmp_path / "uv"
    fake_uv.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = venv ]; then v="${*: -1}"; mkdir -p "$v/bin"; '
        "printf '#!/usr/bin/env bash\\nexit 0\\n' > \"$v/bin/python\"\n"
        'chmod +x "$v/bin/python"; exit 0; fi\n'
        "sleep 1\n"
    )
    fake_uv.chmod(0o755)
    env = dict(os.environ, UV=str(fake_uv), SPECPOLICY_ENV_DIR=str(tmp_path / "envs"),
               SPECPOLICY_HEARTBEAT_S="0.4")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "engine-envs.sh"), "sglang-0.5.23"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    beats = [line for line in proc.stdout.splitlines() if re.search(r"sglang-0.5.23: .*, \d+ s so far", line)]
    assert len(beats) >= 6  # four steps of 1 s, a line every 0.4 s
    seconds = [int(re.search(r"(\d+) s so far", b).group(1)) for b in beats]  # type: ignore[union-attr]
    assert seconds == sorted(seconds) and seconds[-1] >= 3
    assert any("installing torch 2.13.0 (CPU)" in b for b in beats)
    assert proc.stdout.splitlines()[-1].startswith("[engine-envs] sglang-0.5.23: ready in ")
    assert (tmp_path / "envs" / "sglang-0.5.23" / ".complete").exists()


def _report(path: Path, skips: list[str], passed: int, failed: int = 0, seconds: float = 0.0) -> None:
    cases = "".join(f'<testcase name="s{i}"><skipped message="{m}"/></testcase>' for i, m in enumerate(skips))
    cases += "".join(f'<testcase name="f{i}"><failure message="x"/></testcase>' for i in range(failed))
    n = len(skips) + passed + failed
    path.write_text(f'<testsuites><testsuite tests="{n}" failures="{failed}" errors="0" '
                    f'skipped="{len(skips)}" time="{seconds}">{cases}</testsuite></testsuites>')


def test_the_summary_keeps_expected_per_release_skips_apart(tmp_path: Path) -> None:
    _report(tmp_path / "core.xml", ["Skipped: the documented examples were run without sglang installed"], 10,
            seconds=1.6)
    _report(tmp_path / "sglang-0.5.23.xml", [
        "Skipped: legacy paths need sglang 0.5.10.post1 or 0.5.12.post1",
        "needs sglang 0.5.12.post1, found 0.5.23",
        "needs sglang 0.5.12.post1, found 0.5.23",
    ], 5, failed=1)
    lines = summarise(str(tmp_path))
    # one line per group (report), in name order: its counts and time
    assert lines[0] == "group core: 10 passed, 0 failed, 1 skipped in 2 s"
    assert lines[1] == "group sglang-0.5.23: 5 passed, 1 failed, 3 skipped in 0 s"
    lines = lines[2:]
    assert lines[0].endswith(": 3") and lines[0].startswith("skipped, expected on the pinned releases")
    assert lines[1] == "skipped, other: 1"
    assert lines[2] == "  1 x the documented examples were run without sglang installed"
    assert lines[-1] == "total: 15 passed, 1 failed, 4 skipped"
