"""Errors specpolicy raises at configuration time, and the bounded rendering of bad values in messages."""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable
from typing import Any

__all__ = [
    "ConfigError",
    "FieldError",
    "MAX_ERROR_LINES",
    "MissingExtraError",
    "format_validation_error",
    "short_repr",
    "short_str",
]

#: What a bad value's repr is cut to in messages (a huge value must not make the error path expensive).
REPR_LIMIT = 80

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = REPR_LIMIT


def short_repr(value: object, limit: int = REPR_LIMIT) -> str:
    """``repr(value)`` cut to ``limit`` characters; never raises (a broken ``__repr__`` reads as its type)."""
    if type(value) is int and value.bit_length() > 4 * limit:  # repr of a huge int is quadratic
        return f"<int of {value.bit_length()} bits>"
    if isinstance(value, (list, tuple, dict, set, frozenset)) and len(value) > limit:
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = _REPR.repr(value)  # bounded depth and items: nested containers cannot explode
    except BaseException:  # noqa: BLE001 - a repr that raises anything is still reported, by its type
        return f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_str(exc: BaseException, limit: int = 200) -> str:
    """``str(exc)`` cut to ``limit`` characters; never raises (an exception whose ``__str__`` fails too)."""
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001
        return f"<{type(exc).__name__}: str() failed>"
    if type(text) is not str:
        return f"<{type(exc).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


class ConfigError(ValueError):
    """A policy configuration is invalid. The message names the field and what is allowed."""


class MissingExtraError(RuntimeError):
    """A feature needs an optional extra that is not installed. The message says how to install it."""


class FieldError(ValueError):
    """Raised by a config's cross-field validator to blame one field (pydantic reports those at the model).

    ``format_validation_error`` puts ``field`` into the error path, so the user reads
    ``hysteresis.enable_at: must be < disable_at (48), got 50`` rather than a message about the whole model.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


#: Problems rendered per error message; the rest are counted in one last line (a config of 200,000
#: unknown keys must not print megabytes).
MAX_ERROR_LINES = 20


def format_validation_error(exc: Any, prefix: str = "", fields: Iterable[str] = ()) -> str:
    """Render a pydantic ValidationError as one line per problem: ``field.path: message (got value)``,
    at most ``MAX_ERROR_LINES`` of them, then a line counting the others.

    ``fields`` are the model's field names: an unknown field close to one of them gets a "did you mean".
    """
    known = list(fields)
    lines = []
    errors = exc.errors(include_url=False, include_context=True, include_input=True)
    for err in errors[:MAX_ERROR_LINES]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
        msg = err.get("msg", "invalid value")
        cause = (err.get("ctx") or {}).get("error")
        got = ""
        if isinstance(cause, FieldError):
            loc = f"{loc}.{cause.field}" if loc else cause.field
            msg = str(cause)  # the message already quotes the offending values
        else:
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, ") :]
            if err.get("type") not in ("missing", "extra_forbidden", "value_error") and "input" in err:
                got = f" (got {short_repr(err['input'])})"
        # In a union the location starts with pydantic's discriminator tag ("hysteresis.disable_at"): it
        # stays, because it names the policy the field belongs to.
        path = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or "config")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field (not a parameter of this policy)"
            close = difflib.get_close_matches(loc.rsplit(".", 1)[-1], known, n=1, cutoff=0.6)
            if close:
                msg += f"; did you mean {close[0]!r}?"
        lines.append(f"{path}: {msg}{got}")
    if len(errors) > MAX_ERROR_LINES:
        lines.append(f"... and {len(errors) - MAX_ERROR_LINES} more problems ({len(errors)} in all)")
    return "\n".join(lines)
