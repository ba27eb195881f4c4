"""What both engine adapters share: resolving engine names, checking their shape, the failure mode."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from specpolicy.adapters import _support, doctor
from specpolicy.adapters._support import Target, check_targets, refuse_or_warn, resolve
from specpolicy.runtime.runtime import AdapterInstallError


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fake engine package: ``fakeeng.core`` imports fine, ``fakeeng.broken`` fails on a dependency."""
    pkg = tmp_path / "fakeeng"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text(
        "from dataclasses import dataclass\n"
        "class Worker:\n    def step(self, batch, k=1): ...\n"
        "@dataclass\nclass Result:\n    tokens: int = 0\n"
    )
    (pkg / "broken.py").write_text("import no_such_dependency_xyz\nclass Worker: ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "fakeeng"


def test_resolve_walks_modules_then_attributes(engine: str) -> None:
    import fakeeng.core  # type: ignore[import-not-found]

    assert resolve("fakeeng.core.Worker.step") is fakeeng.core.Worker.step
    with pytest.raises(AttributeError):
        resolve("fakeeng.core.Worker.gone")
    with pytest.raises(ModuleNotFoundError, match="no_such_engine_xyz"):
        resolve("no_such_engine_xyz.Worker")


def test_a_module_that_fails_to_import_reports_its_own_error(engine: str) -> None:
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_xyz"):
        resolve("fakeeng.broken.Worker")
    (why,) = check_targets(["fakeeng.broken.Worker"]).values()
    assert why is not None and "no_such_dependency_xyz" in why


def _why(target: Target | str) -> str | None:
    (why,) = check_targets([target]).values()
    return why


def test_check_targets_reports_each_shape_problem(engine: str) -> None:
    assert _why(Target("fakeeng.core.Worker.step", ("self", "batch"))) is None
    assert _why("fakeeng.core.Result.tokens") is None
    renamed = _why(Target("fakeeng.core.Worker.step", ("self", "model_worker_batch")))
    assert renamed == "expected parameters ['self', 'model_worker_batch'], found ['self', 'batch', 'k']"
    moved = _why(Target("fakeeng.core.Worker.step", ("batch",)))  # present, but not first
    assert moved is not None and moved.startswith("expected parameters ['batch']")
    assert _why(Target("fakeeng.core.Result", fields=("tokens", "logits"))) == "missing fields ['logits']"


def test_the_doctors_former_check_targets_says_ok(engine: str) -> None:
    got = doctor.check_targets(("fakeeng.core.Worker", "fakeeng.core.Nope"))
    assert got["fakeeng.core.Worker"] == "ok"
    assert got["fakeeng.core.Nope"].startswith("not found (AttributeError")


def test_refuse_or_warn(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("specpolicy.test")
    problem = AdapterInstallError("no adaptive controller")
    with pytest.raises(AdapterInstallError) as info:
        refuse_or_warn("refuse", problem, log)
    assert info.value is problem
    with pytest.raises(SystemExit, match="refusing to start: no adaptive controller"):
        refuse_or_warn("refuse", problem, log, refuse=lambda why: SystemExit(f"refusing to start: {why}"))
    with pytest.raises(AdapterInstallError, match="a reason"):
        refuse_or_warn("refuse", "a reason", log)
    with caplog.at_level(logging.ERROR, logger="specpolicy.test"):
        refuse_or_warn("warn", problem, log, without="vLLM runs without the policy")
    assert caplog.messages == ["specpolicy: NOT ACTIVE, vLLM runs without the policy: no adaptive controller"]


def test_installed_version_reads_metadata_without_importing() -> None:
    assert _support.installed_version("pytest") == pytest.__version__
    assert _support.installed_version("no-such-distribution-xyz") is None
