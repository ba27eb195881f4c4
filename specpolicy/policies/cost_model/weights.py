"""What a token is worth, per request: cost_model's objective when requests differ in acceptance.

Tokens per second of one step (``E(k) / T(k)``) is the right objective when every request drafts alike. When
they differ it is not: a depth that pays for the easy requests finishes them sooner, and the batch is left
with hard ones; what a run serves is its requests, each of which holds a slot (and its user waits) for its
whole output. Over a run at depth k, request r takes ``L_r T(k) / E_r(k)`` seconds, so the run's throughput
(closed loop) and its mean time per output token (open loop) both follow the *harmonic* mean of E_r(k),
not the arithmetic one. Per step, the same comes out as a weight: a token of request r frees ``1 / rate_r``
of slot time, so tokens count with weight ``w_r = 1 / E_r(k_ref)`` at the depth ``k_ref`` the requests
typically run; maximising ``sum_r w_r E_r(k) / sum_r w_r / T(k)`` per step is maximising the harmonic
throughput of the run to first order around k_ref. That is right for a batch of a few known requests, whose
depth is chosen again as they change. A depth held across many requests (a batch priced as a population)
changes the batch's mix, and the first order overrates every depth away from k_ref (the easy requests a
deeper depth speeds up leave the batch sooner): at 16 requests of half 0.9 / half 0.2 the running depth
wandered between 3 and 7 where 3 was best. For it the exact throughput of holding depth k is used: the batch
holds request r in proportion to its population share over its rate (Little's law), so the population
behind it is the batch weighted by ``E_r(k_ref)``, served at ``sum_r E_r(k_ref) / sum_r E_r(k_ref) /
E_r(k)`` tokens per step (``TwoPoint.harmonic``). When requests are alike both are the plain objective.

For the population (requests without data of their own) the weights need its spread, not only its mean:
``TwoPoint`` is the two-point Gauss rule for the Beta with the pooled estimate's first two moments (E p =
a_1, E p^2 = a_1 a_2: a request accepts its second draft with probability p^2), exact for E(k) at k <= 3
and a fair picture of one population or of two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["TwoPoint", "chain_tokens"]

_EDGE = 1e-6


def chain_tokens(p: float, k: int) -> float:
    """Expected tokens of one request at depth k with per-draft acceptance p: 1 + p + ... + p^k."""
    if p >= 1.0 - _EDGE:
        return 1.0 + k
    return (1.0 - p ** (k + 1)) / (1.0 - p)


class TwoPoint:
    """Per-draft acceptance of the population as two rates with weights (or one, when they agree).

    From the pooled first- and second-position rates: a_2 above a_1 is the spread (any mixture of rates has
    a_2 >= a_1), counted only where it exceeds the noise of a_2 (``Z`` standard errors of ``tries_2``
    attempts), so that chance does not make alike requests look different, and then shrunk by its squared
    noise share (the garrote: unbiased as the excess grows; subtracting the whole noise took 0.018 off a
    mixed population's a_2 on 5,000 attempts, and the held value of deep depths was priced too high). The
    third moment is that of the Beta with these two (what a_3 adds is noisier still, and a Beta's fits one
    population or two).
    """

    __slots__ = ("nodes", "weights", "_arms", "_tokens", "_plain")

    #: standard errors of a_2 that its excess over a_1 must clear to count as spread
    Z = 3.0

    def __init__(self, a1: float, a2: float, tries_2: float) -> None:
        m1 = min(max(a1, _EDGE), 1.0 - _EDGE)
        #: chain_tokens per node and arm, and plain(), for the arms last asked about (``_table``)
        self._arms: Sequence[int] | None = None
        self._tokens: list[list[float]] = []
        self._plain: list[float] = []
        self.nodes: tuple[float, ...] = (m1,)
        self.weights: tuple[float, ...] = (1.0,)
        a2 = min(max(a2, 0.0), 1.0 - _EDGE)
        noise = self.Z * math.sqrt(a2 * (1.0 - a2) / tries_2) if tries_2 > 0.0 else 1.0
        excess = a2 - m1
        if not excess > noise:
            return
        a2 = m1 + excess * (1.0 - (noise / excess) ** 2)  # the garrote: unbiased as the excess grows
        if not a2 > m1:
            return
        # Beta(alpha, beta) with a_1 = alpha / c and a_2 = (alpha + 1) / (c + 1): c = (1 - a_2) / (a_2 - a_1).
        c = (1.0 - a2) / (a2 - m1)
        alpha = m1 * c
        m2 = m1 * a2
        m3 = m2 * (alpha + 2.0) / (c + 2.0)
        var = m2 - m1 * m1
        # Roots of x^2 + c1 x + c0, orthogonal to 1 and x under the moments: the two-point Gauss rule.
        c1 = (m1 * m2 - m3) / var
        c0 = -m2 - c1 * m1
        disc = c1 * c1 - 4.0 * c0
        if not disc > 0.0:
            return
        root = math.sqrt(disc)
        lo, hi = max((-c1 - root) / 2.0, _EDGE), min((-c1 + root) / 2.0, 1.0 - _EDGE)
        if not lo < m1 < hi:
            return
        w_lo = (hi - m1) / (hi - lo)
        self.nodes = (lo, hi)
        self.weights = (w_lo, 1.0 - w_lo)

    def _table(self, arms: Sequence[int]) -> list[list[float]]:
        """chain_tokens(p, k) per node p and arm k, computed once per picture (it is priced every step
        the batch is, for a few reference depths)."""
        if arms is not self._arms:
            top = 1.0 - _EDGE  # chain_tokens, inline: 1 + p + ... + p^k
            self._tokens = [
                [1.0 + k if p >= top else (1.0 - p ** (k + 1)) / (1.0 - p) for k in arms] for p in self.nodes
            ]
            self._plain = [
                sum([w * row[i] for w, row in zip(self.weights, self._tokens, strict=True)])
                for i in range(len(arms))
            ]
            self._arms = arms
        return self._tokens

    def weighted(self, arms: Sequence[int], ref: int) -> tuple[list[float], float]:
        """(per arm: E[E(k) / E(ref)], and E[1 / E(ref)]) over the population: the weighted tokens and the
        weight of an average request, at reference depth ``ref``."""
        n = len(arms)
        num = [0.0] * n
        den = 0.0
        for p, w, row in zip(self.nodes, self.weights, self._table(arms), strict=True):
            wr = w / chain_tokens(p, ref)
            den += wr
            for i in range(n):
                num[i] += wr * row[i]
        return num, den

    def harmonic(self, arms: Sequence[int], ref: int) -> tuple[list[float], float]:
        """(per arm: E[E(ref) / E(k)], and E[E(ref)]) over the population: the sums behind the throughput
        of holding depth k when the batch has been running ``ref`` (the module's docstring)."""
        n = len(arms)
        per_arm = [0.0] * n
        total = 0.0
        for p, w, row in zip(self.nodes, self.weights, self._table(arms), strict=True):
            x_ref = chain_tokens(p, ref)
            total += w * x_ref
            for i in range(n):
                per_arm[i] += w * x_ref / row[i]
        return per_arm, total

    def plain(self, arms: Sequence[int]) -> list[float]:
        """E(k) per arm under the two-point distribution (exact at k <= 3)."""
        self._table(arms)
        return self._plain
