"""Fit a step-cost profile from a step trace of a real engine (``specpolicy profile fit``).

A trace records, per executed step, the batch size, the mean context length, the depth k the step ran with and
its measured wall time. For every depth seen, step time is modelled as bilinear in batch size (piecewise
linear between knots) and context length (linear), ``T_k(B, L) = f_k(B) + g_k(B) * (L - L_ref)``: the same
form a profile's grids interpolate, so the fitted grids are exact evaluations of the fit. Each depth is fitted
by least squares on relative error, with a weak smoothness penalty (so knots with little data follow their
neighbours) and iterative rejection of outliers (steps slowed by something else: a GC pause, a prefill running
alongside). Whole-step times cannot say how a step splits into draft, verify and overhead, so the profile
assigns a documented share to the draft and folds every overhead into the target grid; ``step_time_s``
reproduces the fitted steps either way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..profiles import PROFILE_FORMAT, ProfileError, StepCostModel, profile_from_dict
from ..trace import TraceRecord, iter_trace_lines, read_trace

__all__ = [
    "DepthFit",
    "FitOptions",
    "FitResult",
    "estimate_acceptance",
    "fit_profile",
    "fit_trace_files",
    "synthetic_trace",
]

FloatArray = npt.NDArray[np.float64]
_MIN_DRAFT_S = 15e-6


@dataclass(frozen=True, slots=True)
class FitOptions:
    """Knobs of the fit; the defaults suit traces of a few thousand steps or more."""

    name: str = "fitted"
    description: str = ""
    draft_share: float = 0.05  # a draft step as a share of an off step (H200 data: 3.6-5.6%)
    min_steps_per_depth: int = 20
    outlier_mads: float = 4.0
    smoothness: float = 0.02
    rank: int | None = None  # None: the lowest rank present

    def __post_init__(self) -> None:
        if not 0.0 < self.draft_share < 0.5:
            raise ValueError(f"draft_share must be in (0, 0.5), got {self.draft_share!r}")
        if self.min_steps_per_depth < 5:
            raise ValueError(f"min_steps_per_depth must be >= 5, got {self.min_steps_per_depth!r}")
        if not self.outlier_mads > 1.0:
            raise ValueError(f"outlier_mads must be > 1, got {self.outlier_mads!r}")


@dataclass(frozen=True, slots=True)
class DepthFit:
    """How well one depth's steps were fitted."""

    num_steps: int
    used: int
    rejected: int
    rel_rms: float  # root mean square relative residual over the steps kept


@dataclass(frozen=True, slots=True)
class FitResult:
    """The profile document and what the fit saw."""

    profile: dict[str, Any]
    depths: tuple[DepthFit, ...]
    skipped_depths: dict[int, int]  # depth -> steps, too few to fit
    batch_range: tuple[float, float]
    seq_range: tuple[float, float] | None
    acceptance: float | None
    notes: tuple[str, ...] = field(default_factory=tuple)


def _knots(batches: FloatArray) -> list[float]:
    """Powers of two inside the observed range plus its ends, none closer than 1.25x to the next."""
    lo, hi = float(batches.min()), float(batches.max())
    if hi <= lo:
        return [lo]
    cand = [lo] + [2.0**i for i in range(0, 20) if lo * 1.25 <= 2.0**i <= hi / 1.25] + [hi]
    return cand


def _hat(knots: Sequence[float], x: FloatArray) -> FloatArray:
    """Piecewise-linear (hat) basis: column j is 1 at knot j, 0 at its neighbours; clamped at the ends."""
    n = len(knots)
    out = np.zeros((len(x), n))
    if n == 1:
        out[:, 0] = 1.0
        return out
    k = np.asarray(knots)
    xc = np.clip(x, k[0], k[-1])
    i = np.clip(np.searchsorted(k, xc, side="right") - 1, 0, n - 2)
    w = (xc - k[i]) / (k[i + 1] - k[i])
    rows = np.arange(len(x))
    out[rows, i] = 1.0 - w
    out[rows, i + 1] = w
    return out


