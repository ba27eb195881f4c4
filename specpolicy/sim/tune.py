"""``specpolicy tune``: search a policy's numeric parameters in the simulator and return the best config.

The search space comes from the policy's pydantic config model: every int, float or bool field (optional
fields only when their default is set), bounded by the field's ``ge``/``gt``/``le``/``lt`` constraints. A side
left open, or more than 16x the default away, is set around the default instead (x1/4 .. x4; +-4 around 0);
draft depths (ints bounded by MAX_NUM_STEPS) stop at the profile's deepest depth; ``--param FIELD=LO:HI``
overrides a range. Trial 0 is the default config; the rest are
random (log-uniform where a positive range spans more than 10x), deterministic per seed. Combinations the
model rejects (e.g. ``enable_at >= disable_at``) are redrawn. Each trial simulates only the policy itself,
with one fixed decide() charge (measured on the default config, or ``--decide-cost-us``), so scores differ
only by the parameters.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import types
import typing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from ..errors import ConfigError
from ..mode import MAX_NUM_STEPS
from ..policy import PolicyConfig
from ..registry import get_entry, parse_config
from .acceptance import AcceptanceModel
from .comparators import Comparator, measure_decide_cost_s
from .report import rows
from .run import SimulationSpec, resolve_profile, run_simulation
from .scenario import RequestShape

__all__ = ["Objective", "Param", "Trial", "TuneResult", "search_space", "tune", "parse_param_ranges"]

Objective = Literal["throughput", "tpot_p99", "goodput"]
OBJECTIVES: tuple[str, ...] = ("throughput", "tpot_p99", "goodput")


@dataclass(frozen=True)
class Param:
    """One searchable field: inclusive [lo, hi]; ``log`` samples log-uniformly."""

    name: str
    kind: Literal["int", "float", "bool"]
    lo: float
    hi: float
    log: bool = False

    def sample(self, rng: np.random.Generator) -> int | float | bool:
        if self.kind == "bool":
            return bool(rng.integers(0, 2))
        if self.log:
            x = math.exp(rng.uniform(math.log(self.lo), math.log(self.hi)))
        else:
            x = rng.uniform(self.lo, self.hi)
        if self.kind == "int":
            return int(min(self.hi, max(self.lo, round(x))))
        return float(x)


@dataclass(frozen=True)
class Trial:
    config: dict[str, Any]
    score: float
    metric: float


@dataclass(frozen=True)
class TuneResult:
    policy: str
    objective: str
    best: Trial
    default: Trial
    trials: tuple[Trial, ...]
    space: tuple[Param, ...]
    rejected: int
    spec: SimulationSpec = SimulationSpec()
    slo_tpot_ms: float | None = None


def _base_type(annotation: Any) -> tuple[type | None, bool]:
    """(int/float/bool or None, optional?) for an annotation such as ``int | None``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _base_type(args[0])[0], True
        return None, True
    if annotation in (int, float, bool):
        return annotation, False
    return None, False


def _bounds(info: Any) -> tuple[float | None, float | None, bool, bool]:
    lo = hi = None
    lo_open = hi_open = False
    for meta in info.metadata:
        if getattr(meta, "ge", None) is not None:
            lo = float(meta.ge)
        if getattr(meta, "gt", None) is not None:
            lo, lo_open = float(meta.gt), True
        if getattr(meta, "le", None) is not None:
            hi = float(meta.le)
        if getattr(meta, "lt", None) is not None:
            hi, hi_open = float(meta.lt), True
    return lo, hi, lo_open, hi_open


def parse_param_ranges(items: Sequence[str]) -> dict[str, tuple[float, float]]:
    """``["disable_at=8:128"]`` -> {"disable_at": (8.0, 128.0)}."""
    out: dict[str, tuple[float, float]] = {}
    for item in items:
        name, sep, rng = item.partition("=")
        lo_s, sep2, hi_s = rng.partition(":")
        try:
            lo, hi = float(lo_s), float(hi_s)
        except ValueError:
            lo = hi = math.nan
        if not sep or not sep2 or not name or not (lo <= hi):
            raise ConfigError(f"--param: expected FIELD=LO:HI with LO <= HI, got {item!r}")
        out[name.strip()] = (lo, hi)
    return out


