"""The lookahead oracle: one step of policy improvement over the best fixed depth, with the TRUE acceptances.

The per-step oracle maximises each step's own tokens per second, blind to what a depth does to the batch
later: on a population that mixes easy and hard requests it falls below the best fixed depth (deep drafts
finish the easy requests sooner, so the batch fills with hard ones, where the next steps choose shallower
depths, which keep the easy ones longer). This oracle looks past the step by valuing each request's tokens
at what they save later.

Definition, for a closed loop (a finished request's slot is refilled at once) of batch size B:

- Base policy: the fixed depth f that a fluid model says is best for the population: maximise
  ``e_f / c_f(B)``, where ``e_k(p) = sum_{i=0..k} p**i`` is a request's expected tokens per step at depth k,
  ``e_k`` the population's harmonic mean of it (a slot serves a request of acceptance p for ``L / e_k(p)``
  steps, so a slot's rate is ``1 / E[1 / e_k(p)]``) and ``c_k(B)`` the profile's true step cost.
- The population is estimated from the batches the oracle sees: a request stays in the batch in proportion
  to ``1 / e(p)`` at the depth it ran, so each request seen is weighted by ``e(p)`` at the previous step's
  depth (undoing that bias), in an exponentially decaying sum (half-life 256 decode steps, so phases are
  followed).
- Under f a request of acceptance p with r tokens left occupies its slot for ``r / e_f(p)`` more steps, each
  worth ``c_f / B`` seconds of the engine. One step at depth k costs ``c_k`` and brings each request
  ``m_k`` expected tokens (clipped to what it owes), saving ``m_k / e_f(p)`` of its steps under f. The
  lookahead depth maximises the net saving, in steps of f: ``sum over requests of m_k / e_f(p) - B c_k / c_f``
  (the average-reward policy-improvement step from f, with the fluid model's value of each request).

Policy improvement is never worse than its base policy in an exact model; here the model is a fluid one
(expected tokens, a population estimated online), so it is a strong reference, not a bound: a policy may beat
it. At batch 1 it mostly picks what the per-step oracle picks. Cost: two (B x K+1) array passes per decode
step, about what the per-step oracle costs.
"""

from __future__ import annotations

import numpy as np

from ..stats import StepStats
from .engine import FloatArray, IntArray, SimProfile

__all__ = ["LookaheadDecider"]

_EPS = 1e-9


class LookaheadDecider:
    """The depth of one step of policy improvement over the fluid model's best fixed depth (module doc)."""

    def __init__(self, profile: SimProfile, half_life_steps: float = 256.0) -> None:
        self.profile = profile
        self.max_k = int(profile.max_steps)
        self._i = np.arange(self.max_k + 1, dtype=np.float64)
        self._costs: dict[tuple[int, int], FloatArray] = {}
        self._decay = 0.5 ** (1.0 / half_life_steps)
        self._weight = 0.0
        self._inverse = np.zeros(self.max_k + 1)

    def _cost(self, b: int, seq_len: float) -> FloatArray:
        key = (b, int(seq_len) >> 4)
        costs = self._costs.get(key)
        if costs is None:
            s = float((key[1] << 4) + 8)
            costs = np.array([self.profile.step_time_s(b, k, s) for k in range(self.max_k + 1)])
            self._costs[key] = costs
        return costs

    def __call__(self, stats: StepStats, p: FloatArray, remaining: IntArray, seq_len: float) -> int:
        b = len(p)
        costs = self._cost(b, seq_len)
        powers = np.power(np.clip(p, _EPS, 1.0 - _EPS)[:, None], self._i[None, :])
        rate = np.cumsum(powers, axis=1)  # e_k(p) per request and depth, unclipped
        last = min(max(int(stats.last_num_steps), 0), self.max_k)
        seen = rate[:, last]
        self._weight = self._weight * self._decay + float(seen.sum())
        self._inverse = self._inverse * self._decay + (seen[:, None] / rate).sum(axis=0)
        base = int(np.argmax(self._weight / self._inverse / costs))
        powers[self._i[None, :] >= remaining[:, None]] = 0.0
        tokens = np.cumsum(powers, axis=1)  # m_k: clipped to what each request still owes
        saving = (tokens / rate[:, base : base + 1]).sum(axis=0) - b * costs / costs[base]
        return int(np.argmax(saving))
