"""Per-position draft acceptance for ``cost_model``: a_j = P(draft j accepted | drafts 1..j-1 accepted).

A step that drafted k tokens tells, for every request, how many of them were accepted (n). Request r tried
position j when its first j-1 drafts were accepted and it proposed a j-th one; it succeeded when n >= j. The
counts are kept per position with exponential forgetting, so the estimate follows the traffic, and each
position is shrunk toward the position before it (toward ``prior`` for the first): a depth never run yet
inherits the acceptance of the depths that were, and a handful of requests cannot swing the estimate.

Expected tokens per request and step at depth k (the bonus token counted) is then
``E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j``: pooling requests per position makes this exact for the batch
even when requests differ (it equals 1 + sum_i mean_r p_r^i for per-request rates p_r).

The hot path only appends raw bytes (``add``): the counting runs in C (``bytes.count``) when the policy folds
the buffers in, every few steps.
"""

from __future__ import annotations

import math
from itertools import compress

from ...mode import MAX_NUM_STEPS

__all__ = ["AcceptanceEstimator", "lower_bound"]
#: A step reported only as a mean acceptance counts as this many requests (it hides the spread per position).
MEAN_WEIGHT = 4.0
#: Standard deviations below the estimate that ``lower_bound`` takes (one-sided, about 98%).
BOUND_Z = 2.0


def lower_bound(rate: float, tries: float, z: float = BOUND_Z) -> float:
    """The Wilson score lower bound of an acceptance ``rate`` measured on ``tries`` attempts: the least rate
    that the data still support at ``z`` standard deviations. Wilson's, not the normal approximation's,
    because the rates that matter are near 1 on few tries (8 of 8 accepted: 0.67 at z=2, where
    rate - z sd gives 1.0). Decayed counts are a conservative sample size (weights <= 1: the effective
    size (sum w)^2 / sum w^2 is at least sum w)."""
    if not tries > 0.0:
        return 0.0
    z2 = z * z
    spread = z * math.sqrt(max(tries * rate * (1.0 - rate), 0.0) + 0.25 * z2)
    return max((tries * rate + 0.5 * z2 - spread) / (tries + z2), 0.0)


