"""cost_model's periodic work, every ``update_interval`` steps per bucket: the queued acceptance and step
times folded in, and the bucket's predicted times, tokens/s, best depth and next probe recomputed.
"""

from __future__ import annotations

from ...mode import MAX_NUM_STEPS
from .estimates import TRANSITION_LONG
from .outcomes import Outcomes
from .state import NEVER

__all__ = ["Refresh"]

#: The first run of two steps or more measured at a depth replaces the single steps before it when they put
#: the depth this many times dearer: they were cold (an engine's first steps of a kind) or paid a switch
#: (live: a speculative step after off steps pays the drafter's catch-up, 1.5-2.8x a steady one). Where
#: single steps agree with runs (the simulator's), the cell's filter keeps them.
_RUN_REPLACES = 1.5


class Refresh(Outcomes):
    __slots__ = ()

    def _refresh(self, b: int, seq_len: float | None) -> None:
        step = self.s.step
        acc = self.s.acc
        acc.data_steps += self.s.acc_steps
        self.s.acc_steps = 0
        if self.s.chg_on and self.s.chg.scan(self.s.bufs):
            self._changed()
        acc.fold(step - self.s.acc_folded)
        if self.s.rq:  # per-request outcomes arrive without the batch's ids too: counted here, not kept
            self.s.reqs.fold(step)
        if self.s.chg_on:
            self.s.chg.rewind()
        self.s.acc_folded = step
        if acc.version != self.s.acc_version:
            self._refresh_expected()
        self._flush_time()
        if self.s.pending:
            self._fold_times()
        if self.s.disabled_at > NEVER and step - self.s.disabled_at > 4 * self.config.max_probe_interval:
            # Not forever: an engine may gain the depth back.
            self.s.disabled = [False] * len(self._arms)
            self.s.clamp_votes = [0] * len(self._arms)
            self.s.disabled_at = NEVER
        self._table(b, seq_len)
        interval = self.config.update_interval
        if self.s.fast < interval:
            interval = self.s.fast
            self.s.fast *= 2
        self.s.refresh_at[b] = step + interval

    def _fold_times(self) -> None:
        idx, costs, seen, visits = self._idx, self.s.costs, self.s.probes.seen, self.s.visits
        stamp, now = self.s.probes.stamp, self.s.step
        for batch, k, seq_len, t, count, step in self.s.pending:
            if batch <= 0 or not 0 <= k <= MAX_NUM_STEPS:
                continue
            i = idx[k]
            if i < 0:
                continue
            cells = costs.cells
            b = costs.bucket(batch)
            first_run = count >= 2 and not self.s.run_measured[b][i]
            before = cells.r[b][i] if first_run and cells.n[b][i] else 0.0
            b, changed, stale = costs.add(batch, i, seq_len, t, step, count)
            if first_run and b >= 0:
                self.s.run_measured[b][i] = True
                x = t / costs.base(batch, k, seq_len, b)
                if before > x * _RUN_REPLACES:
                    # the single steps before the depth's first run were cold or paid a switch: the run
                    # replaces them
                    cells.r[b][i] = cells.s1[b][i] = cells.s2[b][i] = x
            if changed:  # the bucket starts over: every other depth is to be measured again
                row = seen[b]
                for j in range(len(row)):
                    row[j] = -1
                measured = self.s.run_measured[b]
                for j in range(len(measured)):
                    measured[j] = j == i and count >= 2
            if (changed or stale) and b >= 0:  # the other buckets' estimates may be as stale
                self.s.probes.raise_alarm(b, i, now)
                self.s.refresh_at = [0] * len(self.s.refresh_at)  # each plans its audit on its next visit
            if b >= 0:
                self.s.clamp_votes[i] = 0  # it does run
                if seen[b][i] < visits[b]:
                    seen[b][i] = visits[b]
                if stamp[b][i] < now:
                    stamp[b][i] = now
        self.s.pending.clear()

    def _table(self, b: int, seq_len: float | None) -> None:
        """Bucket b's predicted times and tokens/s per depth, its best depth and its next probe."""
        cur = self.s.cur
        times, blind = self.s.costs.predict(b, seq_len, cur, self.s.timed)
        self.s.expected = self._batch_expected(b)
        v = self.s.choice.update(b, self.s.expected, times, self.s.disabled)
        if cur < 0 or not self.s.timed:
            return  # nothing to measure with: no probing until the engine reports step times
        samples = self.s.costs.cells.n[b]
        if self._arms[cur] == 0 and not all(self.s.run_measured[b]):
            # while off, a depth known from single steps only is confirmed soon, by a run (its single steps
            # may be cold or a resume's)
            samples = [1 if n and self._resume_unmeasured(b, i) else n for i, n in enumerate(samples)]
        if self.cost_model is not None:  # a sample the profile agrees with needs no confirmation probe
            samples = [3 if ok else n for n, ok in zip(samples, self.s.costs.agrees(b), strict=True)]
        hope = None
        if self._arms[cur] == 0:  # off: what each depth would give if acceptance were back at its best
            a = self.s.a_hi
            hope = [
                (1.0 - a ** (k + 1)) / (1.0 - a) / t if t > 0.0 else 0.0
                for k, t in zip(self._arms, times, strict=True)
            ]
        # what a probe's two switches cost beyond steady steps (relative): into the probed depth (from off, a
        # resume: the drafter's catch-up) and back
        tr = self.s.transition if self.s.transition > 0.0 else 0.0
        into = self.s.resume if self.s.resume_n and hope is not None else tr
        self.s.probes.plan(
            b,
            v,
            cur,
            self.s.disabled,
            samples,
            blind,
            self._arms[0],
            hope,
            times,
            self._probe_steps if tr > TRANSITION_LONG else 1,
            into if into > 0.0 else 0.0,
            tr,
            self.s.step,
            self.s.best[b],
        )

    def _prior_best(self) -> int:
        """The depth to start with: the best under the prior acceptance and the profile (or prior costs)."""
        self._table(0, None)
        return self.s.best[0]
