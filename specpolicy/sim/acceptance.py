"""How many drafts each request accepts: per-request probabilities, chained acceptance, common random numbers.

Every request draws a per-token acceptance probability ``p`` when it is created: from Beta(7, 3) by default
(mean 0.7), or from a mixture of Betas with weights (a population of easy and hard requests). Draft ``i`` is
accepted with probability ``p`` given drafts ``1..i-1`` were, so a k-deep chain accepts ``min(k, G)`` drafts
where ``P(G >= i) = p**i``. Phases in which traffic gets easier or harder move
every request's probability by the same shift in logit space, chosen so that the population mean hits the
phase's target: each request keeps its rank (an easy request stays easier than a hard one) while the mean
changes.

The uniform behind ``G`` is a hash of (seed, request id, output position), not a draw from a stream. Two
policies simulated on the same workload therefore see the same luck for the same request at the same point of
its output, whatever depths they chose before: comparisons between policies carry far less noise.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "AcceptanceModel",
    "BetaAcceptance",
    "BetaMixture",
    "accepted_drafts",
    "expected_tokens",
    "hash_uniform",
    "logit",
    "logit_shift_for_mean",
    "shifted",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_EPS = 1e-9
_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


class AcceptanceModel(Protocol):
    """Where each request's per-token acceptance comes from (a Beta or a mixture of Betas)."""

    @property
    def mean(self) -> float: ...

    def draw(self, rng: np.random.Generator, n: int) -> FloatArray: ...

    def shift_for_mean(self, target_mean: float) -> float: ...

    def describe(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class BetaAcceptance:
    """Per-request acceptance probabilities drawn from Beta(alpha, beta). Reference: Beta(7, 3), mean 0.7."""

    alpha: float = 7.0
    beta: float = 3.0

    def __post_init__(self) -> None:
        for field, value in (("alpha", self.alpha), ("beta", self.beta)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"acceptance.{field} must be a finite number > 0, got {value!r}")

    @classmethod
    def from_mean(cls, mean: float, concentration: float = 10.0) -> BetaAcceptance:
        """The Beta with this mean and ``alpha + beta = concentration`` (the reference's is 10): a higher
        concentration puts the requests closer to the mean."""
        if not (math.isfinite(mean) and 0.0 < mean < 1.0):
            raise ValueError(f"acceptance.mean must be in (0, 1), got {mean!r}")
        if not (math.isfinite(concentration) and concentration > 0):
            raise ValueError(f"acceptance.concentration must be a finite number > 0, got {concentration!r}")
        return cls(mean * concentration, (1.0 - mean) * concentration)

    @property
    def mean(self) -> float:
        return self.alpha / (self.alpha + self.beta)

    def draw(self, rng: np.random.Generator, n: int) -> FloatArray:
        return np.asarray(rng.beta(self.alpha, self.beta, size=n), dtype=np.float64)

    def shift_for_mean(self, target_mean: float) -> float:
        return logit_shift_for_mean(self.alpha, self.beta, target_mean)

    def describe(self) -> str:
        return f"Beta({self.alpha:g}, {self.beta:g}), mean {self.mean:.3g}"

    def to_json(self) -> dict[str, Any]:
        return {"alpha": round(self.alpha, 6), "beta": round(self.beta, 6), "mean": round(self.mean, 6)}


@dataclass(frozen=True)
class BetaMixture:
    """A population of request classes: each request belongs to component i with probability ``weights[i]``
    and draws its acceptance from that component's Beta. Weights are relative (normalised to sum to 1)."""

    components: tuple[tuple[float, BetaAcceptance], ...]

    def __post_init__(self) -> None:
        if not self.components:
            raise ValueError("acceptance mixture: needs at least one component")
        for i, (w, comp) in enumerate(self.components):
            if not (isinstance(w, (int, float)) and math.isfinite(w) and w > 0):
                raise ValueError(
                    f"acceptance component {i + 1}: weight must be a finite number > 0, got {w!r}"
                )
            if not isinstance(comp, BetaAcceptance):
                raise ValueError(f"acceptance component {i + 1}: expected a BetaAcceptance, got {comp!r}")

    @property
    def weights(self) -> tuple[float, ...]:
        total = math.fsum(w for w, _ in self.components)
        return tuple(w / total for w, _ in self.components)

    @property
    def mean(self) -> float:
        return math.fsum(w * c.mean for w, (_, c) in zip(self.weights, self.components, strict=True))

    def draw(self, rng: np.random.Generator, n: int) -> FloatArray:
        # Every component draws n values first, then a uniform per request picks its component: the first
        # component's values are the plain Beta's, so a one-component mixture draws what its Beta draws.
        values = [c.draw(rng, n) for _, c in self.components]
        cum = np.cumsum(self.weights)
        label = np.minimum(np.searchsorted(cum, rng.random(n), side="right"), len(values) - 1)
        return np.asarray(np.choose(label, values), dtype=np.float64)

    def shift_for_mean(self, target_mean: float) -> float:
        comps = tuple((w, c.alpha, c.beta) for w, (_, c) in zip(self.weights, self.components, strict=True))
        return _logit_shift(comps, target_mean)

    def describe(self) -> str:
        pairs = zip(self.weights, self.components, strict=True)
        parts = [f"{w:.3g} x Beta({c.alpha:g}, {c.beta:g})" for w, (_, c) in pairs]
        return f"mixture {' + '.join(parts)}, mean {self.mean:.3g}"

    def to_json(self) -> dict[str, Any]:
        return {
            "mixture": [
                {"weight": round(w, 6), **c.to_json()}
                for w, (_, c) in zip(self.weights, self.components, strict=True)
            ],
            "mean": round(self.mean, 6),
        }


def logit(p: FloatArray) -> FloatArray:
    q = np.clip(p, _EPS, 1.0 - _EPS)
    return np.asarray(np.log(q) - np.log1p(-q), dtype=np.float64)


def shifted(logit_p: FloatArray, shift: float) -> FloatArray:
    """Probabilities after moving every request by ``shift`` in logit space (0 = unchanged)."""
    return np.asarray(1.0 / (1.0 + np.exp(-(logit_p + shift))), dtype=np.float64)


def logit_shift_for_mean(alpha: float, beta: float, target_mean: float) -> float:
    """The logit shift moving Beta(alpha, beta)'s population mean to ``target_mean`` (by quadrature)."""
    return _logit_shift(((1.0, alpha, beta),), target_mean)


@functools.lru_cache(maxsize=256)
def _logit_shift(components: tuple[tuple[float, float, float], ...], target_mean: float) -> float:
    """The logit shift moving a mixture of (weight, alpha, beta) Betas to ``target_mean``, by bisection on
    the shift over a weighted set of points standing for the population (``_points``)."""
    if not 0.0 < target_mean < 1.0:
        raise ValueError(f"acceptance mean must be in (0, 1), got {target_mean!r}")
    parts = [_points(alpha, beta) for _, alpha, beta in components]
    # The weights sum to 1 already (one component: its points' weights, unchanged).
    w = np.concatenate([weight * pw for (weight, _, _), (_, pw) in zip(components, parts, strict=True)])
    lx = logit(np.concatenate([x for x, _ in parts]))
    lo, hi = -30.0, 30.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if float(np.dot(w, shifted(lx, mid))) < target_mean:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _points(alpha: float, beta: float) -> tuple[FloatArray, FloatArray]:
    """Points and weights (summing to 1) for one Beta. A bounded density (alpha, beta >= 1): the midpoint
    rule on a fine grid, weighted by the density. A density that is infinite at 0 or 1, which the grid
    cannot resolve: 100,000 draws from a fixed seed, equally weighted."""
    if alpha >= 1.0 and beta >= 1.0:
        x = (np.arange(4000, dtype=np.float64) + 0.5) / 4000.0
        logw = (alpha - 1.0) * np.log(x) + (beta - 1.0) * np.log1p(-x)
        d = np.exp(logw - logw.max())
        return x, d / d.sum()
    x = np.asarray(np.random.default_rng(0xACCE).beta(alpha, beta, size=100_000), dtype=np.float64)
    return x, np.full(len(x), 1.0 / len(x))


def hash_uniform(seed: int, request_ids: IntArray, positions: IntArray) -> FloatArray:
    """Uniforms in (0, 1), a pure function of (seed, request id, position): splitmix64 over the three."""
    with np.errstate(over="ignore"):
        x = request_ids.astype(np.uint64) * _M1
        x ^= positions.astype(np.uint64) * _M2
        x ^= np.uint64((seed * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF)
        x ^= x >> _S30
        x *= _M2
        x ^= x >> _S27
        x *= _M3
        x ^= x >> _S31
    return np.asarray(((x >> _S11).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0), dtype=np.float64)


def accepted_drafts(p: FloatArray, num_steps: int, u: FloatArray) -> IntArray:
    """Accepted drafts of a ``num_steps``-deep chain: ``min(k, G)``, ``P(G >= i) = p**i``, G from ``u``."""
    q = np.clip(p, _EPS, 1.0 - _EPS)
    g = np.floor(np.log(u) / np.log(q))
    return np.minimum(g, float(num_steps)).astype(np.int64)


def expected_tokens(p: FloatArray, remaining: IntArray, max_steps: int) -> FloatArray:
    """Expected tokens per depth k = 0..max_steps, summed over requests, with each request's output clipped.

    A request with ``r`` tokens left emits ``min(1 + min(k, G), r)`` tokens, whose mean is
    ``sum_{i=0}^{min(k, r-1)} p**i``. Returns an array of length ``max_steps + 1``.
    """
    i = np.arange(max_steps + 1, dtype=np.float64)
    powers = np.power(p[:, None], i[None, :])
    powers[i[None, :] >= remaining[:, None]] = 0.0
    return np.asarray(np.cumsum(powers.sum(axis=0)), dtype=np.float64)
