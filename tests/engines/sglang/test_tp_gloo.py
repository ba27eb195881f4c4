"""Rank agreement with real torch.distributed gloo processes on CPU (specpolicy.runtime.tp)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def _spawn(tmp_path: Path, mode: str, world: int = 2, target: str = "run") -> list[dict[str, Any]]:
    import _tp_worker
    import torch.multiprocessing as mp

    tag = mode.replace(":", "-")
    init = tmp_path / f"init-{tag}"
    outs = [tmp_path / f"{tag}-{r}.json" for r in range(world)]
    ctx = mp.get_context("spawn")
    body = getattr(_tp_worker, target)
    procs = [ctx.Process(target=body, args=(r, world, str(init), mode, str(outs[r]))) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0, f"rank process failed with exit code {p.exitcode}"
    return sorted((json.loads(o.read_text()) for o in outs), key=lambda d: d["group_rank"])


def test_broadcast_all_ranks_apply_group_rank0s_timing_decision(tmp_path: Path) -> None:
    results = _spawn(tmp_path, "auto")  # auto + a timing policy + 3 ranks = broadcast
    assert all(r["mode"] == "broadcast" for r in results)
    # group rank 0 saw fast, slow, fast, ... -> 3, 0, 3, ...; the others saw only slow steps but follow it
    expected = [3, 0, 3, 0, 3, 0]
    assert [r["depths"] for r in results] == [expected] * 2


def test_local_mode_hides_timing_so_ranks_cannot_diverge(tmp_path: Path) -> None:
    results = _spawn(tmp_path, "local")
    assert all(r["mode"] == "local" for r in results)
    assert [r["depths"] for r in results] == [[1] * 6] * 2  # time unknown on every rank -> the same depth


@pytest.mark.parametrize("fault", ["raise", "slow"])
def test_a_fault_on_one_rank_only_leaves_the_ranks_agreed_by_default(tmp_path: Path, fault: str) -> None:
    """Rank 1's policy raises (or overruns the decide budget) in steps 5-29, rank 0's does not. With the
    default agreement, rank 0's guarded decision goes to every rank: one depth per step everywhere."""
    results = _spawn(tmp_path, f"auto:{fault}", target="run_fault")
    assert all(r["mode"] == "broadcast" for r in results)
    rank0, rank1 = (r["depths"] for r in results)
    assert rank0 == rank1 == [0] * 40  # rank 0 never failed, so nobody falls back


@pytest.mark.parametrize("fault", ["raise", "slow"])
def test_local_agreement_is_what_a_rank_local_fault_breaks(tmp_path: Path, fault: str) -> None:
    """The control: each rank deciding alone, rank 1 falls back to the default depth where rank 0 does
    not. In an engine those ranks would run different shapes and hang; this is why ``auto`` broadcasts
    when there is more than one rank."""
    results = _spawn(tmp_path, f"local:{fault}", target="run_fault")
    rank0, rank1 = (r["depths"] for r in results)
    assert rank0 == [0] * 40
    assert 3 in rank1[5:30] and rank1 != rank0


def test_a_policy_change_switches_every_rank_at_the_same_step(tmp_path: Path) -> None:
    """Only group rank 0 reads the control file; the change rides on its depth broadcast, so every rank
    runs the new depth from the same step and records the change at that step."""
    ctl = tmp_path / "control.json"
    world = 3
    init = tmp_path / "init-swap"
    outs = [tmp_path / f"swap-{r}.json" for r in range(world)]
    import _tp_worker
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_tp_worker.run_swap, args=(r, world, str(init), str(ctl), str(outs[r])))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0, f"rank process failed with exit code {p.exitcode}"
    results = sorted((json.loads(o.read_text()) for o in outs), key=lambda d: d["group_rank"])
    assert all(r["mode"] == "broadcast" for r in results)
    assert [r["watches"] for r in results] == [True, False, False]  # rank 0 alone reads the file
    # written after decision 5; checks before decisions 4, 7, 10, ...: every rank switches at decision 7
    assert [r["depths"] for r in results] == [[3] * 6 + [6] * 14] * world
    assert all(r["policy"] == {"name": "static", "num_steps": 6} for r in results)
    events = [[(e["step"], e["rank"]) for e in r["events"]] for r in results]
    assert events == [[(7, g)] for g in range(world)]
