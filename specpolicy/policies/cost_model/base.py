"""What cost_model's loop stands on: the attributes the config fixes, and the state (``LoopState``).

The loop's work is split by what it does, each a class in this chain: ``estimates`` (expected tokens of the
batch and the population), ``outcomes`` (what a finished step says), ``refresh`` (the periodic folding-in
and the bucket's table) and ``policy`` (decide() and the state's saving and loading).
"""

from __future__ import annotations

from ...mode import SpecMode
from ...profiles import StepCostModel
from .config import CostModelConfig
from .state import LoopState
from .table import BucketGrid

__all__ = ["LoopBase"]


class LoopBase:
    __slots__ = (
        "config",
        "cost_model",
        "s",
        "_arms",
        "_idx",
        "_modes",
        "_grid",
        "_index",
        "_top",
        "_margin1",
        "_dwell",
        "_probe_steps",
    )

    config: CostModelConfig
    cost_model: StepCostModel | None
    #: the mutable state, all of it
    s: LoopState
    #: fixed by the config: the depths (0 first), their index by depth (-1: not offered), their modes, the
    #: bucket grid and its index by batch size, the last bucket, the switching margin's factor, the dwell
    #: and a long probe's steps
    _arms: tuple[int, ...]
    _idx: list[int]
    _modes: tuple[SpecMode, ...]
    _grid: BucketGrid
    _index: tuple[int, ...]
    _top: int
    _margin1: float
    _dwell: int
    _probe_steps: int