def _penalty(knots: Sequence[float], blocks: int, weight: float) -> FloatArray:
    """Rows penalising changes of slope between adjacent segments, for each block of coefficients."""
    n = len(knots)
    rows = []
    for b in range(blocks):
        for j in range(1, n - 1):
            r = np.zeros(n * blocks)
            h0, h1 = knots[j] - knots[j - 1], knots[j + 1] - knots[j]
            # (c[j+1]-c[j])/h1 - (c[j]-c[j-1])/h0, scaled by the mean segment width to stay unitless
            s = 0.5 * (h0 + h1)
            r[b * n + j + 1] += s / h1
            r[b * n + j] -= s / h1 + s / h0
            r[b * n + j - 1] += s / h0
            rows.append(weight * r)
    return np.asarray(rows) if rows else np.zeros((0, n * blocks))


def _fit_depth(
    b: FloatArray, ctx: FloatArray | None, y: FloatArray, knots: list[float], opts: FitOptions
) -> tuple[FloatArray, int, float]:
    """Coefficients (f then g per knot), rejected count and relative RMS, by reweighted least squares."""
    basis = _hat(knots, b)
    design = basis if ctx is None else np.hstack([basis, basis * ctx[:, None]])
    blocks = 1 if ctx is None else 2
    scale = float(np.median(y))
    pen = _penalty(knots, blocks, opts.smoothness * math.sqrt(len(y)))
    keep = np.ones(len(y), dtype=bool)
    coef = np.zeros(design.shape[1])
    for _ in range(8):
        a = design[keep] / y[keep, None]
        rhs = np.ones(int(keep.sum()))
        if len(pen):
            a = np.vstack([a, pen / scale])
            rhs = np.concatenate([rhs, np.zeros(len(pen))])
        coef = np.asarray(np.linalg.lstsq(a, rhs, rcond=None)[0], dtype=np.float64)
        rel = (y - design @ coef) / y
        med = float(np.median(rel[keep]))
        mad = float(np.median(np.abs(rel[keep] - med))) * 1.4826
        new_keep = np.abs(rel - med) <= max(opts.outlier_mads * mad, 1e-3)
        if np.array_equal(new_keep, keep):
            break
        keep = new_keep
    rel = (y - design @ coef) / y
    return coef, int((~keep).sum()), float(np.sqrt(np.mean(rel[keep] ** 2)))


def estimate_acceptance(records: Iterable[TraceRecord]) -> float | None:
    """Per-token acceptance by maximum likelihood under the chained model: drafts accepted / (accepted +
    chains that stopped early). Each record carries the previous step's per-request accepted counts."""
    accepted = stopped = 0
    for r in records:
        k = r.last_num_steps
        if k <= 0 or not r.accepted_draft_tokens:
            continue
        drafted = r.drafted_tokens
        for i, a in enumerate(r.accepted_draft_tokens):
            depth = drafted[i] if drafted is not None and i < len(drafted) else k
            if depth <= 0:
                continue
            a = min(int(a), depth)
            accepted += a
            stopped += a < depth
    if accepted + stopped == 0 or stopped == 0:
        return None
    return accepted / (accepted + stopped)


def _draft(totals: FloatArray, depths: Sequence[int], share: float) -> FloatArray:
    """Draft step per grid and knot: ``share`` of an off step, capped so that no verify gets cheaper with
    more tokens (each extra depth must cost at least one more draft step), non-decreasing in batch size."""
    cap = share * totals[0]
    prev_k = 0
    for di in range(1, len(depths)):
        k = depths[di]
        # Verify of k+1 tokens >= verify of prev_k+1 tokens (the off step's catch-up counts as one draft).
        span = k - max(prev_k, 1)
        if span > 0:
            cap = np.minimum(cap, (totals[di] - totals[di - 1]) / span)
        prev_k = k
    # Not below 15 us (a few kernel launches; the loader's plausibility floor is 10 us). Non-decreasing in
    # batch by the lower envelope, so the cap holds at every knot.
    cap = np.maximum(cap, _MIN_DRAFT_S)
    return np.asarray(np.minimum.accumulate(cap[..., ::-1], axis=-1)[..., ::-1])


def _cummax(a: FloatArray, axis: int) -> FloatArray:
    return np.asarray(np.maximum.accumulate(a, axis=axis))


