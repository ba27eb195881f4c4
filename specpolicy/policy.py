"""The Policy protocol, the config base class and the registry entry: what every policy module imports.

A policy is a small pure object: ``decide(stats) -> SpecMode`` once per engine step and ``reset()``. Its
configuration is a frozen pydantic model whose ``name`` field is the registry key; all configs together form a
discriminated union on ``name``. Built-in policies live in ``specpolicy.policies``; third-party ones register
through the ``specpolicy.policies`` entry-point group with a ``PolicyEntry``. The registry itself (lookup,
parsing, ``make_policy``) is ``specpolicy.registry``, one floor above the policies.

A composition (``specpolicy.policies.compose``) holds other policies' configs in ``NestedConfig`` fields and
never imports the registry (the registry imports it): a nested spec is parsed by the registry when it is
validated, and the registry hands ``build`` to the factory of an entry with ``builds_nested``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Protocol, Union, runtime_checkable

from pydantic import BaseModel, BeforeValidator, ConfigDict, SerializeAsAny, model_validator

from .errors import ConfigError, FieldError, short_repr
from .mode import SpecMode
from .stats import StepStats

__all__ = [
    "Builder",
    "NestedConfig",
    "Policy",
    "PolicyConfig",
    "PolicyEntry",
    "ReportsEstimates",
    "RequestsSteps",
    "Stateful",
]


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


@runtime_checkable
class Stateful(Protocol):
    """Optional: a policy whose learned state can be saved and loaded (a warm start after a restart).

    ``state_dict()`` returns JSON data (``json.dumps`` with ``allow_nan=False`` takes it) in a versioned
    envelope (``specpolicy.snapshot``); ``load_state_dict()`` into a policy of the same kind and config makes
    it decide as the saved one would from then on. A state it cannot take raises ``snapshot.StateError``
    naming the field, and leaves the policy as it was.
    """

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: Mapping[str, object]) -> None: ...


@runtime_checkable
class RequestsSteps(Protocol):
    """Optional: a policy that maps the depth its part chose onto the depths an engine runs (a ``clamp``).
    After each decide(), ``requested_steps`` is the depth asked for; the controller reports it as the
    decided depth (``StepStats.last_decided_steps``), so the part learns the mapping as the engine limit it
    stands for."""

    requested_steps: int


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
    #: True for policies whose decision depends on measured wall time (``last_step_time_s``), which differs
    #: across the ranks of a tensor-parallel group: with more than one rank their decision is made on rank 0
    #: and broadcast; the others decide on every rank from rank-identical inputs (the time hidden).
    uses_step_time: ClassVar[bool] = False
    #: Whether the policy reads the request ids (``request_ids`` / ``last_request_ids``): adapters collect
    #: them, an O(batch) list per step, only for policies that do.
    uses_request_ids: ClassVar[bool] = False
    #: True for compositions (configs holding other policies' configs): the simulator's default comparison
    #: leaves them out, since it compares their parts already.
    composite: ClassVar[bool] = False
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

    def needs_step_time(self) -> bool:
        """Whether the policy reads ``last_step_time_s``: ``uses_step_time``; a composition asks its parts."""
        return self.uses_step_time

    def needs_request_ids(self) -> bool:
        """Whether the policy reads the request ids: ``uses_request_ids``; a composition asks its parts."""
        return self.uses_request_ids

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


PolicyFactory = Callable[..., Policy]
#: Makes a policy from a (nested) validated config: what a composition's factory is given.
Builder = Callable[[PolicyConfig], Policy]


@dataclass(frozen=True)
class PolicyEntry:
    """A registered policy: its config model and a factory building the policy from a validated config.

    Third-party packages expose one of these under the ``specpolicy.policies`` entry-point group. With
    ``builds_nested`` (compositions) the factory is called as ``factory(config, build)``, ``build`` making a
    policy from a nested config; the registry binds ``build``, so the entries it hands out (``get_entry``)
    take the config alone like any other.
    """

    name: str
    config: type[PolicyConfig]
    factory: PolicyFactory
    aliases: tuple[str, ...] = ()
    builds_nested: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.config, type) and issubclass(self.config, PolicyConfig)):
            raise ConfigError(
                f"policy entry {self.name!r}: its config must be a subclass of specpolicy.PolicyConfig, got "
                f"{short_repr(self.config)}"
            )
        if not callable(self.factory):
            raise ConfigError(
                f"policy entry {self.name!r}: its factory must be callable, got {short_repr(self.factory)}"
            )
        field = self.config.model_fields.get("name")
        default = None if field is None else field.default
        if default != self.name:
            raise ConfigError(
                f"policy entry {self.name!r}: its config model {self.config.__name__} must declare "
                f"name: Literal[{self.name!r}] = {self.name!r} (found default {default!r})"
            )


#: How a nested spec becomes a config: the registry's parser. The registry sits above the policies and
#: imports them, so it installs its parser here when it is imported (every specpolicy import runs the
#: package's ``__init__``, which imports the registry); this module never imports it.
_NESTED_PARSER: list[Callable[[Any], PolicyConfig]] = []


def install_nested_parser(parse: Callable[[Any], PolicyConfig]) -> None:
    """Called by ``specpolicy.registry`` at import; the parser it installs reads the registry at each call."""
    _NESTED_PARSER[:] = [parse]


def _nested(value: Any) -> Any:
    """A nested policy config: an already validated config as it is, any other spec parsed by the registry's
    parser (``install_nested_parser``)."""
    if isinstance(value, PolicyConfig) and type(value) is not PolicyConfig:
        return value
    if not _NESTED_PARSER:
        raise ValueError("a nested policy spec needs specpolicy.registry, which is not imported")
    try:
        return _NESTED_PARSER[0](value)
    except ConfigError as exc:
        lines = str(exc).splitlines() or ["invalid policy config"]
        path, sep, message = lines[0].partition(": ")
        rest = "".join(f"; {line}" for line in lines[1:])
        if not sep or path == "config":
            raise ValueError(lines[0] + rest) from None
        raise FieldError(path, message + rest) from None  # the error path goes on into the nested config


#: A config field holding another policy's config (any registered policy, by name, mapping or object). It
#: serialises as that policy's config, so ``check-config`` prints it in full and reads it back.
NestedConfig = Annotated[PolicyConfig, SerializeAsAny(), BeforeValidator(_nested)]
