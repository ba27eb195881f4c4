"""Fixtures for the vLLM contract tests; the helpers live in ``_vllm_harness``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Before vLLM is imported: CPU platform and quiet logs (_vllm_harness pins the model runner per release).
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
# Where Triton is installed, vLLM keeps it only with one active GPU driver, or none in a process whose
# CUDA_VISIBLE_DEVICES is empty; 0.34's drafter modules import it (test_off_drafter).
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
pytest.importorskip("vllm")

from _vllm_harness import ScriptedConfig, ScriptedPolicy, engine_args, write_model_dirs  # noqa: E402

import specpolicy.registry as policy_mod  # noqa: E402
from specpolicy import PolicyEntry  # noqa: E402
from specpolicy.adapters.vllm.config import SCHEDULER_CLS  # noqa: E402
from specpolicy.policies import BUILTIN_ENTRIES  # noqa: E402


@pytest.fixture(autouse=True)
def scripted_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = policy_mod._Registry(
        [*BUILTIN_ENTRIES, PolicyEntry("scripted", ScriptedConfig, ScriptedPolicy)]
    )
    monkeypatch.setattr(policy_mod, "_registry", lambda: registry)
    for var in ("SPECPOLICY_CONFIG", "SPECPOLICY_POLICY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_model_dirs(tmp_path_factory.mktemp("models"))


@pytest.fixture
def make_config(model_dirs: tuple[Path, Path]) -> Callable[..., Any]:
    def make(*, async_scheduling: bool = False, **kw: Any) -> Any:
        """A finished VllmConfig. On CPU vLLM resolves async scheduling off, so an async one is finished
        without the specpolicy scheduler (the front-end check would judge a sync engine, where on a GPU it
        sees the resolved async one), then given it: the engine-core checks run when it is built."""
        cls = kw.pop("scheduler_cls", SCHEDULER_CLS)
        args = engine_args(model_dirs, scheduler_cls=None if async_scheduling else cls, **kw)
        vc = args.create_engine_config()
        vc.scheduler_config.async_scheduling = async_scheduling
        vc.scheduler_config.scheduler_cls = cls
        vc.cache_config.num_gpu_blocks = 256
        return vc

    return make


@pytest.fixture
def restore_engine_args() -> Iterator[None]:
    """Undo the plugin's EngineArgs guard and the loaded-once flag after a test that loads plugins again."""
    import vllm.plugins
    from vllm.engine.arg_utils import EngineArgs

    original = EngineArgs.__dict__["create_engine_config"]
    loaded = vllm.plugins.plugins_loaded
    yield
    EngineArgs.create_engine_config = original
    vllm.plugins.plugins_loaded = loaded
