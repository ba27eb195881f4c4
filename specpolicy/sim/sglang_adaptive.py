"""``sglang-adaptive``: SGLang's built-in adaptive rule, run through SGLang's own class.

The class is ``sglang.srt.speculative.adaptive_spec_params.AdaptiveSpeculativeParams`` (SGLang 0.5.20+, with
``get_steps_for_batch`` and ``on_verify_complete``). Its module imports four SGLang helpers used only to
validate server arguments and to log on rank 0, and they pull in torch. So the module file is executed under a
private name with those helpers stubbed for the duration of the import (``sys.modules`` is restored after):
everything that decides a step is SGLang's code, and no SGLang import side effect (``sglang/__init__.py``,
torch) is needed. The package is found by ``importlib`` or, for SGLang installed in another environment, at
``$SPECPOLICY_SGLANG_DIR``. Where it is absent, or its class lacks that API, the comparator is skipped with a
note.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
import types
from pathlib import Path
from typing import Any

from ..mode import SpecMode
from ..stats import StepStats

__all__ = ["load_sglang_adaptive", "SGLangAdaptivePolicy"]

_MODULE = "sglang.srt.speculative.adaptive_spec_params"
_STUBBED = (
    "sglang.srt.arg_groups.overrides",
    "sglang.srt.runtime_context",
    "sglang.srt.speculative.spec_info",
    "sglang.srt.utils",
)


def _stub(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)

    def log_info_on_rank0(logger: logging.Logger, msg: str) -> None:
        logger.debug(msg)

    def missing(attr: str) -> Any:
        def unavailable(*_a: Any, **_k: Any) -> Any:
            raise RuntimeError(f"{name}.{attr} is not available in the simulator")

        return unavailable

    mod.log_info_on_rank0 = log_info_on_rank0  # type: ignore[attr-defined]
    mod.__getattr__ = missing  # type: ignore[method-assign]
    return mod


#: SGLang 0.5.23's decode CUDA-graph batch sizes with speculative decoding, up to 256
#: (``generate_decode_cuda_graph_batch_sizes`` in ``arg_groups/cuda_graph_hook.py``).
CUDA_GRAPH_BS = (*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8))

#: A directory holding SGLang's ``sglang`` package, for SGLang installed in another environment (a venv).
ENV_DIR = "SPECPOLICY_SGLANG_DIR"


def _sglang_root() -> tuple[Path | None, str]:
    env = os.environ.get(ENV_DIR)
    if env:
        root = Path(env)
        if (root / "srt").is_dir():
            return root, ""
        return None, f"sglang-adaptive skipped: {ENV_DIR}={env} is not an sglang package directory"
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None, (
            "sglang-adaptive skipped: sglang is not installed (pip install --no-deps sglang==0.5.23, or set "
            f"{ENV_DIR} to the sglang package directory of another environment)"
        )
    return Path(next(iter(spec.submodule_search_locations))), ""


@functools.lru_cache(maxsize=1)
def load_sglang_adaptive() -> tuple[type[Any] | None, str]:
    """(AdaptiveSpeculativeParams class or None, a note saying where it came from or why it is missing)."""
    root, why = _sglang_root()
    if root is None:
        return None, why
    path = root / "srt" / "speculative" / "adaptive_spec_params.py"
    if not path.is_file():
        return None, f"sglang-adaptive skipped: {path} not found (needs SGLang 0.5.20+)"
    version = _version(root)
    saved = {n: sys.modules.get(n) for n in _STUBBED}
    private = "_specpolicy_sglang_adaptive_spec_params"
    try:
        for n in _STUBBED:
            sys.modules[n] = _stub(n)
        mod_spec = importlib.util.spec_from_file_location(private, path)
        if mod_spec is None or mod_spec.loader is None:
            return None, f"sglang-adaptive skipped: cannot load {path}"
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    except Exception as exc:  # an incompatible SGLang release: skip, say why
        return None, f"sglang-adaptive skipped: cannot import SGLang {version}'s {_MODULE} ({exc})"
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    cls = getattr(module, "AdaptiveSpeculativeParams", None)
    if cls is None or not all(hasattr(cls, a) for a in ("get_steps_for_batch", "on_verify_complete")):
        return None, f"sglang-adaptive skipped: SGLang {version} lacks get_steps_for_batch/on_verify_complete"
    return cls, f"sglang-adaptive: SGLang {version}'s own AdaptiveSpeculativeParams, default config ({path})"


def _version(root: Path) -> str:
    """The version from the dist-info beside the package (the package is never imported)."""
    for dist in sorted(root.parent.glob("sglang-*.dist-info")):
        return dist.name[len("sglang-") : -len(".dist-info")]
    return "(unknown version)"


class SGLangAdaptivePolicy:
    """Drives SGLang's class the way its ``AdaptiveController`` does, from StepStats.

    Per step SGLang calls ``on_verify_complete(num_correct_drafts_per_req, batch_size)`` with the previous
    step's per-request accepted drafts (all zeros when that step did not speculate), then
    ``get_steps_for_batch(batch_size)``. Depths above ``max_steps`` are clamped by the caller's engine.
    ``initial_steps`` 3 is what SGLang picks without ``--speculative-num-steps``: the median of the default
    config's candidate steps (0, 1, 3, 5, 7). Batch sizes are padded to SGLang's CUDA-graph sizes before
    routing, as in a server running with CUDA graphs.
    """

    def __init__(self, initial_steps: int = 3) -> None:
        cls, note = load_sglang_adaptive()
        if cls is None:
            raise RuntimeError(note)
        self._cls = cls
        self._initial = initial_steps
        self._params: Any = self._new()
        self._last_bs = 0

    def _new(self) -> Any:
        params = self._cls(initial_steps=self._initial)
        if hasattr(params, "set_cuda_graph_bs"):
            # A server with CUDA graphs pads the batch size to a captured size before routing it to a slot.
            params.set_cuda_graph_bs(list(CUDA_GRAPH_BS))
        return params

    def decide(self, stats: StepStats) -> SpecMode:
        params = self._params
        if self._last_bs:
            acc = stats.accepted_draft_tokens
            if stats.last_num_steps > 0 and acc:
                params.on_verify_complete(list(acc), len(acc))
            else:
                params.on_verify_complete([0] * self._last_bs, self._last_bs)
        self._last_bs = stats.batch_size
        return SpecMode.of(int(params.get_steps_for_batch(max(1, stats.batch_size))))

    def reset(self) -> None:
        self._params = self._new()
        self._last_bs = 0
