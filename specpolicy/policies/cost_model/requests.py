"""Acceptance per request for ``cost_model``: how well each request of the coming batch drafts.

The pooled per-position estimate (``acceptance``) is right for the population but not for one batch: with
easy and hard requests mixed, a batch of one, or of a few, is far from the population's mean. So each
request r has a per-token rate p_r with a Beta prior fitted to the population by its first two moments
(E p = a_1 and E p^2 = a_1 a_2 from the pooled per-position rates: a request accepts its second draft with
probability p^2), updated by the request's own outcomes: a step at depth k that accepted n drafts is n
successes and, when n < k, one failure. Once enough requests have data the prior is fitted to their own
rates instead (``_from_requests``): the requests running and those that finished last, kept apart so that
with few requests running the prior still describes many. A request's expected tokens at depth k are
``1 + sum_{i<=k} E[p^i]``, where a Beta(a, b) has ``E[p^i] = prod_{m<i} (a + m) / (a + b + m)``.

The batch's (weighted, ``weights``) expected tokens are the population's, moved by what its requests' own
data say: ``X_batch = X_pop + (1/n) sum_r (X_r - X_pop)`` over the sampled requests of the batch with data
(a request without data adds nothing: a batch of new requests gets the population estimate). With every
request in the sample this is the batch mean; with a sample of m of n,
dividing by n rather than m is the shrinkage with the least error (the sample mean's variance is the
population's over m, and the batch mean's distance from the population's has variance over n).

Memory is bounded: at most ``capacity`` requests are kept; one not seen for ``horizon`` steps has finished
and is forgotten, and when more are live than fit the oldest is evicted (both counted). A request's counts
are scaled down past ``window`` trials, so its estimate follows its own drift.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from itertools import islice
from typing import Any

__all__ = ["RequestAcceptance", "fit_population"]

#: Bounds of the prior's concentration (a + b, the draft trials it counts for): below, a population
#: estimate this spread says nothing stable; the cap keeps a request's own few steps of data (a step at
#: depth k is up to k + 1 trials) able to outweigh a population that only looks alike (with few requests
#: running, the population estimates describe the last one or two).
_MIN_CONCENTRATION = 0.5
_MAX_CONCENTRATION = 20.0
_EDGE = 1e-6
#: The prior is fitted to the requests seen last, this many at most, once at least _MIN_REQUESTS have data.
_FIT_REQUESTS = 64
_MIN_REQUESTS = 8
_FIT_SCAN = 2 * _FIT_REQUESTS
#: The requests' fit is redone every this many population updates (it looks at up to _FIT_SCAN requests).
_REFIT_EVERY = 4


class RequestAcceptance:
    """Per-request success/failure counts with a Beta prior fitted to the population."""

    __slots__ = (
        "max_pos",
        "capacity",
        "horizon",
        "window",
        "forgotten",
        "evicted",
        "_req",
        "pending",
        "_alpha",
        "_beta",
        "_arms",
        "_prior_e",
        "_version",
        "_swept",
        "_fits",
        "_fitted",
        "_done",
    )

    def __init__(
        self,
        max_pos: int,
        arms: Sequence[int],
        *,
        capacity: int = 4096,
        horizon: int = 1024,
        window: float = 64.0,
    ) -> None:
        self.max_pos = max_pos
        self.capacity = capacity
        self.horizon = horizon
        self.window = window
        #: requests forgotten after ``horizon`` steps unseen, and evicted while possibly still live.
        self.forgotten = 0
        self.evicted = 0
        #: id -> [successes, failures, last step seen, deviations per depth (or None), their version]
        self._req: dict[Hashable, list[Any]] = {}
        #: (depth, ids, accepted counts) of sampled outcomes not yet counted (``queue`` appends; the policy's
        #: hot path appends to the list itself).
        self.pending: list[tuple[int, Sequence[Hashable], bytes]] = []
        self._arms = tuple(arms)
        self._version = 0
        self._swept = 0
        self._fits = 0
        self._fitted: tuple[float, float] | None = None
        #: (successes, failures) of the requests forgotten or evicted last, newest at the right: the
        #: population's history, which outlives ``horizon`` (at a batch of one, a few requests).
        self._done: deque[tuple[float, float]] = deque(maxlen=_FIT_REQUESTS)
        self._alpha = self._beta = 1.0
        self._prior_e: list[float] = []
        self.set_population(0.7, 0.7)

    def __len__(self) -> int:
        return len(self._req)

    # -- the population ---------------------------------------------------------------------------------
    def set_population(self, a1: float, a2: float) -> None:
        """The prior: from the requests' own rates when enough requests have data (``_from_requests``),
        else from the pooled first- and second-position rates (a_1, a_2)."""
        self._fits += 1
        if self._fits >= _REFIT_EVERY or self._fitted is None:  # the requests' picture moves slowly
            self._fits = 0
            self._fitted = self._from_requests()
        fitted = self._fitted
        if fitted is None:
            m1 = min(max(a1, _EDGE), 1.0 - _EDGE)
            m2 = m1 * min(max(a2, 0.0), 1.0)
            var = m2 - m1 * m1
            c = (m1 - m2) / var if var > 1e-12 else _MAX_CONCENTRATION
        else:
            m1, c = fitted
        c = min(max(c, _MIN_CONCENTRATION), _MAX_CONCENTRATION)
        alpha, beta = m1 * c, (1.0 - m1) * c
        if alpha == self._alpha and beta == self._beta and self._prior_e:
            return  # the same prior (between refits of the requests' fit): every posterior still holds
        self._alpha, self._beta = alpha, beta
        self._prior_e = self._expected(alpha, beta)
        self._version += 1

    def _from_requests(self) -> tuple[float, float] | None:
        """(mean, concentration) of the per-draft rates of the ``_FIT_REQUESTS`` requests seen last (running
        or finished): the population a new request comes from. (The pooled rates count steps, so with few
        requests running they describe the last one or two, not the population.) None with fewer than
        ``_MIN_REQUESTS``. See ``fit_population``."""
        counts: list[tuple[float, float]] = []
        for e in islice(reversed(self._req.values()), _FIT_SCAN):  # the newest requests, a bounded look
            if e[0] + e[1] > 0.0:
                counts.append((e[0], e[1]))
                if len(counts) >= _FIT_REQUESTS:
                    break
        if len(counts) < _FIT_REQUESTS:
            counts.extend(islice(reversed(self._done), _FIT_REQUESTS - len(counts)))
        if len(counts) < _MIN_REQUESTS:
            return None
        return fit_population(counts, self._fitted[1] if self._fitted else _MAX_CONCENTRATION)

    def _expected(self, a: float, b: float) -> list[float]:
        """E(k) per arm of a request whose rate is Beta(a, b)."""
        c = a + b
        cum = [1.0]
        total = p = 1.0
        for m in range(self.max_pos):
            p *= (a + m) / (c + m)
            total += p
            cum.append(total)
        return [cum[k] for k in self._arms]

    # -- learning ---------------------------------------------------------------------------------------
    def queue(self, depth: int, ids: Sequence[Hashable], counts: bytes) -> None:
        """Queue one step's sampled outcomes: accepted drafts ``counts[i]`` of request ``ids[i]``."""
        self.pending.append((depth, ids, counts))

    def fold(self, step: int) -> None:
        """Count the queued outcomes; every ``horizon`` steps forget the requests not seen since."""
        if self.pending:
            req, cap, window = self._req, self.capacity, self.window
            get = req.get
            for depth, ids, counts in self.pending:
                for rid, n in zip(ids, counts, strict=False):
                    e = get(rid)
                    if e is None:
                        if n > depth:
                            continue  # not a count of this step
                        if len(req) >= cap:  # the oldest entry goes (dicts keep insertion order)
                            first = req.pop(next(iter(req)))
                            self._done.append((first[0], first[1]))
                            self.evicted += 1
                        e = req[rid] = [0.0, 0.0, step, None, 0]
                    elif n > depth:
                        continue
                    s = e[0] + n
                    f = e[1] + 1.0 if n < depth else e[1]
                    total = s + f
                    if total > window:
                        scale = window / total
                        s *= scale
                        f *= scale
                    e[0] = s
                    e[1] = f
                    e[2] = step
                    e[3] = None
            self.pending.clear()
        if step - self._swept >= self.horizon:
            self._swept = step
            old = step - self.horizon
            gone = [rid for rid, e in self._req.items() if e[2] < old]
            done = self._done
            for rid in gone:
                entry = self._req.pop(rid)
                done.append((entry[0], entry[1]))
            self.forgotten += len(gone)

    # -- estimates --------------------------------------------------------------------------------------
    def estimate(self, rid: Hashable) -> float:
        """The posterior mean per-token acceptance of request ``rid`` (the population's when never seen)."""
        e = self._req.get(rid)
        s, f = (0.0, 0.0) if e is None else (e[0], e[1])
        return (self._alpha + s) / (self._alpha + self._beta + s + f)

    @property
    def prior_expected(self) -> list[float]:
        """E(k) per arm of a request without data (the prior's)."""
        return self._prior_e

    def expected(self, rid: Hashable) -> list[float]:
        """E(k) per arm of request ``rid`` (the prior's when never seen)."""
        e = self._req.get(rid)
        if e is None:
            return list(self._prior_e)
        return self._expected(self._alpha + e[0], self._beta + e[1])

    def shifted(self, ids: Sequence[Hashable], shifts: Sequence[float]) -> list[list[float]]:
        """Per shift t: the mean over ``ids`` of E_r(k) per arm, each request's rate moved by t standard
        deviations of its own estimate (a new request's: the prior's) over sqrt(len(ids)) (the batch's mean
        rate is that uncertain when the requests are independent): what the batch gives if the requests are
        that much better or worse than estimated (``policy``: is a look worth its step)."""
        req, a0, b0 = self._req, self._alpha, self._beta
        scale = 1.0 / len(ids) ** 0.5 if ids else 1.0
        out = [[0.0] * len(self._arms) for _ in shifts]
        for rid in ids:
            e = req.get(rid)
            a, b = (a0, b0) if e is None else (a0 + e[0], b0 + e[1])
            c = a + b
            m = a / c
            sd = (m * (1.0 - m) / (c + 1.0)) ** 0.5 * scale
            for row, t in zip(out, shifts, strict=True):
                x = min(max(m + t * sd, _EDGE), 1.0 - _EDGE)
                for i, v in enumerate(self._expected(x * c, (1.0 - x) * c)):
                    row[i] += v
        n = max(len(ids), 1)
        return [[v / n for v in row] for row in out]

    def own(
        self, ids: Sequence[Hashable], ref: int, step: int, harmonic: bool
    ) -> tuple[list[float], float, int] | None:
        """What the requests of ``ids`` with data of their own say (``ref`` an index into the arms: the
        reference depth, ``weights``): with ``harmonic``, per arm the sum over them of ``E_r(ref) / E_r(k)``
        and the sum of ``E_r(ref)``; else per arm the sum of ``E_r(k) / E_r(ref)`` and the sum of
        ``1 / E_r(ref)``; and how many they are. None when none of them has data: a batch of new requests
        is priced as the population."""
        req, version = self._req, self._version
        per_arm: list[float] | None = None
        total = 0.0
        count = 0
        for rid in ids:
            e = req.get(rid)
            if e is None:
                continue
            e[2] = step  # in the batch: not finished, even while no outcome names it
            post = e[3]
            if post is None or e[4] != version:
                post = e[3] = self._expected(self._alpha + e[0], self._beta + e[1])
                e[4] = version
            x_ref = post[ref]
            w = x_ref if harmonic else 1.0 / x_ref
            row = [x_ref / x for x in post] if harmonic else [w * x for x in post]
            per_arm = row if per_arm is None else [a + x for a, x in zip(per_arm, row, strict=True)]
            total += w
            count += 1
        return None if per_arm is None else (per_arm, total, count)


