"""The Policy protocol, the config base class, the registry and ``make_policy``.

A policy is a small pure object: ``decide(stats) -> SpecMode`` once per engine step and ``reset()``. Its
configuration is a frozen pydantic model whose ``name`` field is the registry key; all configs together form a
discriminated union on ``name``. Built-in policies live in ``specpolicy.policies``; third-party ones register
through the ``specpolicy.policies`` entry-point group with a ``PolicyEntry``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, ClassVar, Protocol, Union, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from .errors import ConfigError, FieldError, format_validation_error
from .mode import SpecMode
from .stats import StepStats

__all__ = [
    "Policy",
    "PolicyConfig",
    "PolicyEntry",
    "ReportsEstimates",
    "available_policies",
    "config_json_schema",
    "config_union",
    "get_entry",
    "make_policy",
    "parse_config",
    "ENTRY_POINT_GROUP",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "specpolicy.policies"


@runtime_checkable
class Policy(Protocol):
    """Chooses the draft depth for each engine step.

    decide() is called once per engine step, on the hot path: it must not raise on odd inputs (NaN, negative,
    missing values are missing data) and must return a mode whose depth the policy was configured to allow.
    """

    def decide(self, stats: StepStats) -> SpecMode: ...

    def reset(self) -> None: ...


@runtime_checkable
class ReportsEstimates(Protocol):
    """Optional: a policy exposing its internal estimates (EWMA acceptance, predicted tokens/s) to metrics."""

    def estimates(self) -> Mapping[str, float]: ...


class PolicyConfig(BaseModel):
    """Base of every policy configuration: frozen, unknown fields rejected, ``name`` is the registry key.

    Subclasses declare ``name: Literal["mine"] = "mine"`` and implement ``candidate_steps``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: One-line description shown by ``specpolicy policies``; defaults to the first docstring line.
    description: ClassVar[str] = ""
    #: True for policies that exist to exercise engines (switching stress tests), not to serve: the simulator
    #: leaves them out of its default comparison.
    diagnostic: ClassVar[bool] = False
    #: True for configs with a ``steps`` field (positive depths): ``candidate_steps``, SGLang's word, is
    #: accepted in its place, its 0 dropped (whether off is allowed is the policy's rule, as with ``steps``).
    candidate_steps_alias: ClassVar[bool] = False

    name: str

    @model_validator(mode="wrap")
    @classmethod
    def _echoed_candidate_steps(cls, data: Any, handler: Callable[[Any], Any]) -> Any:
        """``check-config`` prints ``candidate_steps`` next to the fields: read back, it must match them."""
        if not isinstance(data, Mapping) or "candidate_steps" not in data:
            return handler(data)
        data = dict(data)
        claimed = data.pop("candidate_steps")
        if cls.candidate_steps_alias and "steps" not in data:
            data["steps"] = [k for k in claimed if k != 0] if isinstance(claimed, list | tuple) else claimed
            return handler(data)
        config = handler(data)
        derived = list(config.candidate_steps())
        if not isinstance(claimed, list | tuple) or list(claimed) != derived:
            raise FieldError(
                "candidate_steps",
                f"{claimed!r} differs from the depths the other fields allow, {derived}: it is derived, "
                "not a setting; drop it or make it match",
            )
        return config

    def candidate_steps(self) -> tuple[int, ...]:
        """Every depth this config can return, ascending (0 = off); engines pre-build one state each."""
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        if cls.description:
            return cls.description
        doc = (cls.__doc__ or "").strip().splitlines()
        return doc[0] if doc else ""


PolicyFactory = Callable[[Any], Policy]


@dataclass(frozen=True)
class PolicyEntry:
    """A registered policy: its config model and a factory building the policy from a validated config.

    Third-party packages expose one of these under the ``specpolicy.policies`` entry-point group.
    """

    name: str
    config: type[PolicyConfig]
    factory: PolicyFactory
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        field = self.config.model_fields.get("name")
        default = None if field is None else field.default
        if default != self.name:
            raise ConfigError(
                f"policy entry {self.name!r}: its config model {self.config.__name__} must declare "
                f"name: Literal[{self.name!r}] = {self.name!r} (found default {default!r})"
            )


class _Registry:
    """Immutable snapshot of the registered policies (built-ins first, then entry points)."""

    def __init__(self, entries: list[PolicyEntry]) -> None:
        self.entries: dict[str, PolicyEntry] = {}
        self.aliases: dict[str, str] = {}
        for entry in entries:
            if entry.name in self.entries or entry.name in self.aliases:
                log.warning("specpolicy: policy %r registered twice; keeping the first", entry.name)
                continue
            self.entries[entry.name] = entry
            for alias in entry.aliases:
                self.aliases.setdefault(alias, entry.name)

    def resolve(self, name: str) -> PolicyEntry:
        key = self.aliases.get(name, name)
        try:
            return self.entries[key]
        except KeyError:
            known = ", ".join(sorted(self.entries))
            raise ConfigError(f"name: unknown policy {name!r}; available: {known}") from None


def _load_entry_points() -> list[PolicyEntry]:
    out: list[PolicyEntry] = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, PolicyEntry):
                obj = obj()
            if not isinstance(obj, PolicyEntry):
                raise TypeError(f"expected a specpolicy.PolicyEntry, got {type(obj).__name__}")
        except Exception as exc:  # a broken plugin must not take down the others
            log.error("specpolicy: cannot load policy plugin %r (%s): %s", ep.name, ep.value, exc)
            continue
        out.append(obj)
    return out


