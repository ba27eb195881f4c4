"""The SGLang release table: versions compare as versions, untested releases run as the layout they have,
and a new release is one row (plus its test environment, which a test here keeps in step)."""

from __future__ import annotations

import dataclasses
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from specpolicy.adapters import _support
from specpolicy.adapters.sglang import doctor, launch, legacy, releases, versions
from specpolicy.adapters.sglang.releases import Release
from specpolicy.adapters.vllm import versions as vllm_versions
from specpolicy.runtime.settings import AdapterSettings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
legacy_launch = importlib.import_module("specpolicy.adapters.sglang.legacy.launch")
ALGO = ["--model-path", "m", "--speculative-algorithm", "EAGLE3"]


def test_versions_order_as_versions_not_as_strings() -> None:
    assert "0.5.9" > "0.5.10"  # what a string comparison gets wrong
    assert _support.release_key("0.5.9") < _support.release_key("0.5.10")
    assert _support.release_key("0.5.10.post1") == _support.release_key("0.5.10") == (0, 5, 10)
    assert _support.release_key("v1.2") == (1, 2, 0)
    assert _support.parse_version("nightly") is None
    with pytest.raises(ValueError, match="nightly"):
        _support.release_key("nightly")
    assert releases.release("0.5.23.0") is releases.release("0.5.23")  # equal as versions
    assert releases.release("0.5.23rc1") is None


@pytest.mark.parametrize(
    ("version", "layout"),
    [
        ("0.5.10", "0.5.10.post1"),
        ("0.5.10.post2", "0.5.10.post1"),
        ("0.5.11", "0.5.12.post1"),  # the plugin framework and the renamed overlap method arrive in 0.5.11
        ("0.5.12.post2", "0.5.12.post1"),
        ("0.5.13", "0.5.17"),  # v2-only workers from 0.5.13: never the v1 hooks
        ("0.5.19", "0.5.17"),
        ("0.5.20", "0.5.23"),  # SGLang's AdaptiveController with steps=0 arrives in 0.5.20
        ("0.6.0", "0.5.23"),
        ("0.5.9", None),
        ("nightly", None),
        (None, None),
    ],
)
def test_an_untested_release_runs_as_the_layout_it_has(version: str | None, layout: str | None) -> None:
    row = releases.layout_for(version)
    assert (row.version if row else None) == layout


def test_rows_are_checked_when_written() -> None:
    newest = releases.release("0.5.23")
    assert newest is not None
    with pytest.raises(ValueError, match="since 0.5.24 is newer"):
        dataclasses.replace(newest, since="0.5.24")
    with pytest.raises(ValueError, match="PEP 440"):
        dataclasses.replace(newest, version="latest")
    with pytest.raises(ValueError, match="overlap_resolve must name one of its hooks"):
        dataclasses.replace(newest, route="legacy", overlap_resolve="_resolve_nothing")


def _with_rows(monkeypatch: pytest.MonkeyPatch, *rows: Release) -> None:
    monkeypatch.setattr(releases, "RELEASES", (*releases.RELEASES, *rows))


def test_a_new_v2_release_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    newest = releases.RELEASES[-1]
    _with_rows(monkeypatch, dataclasses.replace(newest, version="0.5.30", since="0.5.30"))
    assert versions.check_version("0.5.30") == "0.5.30"  # tested now: no allow_untested needed
    with pytest.raises(versions.UnsupportedVersion, match=r"0\.5\.29 is not supported.*0\.5\.23, 0\.5\.30"):
        versions.check_version("0.5.29")
    assert versions.route_for("0.5.31") == "v2"
    # the launcher accepts it and takes the v2 route (SGLang's controller for several EAGLE depths)
    monkeypatch.setattr(launch, "installed_version", lambda: "0.5.30")
    plan = launch.prepare([*ALGO, "--spec-policy", '{"name": "alternate", "depths": [0, 1, 3]}'])
    assert plan.route == "v2" and "--speculative-adaptive" in plan.sglang_argv
    # the doctor lists it as tested and checks its hooks
    checked: list[str] = []

    def check(targets: tuple[_support.Target, ...]) -> dict[str, str | None]:
        checked.extend(t.dotted for t in targets)
        return {t.dotted: None for t in targets}

    monkeypatch.setattr(versions, "installed_version", lambda: "0.5.30")
    monkeypatch.setattr(doctor, "check_targets", check)
    monkeypatch.setattr(doctor, "entry_point_registered", lambda group, value: True)
    monkeypatch.setattr(doctor, "gpu_name", lambda: None)
    res = doctor.section()
    assert res["supported"] and res["ok"] and res["tested"][-2:] == ["0.5.23", "0.5.30"]
    assert checked == [t.dotted for t in newest.hooks]


