"""Workloads: what arrives at the simulated engine, when, and how hard it is to draft for.

A workload expands into one or more ``Scenario`` values (``scenario``; a sweep gives one per concurrency
level).

Built-ins (reference values from the simulator issue; durations are simulated seconds):
- ``sweep``: closed loop at each of ``--concurrency`` levels (default 1, 2, 4, ..., 256), 60 s each.
- ``ramp``: closed loop whose concurrency rises from 1 to 256 and back over 600 s, geometrically (equal time
  at every octave of load, as in the sweep).
- ``bursty``: open-loop Poisson arrivals, 10x the calm rate for 10 s of every 60 s, averaging (bursts
  included) the rate that keeps 32 requests in flight on a speculation-free engine (Little's law).
- ``transition``: closed loop at concurrency 32 whose mean acceptance alternates 0.85 / 0.35 every 60 s.
- a file (``workload_files``): a JSONL list of requests, or a step trace replayed as a closed loop.

Any workload may give a fraction of its requests a per-request hint (``hint_mix``, ``--hints``): ``off``, or
``max_depth=N``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from ..errors import ConfigError
from .acceptance import AcceptanceModel, BetaAcceptance
from .hint_mix import HintMix
from .scenario import FloatArray, IntArray, Requests, RequestShape, RequestStream, Scenario
from .workload_files import load_file

__all__ = [
    "BUILTIN",
    "Builtin",
    "BuildArgs",
    "WORKLOADS",
    "DEFAULT_SWEEP_LEVELS",
    "load_workload",
    "parse_concurrency",
]

DEFAULT_SWEEP_LEVELS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class _NeverStep(Protocol):
    def never_step_s(self, batch_size: float, seq_len: float | None = None) -> float: ...

    def prefill_s(self, num_tokens: int) -> float: ...


def parse_concurrency(text: str) -> tuple[int, ...]:
    """``"1,10,70,250"`` -> (1, 10, 70, 250); each level an int >= 1."""
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--concurrency: expected comma-separated integers >= 1, got {text!r}") from None
    if not levels or any(c < 1 for c in levels):
        raise ConfigError(f"--concurrency: expected comma-separated integers >= 1, got {text!r}")
    return levels


def _ramp(duration_s: float, peak: int = 256) -> tuple[tuple[float, int], ...]:
    """1 -> peak -> 1, geometric in time, as a 1-second step function."""
    pts: list[tuple[float, int]] = []
    top = math.log2(peak)
    n = max(2, math.ceil(duration_s))
    for i in range(n):
        t = i * duration_s / n
        x = 1.0 - abs(2.0 * t / duration_s - 1.0)
        c = max(1, round(2.0 ** (top * x)))
        if not pts or pts[-1][1] != c:
            pts.append((t, c))
    return tuple(pts)


def _alternating(
    duration_s: float, period_s: float, values: Sequence[float]
) -> tuple[tuple[float, float], ...]:
    n = max(1, math.ceil(duration_s / period_s))
    return tuple((i * period_s, float(values[i % len(values)])) for i in range(n))


def _poisson_arrivals(rng: np.random.Generator, segments: Sequence[tuple[float, float, float]]) -> FloatArray:
    """Arrival times of a Poisson process with piecewise-constant rate: (start, end, rate) segments."""
    times: list[FloatArray] = []
    for start, end, rate in segments:
        n = int(rng.poisson(rate * (end - start)))
        times.append(np.sort(rng.uniform(start, end, size=n)))
    return np.concatenate(times) if times else np.zeros(0)


def _bursty(
    seed: int,
    duration_s: float,
    profile: _NeverStep,
    shape: RequestShape,
    acceptance: AcceptanceModel,
    in_flight: int = 32,
    burst_factor: float = 10.0,
    period_s: float = 60.0,
    burst_s: float = 10.0,
    burst_at_s: float = 20.0,
) -> Requests:
    # Little's law on a speculation-free engine at `in_flight` requests: the MEAN arrival rate, bursts
    # included, is N / latency; the calm rate is that over the mean burst factor (2.5 for 10x, 10 s of 60).
    latency = profile.prefill_s(shape.prompt_mean) + (shape.output_mean - 1) * profile.never_step_s(in_flight)
    mean_factor = (period_s - burst_s + burst_factor * burst_s) / period_s
    base = in_flight / latency / mean_factor
    segments: list[tuple[float, float, float]] = []
    t = 0.0
    while t < duration_s:
        b0, b1 = t + burst_at_s, t + burst_at_s + burst_s
        cycle_end = t + period_s
        for s, e, r in ((t, b0, base), (b0, b1, base * burst_factor), (b1, cycle_end, base)):
            s, e = min(s, duration_s), min(e, duration_s)
            if e > s:
                segments.append((s, e, r))
        t = cycle_end
    rng = np.random.default_rng([seed, 0xB0257])
    arrival = _poisson_arrivals(rng, segments)
    return Requests(arrival, *_attributes(seed, len(arrival), shape, acceptance))


def _attributes(
    seed: int, n: int, shape: RequestShape, acceptance: AcceptanceModel
) -> tuple[IntArray, IntArray, FloatArray]:
    stream = RequestStream(seed, shape, acceptance)
    prompt = np.empty(n, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    acc = np.empty(n, dtype=np.float64)
    for i in range(n):
        prompt[i], out[i], acc[i] = stream.get(i)
    return prompt, out, acc


@dataclass(frozen=True)
class BuildArgs:
    """What ``load_workload`` hands a built-in's builder (``duration_s`` already defaulted)."""

    duration_s: float
    seed: int
    profile: _NeverStep
    shape: RequestShape
    acceptance: AcceptanceModel
    concurrency: Sequence[int] | None


