"""Scenario: one simulation input, plain data (picklable, so runs can go to worker processes).

A scenario is either a closed loop with a piecewise-constant target of requests in the system (a finished
request is replaced at once while below the target), or an open loop with explicit arrivals; plus
acceptance phases (the population's mean per-token acceptance over time).

Request shapes (``RequestShape``: prompt and output length means and spreads) and acceptance (an
``AcceptanceModel``: a Beta or a mixture of Betas) come from a stream indexed by request number and seeded
per block (``RequestStream``), so the i-th request is the same for every policy simulated on the scenario
(common random numbers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from .acceptance import AcceptanceModel, BetaAcceptance
from .hint_mix import HintMix

__all__ = ["FloatArray", "IntArray", "RequestShape", "RequestStream", "Requests", "Scenario"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_BLOCK = 1024


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
