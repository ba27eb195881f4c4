"""Rank agreement with real torch.distributed gloo processes on CPU (specpolicy.adapters.tp)."""

from __future__ import annotations

import json
from pathlib import Path


def _spawn(tmp_path: Path, mode: str, world: int = 2) -> list[dict[str, object]]:
    import _tp_worker
    import torch.multiprocessing as mp

    init = tmp_path / f"init-{mode}"
    outs = [tmp_path / f"{mode}-{r}.json" for r in range(world)]
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_tp_worker.run, args=(r, world, str(init), mode, str(outs[r])))
        for r in range(world)
    ]
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
