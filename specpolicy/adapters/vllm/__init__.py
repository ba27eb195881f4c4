"""The vLLM adapter: a scheduler class that sets each step's speculative length from a specpolicy policy.

``vllm serve MODEL --speculative-config '{...}' --scheduler-cls specpolicy.adapters.vllm.Scheduler
--additional-config '{"specpolicy": {"policy": "hysteresis"}}'`` (``specpolicy vllm-args`` prints these).
``Scheduler`` picks vLLM's async or sync scheduler base to match the engine configuration, since a custom
class replaces vLLM's own choice. vLLM is imported only when ``Scheduler`` is first touched, so the rest
of the package (``vllm-args``, the settings checks) works without vLLM installed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Scheduler", "PolicyScheduler", "PolicyAsyncScheduler"]

_LAZY = frozenset(__all__)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import scheduler

        return getattr(scheduler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
