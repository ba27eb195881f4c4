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
``TwoPoint`` is a two-point picture with the pooled estimate's first two moments (E p = a_1, E p^2 = a_1 a_2:
a request accepts its second draft with probability p^2) and the shape the deeper positions measure (the
Beta's where they measure nothing): exact for E(k) at every depth when the population is two kinds of
requests, and a fair picture of one.
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
    mixed population's a_2 on 5,000 attempts, and the held value of deep depths was priced too high).

    Given those two moments, a two-point picture has one free parameter, its shape (the sum of its rates,
    or its third moment). The Beta with the two moments gives one; ``deeper`` (rate and attempts of positions
    3, 4, ...) measures it (``_shape``). A Beta is a poor picture of two kinds of requests: for half 0.9 /
    half 0.2 behind depth 5 it put the easy kind at 0.75 instead of 0.92, its tokens at depth 7 10% under
    the measured ones, and the policy, which rescales the picture to the measured tokens per depth, then
    gave the deep depths' excess to every request alike, overpricing a deep depth held across the batch
    (``moe-verify-heavy`` at 256 requests ran depth 5 at 0.984x static-4).
    """

    __slots__ = ("nodes", "weights", "_arms", "_tokens", "_plain")

    #: standard errors of a_2 that its excess over a_1 must clear to count as spread
    Z = 3.0

    def __init__(
        self, a1: float, a2: float, tries_2: float, deeper: Sequence[tuple[float, float]] = ()
    ) -> None:
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
        # The two-point Gauss rule of the Beta (``_nodes``), reshaped by what the deeper positions measure.
        s = (m3 - m1 * m2) / var
        nodes = _nodes(s, m1, m2)
        if deeper and nodes is not None:
            nodes = _nodes(_shape(s, m1, m2, m3, var, deeper), m1, m2) or nodes
        if nodes is None:
            return
        lo, hi = nodes
        w_lo = (hi - m1) / (hi - lo)
        self.nodes = nodes
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


def _nodes(s: float, m1: float, m2: float) -> tuple[float, float] | None:
    """The two rates with sum s, mean m1 and second moment m2: the roots of x^2 - s x + p, p = s m1 - m2
    (orthogonal to 1 and x under the moments); None unless they straddle m1 inside (0, 1)."""
    p = s * m1 - m2
    disc = s * s - 4.0 * p
    if not disc > 0.0:
        return None
    root = math.sqrt(disc)
    lo, hi = max((s - root) / 2.0, _EDGE), min((s + root) / 2.0, 1.0 - _EDGE)
    return (lo, hi) if lo < m1 < hi else None


def _shape(
    s0: float, m1: float, m2: float, m3: float, var: float, deeper: Sequence[tuple[float, float]]
) -> float:
    """The sum of a two-point picture's nodes, given its mean and second moment, from the deeper positions'
    rates. A two-point population's moments follow m_{j+2} = s m_{j+1} - p m_j with p = s m_1 - m_2, so
    m_{j+2} - m_2 m_j = s (m_{j+1} - m_1 m_j) for every j >= 1: weighted least squares over the positions
    measured (each by its attempts), with the Beta's s as a prior worth one attempt at position 3."""
    mj, mj1 = m1, m2  # m_j, m_{j+1}
    a3 = m3 / m2
    w0 = var * var / (m2 * m2 * a3 * (1.0 - a3))  # the prior: one attempt at position 3
    num = w0 * s0
    den = w0
    for a, tries in deeper:
        mj2 = mj1 * a
        if not mj2 > _EDGE:
            break  # (what is left is noise on nothing)
        if tries > 0.0 and a < 1.0 - _EDGE:
            u = mj1 - m1 * mj
            w = tries / (a * (1.0 - a) * mj1 * mj1)  # 1 / variance of m_{j+2}'s newest factor
            num += w * u * (mj2 - m2 * mj)
            den += w * u * u
        mj, mj1 = mj1, mj2
    if den == w0:
        return s0  # nothing measured deeper: the Beta's shape
    s = num / den
    lo, hi = m2 / m1, (1.0 - m2) / (1.0 - m1)  # a node at 0, a node at 1
    return min(max(s, lo + 1e-6 * (hi - lo)), hi - 1e-6 * (hi - lo))
