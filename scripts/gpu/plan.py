"""What the live GPU check runs: engines, and the phases (request batches) each engine serves.

One engine starts per worker path (about a minute each on the GPU), and the policy changes between phases
through the ``gpucheck_dispatch`` test policy, so a whole comparison fits in one engine's lifetime. Pure data
and pure functions: the plan is built and tested on any machine.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "Phase",
    "EngineRun",
    "LAUNCH_DEPTH",
    "CONCURRENCY",
    "PERF_POLICIES",
    "CHECK_POLICIES",
    "check_policies",
    "perf_policies",
    "build_plan",
    "dispatch_config",
    "prompts_for",
]

#: speculative_num_steps the speculative engines launch with (topk 1, so 4 draft tokens per verify).
LAUNCH_DEPTH = 3
CONCURRENCY: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
#: v1/v2: the speculative engine with specpolicy; base_*: a speculation-free engine ("never"); plain_*: the
#: speculative engine with specpolicy installed but not configured (SGLang's own static speculation).
PathName = Literal["v1", "v2", "base_v1", "base_v2", "plain_v1", "plain_v2"]
Kind = Literal["warmup", "check", "perf"]


@dataclass(frozen=True)
class Phase:
    """One request batch: ``concurrency`` requests submitted together, each with its own output length."""

    name: str
    kind: Kind
    policy: str | None  # dispatch label; None on a speculation-free engine
    concurrency: int
    prompt_len: int
    max_new_tokens: tuple[int, ...]
    seed: int

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


@dataclass(frozen=True)
class EngineRun:
    """One engine process: a worker path, the engine's policy dispatch table and its phases."""

    path: PathName
    phases: tuple[Phase, ...]
    policies: dict[str, Any] = field(default_factory=dict)

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
        phases = tuple(Phase(**{**p, "max_new_tokens": tuple(p["max_new_tokens"])}) for p in d["phases"])
        return cls(path=d["path"], phases=phases, policies=d["policies"])


def check_policies(depth: int = LAUNCH_DEPTH) -> dict[str, Any]:
    """Correctness phases: controls (always on / always off), switching every few steps, a failing policy."""
    return {
        "always-on": {"name": "static", "num_steps": depth},
        "always-off": {"name": "static", "num_steps": 0},
        "switch": {"name": "gpucheck_cycle", "depths": [depth, 0], "period": 3},
        # Returns "off" except on decide() calls 5..24, which raise: those steps must run the engine default
        # (the launch depth), be counted, and be logged once.
        "raise": {"name": "gpucheck_raise", "num_steps": 0, "raise_from": 5, "raise_count": 20},
    }


def perf_policies(depth: int = LAUNCH_DEPTH) -> dict[str, Any]:
    """The performance comparison inside the speculative engine (``never`` is the speculation-free engine)."""
    return {
        "static": {"name": "static", "num_steps": depth},
        "static-0": {"name": "static", "num_steps": 0},
        "cost_model": {"name": "cost_model", "steps": [depth]},
        "threshold": {"name": "threshold", "num_steps": depth},
        "hysteresis": {"name": "hysteresis", "num_steps": depth},
    }


CHECK_POLICIES = tuple(check_policies())
PERF_POLICIES = tuple(perf_policies())


def dispatch_config(
    policies: dict[str, Any], control_file: str, log_file: str, initial: str
) -> dict[str, Any]:
    return {
        "name": "gpucheck_dispatch",
        "control_file": control_file,
        "log_file": log_file,
        "policies": policies,
        "initial": initial,
    }


def _check_lengths(concurrency: int, seed: int) -> tuple[int, ...]:
    """Different output lengths, so requests finish on different steps and the batch shrinks as it runs."""
    rng = random.Random(seed)
    return tuple(rng.randint(24, 96) for _ in range(concurrency))


def build_plan(
    paths: tuple[PathName, ...] = ("v2", "base_v2", "v1", "base_v1"),
    *,
    concurrency: tuple[int, ...] = CONCURRENCY,
    perf_tokens: int = 256,
    perf_prompt: int = 128,
    check_concurrency: int = 32,
    perf: tuple[str, ...] = PERF_POLICIES,
    depth: int = LAUNCH_DEPTH,
) -> list[EngineRun]:
    """Engines in run order. Each speculative engine serves the check phases, then the perf sweep."""
    checks = check_policies(depth)
    perfs = {k: v for k, v in perf_policies(depth).items() if k in perf}
    runs = []
    for path in paths:
        spec = path in ("v1", "v2")
        none_label = "sglang-static" if path.startswith("plain") else "never"
        # Every batch size and mode the measured phases use runs once first: the first use of a shape compiles
        # kernels (hundreds of ms per shape were seen on the GPU).
        phases: list[Phase] = []
        for c in sorted({*concurrency, check_concurrency}):
            for label in ("always-on", "always-off") if spec else (None,):
                phases.append(
                    Phase(
                        f"warmup:{label or none_label}:{c}",
                        "warmup",
                        label,
                        c,
                        perf_prompt,
                        (8,) * c,
                        seed=900 + c,
                    )
                )
        check_labels: tuple[str | None, ...] = tuple(checks) if spec else (None,)
        lengths = _check_lengths(check_concurrency, seed=11)
        for label in check_labels:
            phases.append(
                Phase(f"check:{label or none_label}", "check", label, check_concurrency, 48, lengths, seed=11)
            )
        perf_labels: tuple[str | None, ...] = tuple(perfs) if spec else (None,)
        for label in perf_labels:
            for c in concurrency:
                phases.append(
                    Phase(
                        f"perf:{label or none_label}:{c}",
                        "perf",
                        label,
                        c,
                        perf_prompt,
                        (perf_tokens,) * c,
                        seed=100 + c,
                    )
                )
        policies = {**checks, **perfs} if spec else {}
        runs.append(EngineRun(path=path, phases=tuple(phases), policies=policies))
    return runs


def prompts_for(phase: Phase, chain_vocab: int, first_token: int = 4) -> list[list[int]]:
    """Random prompt token ids in [first_token, chain_vocab), deterministic per phase seed."""
    rng = random.Random(phase.seed)
    return [
        [rng.randrange(first_token, chain_vocab) for _ in range(phase.prompt_len)]
        for _ in range(phase.concurrency)
    ]
