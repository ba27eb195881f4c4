"""A policy's state as JSON data (``Stateful``): the versioned envelope, and the codec for state objects.

Every saved state is an envelope ``{"version", "policy", "config", "state"}``: a state is loaded only by
the policy it came from, with the same config (a state learned under other depths or margins means
something else), and a bad one is refused with a ``StateError`` naming the field. The codec writes a
state object's slots as JSON values; what JSON lacks is tagged (tuples ``$t``, bytes ``$b`` and bytearrays
``$ba``, dicts with other keys than strings ``$d``, deques ``$q``, non-finite floats ``$f``, objects
``$o``), so a state reads back exactly. It loads into a fresh object of the same kind, checking each value
against what that object holds (kind, and the length of a list of fixed length), so a state that loads is
one the policy can run from.
"""

from __future__ import annotations

import base64
import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .errors import short_repr
from .mode import MAX_NUM_STEPS, SpecMode

__all__ = [
    "STATE_VERSION",
    "SlotsState",
    "StateError",
    "check_fields",
    "decode_into",
    "encode",
    "open_envelope",
    "seal",
    "slot_names",
]

#: The format of a saved state; a state of another version is refused (``open_envelope``).
STATE_VERSION = 1


class StateError(ValueError):
    """A saved state that cannot be loaded: ``field`` is its path (``state.acc.rates.3``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def seal(policy: str, config: Mapping[str, object] | None, state: object) -> dict[str, object]:
    """The envelope of a policy's state."""
    return {"version": STATE_VERSION, "policy": policy, "config": config, "state": state}


def open_envelope(data: Mapping[str, object], policy: str, config: Mapping[str, object] | None) -> object:
    """The ``state`` of an envelope made by ``seal`` for this policy and config; ``StateError`` otherwise."""
    if not isinstance(data, Mapping):
        raise StateError("state", f"must be a mapping, got {short_repr(data)}")
    for key in ("version", "policy", "config", "state"):
        if key not in data:
            raise StateError(key, "missing")
    version = data["version"]
    if version != STATE_VERSION or type(version) is not int:
        raise StateError("version", f"must be {STATE_VERSION}, got {short_repr(version)}")
    if data["policy"] != policy:
        raise StateError("policy", f"the state is {short_repr(data['policy'])}'s, this policy is {policy!r}")
    if data["config"] != config:
        raise StateError("config", f"the state was saved under another config: {short_repr(data['config'])}")
    return data["state"]


def slot_names(cls: type) -> tuple[str, ...]:
    """Every slot of ``cls`` and its bases, in definition order."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in names and name not in ("__weakref__", "__dict__"):
                names.append(name)
    return tuple(names)


#: per class: the slots not saved (fixed by the config, or aliases of others)
Classes = Mapping[type, frozenset[str]]


def encode(value: Any, classes: Classes, path: str = "state") -> object:
    """``value`` as JSON data; objects only of ``classes`` (their slots but the skipped ones).

    Raises ``TypeError`` naming the path of a value that cannot be saved."""
    cls = value.__class__
    if value is None or cls is bool or cls is int or cls is str:
        return value
    if cls is float:
        return value if math.isfinite(value) else {"$f": repr(value)}
    if cls is list:
        return [encode(v, classes, f"{path}.{i}") for i, v in enumerate(value)]
    if cls is tuple:
        return {"$t": [encode(v, classes, f"{path}.{i}") for i, v in enumerate(value)]}
    if cls is bytes:
        return {"$b": base64.b64encode(value).decode()}
    if cls is bytearray:
        return {"$ba": base64.b64encode(value).decode()}
    if cls is dict:
        items = value.items()
        return {"$d": [[encode(k, classes, path), encode(v, classes, f"{path}.{k}")] for k, v in items]}
    if cls is deque:
        return {"$q": [encode(v, classes, f"{path}.{i}") for i, v in enumerate(value)]}
    skip = classes.get(cls)
    if skip is not None:
        return {
            "$o": {
                name: encode(getattr(value, name), classes, f"{path}.{name}")
                for name in slot_names(cls)
                if name not in skip
            }
        }
    tolist = getattr(value, "tolist", None)  # an array of ids or counts: its values
    if callable(tolist):
        return encode(tolist(), classes, path)
    if isinstance(value, Sequence):
        return [encode(v, classes, f"{path}.{i}") for i, v in enumerate(value)]
    raise TypeError(f"{path}: a {cls.__name__} cannot be saved")


_NONE: Classes = {}


def decode_into(
    obj: object, data: object, classes: Classes, path: str = "state", loose: Classes = _NONE
) -> None:
    """Load ``data`` (from ``encode``) into ``obj``, an object of ``classes``, slot by slot, each value
    checked against the one ``obj`` holds; ``loose`` names per class the fields of no fixed kind or length.
    Raises ``StateError`` naming the first bad field (``obj`` is then partly loaded: load into a fresh
    one)."""
    cls = obj.__class__
    fields = data.get("$o") if isinstance(data, dict) and len(data) == 1 else None
    if not isinstance(fields, dict):
        raise StateError(path, f"must be a saved {cls.__name__}, got {short_repr(data)}")
    names = [n for n in slot_names(cls) if n not in classes[cls]]
    for name in fields:
        if name not in names:
            raise StateError(f"{path}.{name}", f"is no field of {cls.__name__}")
    free = loose.get(cls, frozenset())
    for name in names:
        if name not in fields:
            raise StateError(f"{path}.{name}", "missing")
        held = getattr(obj, name)
        where = f"{path}.{name}"
        if held.__class__ in classes:
            decode_into(held, fields[name], classes, where, loose)
        else:
            value = _decode(fields[name], where)
            setattr(obj, name, value if name in free else _like(held, value, where))


def _like(held: object, value: object, path: str) -> object:
    """``value`` where ``held`` is: of its kind (numbers are one kind; None holds anything), and a list of
    ``held``'s length with items like its first."""
    if held is None:
        return value
    kind, got = held.__class__, value.__class__
    if kind is not got and not (kind in (int, float) and got in (int, float)):
        raise StateError(path, f"must be a {kind.__name__}, got {short_repr(value)}")
    if isinstance(held, list) and held:
        items: list[Any] = value  # type: ignore[assignment]
        if len(items) != len(held):
            raise StateError(path, f"must hold {len(held)} items, got {len(items)}")
        first = held[0]
        return [_like(first, v, f"{path}.{i}") for i, v in enumerate(items)]
    if isinstance(held, deque):
        return deque(value, maxlen=held.maxlen)  # type: ignore[call-overload]
    return value


