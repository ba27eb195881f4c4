"""Orchestration: profile + workload + comparators -> every (scenario, comparator) run, in parallel.

Each run is independent and deterministic given its inputs, so runs go to worker processes (``jobs``) and the
numbers do not depend on how many there are. The decide() charge of each policy is measured here, once, in
the parent process (median of a few hundred calls on a fresh instance), or fixed by ``decide_cost_us``.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError, short_repr
from ..profiles import CostProfile, ProfileError, load_profile, with_off_cost
from .acceptance import AcceptanceModel
from .comparators import (
    REFERENCE_KINDS,
    Comparator,
    PolicyDecider,
    _resolve,
    build_decider,
    build_policy,
    default_comparators,
    measure_decide_cost_s,
)
from .engine import DeciderSwap, EngineConfig, RunResult, SimProfile, simulate
from .hint_mix import HintMix
from .progress import ProgressBar
from .scenario import RequestShape, Scenario
from .swap import PolicySwap
from .warm import takes_state
from .workloads import load_workload

__all__ = [
    "DEFAULT_PROFILE",
    "DEFAULT_WORKLOAD",
    "DEFAULT_CONCURRENCY",
    "SimulationSpec",
    "RunOutcome",
    "Simulation",
    "run_simulation",
]

#: The default scenario (``specpolicy simulate`` without arguments): the field report specpolicy started from,
#: at its own concurrencies. Speculation pays at 1 and loses from 10 on, so the report shows both regimes.
DEFAULT_PROFILE = "seed-k25-tp8-pcie"
DEFAULT_WORKLOAD = "sweep"
DEFAULT_CONCURRENCY = (1, 10, 70, 250)
#: The command line's decide() charge per decode step, in microseconds: a round bound above the measured
#: median of every shipped policy (cost_model, the dearest, 0.6 us on a 2-core host,
#: docs/results/performance.md), so that a report is the same on every run and host. ``--measure-decide-cost``
#: charges the measured one.
DEFAULT_DECIDE_COST_US = 1.0


@dataclass(frozen=True)
class SimulationSpec:
    """Everything ``specpolicy simulate`` takes. ``policies`` None = every registered policy, defaults;
    ``acceptance`` / ``shape`` None = the reference population (Beta(7, 3); 512 / 256 tokens, +-50%)."""

    profile: str = DEFAULT_PROFILE
    workload: str = DEFAULT_WORKLOAD
    policies: tuple[Any, ...] | None = None
    seed: int = 0
    duration_s: float | None = None
    concurrency: tuple[int, ...] | None = None
    decide_cost_us: float | None = None
    off_cost: str | None = None
    feedback_lag: int = 0
    max_running: int = 256
    jitter: float = 0.01
    switch_cost_ms: float = 0.0
    jobs: int | None = None
    timeline_bin_s: float | None = None
    references: bool = True
    track_requests: bool = False
    acceptance: AcceptanceModel | None = None
    shape: RequestShape | None = None
    hints: HintMix | None = None
    #: every policy row's policy is replaced mid-run (``sim.swap``); None: no change
    swap: PolicySwap | None = None
    #: a saved policy state (``warm.read_state``): the policies it belongs to start from it
    warm_start: Mapping[str, Any] | None = None
    #: keep each policy's state at the end of its runs (``RunResult.policy_state``)
    save_state: bool = False

    def __post_init__(self) -> None:
        if self.decide_cost_us is not None and not (
            math.isfinite(self.decide_cost_us) and self.decide_cost_us >= 0
        ):
            raise ConfigError(f"--decide-cost-us must be a number >= 0, got {self.decide_cost_us!r}")
        if self.jobs is not None and self.jobs < 1:
            raise ConfigError(f"--jobs must be >= 1, got {self.jobs!r}")
        if type(self.max_running) is not int or self.max_running < 1:
            raise ConfigError(f"--max-running must be an integer >= 1, got {self.max_running!r}")
        if self.feedback_lag not in (0, 1):
            raise ConfigError(f"--feedback-lag must be 0 or 1, got {self.feedback_lag!r}")
        if not (math.isfinite(self.jitter) and 0 <= self.jitter < 1):
            raise ConfigError(f"--jitter must be in [0, 1), got {self.jitter!r}")
        if not (math.isfinite(self.switch_cost_ms) and 0 <= self.switch_cost_ms < 10_000):
            raise ConfigError(f"--switch-cost-ms must be in [0, 10000), got {self.switch_cost_ms!r}")
        if self.off_cost not in (None, "catch_up", "lazy"):
            raise ConfigError(f"--off-cost must be catch_up or lazy, got {self.off_cost!r}")


@dataclass(frozen=True)
class RunOutcome:
    comparator: Comparator
    scenario: Scenario
    decide_cost_s: float
    result: RunResult

    @property
    def concurrency(self) -> int | None:
        return self.scenario.concurrency


@dataclass(frozen=True)
class Simulation:
    """All runs of one ``simulate`` call, in report order (scenario-major, comparator order within)."""

    spec: SimulationSpec
    profile: CostProfile
    workload: str
    outcomes: tuple[RunOutcome, ...]
    notes: tuple[str, ...] = ()
    wall_s: float = 0.0
    decide_costs_s: dict[str, float] = field(default_factory=dict)


_PROFILES: dict[tuple[str, str | None], CostProfile] = {}


def resolve_profile(ref: str, off_cost: str | None) -> CostProfile:
    key = (ref, off_cost)
    prof = _PROFILES.get(key)
    if prof is None:
        try:
            prof = load_profile(ref)
        except ProfileError as exc:
            raise ProfileError(f"--profile: {exc}") from None
        if off_cost is not None:
            prof = with_off_cost(prof, off_cost)  # type: ignore[arg-type]
        _PROFILES[key] = prof
    return prof


_progress_counter: Any = None


def _init_worker(counter: Any) -> None:
    global _progress_counter
    _progress_counter = counter


def _report_progress(sim_s: float) -> None:
    c = _progress_counter
    if c is not None:
        with c.get_lock():
            c.value += sim_s


@dataclass(frozen=True)
class _Task:
    profile_ref: str
    off_cost: str | None
    scenario: Scenario
    comparator: Comparator
    config: EngineConfig
    track_requests: bool
    swap: PolicySwap | None = None
    warm_state: Mapping[str, Any] | None = None


def _swap_of(task: _Task) -> DeciderSwap | None:
    """The mid-run change of the task's policy (set on the rows of the policies under test only)."""
    swap = task.swap
    if swap is None:
        return None
    to = Comparator("swap", "policy", swap.to)
    return DeciderSwap(PolicyDecider(build_policy(to)), swap.at_s, swap.at_step)