def search_space(
    config_cls: type[PolicyConfig],
    default: PolicyConfig,
    *,
    max_steps: int,
    overrides: dict[str, tuple[float, float]] | None = None,
) -> list[Param]:
    """The searchable fields of a policy config (see the module docstring for the rules)."""
    overrides = dict(overrides or {})
    space: list[Param] = []
    for name, info in config_cls.model_fields.items():
        if name == "name":
            continue
        base, optional = _base_type(info.annotation)
        value = getattr(default, name)
        if base is None or (optional and value is None):
            if name in overrides:
                raise ConfigError(f"--param {name}: not a numeric parameter of {default.name}")
            continue
        if base is bool:
            space.append(Param(name, "bool", 0, 1))
            overrides.pop(name, None)
            continue
        kind: Literal["int", "float"] = "int" if base is int else "float"
        lo, hi, lo_open, hi_open = _bounds(info)
        v = float(value)
        if name in overrides:
            lo, hi = overrides.pop(name)
            lo_open = hi_open = False
        else:
            scale = max(abs(v), 1.0)
            wide_lo = v / 4 if v > 0 else v - 4
            wide_hi = v * 4 if v > 0 else v + 4
            if kind == "int":
                wide_lo, wide_hi = math.floor(wide_lo), math.ceil(wide_hi)
            if lo is None or lo < (v / 16 if v > 0 else v - 16 * scale):
                lo, lo_open = wide_lo, False
            if kind == "int" and hi is not None and hi >= MAX_NUM_STEPS and 0 < v <= max_steps:
                hi, hi_open = float(max_steps), False  # a draft depth: never deeper than the profile measures
            elif hi is None or hi > (16 * v if v > 0 else v + 16 * scale):
                hi, hi_open = wide_hi, False
        if kind == "float":
            span = hi - lo
            lo = lo + span * 1e-3 if lo_open else lo
            hi = hi - span * 1e-3 if hi_open else hi
        elif lo_open or hi_open:
            lo = lo + 1 if lo_open else lo
            hi = hi - 1 if hi_open else hi
        if hi <= lo:
            continue
        log = lo > 0 and hi / lo > 10
        space.append(Param(name, kind, lo, hi, log))
    if overrides:
        raise ConfigError(
            f"--param {', '.join(sorted(overrides))}: not a parameter of {default.name} "
            f"(fields: {', '.join(n for n in config_cls.model_fields if n != 'name')})"
        )
    return space


def _metric(sim_rows: Sequence[Any], objective: str, slo_tpot_ms: float | None) -> tuple[float, float]:
    """(score to maximise, the metric as reported): geometric means across scenarios (sweep levels)."""
    if objective == "throughput":
        vals = [r.output_tok_s for r in sim_rows]
    elif objective == "tpot_p99":
        vals = [r.tpot_ms_p99 for r in sim_rows]
    else:
        vals = [r.goodput_tok_s or 0.0 for r in sim_rows]
    vals = [v if math.isfinite(v) else math.inf for v in vals]
    if objective == "tpot_p99":
        metric = math.exp(sum(math.log(max(v, 1e-9)) for v in vals) / len(vals))
        return -metric, metric
    metric = math.exp(sum(math.log(max(v, 1e-9)) for v in vals) / len(vals))
    return metric, metric


def _evaluate(args: tuple[SimulationSpec, dict[str, Any], str, float | None]) -> tuple[float, float]:
    spec, config, objective, slo = args
    sim = run_simulation(replace(spec, policies=(config,)), progress=False)
    return _metric(rows(sim, slo), objective, slo)


