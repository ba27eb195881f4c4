"""cost_model (alias goodput): pick the depth with the most expected tokens per second for the coming batch.

For each depth k in ``steps`` plus 0 it predicts ``E(k) / T(batch, k)``: expected tokens per
request from per-position acceptance (``E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j``, see ``_cost_acceptance``)
over the step time at this batch size, learned online from ``last_step_time_s`` (see ``_cost_table``) and
optionally seeded from a step-cost profile. This is the SmartSpec/TurboSpec goodput rule; the load signal
comes from measured step cost because acceptance barely moves with load and cannot find the off-switch.

Learning from the engine's own clock needs measurements of depths it is not running, so the policy probes:
one step at another depth, per batch-size bucket, at a rate that keeps the expected cost of probing under
``probe_budget`` of throughput (a depth predicted to be 50% slower is re-measured rarely, a near-tie often;
each depth is re-measured once its estimate is older than that interval, so a change in costs or acceptance
is noticed). In a new bucket it measures off next to the running depth, prices the other depths on the line
through the two, and tries near-ties first; clear losers wait for their budgeted turn. While off no
acceptance arrives: the estimates keep their last values and drift slowly back toward the prior, and
probes at k > 0 bring fresh acceptance. Slow outlier steps (the first decode step after a prefill: 5-10x)
cannot lock a depth out: stray slow steps are left out of a run's mean, a cell's first samples combine by
min/median (``_cost_table``), and a depth that loses on a single sample is measured again soon. A depth
the engine keeps running shallower than decided (no graph for it) is not offered for a while.

The one-step lag: the stats describe the most recent step whose result is known, which is the previous
decision (non-overlap engines) or the one before (overlap scheduling, vLLM async). The batch size of that
step is not in StepStats, so the policy remembers its last two decisions (batch, depth, context), learns
which of them the feedback describes from the depths reported back, and uses the exact batch size
``len(accepted_draft_tokens)`` whenever the step speculated.

A mode switch needs the new depth to beat the running one by ``switch_margin`` and at least
``min_dwell_steps`` since the previous switch (unless it gains over 10%); the running depth is kept across
bucket boundaries, so a batch size hovering at a boundary does not flip the depth every step (vLLM #49548).

decide() cost: per step it reads the stats, appends a strided sample (at most ``_SAMPLE_CAP`` requests) of
accepted counts as bytes and adds the step time to a running sum; every ``update_interval`` steps per bucket
it folds them in (counting in C) and recomputes that bucket's table. No RNG: the same inputs give the same
outputs. docs/cost-model.md has the whole design.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from ..costs import StepCostModel
from ..errors import ConfigError, FieldError, short_repr, short_str
from ..mode import MAX_NUM_STEPS, SpecMode
from ..policy import PolicyConfig, PolicyEntry
from ..stats import StepStats, clean_count, clean_float, clean_sequence
from ._cost_acceptance import AcceptanceEstimator
from ._cost_table import BucketGrid, CostCells
from ._validate import check_depths

__all__ = ["CostModelConfig", "CostModelPolicy", "ENTRY"]

#: Requests per step whose accepted counts are sampled (strided, rotating offset): enough for the
#: per-position estimate, bounded so decide() does not grow with the batch.
_SAMPLE_CAP = 8
#: Without a profile, a depth never measured anywhere is priced at (1 + _PRIOR_STEP_COST * k) times off: an
#: optimistic memory-bound guess, so promising depths get explored.
_PRIOR_STEP_COST = 0.1
#: While off (no acceptance data), acceptance forgets this many times more slowly.
_IDLE_FORGET = 8.0
#: Steps between two probes.
_PROBE_GAP = 4
#: A measured depth is re-measured at most once per this many visits of its bucket; an unanswered
#: exploration probe is retried after as many.
_MIN_PROBE_INTERVAL = 128
#: Within a run of steps at the same batch size and depth, a step this many times slower than the run's mean
#: is left out of the mean (slow outliers are one-sided and depth-independent: ratios stay right).
_AGG_OUTLIER = 3.0
#: A depth that looks more than _CONFIRM_LOSS worse than the running one on a single sample is measured again
#: after _CONFIRM_INTERVAL visits of its bucket: one slow step (the first after a prefill, 5-10x) must not
#: lock it out for a whole re-probe interval; a mild loser waits for its budgeted turn as before.
_CONFIRM_INTERVAL = 16
_CONFIRM_LOSS = 0.1
#: A depth never measured in a bucket is first tried after loss**2 / (budget share * _EXPLORE_SCALE) visits:
#: near-ties (where the measurement could change the decision) at once, clear losers like any other probe.
_EXPLORE_SCALE = 0.1
#: Times the engine must run a shallower depth than decided before that depth is given up.
_CLAMP_VOTES = 4
#: A switch this much better (predicted) does not wait for the dwell time.
_BIG_GAIN = 1.1
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


def _length(value: object) -> float | None:
    """A context length as a finite float > 0, else None (missing): the check where it enters the state."""
    if value.__class__ is float:
        return value if 0.0 < value < math.inf else None
    f = clean_float(value)
    return f if f else None
_FAR = 1 << 62


class CostModelConfig(PolicyConfig):
    """Maximise predicted tokens/s: per-position acceptance x step cost learned online (probing)."""

    candidate_steps_alias: ClassVar[bool] = True

    name: Literal["cost_model"] = "cost_model"
    steps: tuple[int, ...] = Field(
        (1, 2, 3, 4, 5, 6, 7),
        min_length=1,
        description="positive depths it may choose, strictly ascending (0 = off is added when allow_off)",
    )
    allow_off: bool = Field(True, description="may choose 0 (speculation off)")
    profile: str | None = Field(
        None,
        description="step-cost profile seeding the cost model: a shipped profile name or a profile JSON path",
    )
    prior_acceptance: float = Field(
        0.7, gt=0.0, lt=1.0, description="per-draft acceptance assumed before any is measured"
    )
    acceptance_halflife: float = Field(
        128.0, ge=1.0, le=1e6, description="steps with acceptance data after which old data weighs half"
    )
    cost_halflife: float = Field(
        256.0, ge=1.0, le=1e6, description="steps after which an old step-time measurement weighs half"
    )
    probe_budget: float = Field(
        0.002, gt=0.0, le=0.5, description="share of throughput it may spend re-measuring other depths"
    )
    max_probe_interval: int = Field(
        4096, ge=128, le=10_000_000, description="steps in a bucket after which every depth is re-measured"
    )
    switch_margin: float = Field(
        0.01, ge=0.0, le=1.0, description="a new depth must be predicted this much faster (fraction)"
    )
    min_dwell_steps: int = Field(16, ge=0, le=1_000_000, description="steps between two depth switches")
    update_interval: int = Field(
        64, ge=1, le=100_000, description="steps between recomputations of a bucket's predictions"
    )
    buckets_per_octave: int = Field(4, ge=1, le=16, description="batch-size buckets per doubling above 4")

    @model_validator(mode="after")
    def _consistent(self) -> CostModelConfig:
        steps = self.steps
        check_depths(steps)
        if self.profile is not None:
            ref = self.profile.strip()
            if not ref:
                raise FieldError("profile", "must be a profile name or a JSON path, got an empty string")
            _read_profile(ref)  # what make_policy loads, so check-config rejects exactly what it would
        return self

    def candidate_steps(self) -> tuple[int, ...]:
        return ((0,) if self.allow_off else ()) + self.steps


_GRIDS: dict[int, BucketGrid] = {}


def _grid(per_octave: int) -> BucketGrid:
    g = _GRIDS.get(per_octave)
    if g is None:
        g = _GRIDS[per_octave] = BucketGrid(per_octave)
    return g


class CostModelPolicy:
    """Goodput-maximising depth choice with an online step-cost model; see the module docstring."""

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
        self._index = self._grid.index
        self._top = len(self._grid) - 1
        self._base_memo: dict[tuple[int, int, int], float] = {}
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
        self._acc_steps = 0
        self._acc_folded = 0
        self._timed = False
        self._acc_version = -1
        self._E = [1.0] * n_a
        self._cells = CostCells(n_b, n_a, c.cost_halflife)
        self._pending: list[tuple[int, int, float | None, float, int, int]] = []
        self._agg_batch = -1
        self._agg_k = -1
        self._agg_len: float | None = None
        self._agg_t = 0.0
        self._agg_n = 0
        self._agg_step = 0
        #: per depth index: the engine ran something shallower when this depth was decided (votes), and
        #: depths given up on for that reason.
        self._clamp_votes = [0] * n_a
        self._disabled = [False] * n_a
        self._disabled_at = _NEVER
        self._blind = [False] * n_b
        self._refresh_at = [0] * n_b
        self._probe_at = [_FAR] * n_b
        self._probe_i = [0] * n_b
        self._best = [0] * n_b
        self._v: list[list[float]] = [[1.0] * n_a for _ in range(n_b)]
        self._t: list[list[float]] = [[1.0] * n_a for _ in range(n_b)]
        #: per bucket: decide() calls that fell in it (the clock of its probe schedule), and per depth the
        #: visit count of its last measurement or probe (-1: never).
        self._visits = [0] * n_b
        self._seen: list[list[int]] = [[-1] * n_a for _ in range(n_b)]
        self._cur = -1
        self._switched = _NEVER
        self._last_probe = _NEVER
        self._h1: tuple[int, int, float | None] = (1, -1, None)
        self._h2: tuple[int, int, float | None] = (1, -1, None)
        self._lag_vote = 0
        self._last_t: object = None
        self._refresh_expected()
        self._cur = self._prior_best()

    # -- the hot path ---------------------------------------------------------------------------------------
    def decide(self, stats: StepStats) -> SpecMode:
        try:
            step = self._step = self._step + 1
            # Each field is read once here, at the boundary: anything but a well-formed value is converted
            # (numpy numbers, 0-d tensors) or becomes missing, so nothing malformed reaches the state.
            batch, _, seq_len, k_obs, acc, drafted, t, mean, _ = stats  # one unpack: cheaper than 7 lookups
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
                            self._bufs[k_obs] += bytes(sample)
                            self._acc_steps += 1
                        else:
                            self._take_general(sample, drafted, k_obs, stride, (step >> 1) % stride, n)
                except Exception:  # negative, fractional, NaN or huge counts: no acceptance from this step
                    pass
            elif k_obs > 0 and mean is not None:
                self._take_mean(mean, k_obs)
            if t.__class__ is not float and t is not None:
                t = clean_float(t)
            if t is not None:
                try:
                    # the same time again: the same step re-reported
                    if 0.0 < t < 1e4 and t != self._last_t:
                        self._last_t = t
                        h1, h2 = self._h1, self._h2
                        if h1[1] != h2[1]:  # the two candidate steps differ: the reported depth says which
                            if k_obs == h1[1]:
                                if self._lag_vote < 8:
                                    self._lag_vote += 1
                            elif k_obs == h2[1] and self._lag_vote > -8:
                                self._lag_vote -= 1
                        h = h2 if self._lag_vote < 0 else h1
                        if h[1] != k_obs:
                            self._ran_other(h[1], k_obs)
                        if acc is not None:
                            nb = len(acc)  # the measured step's exact batch size
                        else:
                            nb = h[0] if h[1] == k_obs else 0
                        if nb > 0:
                            if not self._timed:  # the first measurement: start exploring now
                                self._timed = True
                                self._refresh_at = [0] * len(self._refresh_at)
                            if nb == self._agg_batch and k_obs == self._agg_k:
                                n_agg = self._agg_n
                                if t * n_agg > _AGG_OUTLIER * self._agg_t:
                                    pass  # a stray slow step (a prefill joined it, a pause): not its cost
                                elif n_agg == 1 and t * _AGG_OUTLIER < self._agg_t:
                                    self._agg_t = t  # the run's first step was the stray one: drop it
                                else:
                                    self._agg_t += t
                                    self._agg_n = n_agg + 1
                            else:
                                self._flush_time()
                                self._agg_batch = nb
                                self._agg_k = k_obs
                                self._agg_len = _length(h[2])
                                self._agg_t = t
                                self._agg_n = 1
                                self._agg_step = step
                except Exception:  # NaN, inf, negative, zero or not a number: missing
                    pass
            if batch.__class__ is not int or batch < 0 or batch > 4096:
                batch = self._odd_batch(batch)
                b = self._index[batch] if batch <= 4096 else self._top
            else:
                b = self._index[batch]
            vis = self._visits[b] = self._visits[b] + 1
            if step >= self._refresh_at[b]:
                try:
                    self._refresh(b, _length(seq_len))
                except Exception:  # never retry the same failure every step: drop the queued data
                    self._pending.clear()
                    self._refresh_at[b] = step + self.config.update_interval
            cur = self._cur
            best = self._best[b]
            if best != cur:
                v = self._v[b]
                if v[best] > v[cur] * self._margin1 and (
                    step - self._switched >= self._dwell or v[best] > v[cur] * _BIG_GAIN
                ):
                    cur = self._cur = best
                    self._switched = step
            if vis >= self._probe_at[b] and step - self._last_probe >= _PROBE_GAP:
                cur = self._probe_i[b]
                self._seen[b][cur] = vis
                self._last_probe = step
                self._probe_at[b] = _FAR
                if self._cells.w[b][cur] <= 0.0 and step + 2 < self._refresh_at[b]:
                    self._refresh_at[b] = step + 2  # a first measurement (back by then, lag <= 2): use it now
            self._h2 = self._h1
            self._h1 = (batch, self._arms[cur], seq_len)  # read through _length() when used
            return self._modes[cur]
        except Exception:  # odd inputs are missing data: keep the running depth
            return self._modes[self._cur]

    def _odd_batch(self, batch: object) -> int:
        """A batch size that is not a small int: converted (numpy), or the last one when it is not a count."""
        c = clean_count(batch)
        return self._h1[0] if c is None else c

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

    def _take_mean(self, mean: Any, depth: int) -> None:
        """Only the mean accepted count is known (no per-request list): a weak, geometric pseudo-sample."""
        try:
            m = clean_float(mean)
            if m is not None and 0.0 <= m <= depth <= MAX_NUM_STEPS:
                self._acc.add_mean(depth, m)
                self._acc_steps += 1
        except Exception:
            pass

    def _flush_time(self) -> None:
        """Queue the aggregated measurements of consecutive steps with the same batch size and depth."""
        if self._agg_n:
            n = self._agg_n
            pend = (self._agg_batch, self._agg_k, self._agg_len, self._agg_t / n, n, self._agg_step)
            self._pending.append(pend)
            self._agg_n = 0
            self._agg_batch = -1

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
        acc.fold(step - self._acc_folded)
        self._acc_folded = step
        if acc.version != self._acc_version:
            self._refresh_expected()
        self._flush_time()
        if self._pending:
            self._fold_times()
        if self._disabled_at > _NEVER and step - self._disabled_at > 4 * self.config.max_probe_interval:
            # Not forever (an engine may gain the depth back, or the evidence was a misattribution).
            self._disabled = [False] * len(self._arms)
            self._clamp_votes = [0] * len(self._arms)
            self._disabled_at = _NEVER
        self._table(b, seq_len)
        self._refresh_at[b] = step + self.config.update_interval

    def _refresh_expected(self) -> None:
        acc = self._acc
        rates = acc.rates
        cum = [1.0]  # cum[k] = E(k)
        total = surv = 1.0
        for j in range(1, acc.max_pos + 1):
            surv *= rates[j]
            total += surv
            cum.append(total)
        self._E = [cum[k] for k in self._arms]
        self._acc_version = acc.version

    def _fold_times(self) -> None:
        grid, idx, cells = self._grid, self._idx, self._cells
        for batch, k, seq_len, t, count, step in self._pending:
            if batch <= 0 or not 0 <= k <= MAX_NUM_STEPS:
                continue
            i = idx[k]
            if i < 0:
                continue
            b = grid.index[batch] if batch <= 4096 else len(grid) - 1
            base = self._base(batch, k, seq_len, b)
            if base > 0.0:
                cells.add(b, i, t / base, step, count)
                self._clamp_votes[i] = 0  # it does run
                seen = self._seen[b]
                if seen[i] < self._visits[b]:
                    seen[i] = self._visits[b]
        self._pending.clear()

    def _base(self, batch: float, k: int, seq_len: float | None, b: int) -> float:
        """What a measurement is divided by: the profile's prediction, else a sqrt shape within the bucket."""
        if self.cost_model is None:
            return math.sqrt(batch / self._grid.rep[b])
        lq = 0 if seq_len is None or not seq_len > 0 else int(round(8.0 * math.log2(seq_len)))
        key = (int(round(batch)), k, lq)
        memo = self._base_memo
        v = memo.get(key)
        if v is None:
            if len(memo) > 65536:
                memo.clear()
            v = self._profile_time(key[0], k, None if lq == 0 else 2.0 ** (lq / 8.0))
            memo[key] = v
        return v

    def _profile_time(self, batch: float, k: int, seq_len: float | None) -> float:
        """The profile's step time; depths it does not cover are extrapolated from its deepest one."""
        model = self.cost_model
        assert model is not None
        try:
            v = float(model.step_time_s(batch, k, seq_len))
            if v > 0.0 and math.isfinite(v):
                return v
        except Exception:
            pass
        for kk in range(k - 1, 0, -1):  # deepest depth it prices, plus one more draft+verify share per step
            try:
                v = float(model.step_time_s(batch, kk, seq_len))
                v1 = float(model.step_time_s(batch, kk - 1, seq_len))
            except Exception:
                continue
            if v > 0.0 and math.isfinite(v) and math.isfinite(v1):
                return v + (k - kk) * max(v - v1, 0.0)
        return 1.0

    def _prior_ratio(self, i: int, j: int) -> float:
        if self.cost_model is not None:
            return 1.0  # cells hold corrections to the profile; unknown ones default to "as the profile says"
        return (1.0 + _PRIOR_STEP_COST * self._arms[i]) / (1.0 + _PRIOR_STEP_COST * self._arms[j])

    def _table(self, b: int, seq_len: float | None) -> None:
        """Predicted time and tokens/s per depth for bucket b; best depth and the next probe."""
        cells = self._cells
        n = len(self._arms)
        cur = self._cur
        src = cells.nearest_measured(b) if self._timed else -1
        self._blind[b] = False
        if src < 0:
            r = [self._prior_ratio(i, 0) for i in range(n)]
        else:
            wrow, rrow = cells.w[src], cells.r[src]
            if all(x > 0.0 for x in wrow):
                r = rrow
            else:
                r = self._fill(src, wrow, rrow)
                if src == b and self.cost_model is None and sum(x > 0.0 for x in wrow) == 1:
                    self._blind[b] = cells.nearest_with(b, wrow.index(max(wrow))) < 0
        if self.cost_model is not None:
            rep = self._grid.rep[b]
            times = [r[i] * self._base(rep, self._arms[i], seq_len, b) for i in range(n)]
        else:
            times = r
        E, off = self._E, self._disabled
        v = [E[i] / times[i] if times[i] > 0.0 and not off[i] else 0.0 for i in range(n)]
        # Among depths within half the switch margin of the fastest, the deepest: per-step costs the step time
        # does not show (prefill steps between decode steps, scheduling) are shared by more tokens per step.
        tie = max(v) / (1.0 + 0.5 * self.config.switch_margin)
        best = 0
        for i in range(n):
            if v[i] >= tie:
                best = i
        self._best[b] = best
        self._v[b] = v
        self._t[b] = times
        if cur < 0 or not self._timed:
            return  # nothing to measure with: no probing until the engine reports step times
        # Probing: the depth whose re-measurement is due first. Interval = expected loss / budget share.
        vcur = v[cur] if v[cur] > 0.0 else 1e-300
        share = self.config.probe_budget / max(n - 1, 1)
        max_int = self.config.max_probe_interval
        seen, vis, nsam = self._seen[b], self._visits[b], cells.n[b]
        due_best, due_i, due_loss = _FAR, -1, 2.0
        for i in range(n):
            if i == cur or off[i]:
                continue
            loss = 1.0 - v[i] / vcur
            if loss < 0.0:
                loss = 0.0
            if seen[i] >= 0:  # measured (or explored, its measurement lost): re-measure when due
                if loss > _CONFIRM_LOSS and nsam[i] == 1:
                    due = seen[i] + _CONFIRM_INTERVAL  # a loser on one sample: it may have been an outlier
                else:
                    due = seen[i] + int(min(max(loss / share, _MIN_PROBE_INTERVAL), max_int))
            else:
                due = int(min(loss * loss / (share * _EXPLORE_SCALE), max_int))
            if due < due_best or (due == due_best and loss < due_loss):
                due_best, due_i, due_loss = due, i, loss
        if self._blind[b]:
            # One depth measured here and nothing to extrapolate from: measure off (or the depth farthest
            # from the running one) next, so a line through two points prices all the others.
            far = 0 if self._arms[0] == 0 else (n - 1 if cur < n // 2 else 0)
            if far != cur and seen[far] < 0:
                due_best, due_i = 0, far
        if due_i >= 0:
            self._probe_at[b] = max(due_best, vis)
            self._probe_i[b] = due_i

    def _fill(self, src: int, wrow: list[float], rrow: list[float]) -> list[float]:
        """Times for a bucket with unmeasured depths. Two measured depths give the cost of one more depth (a
        least-squares line in k: each draft step plus a wider verify; with a profile, a line through the
        corrections, flat when the profile is right). With one, the nearest bucket that measured both gives
        the ratio; else the prior (with a profile: its shape, scaled by the one measured correction)."""
        n = len(rrow)
        arms = self._arms
        known = [i for i in range(n) if wrow[i] > 0.0]
        if len(known) >= 2:
            ks = [arms[i] for i in known]
            mk = sum(ks) / len(ks)
            mr = sum(rrow[i] for i in known) / len(known)
            sxx = sum((k - mk) ** 2 for k in ks)
            slope = sum((arms[i] - mk) * (rrow[i] - mr) for i in known) / sxx if sxx > 0 else 0.0
            if self.cost_model is None:  # verifying k+1 tokens costs at most k+1 times one token
                floor = min(rrow[i] / (arms[i] + 1) for i in known)
            else:  # corrections to the profile
                floor = 0.25 * min(rrow[i] for i in known)
            return [rrow[i] if wrow[i] > 0.0 else max(mr + slope * (arms[i] - mk), floor) for i in range(n)]
        cur = self._cur
        ref = cur if cur >= 0 and wrow[cur] > 0.0 else known[0]
        nb = self._cells.nearest_with(src, ref)
        if nb >= 0:
            nw, nr = self._cells.w[nb], self._cells.r[nb]
            scale = rrow[ref] / nr[ref]
        out = []
        for i in range(n):
            if wrow[i] > 0.0:
                out.append(rrow[i])
            elif nb >= 0 and nw[i] > 0.0:
                out.append(nr[i] * scale)
            else:
                out.append(rrow[ref] * self._prior_ratio(i, ref))
        return out

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
        batch = self._h1[0]
        b = self._index[batch] if 0 <= batch <= 4096 else self._top
        rep = self._grid.rep[b]
        absolute = self.cost_model is not None or self._cells.nearest_measured(b) >= 0
        for i, k in enumerate(self._arms):
            out[f"expected_tokens_{k}"] = self._E[i]
            t = self._t[b][i]
            if absolute and t > 0.0:
                out[f"step_ms_{k}"] = t * 1e3
                out[f"tokens_per_s_{k}"] = self._E[i] * rep / t
        return out


def _read_profile(spec: str) -> StepCostModel:
    """Load a profile, or FieldError("profile", why): the one loader behind validation and the factory."""
    try:
        from ..sim.profile import load_profile
    except ImportError as exc:  # pragma: no cover - the simulator ships with the package
        raise FieldError("profile", f"cannot load profiles ({exc})") from None
    try:
        model = load_profile(spec)
    except ConfigError as exc:
        raise FieldError("profile", str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - whatever a garbage file makes the loader raise
        raise FieldError("profile", f"cannot load {short_repr(spec)}: {short_str(exc)}") from None
    if not isinstance(model, StepCostModel):
        raise FieldError("profile", f"{short_repr(spec)} did not give a step-cost model")
    return model


def _load_cost_model(spec: str) -> StepCostModel:
    try:
        return _read_profile(spec)
    except FieldError as exc:
        raise ConfigError(f"cost_model.profile: {exc}") from None


def _factory(config: CostModelConfig) -> CostModelPolicy:
    return CostModelPolicy(config, _load_cost_model(config.profile) if config.profile else None)


ENTRY = PolicyEntry("cost_model", CostModelConfig, _factory, aliases=("goodput",))


def make_cost_model(cost_model: StepCostModel | None = None, **fields: Any) -> CostModelPolicy:
    """Build the policy with a programmatic cost model (any ``StepCostModel``) instead of a profile name."""
    return CostModelPolicy(CostModelConfig(**fields), cost_model)
