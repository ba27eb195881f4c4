"""scripts/gpu/sglang_bundle.py and make_bundle.sh: each release's row against its METADATA and the image."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import bundle_plan as bp
import pytest
import sglang_bundle as sb
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "results" / "2026-12-02-sglang-0.5.12.post1-run7" / "gpu-image-packages-2026-12-02.txt"
ENV_DIR = Path(os.environ.get("SPECPOLICY_ENV_DIR", ROOT / ".venvs"))


def _metadata(release: str) -> Path:
    """sglang's METADATA in that release's engine environment (scripts/engine-envs.sh), or a skip."""
    found = sorted(
        ENV_DIR.glob(f"sglang-{release}/lib/python3*/site-packages/sglang-{release}.dist-info/METADATA")
    )
    if not found:
        pytest.skip(f"no engine environment sglang-{release} under {ENV_DIR} (scripts/engine-envs.sh)")
    return found[0]


def _pinned(r: sb.Release) -> dict[str, Version]:
    pins = [*r.pins, r.kernel]
    return {canonicalize_name(p.split("==")[0]): Version(p.split("==")[1]) for p in pins}


@pytest.mark.parametrize("release", ["0.5.17"])
def test_every_requirement_the_image_cannot_meet_is_carried_held_or_left_out_with_a_reason(
    release: str,
) -> None:
    r = sb.release(release)
    reqs = bp.read_requirements(_metadata(release))
    image = bp.read_freeze(IMAGE.read_text())
    plan = bp.plan(reqs, image, "3.12.3")
    pinned = _pinned(r)
    # the release runs on the image's torch (2.11.0): a release pinning another one cannot have a row
    assert any(Requirement(t).name == "torch" for t in plan.satisfied)
    reasons = {canonicalize_name(n) for n in (*r.held, *r.left_out)}
    unaccounted = [
        t
        for t in plan.missing + plan.conflicting
        if canonicalize_name(Requirement(t).name) not in pinned | dict.fromkeys(reasons)
    ]
    assert unaccounted == []
    # a carried pin meets the release's own requirement (its exact == pins included)
    for text in reqs:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if name in pinned and (
            req.marker is None or req.marker.evaluate({**bp.host_environment("3.12.3"), "extra": ""})
        ):
            assert req.specifier.contains(pinned[name], prereleases=True), (text, pinned[name])
    # what the row says it leaves out really is a requirement the image lacks
    declared = {canonicalize_name(Requirement(t).name) for t in plan.missing + plan.conflicting}
    assert {canonicalize_name(n) for n in r.left_out} <= declared
    assert {canonicalize_name(n) for n in r.held} <= {
        canonicalize_name(Requirement(t).name) for t in plan.conflicting
    }


@pytest.mark.parametrize("release", list(sb.RELEASES))
def test_the_image_packages_a_row_relies_on_are_in_the_image_at_that_version(release: str) -> None:
    image = bp.read_freeze(IMAGE.read_text())
    for spec in sb.release(release).image:
        name, version = spec.split("==")
        assert image.get(canonicalize_name(name)) == version, spec
    # and the row carries nothing the image already holds at the same version (a wasted part)
    same = [
        p
        for p in sb.release(release).pins
        if image.get(canonicalize_name(p.split("==")[0])) == p.split("==")[1]
    ]
    assert same == []


def test_a_bad_row_is_refused_naming_the_release() -> None:
    with pytest.raises(ValueError, match="0.5.99: pins must start with sglang==0.5.99"):
        sb.Release("0.5.99", ("transformers==5.0.0",), "sglang-kernel==1", (), ())
    with pytest.raises(ValueError, match=r"0.5.99: pins must be unique.*\['xgrammar'\]"):
        sb.Release("0.5.99", ("sglang==0.5.99", "xgrammar==0.2.0", "xgrammar==0.2.1"), "k==1", (), ())


def test_the_command_prints_a_rows_items_and_refuses_an_unknown_release(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert sb.main(["pins", "--release", "0.5.17"]) == 0
    pins = capsys.readouterr().out.split()
    assert pins[0] == "sglang==0.5.17" and "transformers==5.12.1" in pins
    assert sb.main(["kernel"]) == 0 and capsys.readouterr().out.strip() == "sglang-kernel==0.4.2.post2"
    assert sb.main(["pins", "--release", "0.5.99"]) == 2
    assert "0.5.12.post1, 0.5.17" in capsys.readouterr().err


def test_make_bundle_stops_on_an_unknown_release_before_downloading(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cp = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu" / "make_bundle.sh"), "--release", "0.5.99", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "SGLANG_BUNDLE_DL": str(tmp_path / "dl")},
    )
    assert cp.returncode != 0 and "no SGLang bundle row for '0.5.99'" in cp.stderr
    assert not out.exists() and not (tmp_path / "dl").exists()
