"""cost_model's policy: the per-step loop that ties the estimates, the choice and the probe schedule together.

Per step it takes the outcome of the last step whose result is known (``_take_outcome``: a strided sample of
at most ``_SAMPLE_CAP`` requests' accepted counts, appended as bytes, and the step time, added to the run of
steps with the same batch size and depth; the stats name that step's batch size, decided depth and context
length, so nothing is inferred), then decides for the coming step: its bucket's best depth, switched to
under the margin and dwell rules, or a due probe. Every ``update_interval`` steps per bucket it folds the
queued data in (counting in C) and recomputes that bucket. Anything malformed in the stats is missing data.
No RNG: the same inputs give the same outputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...mode import MAX_NUM_STEPS, SpecMode
from ...profiles import StepCostModel
from ...stats import StepStats, clean_count, clean_float, clean_sequence
from .acceptance import AcceptanceEstimator, lower_bound
from .change import ChangeDetector
from .choice import BIG_GAIN, Choice
from .config import CostModelConfig
from .costs import StepCosts, context_length
from .probes import ProbeSchedule
from .requests import RequestAcceptance
from .table import MAX_BATCH, BucketGrid
from .weights import TwoPoint

__all__ = ["CostModelPolicy"]

#: Tries behind an estimate from which the best acceptance seen takes it whole; below, at its lower bound.
#: 128 tries put a standard deviation at most 0.045 (at 0.5; 0.04 at 0.7), where the bound of a real level
#: on few hundred tries understates it by two (0.83 on 153 tries: 0.76), enough to keep speculation off
#: at one request after acceptance came back.
_HI_WHOLE = 128.0
#: Requests per step whose accepted counts are sampled (strided, rotating offset): enough for the
#: per-position estimate, bounded so decide() does not grow with the batch.
_SAMPLE_CAP = 8
#: While off (no acceptance data), acceptance forgets this many times more slowly.
_IDLE_FORGET = 8.0
#: Times the engine must run a shallower depth than decided before that depth is given up.
_CLAMP_VOTES = 4
#: Within a run of steps at the same batch size and depth, a step this many times slower than the run's mean
#: is left out of the mean (slow outliers are one-sided and depth-independent: ratios stay right).
_AGG_OUTLIER = 3.0
#: The first step after a switch, relative to the next one (a mean of the first samples, then an EWMA with
#: this weight per sample): above ``_TRANSITION_LONG`` a probe of a near tie runs ``probe_steps`` steps, so
#: that the probe measures the depth and not the switch; so does a depth's first measurement in a bucket
#: while fewer than ``_TRANSITION_KNOWN`` switches have been measured. Engines where switching is free keep
#: one-step probes once that is known (they cost less). Live, a policy that began by assuming free switches
#: took a one-step probe of off for off's cost (3.0 ms, its steady step 2.27) and stayed on where off was
#: 1.3x faster.
_TRANSITION_WEIGHT = 0.25
_TRANSITION_LONG = 0.1
_TRANSITION_KNOWN = 2
#: The first run of two steps or more measured at a depth replaces the single steps before it when they put
#: the depth this many times dearer: they were cold (an engine's first steps of a kind) or paid a switch
#: (live: a speculative step after off steps pays the drafter's catch-up, 1.5-2.8x a steady one). Where
#: single steps agree with runs (the simulator's), the cell's filter keeps them.
_RUN_REPLACES = 1.5
#: After a detected change in acceptance, the old counts keep this many requests' weight.
_CHANGE_KEEP = 4.0
#: CUSUM slack (standard deviations per request): smaller shifts are drift, left to the forgetting.
_CHANGE_SLACK = 0.5
#: Requests of the coming batch whose own acceptance is looked up (strided above): a batch this small is
#: priced request by request, when its requests change and then 1, 4, 16, 64 steps later (as their data
#: come in); a larger one mostly by the population (``requests``: the sample's weight is m/n), so it is
#: priced with its bucket's refresh, and only every 8th sampled step's outcomes are counted per request.
_BATCH_SAMPLE = 8
_REPRICE_GROWTH = 4
#: A look while off (``_look_index``): the batch's rate scenarios (standard deviations of the estimate) and
#: their weights (the three-point Gauss-Hermite rule), and the steps a look's answer is counted to serve.
_LOOK_SHIFTS = (-(3.0**0.5), 0.0, 3.0**0.5)
_LOOK_WEIGHTS = (1.0 / 6.0, 2.0 / 3.0, 1.0 / 6.0)
_NEVER = -(10**9)


def _as_list(value: object) -> list[Any] | None:
    """A per-request field that is not a list, as one (numpy arrays, tuples), or None when it is none."""
    seq = clean_sequence(value)
    if seq is None:
        return None
    try:
        return list(seq)
    except Exception:  # noqa: BLE001 - an array that cannot be iterated
        return None


_GRIDS: dict[int, BucketGrid] = {}


def _grid(per_octave: int) -> BucketGrid:
    g = _GRIDS.get(per_octave)
    if g is None:
        g = _GRIDS[per_octave] = BucketGrid(per_octave)
    return g


def _transition_weight(n: int) -> float:
    """The weight of the n-th measured transition: their plain mean until ``_TRANSITION_WEIGHT`` takes over
    as an EWMA's."""
    return _TRANSITION_WEIGHT if n * _TRANSITION_WEIGHT >= 1.0 else 1.0 / n


