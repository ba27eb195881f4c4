"""SpecMode: the one value a policy returns each step.

Modes are interned: ``SpecMode.off()`` and ``SpecMode.on(k)`` for small k return shared instances, so the
per-step decide() path allocates nothing for its answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["SpecMode", "MAX_NUM_STEPS"]

#: Largest draft depth any policy may configure. Engines size buffers and CUDA graphs per depth; 64 is far
#: beyond what any of them captures, and keeps the interned table small.
MAX_NUM_STEPS = 64


@dataclass(frozen=True, slots=True)
class SpecMode:
    """Draft depth for one engine step: ``num_steps`` draft tokens per request, 0 meaning no speculation."""

    num_steps: int

    _TABLE: ClassVar[tuple[SpecMode, ...]]

    def __post_init__(self) -> None:
        n = self.num_steps
        if type(n) is not int or not 0 <= n <= MAX_NUM_STEPS:
            raise ValueError(f"SpecMode.num_steps must be an int in [0, {MAX_NUM_STEPS}], got {n!r}")

    @property
    def enabled(self) -> bool:
        return self.num_steps > 0

    @staticmethod
    def off() -> SpecMode:
        return SpecMode._TABLE[0]

    @staticmethod
    def on(num_steps: int) -> SpecMode:
        """Speculate ``num_steps`` draft tokens deep (1..MAX_NUM_STEPS); use ``off()`` for no speculation."""
        if type(num_steps) is int and 1 <= num_steps <= MAX_NUM_STEPS:
            return SpecMode._TABLE[num_steps]
        raise ValueError(
            f"SpecMode.on(num_steps): num_steps must be an int in [1, {MAX_NUM_STEPS}] (use SpecMode.off() "
            f"for no speculation), got {num_steps!r}"
        )

    @staticmethod
    def of(num_steps: int) -> SpecMode:
        """The mode for a depth that may be 0 (off)."""
        if type(num_steps) is int and 0 <= num_steps <= MAX_NUM_STEPS:
            return SpecMode._TABLE[num_steps]
        raise ValueError(f"num_steps must be an int in [0, {MAX_NUM_STEPS}], got {num_steps!r}")

    def __repr__(self) -> str:
        return "SpecMode.off()" if self.num_steps == 0 else f"SpecMode.on({self.num_steps})"


SpecMode._TABLE = tuple(SpecMode(k) for k in range(MAX_NUM_STEPS + 1))
