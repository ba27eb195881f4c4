"""``wheel_cut``: a wheel less the members a bundle does not need is still a wheel pip installs, and a cut
that matches nothing, or reaches the metadata, stops the bundle instead of shipping the wheel uncut."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from lc_env import child_env
from specpolicy_livecheck import sglang_bundle as sb
from specpolicy_livecheck import wheel_cut

DIST = "demo_pkg-1.0.dist-info"


def _wheel(tmp: Path) -> Path:
    files = {
        "demo_pkg/__init__.py": "VALUE = 7\n",
        "demo_pkg/lib/libdemo.a": "x" * 5000,
        "demo_pkg/include/demo/demo.h": "int demo(void);\n",
        "demo_pkg/include/dlpack.h": "/* dlpack */\n",
        f"{DIST}/METADATA": "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
        f"{DIST}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{DIST}/RECORD,,\n"
    path = tmp / "demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr(f"{DIST}/RECORD", record)
    return path


def test_the_cut_wheel_installs_and_imports_without_the_cut_members(tmp_path: Path) -> None:
    whl = _wheel(tmp_path)
    res = wheel_cut.cut(whl, ("demo_pkg/lib/*.a", "demo_pkg/include/*"))
    assert (res.members, res.raw_bytes) == (3, 5000 + len("int demo(void);\n") + len("/* dlpack */\n"))
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        record = z.read(f"{DIST}/RECORD").decode()
    assert names == {"demo_pkg/__init__.py", f"{DIST}/METADATA", f"{DIST}/WHEEL", f"{DIST}/RECORD"}
    assert "libdemo.a" not in record and "include" not in record and "demo_pkg/__init__.py,," in record
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--target",
            str(target),
            str(whl),
        ],
        check=True,
        capture_output=True,
    )
    assert not (target / "demo_pkg" / "lib").exists() and not (target / "demo_pkg" / "include").exists()
    out = subprocess.run(
        [sys.executable, "-c", "import demo_pkg; print(demo_pkg.VALUE)"],
        capture_output=True,
        text=True,
        env=child_env(target),
        check=True,
    )
    assert out.stdout.strip() == "7"


@pytest.mark.parametrize(
    ("glob", "message"),
    [
        ("demo_pkg/lib/*.so", "cut 'demo_pkg/lib/*.so' matches no member"),
        (f"{DIST}/*", "reaches the metadata"),
    ],
)
def test_a_cut_that_matches_nothing_or_the_metadata_leaves_the_wheel_as_it_was(
    tmp_path: Path, glob: str, message: str
) -> None:
    whl = _wheel(tmp_path)
    before = whl.read_bytes()
    with pytest.raises(ValueError, match=message.replace("*", r"\*").replace(".", r"\.")):
        wheel_cut.cut(whl, (glob,))
    assert whl.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [whl.name]  # no temporary file left beside it


def test_the_command_reports_what_it_cut_and_fails_on_a_bad_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whl = _wheel(tmp_path)
    assert wheel_cut.main([str(whl), "demo_pkg/lib/*.a"]) == 0
    assert "cut 1 members, 5000 bytes" in capsys.readouterr().out
    assert wheel_cut.main([str(whl), "demo_pkg/lib/*.a"]) == 3  # already cut: matches nothing now
    assert "matches no member" in capsys.readouterr().err
    assert wheel_cut.main([str(whl)]) == 2


def test_a_row_cuts_only_wheels_it_pins_and_prints_its_cuts(capsys: pytest.CaptureFixture[str]) -> None:
    r = sb.release("0.5.17")
    with pytest.raises(ValueError, match=r"0.5.17: cuts name wheels it does not pin: \['vllm'\]"):
        sb.Release(
            r.version, r.pins, r.kernel, r.kernel_keep, r.kernel_drop, cuts=(("vllm", "vllm/*.a", "x"),)
        )
    assert sb.main(["cuts", "--release", "0.5.17"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "xgrammar xgrammar/lib/*.a" in lines
    assert all(line.split()[0] in {p.split("==")[0] for p in r.pins} for line in lines)
