"""AttrSwap: the one save/restore of engine attributes around an off step (or a start-up build).

The off step runs SGLang's own code with a few of its objects pointed elsewhere for one call: the target
runner's attention backend and graph runner (the decode or one-token state), the worker's and server args'
speculative sizes. ``swap_in`` saves each named attribute and assigns the new value, ``swap_out`` puts the
saved values back in reverse order; both are plain attribute reads and writes, so the cost per step is a few
hundred nanoseconds beside a forward of milliseconds. ``swapped`` is the same as a ``with`` block, for the
start-up builds, which also list attributes only to restore them (side effects of building a backend).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["KEEP", "AttrSwap", "Assignment", "swapped"]

#: (object, attribute name, value to assign, or ``KEEP`` to leave it and only restore it afterwards)
Assignment = tuple[Any, str, Any]


class _Keep:
    __slots__ = ()

    def __repr__(self) -> str:
        return "KEEP"


#: An assignment's value meaning "do not assign; restore the current value afterwards".
KEEP: Any = _Keep()


class AttrSwap:
    """Assigns attributes for the length of one call and restores them; reusable, one swap at a time.

    An attribute the object lacks is skipped (releases differ in what exists), so the swap never adds one.
    A ``swap_in`` while a swap is in place restores that one first: nothing stays swapped by mistake.
    """

    __slots__ = ("_saved",)

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] | None = None

    @property
    def active(self) -> bool:
        """True between ``swap_in`` and ``swap_out``."""
        return self._saved is not None

    def swap_in(self, assignments: Iterable[Assignment]) -> None:
        if self._saved is not None:
            self.swap_out()
        saved: list[tuple[Any, str, Any]] = []
        self._saved = saved
        for obj, name, value in assignments:
            try:
                old = getattr(obj, name)
            except AttributeError:
                continue
            if value is not KEEP:
                setattr(obj, name, value)  # one that raises was not changed: nothing to restore
            saved.append((obj, name, old))

    def swap_out(self) -> None:
        saved = self._saved
        if saved is None:
            return
        self._saved = None
        for obj, name, old in reversed(saved):
            setattr(obj, name, old)


@contextmanager
def swapped(assignments: Iterable[Assignment]) -> Iterator[None]:
    """``assignments`` in place for the block, the old values back after it (also when it raises)."""
    swap = AttrSwap()
    try:
        swap.swap_in(assignments)
        yield
    finally:
        swap.swap_out()
