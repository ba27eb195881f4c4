"""cost_model (alias goodput): pick the depth with the most expected tokens per second for the coming batch.

For each depth k in ``steps`` plus 0 it predicts ``E(k) / T(batch, k)``: expected tokens per request from
per-position acceptance over the step time at this batch size, learned online from ``last_step_time_s`` and
optionally seeded from a step-cost profile (the SmartSpec/TurboSpec goodput rule; the load signal comes from
measured step cost, because acceptance barely moves with load and cannot find the off-switch). The parts,
one idea each (docs/design/cost-model.md has the whole design):

- ``config``: the parameters, and loading the profile that seeds the costs;
- ``acceptance``: per-position acceptance and E(k);
- ``table`` and ``costs``: batch-size buckets, the learned step time per bucket and depth, and the runs of
  steps it learns from;
- ``choice``: tokens/s per depth, the best one, the switching rule;
- ``probes``: when to measure a depth it is not running;
- ``state``: all the mutable state, one object;
- ``estimates``, ``outcomes``, ``refresh`` and ``policy``: the per-step loop tying them together (the batch's
  expected tokens, a finished step's outcome, the periodic folding-in, decide() itself).
"""

from __future__ import annotations

from typing import Any

from ...policy import PolicyEntry
from ...profiles import StepCostModel
from .config import CostModelConfig, load_cost_model
from .policy import CostModelPolicy

__all__ = ["CostModelConfig", "CostModelPolicy", "ENTRY", "make_cost_model"]


def _factory(config: CostModelConfig) -> CostModelPolicy:
    return CostModelPolicy(config, load_cost_model(config.profile) if config.profile else None)


ENTRY = PolicyEntry("cost_model", CostModelConfig, _factory, aliases=("goodput",))


def make_cost_model(cost_model: StepCostModel | None = None, **fields: Any) -> CostModelPolicy:
    """Build the policy with a programmatic cost model (any ``StepCostModel``) instead of a profile name."""
    return CostModelPolicy(CostModelConfig(**fields), cost_model)
