"""``specpolicy doctor`` reports every engine in one shape: same JSON keys, same lines, a fix per problem."""

from __future__ import annotations

import importlib.metadata
import io
import json

import pytest

from specpolicy.adapters import doctor
from specpolicy.adapters.sglang import doctor as sglang_doctor
from specpolicy.adapters.sglang import versions as sglang_versions
from specpolicy.adapters.vllm import doctor as vllm_doctor
from specpolicy.cli import main


@pytest.fixture
def no_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang_versions, "installed_version", lambda: None)
    monkeypatch.setattr(vllm_doctor, "installed_version", lambda: None)


@pytest.fixture
def untested_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both engines installed at a release specpolicy was not tested with, nothing else in the way."""
    monkeypatch.setattr(sglang_versions, "installed_version", lambda: "0.5.99")
    monkeypatch.setattr(sglang_doctor, "check_targets", lambda targets: {t.dotted: None for t in targets})
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    monkeypatch.setattr(vllm_doctor, "installed_version", lambda: "0.35.0")
    monkeypatch.setattr(vllm_doctor, "check_targets", lambda: {"vllm.x": None})
    monkeypatch.setattr(vllm_doctor, "_entry_point_registered", lambda: False)
    monkeypatch.setattr(vllm_doctor, "_scheduler_problem", lambda: None)
    monkeypatch.setattr(vllm_doctor, "gpu_name", lambda: None)


def _json(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    assert main(["doctor", "--json"]) == 1
    data: dict[str, dict[str, object]] = json.loads(capsys.readouterr().out)
    return data


@pytest.mark.usefixtures("no_engines")
def test_not_installed_reads_the_same_for_both(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys)
    assert list(data["sglang"]) == list(data["vllm"])
    for section in data.values():
        assert section["version"] is None and section["ok"] is False
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "NOT supported" not in out
    lines = out.splitlines()
    assert lines[0].startswith("SGLang: not installed (tested: ")
    assert "vLLM: not installed (tested: 0.26.0, 0.33.0, 0.34.0)" in lines
    problems = [ln for ln in lines if "PROBLEM" in ln]
    assert len(problems) == 2 and all("; fix: pip install '" in p for p in problems)


@pytest.mark.usefixtures("untested_engines")
def test_every_problem_carries_its_fix(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys)
    assert list(data["sglang"]) == list(data["vllm"])
    for section in data.values():
        problems = section["problems"]
        assert isinstance(problems, list) and problems
        assert all("; fix: " in p for p in problems), problems
        assert any("entry point is not registered; fix: reinstall specpolicy" in p for p in problems)
        assert any("is not supported" in p and "pip install" in p for p in problems)
    out = io.StringIO()
    doctor.report(engine="all", out=out)
    text = out.getvalue()
    assert "SGLang: 0.5.99, not a tested release (tested: " in text
    assert "vLLM: 0.35.0, not a tested release (tested: 0.26.0, 0.33.0, 0.34.0)" in text
    assert text.count("  plugin entry point: MISSING") == 2
    assert text.count("  hooked engine internals: ") == 2
