"""The Policy protocol, the config base class, the registry and ``make_policy``.

A policy is a small pure object: ``decide(stats) -> SpecMode`` once per engine step and ``reset()``. Its
configuration is a frozen pydantic model whose ``name`` field is the registry key; all configs together form a
discriminated union on ``name``. Built-in policies live in ``specpolicy.policies``; third-party ones register
through the ``specpolicy.policies`` entry-point group with a ``PolicyEntry``.
"""

from __future__ import annotations

import functools
import logging
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, ClassVar, Protocol, Union, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from .config_files import load_file, loads_json
from .errors import ConfigError, FieldError, format_validation_error, short_repr, short_str
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
                f"{short_repr(claimed)} differs from the depths the other fields allow, {derived}: it is "
                "derived, not a setting; drop it or make it match",
            )
        return config

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        """A bool or a string where only a number makes sense is a mistake, not 1 or 3: pydantic's lax mode
        would turn ``num_steps: true`` into 1 and ``"3"`` into 3. (Lists still become tuples.)"""
        if isinstance(data, Mapping):
            for key, value in data.items():
                field = cls.model_fields.get(key) if isinstance(key, str) else None
                bad = None if field is None else _not_a_number(field.annotation, value, key)
                if bad is not None:
                    raise FieldError(*bad)
        return data

    def candidate_steps(self) -> tuple[int, ...]:
        """Every depth this config can return, ascending (0 = off); engines pre-build one state each."""
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        if cls.description:
            return cls.description
        doc = (cls.__doc__ or "").strip().splitlines()
        return doc[0] if doc else ""


def _not_a_number(annotation: Any, value: Any, path: str) -> tuple[str, str] | None:
    """(field path, message) when ``value`` is a bool or a string where ``annotation`` wants a number."""
    if annotation is int or annotation is float:
        if isinstance(value, (bool, str, bytes)):
            kind = "an integer" if annotation is int else "a number"
            return path, f"must be {kind}, got {short_repr(value)} ({type(value).__name__})"
        return None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Union or origin is types.UnionType:
        kinds = [a for a in args if a is not type(None)]
        return None if value is None or len(kinds) != 1 else _not_a_number(kinds[0], value, path)
    if origin is tuple and isinstance(value, (list, tuple)):
        elems = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        for i, (a, v) in enumerate(zip(elems, value, strict=False)):
            bad = _not_a_number(a, v, f"{path}.{i}")
            if bad is not None:
                return bad
    return None


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
    """Immutable snapshot of the registered policies (built-ins first, then entry points).

    A name or alias already taken keeps its first owner, so a plugin can never take over a built-in's name
    or alias (nor an earlier plugin's): the clash is logged naming the plugin and its own name still works.
    """

    def __init__(self, entries: list[PolicyEntry]) -> None:
        self.entries: dict[str, PolicyEntry] = {}
        self.aliases: dict[str, str] = {}
        for entry in entries:
            if entry.name in self.entries or entry.name in self.aliases:
                owner = self.aliases.get(entry.name, entry.name)
                log.warning(
                    "specpolicy: policy %r (%s) is already registered (by %s); keeping the first",
                    entry.name, _origin(entry), _origin(self.entries[owner]),
                )
                continue
            self.entries[entry.name] = entry
            for alias in entry.aliases:
                if alias in self.entries or alias in self.aliases:
                    owner = self.aliases.get(alias, alias)
                    log.warning(
                        "specpolicy: policy plugin %r (%s) declares the alias %r, which is taken by %r (%s); "
                        "%r keeps meaning %r",
                        entry.name, _origin(entry), alias, owner, _origin(self.entries[owner]), alias, owner,
                    )
                    continue
                self.aliases[alias] = entry.name

    def resolve(self, name: str) -> PolicyEntry:
        try:
            return self.entries[self.aliases.get(name, name)]
        except KeyError:
            known = ", ".join(sorted(self.entries))
            raise ConfigError(f"name: unknown policy {short_repr(name)}; available: {known}") from None


def _origin(entry: PolicyEntry) -> str:
    """Where an entry's config class comes from, for messages about clashes."""
    return f"{entry.config.__module__}.{entry.config.__qualname__}"


def _plugin_entry_points() -> list[metadata.EntryPoint]:
    """The group's entry points, one installed distribution at a time: a package whose metadata cannot be
    parsed (a malformed entry_points.txt) is skipped with one log line instead of failing every lookup."""
    out: list[metadata.EntryPoint] = []
    seen: set[str] = set()
    for dist in metadata.distributions():
        try:
            name = (dist.metadata["Name"] or "").lower().replace("_", "-")
            if name in seen:  # the first on sys.path wins, as importlib.metadata.entry_points() does
                continue
            seen.add(name)
            eps = dist.entry_points.select(group=ENTRY_POINT_GROUP)
        except Exception as exc:  # noqa: BLE001 - someone else's broken metadata
            where = getattr(dist, "_path", None) or "a distribution"
            log.error("specpolicy: skipping the entry points of %s: cannot parse them (%s)", where,
                      short_str(exc))
            continue
        out.extend(eps)
    return out


def _load_entry_points() -> list[PolicyEntry]:
    out: list[PolicyEntry] = []
    for ep in _plugin_entry_points():
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, PolicyEntry):
                obj = obj()
            if not isinstance(obj, PolicyEntry):
                raise TypeError(f"expected a specpolicy.PolicyEntry, got {type(obj).__name__}")
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a broken plugin (even one calling sys.exit()) is skipped
            log.error("specpolicy: skipping policy plugin %r (%s): %s: %s", ep.name, ep.value,
                      type(exc).__name__, short_str(exc))
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
    if text.startswith(("{", "[")):
        data = loads_json(text, "policy spec")
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
    data = load_file(path)
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
        what = (
            "missing policy name" if name is None
            else f"must be a policy name (a string), got {short_repr(name)}"
        )
        raise ConfigError(f"name: {what}; available: " + ", ".join(available_policies()))
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
