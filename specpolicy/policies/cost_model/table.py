"""Learned step cost for ``cost_model``: one decaying estimate per (batch-size bucket, depth).

Step time depends on the batch size smoothly but not simply (flat while memory-bound, then linear once the
verify of k+1 tokens per request becomes compute-bound), so it is not fitted to a formula: batch sizes are
grouped into geometric buckets (exact up to 4, then ``per_octave`` per doubling) and each bucket keeps, per
depth, an exponentially forgetting mean of the measured times. Measurements are divided by a *base* before
averaging: the prior profile's prediction for that exact batch size, depth and context when a profile is
given (so the cell learns a correction factor, ~1, and the profile carries the shape), else a square-root
batch-size shape that removes most of the spread inside a bucket. Only ratios between depths within a
bucket drive decisions, so the base never biases a choice.

Robustness: step times have one-sided outliers (the first decode step after a prefill or a warm-up, a prefill
that joined a step, a GC pause: 5-10x slower, never faster). A cell's first samples set its estimate
directly (the first, then the smaller of two, then the median of three), so one slow sample cannot become
the reference that later, normal samples are clipped against; after that, a single-step sample (a probe)
enters the mean as the median of itself and the cell's two previous samples (an isolated outlier is dropped;
a real change shows one probe later; a mean over several steps is already robust, the policy leaves stray
slow steps out of it) and every sample is clipped to ``clip`` times the current estimate. Forgetting is by
steps elapsed, so a rarely probed depth's cell follows its latest probes while the running depth's cell
averages many steps. A jump is not left to the forgetting: a run of steps far from a well-measured cell
(``CHANGE_RATIO``) restarts the bucket (a short-against-long window test), and so does a single sample that
far faster than a well-measured cell: outliers are slow, so a fast step shows the depth's cost, and the
estimate it contradicts is stale (a slowdown that has ended).
"""

from __future__ import annotations

import math

__all__ = ["MAX_BATCH", "BucketGrid", "CostCells"]

#: Batch sizes above this share the last bucket.
MAX_BATCH = 4096
#: A run of at least CHANGE_RUN steps (stray slow steps already left out) whose mean differs from a
#: well-measured cell's estimate by more than CHANGE_RATIO, or any sample CHANGE_RATIO faster, is a change in
#: cost, not noise: its bucket's cells start over (the other depths' costs there are as stale as this one's).
CHANGE_RUN = 4
CHANGE_RATIO = 1.5
#: A cell's count of measured steps saturates here.
_MAX_STEPS = 1 << 30


class BucketGrid:
    """Batch size -> bucket index (consecutive, non-empty) and the bucket's representative batch size."""

    __slots__ = ("index", "rep", "lo", "hi", "limit")

    def __init__(self, per_octave: int, limit: int = MAX_BATCH) -> None:
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


