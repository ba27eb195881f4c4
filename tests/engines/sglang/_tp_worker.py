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

    from specpolicy import registry as policy_mod
    from specpolicy.runtime.runtime import AdapterRuntime
    from specpolicy.runtime.settings import AdapterSettings
    from specpolicy.runtime.tp import BroadcastSync

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
        depths.append(rt.decide(StepStats(batch_size=8, last_step_time_s=t))[1])
    with open(out_file, "w") as fh:
        json.dump(
            {"group_rank": group_rank, "depths": depths, "mode": rt.mode, "policy_calls": rt.controller.step},
            fh,
        )
    dist.destroy_process_group()


class RankFaultConfig(PolicyConfig):
    """Speculate 3 deep, except on group rank ``rank`` in steps ``start .. stop-1``, where it raises
    (``fault='raise'``) or takes ``delay_s`` (``fault='slow'``): a fault only one rank sees."""

    name: Literal["rankfault_for_tests"] = "rankfault_for_tests"
    fault: Literal["raise", "slow"] = "raise"
    rank: int = 1
    start: int = 5
    stop: int = 30
    delay_s: float = 0.003

    def candidate_steps(self) -> tuple[int, ...]:
        return (0, 3)


class RankFault:
    def __init__(self, config: RankFaultConfig) -> None:
        import os

        self.config = config
        self.mine = int(os.environ["SPECPOLICY_TEST_GROUP_RANK"]) == config.rank
        self.n = 0

    def decide(self, stats: StepStats) -> SpecMode:
        c, n = self.config, self.n
        self.n += 1
        if self.mine and c.start <= n < c.stop:
            if c.fault == "raise":
                raise RuntimeError("rankfault_for_tests: only this rank fails")
            import time

            time.sleep(c.delay_s)
        return SpecMode.off()  # the default depth (3) differs: a rank that falls back is visible

    def reset(self) -> None:
        self.n = 0


def run_fault(rank: int, world: int, init_file: str, spec: str, out_file: str) -> None:
    """``spec``: ``<tp_agreement>:<fault>``; 40 steps, the depths each rank ran, and how long each
    agreement took on this rank (for the per-step cost of a broadcast)."""
    import json
    import os
    import time

    import torch.distributed as dist

    from specpolicy import registry as policy_mod
    from specpolicy.runtime.runtime import AdapterRuntime
    from specpolicy.runtime.settings import AdapterSettings
    from specpolicy.runtime.tp import BroadcastSync

    mode, fault = spec.split(":")
    policy_mod._registry().entries["rankfault_for_tests"] = PolicyEntry(
        "rankfault_for_tests", RankFaultConfig, RankFault
    )
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    group = dist.new_group(list(range(world)), backend="gloo")
    os.environ["SPECPOLICY_TEST_GROUP_RANK"] = str(dist.get_rank(group))
    rt = AdapterRuntime(
        AdapterSettings.build(
            {"name": "rankfault_for_tests", "fault": fault},
            metrics=False,
            tp_agreement=mode,
            decide_budget_s=0.001,
            decide_budget_steps=4,
        ),
        engine="test",
        engine_version="0",
        path="gloo",
        allowed_steps=[0, 3],
        default_steps=3,
        rank=dist.get_rank(group),
        world_size=world,
        sync_factory=lambda: BroadcastSync(group),
    )
    depths, took = [], []
    for _ in range(40):
        t0 = time.perf_counter()
        depths.append(rt.decide(StepStats(batch_size=8))[1])
        took.append(time.perf_counter() - t0)
        dist.barrier(group)  # the engine's own per-step collectives keep the ranks in step
    with open(out_file, "w") as fh:
        json.dump({"group_rank": dist.get_rank(group), "depths": depths, "mode": rt.mode, "took": took}, fh)
    rt.close()
    dist.destroy_process_group()


def run_swap(rank: int, world: int, init_file: str, spec: str, out_file: str) -> None:
    """``spec``: the control file; 20 steps of static 3 with a check every 3 steps. Group rank 0 (the
    operator's stand-in) writes static 6 to the control file after decision 5; only it reads the file. Each
    rank reports the depths it ran and its trace's policy-change lines."""
    import json

    import torch.distributed as dist

    from specpolicy.registry import parse_config
    from specpolicy.runtime.control_file import write_control
    from specpolicy.runtime.runtime import AdapterRuntime
    from specpolicy.runtime.settings import AdapterSettings
    from specpolicy.runtime.tp import BroadcastSync
    from specpolicy.trace import iter_trace_lines

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    group = dist.new_group(list(range(world))[::-1], backend="gloo")  # group rank 0 is not global rank 0
    group_rank = dist.get_rank(group)
    trace = f"{out_file}.trace.jsonl"
    rt = AdapterRuntime(
        AdapterSettings.build(
            {"name": "static", "num_steps": 3},
            metrics=False,
            control_path=spec,
            control_every=3,
            trace_path=trace,
        ),
        engine="test",
        engine_version="0",
        path="gloo",
        allowed_steps=range(8),
        default_steps=3,
        rank=group_rank,
        world_size=world,
        sync_factory=lambda: BroadcastSync(group),
    )
    depths = []
    for step in range(1, 21):
        decided, k = rt.decide(rt.next_stats(8, 0, 100.0))
        depths.append(k)
        rt.outcome(decided, [1] * 8, 0.01)
        if step == 5 and group_rank == 0:
            write_control(spec, parse_config({"name": "static", "num_steps": 6}))
        dist.barrier(group)  # the engine's own per-step collectives keep the ranks in step
    rt.close()
    events = [obj for _, obj in iter_trace_lines(rt.trace.path) if obj.get("kind") == "policy_swap"]
    with open(out_file, "w") as fh:
        json.dump(
            {
                "group_rank": group_rank,
                "depths": depths,
                "mode": rt.mode,
                "policy": rt.settings.policy.model_dump(mode="json"),
                "watches": rt.control is not None and rt.control.watch is not None,
                "events": events,
            },
            fh,
        )
    dist.destroy_process_group()
