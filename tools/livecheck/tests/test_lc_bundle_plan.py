"""specpolicy_livecheck.bundle_plan: an engine's requirements sorted against the GPU image's packages."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from specpolicy_livecheck import bundle_plan as bp
from specpolicy_livecheck.paths import IMAGE_PACKAGES

METADATA = """Metadata-Version: 2.4
Name: engine
Version: 1.0
Requires-Dist: numpy
Requires-Dist: PyYAML>=6
Requires-Dist: typing_extensions>=4.10
Requires-Dist: numba==0.65.0
Requires-Dist: setuptools<81.0.0,>=77.0.3; python_version > "3.11"
Requires-Dist: tomli; python_version < "3.11"
Requires-Dist: xgrammar<1.0.0,>=0.2.1; platform_machine == "x86_64"
Requires-Dist: pyobjc; platform_system == "Darwin"
Requires-Dist: pandas; extra == "bench"
Requires-Dist: torch==2.11.0
"""

IMAGE = """numpy==2.3.1
pyyaml==6.0.2
typing-extensions==4.15.0
numba==0.68.0
setuptools==81.0.0
torch==2.11.0+cu130
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_requirements_are_sorted_by_what_the_image_holds(tmp_path: Path) -> None:
    reqs = bp.read_requirements(_write(tmp_path / "METADATA", METADATA))
    p = bp.plan(reqs, bp.read_freeze(IMAGE), "3.12.3")
    assert [r.split(";")[0] for r in p.missing] == ["xgrammar<1.0.0,>=0.2.1"]  # x86_64: it applies
    assert p.conflicting == ["numba==0.65.0", 'setuptools<81.0.0,>=77.0.3; python_version > "3.11"']
    assert p.held == {"setuptools": "81.0.0", "numba": "0.68.0"}
    # names compare canonically (PyYAML / pyyaml, typing_extensions / typing-extensions); a local version
    # (+cu130) satisfies an exact pin of its public version
    assert p.satisfied == ["numpy", "PyYAML>=6", "typing_extensions>=4.10", "torch==2.11.0"]
    assert sorted(r.split(";")[0] for r in p.skipped) == ["pandas", "pyobjc", "tomli"]


def test_the_host_python_decides_version_markers(tmp_path: Path) -> None:
    reqs = bp.read_requirements(_write(tmp_path / "METADATA", METADATA))
    p = bp.plan(reqs, bp.read_freeze(IMAGE), "3.10.14")
    assert 'tomli; python_version < "3.11"' in p.missing
    assert not any(r.startswith("setuptools") for r in p.conflicting + p.satisfied + p.missing)


def test_a_wheel_is_read_like_its_metadata(tmp_path: Path) -> None:
    wheel = tmp_path / "engine-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("engine/__init__.py", "")
        z.writestr("engine-1.0.dist-info/METADATA", METADATA)
    assert bp.read_requirements(wheel) == bp.read_requirements(_write(tmp_path / "METADATA", METADATA))


def test_the_recorded_image_list_is_read_whole() -> None:
    held = bp.read_freeze(IMAGE_PACKAGES.read_text())
    assert len(held) == 197
    assert held["torch"] == "2.11.0" and held["numba"] == "0.68.0" and held["triton"] == "3.6.0"


def test_the_command_writes_the_plan_and_refuses_a_missing_file(tmp_path: Path) -> None:
    meta, image, out = (
        _write(tmp_path / "METADATA", METADATA),
        _write(tmp_path / "image.txt", IMAGE),
        tmp_path / "p.json",
    )
    assert bp.main([str(meta), str(image), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["held"] == {"setuptools": "81.0.0", "numba": "0.68.0"} and len(doc["satisfied"]) == 4
    assert bp.main([str(tmp_path / "nope"), str(image)]) == 2