def fit_profile(
    records: Sequence[TraceRecord], options: FitOptions | None = None, source: str = ""
) -> FitResult:
    """Fit a profile document from step records (all ranks given; the chosen rank is used)."""
    opts = options or FitOptions()
    if not records:
        raise ProfileError("trace has no step records")
    rank = opts.rank if opts.rank is not None else min(r.rank for r in records)
    recs = [
        r
        for r in records
        if r.rank == rank
        and r.step_time_s is not None
        and r.step_time_s > 0
        and r.batch_size > 0
        and not r.fallback
    ]
    if not recs:
        raise ProfileError(f"trace has no timed steps with batch_size > 0 on rank {rank}")
    by_depth: dict[int, list[TraceRecord]] = {}
    for r in recs:
        by_depth.setdefault(r.num_steps, []).append(r)
    skipped = {k: len(v) for k, v in by_depth.items() if len(v) < opts.min_steps_per_depth}
    depths = sorted(k for k in by_depth if k not in skipped)
    if 0 not in depths or len(depths) < 2:
        seen = ", ".join(f"{k}: {len(v)}" for k, v in sorted(by_depth.items()))
        raise ProfileError(
            f"trace must have at least {opts.min_steps_per_depth} timed steps at depth 0 (speculation "
            f"off) and at one depth k > 0 to fit a profile; steps per depth: {seen}. Trace a policy that "
            "explores depths (e.g. cost_model, or a few minutes of each static depth)"
        )
    used = [r for k in depths for r in by_depth[k]]
    batches = np.asarray([r.batch_size for r in used], dtype=np.float64)
    ctx_all = [r.mean_seq_len for r in used if r.mean_seq_len is not None]
    knots = _knots(batches)
    notes: list[str] = []
    if ctx_all and len(ctx_all) == len(used):
        lo, ref, hi = (float(x) for x in np.percentile(ctx_all, [10, 50, 90]))
        two_grids = hi >= 1.25 * lo
        if not two_grids:
            notes.append("context length varied too little to model (single grid)")
    else:
        notes.append(
            ("some steps lack" if ctx_all else "the trace has no")
            + " mean_seq_len: context length is not modelled"
        )
        lo = ref = hi = float(np.median(ctx_all)) if ctx_all else 1024.0
        two_grids = False
    seq_lens = [lo, hi] if two_grids else [ref]

    fits: list[DepthFit] = []
    # totals[k][grid][knot]: fitted whole-step seconds
    totals = np.zeros((len(depths), len(seq_lens), len(knots)))
    kb = np.asarray(knots)
    for di, k in enumerate(depths):
        rs = by_depth[k]
        b = np.asarray([r.batch_size for r in rs], dtype=np.float64)
        y = np.asarray([r.step_time_s for r in rs], dtype=np.float64)
        ctx = (
            (np.asarray([r.mean_seq_len for r in rs], dtype=np.float64) - ref) / 1000.0 if two_grids else None
        )
        coef, rejected, rms = _fit_depth(b, ctx, y, knots, opts)
        fits.append(DepthFit(k, len(rs) - rejected, rejected, rms))
        n = len(knots)
        for gi, s in enumerate(seq_lens):
            t = coef[:n] + (coef[n:] * (s - ref) / 1000.0 if two_grids else 0.0)
            totals[di, gi] = t
        if not np.all(np.isfinite(totals[di])) or np.any(totals[di] <= 0):
            raise ProfileError(
                f"fit for depth {k} gave non-positive step times at {kb.tolist()}: too little data"
            )

    # Monotone along depth, batch and context, as a profile must be (never lowers a fitted value).
    totals = _cummax(_cummax(_cummax(totals, 0), 2), 1)
    share = opts.draft_share
    draft = _draft(totals, depths, share)  # [grid][knot]
    grids: list[dict[str, Any]] = []
    for gi, s in enumerate(seq_lens):
        target = np.stack([totals[di, gi] - k * draft[gi] for di, k in enumerate(depths)], axis=1)
        target[:, 0] = totals[0, gi] - draft[gi]
        target = _cummax(_cummax(target, 1), 0)
        if gi:
            target = np.maximum(target, np.asarray(grids[gi - 1]["target"]) * 1e-3)
        grids.append(
            {
                "seq_len": round(s, 1),
                "batch_sizes": [round(x, 3) for x in knots],
                "query_lens": [k + 1 for k in depths],
                "target": [[_ms(v) for v in row] for row in target],
                "draft": [_ms(v) for v in draft[gi]],
            }
        )
    acceptance = estimate_acceptance(recs)
    if acceptance is not None:
        acceptance = round(min(max(acceptance, 0.01), 0.99), 4)
    doc: dict[str, Any] = {
        "format": PROFILE_FORMAT,
        "name": opts.name,
        "description": opts.description
        or f"Fitted from {len(used)} traced steps (depths {', '.join(map(str, depths))}).",
        "time_unit": "ms",
        "reference_seq_len": round(ref, 1),
        "acceptance": acceptance,
        "off_cost": "catch_up",
        "grids": grids,
        "overhead": {k: {"fixed": 0.0, "per_request": 0.0} for k in ("plain", "spec", "off")},
        "prefill": None,
        "source": source or "specpolicy profile fit",
        "measured": {
            "batch_size": [float(batches.min()), float(batches.max())],
            "seq_len": [round(min(ctx_all), 1), round(max(ctx_all), 1)] if ctx_all else None,
        },
        "assumptions": [
            "Whole-step times were fitted per depth (bilinear in batch size and context length, outliers "
            "rejected); every overhead is folded into the target grid.",
            f"A draft step is {share:.0%} of an off step (less where the traced steps grow less per extra "
            "depth); an off step pays one draft catch-up pass.",
            "never (a speculation-free engine) is estimated as an off step without its catch-up pass; fit a "
            "trace of a speculation-free engine for the true baseline.",
            f"Depths between the traced ones ({', '.join(map(str, depths))}) are interpolated linearly.",
            "Prefill is derived from the grid, not measured (too cheap if the trace saw only small batches: "
            "give a 'prefill' object then).",
        ]
        + notes,
    }
    profile_from_dict(doc, origin="fitted profile")  # the fit must produce a loadable profile
    return FitResult(
        profile=doc,
        depths=tuple(fits),
        skipped_depths=skipped,
        batch_range=(float(batches.min()), float(batches.max())),
        seq_range=(min(ctx_all), max(ctx_all)) if ctx_all else None,
        acceptance=acceptance,
        notes=tuple(notes),
    )


