"""Finding and loading step-cost profiles: the shipped ones by name, any other by path."""

from __future__ import annotations

import functools
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..config_files import loads_json, read_text
from ..errors import ConfigError, format_validation_error, short_repr
from .cost import CostProfile, build_profile
from .schema import PROFILE_FORMAT, ProfileError, ProfileFile

__all__ = ["available_profiles", "load_profile", "profile_from_dict"]


def profile_from_dict(data: Any, origin: str = "<dict>") -> CostProfile:
    """Validate a parsed profile document and build the profile; errors name ``origin`` and the field."""
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: a profile must be a JSON object, got {type(data).__name__}")
    fmt = data.get("format")
    if fmt != PROFILE_FORMAT:
        raise ProfileError(f"{origin}: format must be {PROFILE_FORMAT!r}, got {fmt!r}")
    try:
        spec = ProfileFile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"{origin}: invalid profile:\n{format_validation_error(exc)}") from None
    return build_profile(spec)


def _shipped_dir() -> Any:
    return resources.files("specpolicy.profiles").joinpath("shipped")


@functools.cache
def _shipped_names() -> tuple[str, ...]:
    names = (p.name[: -len(".json")] for p in _shipped_dir().iterdir() if p.name.endswith(".json"))
    return tuple(sorted(names))


def available_profiles() -> list[str]:
    """Names of the profiles shipped with specpolicy, sorted."""
    return list(_shipped_names())


@functools.cache
def _load_shipped(name: str) -> CostProfile:
    text = _shipped_dir().joinpath(f"{name}.json").read_text(encoding="utf-8")
    return profile_from_dict(json.loads(text), origin=f"shipped profile {name!r}")


def load_profile(name_or_path: str | os.PathLike[str]) -> CostProfile:
    """A shipped profile by name, or a profile JSON file by path."""
    text_name = os.fspath(name_or_path)
    if isinstance(name_or_path, str) and text_name in _shipped_names():
        return _load_shipped(text_name)
    path = Path(text_name)
    if not path.exists():
        raise ProfileError(
            f"unknown profile {short_repr(text_name)}: not a shipped profile "
            f"(known: {', '.join(available_profiles())}) and no such file"
        )
    try:  # bounded: size, nesting, duplicate keys (a profile is a config file too)
        data = loads_json(read_text(path, "profile"), f"profile {path}")
    except ProfileError:
        raise
    except ConfigError as exc:
        raise ProfileError(str(exc)) from None
    return profile_from_dict(data, origin=str(path))