@functools.lru_cache(maxsize=1)
def _registry() -> _Registry:
    from .policies import BUILTIN_ENTRIES

    return _Registry([*BUILTIN_ENTRIES, *_load_entry_points()])


def available_policies() -> list[str]:
    """Names of every registered policy (built-in and third-party), sorted."""
    return sorted(_registry().entries)


def get_entry(name: str) -> PolicyEntry:
    """The registry entry for a policy name or alias; ConfigError listing the known names otherwise."""
    return _registry().resolve(name)


def config_union() -> TypeAdapter[Any]:
    """A TypeAdapter for the discriminated union (on ``name``) of every registered config model.

    ``config_union().validate_python({"name": "hysteresis", ...})`` returns the HysteresisConfig; use it to
    embed a policy config in a larger pydantic model or to publish one JSON schema for all policies. Aliases
    (``goodput``) are resolved by ``parse_config``, not here.
    """
    return _config_union()


@functools.lru_cache(maxsize=1)
def _config_union() -> TypeAdapter[Any]:
    models = tuple(entry.config for entry in _registry().entries.values())
    if len(models) == 1:
        return TypeAdapter(models[0])
    union = Union[models]  # type: ignore[valid-type]  # noqa: UP007 (built at run time from the registry)
    try:
        return TypeAdapter(Annotated[union, Field(discriminator="name")])
    except Exception:  # a plugin whose ``name`` is not a Literal cannot join a tagged union
        log.warning("specpolicy: a policy config does not declare name as a Literal; using an untagged union")
        return TypeAdapter(union)


def config_json_schema() -> dict[str, Any]:
    """JSON schema of every registered policy config, as one discriminated union on ``name``."""
    return config_union().json_schema()


def _load_spec(spec: Any) -> dict[str, Any]:
    """Turn a name, mapping, JSON string, config model or file path into a plain dict."""
    if isinstance(spec, PolicyConfig):
        return spec.model_dump()
    if isinstance(spec, Mapping):
        return dict(spec)
    if isinstance(spec, os.PathLike):
        return _load_file(Path(spec))
    if not isinstance(spec, str):
        raise ConfigError(
            f"policy spec must be a name, a mapping, a JSON string or a file path, got {type(spec).__name__}"
        )
    text = spec.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"policy spec is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError("policy spec JSON must be an object")
        return data
    path = Path(text)
    suffix = path.suffix.lower()
    if suffix and suffix not in _SUFFIXES and text not in available_policies():
        supported = ", ".join(_SUFFIXES)
        raise ConfigError(f"policy config file {text}: unsupported extension {suffix!r} (use {supported})")
    if suffix or os.sep in text:
        return _load_file(path)
    return {"name": text}


_SUFFIXES = (".json", ".yaml", ".yml", ".toml")


def _load_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"policy config file not found: {path}")
    suffix = path.suffix.lower()
    raw = path.read_bytes()
    try:
        if suffix == ".json":
            data = json.loads(raw)
        elif suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(raw)
        elif suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(raw.decode())
        else:
            raise ConfigError(f"policy config file {path}: unsupported extension (use .json, .yaml or .toml)")
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"policy config file {path}: cannot parse: {exc}") from None
    if isinstance(data, dict) and "name" not in data and isinstance(data.get("policy"), dict):
        data = data["policy"]  # allow {"policy": {...}} wrappers, as in engine config files
    if not isinstance(data, dict):
        raise ConfigError(f"policy config file {path}: top level must be a mapping")
    return data


def parse_config(spec: Any, **overrides: Any) -> PolicyConfig:
    """Validate a policy spec into its config model. Raises ConfigError naming the field on bad input."""
    data = _load_spec(spec)
    data.update(overrides)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("name: missing policy name; available: " + ", ".join(available_policies()))
    entry = get_entry(name)
    data["name"] = entry.name
    try:
        return entry.config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(entry.config, data, exc)) from None


def _explain(model: type[PolicyConfig], data: dict[str, Any], exc: ValidationError) -> str:
    """Every problem at once: pydantic skips the cross-field checks while a field is invalid, so they are run
    again with the invalid fields left at their defaults, and what they find is added (said so)."""
    prefix = f"{model.model_fields['name'].default}."
    lines = format_validation_error(exc, prefix, model.model_fields).splitlines()
    bad = {str(err["loc"][0]) for err in exc.errors() if err.get("loc")}
    rest = {k: v for k, v in data.items() if k not in bad or k == "name"}
    if bad and rest != data:
        try:
            model.model_validate(rest)
        except ValidationError as again:
            for line in format_validation_error(again, prefix).splitlines():
                if line not in lines:
                    lines.append(f"{line} (with defaults in place of the invalid fields above)")
    return "\n".join(lines)


def make_policy(spec: Any, **overrides: Any) -> Policy:
    """Build a policy from a name (``"hysteresis"``), a mapping, a JSON string, a config model or a file path.

    Keyword overrides replace fields of the spec. Configuration errors raise ``ConfigError`` naming the field.
    """
    config = parse_config(spec, **overrides)
    return get_entry(config.name).factory(config)
