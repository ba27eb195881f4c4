"""Errors specpolicy raises at configuration time."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["ConfigError", "FieldError", "MissingExtraError", "format_validation_error"]


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


def format_validation_error(exc: Any, prefix: str = "", fields: Iterable[str] = ()) -> str:
    """Render a pydantic ValidationError as one line per problem: ``field.path: message (got value)``.

    ``fields`` are the model's field names: an unknown field close to one of them gets a "did you mean".
    """
    known = list(fields)
    lines = []
    for err in exc.errors():
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
                got = f" (got {err['input']!r})"
        # Drop the discriminator tag pydantic puts first in union locations ("hysteresis.disable_at").
        path = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or "config")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field (not a parameter of this policy)"
            close = difflib.get_close_matches(loc.rsplit(".", 1)[-1], known, n=1, cutoff=0.6)
            if close:
                msg += f"; did you mean {close[0]!r}?"
        lines.append(f"{path}: {msg}{got}")
    return "\n".join(lines)
