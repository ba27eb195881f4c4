"""``bundle paired-live``: the GPU host's side-by-side run, fed the bundle one part per call.

What can run without a GPU: the parts a call carries reach the stash and a call with "-" stops there, a
folder without parts is refused, a stash whose parts do not make a bundle stops before any engine (exit 3,
the install's own output shown), and the script's usage is what ``--help`` prints.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from lc_env import child_env
from specpolicy_livecheck import cli
from specpolicy_livecheck.paths import SCRIPTS

SCRIPT = SCRIPTS / "paired_live.sh"


def _run(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GC_")}
    full = child_env(base=base) | {
        "GC_STASH": str(tmp / "stash"),
        "GC_SITE": str(tmp / "site"),
        "GC_WORK": str(tmp / "work"),
        "GC_OUT": str(tmp / "out"),
        **env,
    }
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full, timeout=60)


def _parts(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True)
    for n in names:
        (folder / n).write_bytes(n.encode() * 100)
    return folder


def test_each_call_adds_its_parts_to_the_stash(tmp_path: Path) -> None:
    p1 = _parts(tmp_path / "p1", "part.00")
    p2 = _parts(tmp_path / "p2", "part.01")
    first = _run(tmp_path, "590", "-", GC_PARTS=str(p1))
    second = _run(tmp_path, "590", "-", GC_PARTS=str(p2))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    stash = tmp_path / "stash"
    assert sorted(p.name for p in stash.iterdir()) == ["part.00", "part.01"]
    assert (stash / "part.01").read_bytes() == b"part.01" * 100
    assert "part.00 part.01" in second.stdout
    assert not (tmp_path / "site").exists()  # "-": nothing installed


def test_a_folder_without_parts_is_refused(tmp_path: Path) -> None:
    empty = _parts(tmp_path / "p9")
    res = _run(tmp_path, "590", "-", GC_PARTS=str(empty))
    assert res.returncode == 2
    assert f"no part.* in {empty}" in res.stderr


def test_a_broken_bundle_stops_before_any_engine(tmp_path: Path) -> None:
    """Parts that are not a tar: the install fails (run_live.sh exit 3), nothing runs, its output shown."""
    p4 = _parts(tmp_path / "p4", "part.00")
    res = _run(tmp_path, "590", "never_ov,static_draft_ov", GC_PARTS=str(p4), GC_WHEELS=str(tmp_path))
    assert res.returncode == 3, res.stdout + res.stderr
    assert (tmp_path / "out" / "install.txt").exists()
    assert not (tmp_path / "out" / "log.txt.gz").exists()
    assert not (tmp_path / "work").exists()


def test_the_limit_and_variants_are_required(tmp_path: Path) -> None:
    res = _run(tmp_path, "590")
    assert res.returncode != 0
    assert "VARIANTS" in res.stderr


def test_help_prints_the_usage(capsys: object) -> None:
    assert cli.main(["bundle", "paired-live", "--help"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "Usage: specpolicy-livecheck bundle paired-live LIMIT_S VARIANTS" in out
    assert "GC_PARTS" in out