def tune(
    policy: str,
    *,
    profile: str,
    workload: str,
    objective: str = "throughput",
    slo_tpot_ms: float | None = None,
    budget: int = 24,
    seed: int = 0,
    duration_s: float | None = None,
    concurrency: tuple[int, ...] | None = None,
    decide_cost_us: float | None = None,
    param_ranges: dict[str, tuple[float, float]] | None = None,
    jobs: int = 1,
    on_trial: Callable[[int, int, Trial], None] | None = None,
    base: dict[str, Any] | None = None,
    acceptance: AcceptanceModel | None = None,
    shape: RequestShape | None = None,
    off_cost: str | None = None,
) -> TuneResult:
    """Random search over the policy's parameters; returns the best trial (ties keep the earlier one)."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if objective == "goodput" and slo_tpot_ms is None:
        raise ConfigError("--objective goodput needs --slo-tpot-ms (the TPOT a request must meet)")
    if slo_tpot_ms is not None and not (math.isfinite(slo_tpot_ms) and slo_tpot_ms > 0):
        raise ConfigError(f"--slo-tpot-ms must be a number > 0, got {slo_tpot_ms!r}")
    if type(budget) is not int or budget < 1:
        raise ConfigError(f"--budget must be an integer >= 1, got {budget!r}")
    default_cfg = parse_config(base if base is not None else policy)
    name = default_cfg.name
    prof = resolve_profile(profile, None)
    space = search_space(
        get_entry(name).config, default_cfg, max_steps=prof.max_steps, overrides=param_ranges
    )
    if not space:
        raise ConfigError(f"policy {name!r} has no numeric parameters to tune")
    if decide_cost_us is None:
        cost_s = measure_decide_cost_s(Comparator(name, "policy", default_cfg.model_dump(mode="json")))
        decide_cost_us = cost_s * 1e6
    spec = SimulationSpec(
        profile=profile,
        workload=workload,
        seed=seed,
        duration_s=duration_s,
        concurrency=concurrency,
        decide_cost_us=decide_cost_us,
        references=False,
        jobs=1,
        acceptance=acceptance,
        shape=shape,
        off_cost=off_cost,
    )
    rng = np.random.default_rng([seed, 0x7E5E])
    base_dump = default_cfg.model_dump(mode="json")
    configs: list[dict[str, Any]] = [base_dump]
    rejected = 0
    seen = {repr(sorted(base_dump.items()))}
    attempts = 0
    while len(configs) < budget and attempts < budget * 50:
        attempts += 1
        cand = dict(base_dump)
        for p in space:
            cand[p.name] = p.sample(rng)
        try:
            cfg = parse_config(cand).model_dump(mode="json")
        except ConfigError:
            rejected += 1
            continue
        key = repr(sorted(cfg.items()))
        if key in seen:
            continue
        seen.add(key)
        configs.append(cfg)
    args = [(spec, c, objective, slo_tpot_ms) for c in configs]
    trials: list[Trial] = []

    def record(i: int, res: tuple[float, float]) -> None:
        trial = Trial(configs[i], res[0], res[1])
        trials.append(trial)
        if on_trial is not None:
            on_trial(len(trials), len(configs), trial)

    if jobs <= 1:
        for i, a in enumerate(args):
            record(i, _evaluate(a))
    else:
        methods = mp.get_all_start_methods()
        ctx = mp.get_context("fork" if "fork" in methods else "spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            for i, res in enumerate(pool.map(_evaluate, args)):
                record(i, res)
    best = trials[0]
    for t in trials[1:]:
        if t.score > best.score:
            best = t
    return TuneResult(
        name, objective, best, trials[0], tuple(trials), tuple(space), rejected, spec, slo_tpot_ms
    )


UNITS = {"throughput": "output tok/s", "tpot_p99": "ms TPOT p99", "goodput": "goodput tok/s"}


@dataclass(frozen=True)
class Standing:
    """One row of ``tune``'s comparison: the objective's metric (geometric mean over the scenarios)."""

    label: str
    metric: float
    score: float


def compare(res: TuneResult, *, jobs: int = 1) -> tuple[list[Standing], list[str]]:
    """The tuned config against its default, cost_model's default, the best fixed depth and never, on the
    same scenarios, and the text that says whether to use it (the last line)."""
    from .verdict import TIE

    configs: list[dict[str, Any]] = [res.best.config]
    for extra in (res.default.config, parse_config("cost_model").model_dump(mode="json")):
        if extra not in configs:
            configs.append(extra)
    sim = run_simulation(
        replace(res.spec, policies=tuple(configs), references=True, jobs=jobs), progress=False
    )
    all_rows = rows(sim, res.slo_tpot_ms)
    by_label: dict[str, list[Any]] = {}
    for r in all_rows:
        by_label.setdefault(r.policy, []).append(r)
    tried = [o.comparator for o in sim.outcomes]
    policy_labels = list(
        dict.fromkeys(
            c.label for c in tried if c.kind == "policy" and not c.is_static and c.label != "schedule-vllm"
        )
    )
    roles = ["tuned", "default config", "cost_model default"][: 3 if res.policy != "cost_model" else 2]
    names = dict(zip(policy_labels, roles, strict=False))
    scored = {lbl: _metric(rs, res.objective, res.slo_tpot_ms) for lbl, rs in by_label.items()}
    statics = [lbl for lbl in scored if lbl.startswith("static-")]
    best_static = max(statics, key=lambda lbl: scored[lbl][0])
    shown = [*policy_labels, best_static, "never"]
    out = [Standing(lbl, scored[lbl][1], scored[lbl][0]) for lbl in shown if lbl in scored]
    unit = UNITS[res.objective]
    tuned_label = policy_labels[0]
    t_score = scored[tuned_label][0]
    lines = [f"{res.objective} ({unit}, geometric mean over the scenarios), same scenarios and seed:"]
    for st in out:
        role = names.get(st.label, "best fixed depth" if st.label == best_static else "no speculation")
        ratio = _ratio(t_score, st.score, res.objective)
        vs = "" if st.label == tuned_label else f"tuned x{ratio:.3f} of it"
        lines.append(f"  {role:<18} {st.metric:9.4g} {unit}  {vs:<20} {st.label}".rstrip())
    rivals = [st for st in out if st.label != tuned_label]
    better = [st for st in rivals if _ratio(t_score, st.score, res.objective) < 1 - TIE]
    if better:
        top = max(better, key=lambda st: st.score)
        lines.append(
            f"use it: no; {top.label} does better here (the tuned config is "
            f"x{_ratio(t_score, top.score, res.objective):.3f} of it)"
        )
    else:
        tied = [st.label for st in rivals if _ratio(t_score, st.score, res.objective) < 1 + TIE]
        tie = f" (ties within {TIE:.1%} with {', '.join(tied)})" if tied else ""
        lines.append(f"use it: yes, it is at least as good as every row above here{tie}")
    return out, lines


def _ratio(tuned: float, other: float, objective: str) -> float:
    """How the tuned score compares with another, > 1 when the tuned one is better (scores are maximised:
    negative for tpot_p99)."""
    if objective == "tpot_p99":
        return other / tuned if tuned else math.nan
    return tuned / other if other else math.nan
