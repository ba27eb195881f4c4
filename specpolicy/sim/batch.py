"""The requests inside the simulated engine: the arrival feed, and the running batch as parallel arrays.

A request travels as a plain tuple ``(id, arrival_s, prompt_tokens, output_tokens, acceptance)`` from the
workload to the waiting queue; once admitted it becomes one entry in each array of ``RunningBatch``, so every
per-request update of a decode step is one numpy operation over the batch.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import numpy.typing as npt

from .acceptance import logit, shifted
from .scenario import RequestStream, Scenario

__all__ = ["Request", "Arrivals", "RunningBatch"]

#: (id, arrival time s, prompt tokens, output tokens, per-token acceptance)
Request = tuple[int, float, int, int, float]


class Arrivals:
    """Feeds the waiting queue: closed loop (refill to a target) or open loop (explicit arrival times)."""

    def __init__(self, scenario: Scenario, seed: int) -> None:
        self.sc = scenario
        self.stream = RequestStream(seed, scenario.shape, scenario.acceptance)
        self.created = 0
        self.stopped = False
        loop = scenario.closed_loop
        self._cl_times = [t for t, _ in loop] if loop is not None else []
        self._cl_vals = [c for _, c in loop] if loop is not None else []
        self._cl_idx = 0

    def target(self, t: float) -> int:
        while self._cl_idx + 1 < len(self._cl_times) and self._cl_times[self._cl_idx + 1] <= t:
            self._cl_idx += 1
        return self._cl_vals[self._cl_idx]

    def next_arrival(self) -> float | None:
        reqs = self.sc.requests
        if reqs is None or self.stopped or self.created >= len(reqs):
            return None
        return float(reqs.arrival_s[self.created])

    def pull(self, t: float, in_system: int, out: deque[Request]) -> None:
        """Append every request arriving by time t (closed loop: as many as the target is short of)."""
        if self.stopped:
            return
        reqs = self.sc.requests
        if reqs is None:
            for _ in range(self.target(t) - in_system):
                prompt, outn, acc = self.stream.get(self.created)
                out.append((self.created, t, prompt, outn, acc))
                self.created += 1
            return
        n = len(reqs)
        while self.created < n and reqs.arrival_s[self.created] <= t:
            i = self.created
            acc = float(reqs.acceptance[i])
            if math.isnan(acc):
                acc = self.stream.get(i)[2]
            out.append(
                (i, float(reqs.arrival_s[i]), int(reqs.prompt_tokens[i]), int(reqs.output_tokens[i]), acc)
            )
            self.created += 1


class RunningBatch:
    """The decoding requests, one entry per array, kept compact (finished requests are removed).

    ``first`` is when a request's counted tokens start and ``base`` how many it had by then: its prefill
    token for an admitted request; for a prewarmed one (a sweep starting in steady state) t = 0 and what it
    had already emitted.
    """

    __slots__ = ("rid", "arrival", "first", "base", "out", "emitted", "seqlen", "lz", "p", "missed")

    def __init__(self) -> None:
        self.rid = np.zeros(0, dtype=np.int64)
        self.arrival = np.zeros(0)
        self.first = np.zeros(0)
        self.base = np.zeros(0, dtype=np.int64)
        self.out = np.zeros(0, dtype=np.int64)
        self.emitted = np.zeros(0, dtype=np.int64)
        self.seqlen = np.zeros(0)
        self.lz = np.zeros(0)  # logit of the request's own acceptance
        self.p = np.zeros(0)  # its acceptance in the current phase
        self.missed = np.zeros(0, dtype=np.int64)  # tokens produced while off, for the lazy catch-up

    def __len__(self) -> int:
        return len(self.rid)

    def admit(self, reqs: list[Request], t: float, shift: float) -> None:
        """Append requests whose prefill ended at ``t`` (each has emitted its first token)."""
        n = len(reqs)
        acc = np.fromiter((r[4] for r in reqs), dtype=np.float64, count=n)
        lz = logit(acc)
        self.rid = np.concatenate([self.rid, np.fromiter((r[0] for r in reqs), dtype=np.int64, count=n)])
        self.arrival = np.concatenate(
            [self.arrival, np.fromiter((r[1] for r in reqs), dtype=np.float64, count=n)]
        )
        self.first = np.concatenate([self.first, np.full(n, t)])
        self.base = np.concatenate([self.base, np.ones(n, dtype=np.int64)])
        self.out = np.concatenate([self.out, np.fromiter((r[3] for r in reqs), dtype=np.int64, count=n)])
        self.emitted = np.concatenate([self.emitted, np.ones(n, dtype=np.int64)])
        self.seqlen = np.concatenate(
            [self.seqlen, np.fromiter((r[2] + 1 for r in reqs), dtype=np.float64, count=n)]
        )
        self.lz = np.concatenate([self.lz, lz])
        self.p = np.concatenate([self.p, acc if shift == 0.0 else shifted(lz, shift)])
        self.missed = np.concatenate([self.missed, np.zeros(n, dtype=np.int64)])

    def prewarm(self, reqs: list[Request], progress: npt.NDArray[np.float64]) -> None:
        """Start with ``reqs`` already decoding, each ``progress`` (0..1) of the way through its output."""
        n = len(reqs)
        self.rid = np.array([r[0] for r in reqs], dtype=np.int64)
        self.out = np.array([r[3] for r in reqs], dtype=np.int64)
        self.emitted = np.minimum(
            1 + (progress * (self.out - 1)).astype(np.int64), np.maximum(self.out - 1, 1)
        )
        self.arrival = np.full(n, -math.inf)
        self.first = np.zeros(n)
        self.base = self.emitted.copy()
        self.seqlen = np.array([r[2] for r in reqs], dtype=np.float64) + self.emitted
        self.lz = logit(np.array([r[4] for r in reqs], dtype=np.float64))
        self.p = 1.0 / (1.0 + np.exp(-self.lz))
        self.missed = np.zeros(n, dtype=np.int64)

    def reshift(self, shift: float) -> None:
        """A new acceptance phase: every request moves by ``shift`` in logit space."""
        self.p = shifted(self.lz, shift)

    def remove(self, mask: npt.NDArray[np.bool_]) -> None:
        keep = ~mask
        for name in self.__slots__:
            setattr(self, name, getattr(self, name)[keep])
