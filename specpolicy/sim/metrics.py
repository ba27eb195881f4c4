"""What one simulated run measures, and the accounting that decides what falls inside its window.

The window is (warm-up, duration], or (warm-up, end] for a scenario that drains. Counted there: output
tokens, decode and prefill steps, depth switches, speculative steps and acceptance; TPOT of the requests that
finish inside it and TTFT of those that arrive inside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["Timeline", "RunResult", "Meter"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Timeline:
    """Per time bin: output tokens/s, mean depth of decode steps, mean batch size."""

    bin_s: float
    tok_s: FloatArray
    mean_depth: FloatArray
    mean_batch: FloatArray


@dataclass(frozen=True, eq=False)
class RunResult:
    """What one simulation measured. Counts and per-request arrays cover the measurement window;
    ``decode_steps_total`` and ``wall_s`` cover the whole run."""

    window_s: float
    output_tokens: int
    tpot_ms: FloatArray
    ttft_ms: FloatArray
    completed_output_tokens: IntArray
    decode_steps: int
    decode_steps_total: int
    spec_steps: int
    prefill_steps: int
    switches: int
    clamped_steps: int
    policy_errors: int
    mean_batch: float
    mean_accept_len: float | None
    max_batch: int
    extrapolated: bool
    wall_s: float
    sim_end_s: float
    requests_created: int
    requests_completed: int
    emitted_per_request: dict[int, tuple[int, int]] = field(default_factory=dict)
    timeline: Timeline | None = None
    first_error: str | None = None
    #: the first decision of a policy swapped in mid-run (``sim.swap``), and its simulated time
    swap_step: int | None = None
    swap_s: float | None = None
    #: the policy's state at the end of the run, when the engine was asked to keep it
    policy_state: dict[str, object] | None = None

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.window_s if self.window_s > 0 else 0.0

    @property
    def spec_step_share(self) -> float:
        return self.spec_steps / self.decode_steps if self.decode_steps else 0.0

    def goodput_tok_s(self, slo_tpot_ms: float) -> float:
        """Output tokens/s of completed requests whose TPOT met the SLO."""
        if not len(self.tpot_ms) or self.window_s <= 0:
            return 0.0
        ok = self.tpot_ms <= slo_tpot_ms
        return float(self.completed_output_tokens[ok].sum()) / self.window_s


class Meter:
    """Accumulates a run's measurements; the engine reports events, the meter decides what counts."""

    def __init__(self, warmup_s: float, duration_s: float, drain: bool, bin_s: float | None) -> None:
        self.w0 = warmup_s
        self.duration = duration_s
        self.drain = drain
        self.bin_s = bin_s
        self.tokens = 0
        self.decode_steps = self.decode_steps_total = self.spec_steps = self.prefill_steps = 0
        self.switches = 0
        self.batch_sum = 0
        self.acc_sum = 0
        self.acc_n = 0
        self.completed = 0
        self.tpot: list[float] = []
        self.ttft: list[float] = []
        self.done_out: list[int] = []
        self._prev_k = -1
        self._tl: list[list[float]] = []  # per bin: tokens, depth sum, decode steps, batch sum

    def in_window(self, t: float) -> bool:
        return t > self.w0 and (self.drain or t <= self.duration)

    def prefill(self, t: float, arrivals: list[float]) -> None:
        """A prefill step ended at t, emitting the first token of requests that arrived at ``arrivals``."""
        n = len(arrivals)
        if self.in_window(t):
            self.prefill_steps += 1
            self.tokens += n
        if self.drain or t <= self.duration:
            self.ttft.extend((t - a) * 1e3 for a in arrivals if a >= self.w0)
        if self.bin_s is not None:
            self._bin(t)[0] += n

    def decode(self, t: float, k: int, batch: int, tokens: int, accepted: int) -> None:
        """A decode step at depth k ended at t: ``tokens`` emitted, ``accepted`` drafts over the batch."""
        self.decode_steps_total += 1
        if self.in_window(t):
            if self._prev_k >= 0 and k != self._prev_k:
                self.switches += 1
            self.decode_steps += 1
            self.batch_sum += batch
            self.tokens += tokens
            if k > 0:
                self.spec_steps += 1
                self.acc_sum += accepted
                self.acc_n += batch
        self._prev_k = k
        if self.bin_s is not None:
            b = self._bin(t)
            b[0] += tokens
            b[1] += k
            b[2] += 1
            b[3] += batch

    def finished(
        self, t: float, out: IntArray, base: IntArray, first: FloatArray, arrival: FloatArray
    ) -> None:
        """Requests finished at t: TPOT over the tokens after ``base``, counted from ``first``."""
        if not self.in_window(t):
            return
        self.completed += len(out)
        n_tok = out - base
        ok = n_tok > 0
        self.tpot.extend(((t - first[ok]) * 1e3 / n_tok[ok]).tolist())
        self.done_out.extend(np.where(np.isfinite(arrival[ok]), out[ok], n_tok[ok]).tolist())

    def _bin(self, t: float) -> list[float]:
        assert self.bin_s is not None
        i = int(t / self.bin_s)
        while len(self._tl) <= i:
            self._tl.append([0.0, 0.0, 0.0, 0.0])
        return self._tl[i]

    def timeline(self) -> Timeline | None:
        if self.bin_s is None:
            return None
        tl = np.asarray(self._tl, dtype=np.float64).reshape(-1, 4)
        steps = np.maximum(tl[:, 2], 1.0)
        return Timeline(self.bin_s, tl[:, 0] / self.bin_s, tl[:, 1] / steps, tl[:, 3] / steps)