def _ms(seconds: float) -> float:
    return float(f"{seconds * 1e3:.6g}")


def fit_trace_files(paths: Sequence[str | Path], options: FitOptions | None = None) -> FitResult:
    """Read one or more trace files (rotated parts in order) and fit them together."""
    records: list[TraceRecord] = []
    engines: list[str] = []
    for p in paths:
        for _, obj in iter_trace_lines(p):
            if obj.get("kind") == "header":
                eng = " ".join(str(obj[k]) for k in ("engine", "version", "worker") if obj.get(k))
                if eng and eng not in engines:
                    engines.append(eng)
        records.extend(read_trace(p))
    names = ", ".join(Path(p).name for p in paths)
    source = f"specpolicy profile fit {names}" + (f" ({'; '.join(engines)})" if engines else "")
    return fit_profile(records, options, source=source)


def synthetic_trace(
    truth: StepCostModel,
    n: int = 6000,
    depths: Sequence[int] = (0, 1, 2, 3, 4, 5, 6, 7),
    seq: tuple[float, float] = (1024.0, 4096.0),
    max_batch: int = 256,
    noise: float = 0.03,
    outliers: float = 0.03,
    acceptance: float = 0.7,
    seed: int = 1,
) -> list[TraceRecord]:
    """A trace of ``n`` steps priced by a known cost model, to check (or demonstrate) that a fit recovers it.

    Batch sizes are log-uniform in 1..max_batch, contexts uniform in ``seq``, depths uniform over ``depths``;
    step times carry log-normal noise (sigma ``noise``) and a share ``outliers`` of steps is slowed 1.5-4x.
    Accepted drafts follow the chained model with per-token ``acceptance``.
    """
    rng = np.random.default_rng(seed)
    out = []
    last_k = 0
    for i in range(n):
        b = int(np.exp(rng.uniform(0, math.log(max_batch))).round())
        s = float(rng.uniform(*seq))
        k = int(rng.choice(np.asarray(depths)))
        t = truth.step_time_s(b, k, s) * math.exp(noise * rng.standard_normal())
        if rng.random() < outliers:
            t *= rng.uniform(1.5, 4.0)
        acc = None
        if last_k:
            g = rng.geometric(1 - acceptance, size=b) - 1  # drafts accepted before the first rejection
            acc = np.minimum(g, last_k).tolist()
        out.append(
            TraceRecord(
                step=i,
                batch_size=b,
                num_steps=k,
                step_time_s=t,
                mean_seq_len=s,
                last_num_steps=last_k,
                accepted_draft_tokens=acc,
            )
        )
        last_k = k
    return out
