"""What the live GPU check runs: engines, the phases (request batches) each engine serves, and their cost.

One engine starts per worker path and attention backend (60-130 s each on the GPU), and the policy changes
between phases through the ``gpucheck_dispatch`` test policy, so a whole comparison fits in one engine's
lifetime. Within an engine the phases come in order of importance (warm-up of every shape, checks, perf
repeats, resume cost, ramp), so a run cut short by its time budget keeps the most important results. Pure
data and pure functions: the plan, its arrival schedules and its time estimates are built and tested on any
machine.
"""

from __future__ import annotations

import bisect
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "Phase",
    "EngineRun",
    "SpecShape",
    "spec_shape",
    "ADAPTER_PATHS",
    "EAGLE3_PATHS",
    "LAUNCH_DEPTH",
    "CONCURRENCY",
    "SITTING_CONCURRENCY",
    "BACKENDS",
    "KINDS",
    "PERF_POLICIES",
    "RAMP_POLICIES",
    "RESUME_K",
    "PAIR_K",
    "SKIP_K",
    "CHECK_POLICIES",
    "HYSTERESIS_TUNED",
    "REF_TOK_S",
    "check_policies",
    "perf_policies",
    "resume_policies",
    "pair_policies",
    "ref_rate",
    "best_rate",
    "perf_tokens_for",
    "resume_tokens",
    "interleave",
    "target_concurrency",
    "ramp_schedule",
    "simulate_ramp",
    "estimate_phase_s",
    "start_estimate_s",
    "engine_estimate",
    "core_s",
    "engine_starts",
    "engine_deadline",
    "format_plan",
    "build_plan",
    "dispatch_config",
    "prompts_for",
]

#: speculative_num_steps the speculative engines launch with (topk 1, so 4 draft tokens per verify).
LAUNCH_DEPTH = 3
CONCURRENCY: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
#: The levels of a budget-limited sitting (docs/results/methodology.md, "One run").
SITTING_CONCURRENCY: tuple[int, ...] = (1, 4, 16, 64, 128)
#: v1/v2: the speculative engine with specpolicy (a draft model); base_*: a speculation-free engine
#: ("never"); plain_*: the speculative engine with specpolicy installed but not configured (SGLang's own
#: static speculation); eagle3_*: the EAGLE-3 test head (eagle3_model.py) with specpolicy,
#: topk 1; eagle3tree_v1: the same head with the seed deployment's draft tree (topk 4, 4 steps, 16 draft
#: tokens), which SGLang serves only on the non-overlap v1 worker.
PathName = Literal[
    "v1", "v2", "base_v1", "base_v2", "plain_v1", "plain_v2", "eagle3_v1", "eagle3_v2", "eagle3tree_v1"
]
#: Paths whose engine runs specpolicy's dispatcher (the others serve their phases with no policy).
ADAPTER_PATHS: tuple[str, ...] = ("v1", "v2", "eagle3_v1", "eagle3_v2", "eagle3tree_v1")
EAGLE3_PATHS: tuple[str, ...] = ("eagle3_v1", "eagle3_v2", "eagle3tree_v1")
Backend = Literal["triton", "flashinfer"]
BACKENDS: tuple[str, ...] = ("triton", "flashinfer")
Kind = Literal["warmup", "check", "perf", "resume", "ramp"]
#: Phase kinds in the order an engine serves them: the most important first, so a budget cuts the rest.
KINDS: tuple[str, ...] = ("warmup", "check", "perf", "resume", "ramp")

#: ``specpolicy tune --policy '{"name":"hysteresis","num_steps":3}' --profile h200-live-sglang --workload ramp
#: --seed 0 --decide-cost-us 2 --budget 24 --param num_steps=3:3`` on the profile re-fitted on 2026-12-01
#: from the plain-decode off step (1.05x the default config in the simulator). Off is now a plain decode,
#: so the best thresholds turn speculation off above about a dozen requests, where live the off step
#: overtook depth 3 (between 4 and 16 requests). The 2026-12-01 sittings ran the previous tuning (off from
#: 189 requests, fitted when an off step cost 2-3x a plain decode), which never turned off below 128.
HYSTERESIS_TUNED: dict[str, Any] = {
    "name": "hysteresis",
    "disable_at": 13,
    "enable_at": 6,
    "min_dwell_steps": 62,
    "num_steps": LAUNCH_DEPTH,
}

#: The seed deployment's draft tree: topk 4, 4 steps, 16 draft tokens per verify.
TREE_TOPK, TREE_STEPS, TREE_DRAFT_TOKENS = 4, 4, 16


@dataclass(frozen=True)
class SpecShape:
    """How a speculative path launches: SGLang's algorithm, the drafter's folder under ``models/``, the
    speculation shape, and the prefix of its keys in the report (``""``: the draft-model tables)."""

    algorithm: str
    draft: str
    num_steps: int
    topk: int
    draft_tokens: int
    report_prefix: str


