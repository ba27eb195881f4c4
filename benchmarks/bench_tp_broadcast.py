"""What ``tp_agreement=broadcast`` adds per decode step: one 8-byte gloo broadcast between two processes.

Usage (from the repository root; needs torch)::

    python benchmarks/bench_tp_broadcast.py                  # 2 ranks, 3000 broadcasts, the first 500 dropped
    python benchmarks/bench_tp_broadcast.py --ranks 4 --n 5000

``BroadcastSync.share`` (specpolicy/runtime/tp.py) is timed back to back on every rank of a gloo group on
this host, as the adapters build it over an engine's CPU group; prints each rank's median and 10th
percentile in microseconds. The ranks run as processes of one machine, so a loaded host (fewer cores than
ranks plus their neighbours) inflates the figure.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _rank(rank: int, world: int, init: str, n: int, skip: int, queue: Any) -> None:
    import torch.distributed as dist

    from specpolicy.runtime.tp import BroadcastSync

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    sync = BroadcastSync(dist.new_group(list(range(world)), backend="gloo"))
    took = []
    for i in range(n):
        t0 = time.perf_counter()
        sync.share(i % 4)
        took.append(time.perf_counter() - t0)
    took = sorted(took[skip:])
    queue.put((rank, statistics.median(took) * 1e6, took[len(took) // 10] * 1e6))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--n", type=int, default=3000, help="broadcasts per rank")
    ap.add_argument("--skip", type=int, default=500, help="first broadcasts left out (warm-up)")
    args = ap.parse_args()
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    init = str(Path(tempfile.mkdtemp()) / "init")
    work = (args.ranks, init, args.n, args.skip, queue)
    procs = [ctx.Process(target=_rank, args=(r, *work)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    results = sorted(queue.get() for _ in procs)
    for p in procs:
        p.join(120)
    print("| rank | median (us) | p10 (us) |\n|---:|---:|---:|")
    for rank, med, p10 in results:
        print(f"| {rank} | {med:.1f} | {p10:.1f} |")


if __name__ == "__main__":
    main()
