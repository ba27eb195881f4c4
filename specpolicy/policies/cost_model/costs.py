"""cost_model's step-time estimates: the predicted time of one step per (batch-size bucket, depth).

Measurements are divided by a *base* before they enter the learned cells (``table.CostCells``): the profile's
prediction for that batch size, depth and context when there is a profile (the cells learn a correction,
about 1), else a square-root shape within the bucket. A bucket with unmeasured depths is filled in: two
measured depths give a line in k (each draft step plus a wider verify), one gives the ratio of the nearest
bucket that measured both, none the prior (the profile's shape, else ``PRIOR_STEP_COST`` per draft step).

A profile is a prior, not the truth. Its claim for a bucket is that every depth's correction equals the best
measured one's (the profile's shape). Each measured cell weighs that claim as ``prior_weight``
pseudo-observations against its own measured steps (the claim clipped to 2x the measurement, so a wrong
profile moves a measured cell by a bounded amount: ``prior_weight / (prior_weight + steps)`` of at most
2x). Two checks keep a wrong shape from living on in the cells nothing measures: a bucket where only off or
only speculation was measured (and no neighbour measured both) asks for one probe of the other kind
(``unverified``), and once two depths of one bucket, each measured over two steps, disagree by more than
``mismatch_ratio`` in their corrections, the profile's shape is declared wrong (``mismatch``, logged once):
from then on measurements alone price the measured depths.
"""

from __future__ import annotations

import logging
import math
from itertools import compress

from ...clean import clean_float
from ...profiles import StepCostModel
from .table import CHANGE_RATIO, MAX_BATCH, BucketGrid, CostCells

__all__ = ["PRIOR_STEP_COST", "StepCosts", "context_length"]

log = logging.getLogger("specpolicy.policy")

#: Without a profile, a depth never measured anywhere is priced at (1 + PRIOR_STEP_COST * k) times off: an
#: optimistic memory-bound guess, so promising depths get explored.
PRIOR_STEP_COST = 0.1
#: ``_ZERO.__lt__(w)`` is ``w > 0.0``, as a C-level predicate for map().
_ZERO = 0.0


def context_length(value: object) -> float | None:
    """A context length as a finite float > 0, else None (missing): the check where it enters the state."""
    if value.__class__ is float:
        return value if 0.0 < value < math.inf else None
    f = clean_float(value)
    return f if f else None