class CostCells:
    """Per bucket and depth index: normalised time ``r``, its decayed weight ``w`` and last sample step."""

    __slots__ = ("n_arms", "r", "w", "last", "has", "n", "m", "s1", "s2", "_decay", "clip")

    def __init__(self, n_buckets: int, n_arms: int, halflife: float, clip: float = 2.0) -> None:
        self.n_arms = n_arms
        self.r: list[list[float]] = [[0.0] * n_arms for _ in range(n_buckets)]
        self.w: list[list[float]] = [[0.0] * n_arms for _ in range(n_buckets)]
        self.last: list[list[int]] = [[-(10**9)] * n_arms for _ in range(n_buckets)]
        #: per bucket: any depth measured.
        self.has = [False] * n_buckets
        #: per cell: samples taken (not decayed), and the previous two samples (the median filter's window).
        self.n: list[list[int]] = [[0] * n_arms for _ in range(n_buckets)]
        #: per cell: steps measured (not decayed, saturating): the evidence a profile's pseudo-counts face.
        self.m: list[list[int]] = [[0] * n_arms for _ in range(n_buckets)]
        self.s1: list[list[float]] = [[0.0] * n_arms for _ in range(n_buckets)]
        self.s2: list[list[float]] = [[0.0] * n_arms for _ in range(n_buckets)]
        self._decay = math.log(2.0) / halflife
        self.clip = clip

    def add(self, b: int, i: int, x: float, step: int, count: int = 1) -> bool:
        """``count`` steps of bucket b, depth index i, whose mean measurement divided by its base is ``x``;
        True when it shows a change in cost (``CHANGE_RATIO``: the bucket then starts over from it)."""
        changed = fresh = False
        n = self.n[b][i]
        if n:
            r = self.r[b][i]
            # Slow outliers are one-sided: a sample far faster than the estimate is the depth's cost, and the
            # estimate is stale (a slowdown that ended). Against a well-measured cell it is a change, as a
            # run far off either way is; against one or two samples (cold ones, or a switch's) it replaces
            # them.
            if x * CHANGE_RATIO < r:
                if n >= 3:
                    self.forget(b)
                    changed = True
                else:
                    fresh = True
            elif count >= CHANGE_RUN and n >= 3 and x > r * CHANGE_RATIO:
                self.forget(b)
                changed = True
        self.has[b] = True
        w_row, r_row, last_row, n_row = self.w[b], self.r[b], self.last[b], self.n[b]
        n = n_row[i]
        p1, p2 = self.s1[b][i], self.s2[b][i]
        self.s2[b][i] = p1
        self.s1[b][i] = x
        if n < 3:
            n_row[i] = n + 1
        m_row = self.m[b]
        if m_row[i] < _MAX_STEPS:
            m_row[i] += count
        w = w_row[i]
        if w > 0.0:
            age = step - last_row[i]
            if age > 0:
                w *= math.exp(-self._decay * age)
        if n == 0 or w <= 0.0 or fresh:
            r_row[i] = x
            if fresh:  # the samples before are replaced (the median filter's window included)
                self.s2[b][i] = x
        elif n == 1:  # the smaller of two: outliers are slow ones, and optimism gets re-measured
            r_row[i] = min(p1, x)
        elif n == 2:
            r_row[i] = _median3(p1, p2, x)
        else:
            if count == 1:  # a single step (a probe): the median with the two before drops a stray one
                x = _median3(p1, p2, x)
            r = r_row[i]
            if w >= 0.5:
                c = self.clip
                if x > r * c:
                    x = r * c
                elif x * c < r:
                    x = r / c
            r_row[i] = r + (x - r) * count / (w + count)
        w_row[i] = w + count
        if step > last_row[i]:
            last_row[i] = step
        return changed

    def forget(self, b: int) -> None:
        """Bucket b's cells start over: unmeasured, to be measured again (the costs there changed)."""
        n_arms = self.n_arms
        self.r[b] = [0.0] * n_arms
        self.w[b] = [0.0] * n_arms
        self.n[b] = [0] * n_arms
        self.m[b] = [0] * n_arms
        self.s1[b] = [0.0] * n_arms
        self.s2[b] = [0.0] * n_arms
        self.has[b] = False

    def nearest_with(self, b: int, i: int, search: int = 4) -> int:
        """The closest other bucket (within ``search``) that measured depth index ``i`` and more, or -1."""
        w, r, n = self.w, self.r, len(self.w)
        for d in range(1, search + 1):
            for nb in (b - d, b + d):
                if 0 <= nb < n and w[nb][i] > 0.0 and r[nb][i] > 0.0 and _two_positive(w[nb]):
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


def _two_positive(row: list[float]) -> bool:
    """More than one weight in ``row`` is positive (a bucket that measured two depths or more)."""
    seen = False
    for x in row:
        if x > 0.0:
            if seen:
                return True
            seen = True
    return False


def _median3(a: float, b: float, c: float) -> float:
    if a > b:
        a, b = b, a
    return a if c < a else (b if c > b else c)
