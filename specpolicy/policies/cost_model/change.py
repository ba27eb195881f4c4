"""A change in acceptance, detected as a change: a two-sided CUSUM on the accepted drafts per request.

The acceptance estimate forgets with a half-life of ``acceptance_halflife`` data steps, which is right for
drift but slow for a jump (a new kind of traffic, a long request of another kind): a long average needs
about a half-life to cross a decision threshold. Each sampled request of a speculative step gives a
standardised deviation from what the current estimate predicts for its depth, ``(accepted - mean_k) /
sd_k``, where mean_k and sd_k are the mean and spread of one request's accepted drafts at depth k under
the per-position rates. Two cumulative sums, one per direction, add ``z - slack`` (or ``-z - slack``) per
request and never fall below zero; one crossing ``threshold`` is an alarm: the policy then forgets most of
the old acceptance counts (so the data since the change dominate) and recomputes at once. The hot path only
queues bytes as before: the policy scans the queued counts every 16 steps, when a probe's outcome arrives
and before every fold, so the test costs nothing per step and reacts within 16 steps. A probe while off
counts like any other step: two deep probes that accept everything where the estimate expects almost
nothing are an alarm, so speculation comes back a probe or two after acceptance did.
"""

from __future__ import annotations

import math

from ...mode import MAX_NUM_STEPS

__all__ = ["ChangeDetector"]


class ChangeDetector:
    """Two-sided standardised CUSUM on accepted drafts per request, against the current estimate."""

    __slots__ = ("up", "down", "slack", "threshold", "mean", "inv_sd", "depths", "pos", "alarms")

    def __init__(self, depths: tuple[int, ...], slack: float, threshold: float) -> None:
        self.up = 0.0
        self.down = 0.0
        self.slack = slack
        self.threshold = threshold
        #: per depth: expected accepted drafts of one request, and 1 / its standard deviation (0: no test).
        self.mean = [0.0] * (MAX_NUM_STEPS + 1)
        self.inv_sd = [0.0] * (MAX_NUM_STEPS + 1)
        #: the speculative depths whose buffers are scanned, and per depth how far each was scanned.
        self.depths = tuple(k for k in depths if k > 0)
        self.pos = [0] * (MAX_NUM_STEPS + 1)
        self.alarms = 0

    def expect(self, rates: list[float]) -> None:
        """The per-depth mean and spread of accepted drafts under per-position rates a_1..a_n (index 1..n).

        With survival S_i = P(accepted >= i) = a_1 ... a_i: mean = sum S_i, E[c^2] = sum (2i - 1) S_i."""
        mean, inv_sd = self.mean, self.inv_sd
        m = sq = 0.0
        surv = 1.0
        for k in range(1, len(rates)):
            surv *= rates[k]
            m += surv
            sq += (2 * k - 1) * surv
            var = sq - m * m
            mean[k] = m
            inv_sd[k] = 1.0 / math.sqrt(var) if var > 1e-4 else 0.0

    def scan(self, bufs: list[bytearray]) -> bool:
        """Test the counts queued in ``bufs`` (per depth, one byte per request) since the last scan; True
        on an alarm (the sums then restart)."""
        pos, mean, inv_sd, slack = self.pos, self.mean, self.inv_sd, self.slack
        up, down = self.up, self.down
        for k in self.depths:
            buf = bufs[k]
            p = pos[k]
            n = len(buf) - p
            if n <= 0:
                continue
            pos[k] = len(buf)
            inv = inv_sd[k]
            if inv:
                z = (sum(buf[p:]) - n * mean[k]) * inv  # a sum of n standardised requests
                up += z - n * slack
                down -= z + n * slack
                if up < 0.0:
                    up = 0.0
                if down < 0.0:
                    down = 0.0
        if up > self.threshold or down > self.threshold:
            self.up = self.down = 0.0
            self.alarms += 1
            return True
        self.up, self.down = up, down
        return False

    def rewind(self) -> None:
        """The buffers were folded (emptied): scan them from their start again."""
        self.pos = [0] * len(self.pos)
