"""The vLLM adapter names what the engine serves in the warm start's fingerprint: a state learned on one
model or drafter is not loaded for another."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")


def _bridge(make_config: Any, path: Path) -> Any:
    from specpolicy.adapters.vllm import scheduler

    vc = make_config(
        additional_config={
            "specpolicy": {"policy": {"name": "scripted"}, "metrics": False, "warm_start_path": str(path)}
        }
    )
    bridge = scheduler.install(vc)
    assert bridge is not None
    return vc, bridge


def test_the_fingerprint_names_the_target_and_the_draft_model(make_config: Any, tmp_path: Path) -> None:
    vc, bridge = _bridge(make_config, tmp_path / "warm.json")
    try:
        fp = bridge.runtime.warm_start._fingerprint()
        assert fp["engine"] == "vllm"
        assert fp["model"] == vc.model_config.model
        assert fp["drafter"] == vc.speculative_config.model
        assert fp["model"] and fp["drafter"] and fp["model"] != fp["drafter"]
    finally:
        bridge.close()