def spec_shape(path: str, depth: int = LAUNCH_DEPTH) -> SpecShape | None:
    """The speculation a path launches with (None for the speculation-free base paths); ``depth`` is the
    chain depth of the topk-1 paths, the tree keeps its own."""
    if path.startswith("base"):
        return None
    if path.startswith("eagle3tree"):
        return SpecShape("EAGLE3", "eagle3", TREE_STEPS, TREE_TOPK, TREE_DRAFT_TOKENS, "eagle3-tree/")
    if path.startswith("eagle3"):
        return SpecShape("EAGLE3", "eagle3", depth, 1, depth + 1, "eagle3/")
    return SpecShape("STANDALONE", "draft", depth, 1, depth + 1, "")


#: Output tokens/s measured live (results/2026-11-30-sglang-0.5.12.post1-verify-off/notes.md, triton, one
#: batch of 256-token requests per point) at CONCURRENCY, per worker path and policy. Used only to size
#: batches and estimate durations; hysteresis there had the default thresholds (off from 48), a conservative
#: stand-in for the tuned one.
REF_TOK_S: dict[str, dict[str, tuple[float, ...]]] = {
    "v2": {
        "never": (457, 914, 1786, 3447, 6395, 11278, 19092, 19311),
        "sglang-static": (571, 1104, 1932, 2762, 5676, 8683, 10911, 11945),
        "static": (561, 1101, 2092, 3420, 6028, 9074, 11304, 11582),
        "static-0": (253, 470, 862, 1515, 2685, 4110, 5689, 6816),
        "cost_model": (574, 1137, 2142, 3365, 6357, 9443, 11608, 12849),
        "hysteresis": (558, 1003, 1971, 3062, 5990, 9042, 5730, 6674),
    },
    "v1": {
        "never": (303, 603, 1184, 2295, 4264, 7540, 12799, 13917),
        "static": (397, 623, 1430, 2758, 5279, 7766, 10677, 9911),
        "static-0": (199, 396, 780, 1370, 2461, 3840, 5281, 6077),
        "cost_model": (374, 894, 1680, 2912, 5136, 7294, 10682, 5705),
        "hysteresis": (457, 926, 1801, 3051, 5295, 7649, 4981, 5482),
    },
}
#: Engine start estimates (docs/results/methodology.md: 130-158 s cold, 64-75 s warm); flashinfer's first
#: start on a host compiles its kernels: 134 s more at start and 90 s in the first warm-up (fifth sitting), a
#: v1 start of 158 s against 66 s with triton (sixth sitting).
START_COLD_S, START_WARM_S, FLASHINFER_COMPILE_S = 130.0, 75.0, 240.0
SHUTDOWN_S = 8.0
#: ``specpolicy doctor --smoke``: four engine starts on the test models (graphs for batch sizes 1-8 only).
DOCTOR_S = 300.0
#: Per-batch overhead outside decoding (submission, prefill of cached prompts, result collection).
BATCH_OVERHEAD_S = 0.15
#: Host-side seconds of a warm-up (first use of a shape compiles kernels) and a check batch.
WARMUP_S, CHECK_S = 0.5, 1.0
RESUME_ON_STEPS, RESUME_CYCLES_MIN = 16, 3
RAMP_TOKENS = 256
#: The ramp streams (first-token times) with SGLang's per-request ``stream_interval``: it sends a chunk when
#: the output length is 1 modulo the interval, so the first token still comes at once, and later chunks only
#: every 50 tokens, as SGLang sends them for a request that does not stream: streaming then costs the
#: scheduler no more than generate() does.
RAMP_STREAM_INTERVAL = 50


@dataclass(frozen=True)
class Phase:
    """One request batch: ``concurrency`` requests, each with its own output length.

    Requests are submitted together, or at ``arrivals`` (seconds from the phase start, one per request) for
    a ramp, where ``concurrency`` is the number of requests in the schedule, not the number in flight.
    ``min_wall_s``: the engine repeats a shorter batch until the whole lasts that long. ``est_s``: the
    planned duration, which the engine compares with its deadline before starting the phase.
    ``chain_shift``: the prompts are those of ``seed`` advanced by that many tokens of the target's chain
    (``prompts_for``). ``reference``: the name of an always-on phase of the same engine whose per-request
    acceptance this phase must reproduce once its first off stretch is over (the acceptance pairs).
    """

    name: str
    kind: Kind
    policy: str | None  # dispatch label; None on an engine without the adapter
    concurrency: int
    prompt_len: int
    max_new_tokens: tuple[int, ...]
    seed: int
    repeat: int = 0
    min_wall_s: float = 0.0
    est_s: float = 0.0
    arrivals: tuple[float, ...] = ()
    chain_shift: int = 0
    reference: str = ""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"Phase.concurrency must be >= 1, got {self.concurrency}")
        if len(self.max_new_tokens) != self.concurrency:
            raise ValueError(
                f"Phase.max_new_tokens must have one entry per request ({self.concurrency}), "
                f"got {len(self.max_new_tokens)}"
            )
        if self.prompt_len < 1 or min(self.max_new_tokens) < 1:
            raise ValueError("Phase.prompt_len and every max_new_tokens must be >= 1")
        if self.chain_shift < 0:
            raise ValueError(f"Phase.chain_shift must be >= 0, got {self.chain_shift}")
        if self.arrivals and (
            len(self.arrivals) != self.concurrency
            or min(self.arrivals) < 0
            or any(b < a for a, b in zip(self.arrivals, self.arrivals[1:], strict=False))
        ):
            raise ValueError("Phase.arrivals must be one non-negative, non-decreasing time per request")


