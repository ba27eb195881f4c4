"""``specpolicy doctor`` against the real installed SGLang (hook targets resolved for real)."""

from __future__ import annotations

import json

import pytest

from specpolicy.cli import main


def test_doctor_finds_every_hook_target(capsys: pytest.CaptureFixture[str], sglang_version: str) -> None:
    rc = main(["doctor", "--engine", "sglang", "--json"])
    data = json.loads(capsys.readouterr().out)["sglang"]
    assert data["version"] == sglang_version and data["supported"] is True
    assert data["targets"] and all(v == "ok" for v in data["targets"].values()), data["targets"]
    if sglang_version != "0.5.10.post1":  # 0.5.10.post1 has no plugin framework, so no entry point use
        assert data["entry_point"] is True
    expected_route = {"0.5.23": "adaptive", "0.5.17": "v2"}.get(sglang_version, "legacy")
    assert data["route"] == expected_route
    assert data["gpu"] is None and rc == 0


def test_smoke_on_cpu_is_reported_as_unavailable(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["doctor", "--engine", "sglang", "--smoke", "--model", "m", "--draft", "d"])
    out = capsys.readouterr().out
    assert rc == 1 and "smoke test skipped: it needs a CUDA GPU" in out
