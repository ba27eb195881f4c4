"""Tensor/data-parallel agreement: every rank must run the same draft depth every step, or the engine hangs.

Each rank owns its own policy and StepController. Two ways to keep them in lockstep:

* ``local``: every rank decides by itself from rank-identical inputs only. Batch composition, context lengths,
  the waiting queue and the accepted-draft counts are identical on all ranks (the engine broadcasts requests
  and, when sampling, the verify result from rank 0); measured wall time is not. So in this mode the adapter
  hides ``last_step_time_s`` from the policy whenever more than one rank exists. No communication per step.
* ``broadcast``: rank 0 decides with the full stats (timing included) and its depth is broadcast to the other
  ranks over the scheduler's CPU (gloo) group: one 8-byte collective per decode step. The other ranks record
  the imposed depth (``StepController.force``) without calling their policy.

``auto`` (the default) picks ``broadcast`` whenever there is more than one rank and a CPU group to broadcast
over. Identical inputs are not enough for ``local``: the guard around the policy reacts to what happens on
its own rank (an exception only one rank's policy raises, a decide() over its time budget on one rank), and
a rank that falls back alone runs another depth than the others. Without a CPU group, ``auto`` runs
``local`` for policies that do not use timing (declared on the config, ``uses_step_time: ClassVar[bool] =
True``, ``PolicyConfig.needs_step_time``) and refuses the others at start-up.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from ..policy import PolicyConfig
from ..stats import StepStats
from .controller import StepController

__all__ = [
    "DecisionSync",
    "LocalSync",
    "BroadcastSync",
    "AgreedDecider",
    "agreement_mode",
    "policy_uses_timing",
]


class DecisionSync(Protocol):
    """Carries rank 0's depth to every rank of a group."""

    @property
    def rank(self) -> int: ...

    def share(self, num_steps: int) -> int:
        """Rank 0 passes its depth; every rank (rank 0 included) gets rank 0's depth back."""
        ...


class LocalSync:
    """A group of one: nothing to agree on."""

    rank = 0

    def share(self, num_steps: int) -> int:
        return num_steps


class BroadcastSync:
    """Rank 0's depth to all ranks of a torch.distributed CPU (gloo) group, with one reused int64 tensor."""

    def __init__(self, group: Any = None) -> None:
        import torch
        import torch.distributed as dist

        self._dist = dist
        self._group = group
        self._rank: int = int(dist.get_rank(group))
        self._src = dist.get_global_rank(group, 0) if group is not None else 0
        self._buf = torch.zeros(1, dtype=torch.int64)

    @property
    def rank(self) -> int:
        return self._rank

    def share(self, num_steps: int) -> int:
        buf = self._buf
        if self._rank == 0:
            buf[0] = num_steps
        self._dist.broadcast(buf, src=self._src, group=self._group)
        return int(buf[0])


def policy_uses_timing(config: PolicyConfig) -> bool:
    """Whether the policy's decision depends on measured wall time (which differs across ranks)."""
    return config.needs_step_time()


def agreement_mode(
    setting: Literal["auto", "local", "broadcast"],
    config: PolicyConfig,
    world_size: int,
    can_broadcast: bool = True,
) -> Literal["local", "broadcast"]:
    """The mode to run: one rank needs no agreement; ``auto`` broadcasts where the engine offers a CPU
    group (``can_broadcast``), else only for policies that use timing (the caller then refuses them)."""
    if world_size <= 1:
        return "local"
    if setting == "auto":
        return "broadcast" if can_broadcast or policy_uses_timing(config) else "local"
    return setting


class AgreedDecider:
    """Wraps a StepController so that all ranks of a group apply the same depth each step."""

    __slots__ = ("controller", "mode", "sync", "_hide_time")

    def __init__(
        self,
        controller: StepController,
        mode: Literal["local", "broadcast"],
        sync: DecisionSync | None = None,
        world_size: int = 1,
    ) -> None:
        if mode == "broadcast" and sync is None:
            raise ValueError("AgreedDecider: mode 'broadcast' needs a DecisionSync")
        self.controller = controller
        self.mode = mode
        self.sync = sync
        self._hide_time = mode == "local" and world_size > 1

    def decide(self, stats: StepStats) -> int:
        """The depth this rank must run; identical on every rank of the group."""
        if self.mode == "local":
            if self._hide_time and stats.last_step_time_s is not None:
                stats = stats._replace(last_step_time_s=None)
            return self.controller.decide(stats)
        sync = self.sync
        assert sync is not None
        if sync.rank == 0:
            return sync.share(self.controller.decide(stats))
        return self.controller.force(stats, sync.share(-1))