def _run_one(task: _Task, profile: SimProfile, progress: Any) -> RunResult:
    return simulate(
        task.scenario,
        profile,
        build_decider(task.comparator, profile, task.warm_state),
        task.config,
        track_requests=task.track_requests,
        progress=progress,
        swap=_swap_of(task),
    )


def _run_task(task: _Task) -> RunResult:
    return _run_one(task, resolve_profile(task.profile_ref, task.off_cost), _report_progress)


def _jobs(requested: int | None, n_tasks: int) -> int:
    if requested is not None:
        return max(1, min(requested, n_tasks))
    return max(1, min(os.cpu_count() or 1, n_tasks))


def run_simulation(spec: SimulationSpec, *, progress: bool | None = None) -> Simulation:
    """Run every comparator on every scenario of the workload. ``progress`` None: a bar on a terminal."""
    t0 = time.perf_counter()
    profile = resolve_profile(spec.profile, spec.off_cost)
    scenarios = load_workload(
        spec.workload,
        profile=profile,
        seed=spec.seed,
        duration_s=spec.duration_s,
        concurrency=spec.concurrency,
        shape=spec.shape,
        acceptance=spec.acceptance,
        hints=spec.hints,
    )
    comparators, notes = default_comparators(
        profile.max_steps, spec.policies, profile_ref=spec.profile, include_references=spec.references
    )
    if profile.off_cost == "lazy":
        # SGLang's own rule runs its off steps SGLang's way, with a draft pass on each
        # (docs/getting-started/simulator.md).
        comparators = [replace(c, off_cost="catch_up") if c.kind == "sglang" else c for c in comparators]
        if any(c.kind == "sglang" for c in comparators):
            notes.append(
                "sglang-adaptive runs its off steps SGLang's own way, a draft pass on each (catch_up); the "
                "other rows run the specpolicy adapter's lazy off step"
            )
    swap = spec.swap
    if swap is not None:  # a prior pointed at the simulated profile, as for the rows' own policies
        label, to = _resolve(swap.to, spec.profile)
        swap = PolicySwap(to, swap.at_s, swap.at_step)
        notes.append(
            f"every policy under test is replaced by {label} {swap.when()} (a live policy change; the "
            "references and static rows run unchanged); each row keeps its own decide() charge"
        )
    # the rows of the policies under test, not the references (static-k, schedule-vllm, sglang-adaptive)
    tested = {
        c.label
        for c in default_comparators(
            profile.max_steps, spec.policies, profile_ref=spec.profile, include_references=False
        )[0]
    }
    warm_labels = _warm_labels(spec, [c for c in comparators if c.label in tested], notes)
    costs: dict[str, float] = {}
    for comp in comparators:
        if comp.kind == "never" or comp.kind in REFERENCE_KINDS:
            costs[comp.label] = 0.0
        elif spec.decide_cost_us is not None:
            costs[comp.label] = spec.decide_cost_us * 1e-6
        else:
            costs[comp.label] = measure_decide_cost_s(comp)
    tasks: list[_Task] = []
    for sc in scenarios:
        for comp in comparators:
            cfg = EngineConfig(
                max_running=spec.max_running,
                feedback_lag=spec.feedback_lag,
                decide_cost_s=costs[comp.label],
                jitter=spec.jitter,
                switch_cost_s=spec.switch_cost_ms * 1e-3,
                speculative=comp.kind != "never",
                seed=spec.seed,
                timeline_bin_s=spec.timeline_bin_s,
                save_state=spec.save_state and comp.label in tested,
            )
            off = comp.off_cost if comp.off_cost is not None else spec.off_cost
            row_swap = swap if comp.label in tested else None
            warm = spec.warm_start if comp.label in warm_labels else None
            tasks.append(_Task(spec.profile, off, sc, comp, cfg, spec.track_requests, row_swap, warm))
    results = _execute(tasks, _jobs(spec.jobs, len(tasks)), progress)
    outcomes = tuple(
        RunOutcome(task.comparator, task.scenario, costs[task.comparator.label], res)
        for task, res in zip(tasks, results, strict=True)
    )
    clamped: dict[str, list[tuple[int | None, int]]] = {}
    for o in outcomes:
        if o.result.policy_errors:
            notes.append(
                f"{o.comparator.label}: decide() failed on {o.result.policy_errors} steps (they ran the "
                f"engine's default depth, the profile's deepest); first: {o.result.first_error}"
            )
        if o.result.clamped_steps:
            clamped.setdefault(o.comparator.label, []).append((o.concurrency, o.result.clamped_steps))
    for label, where in clamped.items():
        levels = [c for c, _ in where if c is not None]
        at = f" (at concurrency {', '.join(map(str, levels))})" if levels else ""
        notes.append(
            f"{label}: {sum(n for _, n in where)} decisions deeper than the profile's {profile.max_steps} "
            f"were clamped to {profile.max_steps}{at}"
        )
    if any(o.result.extrapolated for o in outcomes):
        notes.append(
            f"extrapolated: some steps ran outside profile {profile.name!r}'s measured grid "
            "(larger batches or longer contexts than measured); costs there are linear extrapolations"
        )
    return Simulation(
        spec=spec,
        profile=profile,
        workload=scenarios[0].workload if len(scenarios) == 1 else spec.workload,
        outcomes=outcomes,
        notes=tuple(dict.fromkeys(notes)),
        wall_s=time.perf_counter() - t0,
        decide_costs_s=costs,
    )


