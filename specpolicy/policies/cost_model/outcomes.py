"""cost_model's reading of a finished step: its acceptance (a strided sample of the per-request counts,
appended as bytes) and its time (added to the run of steps with the same batch size and depth, the switch
a run began with measured against its second step).
"""

from __future__ import annotations

from typing import Any

from ...clean import clean_count, clean_float, clean_sequence, sample_sequence
from ...mode import MAX_NUM_STEPS
from ...stats import StepStats
from .costs import context_length
from .estimates import Estimates
from .table import MAX_BATCH

__all__ = ["Outcomes"]

#: Requests per step whose accepted counts are sampled (strided, rotating offset): enough for the
#: per-position estimate, bounded so decide() does not grow with the batch.
_SAMPLE_CAP = 8
#: Times the engine must run a shallower depth than decided before that depth is given up.
_CLAMP_VOTES = 4
#: Within a run of steps at the same batch size and depth, a step this many times slower than the run's mean
#: is left out of the mean (slow outliers are one-sided and depth-independent: ratios stay right).
_AGG_OUTLIER = 3.0
#: The weight of a measured transition, a mean of the first ones, then an EWMA's (``_transition_weight``).
_TRANSITION_WEIGHT = 0.25


def _transition_weight(n: int) -> float:
    """The weight of the n-th measured transition: their plain mean until ``_TRANSITION_WEIGHT`` takes over
    as an EWMA's."""
    return _TRANSITION_WEIGHT if n * _TRANSITION_WEIGHT >= 1.0 else 1.0 / n


