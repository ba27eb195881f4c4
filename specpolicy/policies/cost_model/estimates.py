"""cost_model's estimates of what the coming batch yields: the population's picture of acceptance, the batch
priced from its requests' own acceptance, and a look at a small batch's requests while off.
"""

from __future__ import annotations

from typing import Any

from .acceptance import lower_bound
from .base import LoopBase
from .requests import RequestAcceptance
from .state import REPRICE_GROWTH
from .weights import TwoPoint

__all__ = ["BATCH_SAMPLE", "TRANSITION_KNOWN", "TRANSITION_LONG", "Estimates"]

#: Tries behind an estimate from which the best acceptance seen takes it whole; below, at its lower bound.
#: 128 tries put a standard deviation at most 0.045 (at 0.5; 0.04 at 0.7), where the bound of a real level
#: on few hundred tries understates it by two (0.83 on 153 tries: 0.76), enough to keep speculation off
#: at one request after acceptance came back.
_HI_WHOLE = 128.0
#: The first step after a switch, relative to the next one (``outcomes``): above ``TRANSITION_LONG`` a probe
#: of a near tie runs ``probe_steps`` steps, so that the probe measures the depth and not the switch; so does
#: a depth's first measurement in a bucket while fewer than ``TRANSITION_KNOWN`` switches have been measured.
#: Engines where switching is free keep one-step probes once that is known (they cost less). Live, a policy
#: that began by assuming free switches took a one-step probe of off for off's cost (3.0 ms, its steady step
#: 2.27) and stayed on where off was 1.3x faster.
TRANSITION_LONG = 0.1
TRANSITION_KNOWN = 2
#: After a detected change in acceptance, the old counts keep this many requests' weight.
_CHANGE_KEEP = 4.0
#: Requests of the coming batch whose own acceptance is looked up (strided above): a batch this small is
#: priced request by request, when its requests change and then 1, 4, 16, 64 steps later (as their data
#: come in); a larger one mostly by the population (``requests``: the sample's weight is m/n), so it is
#: priced with its bucket's refresh, and only every 8th sampled step's outcomes are counted per request.
BATCH_SAMPLE = 8
#: A look while off (``_look_index``): the batch's rate scenarios (standard deviations of the estimate) and
#: their weights (the three-point Gauss-Hermite rule), and the steps a look's answer is counted to serve.
_LOOK_SHIFTS = (-(3.0**0.5), 0.0, 3.0**0.5)
_LOOK_WEIGHTS = (1.0 / 6.0, 2.0 / 3.0, 1.0 / 6.0)


