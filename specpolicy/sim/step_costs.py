"""Every depth's step time at one batch size and context, cached: what the references (oracle, lookahead)
price a step with. Contexts are bucketed by 16 tokens, priced at the bucket's middle, so a run keeps a few
hundred entries instead of one per step."""

from __future__ import annotations

import numpy as np

from .engine import FloatArray, SimProfile

__all__ = ["StepCosts"]


class StepCosts:
    """``costs(b, seq_len)[k]``: the profile's step time at depth k (0 = off), for k in 0..max_k."""

    __slots__ = ("profile", "max_k", "_cache")

    def __init__(self, profile: SimProfile, max_k: int) -> None:
        self.profile = profile
        self.max_k = max_k
        self._cache: dict[tuple[int, int], FloatArray] = {}

    def __call__(self, b: int, seq_len: float) -> FloatArray:
        key = (b, int(seq_len) >> 4)
        costs = self._cache.get(key)
        if costs is None:
            s = float((key[1] << 4) + 8)
            costs = np.array([self.profile.step_time_s(b, k, s) for k in range(self.max_k + 1)])
            self._cache[key] = costs
        return costs