class Outcomes(Estimates):
    __slots__ = ()

    def _take_outcome(self, step: int, batch: int, stats: StepStats) -> None:
        """What the stats say about the last step whose result is known: its acceptance and its time.

        The adapter names that step's batch size, decided depth and context length (``last_batch_size``,
        ``last_decided_steps``, ``last_mean_seq_len``). StepStats built without them (a caller of decide()
        that is no adapter) still have their times used: the batch size is the length of the per-request
        acceptance list, else the coming step's while it and the depth that ran equal the last decision's (a
        time is never billed to another decision), the context length the coming step's; a depth the
        engine ran shallower than decided then goes unnoticed."""
        _, _, seq_len, k_obs, acc, drafted, t, mean, last_b, last_k, last_len, last_ids = stats[:12]
        s = self.s
        if s.audit_watch is not None:
            self._watch_audit(t, last_k if last_k.__class__ is int else k_obs)
        if k_obs.__class__ is not int or not 0 <= k_obs <= MAX_NUM_STEPS:
            c = clean_count(k_obs)
            if c is None or c > MAX_NUM_STEPS:
                k_obs, t = -1, None  # unknown depth: neither its acceptance nor its time can be used
            else:
                k_obs = c
        # the first outcome at another depth (a probe, a switch): read whatever the step's parity
        fresh = k_obs != s.k_prev
        s.k_prev = k_obs
        # a list, or another sequence sampled into one (``sample_sequence``: the cost of the sample whatever
        # the container); a string, a number or an object: missing
        if acc.__class__ is list:
            whole: Any = acc
        elif acc is not None and (got := sample_sequence(acc, _SAMPLE_CAP, step >> 1)) is not None:
            whole = None
            sample, n = got
        else:
            acc = None
        if acc is not None:
            try:  # a strided sample of the per-request counts, as bytes (C speed; bad values raise)
                if whole is not None:
                    n = len(whole)
                if n <= _SAMPLE_CAP:
                    stride = 1
                    if whole is not None:
                        sample = whole
                elif step & 1 and not fresh:
                    n = 0  # large batches: every other step is plenty (and halves the cost)
                    s.acc_steps += 1
                else:
                    stride = -(-n // _SAMPLE_CAP)
                    if whole is not None:
                        sample = whole[(step >> 1) % stride :: stride]
                if n and k_obs > 0:
                    if drafted is not None and drafted.__class__ is not list:
                        drafted = clean_sequence(drafted)
                    if drafted is None:
                        counts = bytes(sample)
                        s.bufs[k_obs] += counts
                        s.acc_steps += 1
                        if last_ids is not None and (stride == 1 or not step & 14) and len(last_ids) == n:
                            s.rq.append(
                                (
                                    k_obs,
                                    last_ids if stride == 1 else last_ids[(step >> 1) % stride :: stride],
                                    counts,
                                )
                            )
                    else:
                        self._take_trimmed(sample, drafted, k_obs, step >> 1, n)
                    if s.chg_on and (not step & 15 or fresh):  # and probe outcomes
                        if s.chg.scan(s.bufs):
                            self._changed()
            except Exception:  # negative, fractional, NaN or huge counts: no acceptance from this step
                pass
        elif k_obs > 0 and mean is not None:
            self._take_mean(mean, k_obs)
        if not (  # the common step: a new, sane time of the run being measured, the depth decided run
            t.__class__ is float
            and last_b == s.agg_batch
            and k_obs == s.agg_k
            and last_k == k_obs
            and last_b.__class__ is int
            and t != s.last_t
            and 0.0 < t < 1e4
        ):
            t = self._take_time(step, batch, seq_len, k_obs, acc, t, last_b, last_k, last_len)
            if t is None:
                return
        else:
            s.last_t = t
        n_agg = s.agg_n
        if t * n_agg > _AGG_OUTLIER * s.agg_t or (
            n_agg == 1 and (s.agg_switch or t * _AGG_OUTLIER < s.agg_t)
        ):
            self._agg_stray(t, n_agg)
        else:
            s.agg_t += t
            s.agg_n = n_agg + 1

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
            if self.s.agg_n:
                self._flush_time()
            self.s.agg_k = -1
            return None
        try:
            # the same time again: the same step re-reported
            if not (0.0 < t < 1e4 and t != self.s.last_t):
                return None
            self.s.last_t = t
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
            elif batch == self.s.last_batch and k_obs == self.s.last_k and 0 < batch <= MAX_BATCH:
                nb = batch  # not said, but load and depth hold still: the last decision's step
            else:
                nb = 0  # not said while they move: it could be another decision's, left out
            if nb <= 0:
                return None
            if not self.s.timed:  # the first measurement: start exploring now
                self.s.timed = True
                self.s.refresh_at = [0] * len(self.s.refresh_at)
            if nb == self.s.agg_batch and k_obs == self.s.agg_k:
                return t  # type: ignore[no-any-return]
            self._flush_time()
            self.s.agg_switch = (0 <= self.s.agg_k != k_obs) + (self.s.agg_k == 0 < k_obs)  # 2: a resume
            self.s.agg_batch = nb
            self.s.agg_k = k_obs
            self.s.agg_len = context_length(seq_len if last_len is None else last_len)
            self.s.agg_t = t
            self.s.agg_n = 1
            self.s.agg_step = step
        except Exception:  # NaN, inf, negative, zero or not a number: missing
            pass
        return None

    def _watch_audit(self, t: object, k: object) -> None:
        """The step time of the outcome of a step decided at depth ``k``, while an audit is priced: its
        steps (the outcomes decided at its depth; up to two others before them, the outcome lag), then the
        step back. Once all are in, what it cost beyond as many steady steps of the running depth goes to
        the schedule; a step without a sane time ends the watch unpriced."""
        w = self.s.audit_watch
        assert w is not None
        if t.__class__ is not float or not 0.0 < t < 1e4 or len(w) != 8:
            self.s.audit_watch = None
            return
        k_audit, n, ref, total, seen, other, first, last = w
        if seen < n:
            if k == k_audit:
                w[3] = total + t
                w[4] = seen + 1
                if not seen:
                    w[6] = t
                w[7] = t
            elif seen or other >= 2:
                self.s.audit_watch = None  # not the audit's steps after all
            else:
                w[5] = other + 1
            return
        self.s.audit_watch = None
        # its switches: the step back over a steady step, and from two steps on, its first over its last
        switch = (first - last if n >= 2 and first > last else 0.0) + (t - ref if t > ref else 0.0)
        self.s.probes.price_audit((total + t) / ref - (n + 1), self.s.step, switch / ref if n >= 2 else -1.0)

    def _agg_stray(self, t: float, n_agg: int) -> None:
        """A step time of the run being measured that is not the depth's cost: a stray slow step, or the
        run's second step showing that its first was a transition or a stray."""
        if t * n_agg > _AGG_OUTLIER * self.s.agg_t:
            return  # a stray slow step (a prefill joined it, a pause): not its cost
        # the run's first step was a transition (the step after a switch pays for it: the scheduler's
        # other work, a catch-up) or a stray: drop it
        if self.s.agg_switch and t * _AGG_OUTLIER >= self.s.agg_t:
            # a transition, not a stray step (those are 3x and more)
            self._note_transition(self.s.agg_t / t - 1.0, self.s.agg_switch == 2)  # in (-1, 2]
        self.s.agg_t = t
        self.s.agg_switch = 0

    def _note_transition(self, r: float, resume: bool = False) -> None:
        """One switch's first step measured against its second: ``r`` = how much longer it took
        (``resume``: from off into speculation)."""
        n = self.s.transition_n = self.s.transition_n + 1
        self.s.transition += (r - self.s.transition) * _transition_weight(n)
        if resume:
            n = self.s.resume_n = self.s.resume_n + 1
            self.s.resume += (r - self.s.resume) * _transition_weight(n)

    def _odd_batch(self, batch: object) -> int:
        """A batch size that is not a small int: converted (numpy), or the last one when it is not a count."""
        c = clean_count(batch)
        return self.s.last_batch if c is None else c

    def _ran_other(self, decided: int, ran: Any) -> None:
        """The engine ran a shallower depth than decided: after a few times, stop offering that depth and
        deeper ones (the engine cannot run them: no graph for them, or a cap of its own)."""
        if decided < 0 or ran.__class__ is not int or not 0 <= ran < decided:
            return
        i = self._idx[decided]
        if i < 0 or self.s.disabled[i]:
            return
        self.s.clamp_votes[i] += 1
        if self.s.clamp_votes[i] >= _CLAMP_VOTES:
            for j in range(max(i, 1), len(self._arms)):  # the shallowest depth always stays
                self.s.disabled[j] = True
            self.s.disabled_at = self.s.step
            self.s.refresh_at = [0] * len(self.s.refresh_at)

    def _flush_time(self) -> None:
        """Queue the aggregated measurements of consecutive steps with the same batch size and depth."""
        if self.s.agg_n:
            n = self.s.agg_n
            pend = (self.s.agg_batch, self.s.agg_k, self.s.agg_len, self.s.agg_t / n, n, self.s.agg_step)
            self.s.pending.append(pend)
            self.s.agg_n = 0
            self.s.agg_batch = -1

    def _take_mean(self, mean: Any, depth: int) -> None:
        """Only the mean accepted count is known (no per-request list): a weak, geometric pseudo-sample."""
        try:
            m = clean_float(mean)
            if m is not None and 0.0 <= m <= depth <= MAX_NUM_STEPS:
                self.s.acc.add_mean(depth, m)
                self.s.acc_steps += 1
        except Exception:
            pass

    def _take_trimmed(self, sample: list[Any], drafted: Any, depth: int, offset: int, n: int) -> None:
        """Acceptance with per-request draft counts (trimmed drafts): ``drafted`` sampled as ``sample`` was
        (the same stride and offset over ``n`` requests)."""
        got = sample_sequence(drafted, _SAMPLE_CAP, offset)
        if got is None or got[1] != n:
            return
        dsample = got[0]
        if dsample.count(depth) == len(dsample):
            self.s.acc.add(depth, bytes(sample))
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
        self.s.acc.add(depth, bytes(normal))
        if full:
            self.s.acc.add_full(depth, bytes(full))