@dataclass(frozen=True)
class EngineRun:
    """One engine process: a worker path, an attention backend, the policy dispatch table and the phases."""

    path: PathName
    phases: tuple[Phase, ...]
    policies: dict[str, Any] = field(default_factory=dict)
    backend: Backend = "triton"
    depth: int = LAUNCH_DEPTH
    tp: int = 1  # tensor-parallel size (SGLang's tp_size)

    @property
    def id(self) -> str:
        """``<path>/<backend>`` (``tp<N>/<path>/<backend>`` under tensor parallelism): the engine's folder in
        the results."""
        return f"{self.path}/{self.backend}" if self.tp == 1 else f"tp{self.tp}/{self.path}/{self.backend}"

    @property
    def shape(self) -> SpecShape | None:
        return spec_shape(self.path, self.depth)

    @property
    def side(self) -> str:
        """The worker path the engine is compared on (base_v2 and plain_v2 belong to v2)."""
        return "v1" if self.path.endswith("v1") else "v2"

    @property
    def speculative(self) -> bool:
        return not self.path.startswith("base")

    @property
    def adapter(self) -> bool:
        """Whether specpolicy is configured in this engine (the dispatch policy is set)."""
        return bool(self.policies)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> EngineRun:
        d = json.loads(text)
        phases = tuple(
            Phase(
                **{
                    **p,
                    "max_new_tokens": tuple(p["max_new_tokens"]),
                    "arrivals": tuple(p.get("arrivals", ())),
                }
            )
            for p in d["phases"]
        )
        return cls(
            path=d["path"],
            phases=phases,
            policies=d["policies"],
            backend=d.get("backend", "triton"),
            depth=d.get("depth", LAUNCH_DEPTH),
            tp=d.get("tp", 1),
        )


# ----------------------------------------------------------------------------------------------- policies
def check_policies(depth: int = LAUNCH_DEPTH, tp: int = 1) -> dict[str, Any]:
    """Correctness phases: controls (always on / always off), switching every few steps, a failing policy;
    with tensor parallelism (``tp`` > 1) also a policy that fails, and one that is slow, on one rank only."""
    out: dict[str, Any] = {
        "always-on": {"name": "static", "num_steps": depth},
        "always-off": {"name": "static", "num_steps": 0},
        "switch": {"name": "gpucheck_cycle", "depths": [depth, 0], "period": 3},
        # Returns "off" except on decide() calls 5..24, which raise: those steps must run the engine default
        # (the launch depth), be counted, and be logged once.
        "raise": {"name": "gpucheck_raise", "num_steps": 0, "raise_from": 5, "raise_count": 20},
    }
    if tp > 1:
        # A fault only TP rank 1 sees: every rank must still run one depth per step (the traces agree).
        out["raise-rank1"] = {**out["raise"], "only_rank": 1}
        out["slow-rank1"] = {"name": "gpucheck_slow", "num_steps": 0, "delay_s": 0.003, "only_rank": 1}
    return out


def perf_policies(depth: int = LAUNCH_DEPTH) -> dict[str, Any]:
    """The performance comparison inside the speculative engine (``never`` is the speculation-free engine).

    ``threshold`` with its default thresholds stays selectable (``--perf``) but is not in PERF_POLICIES: it
    measured what hysteresis with defaults did, and costs a fifth of the sweep.
    """
    return {
        "static": {"name": "static", "num_steps": depth},
        "static-0": {"name": "static", "num_steps": 0},
        "cost_model": {"name": "cost_model", "steps": [depth]},
        "hysteresis": {**HYSTERESIS_TUNED, "num_steps": depth},
        "threshold": {"name": "threshold", "num_steps": depth},
        "cost_model-kept": {"name": "cost_model", "steps": [depth]},
    }


#: Labels whose policy the dispatcher does not reset between phases (``cost_model-kept``: one cost_model
#: for the engine's life, as in serving, beside ``cost_model``, which starts fresh in every phase).
KEPT_POLICIES = frozenset({"cost_model-kept"})


def resume_policies(ks: Sequence[int], depth: int = LAUNCH_DEPTH) -> dict[str, Any]:
    """``resume-<k>``: off for k steps, then on for RESUME_ON_STEPS, repeating (the resume-cost phases)."""
    return {
        f"resume-{k}": {
            "name": "gpucheck_resume",
            "off_steps": k,
            "depth": depth,
            "on_steps": RESUME_ON_STEPS,
        }
        for k in ks
    }


