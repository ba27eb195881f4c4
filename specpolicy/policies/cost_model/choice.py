"""cost_model's choice: expected tokens per second of each depth, and which depth to run.

A depth's value is ``E(k) / T(k)``: expected tokens per request (``AcceptanceEstimator.expected_tokens``)
over the predicted step time (``costs.StepCosts``), both per request so the batch size cancels. The best
depth is the deepest within half the switch margin of the fastest: per-step costs the step time does not show
(prefill steps between decode steps, scheduling) are shared by more tokens per step. The policy switches to
it when it beats the running depth by ``switch_margin`` and ``min_dwell_steps`` have passed since the last
switch, or at once when it gains more than ``BIG_GAIN`` (that test runs inline in ``decide``).
"""

from __future__ import annotations

__all__ = ["BIG_GAIN", "Choice"]

#: A switch this much better (predicted) does not wait for the dwell time.
BIG_GAIN = 1.1


class Choice:
    """Per bucket: predicted time and tokens/s per depth index, and the best depth index."""

    __slots__ = ("best", "v", "t", "_tie")

    def __init__(self, n_buckets: int, n_arms: int, switch_margin: float) -> None:
        self.best = [0] * n_buckets
        self.v: list[list[float]] = [[1.0] * n_arms for _ in range(n_buckets)]
        self.t: list[list[float]] = [[1.0] * n_arms for _ in range(n_buckets)]
        self._tie = 1.0 + 0.5 * switch_margin

    def update(self, b: int, expected: list[float], times: list[float], off: list[bool]) -> list[float]:
        """Bucket b's values from expected tokens and times per depth index (``off``: not offered)."""
        v = [e / t if t > 0.0 and not o else 0.0 for e, t, o in zip(expected, times, off, strict=True)]
        tie = max(v) / self._tie
        best = 0
        for i in range(len(v) - 1, 0, -1):  # the deepest within the tie
            if v[i] >= tie:
                best = i
                break
        self.best[b] = best
        self.v[b] = v
        self.t[b] = times
        return v
