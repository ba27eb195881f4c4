"""Lenient readers of StepStats values: what a policy gets from a field that may hold anything.

``StepStats.fast`` skips validation, so a policy reads each field through an inline type check with these
behind it: numpy numbers are understood, and anything malformed (NaN, negative, fractional, huge, a bool,
a string, an object whose conversion raises) is missing data for that field only. Each reader is cheap and
never raises.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

__all__ = ["MAX_COUNT", "clean_count", "clean_float", "clean_sequence", "sample_sequence"]

_INF = math.inf

#: Largest count (batch size, queue length, depth) a StepStats field may hold: beyond float precision a
#: number is not a count, and arithmetic on it would overflow.
MAX_COUNT = 2**53 - 1


def clean_count(value: object) -> int | None:
    """``value`` as an int in [0, MAX_COUNT], or None when it is not one (NaN, negative, fractional, huge, a
    bool, a string, an object whose conversion raises).

    The slow path behind the policies' inline ``type(x) is int`` check: accepts numpy integers and integral
    floats (and 0-d tensors that convert), so an adapter passing ``np.int64`` or ``3.0`` is understood rather
    than ignored. Never raises.
    """
    if type(value) is int:
        return value if 0 <= value <= MAX_COUNT else None
    if value is None or isinstance(value, (bool, str, bytes)):
        return None
    try:
        try:
            n = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            f = float(value)  # type: ignore[arg-type]
            if not (0 <= f <= MAX_COUNT) or f != int(f):
                return None
            n = int(f)
        return n if type(n) is int and 0 <= n <= MAX_COUNT else None
    except Exception:  # ValueError, OverflowError, a tensor's RuntimeError: not a count
        return None


def clean_float(value: object) -> float | None:
    """``value`` as a finite float >= 0 (a time, a length), or None when it is missing or not one (a bool, a
    string, an int too large for a float, an object whose ``float()`` raises). Never raises."""
    if value.__class__ is float:
        return value if 0.0 <= value < _INF else None
    if value is None or isinstance(value, (bool, str, bytes)):
        return None
    try:
        f = float(value)  # type: ignore[arg-type]
    except Exception:  # TypeError, ValueError, OverflowError, a tensor's RuntimeError: missing
        return None
    return f if 0 <= f < _INF else None


def clean_sequence(value: object) -> Sequence[Any] | None:
    """``value`` when it can be a per-request field (a list, a tuple, a numpy array or another sequence),
    else None: a string, a number or an object that only looks like a container is missing data."""
    if value is None or value.__class__ is list:
        return value
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return None
    if isinstance(value, Sequence) or hasattr(value, "__array__"):
        return value  # type: ignore[return-value]
    return None


def sample_sequence(value: object, limit: int, offset: int = 0) -> tuple[list[Any], int] | None:
    """At most ``limit`` entries of a per-request field as a list, and the field's length, or None when it is
    no sequence (see ``clean_sequence``) or cannot be read.

    A field longer than ``limit`` (> 0) is sampled with an even stride, every ``ceil(n / limit)``-th entry
    from ``offset % stride``, by slicing before any copy: a numpy array or a tensor is sliced as a view and
    converted with its own ``tolist()``, so the cost is that of the sample whatever the container and the
    batch (a list short enough is returned as is, not copied: callers must not modify it). Never raises.
    """
    try:
        seq = value if value.__class__ is list else clean_sequence(value)
        if seq is None:
            return None
        n = len(seq)
        if not 0 <= n <= MAX_COUNT:
            return None
        stride = -(-n // limit) if 0 < limit < n else 1
        start = offset % stride
        if seq.__class__ is list:
            return (seq if stride == 1 else seq[start::stride]), n
        try:
            part: Any = seq[start::stride] if stride > 1 else seq
        except Exception:  # a sequence indexed by ints only
            part = [seq[i] for i in range(start, n, stride)]
        tolist = getattr(part, "tolist", None)
        out = tolist() if callable(tolist) else list(part)
        return (out, n) if out.__class__ is list else None
    except Exception:  # a length or an item that raises: no usable data
        return None
