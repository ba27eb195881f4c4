"""Tensor/data-parallel agreement: every rank must run the same draft depth every step, or the engine hangs.

Each rank owns its own policy and StepController. Two ways to keep them in lockstep:

* ``local``: every rank decides by itself from rank-identical inputs only. Batch composition, context lengths,
  the waiting queue and the accepted-draft counts are identical on all ranks (the engine broadcasts requests
  and, when sampling, the verify result from rank 0); measured wall time is not. So in this mode the adapter
  hides ``last_step_time_s`` from the policy whenever more than one rank exists. No communication per step.
* ``broadcast``: rank 0 decides with the full stats (timing included) and its depth is broadcast to the other
  ranks over the scheduler's CPU (gloo) group: one 8-byte collective per decode step. The other ranks record
  the imposed depth (``StepController.force``) without calling their policy.

A policy change (``runtime.control_file``) rides on the broadcast: rank 0 adds ``SWAP_FLAG`` to the depth
of the step whose decision the new policy made, and sends the policy's JSON over the same group right
after (``share_bytes``); the other ranks install it before recording that step, so every rank switches at
the same step. Steps without a change carry the depth alone, as before.

``auto`` (the default) picks ``broadcast`` whenever there is more than one rank and a CPU group to broadcast
over. Identical inputs are not enough for ``local``: the guard around the policy reacts to what happens on
its own rank (an exception only one rank's policy raises, a decide() over its time budget on one rank), and
a rank that falls back alone runs another depth than the others. Without a CPU group, ``auto`` runs
``local`` for policies that do not use timing (declared on the config, ``uses_step_time: ClassVar[bool] =
True``, ``PolicyConfig.needs_step_time``) and refuses the others at start-up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal, Protocol

from ..errors import short_str
from ..policy import PolicyConfig
from ..stats import StepStats
from .controller import StepController
from .decision import Decision

log = logging.getLogger("specpolicy.adapter")

#: Added to rank 0's depth on the step where it installed another policy (its JSON follows).
SWAP_FLAG = 1 << 32

__all__ = [
    "SWAP_FLAG",
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

    def share_bytes(self, data: bytes | None) -> bytes:
        """Rank 0 passes ``data`` (the others None); every rank gets rank 0's bytes back (rare: a policy
        change)."""
        ...


class LocalSync:
    """A group of one: nothing to agree on."""

    rank = 0

    def share(self, num_steps: int) -> int:
        return num_steps

    def share_bytes(self, data: bytes | None) -> bytes:
        return data or b""


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

    def share_bytes(self, data: bytes | None) -> bytes:
        import torch

        n = self.share(len(data) if data is not None else -1)
        if n <= 0:
            return b""
        if self._rank == 0:
            assert data is not None
            payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        else:
            payload = torch.empty(n, dtype=torch.uint8)
        self._dist.broadcast(payload, src=self._src, group=self._group)
        return bytes(payload.tolist())


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

    __slots__ = ("controller", "mode", "sync", "_hide_time", "_outgoing", "on_swap")

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
        self._outgoing: bytes | None = None
        #: ranks > 0: installs a policy rank 0 sent, ``on_swap(payload, step)``
        self.on_swap: Callable[[bytes, int], None] | None = None

    def announce(self, payload: bytes) -> None:
        """Rank 0: send ``payload`` (the policy just installed) with the coming decision's depth."""
        self._outgoing = payload

    def decide(self, stats: StepStats) -> Decision:
        """This rank's decision; its depth is identical on every rank of the group."""
        if self.mode == "local":
            if self._hide_time and stats.last_step_time_s is not None:
                stats = stats._replace(last_step_time_s=None)
            return self.controller.decide(stats)
        sync = self.sync
        assert sync is not None
        if sync.rank == 0:
            decision = self.controller.decide(stats)
            if self._outgoing is None:
                sync.share(decision[1])
                return decision
            payload, self._outgoing = self._outgoing, None
            sync.share(decision[1] + SWAP_FLAG)
            sync.share_bytes(payload)
            return decision
        k = sync.share(-1)
        if k >= SWAP_FLAG:
            k = self._receive(sync, k - SWAP_FLAG)
        return self.controller.force(stats, k)

    def _receive(self, sync: DecisionSync, k: int) -> int:
        """Rank 0 changed its policy at this step: take the policy and install it here too."""
        payload = sync.share_bytes(None)
        if self.on_swap is not None:
            try:
                self.on_swap(payload, self.controller.step + 1)
            except Exception as exc:  # noqa: BLE001 - rank 0 decides; this rank only records the change
                log.error(
                    "specpolicy rank %d: installing rank 0's new policy failed: %s", sync.rank, short_str(exc)
                )
        return k
