"""A ``run_scheduler_process`` that installs specpolicy first: the way in on 0.5.10.post1 (no plugins).

SGLang spawns each scheduler with ``target=run_scheduler_process_func``; spawn pickles the function by name,
so the child imports this module and runs ``install()`` (settings from ``SPECPOLICY_CONFIG``, which the
launcher exported and the child inherited) before SGLang's own scheduler code runs. A patch made in the
launching process would never reach the child.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_scheduler_process"]


def run_scheduler_process(*args: Any, **kwargs: Any) -> Any:
    """Install the legacy hooks in this (scheduler) process, then run SGLang's scheduler unchanged."""
    from sglang.srt.managers.scheduler import run_scheduler_process as sglang_run_scheduler_process

    from .install import install

    install()
    return sglang_run_scheduler_process(*args, **kwargs)