def fit_population(counts: Sequence[tuple[float, float]], c: float) -> tuple[float, float]:
    """(mean, concentration) of the Beta behind requests' (successes, failures), by weighted moments.

    A request's rate s / n says more the more trials n it rests on, up to the spread between requests:
    each counts with weight n / (1 + (n - 1) / (c + 1)) (the inverse of its rate's variance under a Beta of
    concentration c; Kleinman's beta-binomial weights), so one with a single trial counts little and the
    pooled ratio, consistent whatever stopped each request's drafts, dominates among short ones; one with
    many counts once. Each request's own sampling noise is taken out of the spread. ``c`` is the starting
    guess; two passes refine it.
    """
    m = 0.5
    for _ in range(2):
        rho = 1.0 / (c + 1.0)
        ws = [(n / (1.0 + (n - 1.0) * rho), s / n, n) for s, f in counts if (n := s + f) > 0.0]
        total = sum([w for w, _, _ in ws])
        if not total > 0.0:
            break
        m = sum([w * x for w, x, _ in ws]) / total
        m = min(max(m, _EDGE), 1.0 - _EDGE)
        spread = sum([w * (x - m) ** 2 for w, x, _ in ws])
        own = sum([w * (1.0 - 1.0 / n) for w, _, n in ws])
        noise = m * (1.0 - m) * sum([w / n for w, _, n in ws])
        var = (spread * len(ws) / max(len(ws) - 1, 1) - noise) / own if own > 0.0 else 0.0
        c = m * (1.0 - m) / var - 1.0 if var > 1e-9 else _MAX_CONCENTRATION
        c = min(max(c, _MIN_CONCENTRATION), _MAX_CONCENTRATION)
    return m, c
