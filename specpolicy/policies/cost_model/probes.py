"""cost_model's probe schedule: when to run one step at another depth, to measure it.

Learning from the engine's own clock needs measurements of depths it is not running. Each bucket keeps a
clock (its visits) and, per depth, the visit of its last measurement or probe. A measured depth is due again
after ``cost / share`` visits (``cost``: what the whole probe loses in steps of the running depth, its steps'
predicted shortfall against the running depth and its two switches, see ``plan``; ``share``: the probe
budget split over the other depths), at least ``MIN_PROBE_INTERVAL`` and at most
``max_probe_interval``: a depth predicted 50% slower is re-measured rarely, a near-tie often, and every
depth's estimate is refreshed eventually, so a change in costs or acceptance is noticed. A depth never
measured in the bucket is first tried after ``loss**2 / (share * EXPLORE_SCALE)`` visits: near-ties at once,
clear losers like any other probe. A depth that loses by more than ``CONFIRM_LOSS`` on a single sample is
measured again after ``CONFIRM_INTERVAL`` visits: one slow step (the first after a prefill, 5-10x) must not
lock it out. In a bucket where one depth is measured and nothing lets the others be extrapolated
(blind; with a profile: only off or only speculation measured, see ``costs.StepCosts.unverified``), off
(while off runs: the most promising speculative depth; without off: the farthest depth) is measured next,
so a line through two points prices the rest. Two probes are at least ``PROBE_GAP`` steps apart.
"""

from __future__ import annotations

import math

__all__ = ["FAR", "ProbeSchedule"]

#: Steps between two probes.
PROBE_GAP = 4
#: A measured depth is re-measured at most once per this many visits of its bucket; an unanswered
#: exploration probe is retried after as many.
MIN_PROBE_INTERVAL = 128
CONFIRM_INTERVAL = 16
CONFIRM_LOSS = 0.1
EXPLORE_SCALE = 0.1
#: Probes allowed beyond ``max_share`` of the steps (the first explorations of a new bucket come in a burst).
SHARE_BURST = 16
#: A probe predicted to lose at most this much may run ``probe_steps`` steps (the policy decides, from the
#: transitions it has seen): the first step after a switch is a transition (live: up to 1.5x a steady off
#: step, 1.7x a speculative one after off), which can flip a near tie but not a loss this large.
LONG_PROBE_LOSS = 0.4
#: Steps between two audits (``ProbeSchedule.audit_due``), and the most a depth's measurement may age before
#: one is due, where an audit costs at most ``AUDIT_STEPS * AUDIT_SHARE`` steps: what bounds, in steps, how
#: long a stale estimate can keep the policy on the wrong side.
AUDIT_STEPS = 672
#: The share of the steps audits may cost where they are dear (a resume that pays a lazy drafter's
#: catch-up), by what the least of the audits of the last ``AUDIT_WINDOW`` steps (at least the last
#: ``AUDIT_PRICES``) took; their spacing then grows up to ``AUDIT_MAX_STEPS``. With ``probe_budget``'s
#: 0.2%, probing costs at most 0.5% in steady state. A slowdown makes only the audits during it dear: the
#: window is longer than the longest slowdown the bound in steps covers (5,000 steps) plus one spacing, so
#: it still holds a cheap audit from before when the slowdown ends, and the spacing stays ``AUDIT_STEPS``.
AUDIT_SHARE = 0.003
AUDIT_PRICES = 4
AUDIT_WINDOW = 6144
AUDIT_MAX_STEPS = 8192
#: The most audit prices kept (a bound on memory whatever the spacing).
AUDIT_KEPT = 32
#: "Never": a visit count no bucket reaches.
FAR = 1 << 62
_NEVER = -(10**9)