#: A resume that never ends: ``gpucheck_resume`` with this many on steps turns on once, for good.
ON_FOR_GOOD = 1_000_000


def pair_policies(ks: Sequence[int], skip_k: int, depth: int = LAUNCH_DEPTH) -> dict[str, Any]:
    """The acceptance pairs (EAGLE-3 engines): ``resume-once-<k>`` is off for the first k steps of a batch,
    then on for good; ``skip-catch-up-<k>`` does the same and, while off, hands the drafter a zero hidden
    state instead of the target's (test only: the proof that the pair check can fail)."""
    out: dict[str, Any] = {
        f"resume-once-{k}": {
            "name": "gpucheck_resume",
            "off_steps": k,
            "depth": depth,
            "on_steps": ON_FOR_GOOD,
        }
        for k in ks
    }
    if skip_k:
        out[f"skip-catch-up-{skip_k}"] = {
            "name": "gpucheck_skip_catch_up",
            "off_steps": skip_k,
            "depth": depth,
            "on_steps": ON_FOR_GOOD,
        }
    return out


CHECK_POLICIES = tuple(check_policies())
PERF_POLICIES: tuple[str, ...] = ("static", "static-0", "cost_model", "hysteresis")
RAMP_POLICIES: tuple[str, ...] = ("cost_model", "static")
RESUME_K: tuple[int, ...] = (1, 8, 64, 512)
#: Off stretches of the acceptance pairs, and the one the skipped catch-up runs (0: none).
PAIR_K: tuple[int, ...] = (1, 8, 64)
SKIP_K = 8


def dispatch_config(
    policies: dict[str, Any], control_file: str, log_file: str, initial: str
) -> dict[str, Any]:
    return {
        "name": "gpucheck_dispatch",
        "control_file": control_file,
        "log_file": log_file,
        "policies": policies,
        "initial": initial,
        "keep": sorted(KEPT_POLICIES & set(policies)),
    }


# ----------------------------------------------------------------------------------------------- rates
def ref_rate(side: str, policy: str, c: float) -> float:
    """Reference output tokens/s of ``policy`` at concurrency ``c``, interpolated in log(c) between levels.

    A label without measurements (threshold, resume-k) gets the slowest row: estimates err on the long side.
    """
    table = REF_TOK_S.get(side, REF_TOK_S["v2"])
    row = table.get(policy.removesuffix("-kept"))  # a kept policy runs as fast as the fresh one
    if row is None:
        row = tuple(min(r[i] for r in table.values()) for i in range(len(CONCURRENCY)))
    x = math.log2(min(max(c, CONCURRENCY[0]), CONCURRENCY[-1]))
    xs = [math.log2(v) for v in CONCURRENCY]
    i = min(bisect.bisect_right(xs, x), len(xs) - 1)
    if i == 0:
        return float(row[0])
    f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return float(row[i - 1] + f * (row[i] - row[i - 1]))


def best_rate(side: str, c: float) -> float:
    """The fastest reference policy at ``c``: batches are sized on it, so even the fastest lasts long."""
    return max(ref_rate(side, p, c) for p in REF_TOK_S.get(side, REF_TOK_S["v2"]))


def perf_tokens_for(c: int, side: str = "v2", min_batch_s: float = 1.0, safety: float = 1.3) -> int:
    """Output tokens per request so that a batch of ``c`` requests lasts ``min_batch_s`` for the fastest
    reference policy, with a margin (the reference points included prefill and ran ~0.5 s); at least 64."""
    return max(64, math.ceil(safety * min_batch_s * best_rate(side, c) / c))


