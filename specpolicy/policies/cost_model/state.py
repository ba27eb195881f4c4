"""cost_model's mutable state, one object: the parts (estimates, costs, choice, probe schedule) and the
loop's own counters, made fresh from the config by ``LoopState.fresh``.

The policy object holds only what the config fixes (depths, bucket grid, margins) and this state, so a
reset is a new ``LoopState`` and a saved state (``snapshot``) is this object's fields. A few lists the hot
path reads every step are aliases of a part's own (``ALIASES``): they are rebound, never saved twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...profiles import StepCostModel
from ...snapshot import Classes
from .acceptance import AcceptanceEstimator
from .change import ChangeDetector
from .choice import Choice
from .config import CostModelConfig
from .costs import StepCosts
from .probes import ProbeSchedule
from .requests import RequestAcceptance
from .table import BucketGrid, CostCells
from .weights import TwoPoint

__all__ = ["ALIASES", "CLASSES", "LOOSE", "LoopState"]

#: While off (no acceptance data), acceptance forgets this many times more slowly.
_IDLE_FORGET = 8.0
#: CUSUM slack (standard deviations per request): smaller shifts are drift, left to the forgetting.
_CHANGE_SLACK = 0.5
#: The growth of the interval between two pricings of an unchanged small batch, and of a look's.
REPRICE_GROWTH = 4
NEVER = -(10**9)
#: Fields that are a part's own list under a shorter name (``LoopState.bind``).
ALIASES = ("bufs", "rq", "best", "v", "visits", "probe_at")


@dataclass(slots=True, eq=False, kw_only=True)
class LoopState:
    """Everything cost_model changes while it runs."""

    step: int
    acc: AcceptanceEstimator
    reqs: RequestAcceptance
    #: the requests of the batch last priced (a copy of a small batch's ids), the step from which it is
    #: priced again whatever, and the interval to that step (doubling while the batch stays).
    batch_ids: list[Any] | None
    batch_at: int
    batch_gap: int
    #: the sampled ids and the size of the batch last priced (none: priced as the population)
    batch_sample: Any
    batch_n: int
    #: the step of a look at the batch's requests while off, and its depth index (``_price_batch``)
    look: int
    look_i: int
    #: no look before this step, and the interval to the next after a look (growing while the batch stays)
    look_after: int
    look_gap: int
    #: the population's two-point picture, and its sums per reference depth index and form (cached)
    pop: TwoPoint
    pop_sums: dict[int, tuple[list[float], float]]
    chg_on: bool
    chg: ChangeDetector
    k_prev: int
    #: the next refresh interval after a detected change (doubling up to update_interval).
    fast: int
    #: the best per-draft acceptance seen, with confidence: what a probe while off hopes to find again.
    #: A running maximum of the estimate takes its luckiest moment (8 lucky requests on the first step:
    #: 0.94 for a measured 0.70), so an estimate on fewer than ``_HI_WHOLE`` tries counts at its
    #: ``lower_bound``: a few requests cannot raise it, a well-measured level does, whole. Taking the
    #: estimate whole once its bound clears the best seen (a test, not a bound) latches on noise too,
    #: one level up: 0.89 on ~40 tries for a true 0.81.
    a_hi: float
    acc_steps: int
    acc_folded: int
    timed: bool
    acc_version: int
    #: expected tokens per depth index: the batch's, and the population's
    expected: list[float]
    expected_pop: list[float]
    costs: StepCosts
    #: measured runs (batch, depth, context, mean time, steps, first step) waiting to be folded in, and
    #: the run being measured: consecutive steps with the same batch size and depth.
    pending: list[tuple[int, int, float | None, float, int, int]]
    agg_batch: int
    agg_k: int
    agg_len: float | None
    agg_t: float
    agg_n: int
    agg_step: int
    #: the run began at a change of depth (2: from off into speculation, a resume): its first step is a
    #: transition (discarded once a second step shows the depth's own time)
    agg_switch: int
    #: how much longer the first step after a switch is than the next (relative, an EWMA)
    transition: float
    #: switches whose transition was measured (a run after a switch reached its second step)
    transition_n: int
    #: the same for the switches from off into speculation alone (the drafter's catch-up), and their count
    resume: float
    resume_n: int
    #: steps left of the probe being run, and its depth index
    probe_left: int
    probe_run: int
    #: an audit being priced: [its depth, its steps, the running depth's steady step time, the sum of its
    #: step times so far, its steps seen, other outcomes seen before them] (``_watch_audit``)
    audit_watch: list[float] | None
    choice: Choice
    probes: ProbeSchedule
    #: per bucket and depth index: measured over a run of two steps or more. Single steps are guesses:
    #: an engine's first steps of a kind run cold, and one step after a switch pays for the switch
    #: (``_fold_times``).
    run_measured: list[list[bool]]
    #: per depth index: the engine ran something shallower when this depth was decided (votes), and
    #: depths given up on for that reason.
    clamp_votes: list[int]
    disabled: list[bool]
    disabled_at: int
    refresh_at: list[int]
    cur: int
    #: the latest decision's batch size (for a malformed one, and the estimates) and depth
    last_batch: int
    last_k: int
    switched: int
    last_t: object
    # aliases (``ALIASES``), bound by ``bind``
    bufs: list[bytearray]
    rq: list[tuple[int, Any, bytes]]
    best: list[int]
    v: list[list[float]]
    visits: list[int]
    probe_at: list[int]

    @classmethod
    def fresh(
        cls, c: CostModelConfig, arms: tuple[int, ...], grid: BucketGrid, cost_model: StepCostModel | None
    ) -> LoopState:
        """The state of a policy that has seen nothing (its estimates still to be computed)."""
        n_b, n_a = len(grid), len(arms)
        acc = AcceptanceEstimator(
            max(arms), c.prior_acceptance, c.acceptance_halflife, c.acceptance_halflife * _IDLE_FORGET
        )
        reqs = RequestAcceptance(max(arms), arms)
        choice = Choice(n_b, n_a, c.switch_margin)
        probes = ProbeSchedule(n_b, n_a, c.probe_budget, c.max_probe_interval, c.max_probe_share)
        expected = [1.0] * n_a
        return cls(
            step=0,
            acc=acc,
            reqs=reqs,
            batch_ids=None,
            batch_at=0,
            batch_gap=1,
            batch_sample=(),
            batch_n=0,
            look=0,
            look_i=0,
            look_after=0,
            look_gap=REPRICE_GROWTH,
            pop=TwoPoint(c.prior_acceptance, c.prior_acceptance, 0.0),
            pop_sums={},
            chg_on=c.change_threshold is not None,
            chg=ChangeDetector(
                arms, _CHANGE_SLACK, math.inf if c.change_threshold is None else c.change_threshold
            ),
            k_prev=-1,
            fast=c.update_interval,
            a_hi=c.prior_acceptance,
            acc_steps=0,
            acc_folded=0,
            timed=False,
            acc_version=-1,
            expected=expected,
            expected_pop=expected,
            costs=StepCosts(grid, arms, c.cost_halflife, cost_model, c.prior_weight, c.prior_mismatch_ratio),
            pending=[],
            agg_batch=-1,
            agg_k=-1,
            agg_len=None,
            agg_t=0.0,
            agg_n=0,
            agg_step=0,
            agg_switch=0,
            transition=0.0,
            transition_n=0,
            resume=0.0,
            resume_n=0,
            probe_left=0,
            probe_run=0,
            audit_watch=None,
            choice=choice,
            probes=probes,
            run_measured=[[False] * n_a for _ in range(n_b)],
            clamp_votes=[0] * n_a,
            disabled=[False] * n_a,
            disabled_at=NEVER,
            refresh_at=[0] * n_b,
            cur=-1,
            last_batch=1,
            last_k=-1,
            switched=NEVER,
            last_t=None,
            bufs=acc.bufs,
            rq=reqs.pending,
            best=choice.best,
            v=choice.v,
            visits=probes.visits,
            probe_at=probes.probe_at,
        )

    def bind(self) -> None:
        """Point the aliases at the parts' own lists again (after a part or one of its lists was replaced)."""
        self.bufs = self.acc.bufs
        self.rq = self.reqs.pending
        self.best, self.v = self.choice.best, self.choice.v
        self.visits, self.probe_at = self.probes.visits, self.probes.probe_at


#: The state's objects as ``snapshot`` saves them: each with the slots it does not save (fixed by the config,
#: or aliases), and the fields of no fixed kind or length.
CLASSES: Classes = {
    LoopState: frozenset(ALIASES),
    AcceptanceEstimator: frozenset(),
    RequestAcceptance: frozenset(),
    TwoPoint: frozenset(),
    ChangeDetector: frozenset(),
    StepCosts: frozenset({"model", "grid", "arms"}),
    CostCells: frozenset(),
    Choice: frozenset(),
    ProbeSchedule: frozenset(),
}
LOOSE: Classes = {
    LoopState: frozenset({"batch_sample"}),
    ProbeSchedule: frozenset({"prices", "priced", "switch", "measure_switch"}),
}
