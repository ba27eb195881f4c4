"""Step-cost profiles: what one engine step costs, by batch size, tokens per request and context length.

A profile is a JSON file (format ``specpolicy-profile/1``, documented in docs/profiles.md) holding measured or
fitted grids of target-forward and draft-step times plus the engine's per-step overheads. ``load_profile``
validates it once and builds a ``CostProfile`` whose lookups are plain-Python piecewise-linear interpolation
(a few microseconds), because the simulator and the ``cost_model`` policy call them on every step.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..config_files import loads_json, read_text
from ..errors import ConfigError, format_validation_error, short_repr

__all__ = [
    "PROFILE_FORMAT",
    "CostProfile",
    "LinearCost",
    "OffCost",
    "Overheads",
    "PrefillModel",
    "ProfileError",
    "ProfileFile",
    "ProfileGrid",
    "available_profiles",
    "load_profile",
    "profile_from_dict",
    "with_off_cost",
]

PROFILE_FORMAT = "specpolicy-profile/1"

OffCost = Literal["catch_up", "lazy"]
TimeUnit = Literal["s", "ms", "us"]
_UNIT_S: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
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


class ProfileFile(_Model):
    """The JSON document, field by field (docs/profiles.md)."""

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
    prefill: PrefillModel | None = Field(None, description="null: derived from the grid (docs/profiles.md)")
    source: str = ""
    assumptions: list[str] = Field(default_factory=list)

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
        unit = _UNIT_S[self.time_unit]
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


@dataclass(frozen=True, slots=True)
class _Grid:
    """One context length, in seconds, with a dense row per query length 1..max for O(1) lookup in q."""

    seq_len: float
    batch: tuple[float, ...]
    target_by_q: tuple[tuple[float, ...], ...]  # [q - 1][batch index]
    draft: tuple[float, ...]
    # Slopes beyond the largest batch: the last segment's, for target never below a smaller q's (so
    # extrapolated costs stay monotone in tokens per request).
    tail_by_q: tuple[float, ...]
    draft_tail: float


def _interp(xs: Sequence[float], ys: Sequence[float], x: float, tail: float | None = None) -> float:
    """Piecewise linear; clamped below the first point; above the last one, continued with slope ``tail``
    (default: the last segment's)."""
    n = len(xs)
    if n == 1 or x <= xs[0]:
        return ys[0]
    if tail is not None and x >= xs[-1]:
        return ys[-1] + tail * (x - xs[-1])
    i = bisect_right(xs, x)
    if i >= n:
        i = n - 1
    x0, x1 = xs[i - 1], xs[i]
    y0 = ys[i - 1]
    return y0 + (ys[i] - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True, slots=True)
class CostProfile:
    """Step costs of one engine on one accelerator: the simulator's clock and ``cost_model``'s prior.

    Every method returns seconds. ``seq_len`` None means ``reference_seq_len``. Between measured points the
    cost is linear in batch size, tokens per request and context length; beyond the largest measured batch it
    continues along the last segment (``is_extrapolated`` says so); below the smallest measured batch or
    context it stays at the smallest one (conservative); beyond the largest context it grows linearly by the
    plain step's growth between the two largest grids, the same for every query length (KV reads do not
    depend on it).
    """

    name: str
    description: str
    max_steps: int
    acceptance: float | None
    off_cost: OffCost
    reference_seq_len: float
    prefill_fixed_s: float
    prefill_per_token_s: float
    spec: ProfileFile = dataclasses.field(repr=False, compare=False)
    _grids: tuple[_Grid, ...] = dataclasses.field(repr=False)
    _seq_lens: tuple[float, ...] = dataclasses.field(repr=False)
    _max_batch: float = dataclasses.field(repr=False)
    _overhead: tuple[tuple[float, float], tuple[float, float], tuple[float, float]] = dataclasses.field(
        repr=False
    )
    # Beyond the largest context: (batch sizes, target and draft seconds per extra context token).
    _beyond: tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]] = dataclasses.field(repr=False)

    # -- lookups ---------------------------------------------------------------------------------------------
    def _pick(self, seq_len: float | None) -> tuple[_Grid, _Grid, float, float]:
        """(lower grid, upper grid, weight of the upper one in [0, 1], tokens beyond the largest grid)."""
        grids = self._grids
        s = self.reference_seq_len if seq_len is None else seq_len
        if s != s:
            raise ValueError("seq_len must be a number or None, got nan")
        lens = self._seq_lens
        if len(grids) == 1 or s <= lens[0]:
            return grids[0], grids[0], 0.0, 0.0
        if s >= lens[-1]:
            return grids[-1], grids[-1], 0.0, s - lens[-1]
        i = bisect_right(lens, s)
        return grids[i - 1], grids[i], (s - lens[i - 1]) / (lens[i] - lens[i - 1]), 0.0

    def target_s(self, batch_size: float, query_len: int, seq_len: float | None = None) -> float:
        """One target forward with ``query_len`` tokens for each of ``batch_size`` requests."""
        if not batch_size >= 0:
            raise ValueError(f"batch_size must be >= 0, got {batch_size!r}")
        if not 1 <= query_len <= self.max_steps + 1:
            raise ValueError(
                f"query_len must be in 1..{self.max_steps + 1} for profile {self.name!r}, got {query_len!r}"
            )
        g0, g1, w, beyond = self._pick(seq_len)
        j = query_len - 1
        v = _interp(g0.batch, g0.target_by_q[j], batch_size, g0.tail_by_q[j])
        if w:
            v += (_interp(g1.batch, g1.target_by_q[j], batch_size, g1.tail_by_q[j]) - v) * w
        if beyond:
            ext = self._beyond
            v += beyond * _interp(ext[0], ext[1], batch_size)
        return v

    def draft_s(self, batch_size: float, seq_len: float | None = None) -> float:
        """One draft step (one token per request)."""
        if not batch_size >= 0:
            raise ValueError(f"batch_size must be >= 0, got {batch_size!r}")
        g0, g1, w, beyond = self._pick(seq_len)
        v = _interp(g0.batch, g0.draft, batch_size, g0.draft_tail)
        if w:
            v += (_interp(g1.batch, g1.draft, batch_size, g1.draft_tail) - v) * w
        if beyond:
            ext = self._beyond
            v += beyond * _interp(ext[0], ext[2], batch_size)
        return v

    def catch_up_s(self, batch_size: float, num_tokens: int = 1, seq_len: float | None = None) -> float:
        """Draft pass over ``num_tokens`` tokens per request produced while speculation was off.

        Priced as one draft step over ``batch_size * num_tokens`` tokens: one token per request is exactly the
        per-step catch-up an engine runs while off; more tokens (the lazy variant's re-enable) grow along the
        draft's batch curve, i.e. per token.
        """
        if num_tokens <= 0:
            return 0.0
        return self.draft_s(batch_size * num_tokens, seq_len)

    def prefill_s(self, num_tokens: int) -> float:
        """Prefill of ``num_tokens`` prompt tokens: ``prefill_fixed_s + prefill_per_token_s * num_tokens``."""
        if num_tokens <= 0:
            return 0.0
        return self.prefill_fixed_s + self.prefill_per_token_s * num_tokens

    def overhead_s(self, kind: Literal["plain", "spec", "off"], batch_size: float) -> float:
        """The per-step cost outside the forward passes for a plain, speculative or off step."""
        fixed, per_req = self._overhead[("plain", "spec", "off").index(kind)]
        return fixed + per_req * batch_size

    def spec_step_s(self, batch_size: float, num_steps: int, seq_len: float | None = None) -> float:
        """One speculative cycle: num_steps draft steps, a verify of num_steps+1 tokens, cycle overhead."""
        if not 1 <= num_steps <= self.max_steps:
            raise ValueError(
                f"num_steps must be in 1..{self.max_steps} for profile {self.name!r}, got {num_steps!r}"
            )
        fixed, per_req = self._overhead[1]
        return (
            num_steps * self.draft_s(batch_size, seq_len)
            + self.target_s(batch_size, num_steps + 1, seq_len)
            + fixed
            + per_req * batch_size
        )

    def off_step_s(self, batch_size: float, seq_len: float | None = None) -> float:
        """Speculation off inside the speculative engine: plain step, catch-up (unless lazy), overhead."""
        fixed, per_req = self._overhead[2]
        t = self.target_s(batch_size, 1, seq_len) + fixed + per_req * batch_size
        if self.off_cost == "catch_up":
            t += self.draft_s(batch_size, seq_len)
        return t

    def never_step_s(self, batch_size: float, seq_len: float | None = None) -> float:
        """One step of a speculation-free engine: the true baseline."""
        fixed, per_req = self._overhead[0]
        return self.target_s(batch_size, 1, seq_len) + fixed + per_req * batch_size

    def step_time_s(self, batch_size: float, num_steps: int, seq_len: float | None = None) -> float:
        """``StepCostModel``: a speculative cycle for num_steps > 0, an off step for 0."""
        if num_steps > 0:
            return self.spec_step_s(batch_size, num_steps, seq_len)
        return self.off_step_s(batch_size, seq_len)

    def is_extrapolated(self, batch_size: float, seq_len: float | None = None) -> bool:
        """True when the cost rests on extrapolation: beyond the largest measured context, or at least 10% of
        it from a grid beyond that grid's largest measured batch (a single grid does not model context, so
        only batch counts there)."""
        g0, g1, w, beyond = self._pick(seq_len)
        if beyond > 0.0:
            return True
        return (w <= 0.9 and batch_size > g0.batch[-1]) or (w >= 0.1 and batch_size > g1.batch[-1])

    # -- metadata --------------------------------------------------------------------------------------------
    @property
    def seq_lens(self) -> tuple[float, ...]:
        """The measured context lengths, ascending."""
        return self._seq_lens

    @property
    def max_batch_size(self) -> float:
        """The largest measured batch size over all grids."""
        return self._max_batch

    def to_dict(self) -> dict[str, Any]:
        """The profile as its JSON document (with the current off_cost)."""
        return self.spec.model_dump(mode="json")

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1) + "\n"


