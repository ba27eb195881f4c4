"""A policy against the references on a matrix of scenarios: profiles x workloads x acceptance populations.

Each cell is one ``simulate`` run of the policy with every reference row; it reports the policy's throughput
over the per-step oracle's, over best-fixed's (the best static-k in hindsight, at every sweep level: the
worst level), over the lookahead oracle's and over SGLang's rule (when its class is available; None
otherwise). The workloads are the built-ins plus a daily cycle, a requests file written per profile whose
arrival rate follows one sinusoidal "day" (a trough of a third of the mean rate) sized, like ``bursty``, to
keep ``in_flight`` requests on a speculation-free engine on average. Durations are short by default, so the
whole matrix runs in minutes; ``scripts/goals_matrix.py`` prints it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..registry import parse_config
from .acceptance import AcceptanceModel, BetaAcceptance, BetaMixture
from .comparators import policy_label
from .report import Reference, Row, references, rows
from .run import SimulationSpec, resolve_profile, run_simulation
from .scenario import RequestShape, RequestStream

__all__ = [
    "POPULATIONS",
    "WORKLOADS",
    "Cell",
    "command_inputs",
    "daily_cycle_file",
    "format_matrix",
    "run_matrix",
]

#: The acceptance populations of the matrix: the reference Beta(7, 3), low (mean 0.35), and half easy
#: (~0.9) half hard (~0.2).
POPULATIONS: Mapping[str, AcceptanceModel] = {
    "reference": BetaAcceptance(),
    "low-0.35": BetaAcceptance.from_mean(0.35),
    "mixed-0.9/0.2": BetaMixture(
        ((0.5, BetaAcceptance.from_mean(0.9)), (0.5, BetaAcceptance.from_mean(0.2)))
    ),
}
#: Workload -> simulated seconds (per level for the sweep).
WORKLOADS: Mapping[str, float] = {
    "sweep": 10.0,
    "ramp": 60.0,
    "bursty": 60.0,
    "transition": 120.0,
    "daily": 60.0,
}
SWEEP_LEVELS = (1, 8, 64)


@dataclass(frozen=True)
class Cell:
    profile: str
    workload: str
    population: str
    vs_oracle: float | None
    vs_best_fixed: float | None
    vs_lookahead: float | None
    vs_sglang: float | None
    #: the sweep level (or None) of the worst vs_best_fixed
    worst_level: int | None


def daily_cycle_file(
    path: Path, profile: str, duration_s: float, seed: int = 0, in_flight: int = 32, trough: float = 1 / 3
) -> Path:
    """Write a requests file of one compressed day: Poisson arrivals whose rate follows a sinusoid from
    ``trough`` x to (2 - trough) x the mean rate (lowest at t = 0), the mean keeping ``in_flight`` requests
    on a speculation-free engine (Little's law). Acceptance is left to the population."""
    prof = resolve_profile(profile, None)
    shape = RequestShape()
    latency = prof.prefill_s(shape.prompt_mean) + (shape.output_mean - 1) * prof.never_step_s(in_flight)
    mean_rate = in_flight / latency
    rng = np.random.default_rng([seed, 0xDA11])
    peak = mean_rate * (2.0 - trough)
    # Thinning: candidates at the peak rate, each kept with rate(t) / peak.
    n = int(rng.poisson(peak * duration_s))
    t = np.sort(rng.uniform(0.0, duration_s, size=n))
    rate = mean_rate * (1.0 - (1.0 - trough) * np.cos(2.0 * math.pi * t / duration_s))
    t = t[rng.random(n) < rate / peak]
    stream = RequestStream(seed, shape, BetaAcceptance())
    with open(path, "w", encoding="utf-8") as fh:
        for i, a in enumerate(t):
            prompt, out, _ = stream.get(i)
            fh.write(
                json.dumps({"arrival_s": round(float(a), 4), "prompt_tokens": prompt, "output_tokens": out})
            )
            fh.write("\n")
    return path


def command_inputs(policy: str, profiles: Sequence[str]) -> tuple[str | dict[str, Any], str]:
    """A script's ``--policy`` (a name or a JSON config) as the simulator takes it, and its label; every
    profile named is checked first, so that a typo fails before minutes of runs, not after. Raises
    ValueError (ConfigError, ProfileError, a JSON error) with the option's name."""
    spec: str | dict[str, Any] = json.loads(policy) if policy.lstrip().startswith("{") else policy
    label = policy_label(parse_config(spec).model_dump(mode="json"))
    for name in profiles:
        resolve_profile(name, None)
    return spec, label


def _ratio(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _cell(key: tuple[str, str, str], sim_rows: Sequence[Row], refs: Sequence[Reference], policy: str) -> Cell:
    by_level: dict[int | None, dict[str, float]] = {}
    for r in sim_rows:
        by_level.setdefault(r.concurrency, {})[r.policy] = r.output_tok_s
    ref = {x.concurrency: x for x in refs}
    oracle, best, look, sgl = [], [], [], []
    for level, tok in by_level.items():
        mine = tok.get(policy)
        if mine is None:
            continue
        x = ref[level]
        oracle.append(mine / x.oracle_tok_s if x.oracle_tok_s else None)
        best.append((mine / x.best_fixed_tok_s if x.best_fixed_tok_s else None, level))
        look.append(mine / x.lookahead_tok_s if x.lookahead_tok_s else None)
        sgl.append(mine / tok["sglang-adaptive"] if tok.get("sglang-adaptive") else None)
    known = [(v, lvl) for v, lvl in best if v is not None]
    worst = min(known, key=lambda vl: vl[0]) if known else (None, None)
    return Cell(*key, _ratio(oracle), worst[0], _ratio(look), _ratio(sgl), worst[1])


def run_matrix(
    profiles: Sequence[str],
    *,
    workloads: Mapping[str, float] = WORKLOADS,
    populations: Mapping[str, AcceptanceModel] = POPULATIONS,
    policy: Any = "cost_model",
    seed: int = 0,
    workdir: Path,
    decide_cost_us: float | None = 1.0,
    jobs: int | None = None,
    sweep_levels: Sequence[int] = SWEEP_LEVELS,
    on_cell: Callable[[Cell], None] | None = None,
) -> list[Cell]:
    """Every (profile, workload, population) cell, in that order. ``daily`` is the daily-cycle file."""
    cells: list[Cell] = []
    label = policy_label(parse_config(policy).model_dump(mode="json"))  # as the simulator labels its row
    for profile in profiles:
        for workload, duration in workloads.items():
            target = workload
            if workload == "daily":
                safe = profile.replace("/", "_").replace(".json", "")
                target = str(
                    daily_cycle_file(workdir / f"daily-{Path(safe).name}.jsonl", profile, duration, seed)
                )
            for name, acceptance in populations.items():
                spec = SimulationSpec(
                    profile=profile,
                    workload=target,
                    policies=(policy,),
                    seed=seed,
                    duration_s=duration,
                    concurrency=tuple(sweep_levels) if workload == "sweep" else None,
                    decide_cost_us=decide_cost_us,
                    acceptance=acceptance,
                    jobs=jobs,
                )
                sim = run_simulation(spec, progress=False)
                cell = _cell((profile, workload, name), rows(sim), references(sim), label)
                cells.append(cell)
                if on_cell is not None:
                    on_cell(cell)
    return cells


_COLUMNS = (
    ("x oracle", "vs_oracle"),
    ("x best fixed (worst level)", "vs_best_fixed"),
    ("x lookahead", "vs_lookahead"),
    ("x sglang-adaptive", "vs_sglang"),
)


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def format_matrix(cells: Sequence[Cell], policy: str = "cost_model") -> str:
    """One line per cell, then the worst cell of each column (the goal's view)."""
    head = ["profile", "workload", "population", *(c for c, _ in _COLUMNS)]
    table = [
        [
            c.profile,
            c.workload,
            c.population,
            *(
                _f(getattr(c, f)) + (f" @{c.worst_level}" if f == "vs_best_fixed" and c.worst_level else "")
                for _, f in _COLUMNS
            ),
        ]
        for c in cells
    ]
    widths = [max(len(r[i]) for r in [head, *table]) for i in range(len(head))]
    lines = [f"{policy} on {len(cells)} cells; ratios of its output tokens/s (the worst level of a sweep)"]
    for r in (head, *table):
        lines.append(
            "  ".join(
                x.ljust(w) if i < 3 else x.rjust(w) for i, (x, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    lines.append("")
    lines.append("worst cell per column:")
    for title, f in _COLUMNS:
        known = [c for c in cells if getattr(c, f) is not None]
        if not known:
            lines.append(f"  {title}: - (not run)")
            continue
        w = min(known, key=lambda c: getattr(c, f))
        at = f" at concurrency {w.worst_level}" if f == "vs_best_fixed" and w.worst_level else ""
        lines.append(f"  {title}: {getattr(w, f):.3f} ({w.profile}, {w.workload}{at}, {w.population})")
    return "\n".join(lines)
