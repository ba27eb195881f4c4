"""What every engine adapter needs from the engine's installation, written once for SGLang and vLLM.

The installed release (package metadata, without importing the engine), release ordering (with
``packaging.version``, the parser both engines use themselves), the engine names an adapter hooks and whether
they still exist with the expected shape, the failure mode a user chose (refuse or warn), whether an entry
point is registered, and the GPU a smoke test would run on.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from ..runtime.runtime import AdapterInstallError

__all__ = [
    "Target",
    "check_targets",
    "entry_point_registered",
    "gpu_name",
    "installed_version",
    "parse_version",
    "refuse_or_warn",
    "release_key",
    "resolve",
]


def installed_version(package: str) -> str | None:
    """The installed release of ``package`` from its metadata (the package is not imported), or None."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def parse_version(version: str) -> Version | None:
    """``version`` as a PEP 440 version (``0.5.12.post1``, ``v1.2``, ``0.34.0.dev3+gabc``), else None."""
    try:
        return Version(version)
    except InvalidVersion:
        return None


def release_key(version: str, length: int = 3) -> tuple[int, ...]:
    """The release numbers of ``version``, padded to ``length``: ``"0.24.1rc2"`` -> ``(0, 24, 1)``.

    Pre-, post- and dev-release parts are dropped, because a code layout is a property of the release line:
    0.5.12.post1 has 0.5.12's. Raises ValueError for a string that is no version.
    """
    parsed = parse_version(version)
    if parsed is None:
        raise ValueError(f"not a version string: {version!r}")
    numbers = parsed.release
    return numbers + (0,) * (length - len(numbers))


@dataclass(frozen=True)
class Target:
    """An engine name the adapter relies on: a callable (``params``: leading parameter names it must
    accept) or a class whose ``fields`` it reads; ``why`` says what the adapter does with it."""

    dotted: str
    params: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    why: str = ""


def resolve(dotted: str) -> Any:
    """Import the longest module prefix of ``dotted`` and walk the remaining attributes.

    A module that exists but fails to import reports its own error (a missing dependency, say), not a
    confusing missing attribute of its parent; a missing attribute raises AttributeError.
    """
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(name)
        except (ModuleNotFoundError, ValueError):  # a parent is no package, or is missing
            spec = None
        if spec is None:
            continue
        obj: Any = importlib.import_module(name)  # raises the real error
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(f"No module named {parts[0]!r}")


def _shape_problem(target: Target, obj: Any) -> str | None:
    if target.params:
        try:
            names = list(inspect.signature(obj).parameters)
        except (TypeError, ValueError) as exc:
            return f"no signature ({exc})"
        missing = [p for p in target.params if p not in names]
        if missing or names[:1] != [target.params[0]]:
            return f"expected parameters {list(target.params)}, found {names}"
    if target.fields:
        have = {f.name for f in fields(obj)} if is_dataclass(obj) else set(dir(obj))
        missing = [f for f in target.fields if f not in have]
        if missing:
            return f"missing fields {missing}"
    return None


def check_targets(targets: Iterable[Target | str]) -> dict[str, str | None]:
    """``{dotted name: None}`` for each target that exists with the expected shape, else the problem."""
    out: dict[str, str | None] = {}
    for t in targets:
        target = Target(t) if isinstance(t, str) else t
        try:
            obj = resolve(target.dotted)
        except Exception as exc:  # missing module or attribute, or an import error inside the engine
            out[target.dotted] = f"not found ({type(exc).__name__}: {exc})"
            continue
        out[target.dotted] = _shape_problem(target, obj)
    return out


def refuse_or_warn(
    on_failure: str,
    problem: Exception | str,
    log: logging.Logger,
    *,
    refuse: Callable[[str], BaseException] | None = None,
    without: str = "the server runs without the policy",
) -> None:
    """Apply the user's ``on_install_failure``: raise for ``"refuse"``, else log an error and return.

    ``refuse`` builds what is raised from the reason (default: ``problem`` itself when it is an exception,
    else AdapterInstallError); ``without`` says in the log what runs instead.
    """
    reason = str(problem)
    if on_failure == "refuse":
        if refuse is not None:
            raise refuse(reason) from None
        if isinstance(problem, Exception):
            raise problem
        raise AdapterInstallError(reason)
    log.error("specpolicy: NOT ACTIVE, %s: %s", without, reason)


def entry_point_registered(group: str, value: str) -> bool:
    """Whether the installed distributions register ``value`` in entry point ``group``."""
    return any(ep.value == value for ep in importlib.metadata.entry_points(group=group))


def gpu_name() -> str | None:
    """The first CUDA device's name, None without one (or without torch): a smoke test needs it."""
    try:
        import torch

        return str(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None
    except Exception:
        return None