_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _decode(data: object, path: str) -> object:
    """A value from ``encode``'s data (no objects: those load into their fresh counterparts)."""
    if data is None or data.__class__ in (bool, int, float, str):
        return data
    if isinstance(data, list):
        return [_decode(v, f"{path}.{i}") for i, v in enumerate(data)]
    if not isinstance(data, dict) or len(data) != 1:
        raise StateError(path, f"not a saved value: {short_repr(data)}")
    ((tag, body),) = data.items()
    try:
        if tag == "$f" and body in _FLOATS:
            return _FLOATS[body]
        if tag == "$b" or tag == "$ba":
            raw = base64.b64decode(body, validate=True)
            return raw if tag == "$b" else bytearray(raw)
        if tag in ("$t", "$q") and isinstance(body, list):
            items = [_decode(v, f"{path}.{i}") for i, v in enumerate(body)]
            return tuple(items) if tag == "$t" else deque(items)
        if tag == "$d" and isinstance(body, list):
            out: dict[Any, object] = {}
            for pair in body:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise StateError(path, f"a dict item must be a [key, value] pair, got {short_repr(pair)}")
                key = _decode(pair[0], path)
                out[key] = _decode(pair[1], f"{path}.{key}")
            return out
    except StateError:
        raise
    except Exception as exc:  # noqa: BLE001 - bad base64, an unhashable key
        raise StateError(path, f"not a saved value ({exc}): {short_repr(data)}") from None
    raise StateError(path, f"not a saved value: {short_repr(data)}")


class SlotsState:
    """``Stateful`` for a small policy: the slots named in ``_STATE``, each of the kinds given (a
    ``SpecMode`` saved as its depth, and loaded only as one the config allows).

    Mixed in with ``__slots__ = ()``; the envelope's name is ``_STATE_NAME``, its config the ``config``
    slot's (None where the policy has none)."""

    __slots__ = ()

    _STATE_NAME: ClassVar[str]
    _STATE: ClassVar[Mapping[str, tuple[type, ...]]]

    def _state_config(self) -> dict[str, object] | None:
        config = getattr(self, "config", None)
        dump = getattr(config, "model_dump", None)
        return dump(mode="json") if callable(dump) else None

    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = {}
        for name in self._STATE:
            value = getattr(self, name)
            state[name.lstrip("_")] = {"$m": value.num_steps} if value.__class__ is SpecMode else value
        return seal(self._STATE_NAME, self._state_config(), state)

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        data = open_envelope(state, self._STATE_NAME, self._state_config())
        config = getattr(self, "config", None)
        allowed = config.candidate_steps() if config is not None else None
        fields = check_fields(data, tuple(n.lstrip("_") for n in self._STATE))
        values: dict[str, object] = {}
        for name, kinds in self._STATE.items():
            key = name.lstrip("_")
            value = fields[key]
            path = f"state.{key}"
            if SpecMode in kinds:
                k = value.get("$m") if isinstance(value, dict) and len(value) == 1 else None
                if (
                    type(k) is not int
                    or (allowed is not None and k not in allowed)
                    or not 0 <= k <= MAX_NUM_STEPS
                ):
                    raise StateError(
                        path, f"must be a depth the config allows, {allowed}, got {short_repr(value)}"
                    )
                value = SpecMode.of(k)
            elif value.__class__ not in kinds and not (float in kinds and value.__class__ is int):
                names = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
                raise StateError(path, f"must be {names}, got {short_repr(value)}")
            values[name] = value
        for name, value in values.items():
            setattr(self, name, value)


def check_fields(data: object, names: Sequence[str], path: str = "state") -> Mapping[str, object]:
    """``data`` as a mapping with exactly ``names``; ``StateError`` naming the first missing or extra one."""
    if not isinstance(data, Mapping):
        raise StateError(path, f"must be a mapping, got {short_repr(data)}")
    for name in names:
        if name not in data:
            raise StateError(f"{path}.{name}", "missing")
    for name in data:
        if name not in names:
            raise StateError(f"{path}.{name}", "is no field of this state")
    return data
