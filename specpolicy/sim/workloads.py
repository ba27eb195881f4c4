"""Workloads: what arrives at the simulated engine, when, and how hard it is to draft for.

A workload expands into one or more ``Scenario`` values (a sweep gives one per concurrency level). A scenario
is plain data (picklable, so runs can go to worker processes): either a closed loop with a piecewise-constant
target of requests in the system (a finished request is replaced at once while below the target), or an open
loop with explicit arrivals; plus acceptance phases (the population's mean per-token acceptance over time).

Request shapes (``RequestShape``: prompt and output length means and spreads) and acceptance (an
``AcceptanceModel``: a Beta or a mixture of Betas) come from a stream indexed by request number and seeded per
block, so the i-th request is the same for every policy simulated on the scenario (common random numbers).

Built-ins (reference values from the simulator issue; durations are simulated seconds):
- ``sweep``: closed loop at each of ``--concurrency`` levels (default 1, 2, 4, ..., 256), 60 s each.
- ``ramp``: closed loop whose concurrency rises from 1 to 256 and back over 600 s, geometrically (equal time
  at every octave of load, as in the sweep).
- ``bursty``: open-loop Poisson arrivals, 10x the calm rate for 10 s of every 60 s, averaging (bursts
  included) the rate that keeps 32 requests in flight on a speculation-free engine (Little's law).
- ``transition``: closed loop at concurrency 32 whose mean acceptance alternates 0.85 / 0.35 every 60 s.
- a JSONL file, one request per line: ``{"arrival_s": 0.0, "prompt_tokens": 512, "output_tokens": 256,
  "acceptance": 0.7}`` (acceptance optional: drawn from the model when absent); runs until every request is
  done unless ``--duration`` cuts it.
- a step trace (``specpolicy-trace/1``, as the engine adapters write it): replayed as a closed loop whose
  concurrency follows the trace's batch size + queue and whose acceptance follows the trace's, per 10 s.

Any workload may give a fraction of its requests a per-request hint (``HintMix``, ``--hints``): ``off``, or
``max_depth=N``; which requests get one is a hash of the request number, the same for every policy.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from ..hints import OffRule
from ..mode import MAX_NUM_STEPS
from .acceptance import AcceptanceModel, BetaAcceptance, hash_uniform

__all__ = [
    "BUILTIN",
    "Builtin",
    "BuildArgs",
    "WORKLOADS",
    "DEFAULT_SWEEP_LEVELS",
    "HintMix",
    "RequestShape",
    "Requests",
    "RequestStream",
    "Scenario",
    "load_workload",
    "parse_concurrency",
    "parse_hint_mix",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_SWEEP_LEVELS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_BLOCK = 1024


class _NeverStep(Protocol):
    def never_step_s(self, batch_size: float, seq_len: float | None = None) -> float: ...

    def prefill_s(self, num_tokens: int) -> float: ...


@dataclass(frozen=True)
class RequestShape:
    """Prompt and output lengths, each uniform within +-spread of its mean (reference: 512, 256, +-50%)."""

    prompt_mean: int = 512
    output_mean: int = 256
    prompt_spread: float = 0.5
    output_spread: float = 0.5

    def __post_init__(self) -> None:
        for name in ("prompt_mean", "output_mean"):
            v = getattr(self, name)
            if type(v) is not int or v < 1:
                raise ConfigError(f"request shape: {name} must be an integer >= 1, got {v!r}")
        for name in ("prompt_spread", "output_spread"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 <= v < 1.0):
                raise ConfigError(f"request shape: {name} must be in [0, 1), got {v!r}")

    @staticmethod
    def _bounds(mean: int, spread: float) -> tuple[int, int]:
        return max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))

    def prompt_bounds(self) -> tuple[int, int]:
        return self._bounds(self.prompt_mean, self.prompt_spread)

    def output_bounds(self) -> tuple[int, int]:
        return self._bounds(self.output_mean, self.output_spread)

    def describe(self) -> str:
        return (
            f"prompt {self.prompt_mean} tokens +-{self.prompt_spread:.0%}, "
            f"output {self.output_mean} tokens +-{self.output_spread:.0%}"
        )

    def to_json(self) -> dict[str, float]:
        return {
            "prompt_mean": self.prompt_mean,
            "prompt_spread": self.prompt_spread,
            "output_mean": self.output_mean,
            "output_spread": self.output_spread,
        }


_OFF_RULES = ("any", "majority", "all")


@dataclass(frozen=True)
class HintMix:
    """Per-request hints in a workload: a fraction ``off`` of the requests opts out, a further fraction
    ``capped`` says ``max_depth``; ``per_request`` runs them as an engine that verifies per request (vLLM:
    each request's drafts are cut to its allowance), otherwise one depth per batch under ``off_rule``
    (SGLang)."""

    off: float = 0.0
    capped: float = 0.0
    max_depth: int = 1
    per_request: bool = False
    off_rule: OffRule = "majority"

    def __post_init__(self) -> None:
        for name in ("off", "capped"):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
                raise ConfigError(f"--hints: {name} must be a fraction in [0, 1], got {v!r}")
        if self.off + self.capped > 1.0:
            raise ConfigError(f"--hints: off + capped must be <= 1, got {self.off + self.capped!r}")
        if type(self.max_depth) is not int or not 1 <= self.max_depth <= MAX_NUM_STEPS:
            raise ConfigError(
                f"--hints: max_depth must be an int in [1, {MAX_NUM_STEPS}], got {self.max_depth!r}"
            )
        if self.off_rule not in _OFF_RULES:
            raise ConfigError(f"--hints: rule must be one of {', '.join(_OFF_RULES)}, got {self.off_rule!r}")

    def allowances(self, seed: int, request_ids: IntArray) -> IntArray:
        """Each request's allowance: 0 (off), ``max_depth`` (capped) or -1 (no hint)."""
        u = hash_uniform(seed ^ 0x4172, request_ids, np.zeros(len(request_ids), dtype=np.int64))
        out = np.full(len(request_ids), -1, dtype=np.int64)
        out[u < self.off + self.capped] = self.max_depth
        out[u < self.off] = 0
        return out

    def to_json(self) -> dict[str, Any]:
        return {"off": self.off, "capped": self.capped, "max_depth": self.max_depth,
                "per_request": self.per_request, "off_rule": self.off_rule}


def parse_hint_mix(text: str | None) -> HintMix | None:
    """``--hints off=F[,capped=F,max_depth=N][,per_request=true][,rule=any|majority|all]``, or None."""
    if text is None or not text.strip():
        return None
    forms = "off=F[,capped=F,max_depth=N][,per_request=true|false][,rule=any|majority|all]"
    kw: dict[str, Any] = {}
    for part in text.split(","):
        key, eq, value = (s.strip() for s in part.partition("="))
        if not eq or key not in ("off", "capped", "max_depth", "per_request", "rule") or key in kw:
            raise ConfigError(f"--hints: expected {forms}, got {text!r}")
        try:
            if key in ("off", "capped"):
                kw[key] = float(value)
            elif key == "max_depth":
                kw[key] = int(value)
            elif key == "per_request":
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                kw[key] = value.lower() in ("true", "1")
            else:
                kw["off_rule"] = value
        except ValueError:
            raise ConfigError(f"--hints: {key} has a bad value {value!r} ({forms})") from None
    return HintMix(**kw)


@dataclass(frozen=True, eq=False)
class Requests:
    """Explicit requests sorted by arrival; ``acceptance`` NaN means "draw from the acceptance model"."""

    arrival_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    acceptance: FloatArray

    def __len__(self) -> int:
        return len(self.arrival_s)


@dataclass(frozen=True, eq=False)
class Scenario:
    """One simulation input. Exactly one of ``closed_loop`` / ``requests`` is set."""

    workload: str
    duration_s: float
    concurrency: int | None = None
    closed_loop: tuple[tuple[float, int], ...] | None = None
    requests: Requests | None = None
    acceptance_phases: tuple[tuple[float, float], ...] = ()
    shape: RequestShape = field(default_factory=RequestShape)
    acceptance: AcceptanceModel = field(default_factory=BetaAcceptance)
    drain: bool = False
    warmup_s: float = 0.0
    prewarmed: bool = False
    hints: HintMix | None = None

    def __post_init__(self) -> None:
        if (self.closed_loop is None) == (self.requests is None):
            raise ValueError("a scenario is either a closed loop or a list of requests")
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ValueError(f"duration must be a finite number of seconds > 0, got {self.duration_s!r}")
        if not 0.0 <= self.warmup_s < self.duration_s:
            raise ValueError(f"warm-up must be in [0, duration), got {self.warmup_s!r}")
        if self.closed_loop is not None and (
            not self.closed_loop or any(c < 1 for _, c in self.closed_loop) or self.closed_loop[0][0] > 0
        ):
            raise ValueError("a closed loop needs a concurrency >= 1 at every time, starting at t=0")

    @property
    def time_varying(self) -> bool:
        return self.concurrency is None


class RequestStream:
    """Request attributes by index: block ``i // 1024`` is drawn from its own seeded generator."""

    def __init__(self, seed: int, shape: RequestShape, acceptance: AcceptanceModel) -> None:
        self.seed = seed
        self.shape = shape
        self.acceptance = acceptance
        self._blocks: dict[int, tuple[IntArray, IntArray, FloatArray]] = {}

    def _block(self, b: int) -> tuple[IntArray, IntArray, FloatArray]:
        blk = self._blocks.get(b)
        if blk is None:
            rng = np.random.default_rng([self.seed, b, 0x5EC])
            plo, phi = self.shape.prompt_bounds()
            olo, ohi = self.shape.output_bounds()
            prompt = rng.integers(plo, phi + 1, size=_BLOCK, dtype=np.int64)
            out = rng.integers(olo, ohi + 1, size=_BLOCK, dtype=np.int64)
            acc = self.acceptance.draw(rng, _BLOCK)
            blk = (prompt, out, acc)
            self._blocks[b] = blk
        return blk

    def get(self, index: int) -> tuple[int, int, float]:
        prompt, out, acc = self._block(index // _BLOCK)
        j = index % _BLOCK
        return int(prompt[j]), int(out[j]), float(acc[j])


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


def _read_requests_file(path: Path) -> Requests:
    arrival: list[float] = []
    prompt: list[int] = []
    out: list[int] = []
    acc: list[float] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{where}: not JSON: {exc}") from None
            if not isinstance(obj, dict):
                raise ConfigError(f"{where}: each line must be a JSON object")
            a = obj.get("arrival_s")
            if not isinstance(a, (int, float)) or isinstance(a, bool) or not (math.isfinite(a) and a >= 0):
                raise ConfigError(f"{where}: arrival_s must be a number of seconds >= 0, got {a!r}")
            for key in ("prompt_tokens", "output_tokens"):
                v = obj.get(key)
                if type(v) is not int or v < 1:
                    raise ConfigError(f"{where}: {key} must be an integer >= 1, got {v!r}")
            p = obj.get("acceptance")
            if p is not None and (
                not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0
            ):
                raise ConfigError(f"{where}: acceptance must be a number in [0, 1] or absent, got {p!r}")
            arrival.append(float(a))
            prompt.append(obj["prompt_tokens"])
            out.append(obj["output_tokens"])
            acc.append(math.nan if p is None else float(p))
    if not arrival:
        raise ConfigError(f"{path}: workload file has no requests")
    order = np.argsort(np.asarray(arrival), kind="stable")
    return Requests(
        np.asarray(arrival, dtype=np.float64)[order],
        np.asarray(prompt, dtype=np.int64)[order],
        np.asarray(out, dtype=np.int64)[order],
        np.asarray(acc, dtype=np.float64)[order],
    )


def _per_token_acceptance(mean_accepted: float, depth: float) -> float:
    """Solve sum_{i=1..k} p**i = mean_accepted for p (chain acceptance), by bisection."""
    k = max(1, round(depth))
    lo, hi = 1e-4, 1.0 - 1e-4
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if sum(mid**i for i in range(1, k + 1)) < mean_accepted:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _trace_scenario(
    path: Path,
    duration_s: float | None,
    shape: RequestShape,
    acceptance: AcceptanceModel,
    window_s: float = 10.0,
) -> Scenario:
    from ..trace import read_trace

    t = 0.0
    t0: float | None = None
    conc: list[tuple[float, int]] = []
    acc_sum: dict[int, list[float]] = {}
    n = 0
    try:
        for rec in read_trace(path):
            if rec.rank != 0:
                continue
            n += 1
            if rec.ts is not None:
                t0 = rec.ts if t0 is None else t0
                t = rec.ts - t0
            c = max(1, rec.batch_size + rec.num_waiting)
            if not conc or conc[-1][1] != c:
                conc.append((t, c))
            if rec.last_num_steps > 0 and rec.accepted_draft_tokens:
                acc = rec.accepted_draft_tokens
                bucket = acc_sum.setdefault(int(t // window_s), [0.0, 0.0, 0.0])
                bucket[0] += sum(acc)
                bucket[1] += len(acc)
                bucket[2] += rec.last_num_steps * len(acc)
            if rec.ts is None:
                t += rec.step_time_s or 0.0
    except ValueError as exc:
        raise ConfigError(f"workload trace {path}: {exc}") from None
    if n == 0:
        raise ConfigError(f"workload trace {path}: no step records")
    phases: list[tuple[float, float]] = []
    for b in sorted(acc_sum):
        s, cnt, depth = acc_sum[b]
        p = _per_token_acceptance(s / cnt, depth / cnt)
        phases.append((b * window_s, min(0.99, max(0.01, p))))
    end = max(t, conc[-1][0] + 1.0)
    if conc[0][0] > 0:
        conc.insert(0, (0.0, conc[0][1]))
    return Scenario(
        workload=path.name,
        duration_s=duration_s or end,
        closed_loop=tuple(conc),
        acceptance_phases=tuple(phases),
        shape=shape,
        acceptance=acceptance,
    )


def _looks_like_trace(path: Path) -> bool:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(obj, dict) and (
                    obj.get("kind") == "header" or ("batch_size" in obj and "num_steps" in obj)
                )
    return False


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
    if _looks_like_trace(path):
        return [_trace_scenario(path, duration_s, shape, acceptance)]
    reqs = _read_requests_file(path)
    return [
        Scenario(
            path.name,
            duration_s or float(reqs.arrival_s[-1]) + 1.0,
            requests=reqs,
            shape=shape,
            acceptance=acceptance,
            drain=duration_s is None,
        )
    ]
