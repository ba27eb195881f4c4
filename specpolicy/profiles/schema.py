"""The on-disk schema of a step-cost profile (format ``specpolicy-profile/1``, docs/reference/profiles.md).

Pydantic models that validate a profile document once, when it is loaded, with errors that name the field;
``cost.CostProfile`` is built from a validated document and does the lookups.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import ConfigError

__all__ = [
    "PROFILE_FORMAT",
    "LinearCost",
    "OffCost",
    "Overheads",
    "PrefillModel",
    "ProfileError",
    "ProfileFile",
    "ProfileGrid",
    "TimeUnit",
    "UNIT_S",
]

PROFILE_FORMAT = "specpolicy-profile/1"

OffCost = Literal["catch_up", "lazy"]
TimeUnit = Literal["s", "ms", "us"]
UNIT_S: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
# A decode step (or a draft step) outside this range is almost surely a unit mistake, not a measurement.
_PLAUSIBLE_S = (1e-5, 10.0)


class ProfileError(ConfigError):
    """A profile cannot be loaded: the message names the file, the field and what is allowed."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LinearCost(_Model):
    """A per-step cost outside the forward passes: ``fixed + per_request * batch_size`` (profile unit)."""

    fixed: float = Field(ge=0, allow_inf_nan=False, description="per step, in the profile's time_unit")
    per_request: float = Field(0.0, ge=0, allow_inf_nan=False, description="per running request per step")


class Overheads(_Model):
    """Engine costs the forward-pass grids do not contain (scheduling, sampling, acceptance, rollback)."""

    plain: LinearCost = Field(description="every step of a speculation-free engine")
    spec: LinearCost = Field(description="every speculative cycle (draft + verify) of the speculative engine")
    off: LinearCost = Field(description="every speculation-off step inside the speculative engine")


class PrefillModel(_Model):
    """Prefill of one prompt: ``fixed + per_token * num_tokens`` (profile time unit)."""

    fixed: float = Field(ge=0, allow_inf_nan=False)
    per_token: float = Field(gt=0, allow_inf_nan=False)


class ProfileGrid(_Model):
    """Forward-pass times measured at one context length.

    ``target[i][j]`` is one target forward at ``batch_sizes[i]`` requests with ``query_lens[j]`` tokens each;
    ``draft[i]`` one draft step at ``batch_sizes[i]`` requests.
    """

    seq_len: float = Field(gt=0, allow_inf_nan=False, description="cached tokens per request (context)")
    batch_sizes: list[float] = Field(min_length=1)
    query_lens: list[int] = Field(min_length=1)
    target: list[list[float]]
    draft: list[float]

    @field_validator("batch_sizes")
    @classmethod
    def _batches(cls, v: list[float]) -> list[float]:
        if any(not (math.isfinite(b) and b > 0) for b in v):
            raise ValueError(f"batch sizes must be finite and > 0, got {v}")
        if any(b1 <= b0 for b0, b1 in pairwise(v)):
            raise ValueError(f"batch sizes must be strictly increasing, got {v}")
        return v

    @field_validator("query_lens")
    @classmethod
    def _queries(cls, v: list[int]) -> list[int]:
        if v[0] != 1:
            raise ValueError(f"query lengths must start at 1 (a plain decode step), got {v}")
        if any(q1 <= q0 for q0, q1 in pairwise(v)):
            raise ValueError(f"query lengths must be strictly increasing, got {v}")
        return v

    @model_validator(mode="after")
    def _shape_and_monotone(self) -> ProfileGrid:
        nb, nq = len(self.batch_sizes), len(self.query_lens)
        if len(self.target) != nb:
            raise ValueError(
                f"target has {len(self.target)} rows but batch_sizes has {nb}: one row per batch size"
            )
        for i, row in enumerate(self.target):
            if len(row) != nq:
                raise ValueError(
                    f"target[{i}] (batch {self.batch_sizes[i]:g}) has {len(row)} values, query_lens "
                    f"needs {nq}: missing grid point"
                )
            for j, t in enumerate(row):
                if not (math.isfinite(t) and t > 0):
                    raise ValueError(f"target[{i}][{j}] must be a finite time > 0, got {t!r}")
        if len(self.draft) != nb:
            raise ValueError(
                f"draft has {len(self.draft)} values but batch_sizes has {nb}: missing grid point"
            )
        for i, t in enumerate(self.draft):
            if not (math.isfinite(t) and t > 0):
                raise ValueError(f"draft[{i}] must be a finite time > 0, got {t!r}")
        for i in range(nb):
            for j in range(1, nq):
                if self.target[i][j] < self.target[i][j - 1]:
                    raise ValueError(
                        f"non-monotonic data: target at batch {self.batch_sizes[i]:g} is "
                        f"{self.target[i][j]:g} for q={self.query_lens[j]} < {self.target[i][j - 1]:g} for "
                        f"q={self.query_lens[j - 1]}; a step must not get cheaper with more tokens per "
                        "request"
                    )
        for i in range(1, nb):
            for j in range(nq):
                if self.target[i][j] < self.target[i - 1][j]:
                    raise ValueError(
                        f"non-monotonic data: target at q={self.query_lens[j]} is {self.target[i][j]:g} for "
                        f"batch {self.batch_sizes[i]:g} < {self.target[i - 1][j]:g} for batch "
                        f"{self.batch_sizes[i - 1]:g}; a step must not get cheaper with more requests"
                    )
            if self.draft[i] < self.draft[i - 1]:
                raise ValueError(
                    f"non-monotonic data: draft is {self.draft[i]:g} for batch {self.batch_sizes[i]:g} < "
                    f"{self.draft[i - 1]:g} for batch {self.batch_sizes[i - 1]:g}"
                )
        return self


