"""``CostProfile``: a validated profile as plain-Python piecewise-linear lookups (a few microseconds each).

The simulator and the ``cost_model`` policy call them on every step, so the grids are converted once to
seconds and to a dense row per query length.
"""

from __future__ import annotations

import dataclasses
import json
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Literal

from .schema import UNIT_S, OffCost, ProfileError, ProfileFile

__all__ = ["CostProfile", "build_profile", "with_off_cost"]


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


def build_profile(spec: ProfileFile) -> CostProfile:
    unit = UNIT_S[spec.time_unit]
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


def with_off_cost(profile: CostProfile, off_cost: OffCost) -> CostProfile:
    """The same profile with another price for "off" (``lazy``: free while off, catch-up on re-enable)."""
    if off_cost not in ("catch_up", "lazy"):
        raise ProfileError(f"off_cost must be 'catch_up' or 'lazy', got {off_cost!r}")
    if off_cost == profile.off_cost:
        return profile
    return dataclasses.replace(
        profile, off_cost=off_cost, spec=profile.spec.model_copy(update={"off_cost": off_cost})
    )
