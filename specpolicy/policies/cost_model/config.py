"""cost_model's configuration, and the loading of the step-cost profile that can seed it."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from ...errors import ConfigError, FieldError, short_repr, short_str
from ...policy import PolicyConfig
from ...profiles import StepCostModel, load_profile
from .._validate import check_depths

__all__ = ["CostModelConfig", "load_cost_model"]


class CostModelConfig(PolicyConfig):
    """Maximise predicted tokens/s: per-position acceptance x step cost learned online (probing)."""

    candidate_steps_alias: ClassVar[bool] = True
    uses_step_time: ClassVar[bool] = True
    uses_request_ids: ClassVar[bool] = True

    name: Literal["cost_model"] = "cost_model"
    steps: tuple[int, ...] = Field(
        (1, 2, 3, 4, 5, 6, 7),
        min_length=1,
        description="positive depths it may choose, strictly ascending (0 = off is added when allow_off)",
    )
    allow_off: bool = Field(True, description="may choose 0 (speculation off)")
    profile: str | None = Field(
        None,
        description="step-cost profile seeding the cost model: a shipped profile name or a profile JSON path",
    )
    prior_weight: float = Field(
        0.0,
        ge=0.0,
        le=1e6,
        description="pseudo-observations the profile's shape counts for in each measured cost cell",
    )
    prior_mismatch_ratio: float = Field(
        1.5,
        gt=1.0,
        le=100.0,
        description="measured/profile spread between two depths of a bucket that shows the profile wrong",
    )
    prior_acceptance: float = Field(
        0.7, gt=0.0, lt=1.0, description="per-draft acceptance assumed before any is measured"
    )
    acceptance_halflife: float = Field(
        128.0, ge=1.0, le=1e6, description="steps with acceptance data after which old data weighs half"
    )
    cost_halflife: float = Field(
        256.0, ge=1.0, le=1e6, description="steps after which an old step-time measurement weighs half"
    )
    probe_budget: float = Field(
        0.002, gt=0.0, le=0.5, description="share of throughput it may spend re-measuring other depths"
    )
    max_probe_interval: int = Field(
        4096, ge=128, le=10_000_000, description="steps in a bucket after which every depth is re-measured"
    )
    max_probe_share: float = Field(
        0.05, gt=0.0, le=0.5, description="the most steps that may be probes, as a share of all steps"
    )
    probe_steps: int = Field(
        3,
        ge=1,
        le=64,
        description="consecutive steps of one probe (the first after a switch is a transition, not its cost)",
    )
    change_threshold: float | None = Field(
        None,
        gt=0.0,
        le=1e6,
        description="CUSUM alarm level (standard deviations, e.g. 8) for a change in acceptance; None: off",
    )
    switch_margin: float = Field(
        0.01, ge=0.0, le=1.0, description="a new depth must be predicted this much faster (fraction)"
    )
    min_dwell_steps: int = Field(16, ge=0, le=1_000_000, description="steps between two depth switches")
    update_interval: int = Field(
        64, ge=1, le=100_000, description="steps between recomputations of a bucket's predictions"
    )
    buckets_per_octave: int = Field(4, ge=1, le=16, description="batch-size buckets per doubling above 4")

    @model_validator(mode="after")
    def _consistent(self) -> CostModelConfig:
        steps = self.steps
        check_depths(steps)
        if self.profile is not None:
            ref = self.profile.strip()
            if not ref:
                raise FieldError("profile", "must be a profile name or a JSON path, got an empty string")
            _read_profile(ref)  # what make_policy loads, so check-config rejects exactly what it would
        return self

    def candidate_steps(self) -> tuple[int, ...]:
        return ((0,) if self.allow_off else ()) + self.steps


def _read_profile(spec: str) -> StepCostModel:
    """Load a profile, or FieldError("profile", why): the one loader behind validation and the factory."""
    try:
        model = load_profile(spec)
    except ConfigError as exc:
        raise FieldError("profile", str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - whatever a garbage file makes the loader raise
        raise FieldError("profile", f"cannot load {short_repr(spec)}: {short_str(exc)}") from None
    if not isinstance(model, StepCostModel):
        raise FieldError("profile", f"{short_repr(spec)} did not give a step-cost model")
    return model


def load_cost_model(spec: str) -> StepCostModel:
    """The profile a config names, as the factory loads it: ConfigError naming ``cost_model.profile``."""
    try:
        return _read_profile(spec)
    except FieldError as exc:
        raise ConfigError(f"cost_model.profile: {exc}") from None
