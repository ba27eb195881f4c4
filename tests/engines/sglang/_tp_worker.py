"""Child-process body for test_tp_gloo.py (module level, so spawn can import it)."""

from __future__ import annotations

from typing import ClassVar, Literal

from specpolicy import SpecMode, StepStats
from specpolicy.policy import PolicyConfig, PolicyEntry


class TimedConfig(PolicyConfig):
    """Speculate 3 deep when the last step was fast, else off; 1 when the time is unknown."""

    name: Literal["timed_for_tests"] = "timed_for_tests"
    uses_step_time: ClassVar[bool] = True

    def candidate_steps(self) -> tuple[int, ...]:
        return (0, 1, 3)


class Timed:
    def __init__(self, config: TimedConfig) -> None:
        pass

    def decide(self, stats: StepStats) -> SpecMode:
        t = stats.last_step_time_s
        if t is None:
            return SpecMode.on(1)
        return SpecMode.on(3) if t < 0.01 else SpecMode.off()

    def reset(self) -> None:
        pass


def run(rank: int, world: int, init_file: str, mode: str, out_file: str) -> None:
    import json

    import torch.distributed as dist

    from specpolicy import policy as policy_mod
    from specpolicy.adapters.runtime import AdapterRuntime
    from specpolicy.adapters.settings import AdapterSettings
    from specpolicy.adapters.tp import BroadcastSync

    policy_mod._registry().entries["timed_for_tests"] = PolicyEntry("timed_for_tests", TimedConfig, Timed)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    # a sub-group in a different rank order, so that group rank 0 is NOT global rank 0
    order = list(range(world))[::-1]
    group = dist.new_group(order, backend="gloo")
    group_rank = dist.get_rank(group)
    rt = AdapterRuntime(
        AdapterSettings.build("timed_for_tests", metrics=False, tp_agreement=mode),
        engine="test",
        engine_version="0",
        path="gloo",
        allowed_steps=[0, 1, 3],
        default_steps=1,
        rank=group_rank,
        world_size=world,
        sync_factory=lambda: BroadcastSync(group),
    )
    depths = []
    for step in range(6):
        # group rank 0 sees fast steps on even steps; the others always see slow ones
        t = 0.001 if (group_rank == 0 and step % 2 == 0) else 0.5
        depths.append(rt.decide(StepStats(batch_size=8, last_step_time_s=t)))
    with open(out_file, "w") as fh:
        json.dump(
            {"group_rank": group_rank, "depths": depths, "mode": rt.mode, "policy_calls": rt.controller.step},
            fh,
        )
    dist.destroy_process_group()