def resume_tokens(
    k: int, on_steps: int = RESUME_ON_STEPS, cycles: int = RESUME_CYCLES_MIN, depth: int = 3
) -> int:
    """Output tokens that guarantee ``cycles`` full off/on cycles for every request: a cycle yields at most
    k + (depth + 1) * on_steps tokens. More cycles for small k, where they are cheap."""
    cycles = max(cycles, min(16, 1024 // (k + on_steps)))
    return cycles * (k + (depth + 1) * on_steps) + 1


# ----------------------------------------------------------------------------------------------- order
def interleave(policies: Sequence[str], repeats: int, levels: Sequence[int]) -> list[tuple[int, int, str]]:
    """(repeat, concurrency, policy) in run order: repeat r runs every level and policy before repeat r+1,
    so a cut budget keeps whole sweeps; at each level the policy order rotates with r and the level, so no
    policy always runs first after a change of batch size or last before one."""
    out: list[tuple[int, int, str]] = []
    for r in range(repeats):
        for i, c in enumerate(levels):
            k = (r + i) % len(policies) if policies else 0
            out.extend((r, c, p) for p in [*policies[k:], *policies[:k]])
    return out


# ----------------------------------------------------------------------------------------------- ramp
def target_concurrency(t: float, duration_s: float, peak: int) -> float:
    """1 -> peak -> 1, geometric (equal time per doubling), peak at the middle of the ramp."""
    half = duration_s / 2
    x = t / half if t <= half else (duration_s - t) / half
    return float(peak ** min(max(x, 0.0), 1.0))


def ramp_schedule(
    duration_s: float, peak: int = 128, tokens: int = RAMP_TOKENS, side: str = "v2", dt: float = 0.005
) -> tuple[float, ...]:
    """Open-loop arrival times (s) whose load follows ``target_concurrency`` for the faster fixed engine.

    Little's law: an arrival rate c(t) / S(c(t)) keeps c(t) requests in flight when each is served in
    S(c) = tokens / (best_rate(c) / c). Calibrated on the faster of the fixed choices, so it reaches the peak
    there and overloads a slower policy (whose queue then grows: that is the comparison). Arrival i is where
    the integrated rate passes i + 0.5: deterministic, no random draws.
    """
    arrivals: list[float] = []
    acc, t = 0.0, 0.0
    while t < duration_s:
        c = target_concurrency(t + dt / 2, duration_s, peak)
        acc += dt * best_rate(side, c) / tokens  # c / S(c): the arrival rate at this load
        t += dt
        while acc >= len(arrivals) + 0.5:
            arrivals.append(round(t, 4))
    return tuple(arrivals)


def simulate_ramp(
    arrivals: Sequence[float],
    tokens: int,
    rate: Callable[[int], float],
    *,
    max_running: int = 128,
    dt: float = 0.02,
) -> tuple[float, list[int]]:
    """Makespan and requests in flight every ``dt`` of a fluid processor-sharing engine serving
    ``rate(in_flight)`` tokens/s, at most ``max_running`` at once (first come, first served beyond that).
    Shows the schedule's shape and estimates a ramp phase's duration; it is no model of SGLang."""
    left: list[float] = []
    waiting, nxt, t, trace = 0, 0, 0.0, []
    while nxt < len(arrivals) or left or waiting:
        while nxt < len(arrivals) and arrivals[nxt] <= t:
            waiting, nxt = waiting + 1, nxt + 1
        take = min(waiting, max_running - len(left))
        left.extend([float(tokens)] * take)
        waiting -= take
        if left:
            share = rate(len(left)) * dt / len(left)
            left = [x - share for x in left if x > share]
        trace.append(len(left) + waiting)
        t += dt
        if t > 100 * (arrivals[-1] + 10 if arrivals else 10):
            break  # a rate of zero: give up rather than loop forever
    return t, trace


# ----------------------------------------------------------------------------------------------- estimates
def _batch_s(side: str, policy: str, c: int, tokens: int) -> float:
    return c * tokens / ref_rate(side, policy, c) + BATCH_OVERHEAD_S


def _resume_s(side: str, k: int, c: int, tokens: int) -> float:
    """Steps of a resume phase at the reference off and on step times (2.5 tokens per on step)."""
    t_off = c / ref_rate(side, "static-0", c)
    t_on = 2.5 * c / ref_rate(side, "static", c)
    cycles = tokens / (k + 2.5 * RESUME_ON_STEPS)
    return cycles * (k * t_off + RESUME_ON_STEPS * t_on) + BATCH_OVERHEAD_S


def estimate_phase_s(phase: Phase, side: str, label: str) -> float:
    """Planned seconds of a phase, from the reference rates (``label``: the policy's name in REF_TOK_S)."""
    if phase.kind == "warmup":
        return WARMUP_S
    if phase.kind == "check":
        return CHECK_S
    if phase.kind == "resume":
        k = int(label.rsplit("-", 1)[-1])
        return _resume_s(side, k, phase.concurrency, phase.max_new_tokens[0])
    if phase.kind == "ramp":
        tokens = phase.max_new_tokens[0]
        span, _ = simulate_ramp(phase.arrivals, tokens, lambda n: ref_rate(side, label, n), dt=0.05)
        return span + 1.0
    est = _batch_s(side, label, phase.concurrency, phase.max_new_tokens[0])
    return est * max(1, math.ceil(phase.min_wall_s / est))  # the engine repeats a batch that is too short


def start_estimate_s(index: int, backend: str, first_of_backend: bool) -> float:
    """Engine start: cold for the first engine on a host, plus flashinfer's kernel compilation once."""
    base = START_COLD_S if index == 0 else START_WARM_S
    return base + (FLASHINFER_COMPILE_S if backend == "flashinfer" and first_of_backend else 0.0)


def engine_estimate(run: EngineRun) -> dict[str, float]:
    """Seconds per phase kind, as planned."""
    out = dict.fromkeys(KINDS, 0.0)
    for p in run.phases:
        out[p.kind] += p.est_s
    return out


def core_s(run: EngineRun) -> float:
    """The part of an engine that later engines' budgets protect: warm-up, checks and every perf repeat."""
    est = engine_estimate(run)
    return est["warmup"] + est["check"] + est["perf"]


def engine_starts(runs: Sequence[EngineRun], started: Sequence[str] = ()) -> list[float]:
    """Start estimates of engines run in this order on one host, after engines of the backends in
    ``started`` (one entry per engine started before them: the first start on a host is cold)."""
    seen = set(started)
    out = []
    for i, run in enumerate(runs, len(started)):
        out.append(start_estimate_s(i, run.backend, run.backend not in seen))
        seen.add(run.backend)
    return out


def engine_deadline(
    now: float, t_end: float, later: Sequence[EngineRun], later_starts: Sequence[float]
) -> float:
    """When an engine must stop serving phases: the budget's end less what the engines after it need for
    their starts and core phases, so one engine's ramp cannot eat another's perf sweep. Never earlier than
    ``now`` (an engine then only starts, warms and checks if it has nothing else)."""
    reserve = sum(core_s(r) + s + SHUTDOWN_S for r, s in zip(later, later_starts, strict=True))
    return max(now, t_end - reserve)


def serves_nothing(now: float, deadline: float, start_s: float, run: EngineRun) -> bool:
    """Whether an engine would serve no phase: its estimated start and first phase end past its deadline
    (what the engines after it reserve). The device command does not start such an engine: a start costs
    60-160 s of the budget, which the engines after it can use."""
    first = run.phases[0].est_s if run.phases else 0.0
    return now + start_s + first + SHUTDOWN_S > deadline


def format_plan(
    runs: Sequence[EngineRun], budget_s: float, build_s: float = 20.0, margin_s: float = 0.0
) -> str:
    """The dry-run view: per engine its start and phase kinds with estimated seconds, cumulative time, and
    what the budget would cut (the engine process skips a phase that would end past its deadline; the
    device command keeps ``margin_s`` of the budget for packing)."""
    lines = [
        f"plan: {len(runs)} engine(s), budget {budget_s:.0f} s (margin {margin_s:.0f} s), "
        f"model build ~{build_s:.0f} s"
    ]
    end = budget_s - margin_s
    t = build_s
    started: list[str] = []
    for i, run in enumerate(runs):
        start, *later = engine_starts(runs[i:], started)
        deadline = engine_deadline(t, end, runs[i + 1 :], later)
        if serves_nothing(t, deadline, start, run):
            lines.append(f"engine {run.id}: NOT STARTED (its start, ~{start:.0f} s, would leave it no phase)")
            continue
        started.append(run.backend)
        t += start
        lines.append(f"engine {run.id}: start ~{start:.0f} s (at ~{t:.0f} s)")
        cut: list[str] = []
        for kind in KINDS:
            ph = [p for p in run.phases if p.kind == kind]
            if not ph:
                continue
            kept = []
            for p in ph:
                if t + p.est_s + SHUTDOWN_S <= deadline:
                    t += p.est_s
                    kept.append(p)
            s = sum(p.est_s for p in kept)
            note = "" if len(kept) == len(ph) else f"  CUT {len(ph) - len(kept)} of {len(ph)}"
            if note:
                cut.append(kind)
            lines.append(f"  {kind:7s} {len(ph):4d} phase(s) ~{s:6.1f} s{note}")
            detail = _detail(run, kind)
            if detail:
                lines.append(f"          {detail}")
        t += SHUTDOWN_S
        lines.append(f"  done at ~{t:.0f} s" + (f" (cut: {', '.join(cut)})" if cut else ""))
    lines.append(f"total ~{t:.0f} s of {budget_s:.0f} s")
    return "\n".join(lines)


def _detail(run: EngineRun, kind: str) -> str:
    ph = [p for p in run.phases if p.kind == kind]
    if kind == "perf":
        by_c = sorted({(p.concurrency, p.max_new_tokens[0]) for p in ph})
        reps = 1 + max(p.repeat for p in ph)
        return f"{reps} repeats; tokens per request by level: " + ", ".join(f"{c}:{n}" for c, n in by_c)
    if kind == "ramp":
        return f"{ph[0].concurrency} requests over {ph[0].arrivals[-1]:.0f} s each"
    if kind == "resume":
        return f"{ph[0].concurrency} requests; " + ", ".join(
            f"{p.policy}: {p.max_new_tokens[0]} tokens" for p in ph
        )
    return ""


# ----------------------------------------------------------------------------------------------- plan
def _check_lengths(concurrency: int, seed: int) -> tuple[int, ...]:
    """Different output lengths, so requests finish on different steps and the batch shrinks as it runs."""
    rng = random.Random(seed)
    return tuple(rng.randint(24, 96) for _ in range(concurrency))


@dataclass(frozen=True)
class _Opts:
    concurrency: tuple[int, ...]
    repeats: int
    min_batch_s: float
    perf_tokens: int
    perf_prompt: int
    check_concurrency: int
    perf: tuple[str, ...]
    ramp_s: float
    ramp_policies: tuple[str, ...]
    ramp_peak: int
    resume_k: tuple[int, ...]
    resume_batch: int
    depth: int
    pair_k: tuple[int, ...]
    skip_k: int
    tp: int = 1


def _phase(run_side: str, label_name: str, **kw: Any) -> Phase:
    ph = Phase(**kw)
    return Phase(**{**kw, "est_s": round(estimate_phase_s(ph, run_side, label_name), 3)})


def _warmups(o: _Opts, side: str, spec: bool, none_label: str) -> list[Phase]:
    """Every batch size and mode the measured phases use, once, with the perf phases' prompts: the first use
    of a shape compiles kernels (hundreds of ms per shape were seen), and the prompts are then cached for
    every policy alike."""
    out = []
    resume = o.resume_batch if spec and o.resume_k else o.check_concurrency
    for c in sorted({*o.concurrency, o.check_concurrency, resume}):
        for label in ("always-on", "always-off") if spec else (None,):
            out.append(
                _phase(
                    side,
                    "static",
                    name=f"warmup:{label or none_label}:{c}",
                    kind="warmup",
                    policy=label,
                    concurrency=c,
                    prompt_len=o.perf_prompt,
                    max_new_tokens=(8,) * c,
                    seed=100 + c,
                )
            )
    return out


def _checks(o: _Opts, side: str, spec: bool, none_label: str, depth: int) -> list[Phase]:
    lengths = _check_lengths(o.check_concurrency, seed=11)
    labels: tuple[str | None, ...] = tuple(check_policies(depth, o.tp)) if spec else (None,)
    return [
        _phase(
            side,
            "static",
            name=f"check:{label or none_label}",
            kind="check",
            policy=label,
            concurrency=o.check_concurrency,
            prompt_len=48,
            max_new_tokens=lengths,
            seed=11,
        )
        for label in labels
    ]


def _pairs(o: _Opts, side: str) -> list[Phase]:
    """Per off stretch k: an always-on reference whose prompts are advanced k tokens along the chain, and
    a batch that is off for its first k steps, then on, with k more tokens per request. After the off
    stretch each request stands where its reference started, so with the hidden states caught up exactly
    the rest of its verifies are the reference's: the same accepted drafts, k more verifies of none."""
    out: list[Phase] = []
    ks = [*o.pair_k, *([o.skip_k] if o.skip_k and o.skip_k not in o.pair_k else [])]
    for k in ks:
        seed = 20 + k
        lengths = _check_lengths(o.check_concurrency, seed=seed)
        common: dict[str, Any] = {
            "kind": "check",
            "concurrency": o.check_concurrency,
            "prompt_len": 48,
            "seed": seed,
        }
        ref = f"check:ref-{k}"
        out.append(
            _phase(
                side, "static", name=ref, policy="always-on", max_new_tokens=lengths, chain_shift=k, **common
            )
        )
        longer = tuple(n + k for n in lengths)
        labels = [f"resume-once-{k}"] if k in o.pair_k else []
        labels += [f"skip-catch-up-{k}"] if k == o.skip_k else []
        out += [
            _phase(
                side, "static", name=f"check:{lb}", policy=lb, max_new_tokens=longer, reference=ref, **common
            )
            for lb in labels
        ]
    return out


def _perf(o: _Opts, side: str, labels: Sequence[str | None], none_label: str) -> list[Phase]:
    out = []
    names = [lb or none_label for lb in labels]
    by_name = dict(zip(names, labels, strict=True))
    for r, c, name in interleave(names, o.repeats, o.concurrency):
        n = o.perf_tokens or perf_tokens_for(c, side, o.min_batch_s)
        out.append(
            _phase(
                side,
                name,
                name=f"perf:{name}:{c}:r{r}",
                kind="perf",
                policy=by_name[name],
                concurrency=c,
                prompt_len=o.perf_prompt,
                max_new_tokens=(n,) * c,
                seed=100 + c,
                repeat=r,
                min_wall_s=o.min_batch_s,
            )
        )
    return out


def _resume(o: _Opts, side: str, depth: int) -> list[Phase]:
    return [
        _phase(
            side,
            f"resume-{k}",
            name=f"resume:resume-{k}",
            kind="resume",
            policy=f"resume-{k}",
            concurrency=o.resume_batch,
            prompt_len=o.perf_prompt,
            max_new_tokens=(resume_tokens(k, depth=depth),) * o.resume_batch,
            seed=10_000 + k,
        )
        for k in o.resume_k
    ]


def _ramps(o: _Opts, side: str, labels: Sequence[str | None], none_label: str) -> list[Phase]:
    """One ramp per label on the same arrival schedule. Each ramp of an engine gets its own prompts, so none
    finds another's prompts in the prefix cache; the first ramp of every engine shares its prompts with the
    first of the others (cost_model and never generate the very same tokens)."""
    if o.ramp_s <= 0:
        return []
    arrivals = ramp_schedule(o.ramp_s, o.ramp_peak, RAMP_TOKENS, side)
    return [
        _phase(
            side,
            label or none_label,
            name=f"ramp:{label or none_label}",
            kind="ramp",
            policy=label,
            concurrency=len(arrivals),
            prompt_len=o.perf_prompt,
            max_new_tokens=(RAMP_TOKENS,) * len(arrivals),
            seed=700 + i,
            arrivals=arrivals,
        )
        for i, label in enumerate(labels)
    ]


def _engine(path: PathName, backend: Backend, o: _Opts) -> EngineRun:
    side = "v1" if path.endswith("v1") else "v2"
    adapter = path in ADAPTER_PATHS
    eagle3 = path in EAGLE3_PATHS
    shape = spec_shape(path, o.depth)
    depth = shape.num_steps if shape is not None else o.depth
    none_label = "sglang-static" if path.startswith("plain") else "never"
    perfs = {k: v for k, v in perf_policies(depth).items() if k in o.perf}
    ramp_labels = [p for p in o.ramp_policies if p in perf_policies(depth)]
    phases = _warmups(o, side, adapter, none_label)
    phases += _checks(o, side, adapter, none_label, depth)
    if eagle3:
        phases += _pairs(o, side)
    phases += _perf(o, side, list(perfs) if adapter else [None], none_label)
    if adapter:
        phases += _resume(o, side, depth)
    phases += _ramps(o, side, ramp_labels if adapter else [None], none_label)
    policies: dict[str, Any] = {}
    if adapter:
        ramp_specs = {k: perf_policies(depth)[k] for k in ramp_labels}
        checks = check_policies(depth, o.tp)
        policies = {**checks, **perfs, **ramp_specs, **resume_policies(o.resume_k, depth)}
        if eagle3:
            policies.update(pair_policies(o.pair_k, o.skip_k, depth))
    return EngineRun(
        path=path, phases=tuple(phases), policies=policies, backend=backend, depth=depth, tp=o.tp
    )


def build_plan(
    paths: tuple[PathName, ...] = ("v2", "base_v2", "v1", "base_v1"),
    *,
    backends: tuple[Backend, ...] = ("triton",),
    concurrency: tuple[int, ...] = CONCURRENCY,
    repeats: int = 3,
    min_batch_s: float = 1.0,
    perf_tokens: int = 0,
    perf_prompt: int = 128,
    check_concurrency: int = 32,
    perf: tuple[str, ...] = PERF_POLICIES,
    ramp_s: float = 60.0,
    ramp_policies: tuple[str, ...] = RAMP_POLICIES,
    ramp_peak: int = 128,
    resume_k: tuple[int, ...] = RESUME_K,
    resume_batch: int = 4,
    depth: int = LAUNCH_DEPTH,
    pair_k: tuple[int, ...] = PAIR_K,
    skip_k: int = SKIP_K,
    tp: int = 1,
) -> list[EngineRun]:
    """Engines in run order (backend-major: both engines of a comparison before the next backend).

    ``perf_tokens`` 0 sizes each level's output so a batch lasts ``min_batch_s`` (perf_tokens_for);
    ``ramp_s`` 0 and an empty ``resume_k`` drop those phases. ``depth`` is the launch depth of the topk-1
    paths (the tree has its own); ``pair_k`` and ``skip_k`` (0: none) shape the EAGLE-3 engines'
    acceptance pairs; ``tp`` the tensor-parallel size of every engine (one GPU each rank).
    """
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    if any(k < 1 for k in pair_k) or skip_k < 0:
        raise ValueError(f"pair_k must hold off stretches >= 1 and skip_k be >= 0, got {pair_k}, {skip_k}")
    o = _Opts(
        concurrency,
        repeats,
        min_batch_s,
        perf_tokens,
        perf_prompt,
        check_concurrency,
        perf,
        ramp_s,
        ramp_policies,
        ramp_peak,
        resume_k,
        resume_batch,
        depth,
        pair_k,
        skip_k,
        tp,
    )
    return [_engine(path, backend, o) for backend in backends for path in paths]


def prompts_for(
    phase: Phase, chain_vocab: int, first_token: int = 4, pi: Sequence[int] | None = None
) -> list[list[int]]:
    """Random prompt token ids in [first_token, chain_vocab), deterministic per phase seed.

    A phase with ``chain_shift`` k takes those prompts, follows the target's chain ``pi`` k tokens past
    each and keeps the last ``prompt_len`` tokens, so its requests emit what the unshifted prompts'
    requests emit from their (k+1)-th output token on."""
    rng = random.Random(phase.seed)
    prompts = [
        [rng.randrange(first_token, chain_vocab) for _ in range(phase.prompt_len)]
        for _ in range(phase.concurrency)
    ]
    if not phase.chain_shift:
        return prompts
    if pi is None:
        raise ValueError(f"phase {phase.name}: chain_shift needs the target's chain (pi)")
    out = []
    for p in prompts:
        t, tail = p[-1], []
        for _ in range(phase.chain_shift):
            t = int(pi[t])
            tail.append(t)
        out.append((p + tail)[-phase.prompt_len :])
    return out
