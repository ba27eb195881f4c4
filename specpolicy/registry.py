"""The policy registry: built-in policies and entry-point plugins by name, parsing specs, ``make_policy``.

It sits one floor above ``specpolicy.policies`` (it lists the built-ins) and below everything that builds
policies (adapters, simulator, CLI). Compositions get their nested configs parsed and built through it
without importing it (``specpolicy.policy.NestedConfig``, ``PolicyEntry.builds_nested``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import unicodedata
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import Field, TypeAdapter, ValidationError

from .config_files import check_depth, load_file, loads_json
from .errors import MAX_ERROR_LINES, ConfigError, format_validation_error, short_repr, short_str
from .mode import MAX_NUM_STEPS
from .policies import BUILTIN_ENTRIES
from .policy import Policy, PolicyConfig, PolicyEntry, install_nested_parser

__all__ = [
    "ENTRY_POINT_GROUP",
    "available_policies",
    "broken_plugins",
    "config_json_schema",
    "config_union",
    "get_entry",
    "make_policy",
    "parse_config",
]

#: The logger keeps the name it had when the registry lived in ``specpolicy.policy`` (log configurations).
log = logging.getLogger("specpolicy.policy")

ENTRY_POINT_GROUP = "specpolicy.policies"


class _Registry:
    """Immutable snapshot of the registered policies (built-ins first, then entry points).

    A name or alias already taken keeps its first owner, so a plugin can never take over a built-in's name
    or alias (nor an earlier plugin's): the clash is logged naming the plugin and its own name still works.
    A plugin entry that is not a well-formed ``PolicyEntry``, or whose name or alias looks like a built-in's
    (``confusable``), is not registered: it is logged and listed in ``broken`` with the reason.
    """

    def __init__(self, entries: list[PolicyEntry], broken: Mapping[str, str] | None = None) -> None:
        self.entries: dict[str, PolicyEntry] = {}
        self.aliases: dict[str, str] = {}
        #: plugins that could not be registered: "name (entry point)" -> why
        self.broken: dict[str, str] = dict(broken or {})
        builtin = {id(e) for e in BUILTIN_ENTRIES}
        looks = {_skeleton(n): n for e in entries if id(e) in builtin for n in (e.name, *e.aliases)}
        for entry in entries:
            if id(entry) not in builtin:
                problem = _entry_problem(entry, looks)
                if problem is not None:
                    name = getattr(entry, "name", "?")
                    log.error("specpolicy: skipping policy plugin %s: %s", short_repr(name), problem)
                    self.broken[str(name)] = problem
                    continue
            if entry.name in self.entries or entry.name in self.aliases:
                owner = self.aliases.get(entry.name, entry.name)
                log.warning(
                    "specpolicy: policy %r (%s) is already registered (by %s); keeping the first",
                    entry.name,
                    _origin(entry),
                    _origin(self.entries[owner]),
                )
                continue
            self.entries[entry.name] = entry
            for alias in entry.aliases:
                if alias in self.entries or alias in self.aliases:
                    owner = self.aliases.get(alias, alias)
                    log.warning(
                        "specpolicy: policy plugin %r (%s) declares the alias %r, which is taken by %r (%s); "
                        "%r keeps meaning %r",
                        entry.name,
                        _origin(entry),
                        alias,
                        owner,
                        _origin(self.entries[owner]),
                        alias,
                        owner,
                    )
                    continue
                if id(entry) not in builtin and _skeleton(alias) in looks:
                    log.warning(
                        "specpolicy: policy plugin %r (%s) declares the alias %r, which looks like the "
                        "built-in %r; it is not registered",
                        entry.name,
                        _origin(entry),
                        alias,
                        looks[_skeleton(alias)],
                    )
                    continue
                self.aliases[alias] = entry.name
        for name, entry in self.entries.items():
            if entry.builds_nested:  # handed out bound to this registry: factory(config), like any other
                bound = functools.partial(entry.factory, build=self.build)
                self.entries[name] = dataclasses.replace(entry, factory=bound, builds_nested=False)

    def resolve(self, name: str) -> PolicyEntry:
        try:
            return self.entries[self.aliases.get(name, name)]
        except KeyError:
            known = ", ".join(sorted(self.entries))
            raise ConfigError(f"name: unknown policy {short_repr(name)}; available: {known}") from None

    def parse(self, spec: Any, overrides: Mapping[str, Any], nested: bool = False) -> PolicyConfig:
        """Validate a spec into its config model; ConfigError naming the field (relative when ``nested``)."""
        data = _load_spec(spec)
        data.update(overrides)
        name = data.get("name")
        if not isinstance(name, str) or not name:
            what = (
                "missing policy name"
                if name is None
                else f"must be a policy name (a string), got {short_repr(name)}"
            )
            raise ConfigError(f"name: {what}; available: " + ", ".join(sorted(self.entries)))
        entry = self.resolve(name)
        data["name"] = entry.name
        prefix = "" if nested else f"{entry.name}."
        _refuse_many_unknown(entry.config, data, prefix)
        try:
            config = entry.config.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_explain(entry.config, data, exc, prefix)) from None
        _check_candidate_steps(config, prefix)
        return config

    def build(self, config: PolicyConfig) -> Policy:
        """``Builder``: a policy from a validated config (the nested configs of compositions too); ConfigError
        when the factory returns something that is not a policy (no ``decide`` / ``reset``)."""
        policy: Policy = self.resolve(config.name).factory(config)
        if not isinstance(policy, Policy):
            raise ConfigError(
                f"name: policy {config.name!r}: its factory returned {short_repr(policy)}, not a policy (an "
                "object with decide(stats) and reset())"
            )
        return policy


#: Letters of other scripts that look like Latin ones (Cyrillic, Greek), mapped to them for ``_skeleton``.
_CONFUSABLES = str.maketrans(
    "асеіјорѕхуһԁɡοαρτκνı",
    "aceijopsxyhdgoaptkvi",
)


def _skeleton(name: str) -> str:
    """What a policy name looks like: NFKC-normalised, case-folded, lookalike letters of other scripts
    mapped to Latin ones, ``-`` and ``_`` dropped. Two names with one skeleton are confusable."""
    text = unicodedata.normalize("NFKC", name).casefold().translate(_CONFUSABLES)
    return text.replace("-", "").replace("_", "")


def _entry_problem(entry: Any, builtin_looks: Mapping[str, str]) -> str | None:
    """Why a plugin's entry cannot be registered, or None."""
    if not isinstance(entry, PolicyEntry):
        return f"expected a specpolicy.PolicyEntry, got {short_repr(entry)}"
    if not (isinstance(entry.config, type) and issubclass(entry.config, PolicyConfig)):
        return f"its config must be a subclass of specpolicy.PolicyConfig, got {short_repr(entry.config)}"
    if not callable(entry.factory):
        return f"its factory must be callable, got {short_repr(entry.factory)}"
    if not isinstance(entry.name, str) or not entry.name:
        return f"its name must be a non-empty string, got {short_repr(entry.name)}"
    owner = builtin_looks.get(_skeleton(entry.name))
    if owner is not None and owner != entry.name:
        return (
            f"its name {entry.name!r} looks like the built-in policy {owner!r} (case, script or separators)"
        )
    return None


def _check_candidate_steps(config: PolicyConfig, prefix: str) -> None:
    """A config's ``candidate_steps()`` must give depths in [0, MAX_NUM_STEPS], ascending: every adapter
    and the simulator rely on it, so a plugin whose method raises or returns junk is a ConfigError here."""
    try:
        steps = config.candidate_steps()
        ok = (
            isinstance(steps, tuple)
            and len(steps) > 0
            and all(type(k) is int and 0 <= k <= MAX_NUM_STEPS for k in steps)
            and list(steps) == sorted(set(steps))
        )
    except Exception as exc:  # noqa: BLE001 - a plugin's method: reported, never raised as is
        raise ConfigError(
            f"{prefix}candidate_steps: the config's candidate_steps() raised {type(exc).__name__}: "
            f"{short_str(exc)}"
        ) from None
    if not ok:
        raise ConfigError(
            f"{prefix}candidate_steps: the config's candidate_steps() must return a non-empty, ascending "
            f"tuple of distinct depths in [0, {MAX_NUM_STEPS}], got {short_repr(steps)}"
        )


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
            log.error(
                "specpolicy: skipping the entry points of %s: cannot parse them (%s)", where, short_str(exc)
            )
            continue
        out.extend(eps)
    return out


def _load_entry_points(broken: dict[str, str] | None = None) -> list[PolicyEntry]:
    """The plugins' entries; one that cannot be loaded is logged and, with ``broken``, noted there."""
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
            log.error(
                "specpolicy: skipping policy plugin %r (%s): %s: %s",
                ep.name,
                ep.value,
                type(exc).__name__,
                short_str(exc),
            )
            if broken is not None:
                broken[f"{ep.name} ({ep.value})"] = f"{type(exc).__name__}: {short_str(exc)}"
            continue
        out.append(obj)
    return out


@functools.lru_cache(maxsize=1)
def _registry() -> _Registry:
    broken: dict[str, str] = {}
    entries = _load_entry_points(broken)
    return _Registry([*BUILTIN_ENTRIES, *entries], broken)


def broken_plugins() -> dict[str, str]:
    """Plugins that could not be registered (not loadable, not a well-formed entry, a name confusable with
    a built-in's): "name" or "name (entry point)" -> the reason. ``specpolicy policies`` lists them."""
    return dict(_registry().broken)


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
        check_depth(spec, "policy spec")  # as for a file: a nesting beyond any config is refused
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
    return _registry().parse(spec, overrides)


def parse_nested(spec: Any) -> PolicyConfig:
    """A composition's nested policy spec; ConfigError lines name fields relative to it (``ewma_alpha``)."""
    return _registry().parse(spec, {}, nested=True)


install_nested_parser(parse_nested)


def _refuse_many_unknown(model: type[PolicyConfig], data: dict[str, Any], prefix: str) -> None:
    """More unknown keys than an error message shows: said at once, counted, before pydantic renders a
    problem per key (200,000 keys took seconds)."""
    if len(data) <= MAX_ERROR_LINES:
        return
    known = model.model_fields
    unknown = [key for key in data if key not in known]
    if len(unknown) > MAX_ERROR_LINES:
        lines = [
            f"{prefix}{short_repr(key, 40) if not isinstance(key, str) else key[:40]}: unknown field (not a "
            "parameter of this policy)"
            for key in unknown[:MAX_ERROR_LINES]
        ]
        lines.append(f"... and {len(unknown) - MAX_ERROR_LINES} more unknown fields ({len(unknown)} in all)")
        raise ConfigError("\n".join(lines))


def _explain(model: type[PolicyConfig], data: dict[str, Any], exc: ValidationError, prefix: str) -> str:
    """Every problem at once: pydantic skips the cross-field checks while a field is invalid, so they are run
    again with the invalid fields left at their defaults, and what they find is added (said so)."""
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
    registry = _registry()
    return registry.build(registry.parse(spec, overrides))