class CostModelPolicy:
    """Goodput-maximising depth choice with an online step-cost model (docs/cost-model.md)."""

    __slots__ = (
        "config",
        "cost_model",
        # fixed by the config
        "_arms",
        "_idx",
        "_modes",
        "_grid",
        "_index",
        "_top",
        "_margin1",
        "_dwell",
        "_probe_steps",
        # the parts (reset() makes new ones; the lists decide() reads every step are aliased here)
        "_acc",
        "_bufs",
        "_reqs",
        "_rq",
        "_E_pop",
        "_pop",
        "_pop_sums",
        "_batch_sample",
        "_batch_n",
        "_batch_ids",
        "_look",
        "_look_i",
        "_look_after",
        "_look_gap",
        "_batch_at",
        "_batch_gap",
        "_chg",
        "_chg_on",
        "_k_prev",
        "_fast",
        "_a_hi",
        "_costs",
        "_choice",
        "_best",
        "_v",
        "_probes",
        "_run_measured",
        "_visits",
        "_probe_at",
        # the loop's own state
        "_step",
        "_cur",
        "_last_batch",
        "_last_k",
        "_switched",
        "_last_t",
        "_timed",
        "_refresh_at",
        "_E",
        "_acc_version",
        "_acc_steps",
        "_acc_folded",
        "_pending",
        "_agg_batch",
        "_agg_k",
        "_agg_len",
        "_agg_t",
        "_agg_n",
        "_agg_step",
        "_agg_switch",
        "_transition",
        "_transition_n",
        "_resume",
        "_resume_n",
        "_probe_left",
        "_probe_run",
        "_audit_watch",
        "_clamp_votes",
        "_disabled",
        "_disabled_at",
    )

    def __init__(self, config: CostModelConfig, cost_model: StepCostModel | None = None) -> None:
        self.config = config
        self.cost_model = cost_model
        self._arms = config.candidate_steps()
        idx = [-1] * (MAX_NUM_STEPS + 1)
        for i, k in enumerate(self._arms):
            idx[k] = i
        self._idx = idx
        self._modes = tuple(SpecMode.of(k) for k in self._arms)
        self._grid = _grid(config.buckets_per_octave)
        self._margin1 = 1.0 + config.switch_margin
        self._dwell = config.min_dwell_steps
        self._probe_steps = config.probe_steps
        self._index = self._grid.index
        self._top = len(self._grid) - 1
        self.reset()

    # -- state ---------------------------------------------------------------------------------------------
    def reset(self) -> None:
        c = self.config
        n_b, n_a = len(self._grid), len(self._arms)
        self._step = 0
        self._acc = AcceptanceEstimator(
            max(self._arms), c.prior_acceptance, c.acceptance_halflife, c.acceptance_halflife * _IDLE_FORGET
        )
        self._bufs = self._acc.bufs
        self._reqs = RequestAcceptance(max(self._arms), self._arms)
        self._rq = self._reqs.pending  # the hot path appends each step's sampled outcomes here
        #: the requests of the batch last priced (a copy of a small batch's ids), the step from which it is
        #: priced again whatever, and the interval to that step (doubling while the batch stays).
        self._batch_ids: list[Any] | None = None
        self._batch_at = 0
        self._batch_gap = 1
        #: the sampled ids and the size of the batch last priced (none: priced as the population)
        self._batch_sample: Any = ()
        self._batch_n = 0
        #: the step of a look at the batch's requests while off, and its depth index (``_price_batch``)
        self._look = 0
        self._look_i = 0
        #: no look before this step, and the interval to the next after a look (growing while the batch stays)
        self._look_after = 0
        self._look_gap = _REPRICE_GROWTH
        #: the population's two-point picture, and its sums per reference depth index and form (cached)
        self._pop = TwoPoint(c.prior_acceptance, c.prior_acceptance, 0.0)
        self._pop_sums: dict[int, tuple[list[float], float]] = {}
        self._chg_on = c.change_threshold is not None
        threshold = math.inf if c.change_threshold is None else c.change_threshold
        self._chg = ChangeDetector(self._arms, _CHANGE_SLACK, threshold)
        self._k_prev = -1
        #: the next refresh interval after a detected change (doubling up to update_interval).
        self._fast = c.update_interval
        #: the best per-draft acceptance seen, with confidence: what a probe while off hopes to find again.
        #: A running maximum of the estimate takes its luckiest moment (8 lucky requests on the first step:
        #: 0.94 for a measured 0.70), so an estimate on fewer than ``_HI_WHOLE`` tries counts at its
        #: ``lower_bound``: a few requests cannot raise it, a well-measured level does, whole. Taking the
        #: estimate whole once its bound clears the best seen (a test, not a bound) latches on noise too,
        #: one level up: 0.89 on ~40 tries for a true 0.81.
        self._a_hi = c.prior_acceptance
        self._acc_steps = 0
        self._acc_folded = 0
        self._timed = False
        self._acc_version = -1
        self._E = [1.0] * n_a
        self._E_pop = self._E
        self._costs = StepCosts(
            self._grid, self._arms, c.cost_halflife, self.cost_model, c.prior_weight, c.prior_mismatch_ratio
        )
        #: measured runs (batch, depth, context, mean time, steps, first step) waiting to be folded in, and
        #: the run being measured: consecutive steps with the same batch size and depth.
        self._pending: list[tuple[int, int, float | None, float, int, int]] = []
        self._agg_batch = -1
        self._agg_k = -1
        self._agg_len: float | None = None
        self._agg_t = 0.0
        self._agg_n = 0
        self._agg_step = 0
        #: the run began at a change of depth (2: from off into speculation, a resume): its first step is a
        #: transition (discarded once a second step shows the depth's own time)
        self._agg_switch = 0
        #: how much longer the first step after a switch is than the next (relative, an EWMA)
        self._transition = 0.0
        #: switches whose transition was measured (a run after a switch reached its second step)
        self._transition_n = 0
        #: the same for the switches from off into speculation alone (the drafter's catch-up), and their count
        self._resume = 0.0
        self._resume_n = 0
        #: steps left of the probe being run, and its depth index
        self._probe_left = 0
        self._probe_run = 0
        #: an audit being priced: [its depth, its steps, the running depth's steady step time, the sum of its
        #: step times so far, its steps seen, other outcomes seen before them] (``_watch_audit``)
        self._audit_watch: list[float] | None = None
        self._choice = Choice(n_b, n_a, c.switch_margin)
        self._best, self._v = self._choice.best, self._choice.v
        self._probes = ProbeSchedule(n_b, n_a, c.probe_budget, c.max_probe_interval, c.max_probe_share)
        #: per bucket and depth index: measured over a run of two steps or more. Single steps are guesses:
        #: an engine's first steps of a kind run cold, and one step after a switch pays for the switch
        #: (``_fold_times``).
        self._run_measured: list[list[bool]] = [[False] * n_a for _ in range(n_b)]
        self._visits, self._probe_at = self._probes.visits, self._probes.probe_at
        #: per depth index: the engine ran something shallower when this depth was decided (votes), and
        #: depths given up on for that reason.
        self._clamp_votes = [0] * n_a
        self._disabled = [False] * n_a
        self._disabled_at = _NEVER
        self._refresh_at = [0] * n_b
        self._cur = -1
        #: the latest decision's batch size (for a malformed one, and the estimates) and depth
        self._last_batch = 1
        self._last_k = -1
        self._switched = _NEVER
        self._last_t: object = None
        self._refresh_expected()
        self._cur = self._prior_best()

    # -- the hot path ---------------------------------------------------------------------------------------
    def decide(self, stats: StepStats) -> SpecMode:
        try:
            step = self._step = self._step + 1
            # Each field is read once here, at the boundary: anything but a well-formed value is converted
            # (numpy numbers, 0-d tensors) or becomes missing, so nothing malformed reaches the state.
            batch = stats[0]
            if batch.__class__ is not int or batch < 0 or batch > MAX_BATCH:
                batch = self._odd_batch(batch)
                b = self._index[batch] if batch <= MAX_BATCH else self._top
            else:
                b = self._index[batch]
            self._take_outcome(step, batch, stats)
            self._last_batch = batch
            visits = self._visits
            vis = visits[b] = visits[b] + 1
            if step >= self._refresh_at[b]:
                try:
                    self._refresh(b, context_length(stats[2]))
                except Exception:  # never retry the same failure every step: drop the queued data
                    self._pending.clear()
                    self._refresh_at[b] = step + self.config.update_interval
            ids = stats[12]  # request_ids
            if ids is not None and (
                step >= self._batch_at
                or (  # a small batch is priced when its requests change (the batch size gates it)
                    batch <= _BATCH_SAMPLE
                    and ids.__class__ is list
                    and len(ids) <= _BATCH_SAMPLE
                    and ids != self._batch_ids
                )
            ):
                self._price_batch(b, ids, step)
            cur = self._cur
            best = self._best[b]
            if best != cur:
                v = self._v[b]
                if v[best] > v[cur] * self._margin1 and (
                    step - self._switched >= self._dwell or v[best] > v[cur] * BIG_GAIN
                ):
                    cur = self._cur = best
                    self._switched = step
            if self._probe_left:  # a probe runs for probe_steps steps
                self._probe_left -= 1
                cur = self._probe_run
            elif vis >= self._probe_at[b]:
                probes = self._probes
                pi = probes.probe_i[b]
                n_probe = (
                    self._probe_steps
                    if (
                        probes.long[b]
                        and (
                            self._transition > _TRANSITION_LONG
                            or (  # a first measurement, before switches were seen to be free
                                self._transition_n < _TRANSITION_KNOWN and self._costs.cells.m[b][pi] == 0
                            )
                        )
                    )
                    or self._resume_unmeasured(b, pi)
                    else 1
                )
                audit = probes.audit[b]
                timed = audit and not probes.alarm[b] >> pi & 1  # an ordinary audit, not an alarm's
                probe = probes.take(b, vis, step, n_probe)
                if probe >= 0:
                    if timed and self._agg_n and self._agg_k == self._arms[cur]:
                        # its cost is measured: its steps and the one back, against the running depth's
                        self._audit_watch = [self._arms[probe], n_probe, self._agg_t / self._agg_n, 0.0, 0, 0]
                    cur = self._probe_run = probe
                    self._probe_left = n_probe - 1
                    back = step + n_probe + 1
                    if (audit or self._costs.cells.m[b][cur] < 2) and back < self._refresh_at[b]:
                        self._refresh_at[b] = back  # an audit, a first or second measurement: back by then
            if self._look == step and cur == self._cur and self._arms[cur] == 0:
                cur = self._look_i  # a look at the batch's requests (``_price_batch``)
            self._last_k = self._arms[cur]
            return self._modes[cur]
        except Exception:  # odd inputs are missing data: keep the running depth
            return self._modes[self._cur]

    def _take_outcome(self, step: int, batch: int, stats: StepStats) -> None:
        """What the stats say about the last step whose result is known: its acceptance and its time.

        The adapter names that step's batch size, decided depth and context length (``last_batch_size``,
        ``last_decided_steps``, ``last_mean_seq_len``). StepStats built without them (a caller of decide()
        that is no adapter) still have their times used: the batch size is the length of the per-request
        acceptance list, else the coming step's while it and the depth that ran equal the last decision's (a
        time is never billed to another decision), the context length the coming step's; a depth the
        engine ran shallower than decided then goes unnoticed."""
        _, _, seq_len, k_obs, acc, drafted, t, mean, last_b, last_k, last_len, last_ids = stats[:12]
        if self._audit_watch is not None:
            self._watch_audit(t, last_k if last_k.__class__ is int else k_obs)
        if k_obs.__class__ is not int or not 0 <= k_obs <= MAX_NUM_STEPS:
            c = clean_count(k_obs)
            if c is None or c > MAX_NUM_STEPS:
                k_obs, t = -1, None  # unknown depth: neither its acceptance nor its time can be used
            else:
                k_obs = c
        # a list, or another sequence copied into one; a string, a number or an object: missing
        if acc.__class__ is list or (acc is not None and (acc := _as_list(acc)) is not None):
            try:  # a strided sample of the per-request counts, as bytes (C speed; bad values raise)
                n = len(acc)
                if n <= _SAMPLE_CAP:
                    stride, sample = 1, acc
                elif step & 1:
                    n = 0  # large batches: every other step is plenty (and halves the cost)
                    self._acc_steps += 1
                else:
                    stride = -(-n // _SAMPLE_CAP)
                    sample = acc[(step >> 1) % stride :: stride]
                if n and k_obs > 0:
                    if drafted is not None and drafted.__class__ is not list:
                        drafted = clean_sequence(drafted)
                    if drafted is None:
                        counts = bytes(sample)
                        self._bufs[k_obs] += counts
                        self._acc_steps += 1
                        if last_ids is not None and (stride == 1 or not step & 14) and len(last_ids) == n:
                            self._rq.append(
                                (
                                    k_obs,
                                    last_ids if stride == 1 else last_ids[(step >> 1) % stride :: stride],
                                    counts,
                                )
                            )
                    else:
                        self._take_general(sample, drafted, k_obs, stride, (step >> 1) % stride, n)
                    if self._chg_on and (not step & 15 or k_obs != self._k_prev):  # and probe outcomes
                        if self._chg.scan(self._bufs):
                            self._changed()
                        self._k_prev = k_obs
            except Exception:  # negative, fractional, NaN or huge counts: no acceptance from this step
                pass
        elif k_obs > 0 and mean is not None:
            self._take_mean(mean, k_obs)
        if not (  # the common step: a new, sane time of the run being measured, the depth decided run
            t.__class__ is float
            and last_b == self._agg_batch
            and k_obs == self._agg_k
            and last_k == k_obs
            and last_b.__class__ is int
            and t != self._last_t
            and 0.0 < t < 1e4
        ):
            t = self._take_time(step, batch, seq_len, k_obs, acc, t, last_b, last_k, last_len)
            if t is None:
                return
        else:
            self._last_t = t
        n_agg = self._agg_n
        if t * n_agg > _AGG_OUTLIER * self._agg_t or (
            n_agg == 1 and (self._agg_switch or t * _AGG_OUTLIER < self._agg_t)
        ):
            self._agg_stray(t, n_agg)
        else:
            self._agg_t += t
            self._agg_n = n_agg + 1

    def _take_time(
        self,
        step: int,
        batch: int,
        seq_len: Any,
        k_obs: int,
        acc: Any,
        t: Any,
        last_b: Any,
        last_k: Any,
        last_len: Any,
    ) -> float | None:
        """The step time of any other step: checked and converted, and a new run begun where it starts one.
        Returns the time when it continues the run being measured (the caller adds it), else None."""
        if t.__class__ is not float and t is not None:
            t = clean_float(t)
        if t is None:  # an untimed step (after a prefill): it ends the run, and the next follows no switch
            if self._agg_n:
                self._flush_time()
            self._agg_k = -1
            return None
        try:
            # the same time again: the same step re-reported
            if not (0.0 < t < 1e4 and t != self._last_t):
                return None
            self._last_t = t
            if last_k.__class__ is not int and last_k is not None:
                last_k = clean_count(last_k)
            if last_k is not None and k_obs < last_k and k_obs >= 0 and last_k <= MAX_NUM_STEPS:
                self._ran_other(last_k, k_obs)  # shallower than decided (deeper: no sign of a limit)
            if last_b.__class__ is int and 0 < last_b <= MAX_BATCH:
                nb = last_b  # the measured step's exact batch size, from the adapter
            elif last_b is not None and (c := clean_count(last_b)) and c <= MAX_BATCH:
                nb = c  # a numpy integer
            elif acc is not None:
                nb = len(acc)
            elif batch == self._last_batch and k_obs == self._last_k and 0 < batch <= MAX_BATCH:
                nb = batch  # not said, but load and depth hold still: the last decision's step
            else:
                nb = 0  # not said while they move: it could be another decision's, left out
            if nb <= 0:
                return None
            if not self._timed:  # the first measurement: start exploring now
                self._timed = True
                self._refresh_at = [0] * len(self._refresh_at)
            if nb == self._agg_batch and k_obs == self._agg_k:
                return t  # type: ignore[no-any-return]
            self._flush_time()
            self._agg_switch = (0 <= self._agg_k != k_obs) + (self._agg_k == 0 < k_obs)  # 2: a resume
            self._agg_batch = nb
            self._agg_k = k_obs
            self._agg_len = context_length(seq_len if last_len is None else last_len)
            self._agg_t = t
            self._agg_n = 1
            self._agg_step = step
        except Exception:  # NaN, inf, negative, zero or not a number: missing
            pass
        return None

    def _watch_audit(self, t: object, k: object) -> None:
        """The step time of the outcome of a step decided at depth ``k``, while an audit is priced: its
        steps (the outcomes decided at its depth; up to two others before them, the outcome lag), then the
        step back. Once all are in, what it cost beyond as many steady steps of the running depth goes to
        the schedule; a step without a sane time ends the watch unpriced."""
        w = self._audit_watch
        assert w is not None
        if t.__class__ is not float or not 0.0 < t < 1e4:
            self._audit_watch = None
            return
        k_audit, n, ref, total, seen, other = w
        if seen < n:
            if k == k_audit:
                w[3] = total + t
                w[4] = seen + 1
            elif seen or other >= 2:
                self._audit_watch = None  # not the audit's steps after all
            else:
                w[5] = other + 1
            return
        self._audit_watch = None
        self._probes.price_audit((total + t) / ref - (n + 1))

    def _agg_stray(self, t: float, n_agg: int) -> None:
        """A step time of the run being measured that is not the depth's cost: a stray slow step, or the
        run's second step showing that its first was a transition or a stray."""
        if t * n_agg > _AGG_OUTLIER * self._agg_t:
            return  # a stray slow step (a prefill joined it, a pause): not its cost
        # the run's first step was a transition (the step after a switch pays for it: the scheduler's
        # other work, a catch-up) or a stray: drop it
        if self._agg_switch and t * _AGG_OUTLIER >= self._agg_t:
            # a transition, not a stray step (those are 3x and more)
            self._note_transition(self._agg_t / t - 1.0, self._agg_switch == 2)  # in (-1, 2]
        self._agg_t = t
        self._agg_switch = 0

    def _note_transition(self, r: float, resume: bool = False) -> None:
        """One switch's first step measured against its second: ``r`` = how much longer it took
        (``resume``: from off into speculation)."""
        n = self._transition_n = self._transition_n + 1
        self._transition += (r - self._transition) * _transition_weight(n)
        if resume:
            n = self._resume_n = self._resume_n + 1
            self._resume += (r - self._resume) * _transition_weight(n)

    def _price_batch(self, b: int, ids: Any, step: int) -> None:
        """The coming batch's expected tokens from its requests' own acceptance, and bucket b's choice
        with them (``requests``); a failure leaves the population's estimate in place."""
        try:
            n = len(ids)
            if n <= _BATCH_SAMPLE:
                if ids.__class__ is not list:
                    ids = list(ids)
                if ids != self._batch_ids:
                    self._batch_ids = ids[:]
                    self._batch_gap = 1
                    self._look_after = 0
                    self._look_gap = _REPRICE_GROWTH
                sample = ids
                self._batch_at = step + self._batch_gap
                if self._batch_gap < self.config.update_interval:
                    self._batch_gap *= _REPRICE_GROWTH
            else:
                stride = -(-n // _BATCH_SAMPLE)
                sample = ids[(step >> 6) % stride :: stride]
                self._batch_ids = None
                self._batch_at = step + self.config.update_interval
            self._reqs.fold(step)
            self._batch_sample, self._batch_n = sample, n
            e = self._E = self._batch_expected(b)
            self._choice.update(b, e, self._choice.t[b], self._disabled)
            if n <= _BATCH_SAMPLE and self._arms[self._cur] == 0 and step >= self._look_after:
                # Off teaches nothing about the batch's requests: one step at a speculating depth shows
                # them, when what it may reveal is worth the step (``_look_index``).
                look = self._look_index(b, sample)
                if look > 0:
                    self._look, self._look_i = step, look
                    self._look_after = step + self._look_gap
                    if self._look_gap < self.config.update_interval:
                        self._look_gap *= _REPRICE_GROWTH
                    self._batch_at = min(self._batch_at, step + 2)  # priced again with its outcome
        except Exception:  # noqa: BLE001 - ids that are no ids: price by the population
            self._batch_at = step + self.config.update_interval
            self._reqs = RequestAcceptance(max(self._arms), self._arms)
            self._rq = self._reqs.pending
            self._batch_sample, self._batch_n = (), 0
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
        n = self._batch_n
        held = not 0 < n <= _BATCH_SAMPLE
        ref = self._ref_index(b)
        key = 2 * ref + held
        pop = self._pop_sums.get(key)
        if pop is None:
            pop = self._pop_sums[key] = self._population_sums(ref, held)
        rows, total = pop
        if n:
            sample = self._batch_sample
            m = len(sample)
            own = self._reqs.own(sample, ref, self._step, held)
            rest = n - m
            prior = self._reqs.prior_expected
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
        rows, total = (self._pop.harmonic if held else self._pop.weighted)(arms, arms[ref])
        plain = self._pop.plain(arms)
        if held:
            return [x * q / e for x, e, q in zip(rows, self._E_pop, plain, strict=True)], total
        return [x * e / q for x, e, q in zip(rows, self._E_pop, plain, strict=True)], total

    def _look_index(self, b: int, sample: Any) -> int:
        """The depth index of a look at a small batch while off, or 0 when it is not worth its step.

        Each request's rate is an estimate (a new one's, the population's spread): the batch may be one that
        speculation pays for. The gain of speculating over off is priced in three scenarios of the batch's
        rate (``_LOOK_SHIFTS``) and its expectation counted over the steps until the batch is next priced
        at the latest (``update_interval``): a look that could turn speculation on for that long is worth
        the step it loses. It runs the depth that is best in the optimistic scenario (what it would switch
        to). A request whose estimate is firm, or a population where speculation rarely pays, gets none."""
        v = self._v[b]
        times = self._choice.t[b]
        if not v[0] > 0.0 or not times[0] > 0.0:
            return 0
        disabled = self._disabled
        rows = self._reqs.shifted(sample, _LOOK_SHIFTS)
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
        return max(range(n - 1, n - 1 - len(self.config.steps), -1), key=self._choice.v[b].__getitem__)

    def _changed(self) -> None:
        """Acceptance changed (a CUSUM alarm): forget most of the old counts and recompute now, then every
        few steps for a while, as the data since the change accumulate."""
        self._acc.forget(_CHANGE_KEEP)
        self._refresh_at = [0] * len(self._refresh_at)
        self._fast = 4

    def _odd_batch(self, batch: object) -> int:
        """A batch size that is not a small int: converted (numpy), or the last one when it is not a count."""
        c = clean_count(batch)
        return self._last_batch if c is None else c

    def _take_general(self, sample: Any, drafted: Any, depth: int, stride: int, off: int, n: int) -> None:
        """Acceptance from a non-list sequence and/or with per-request draft counts (trimmed drafts)."""
        if sample.__class__ is not list:
            sample = list(sample)
        if drafted is None:
            self._acc.add(depth, bytes(sample))
            return
        self._take_trimmed(sample, drafted, depth, stride, off, n)

    def _ran_other(self, decided: int, ran: Any) -> None:
        """The engine ran a shallower depth than decided: after a few times, stop offering that depth and
        deeper ones (the engine cannot run them: no graph for them, or a cap of its own)."""
        if decided < 0 or ran.__class__ is not int or not 0 <= ran < decided:
            return
        i = self._idx[decided]
        if i < 0 or self._disabled[i]:
            return
        self._clamp_votes[i] += 1
        if self._clamp_votes[i] >= _CLAMP_VOTES:
            for j in range(max(i, 1), len(self._arms)):  # the shallowest depth always stays
                self._disabled[j] = True
            self._disabled_at = self._step
            self._refresh_at = [0] * len(self._refresh_at)

    def _switch_free(self) -> bool:
        """Whether switching depth is known to cost nothing: over ``_TRANSITION_KNOWN`` switches, the first
        step after one took no longer than the next."""
        return self._transition_n >= _TRANSITION_KNOWN and self._transition <= _TRANSITION_LONG

    def _resume_unmeasured(self, b: int, i: int) -> bool:
        """Whether a probe of depth index i in bucket b resumes speculation from off while that depth has not
        been measured over a run there: its first step pays the drafter's catch-up (live: 1.5-2.8x a
        steady step), so the probe runs ``probe_steps`` steps, which measure the depth."""
        return (
            self._arms[i] > 0
            and self._cur >= 0
            and self._arms[self._cur] == 0
            and not self._run_measured[b][i]
            and not self._switch_free()
        )

    def _flush_time(self) -> None:
        """Queue the aggregated measurements of consecutive steps with the same batch size and depth."""
        if self._agg_n:
            n = self._agg_n
            pend = (self._agg_batch, self._agg_k, self._agg_len, self._agg_t / n, n, self._agg_step)
            self._pending.append(pend)
            self._agg_n = 0
            self._agg_batch = -1

    def _take_mean(self, mean: Any, depth: int) -> None:
        """Only the mean accepted count is known (no per-request list): a weak, geometric pseudo-sample."""
        try:
            m = clean_float(mean)
            if m is not None and 0.0 <= m <= depth <= MAX_NUM_STEPS:
                self._acc.add_mean(depth, m)
                self._acc_steps += 1
        except Exception:
            pass

    def _take_trimmed(self, sample: Any, drafted: Any, depth: int, stride: int, off: int, n: int) -> None:
        if drafted.__class__ is not list and drafted.__class__ is not tuple:
            drafted = list(drafted)
        if len(drafted) != n:
            return
        dsample = drafted[off::stride] if stride > 1 else drafted
        if dsample.count(depth) == len(dsample):
            self._acc.add(depth, bytes(sample))
            return
        normal: list[int] = []
        full: list[int] = []
        for a, d in zip(sample, dsample, strict=False):
            if a > d or a < 0:
                continue
            if a == d < depth:
                full.append(d)  # accepted all it proposed, proposed fewer than depth: tried 1..d only
            else:
                normal.append(a)
        self._acc.add(depth, bytes(normal))
        if full:
            self._acc.add_full(depth, bytes(full))

    # -- periodic work ---------------------------------------------------------------------------------------
    def _refresh(self, b: int, seq_len: float | None) -> None:
        step = self._step
        acc = self._acc
        acc.data_steps += self._acc_steps
        self._acc_steps = 0
        if self._chg_on and self._chg.scan(self._bufs):
            self._changed()
        acc.fold(step - self._acc_folded)
        if self._rq:  # per-request outcomes arrive without the batch's ids too: counted here, not kept
            self._reqs.fold(step)
        if self._chg_on:
            self._chg.rewind()
        self._acc_folded = step
        if acc.version != self._acc_version:
            self._refresh_expected()
        self._flush_time()
        if self._pending:
            self._fold_times()
        if self._disabled_at > _NEVER and step - self._disabled_at > 4 * self.config.max_probe_interval:
            # Not forever: an engine may gain the depth back.
            self._disabled = [False] * len(self._arms)
            self._clamp_votes = [0] * len(self._arms)
            self._disabled_at = _NEVER
        self._table(b, seq_len)
        interval = self.config.update_interval
        if self._fast < interval:
            interval = self._fast
            self._fast *= 2
        self._refresh_at[b] = step + interval

    def _refresh_expected(self) -> None:
        acc = self._acc
        self._E_pop = acc.expected_tokens(self._arms)
        rates = acc.rates
        a2 = rates[2] if len(rates) > 2 else rates[1]
        self._pop = TwoPoint(
            rates[1], a2, acc.tries(2), [(rates[j], acc.tries(j)) for j in range(3, len(rates))]
        )
        self._pop_sums.clear()
        self._reqs.set_population(rates[1], a2)
        self._acc_version = acc.version
        if self._chg_on:  # the detector's expectations (off by default: nothing reads them then)
            self._chg.expect(acc.rates)
        a = acc.rates[1]
        if a > self._a_hi:  # only as far as its tries support it (a running maximum latches on noise)
            n = acc.tries(1)
            if n < _HI_WHOLE:
                a = lower_bound(a, n)
            if a > self._a_hi:
                self._a_hi = a

    def _fold_times(self) -> None:
        idx, costs, seen, visits = self._idx, self._costs, self._probes.seen, self._visits
        stamp, now = self._probes.stamp, self._step
        for batch, k, seq_len, t, count, step in self._pending:
            if batch <= 0 or not 0 <= k <= MAX_NUM_STEPS:
                continue
            i = idx[k]
            if i < 0:
                continue
            cells = costs.cells
            b = costs.bucket(batch)
            first_run = count >= 2 and not self._run_measured[b][i]
            before = cells.r[b][i] if first_run and cells.n[b][i] else 0.0
            b, changed, stale = costs.add(batch, i, seq_len, t, step, count)
            if first_run and b >= 0:
                self._run_measured[b][i] = True
                x = t / costs.base(batch, k, seq_len, b)
                if before > x * _RUN_REPLACES:
                    # the single steps before the depth's first run were cold or paid a switch: the run
                    # replaces them
                    cells.r[b][i] = cells.s1[b][i] = cells.s2[b][i] = x
            if changed:  # the bucket starts over: every other depth is to be measured again
                row = seen[b]
                for j in range(len(row)):
                    row[j] = -1
                measured = self._run_measured[b]
                for j in range(len(measured)):
                    measured[j] = j == i and count >= 2
            if (changed or stale) and b >= 0:  # the other buckets' estimates may be as stale
                self._probes.raise_alarm(b, i, now)
                self._refresh_at = [0] * len(self._refresh_at)  # each plans its audit on its next visit
            if b >= 0:
                self._clamp_votes[i] = 0  # it does run
                if seen[b][i] < visits[b]:
                    seen[b][i] = visits[b]
                if stamp[b][i] < now:
                    stamp[b][i] = now
        self._pending.clear()

    def _table(self, b: int, seq_len: float | None) -> None:
        """Bucket b's predicted times and tokens/s per depth, its best depth and its next probe."""
        cur = self._cur
        times, blind = self._costs.predict(b, seq_len, cur, self._timed)
        self._E = self._batch_expected(b)
        v = self._choice.update(b, self._E, times, self._disabled)
        if cur < 0 or not self._timed:
            return  # nothing to measure with: no probing until the engine reports step times
        samples = self._costs.cells.n[b]
        if self._arms[cur] == 0 and not all(self._run_measured[b]):
            # while off, a depth known from single steps only is confirmed soon, by a run (its single steps
            # may be cold or a resume's)
            samples = [1 if n and self._resume_unmeasured(b, i) else n for i, n in enumerate(samples)]
        if self.cost_model is not None:  # a sample the profile agrees with needs no confirmation probe
            samples = [3 if ok else n for n, ok in zip(samples, self._costs.agrees(b), strict=True)]
        hope = None
        if self._arms[cur] == 0:  # off: what each depth would give if acceptance were back at its best
            a = self._a_hi
            hope = [
                (1.0 - a ** (k + 1)) / (1.0 - a) / t if t > 0.0 else 0.0
                for k, t in zip(self._arms, times, strict=True)
            ]
        # what a probe's two switches cost beyond steady steps (relative): into the probed depth (from off, a
        # resume: the drafter's catch-up) and back
        tr = self._transition if self._transition > 0.0 else 0.0
        into = self._resume if self._resume_n and hope is not None else tr
        self._probes.plan(
            b,
            v,
            cur,
            self._disabled,
            samples,
            blind,
            self._arms[0],
            hope,
            times,
            self._probe_steps if tr > _TRANSITION_LONG else 1,
            into if into > 0.0 else 0.0,
            tr,
            self._step,
            self._best[b],
        )

    def _prior_best(self) -> int:
        """The depth to start with: the best under the prior acceptance and the profile (or prior costs)."""
        self._table(0, None)
        return self._best[0]

    # -- metrics ---------------------------------------------------------------------------------------------
    def estimates(self) -> Mapping[str, float]:
        """Per-position acceptance; expected tokens, step time and tokens/s per depth (last bucket seen)."""
        out: dict[str, float] = {"num_steps": float(self._arms[self._cur])}
        rates = self._acc.rates
        for j in range(1, self._acc.max_pos + 1):
            out[f"accept_rate_{j}"] = rates[j]
        batch = self._last_batch
        b = self._index[batch] if 0 <= batch <= MAX_BATCH else self._top
        rep = self._grid.rep[b]
        absolute = self.cost_model is not None or self._costs.cells.nearest_measured(b) >= 0
        if self.cost_model is not None:  # 1.0 once measurements showed the profile's shape wrong
            out["prior_mismatch"] = 1.0 if self._costs.mismatch else 0.0
            if self._costs.mismatch:
                out["prior_mismatch_ratio"] = self._costs.mismatch
        for i, k in enumerate(self._arms):
            out[f"expected_tokens_{k}"] = self._E[i]
            t = self._choice.t[b][i]
            if absolute and t > 0.0:
                out[f"step_ms_{k}"] = t * 1e3
                out[f"tokens_per_s_{k}"] = self._E[i] * rep / t
        return out