def _build(spec: ProfileFile) -> CostProfile:
    unit = _UNIT_S[spec.time_unit]
    qs = spec.grids[0].query_lens
    grids = []
    for g in spec.grids:
        cols = [[row[j] for row in g.target] for j in range(len(qs))]  # [q index][batch index]
        dense = []
        for q in range(1, qs[-1] + 1):
            dense.append(
                tuple(_interp(qs, [c[i] for c in cols], q) * unit for i in range(len(g.batch_sizes)))
            )
        draft = tuple(d * unit for d in g.draft)
        grids.append(
            _Grid(
                seq_len=g.seq_len,
                batch=tuple(g.batch_sizes),
                target_by_q=tuple(dense),
                draft=draft,
                tail_by_q=tuple(accumulate((_tail(g.batch_sizes, row) for row in dense), max)),
                draft_tail=_tail(g.batch_sizes, draft),
            )
        )
    ref = spec.reference_seq_len if spec.reference_seq_len is not None else spec.grids[0].seq_len
    if spec.prefill is not None:
        pf, pt = spec.prefill.fixed * unit, spec.prefill.per_token * unit
    else:
        pf, pt = _derived_prefill(grids, ref)
    o = spec.overhead
    return CostProfile(
        _beyond=_beyond_slopes(grids),
        name=spec.name,
        description=spec.description,
        max_steps=qs[-1] - 1,
        acceptance=spec.acceptance,
        off_cost=spec.off_cost,
        reference_seq_len=ref,
        prefill_fixed_s=pf,
        prefill_per_token_s=pt,
        spec=spec,
        _grids=tuple(grids),
        _seq_lens=tuple(g.seq_len for g in grids),
        _max_batch=max(g.batch[-1] for g in grids),
        _overhead=(
            (o.plain.fixed * unit, o.plain.per_request * unit),
            (o.spec.fixed * unit, o.spec.per_request * unit),
            (o.off.fixed * unit, o.off.per_request * unit),
        ),
    )