def test_a_new_legacy_release_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    base = releases.release("0.5.12.post1")
    assert base is not None
    _with_rows(monkeypatch, dataclasses.replace(base, version="0.5.12.post2", since="0.5.12.post2"))
    settings = AdapterSettings.build("static", metrics=False)
    monkeypatch.setattr(legacy_launch, "sglang_version", lambda: "0.5.12.post2")
    plan = legacy.prepare_launch(settings)
    assert plan.warnings == () and plan.route == "plugin+scheduler-func"
    monkeypatch.setattr(legacy_launch, "sglang_version", lambda: "0.5.12.post3")
    listed = r"0\.5\.12\.post3 .*supported: 0\.5\.10\.post1, 0\.5\.12\.post1, 0\.5\.12\.post2"
    with pytest.raises(legacy.InstallError, match=listed):
        legacy.prepare_launch(settings)
    allowed = legacy.prepare_launch(AdapterSettings.build("static", metrics=False, allow_untested=True))
    assert allowed.warnings == ()


def test_an_untested_release_older_than_every_layout_is_refused_even_when_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(versions.UnsupportedVersion):
        versions.check_version("0.5.9", allow_untested=True)
    monkeypatch.setattr(legacy_launch, "sglang_version", lambda: "0.5.9")
    allowed = AdapterSettings.build("static", metrics=False, allow_untested=True)
    with pytest.raises(legacy.InstallError, match=r"0\.5\.9 is not supported"):
        legacy.prepare_launch(allowed)


def _engine_envs() -> dict[str, str]:
    """engine env name -> the pinned ``package==version`` of scripts/engine-envs.sh's NODEPS table."""
    listed = subprocess.run(
        ["bash", str(ROOT / "scripts" / "engine-envs.sh"), "--list"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()
    text = (ROOT / "scripts" / "engine-envs.sh").read_text()
    pins = dict(re.findall(r'^\s*\[([\w.-]+)\]="(\S+==\S+)', text.split("declare -A NODEPS", 1)[1], re.M))
    assert sorted(listed) == sorted(pins)
    return pins


def test_every_tested_release_has_a_test_environment_and_no_other() -> None:
    pins = _engine_envs()
    expected = {f"sglang-{v}" for v in releases.tested()} | {f"vllm-{v}" for v in vllm_versions.SUPPORTED}
    assert set(pins) == expected
    for env, pin in pins.items():
        engine, version = env.split("-", 1)
        assert pin == f"{engine}=={version}"


def _extra(engine: str) -> tuple[Requirement, list[str]]:
    """The engine's requirement in its install extra, and the extra's other requirements."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    reqs = [Requirement(r) for r in extras[engine]]
    (engine_req,) = [r for r in reqs if r.name == engine]
    return engine_req, sorted(str(r) for r in reqs if r.name != engine)


def _candidates(tested: tuple[str, ...], minors: range, patches: range) -> list[str]:
    """Releases around and between the tested ones: ``major.minor.patch`` for every minor and patch in
    range, each also as a post release, and the tested releases themselves."""
    major = _support.release_key(tested[0])[0]
    out = set(tested)
    for minor in minors:
        for patch in patches:
            base = f"{major}.{minor}.{patch}"
            out |= {base, f"{base}.post1", f"{base}.post2"}
    return sorted(out, key=_support.parse_version)  # type: ignore[arg-type]


def test_the_sglang_extra_admits_exactly_the_range_the_release_table_has_layouts_for() -> None:
    """Between the oldest and the newest tested release, each release runs as the layout it has (an
    untested one only when allowed, ``layout_for``); the extra admits that range and nothing else."""
    req, _ = _extra("sglang")
    tested = releases.tested()
    lo, hi = (_support.parse_version(v) for v in (tested[0], tested[-1]))
    assert lo is not None and hi is not None
    patches = range(_support.release_key(tested[0])[2] - 1, _support.release_key(tested[-1])[2] + 2)
    for v in _candidates(tested, range(4, 7), patches):
        parsed = _support.parse_version(v)
        assert parsed is not None
        expected = lo <= parsed <= hi
        assert req.specifier.contains(v) == expected, f"sglang {v}: the extra says {req.specifier}"
        if expected:
            assert releases.layout_for(v) is not None, v
    assert all(req.specifier.contains(v) for v in tested)


def test_the_vllm_extra_admits_only_the_tested_release_lines() -> None:
    """PEP 440 cannot list exact releases, so the extra admits the tested release lines from the oldest
    tested release to the newest, and excludes every minor line between them with no tested release (an
    untested patch of a tested line is refused at start-up unless allowed)."""
    req, _ = _extra("vllm")
    tested = vllm_versions.SUPPORTED
    lines = {vllm_versions.version_key(v)[:2] for v in tested}
    first, last = (vllm_versions.version_key(v)[1] for v in (tested[0], tested[-1]))
    lo, hi = (_support.parse_version(v) for v in (tested[0], tested[-1]))
    assert lo is not None and hi is not None
    for v in _candidates(tested, range(first - 2, last + 3), range(0, 3)):
        parsed = _support.parse_version(v)
        assert parsed is not None
        expected = lo <= parsed <= hi and vllm_versions.version_key(v)[:2] in lines
        assert req.specifier.contains(v) == expected, f"vllm {v}: the extra says {req.specifier}"
    for v in tested:
        assert req.specifier.contains(v) and vllm_versions.check_version(v) == v


def test_the_engine_extras_need_the_same_metrics_client() -> None:
    """Both adapters export the same metrics (``runtime.metrics``), so both extras pin one client."""
    assert _extra("sglang")[1] == _extra("vllm")[1] == ["prometheus-client>=0.18"]