class AcceptanceEstimator:
    """Decaying per-position success/attempt counts with a chained shrinkage prior."""

    __slots__ = (
        "max_pos",
        "prior",
        "prior_weight",
        "_decay_data",
        "_decay_idle",
        "_succ",
        "_tries",
        "bufs",
        "full_bufs",
        "means",
        "data_steps",
        "rates",
        "version",
    )

    def __init__(
        self, max_pos: int, prior: float, halflife: float, idle_halflife: float, prior_weight: float = 2.0
    ) -> None:
        self.max_pos = max_pos
        self.prior = prior
        self.prior_weight = prior_weight
        self._decay_data = 0.5 ** (1.0 / halflife)
        self._decay_idle = 0.5 ** (1.0 / idle_halflife)
        self._succ = [0.0] * (max_pos + 1)
        self._tries = [0.0] * (max_pos + 1)
        #: per depth (index), raw accepted counts (one byte per sampled request) not yet folded in.
        self.bufs: list[bytearray] = [bytearray() for _ in range(MAX_NUM_STEPS + 1)]
        #: depth -> drafts proposed by requests that accepted all of them but proposed fewer than depth (the
        #: engine trimmed their drafts): they tried positions 1..d only, and succeeded at each.
        self.full_bufs: dict[int, bytearray] = {}
        #: (depth, mean accepted drafts) of steps that reported only the mean.
        self.means: list[tuple[int, float]] = []
        #: steps that contributed to ``bufs`` since the last fold.
        self.data_steps = 0
        #: a_1..a_max_pos at index 1..max_pos (index 0 unused, 1.0).
        self.rates: list[float] = [1.0] + [prior] * max_pos
        #: bumped whenever ``rates`` changes, so callers can cache what they derive from it.
        self.version = 0
        self._recompute()

    def forget(self, weight: float) -> None:
        """Keep at most ``weight`` requests' worth of the folded counts (a detected change: what came before
        it says little about what comes after), in the same proportions per position."""
        tries = self._tries[1]
        if tries > weight > 0.0:
            f = weight / tries
            succ, tr = self._succ, self._tries
            for j in range(1, self.max_pos + 1):
                succ[j] *= f
                tr[j] *= f

    def tries(self, position: int) -> float:
        """Attempts (decayed) behind the rate of ``position`` (0.0 beyond the positions kept)."""
        return self._tries[position] if 0 < position <= self.max_pos else 0.0

    def add(self, depth: int, counts: bytes) -> None:
        """Queue one step's accepted-draft counts (one byte per request, 0..depth; others are ignored)."""
        self.bufs[depth] += counts
        self.data_steps += 1

    def add_full(self, depth: int, drafted: bytes) -> None:
        """Queue requests of a depth ``depth`` step that accepted all their ``drafted`` (< depth) drafts."""
        buf = self.full_bufs.get(depth)
        if buf is None:
            self.full_bufs[depth] = bytearray(drafted)
        else:
            buf += drafted

    def add_mean(self, depth: int, mean: float) -> None:
        """Queue a step known only by its mean accepted drafts per request."""
        self.means.append((depth, mean))

    def fold(self, elapsed_steps: int) -> None:
        """Fold the queued counts in, forgetting older ones; ``elapsed_steps`` since the previous fold."""
        data = min(self.data_steps, max(elapsed_steps, 0))
        idle = max(elapsed_steps, 0) - data
        decay = self._decay_data**data * self._decay_idle**idle
        if decay == 1.0 and not self.data_steps and not self.full_bufs and not self.means:
            return
        succ, tries = self._succ, self._tries
        for j in range(1, self.max_pos + 1):
            succ[j] *= decay
            tries[j] *= decay
        full = self.full_bufs
        bufs = self.bufs
        for depth in set(compress(range(len(bufs)), bufs)).union(full):
            buf = bufs[depth]
            self._count(depth, bytes(buf), bytes(full.get(depth, b"")))
            del buf[:]  # keep the buffer object: the policy's hot path appends to it in place
        full.clear()
        for depth, mean in self.means:
            self._count_mean(depth, mean)
        self.means.clear()
        self.data_steps = 0
        self._recompute()

    def _count(self, depth: int, buf: bytes, full: bytes) -> None:
        if depth <= 0 or not (buf or full):
            return
        top = min(depth, self.max_pos)
        # at_least[m]: requests that accepted >= m drafts (values > depth are invalid and ignored).
        at_least = [0] * (depth + 2)
        if buf:
            for m in range(depth, -1, -1):
                at_least[m] = at_least[m + 1] + buf.count(m)
        # full_at_least[m]: trimmed requests that proposed (and accepted) >= m drafts.
        full_at_least = [0] * (depth + 2)
        if full:
            for m in range(depth - 1, 0, -1):
                full_at_least[m] = full_at_least[m + 1] + full.count(m)
        succ, tries = self._succ, self._tries
        for j in range(1, top + 1):
            # tried position j: accepted j-1 before it (and, if trimmed, proposed a j-th draft).
            succ[j] += at_least[j] + full_at_least[j]
            tries[j] += at_least[j - 1] + full_at_least[j]

    def _count_mean(self, depth: int, mean: float, weight: float = MEAN_WEIGHT) -> None:
        """A mean m of accepted drafts at depth k, read as ``weight`` requests accepting each draft with the
        per-token rate a that solves a + a^2 + ... + a^k = m (the chain of i.i.d. drafts)."""
        lo, hi = 0.0, 1.0
        for _ in range(30):
            a = 0.5 * (lo + hi)
            total, p = 0.0, 1.0
            for _ in range(depth):
                p *= a
                total += p
            if total < mean:
                lo = a
            else:
                hi = a
        a = 0.5 * (lo + hi)
        succ, tries = self._succ, self._tries
        p = 1.0
        for j in range(1, min(depth, self.max_pos) + 1):
            tries[j] += weight * p
            p *= a
            succ[j] += weight * p

    def _recompute(self) -> None:
        rates = self.rates
        w = self.prior_weight
        prev = self.prior
        succ, tries = self._succ, self._tries
        for j in range(1, self.max_pos + 1):
            a = (succ[j] + w * prev) / (tries[j] + w)
            if not 0.0 <= a <= 1.0 or math.isnan(a):  # cannot happen with valid counts; stay safe
                a = prev
            rates[j] = a
            prev = a
        self.version += 1

    def expected_tokens(self, depths: list[int] | tuple[int, ...]) -> list[float]:
        """E(k) for each depth in ``depths`` (each <= max_pos): expected tokens per request per step, bonus
        token included."""
        rates = self.rates
        cum = [1.0]  # cum[k] = E(k)
        total = surv = 1.0
        for j in range(1, self.max_pos + 1):
            surv *= rates[j]
            total += surv
            cum.append(total)
        return [cum[k] for k in depths]
