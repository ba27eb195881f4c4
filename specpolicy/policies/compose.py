"""Compositions: policies made of other policies, configured, listed and validated like any other.

- ``gate``: ``inner`` chooses the depth, ``gate`` may only turn it off (off whenever the gate says off,
  ``inner``'s mode otherwise). Acceptance follows the drafter but cannot see load; gated by ``hysteresis`` it
  stops speculating once the batch grows.
- ``clamp``: ``inner`` run on an engine that has only ``depths``: each depth goes down to the deepest one the
  engine runs, and on never becomes off nor off on while ``depths`` has both. ``OnOffAtDepth`` is the clamp
  to ``{0, depth}``, for engines with graphs for one depth (legacy SGLang workers).

The parts of a gate are both asked every step, so each keeps its own state (dwell, probes, learning) as if it
ran alone. A clamp stands for an engine limit, and its part learns it as one: the clamp says which depth
its part asked for (``requested_steps``), the controller reports that as the decided depth
(``last_decided_steps``) beside the depth that ran (``last_num_steps``), so ``cost_model`` stops offering a
depth the clamp keeps mapping down, as on an engine without it. A gate's off is a decision, not a limit: the
decided depth is off. Faults stay the controller's to contain: a part
that raises, or returns something that is not a ``SpecMode``, makes the composition do the same, so the step
runs at the engine's default depth and the fault is logged, as for any policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from ..errors import FieldError
from ..mode import MAX_NUM_STEPS, SpecMode
from ..policy import Builder, NestedConfig, Policy, PolicyConfig, PolicyEntry, RequestsSteps, Stateful
from ..snapshot import StateError, check_fields, open_envelope, seal
from ..stats import StepStats
from ._validate import check_depths
from .acceptance import AcceptanceConfig
from .cost_model import CostModelConfig
from .hysteresis import HysteresisConfig

__all__ = [
    "Clamp",
    "ClampConfig",
    "ENTRIES",
    "Gate",
    "GateConfig",
    "OnOffAtDepth",
    "clamp_table",
]

_OFF = SpecMode.off()


def _estimates(policy: Policy) -> Mapping[str, float]:
    est = getattr(policy, "estimates", None)
    return est() if callable(est) else {}


def _save(name: str, requested: int, parts: Mapping[str, Policy]) -> dict[str, object]:
    """A composition's state: its ``requested_steps`` and each part's own (None for a part without one)."""
    state: dict[str, object] = {"requested_steps": requested}
    for key, part in parts.items():
        state[key] = part.state_dict() if isinstance(part, Stateful) else None
    return seal(name, None, state)


def _load(name: str, state: Mapping[str, object], parts: Mapping[str, Policy]) -> int:
    """Load each part's state (all or none: a part that refuses its own puts the others back) and return
    the saved ``requested_steps``; ``StateError`` naming the field (``state.inner.state.cur``)."""
    fields = check_fields(open_envelope(state, name, None), ("requested_steps", *parts))
    requested = fields["requested_steps"]
    if type(requested) is not int or not 0 <= requested <= MAX_NUM_STEPS:
        raise StateError(
            "state.requested_steps", f"must be a depth in [0, {MAX_NUM_STEPS}], got {requested!r}"
        )
    for key, part in parts.items():
        if (fields[key] is None) == isinstance(part, Stateful):
            raise StateError(f"state.{key}", "a part's state is None exactly where the part keeps none")
    before: list[tuple[Stateful, dict[str, object]]] = []
    try:
        for key, part in parts.items():
            sub = fields[key]
            if isinstance(part, Stateful):
                if not isinstance(sub, Mapping):
                    raise StateError(f"state.{key}", "must be a mapping")
                saved = part.state_dict()
                try:
                    part.load_state_dict(sub)
                except StateError as exc:
                    raise StateError(f"state.{key}.{exc.field}", str(exc).partition(": ")[2]) from None
                before.append((part, saved))
    except BaseException:
        for done, saved in before:
            done.load_state_dict(saved)
        raise
    return requested


class Gate:
    """``inner``'s mode unless ``gate`` says off.

    ``requested_steps``: the depth decided, as an inner clamp asked for it (off when the gate closed: its
    off is a decision, not an engine limit).
    """

    __slots__ = ("inner", "gate", "requested_steps", "_nested")

    def __init__(self, inner: Policy, gate: Policy) -> None:
        self.inner = inner
        self.gate = gate
        self.requested_steps = 0
        self._nested: RequestsSteps | None = inner if isinstance(inner, RequestsSteps) else None

    def decide(self, stats: StepStats) -> SpecMode:
        mode = self.inner.decide(stats)
        gate = self.gate.decide(stats)
        if type(mode) is not SpecMode:
            return mode  # the controller reports it as an invalid decision
        if type(gate) is not SpecMode:
            return gate
        if gate.num_steps == 0:
            self.requested_steps = 0
            return _OFF
        nested = self._nested
        self.requested_steps = mode.num_steps if nested is None else nested.requested_steps
        return mode

    def reset(self) -> None:
        self.inner.reset()
        self.gate.reset()

    def state_dict(self) -> dict[str, object]:
        return _save("gate", self.requested_steps, {"inner": self.inner, "gate": self.gate})

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        self.requested_steps = _load("gate", state, {"inner": self.inner, "gate": self.gate})

    def estimates(self) -> Mapping[str, float]:
        out = dict(_estimates(self.inner))
        out.update((f"gate_{k}", v) for k, v in _estimates(self.gate).items())
        return out


def clamp_table(depths: Iterable[int]) -> tuple[SpecMode, ...]:
    """The mode run for each decided depth 0..MAX_NUM_STEPS on an engine that runs only ``depths``.

    A depth goes down to the deepest allowed one not above it; a positive depth below every allowed positive
    one goes up to the shallowest (speculating stays speculating), and off stays off when 0 is allowed (else
    it runs the shallowest depth).
    """
    allowed = sorted(set(depths))
    positive = [k for k in allowed if k > 0]
    if not allowed or not all(0 <= k <= MAX_NUM_STEPS for k in allowed):
        raise ValueError(f"depths must be non-empty, each in [0, {MAX_NUM_STEPS}], got {allowed}")
    table = []
    for k in range(MAX_NUM_STEPS + 1):
        if k == 0:
            run = 0 if allowed[0] == 0 else positive[0]
        elif positive:
            below = [d for d in positive if d <= k]
            run = below[-1] if below else positive[0]
        else:
            run = 0
        table.append(SpecMode.of(run))
    return tuple(table)


class Clamp:
    """``inner``'s depth, mapped to the depths an engine runs (``clamp_table``): one index per step.

    ``requested_steps``: the depth ``inner`` asked for (through a nested composition, the one its part
    asked for), which the controller reports as the decided depth: to ``inner`` the clamp is the engine
    limit it stands for.
    """

    __slots__ = ("inner", "_to", "requested_steps", "_nested")

    def __init__(self, inner: Policy, depths: Iterable[int]) -> None:
        self.inner = inner
        self._to = clamp_table(depths)
        self.requested_steps = 0
        self._nested: RequestsSteps | None = inner if isinstance(inner, RequestsSteps) else None

    def decide(self, stats: StepStats) -> SpecMode:
        mode = self.inner.decide(stats)
        if type(mode) is not SpecMode:
            return mode  # the controller reports it as an invalid decision
        k = self.requested_steps = mode.num_steps
        if self._nested is not None:
            self.requested_steps = self._nested.requested_steps
        return self._to[k]

    def reset(self) -> None:
        self.inner.reset()

    def state_dict(self) -> dict[str, object]:
        return _save("clamp", self.requested_steps, {"inner": self.inner})

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        self.requested_steps = _load("clamp", state, {"inner": self.inner})

    def estimates(self) -> Mapping[str, float]:
        return _estimates(self.inner)


class OnOffAtDepth(Clamp):
    """Runs any policy as on/off at one fixed depth: the only depths a legacy worker has graphs for."""

    __slots__ = ()

    def __init__(self, inner: Policy, depth: int) -> None:
        super().__init__(inner, (0, depth))


class GateConfig(PolicyConfig):
    """inner's depth, but off whenever gate says off: a policy that may only turn another off."""

    composite: ClassVar[bool] = True

    name: Literal["gate"] = "gate"
    inner: NestedConfig = Field(
        default_factory=partial(AcceptanceConfig.model_validate, {}),
        description="the policy choosing the depth (any policy config)",
    )
    gate: NestedConfig = Field(
        default_factory=partial(HysteresisConfig.model_validate, {}),
        description="the policy that may turn it off (its depth is not used)",
    )

    @model_validator(mode="after")
    def _gate_can_say_off(self) -> GateConfig:
        if 0 not in self.gate.candidate_steps():
            raise FieldError(
                "gate",
                f"{self.gate.name} never says off (its candidate_steps are "
                f"{list(self.gate.candidate_steps())}): it cannot gate anything",
            )
        return self

    def candidate_steps(self) -> tuple[int, ...]:
        return tuple(sorted({0, *self.inner.candidate_steps()}))

    def needs_step_time(self) -> bool:
        return self.inner.needs_step_time() or self.gate.needs_step_time()

    def needs_request_ids(self) -> bool:
        return self.inner.needs_request_ids() or self.gate.needs_request_ids()