class ProbeSchedule:
    """Per bucket: visits, the next probe (visit and depth index), and per depth the visit last measured."""

    __slots__ = (
        "probe_at",
        "probe_i",
        "long",
        "visits",
        "seen",
        "stamp",
        "audit",
        "alarm",
        "audit_next",
        "audit_at",
        "audit_gap",
        "prices",
        "priced",
        "switch",
        "measure_switch",
        "audits",
        "wave",
        "last",
        "count",
        "_share",
        "_max_interval",
        "_max_share",
    )

    def __init__(
        self, n_buckets: int, n_arms: int, budget: float, max_interval: int, max_share: float = 0.05
    ) -> None:
        self.probe_at = [FAR] * n_buckets
        self.probe_i = [0] * n_buckets
        #: per bucket: whether its next probe is a near tie (may run ``probe_steps`` steps, LONG_PROBE_LOSS)
        self.long = [True] * n_buckets
        #: decide() calls that fell in the bucket (the clock of its schedule).
        self.visits = [0] * n_buckets
        #: per bucket and depth index: the visit count of its last measurement or probe (-1: never).
        self.seen: list[list[int]] = [[-1] * n_arms for _ in range(n_buckets)]
        #: per bucket and depth index: the step of its last measurement or probe (the audit's clock).
        self.stamp: list[list[int]] = [[_NEVER] * n_arms for _ in range(n_buckets)]
        #: per bucket: whether its next probe is an audit (``audit_due``)
        self.audit = [False] * n_buckets
        #: per bucket: the depth indices a change elsewhere calls to be audited at once (a bit mask)
        self.alarm = [0] * n_buckets
        #: no ordinary audit before this step, and the audits taken
        self.audit_next = 0
        #: the step of the last ordinary audit, the steps from one to the next, and what the last audits
        #: cost beyond their switches (steps of the running depth beyond as many steady ones; none measured
        #: yet: free)
        self.audit_at = _NEVER
        self.audit_gap = AUDIT_STEPS
        self.prices = [0.0]
        #: the step of each price (the first: the start, an audit assumed free)
        self.priced = [0]
        #: what an audit's switches cost, as last measured (its first step over its last, and the step back
        #: over a steady one; -1: never measured)
        self.switch = -1.0
        #: whether the next audit runs two steps, so that its switch is measured apart from the depth's
        #: steady step (``price_audit``)
        self.measure_switch = False
        self.audits = 0
        #: per depth index: the step of its last alarm wave (``raise_alarm``)
        self.wave = [_NEVER] * n_arms
        #: the step of the last probe.
        self.last = _NEVER
        #: probe steps taken.
        self.count = 0
        self._share = budget / max(n_arms - 1, 1)
        self._max_interval = max_interval
        self._max_share = max_share

    def plan(
        self,
        b: int,
        v: list[float],
        cur: int,
        off: list[bool],
        samples: list[int],
        blind: bool,
        first: int,
        hope: list[float] | None = None,
        times: list[float] | None = None,
        steps: int = 1,
        into: float = 0.0,
        back: float = 0.0,
        now: int = -1,
        best: int = -1,
    ) -> None:
        """Bucket b's next probe from its values per depth index (``samples``: per cell, counted up to 3;
        ``first``: the shallowest depth, 0 when off is offered; ``hope``: while off runs, the values the
        depths would have at the best acceptance seen, see ``hope_due``; ``times``: the predicted step
        times, see ``_price``; ``steps``: the steps of a probe of a near tie; ``into``, ``back``: what the
        first step after the switch into the probed depth and after the one back cost beyond a steady step,
        relative to it; ``now``: the step, for ``audit_due``, which is off when negative; ``best``: the
        bucket's best depth index, what it runs once the switching rule lets it, the audit's reference)."""
        n = len(v)
        vcur = v[cur] if v[cur] > 0.0 else 1e-300
        price = _price(times, cur, n)
        share = self._share
        max_int = self._max_interval
        seen, vis = self.seen[b], self.visits[b]
        due_best, due_i, due_loss = FAR, -1, 2.0
        for i in range(n):
            if i == cur or off[i]:
                continue
            loss = 1.0 - v[i] / vcur
            if loss < 0.0:
                loss = 0.0
            cost = price[i]
            top = max_int * cost
            # (the bounds inline, as min(max(x, lo), hi) orders them: it runs per depth every refresh)
            if seen[i] >= 0:  # measured (or explored, its measurement lost): re-measure when due
                if loss > CONFIRM_LOSS and samples[i] == 1:
                    due = seen[i] + CONFIRM_INTERVAL  # a loser on one sample: it may have been an outlier
                else:  # the whole probe: its steps' loss and the two switches, in running steps
                    x = ((steps if loss <= LONG_PROBE_LOSS else 1) * loss * cost + into * cost + back) / share
                    if MIN_PROBE_INTERVAL > x:
                        x = MIN_PROBE_INTERVAL
                    due = seen[i] + int(top if top < x else x)
            else:
                x = loss * cost
                x = x * x / (share * EXPLORE_SCALE)
                due = int(top if top < x else x)
            if due < due_best or (due == due_best and loss < due_loss):
                due_best, due_i, due_loss = due, i, loss
        if hope is not None:
            h_due, h_i = self.hope_due(v, cur, off, seen, hope)
            if h_due < due_best:
                due_best, due_i, due_loss = h_due, h_i, 2.0
        if blind:
            # One depth measured here and nothing to extrapolate from: measure off (or the depth farthest
            # from the running one) next, so a line through two points prices all the others.
            if first == 0 and cur == 0:  # off runs: the most promising speculative depth
                far = max((i for i in range(1, n) if not off[i]), key=v.__getitem__, default=0)
            else:
                far = 0 if first == 0 else (n - 1 if cur < n // 2 else 0)
            if far != cur and seen[far] < 0:
                due_best, due_i = 0, far
                due_loss = 0.0  # nothing to go by yet: measure it properly
        audit = False
        if now >= 0:  # before an ordinary probe: the audit bounds the staleness
            a_i = self.audit_due(b, v, cur if best < 0 else best, off, first, now)
            if a_i >= 0:
                due_best, due_i, due_loss, audit = vis, a_i, 2.0, True
        self.audit[b] = audit
        if due_i >= 0:
            self.probe_at[b] = max(due_best, vis)
            self.probe_i[b] = due_i
            if due_loss > 1.0:  # the hope probe or an audit: its loss is computed here
                due_loss = max(0.0, 1.0 - v[due_i] / vcur)
            self.long[b] = due_loss <= LONG_PROBE_LOSS

    def audit_due(self, b: int, v: list[float], cur: int, off: list[bool], first: int, now: int) -> int:
        """The depth index bucket b audits now, or -1: the bound on staleness, in steps (``cur``: the depth
        index it runs or is about to).

        The budgeted schedule spaces a depth's re-measurements by what they cost, so a depth that looks
        dear (a slowdown that has ended, slow outliers) waits long, in visits of its bucket. The audit does
        not look at estimates: every ``audit_gap`` steps (``AUDIT_STEPS``, longer only where audits were
        measured dear, ``price_audit``; of all buckets together) the running bucket's best measured depth of
        the other kind (off while speculating, the best speculative depth while off; without off, the
        runner-up) is measured once if its last measurement is older than that. A measurement that shows an
        estimate stale raises an alarm in every other bucket (``raise_alarm``): each audits the same depth on
        its next refresh, without waiting for the clock. One ordinary audit per ``audit_gap`` steps: its
        cost is one probe per that many steps, whatever the number of buckets."""
        stamp = self.stamp[b]
        mask = self.alarm[b]
        if mask:
            for i in range(len(v)):
                if mask >> i & 1:
                    if i != cur and not off[i]:
                        return i
                    mask &= ~(1 << i)  # running (so measured anyway) or not offered
            self.alarm[b] = mask
        best, j = -1.0, -1
        spec = first > 0 or cur > 0  # whether the running depth speculates
        for i in range(len(v)):
            if i == cur or off[i]:
                continue
            if first == 0 and (i > 0) == spec:
                continue  # the same kind as the running depth (with off offered)
            if stamp[i] <= _NEVER:
                continue  # never measured here: explored, not audited
            if v[i] > best:
                best, j = v[i], i
        if j < 0 or now < self.audit_next or now - stamp[j] < self.audit_gap:
            return -1
        return j

    def price_audit(self, cost: float, now: int, switch: float = -1.0) -> None:
        """What an audit was measured to cost at step ``now``, in steps of the running depth beyond as
        many steady ones, and what of it its switches cost (``switch``, measured by an audit of two steps or
        more; -1: not measured, the last measurement is taken).

        The spacing of audits becomes ``AUDIT_STEPS`` or, where audits cost more than ``AUDIT_STEPS *
        AUDIT_SHARE``, that cost over ``AUDIT_SHARE`` (at most ``AUDIT_MAX_STEPS``), from two parts. What the
        audited depth's steps cost beyond the switches is taken as the least of the last ``AUDIT_WINDOW``
        steps (at least the last ``AUDIT_PRICES``), the start counted free: a slowdown makes the audits
        during it dear, and the window still holds a cheap one from before when it ends. What the switches
        cost (a lazy drafter's catch-up on resuming) is the last measurement, without the free start: that
        audit ran a second step, which priced the depth past its first, so a dear switch (or a few slow
        first steps) cannot keep a stale estimate. A dear audit makes the next one run two steps
        (``measure_switch``) while no switch was measured, or when it cost less than the switch it was
        thought to pay (the batch moved to where resuming is cheaper)."""
        prices, priced = self.prices, self.priced
        if len(priced) != len(prices):  # a state saved without the steps: begin again, audits free
            prices[:], priced[:] = [0.0], [now]
        cost = cost if cost > 0.0 else 0.0
        if switch >= 0.0:
            self.switch = switch if switch < cost else cost
        known = self.switch
        self.measure_switch = cost > AUDIT_STEPS * AUDIT_SHARE and (known < 0.0 or cost < known)
        prices.append(cost - known if 0.0 <= known < cost else (0.0 if known >= 0.0 else cost))
        priced.append(now)
        while len(prices) > AUDIT_PRICES and (now - priced[0] > AUDIT_WINDOW or len(prices) > AUDIT_KEPT):
            del prices[0], priced[0]
        gap = (min(prices) + (known if known > 0.0 else 0.0)) / AUDIT_SHARE
        self.audit_gap = AUDIT_STEPS if not gap > AUDIT_STEPS else min(int(gap), AUDIT_MAX_STEPS)
        if self.audit_at > _NEVER:
            self.audit_next = self.audit_at + self.audit_gap

    def raise_alarm(self, b: int, i: int, now: int) -> None:
        """Depth index i of bucket b was found changed at step ``now``: every other bucket that has not
        measured it since audits it. Within ``AUDIT_STEPS`` of an alarm for the same depth, "since" is the
        first one's step: the buckets that answered it are not asked again."""
        wave_at = self.wave[i]
        if now - wave_at > AUDIT_STEPS:
            wave_at = self.wave[i] = now
        alarm, stamp = self.alarm, self.stamp
        for nb in range(len(alarm)):
            if nb != b and stamp[nb][i] < wave_at:
                alarm[nb] |= 1 << i

    def hope_due(
        self, v: list[float], cur: int, off: list[bool], seen: list[int], hope: list[float]
    ) -> tuple[int, int]:
        """(visit, depth index) of the probe that can reveal that speculation pays again, while off runs.

        Off gives no acceptance data, so only a probe can show that acceptance came back. Its price is
        ``loss`` (the depth's predicted shortfall now) for one step; its worth, if acceptance is back at the
        best level seen, is ``gain`` (that depth's value then over the running one's) for every step it
        would otherwise stay off. With changes expected about once per ``max_probe_interval`` steps the
        interval that balances the two is sqrt(2 loss max_interval / gain) (periodic inspection): more often
        when being wrong costs more and when the probe step is cheap against off; never when speculation
        could not pay even at the best acceptance seen. They are exploration with a positive expected
        return, so ``probe_budget`` does not bound them; ``max_share`` does."""
        best, j = 0.0, -1
        for i in range(len(v)):
            if i != cur and not off[i] and hope[i] > best:
                best, j = hope[i], i
        vcur = v[cur] if v[cur] > 0.0 else 1e-300
        gain = best / vcur - 1.0
        if j < 0 or gain <= 0.0:
            return FAR, -1
        loss = 1.0 - v[j] / vcur
        if loss < 0.0:
            loss = 0.0
        interval = max(math.sqrt(2.0 * loss * self._max_interval / gain), PROBE_GAP)
        return max(seen[j], 0) + int(min(interval, self._max_interval)), j

    def take(self, b: int, vis: int, step: int, steps: int = 1) -> int:
        """The depth index to probe now for ``steps`` steps (its visit is due), or -1 while the last probe is
        too recent or the probe steps would exceed ``max_share`` of the steps (plus ``SHARE_BURST``)."""
        if step - self.last < PROBE_GAP or self.count + steps > self._max_share * step + SHARE_BURST:
            return -1
        i = self.probe_i[b]
        self.seen[b][i] = vis
        if self.audit[b]:  # an alarm's audit leaves the clock alone
            self.audit[b] = False
            self.audits += 1
            if self.alarm[b] >> i & 1:
                self.alarm[b] &= ~(1 << i)
            else:
                self.audit_at = step
                self.audit_next = step + self.audit_gap
        self.stamp[b][i] = step
        self.last = step + steps - 1
        self.count += steps
        self.probe_at[b] = FAR
        return i


def _price(times: list[float] | None, cur: int, n: int) -> list[float]:
    """Per depth index, what one probe step costs in steps of the running depth: its predicted time over the
    running depth's, at least 1. The throughput a probe loses is its value's shortfall times that (a step
    twice as long loses twice the time): probes of dear depths (verify-heavy batches, an off stretch's
    catch-up paid on resuming) are spaced by it, ``max_probe_interval`` included, so the budget holds in
    time and not only in steps."""
    if times is None or not times[cur] > 0.0:
        return [1.0] * n
    tc = times[cur]
    return [t / tc if t > tc else 1.0 for t in times]