def _tail(xs: Sequence[float], ys: Sequence[float]) -> float:
    return 0.0 if len(xs) < 2 else (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])


def _beyond_slopes(grids: list[_Grid]) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """Cost per extra context token beyond the largest grid, by batch size.

    The plain step's growth between the two largest grids (KV reads do not depend on tokens per request, so
    every query length gets the same increment), made non-decreasing in batch size and never negative, so
    extrapolated costs stay monotone in batch, tokens per request and context.
    """
    if len(grids) < 2:
        return (1.0,), (0.0,), (0.0,)
    lo, hi = grids[-2], grids[-1]
    span = hi.seq_len - lo.seq_len
    tgt: list[float] = []
    drf: list[float] = []
    for b, t_hi, d_hi in zip(hi.batch, hi.target_by_q[0], hi.draft, strict=True):
        t_lo = _interp(lo.batch, lo.target_by_q[0], b, lo.tail_by_q[0])
        t = max(0.0, (t_hi - t_lo) / span, *tgt[-1:])
        d = max(0.0, (d_hi - _interp(lo.batch, lo.draft, b, lo.draft_tail)) / span, *drf[-1:])
        tgt.append(t)
        drf.append(d)
    return hi.batch, tuple(tgt), tuple(drf)


def _derived_prefill(grids: list[_Grid], ref: float) -> tuple[float, float]:
    """Prefill is not in decode-step data: take the per-token slope of the target step at the largest
    measured query length between the two largest batches (the most compute-bound point measured), at the
    grid nearest the reference context, and a fixed part of one plain decode step at the smallest batch
    (a prefill still reads every weight once).
    """
    g = min(grids, key=lambda gr: abs(gr.seq_len - ref))
    q = len(g.target_by_q)
    row = g.target_by_q[-1]
    fixed = g.target_by_q[0][0]
    slope = 0.0 if len(g.batch) < 2 else (row[-1] - row[-2]) / ((g.batch[-1] - g.batch[-2]) * q)
    if slope <= 0:  # no slope to take: the mean cost per token at the largest point (an upper bound)
        slope = row[-1] / (g.batch[-1] * q)
    return fixed, slope


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
    return _build(spec)


def _shipped_dir() -> Any:
    return resources.files("specpolicy.sim").joinpath("profiles")


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


def with_off_cost(profile: CostProfile, off_cost: OffCost) -> CostProfile:
    """The same profile with another price for "off" (``lazy``: free while off, catch-up on re-enable)."""
    if off_cost not in ("catch_up", "lazy"):
        raise ProfileError(f"off_cost must be 'catch_up' or 'lazy', got {off_cost!r}")
    if off_cost == profile.off_cost:
        return profile
    return dataclasses.replace(
        profile, off_cost=off_cost, spec=profile.spec.model_copy(update={"off_cost": off_cost})
    )
