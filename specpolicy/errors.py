"""Errors specpolicy raises at configuration time."""

from __future__ import annotations

from typing import Any

__all__ = ["ConfigError", "format_validation_error"]


class ConfigError(ValueError):
    """A policy configuration is invalid. The message names the field and what is allowed."""


def format_validation_error(exc: Any, prefix: str = "") -> str:
    """Render a pydantic ValidationError as one line per problem: ``field.path: message (got value)``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
        # Drop the discriminator tag pydantic puts first in union locations ("hysteresis.disable_at").
        path = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or "config")
        msg = err.get("msg", "invalid value")
        got = ""
        if err.get("type") not in ("missing", "extra_forbidden") and "input" in err:
            got = f" (got {err['input']!r})"
        if err.get("type") == "extra_forbidden":
            msg = "unknown field (not a parameter of this policy)"
        lines.append(f"{path}: {msg}{got}")
    return "\n".join(lines)
