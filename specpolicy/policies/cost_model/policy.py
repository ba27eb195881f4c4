"""cost_model's policy: the per-step loop that ties the estimates, the choice and the probe schedule together.

Per step it takes the outcome of the last step whose result is known (``outcomes``), then decides for the
coming step: its bucket's best depth, switched to under the margin and dwell rules, or a due probe. Every
``update_interval`` steps per bucket it folds the queued data in (``refresh``) and recomputes that bucket.
Anything malformed in the stats is missing data. No RNG: the same inputs give the same outputs.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...mode import MAX_NUM_STEPS, SpecMode
from ...profiles import StepCostModel
from ...snapshot import StateError, decode_into, encode, open_envelope, seal
from ...stats import StepStats
from .choice import BIG_GAIN
from .config import CostModelConfig
from .costs import context_length
from .estimates import BATCH_SAMPLE, TRANSITION_KNOWN, TRANSITION_LONG
from .refresh import Refresh
from .state import CLASSES, LOOSE, LoopState
from .table import MAX_BATCH, BucketGrid

__all__ = ["CostModelPolicy"]

_GRIDS: dict[int, BucketGrid] = {}


def _grid(per_octave: int) -> BucketGrid:
    g = _GRIDS.get(per_octave)
    if g is None:
        g = _GRIDS[per_octave] = BucketGrid(per_octave)
    return g


class CostModelPolicy(Refresh):
    """Goodput-maximising depth choice with an online step-cost model (docs/design/cost-model.md)."""

    __slots__ = ()

    def __init__(self, config: CostModelConfig, cost_model: StepCostModel | None = None) -> None:
        self.config = config
        self.cost_model = cost_model
        self._arms = config.candidate_steps()
        idx = [-1] * (MAX_NUM_STEPS + 1)
        for i, k in enumerate(self._arms):
            idx[k] = i
        self._idx = idx
        self._modes = tuple(SpecMode.of(k) for k in self._arms)
        self._grid = _grid(config.buckets_per_octave)
        self._margin1 = 1.0 + config.switch_margin
        self._dwell = config.min_dwell_steps
        self._probe_steps = config.probe_steps
        self._index = self._grid.index
        self._top = len(self._grid) - 1
        self.reset()

    def reset(self) -> None:
        self.s = LoopState.fresh(self.config, self._arms, self._grid, self.cost_model)
        self._refresh_expected()
        self.s.cur = self._prior_best()

    def state_dict(self) -> dict[str, object]:
        """The whole state (``LoopState``) as JSON data, with the config it was learned under."""
        return seal(self.config.name, self.config.model_dump(mode="json"), encode(self.s, CLASSES))

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Continue from a saved state: loaded into a fresh one, which replaces the running state only once
        all of it loaded (``StateError`` naming the field otherwise)."""
        data = open_envelope(state, self.config.name, self.config.model_dump(mode="json"))
        s = LoopState.fresh(self.config, self._arms, self._grid, self.cost_model)
        decode_into(s, data, CLASSES, "state", LOOSE)
        top = len(self._arms) - 1
        for name in ("cur", "probe_run", "look_i"):
            i = getattr(s, name)
            if not (i.__class__ is int and 0 <= i <= top):
                raise StateError(f"state.{name}", f"must be a depth index in [0, {top}], got {i!r}")
        s.bind()
        self.s = s

    def decide(self, stats: StepStats) -> SpecMode:
        s = self.s
        try:
            step = s.step = s.step + 1
            # Each field is read once here, at the boundary: anything but a well-formed value is converted
            # (numpy numbers, 0-d tensors) or becomes missing, so nothing malformed reaches the state.
            batch = stats[0]
            if batch.__class__ is not int or batch < 0 or batch > MAX_BATCH:
                batch = self._odd_batch(batch)
                b = self._index[batch] if batch <= MAX_BATCH else self._top
            else:
                b = self._index[batch]
            self._take_outcome(step, batch, stats)
            s.last_batch = batch
            visits = s.visits
            vis = visits[b] = visits[b] + 1
            if step >= s.refresh_at[b]:
                try:
                    self._refresh(b, context_length(stats[2]))
                except Exception:  # never retry the same failure every step: drop the queued data
                    s.pending.clear()
                    s.refresh_at[b] = step + self.config.update_interval
            ids = stats[12]  # request_ids
            if ids is not None and (
                step >= s.batch_at
                or (  # a small batch is priced when its requests change (the batch size gates it)
                    batch <= BATCH_SAMPLE
                    and ids.__class__ is list
                    and len(ids) <= BATCH_SAMPLE
                    and ids != s.batch_ids
                )
            ):
                self._price_batch(b, ids, step)
            cur = s.cur
            best = s.best[b]
            if best != cur:
                v = s.v[b]
                if v[best] > v[cur] * self._margin1 and (
                    step - s.switched >= self._dwell or v[best] > v[cur] * BIG_GAIN
                ):
                    cur = s.cur = best
                    s.switched = step
            if s.probe_left:  # a probe runs for probe_steps steps
                s.probe_left -= 1
                cur = s.probe_run
            elif vis >= s.probe_at[b]:
                probes = s.probes
                pi = probes.probe_i[b]
                n_probe = (
                    self._probe_steps
                    if (
                        probes.long[b]
                        and (
                            s.transition > TRANSITION_LONG
                            or (  # a first measurement, before switches were seen to be free
                                s.transition_n < TRANSITION_KNOWN and s.costs.cells.m[b][pi] == 0
                            )
                        )
                    )
                    or self._resume_unmeasured(b, pi)
                    else 1
                )
                audit = probes.audit[b]
                timed = audit and not probes.alarm[b] >> pi & 1  # an ordinary audit, not an alarm's
                if timed:  # one step bounds staleness; two measure the depth past a dear switch
                    n_probe = 2 if probes.measure_switch else 1
                probe = probes.take(b, vis, step, n_probe)
                if probe >= 0:
                    if timed:
                        # its cost is measured: its steps and the one back, against the running depth's
                        # steady step (the run being measured; right after a fold flushed it, the
                        # bucket's prediction, which audits are planned at)
                        if s.agg_n and s.agg_k == self._arms[cur]:
                            ref = s.agg_t / s.agg_n
                        else:
                            ref = s.choice.t[b][cur]
                        if ref > 0.0:
                            s.audit_watch = [self._arms[probe], n_probe, ref, 0.0, 0, 0, 0.0, 0.0]
                    cur = s.probe_run = probe
                    s.probe_left = n_probe - 1
                    back = step + n_probe + 1
                    if (audit or s.costs.cells.m[b][cur] < 2) and back < s.refresh_at[b]:
                        s.refresh_at[b] = back  # an audit, a first or second measurement: back by then
            if s.look == step and cur == s.cur and self._arms[cur] == 0:
                cur = s.look_i  # a look at the batch's requests (``_price_batch``)
            s.last_k = self._arms[cur]
            return self._modes[cur]
        except Exception:  # odd inputs are missing data: keep the running depth
            return self._modes[self.s.cur]

    def estimates(self) -> Mapping[str, float]:
        """Per-position acceptance; expected tokens, step time and tokens/s per depth (last bucket seen)."""
        out: dict[str, float] = {"num_steps": float(self._arms[self.s.cur])}
        rates = self.s.acc.rates
        for j in range(1, self.s.acc.max_pos + 1):
            out[f"accept_rate_{j}"] = rates[j]
        batch = self.s.last_batch
        b = self._index[batch] if 0 <= batch <= MAX_BATCH else self._top
        rep = self._grid.rep[b]
        absolute = self.cost_model is not None or self.s.costs.cells.nearest_measured(b) >= 0
        if self.cost_model is not None:  # 1.0 once measurements showed the profile's shape wrong
            out["prior_mismatch"] = 1.0 if self.s.costs.mismatch else 0.0
            if self.s.costs.mismatch:
                out["prior_mismatch_ratio"] = self.s.costs.mismatch
        for i, k in enumerate(self._arms):
            out[f"expected_tokens_{k}"] = self.s.expected[i]
            t = self.s.choice.t[b][i]
            if absolute and t > 0.0:
                out[f"step_ms_{k}"] = t * 1e3
                out[f"tokens_per_s_{k}"] = self.s.expected[i] * rep / t
        return out
