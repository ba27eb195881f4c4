"""Wrapping an engine class's method in place, once, with the original kept for restoring.

Both adapters install their hooks as plain functions around the engine's own methods: installing twice is a
no-op, and tests restore every original with ``unwrap_all``. Engine files are never edited.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["HookPlan", "ORIGINALS", "apply", "wrap", "unwrap_all"]

#: (class, method name, wrapper factory) of every method an installer wraps
HookPlan = list[tuple[type, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]

#: (class, method name) -> (original function, whether the class defined it itself), for idempotent install
#: and for restoring in tests.
ORIGINALS: dict[tuple[type, str], tuple[Callable[..., Any], bool]] = {}


def wrap(cls: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Set ``cls.name`` to ``make(original)`` once (the original may be inherited); later calls are no-ops."""
    key = (cls, name)
    if key in ORIGINALS:
        return
    own = name in cls.__dict__
    orig = cls.__dict__[name] if own else getattr(cls, name)
    wrapper = functools.wraps(orig)(make(orig))
    wrapper.__specpolicy_wrapped__ = orig  # type: ignore[attr-defined]
    ORIGINALS[key] = (orig, own)
    setattr(cls, name, wrapper)


def unwrap_all() -> None:
    """Restore every original method (tests)."""
    for (cls, name), (orig, own) in list(ORIGINALS.items()):
        if own:
            setattr(cls, name, orig)
        else:
            delattr(cls, name)
    ORIGINALS.clear()


def apply(plan: HookPlan) -> list[str]:
    """Wrap every method of ``plan`` (idempotent, as ``wrap``); the dotted names wrapped, for the start-up
    line and ``specpolicy doctor``."""
    for cls, name, make in plan:
        wrap(cls, name, make)
    return [f"{cls.__module__}.{cls.__qualname__}.{name}" for cls, name, _ in plan]