class Estimates(LoopBase):
    __slots__ = ()

    def _price_batch(self, b: int, ids: Any, step: int) -> None:
        """The coming batch's expected tokens from its requests' own acceptance, and bucket b's choice
        with them (``requests``); a failure leaves the population's estimate in place."""
        try:
            n = len(ids)
            if n <= BATCH_SAMPLE:
                if ids.__class__ is not list:
                    ids = list(ids)
                if ids != self.s.batch_ids:
                    self.s.batch_ids = ids[:]
                    self.s.batch_gap = 1
                    self.s.look_after = 0
                    self.s.look_gap = REPRICE_GROWTH
                sample = ids
                self.s.batch_at = step + self.s.batch_gap
                if self.s.batch_gap < self.config.update_interval:
                    self.s.batch_gap *= REPRICE_GROWTH
            else:
                stride = -(-n // BATCH_SAMPLE)
                sample = ids[(step >> 6) % stride :: stride]
                self.s.batch_ids = None
                self.s.batch_at = step + self.config.update_interval
            self.s.reqs.fold(step)
            self.s.batch_sample, self.s.batch_n = sample, n
            e = self.s.expected = self._batch_expected(b)
            self.s.choice.update(b, e, self.s.choice.t[b], self.s.disabled)
            if n <= BATCH_SAMPLE and self._arms[self.s.cur] == 0 and step >= self.s.look_after:
                # Off teaches nothing about the batch's requests: one step at a speculating depth shows
                # them, when what it may reveal is worth the step (``_look_index``).
                look = self._look_index(b, sample)
                if look > 0:
                    self.s.look, self.s.look_i = step, look
                    self.s.look_after = step + self.s.look_gap
                    if self.s.look_gap < self.config.update_interval:
                        self.s.look_gap *= REPRICE_GROWTH
                    self.s.batch_at = min(self.s.batch_at, step + 2)  # priced again with its outcome
        except Exception:  # noqa: BLE001 - ids that are no ids: price by the population
            self.s.batch_at = step + self.config.update_interval
            self.s.reqs = RequestAcceptance(max(self._arms), self._arms)
            self.s.rq = self.s.reqs.pending
            self.s.batch_sample, self.s.batch_n = (), 0
            self._refresh_expected()

    def _batch_expected(self, b: int) -> list[float]:
        """Expected tokens per depth index of the batch last priced, each request's counted by what its
        tokens are worth (``weights``) with bucket b's reference depth: per step (``E_r(k) / E_r(ref)``
        over ``1 / E_r(ref)``) where the batch is priced request by request, as the throughput of holding
        the depth (``E_r(ref)`` over ``E_r(ref) / E_r(k)``) where it is priced as a population. Each sampled
        request counts at its own estimate (``requests``; one without data at the prior's mean, so that a
        new request gets speculated on, and so observed, as the population would be), the batch's other
        requests as the population's spread says."""
        arms = self._arms
        n = self.s.batch_n
        held = not 0 < n <= BATCH_SAMPLE
        ref = self._ref_index(b)
        key = 2 * ref + held
        pop = self.s.pop_sums.get(key)
        if pop is None:
            pop = self.s.pop_sums[key] = self._population_sums(ref, held)
        rows, total = pop
        if n:
            sample = self.s.batch_sample
            m = len(sample)
            own = self.s.reqs.own(sample, ref, self.s.step, held)
            rest = n - m
            prior = self.s.reqs.prior_expected
            new = m - (own[2] if own is not None else 0)
            p_ref = prior[ref]
            if held:
                total = rest * total + new * p_ref
                rows = [rest * x + new * p_ref / q for x, q in zip(rows, prior, strict=True)]
            else:
                total = rest * total + new / p_ref
                rows = [rest * x + new * q / p_ref for x, q in zip(rows, prior, strict=True)]
            if own is not None:
                total += own[1]
                rows = [x + o for x, o in zip(rows, own[0], strict=True)]
        e = [total / x for x in rows] if held else [x / total for x in rows]
        i = 0
        for k in arms:  # ratios of positive sums: in range but for rounding; keep it so
            x = e[i]
            if not 1.0 <= x <= 1.0 + k:
                e[i] = min(max(x, 1.0), 1.0 + k) if x == x else 1.0
            i += 1
        return e

    def _population_sums(self, ref: int, held: bool) -> tuple[list[float], float]:
        """The population's per-arm sums and weight for ``_batch_expected`` (``weights.TwoPoint``), scaled so
        that its plain expected tokens are the pooled estimate (exact for the population's mean; the
        two-point picture adds its spread)."""
        arms = self._arms
        rows, total = (self.s.pop.harmonic if held else self.s.pop.weighted)(arms, arms[ref])
        plain = self.s.pop.plain(arms)
        if held:
            return [x * q / e for x, e, q in zip(rows, self.s.expected_pop, plain, strict=True)], total
        return [x * e / q for x, e, q in zip(rows, self.s.expected_pop, plain, strict=True)], total

    def _look_index(self, b: int, sample: Any) -> int:
        """The depth index of a look at a small batch while off, or 0 when it is not worth its step.

        Each request's rate is an estimate (a new one's, the population's spread): the batch may be one that
        speculation pays for. The gain of speculating over off is priced in three scenarios of the batch's
        rate (``_LOOK_SHIFTS``) and its expectation counted over the steps until the batch is next priced
        at the latest (``update_interval``): a look that could turn speculation on for that long is worth
        the step it loses. It runs the depth that is best in the optimistic scenario (what it would switch
        to). A request whose estimate is firm, or a population where speculation rarely pays, gets none."""
        v = self.s.v[b]
        times = self.s.choice.t[b]
        if not v[0] > 0.0 or not times[0] > 0.0:
            return 0
        disabled = self.s.disabled
        rows = self.s.reqs.shifted(sample, _LOOK_SHIFTS)
        gain, look = 0.0, 0
        for w, e in zip(_LOOK_WEIGHTS, rows, strict=True):
            best, j = 0.0, 0
            for i in range(1, len(e)):
                t = times[i]
                if t > 0.0 and not disabled[i] and e[i] / t > best:
                    best, j = e[i] / t, i
            g = best * times[0] / e[0] - 1.0
            if g > 0.0:
                gain += w * g
            look = j
        if look <= 0:
            return 0
        loss = 1.0 - v[look] / v[0]
        return look if gain * self.config.update_interval > loss else 0

    def _ref_index(self, b: int) -> int:
        """The depth the requests typically run (weights' reference): bucket b's best speculating depth (the
        deepest of equals)."""
        n = len(self._arms)
        return max(range(n - 1, n - 1 - len(self.config.steps), -1), key=self.s.choice.v[b].__getitem__)

    def _refresh_expected(self) -> None:
        acc = self.s.acc
        self.s.expected_pop = acc.expected_tokens(self._arms)
        rates = acc.rates
        a2 = rates[2] if len(rates) > 2 else rates[1]
        self.s.pop = TwoPoint(
            rates[1], a2, acc.tries(2), [(rates[j], acc.tries(j)) for j in range(3, len(rates))]
        )
        self.s.pop_sums.clear()
        self.s.reqs.set_population(rates[1], a2)
        self.s.acc_version = acc.version
        if self.s.chg_on:  # the detector's expectations (off by default: nothing reads them then)
            self.s.chg.expect(acc.rates)
        a = acc.rates[1]
        if a > self.s.a_hi:  # only as far as its tries support it (a running maximum latches on noise)
            n = acc.tries(1)
            if n < _HI_WHOLE:
                a = lower_bound(a, n)
            if a > self.s.a_hi:
                self.s.a_hi = a

    def _changed(self) -> None:
        """Acceptance changed (a CUSUM alarm): forget most of the old counts and recompute now, then every
        few steps for a while, as the data since the change accumulate."""
        self.s.acc.forget(_CHANGE_KEEP)
        self.s.refresh_at = [0] * len(self.s.refresh_at)
        self.s.fast = 4

    def _switch_free(self) -> bool:
        """Whether switching depth is known to cost nothing: over ``TRANSITION_KNOWN`` switches, the first
        step after one took no longer than the next."""
        return self.s.transition_n >= TRANSITION_KNOWN and self.s.transition <= TRANSITION_LONG

    def _resume_unmeasured(self, b: int, i: int) -> bool:
        """Whether a probe of depth index i in bucket b resumes speculation from off while that depth has not
        been measured over a run there: its first step pays the drafter's catch-up (live: 1.5-2.8x a
        steady step), so the probe runs ``probe_steps`` steps, which measure the depth."""
        return (
            self._arms[i] > 0
            and self.s.cur >= 0
            and self._arms[self.s.cur] == 0
            and not self.s.run_measured[b][i]
            and not self._switch_free()
        )