class MeasuredRange(_Model):
    """Where a fitted profile's numbers come from: the traced batch sizes and contexts, [lo, hi] each.
    Outside it the simulator's costs are extrapolations, and its report says so per level."""

    batch_size: tuple[float, float]
    seq_len: tuple[float, float] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> MeasuredRange:
        for name in ("batch_size", "seq_len"):
            span = getattr(self, name)
            if span is not None and not (0 < span[0] <= span[1] and math.isfinite(span[1])):
                raise ValueError(f"measured.{name} must be [lo, hi] with 0 < lo <= hi, got {list(span)}")
        return self


class ProfileFile(_Model):
    """The JSON document, field by field (docs/reference/profiles.md)."""

    format: Literal["specpolicy-profile/1"]
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
    description: str
    time_unit: TimeUnit = Field(description="unit of every time value in the file: s, ms or us")
    grids: list[ProfileGrid] = Field(min_length=1, description="one per measured context length, ascending")
    overhead: Overheads
    reference_seq_len: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="context length used when a caller gives none"
    )
    acceptance: float | None = Field(
        None, gt=0, lt=1, description="the profile's own per-token acceptance (fitted profiles), else null"
    )
    off_cost: OffCost = "catch_up"
    prefill: PrefillModel | None = Field(
        None, description="null: derived from the grid (docs/reference/profiles.md)"
    )
    source: str = ""
    assumptions: list[str] = Field(default_factory=list)
    measured: MeasuredRange | None = Field(
        None, description="a fitted profile's traced range (batch sizes, contexts); null: the grids"
    )

    @model_validator(mode="after")
    def _across_grids(self) -> ProfileFile:
        qs = self.grids[0].query_lens
        for g in self.grids[1:]:
            if g.query_lens != qs:
                raise ValueError(
                    f"every grid must use the same query_lens: {g.query_lens} at seq_len {g.seq_len:g} "
                    f"vs {qs}"
                )
        lens = [g.seq_len for g in self.grids]
        if any(b <= a for a, b in pairwise(lens)):
            raise ValueError(f"grids must be in strictly increasing seq_len order, got {lens}")
        unit = UNIT_S[self.time_unit]
        lo, hi = _PLAUSIBLE_S
        for gi, g in enumerate(self.grids):
            for name, val in (("target", min(min(r) for r in g.target)), ("draft", min(g.draft))):
                if val * unit < lo:
                    raise ValueError(
                        f"bad units: grids[{gi}].{name} has {val:g} {self.time_unit} = "
                        f"{val * unit:.3g} s, below the plausible {lo:g} s per step; "
                        "check time_unit (one of s, ms, us)"
                    )
            for name, val in (("target", max(max(r) for r in g.target)), ("draft", max(g.draft))):
                if val * unit > hi:
                    raise ValueError(
                        f"bad units: grids[{gi}].{name} has {val:g} {self.time_unit} = "
                        f"{val * unit:.3g} s, above the plausible {hi:g} s per step; "
                        "check time_unit (one of s, ms, us)"
                    )
        for lower, upper in pairwise(self.grids):
            common = set(lower.batch_sizes) & set(upper.batch_sizes)
            for b in sorted(common):
                i, k = lower.batch_sizes.index(b), upper.batch_sizes.index(b)
                for j, q in enumerate(qs):
                    if upper.target[k][j] < lower.target[i][j]:
                        raise ValueError(
                            f"non-monotonic data: target at batch {b:g} q={q} is {upper.target[k][j]:g} at "
                            f"seq_len {upper.seq_len:g} < {lower.target[i][j]:g} at seq_len "
                            f"{lower.seq_len:g}; a longer context must not be cheaper"
                        )
        return self