class StepCosts:
    """Predicted step times per bucket and depth index: learned cells over a base."""

    __slots__ = (
        "cells",
        "model",
        "grid",
        "arms",
        "prior_weight",
        "mismatch_ratio",
        "mismatch",
        "pred",
        "_memo",
    )

    def __init__(
        self,
        grid: BucketGrid,
        arms: tuple[int, ...],
        halflife: float,
        model: StepCostModel | None,
        prior_weight: float = 4.0,
        mismatch_ratio: float = 1.5,
    ) -> None:
        self.cells = CostCells(len(grid), len(arms), halflife)
        self.model = model
        self.grid = grid
        self.arms = arms
        self.prior_weight = prior_weight
        self.mismatch_ratio = mismatch_ratio
        #: measured / profile spread that showed the profile's shape wrong (0.0: none seen).
        self.mismatch = 0.0
        #: per bucket: the normalised times (as the cells hold them) ``predict`` gave last, per depth index
        self.pred: list[list[float]] = [[0.0] * len(arms) for _ in range(len(grid))]
        self._memo: dict[tuple[int, int, int], float] = {}

    def bucket(self, batch: int) -> int:
        """The bucket of a batch size (> 0)."""
        return self.grid.index[batch] if batch <= MAX_BATCH else len(self.grid) - 1

    def add(
        self, batch: int, i: int, seq_len: float | None, t: float, step: int, count: int
    ) -> tuple[int, bool, bool]:
        """A measured run (batch > 0) at depth index ``i``: (its bucket, or -1 when it cannot be priced; True
        when it showed a change in cost and the bucket started over; True when it ran ``CHANGE_RATIO``
        faster than predicted, the estimate stale wherever it came from)."""
        b = self.bucket(batch)
        base = self.base(batch, self.arms[i], seq_len, b)
        if base > 0.0:
            x = t / base
            stale = x * CHANGE_RATIO < self.pred[b][i]
            return b, self.cells.add(b, i, x, step, count), stale
        return -1, False, False

    def base(self, batch: float, k: int, seq_len: float | None, b: int) -> float:
        """What a measurement is divided by: the profile's prediction, else a sqrt shape within the bucket."""
        if self.model is None:
            return math.sqrt(batch / self.grid.rep[b])
        lq = 0 if seq_len is None or not seq_len > 0 else int(round(8.0 * math.log2(seq_len)))
        key = (int(round(batch)), k, lq)
        memo = self._memo
        v = memo.get(key)
        if v is None:
            if len(memo) > 65536:
                memo.clear()
            v = self._profile_time(key[0], k, None if lq == 0 else 2.0 ** (lq / 8.0))
            memo[key] = v
        return v

    def _profile_time(self, batch: float, k: int, seq_len: float | None) -> float:
        """The profile's step time; depths it does not cover are extrapolated from its deepest one."""
        model = self.model
        assert model is not None
        try:
            v = float(model.step_time_s(batch, k, seq_len))
            if v > 0.0 and math.isfinite(v):
                return v
        except Exception:
            pass
        for kk in range(k - 1, 0, -1):  # deepest depth it prices, plus one more draft+verify share per step
            try:
                v = float(model.step_time_s(batch, kk, seq_len))
                v1 = float(model.step_time_s(batch, kk - 1, seq_len))
            except Exception:
                continue
            if v > 0.0 and math.isfinite(v) and math.isfinite(v1):
                return v + (k - kk) * max(v - v1, 0.0)
        return 1.0

    def prior_ratio(self, i: int, j: int) -> float:
        if self.model is not None:
            return 1.0  # cells hold corrections to the profile; unknown ones default to "as the profile says"
        return (1.0 + PRIOR_STEP_COST * self.arms[i]) / (1.0 + PRIOR_STEP_COST * self.arms[j])

    def predict(self, b: int, seq_len: float | None, cur: int, timed: bool) -> tuple[list[float], bool]:
        """(time per depth index in bucket b, blind): blind when one depth is measured there and nothing
        lets the others be extrapolated from it (no profile, no neighbour that measured two)."""
        cells = self.cells
        n = len(self.arms)
        src = cells.nearest_measured(b) if timed else -1
        blind = False
        if src < 0:
            r = [self.prior_ratio(i, 0) for i in range(n)]
        else:
            wrow, rrow = cells.w[src], cells.r[src]
            if min(wrow) > 0.0:  # weights are never negative: every depth measured here
                r = rrow
            else:
                r = self._fill(src, wrow, rrow, cur)
                if src == b and self.model is None and sum([x > 0.0 for x in wrow]) == 1:
                    blind = cells.nearest_with(b, wrow.index(max(wrow))) < 0
        self.pred[b] = r
        if self.model is not None:
            if src >= 0:
                if not self.mismatch:
                    self._check(src)
                if self.prior_weight > 0.0 and not self.mismatch:
                    r = self.pred[b] = self._shrink(src, r)
                if src == b:
                    blind = self.unverified(b)
            rep = self.grid.rep[b]
            return [r[i] * self.base(rep, self.arms[i], seq_len, b) for i in range(n)], blind
        return r, blind

    def _shrink(self, b: int, r: list[float]) -> list[float]:
        """Bucket b's measured corrections pulled toward the profile's claim (the best measured cell's
        correction, clipped to 2x each cell's), with ``prior_weight`` pseudo-observations per cell."""
        wrow, mrow = self.cells.w[b], self.cells.m[b]
        ref, most = -1, 0
        for i, m in enumerate(mrow):
            if m > most and wrow[i] > 0.0:
                ref, most = i, m
        if ref < 0:
            return r
        p, w0 = r[ref], self.prior_weight
        out = list(r)
        for i, m in enumerate(mrow):
            if i != ref and m > 0 and wrow[i] > 0.0:
                x = r[i]
                claim = min(max(p, 0.5 * x), 2.0 * x)
                out[i] = (w0 * claim + m * x) / (w0 + m)
        return out

    def _check(self, b: int) -> None:
        """Declare the profile's shape wrong when two depths of bucket b, each measured over at least two
        steps (a run is already filtered for stray slow steps, single steps go through the median), disagree
        in their corrections by more than ``mismatch_ratio``."""
        cells = self.cells
        mrow, rrow, wrow = cells.m[b], cells.r[b], cells.w[b]
        lo, hi = math.inf, 0.0
        for i, m in enumerate(mrow):
            if m >= 2 and wrow[i] > 0.0:
                x = rrow[i]
                lo = min(lo, x)
                hi = max(hi, x)
        if hi > 0.0 and lo > 0.0 and hi > lo * self.mismatch_ratio:
            self.mismatch = hi / lo
            log.warning(
                "cost_model: the step-cost profile does not match the measured step times (depths differ "
                "from its shape by %.2fx at batch %d-%d); measurements override it from now on",
                self.mismatch,
                self.grid.lo[b],
                self.grid.hi[b],
            )

    def agrees(self, b: int) -> list[bool]:
        """Per depth index: with a profile and no mismatch, a measured cell of bucket b whose correction is
        within ``mismatch_ratio`` of the most measured one's (the profile's claim holds for it: one sample
        needs no confirmation)."""
        n = len(self.arms)
        if self.model is None or self.mismatch:
            return [False] * n
        r, m = self.cells.r[b], self.cells.m[b]
        ref = max(range(n), key=m.__getitem__)
        if m[ref] <= 0 or r[ref] <= 0.0:
            return [False] * n
        lo, hi = r[ref] / self.mismatch_ratio, r[ref] * self.mismatch_ratio
        return [m[i] > 0 and lo <= r[i] <= hi for i in range(n)]

    def unverified(self, b: int) -> bool:
        """With a profile: bucket b measured only off or only speculative depths, and no bucket near it
        measured both (the profile's ratio between the two is then untested)."""
        if self.arms[0] != 0:
            return False
        w = self.cells.w
        n = len(w)
        for d in range(5):
            for nb in (b - d, b + d) if d else (b,):
                if 0 <= nb < n:
                    row = w[nb]
                    if row[0] > 0.0 and any(x > 0.0 for x in row[1:]):
                        return False
        return True

    def _fill(self, src: int, wrow: list[float], rrow: list[float], cur: int) -> list[float]:
        """Times for a bucket with unmeasured depths. Two measured depths give the cost of one more depth (a
        least-squares line in k: each draft step plus a wider verify; with a profile, a line through the
        corrections, flat when the profile is right). With one, the nearest bucket that measured both gives
        the ratio; else the prior (with a profile: its shape, scaled by the one measured correction)."""
        n = len(rrow)
        arms = self.arms
        known = list(compress(range(n), map(_ZERO.__lt__, wrow)))  # measured depths (C-level loops)
        if len(known) >= 2:
            ks = list(map(arms.__getitem__, known))
            mk = sum(ks) / len(ks)
            mr = sum(map(rrow.__getitem__, known)) / len(known)
            sxx = sum([(k - mk) ** 2 for k in ks])
            slope = sum([(arms[i] - mk) * (rrow[i] - mr) for i in known]) / sxx if sxx > 0 else 0.0
            if self.model is None:  # verifying k+1 tokens costs at most k+1 times one token
                floor = min([rrow[i] / (arms[i] + 1) for i in known])
            else:  # corrections to the profile
                floor = 0.25 * min([rrow[i] for i in known])
            return [rrow[i] if wrow[i] > 0.0 else max(mr + slope * (arms[i] - mk), floor) for i in range(n)]
        ref = cur if cur >= 0 and wrow[cur] > 0.0 else known[0]
        nb = self.cells.nearest_with(src, ref)
        if nb >= 0:
            nw, nr = self.cells.w[nb], self.cells.r[nb]
            scale = rrow[ref] / nr[ref]
        out = []
        for i in range(n):
            if wrow[i] > 0.0:
                out.append(rrow[i])
            elif nb >= 0 and nw[i] > 0.0:
                out.append(nr[i] * scale)
            else:
                out.append(rrow[ref] * self.prior_ratio(i, ref))
        return out