class ClampConfig(PolicyConfig):
    """inner's depth, clamped to the depths an engine runs (down to the nearest; on stays on, off off)."""

    composite: ClassVar[bool] = True

    name: Literal["clamp"] = "clamp"
    inner: NestedConfig = Field(
        default_factory=partial(CostModelConfig.model_validate, {}),
        description="the policy choosing the depth (any policy config)",
    )
    depths: tuple[int, ...] = Field(
        (0, 3), min_length=1, description="the depths the engine runs (0 = off), strictly ascending"
    )

    @model_validator(mode="after")
    def _depths(self) -> ClampConfig:
        check_depths(self.depths, "depths", with_off=True)
        return self

    def candidate_steps(self) -> tuple[int, ...]:
        table = clamp_table(self.depths)
        return tuple(sorted({table[k].num_steps for k in self.inner.candidate_steps()}))

    def needs_step_time(self) -> bool:
        return self.inner.needs_step_time()

    def needs_request_ids(self) -> bool:
        return self.inner.needs_request_ids()


def _gate(config: GateConfig, build: Builder) -> Gate:
    return Gate(build(config.inner), build(config.gate))


def _clamp(config: ClampConfig, build: Builder) -> Clamp:
    return Clamp(build(config.inner), config.depths)


ENTRIES: tuple[PolicyEntry, ...] = (
    PolicyEntry("gate", GateConfig, _gate, builds_nested=True),
    PolicyEntry("clamp", ClampConfig, _clamp, builds_nested=True),
)