@dataclass(frozen=True)
class Builtin:
    """A built-in workload: how to build its scenarios, and its duration when ``--duration`` is not given."""

    build: Callable[[BuildArgs], list[Scenario]]
    duration_s: float
    takes_concurrency: bool = False


def _build_sweep(a: BuildArgs) -> list[Scenario]:
    # Start in steady state (requests already mid-output), then skip a short settling time.
    return [
        Scenario(
            "sweep",
            a.duration_s,
            concurrency=c,
            closed_loop=((0.0, c),),
            shape=a.shape,
            acceptance=a.acceptance,
            warmup_s=min(5.0, a.duration_s / 4),
            prewarmed=True,
        )
        for c in (a.concurrency or DEFAULT_SWEEP_LEVELS)
    ]


def _build_ramp(a: BuildArgs) -> list[Scenario]:
    return [
        Scenario(
            "ramp", a.duration_s, closed_loop=_ramp(a.duration_s), shape=a.shape, acceptance=a.acceptance
        )
    ]


def _build_bursty(a: BuildArgs) -> list[Scenario]:
    reqs = _bursty(a.seed, a.duration_s, a.profile, a.shape, a.acceptance)
    return [Scenario("bursty", a.duration_s, requests=reqs, shape=a.shape, acceptance=a.acceptance)]


def _build_transition(a: BuildArgs) -> list[Scenario]:
    return [
        Scenario(
            "transition",
            a.duration_s,
            closed_loop=((0.0, 32),),
            acceptance_phases=_alternating(a.duration_s, 60.0, (0.85, 0.35)),
            shape=a.shape,
            acceptance=a.acceptance,
            prewarmed=True,
        )
    ]


#: The built-in workloads by name (the module docstring describes each).
BUILTIN: Mapping[str, Builtin] = {
    "sweep": Builtin(_build_sweep, 60.0, takes_concurrency=True),
    "ramp": Builtin(_build_ramp, 600.0),
    "bursty": Builtin(_build_bursty, 600.0),
    "transition": Builtin(_build_transition, 600.0),
}
WORKLOADS = tuple(BUILTIN)


def load_workload(
    spec: str | os.PathLike[str],
    *,
    profile: _NeverStep,
    seed: int = 0,
    duration_s: float | None = None,
    concurrency: Sequence[int] | None = None,
    shape: RequestShape | None = None,
    acceptance: AcceptanceModel | None = None,
    hints: HintMix | None = None,
) -> list[Scenario]:
    """Expand a workload name or file into scenarios. ``duration_s`` None = the workload's default;
    ``hints``: per-request hints for every scenario."""
    scenarios = _load(spec, profile, seed, duration_s, concurrency, shape, acceptance)
    return scenarios if hints is None else [replace(sc, hints=hints) for sc in scenarios]


def _load(
    spec: str | os.PathLike[str],
    profile: _NeverStep,
    seed: int,
    duration_s: float | None,
    concurrency: Sequence[int] | None,
    shape: RequestShape | None,
    acceptance: AcceptanceModel | None,
) -> list[Scenario]:
    shape = shape or RequestShape()
    acceptance = acceptance or BetaAcceptance()
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise ConfigError(f"--duration must be a number of seconds > 0, got {duration_s!r}")
    name = os.fspath(spec)
    builtin = BUILTIN.get(name)
    if builtin is not None:
        if concurrency is not None and not builtin.takes_concurrency:
            raise ConfigError("--concurrency applies to the sweep workload only")
        args = BuildArgs(duration_s or builtin.duration_s, seed, profile, shape, acceptance, concurrency)
        return builtin.build(args)
    path = Path(name)
    if not path.is_file():
        raise ConfigError(
            f"--workload: {name!r} is neither a built-in workload ({', '.join(BUILTIN)}) nor a file"
        )
    if concurrency is not None:
        raise ConfigError("--concurrency applies to the sweep workload only")
    return load_file(path, duration_s, shape, acceptance)
