"""The install commands README.md gives work today: each is run (with ``--dry-run`` for installs).

The checkout form and the wheel form are run as written, in a copy of the checkout; a dry run with
``--no-deps`` shows that specpolicy builds and has the extra, and a dry run of each requirement the extras
declare shows that the pinned engine releases are on the package index. Only the form marked as future may
name the unpublished package.

The tests that run pip ask the package index: they are marked ``network`` and run in their own group of
the test command, not in the core suite.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def _commands(text: str) -> list[list[str]]:
    """Every ``pip ...`` line of the bash blocks, as argv (comments dropped)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            argv = shlex.split(line, comments=True)
            if argv and argv[0] == "pip":
                out.append(argv)
    return out


def _pip(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    args = argv[1:]
    if args[0] == "install":
        args = ["install", "--dry-run", "--no-deps", "--ignore-installed", "--report", "-", *args[1:]]
    return subprocess.run(
        [sys.executable, "-m", "pip", "-q", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    dst = tmp_path_factory.mktemp("checkout")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dst / name)
    return dst


@pytest.mark.network
@pytest.mark.slow
def test_the_serving_install_commands_run(checkout: Path) -> None:
    commands = _commands(_section("Installing on a serving machine"))
    assert len(commands) == 3, commands  # checkout install, wheel build, wheel install
    for argv in commands:
        proc = _pip(argv, checkout)
        assert proc.returncode == 0, f"{shlex.join(argv)}:\n{proc.stderr}"
        assert "does not provide the extra" not in proc.stderr, proc.stderr
        if argv[1] == "install":
            report = json.loads(proc.stdout)
            installs = [(i["metadata"]["name"], i.get("requested_extras")) for i in report["install"]]
            assert len(installs) == 1 and installs[0][0] == "specpolicy" and installs[0][1], installs


@pytest.mark.network
@pytest.mark.parametrize("extra", ["sglang", "vllm", "plot"])
def test_what_each_extra_declares_is_on_the_index(extra: str, tmp_path: Path) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    requirements = extras[extra]
    proc = _pip(["pip", "install", *requirements], tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_the_unpublished_name_only_appears_as_the_future_form() -> None:
    texts = [ROOT / "README.md", *sorted(ROOT.glob("docs/**/*.md")), *sorted(ROOT.glob("specpolicy/**/*.py"))]
    for path in texts:
        for line in path.read_text().splitlines():
            if re.search(r"pip install ['\"]?specpolicy\[", line):
                assert "future" in line, f"{path.name}: {line.strip()}"
