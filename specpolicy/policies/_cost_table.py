"""Learned step cost for ``cost_model``: one decaying estimate per (batch-size bucket, depth).

Step time depends on the batch size smoothly but not simply (flat while memory-bound, then linear once the
verify of k+1 tokens per request becomes compute-bound), so it is not fitted to a formula: batch sizes are
grouped into geometric buckets (exact up to 4, then ``per_octave`` per doubling) and each bucket keeps, per
depth, an exponentially forgetting mean of the measured times. Measurements are divided by a *base* before
averaging: the prior profile's prediction for that exact batch size, depth and context when a profile is
given (so the cell learns a correction factor, ~1, and the profile carries the shape), else a square-root
batch-size shape that removes most of the spread inside a bucket. Only ratios between depths within a
bucket drive decisions, so the base never biases a choice.

Robustness: a sample more than ``clip`` times away from the cell's current estimate is clipped (a prefill
that joined a step, a GC pause), and forgetting is by steps elapsed, so a rarely probed depth's cell follows
its latest probes while the running depth's cell averages many steps.
"""

from __future__ import annotations

import math

__all__ = ["BucketGrid", "CostCells"]


class BucketGrid:
    """Batch size -> bucket index (consecutive, non-empty) and the bucket's representative batch size."""

    __slots__ = ("index", "rep", "lo", "hi", "limit")

    def __init__(self, per_octave: int, limit: int = 4096) -> None:
        ids: list[int] = [0]
        lo: list[int] = []
        hi: list[int] = []
        raw_prev = None
        for b in range(1, limit + 1):
            raw = b if b <= 4 else 4 + math.ceil(per_octave * math.log2(b / 4.0) - 1e-9)
            if raw != raw_prev:
                lo.append(b)
                hi.append(b)
                raw_prev = raw
            else:
                hi[-1] = b
            ids.append(len(lo) - 1)
        ids[0] = 0  # batch 0 (nothing to decode) shares the first bucket
        self.index: tuple[int, ...] = tuple(ids)
        self.lo = tuple(lo)
        self.hi = tuple(hi)
        self.rep: tuple[float, ...] = tuple(math.sqrt(a * b) for a, b in zip(lo, hi, strict=True))
        self.limit = limit

    def __len__(self) -> int:
        return len(self.lo)

    def of(self, batch_size: int) -> int:
        if batch_size <= self.limit:
            return self.index[batch_size] if batch_size > 0 else 0
        return len(self.lo) - 1


class CostCells:
    """Per bucket and depth index: normalised time ``r``, its decayed weight ``w`` and last sample step."""

    __slots__ = ("n_arms", "r", "w", "last", "has", "_decay", "clip")

    def __init__(self, n_buckets: int, n_arms: int, halflife: float, clip: float = 2.0) -> None:
        self.n_arms = n_arms
        self.r: list[list[float]] = [[0.0] * n_arms for _ in range(n_buckets)]
        self.w: list[list[float]] = [[0.0] * n_arms for _ in range(n_buckets)]
        self.last: list[list[int]] = [[-(10**9)] * n_arms for _ in range(n_buckets)]
        #: per bucket: any depth measured.
        self.has = [False] * n_buckets
        self._decay = math.log(2.0) / halflife
        self.clip = clip

    def add(self, b: int, i: int, x: float, step: int, count: int = 1) -> None:
        """``count`` steps of bucket b, depth index i, whose mean measurement divided by its base is ``x``."""
        self.has[b] = True
        w_row, r_row, last_row = self.w[b], self.r[b], self.last[b]
        w = w_row[i]
        if w > 0.0:
            age = step - last_row[i]
            if age > 0:
                w *= math.exp(-self._decay * age)
            r = r_row[i]
            if w >= 0.5:
                c = self.clip
                if x > r * c:
                    x = r * c
                elif x * c < r:
                    x = r / c
            w += count
            r_row[i] = r + (x - r) * count / w
        else:
            w = float(count)
            r_row[i] = x
        w_row[i] = w
        if step > last_row[i]:
            last_row[i] = step

    def measured(self, b: int, i: int) -> bool:
        return self.w[b][i] > 0.0

    def nearest_with(self, b: int, i: int, search: int = 4) -> int:
        """The closest other bucket (within ``search``) that measured depth index ``i`` and more, or -1."""
        w, n = self.w, len(self.w)
        for d in range(1, search + 1):
            for nb in (b - d, b + d):
                if 0 <= nb < n and w[nb][i] > 0.0 and self.r[nb][i] > 0.0 and sum(x > 0.0 for x in w[nb]) > 1:
                    return nb
        return -1

    def nearest_measured(self, b: int, search: int = 64) -> int:
        """The closest bucket (b itself first) with any measured depth, or -1."""
        has = self.has
        if has[b]:
            return b
        n = len(has)
        for d in range(1, search + 1):
            if b - d >= 0 and has[b - d]:
                return b - d
            if b + d < n and has[b + d]:
                return b + d
        return -1