def _warm_labels(spec: SimulationSpec, tested: Sequence[Comparator], notes: list[str]) -> set[str]:
    """The policies under test that start from ``spec.warm_start`` (a note says which); ConfigError when
    none does."""
    state = spec.warm_start
    if state is None:
        return set()
    labels = {c.label for c in tested if c.kind == "policy" and takes_state(build_policy(c), state)}
    if not labels:
        raise ConfigError(
            f"--warm-start: the state is {state.get('policy')!r}'s with config "
            f"{short_repr(state.get('config'))}, which no simulated policy has (name it with --policy)"
        )
    notes.append(f"warm start: {', '.join(sorted(labels))} start from the saved state; the others start cold")
    return labels


def _execute(tasks: Sequence[_Task], jobs: int, progress: bool | None) -> list[RunResult]:
    total = sum(t.scenario.duration_s for t in tasks)
    bar = ProgressBar(total, enabled=progress)
    if jobs == 1:
        done = 0.0

        def tick(sim_s: float) -> None:
            nonlocal done
            done += sim_s
            bar.update(done)

        out = []
        for task in tasks:
            out.append(_run_one(task, resolve_profile(task.profile_ref, task.off_cost), tick))
        bar.close()
        return out
    methods = mp.get_all_start_methods()
    ctx = mp.get_context("fork" if "fork" in methods else "spawn")
    counter = ctx.Value("d", 0.0)
    # Longest runs first keeps both workers busy to the end.
    order = sorted(range(len(tasks)), key=lambda i: -tasks[i].scenario.duration_s)
    results: list[RunResult | None] = [None] * len(tasks)
    with ProcessPoolExecutor(
        max_workers=jobs, mp_context=ctx, initializer=_init_worker, initargs=(counter,)
    ) as pool:
        futures: dict[Future[RunResult], int] = {pool.submit(_run_task, tasks[i]): i for i in order}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
            for f in finished:
                results[futures[f]] = f.result()
            bar.update(counter.value)
    bar.close()
    return [r for r in results if r is not None]
