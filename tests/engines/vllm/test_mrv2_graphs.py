"""Which CUDA graph vLLM's V2 model runner replays for a step at depth 0 and at depth K.

The target model's decode step runs ``1 + depth`` query tokens per request, and MRV2 picks the graph from a
table its ``CudaGraphManager`` builds at start-up from the capture sizes and
``num_speculative_tokens_per_batch_size``. Everything here is vLLM's own code: the engine configuration with
the schedule ``vllm-args`` writes, the capture sizes vLLM derives for a GPU's default graph mode, the
manager built as the release's ``GPUModelRunner`` builds it, and ``dispatch`` called the way the runner
calls it (unpadded token count, uniform query length). Only capture itself is skipped (no CUDA here): the
manager is told its graphs exist, and the platform's graph memory pool, which capture alone uses, is a
placeholder.
"""

from __future__ import annotations

import inspect
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from _vllm_harness import K_MAX, RELEASE, engine_args, use_model_runner

from specpolicy.adapters.vllm.args import build_vllm_args

MAX_SEQS = 8


@contextmanager
def single_rank(vllm_config: Any) -> Iterator[None]:
    """vLLM's process groups for one rank (gloo): the manager reads the pipeline group's rank."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with set_current_vllm_config(vllm_config):
        ps.init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{port}",
            backend="gloo",
        )
        ps.ensure_model_parallel_initialized(1, 1)
        try:
            yield
        finally:
            ps.destroy_model_parallel()
            ps.destroy_distributed_environment()


def adapter_schedule(max_seqs: int = MAX_SEQS) -> list[list[int]]:
    policy = {"name": "cost_model", "steps": list(range(1, K_MAX + 1))}  # may choose every depth, 0 too
    kwargs = build_vllm_args(policy, K_MAX, max_num_seqs=max_seqs).as_kwargs()
    return [list(e) for e in kwargs["speculative_config"]["num_speculative_tokens_per_batch_size"]]


@contextmanager
def graph_manager(model_dirs: Any, max_seqs: int = MAX_SEQS) -> Iterator[tuple[Any, list[list[int]]]]:
    """MRV2's target graph manager for the adapter's schedule, as the release's runner builds it."""
    import torch
    from vllm.config import CUDAGraphMode
    from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager

    schedule = adapter_schedule(max_seqs)
    extra = {} if max_seqs == MAX_SEQS else {"max_num_seqs": max_seqs, "max_num_batched_tokens": 8192}
    vc = engine_args(
        model_dirs, scheduler_cls=None, spec={"num_speculative_tokens_per_batch_size": schedule}, **extra
    ).create_engine_config()
    # The CPU platform turns graphs off; a GPU resolves MRV2's default mode and then the capture sizes.
    vc.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    vc.compilation_config.cudagraph_capture_sizes = None
    vc._set_cudagraph_sizes()
    params = inspect.signature(CudaGraphManager.__init__).parameters
    decode_len = 1 + K_MAX
    with single_rank(vc):
        if "decode_query_lens" in params:  # 0.34: one table per query length the schedule drafts
            m = CudaGraphManager(
                vc,
                torch.device("cpu"),
                CUDAGraphMode.FULL_AND_PIECEWISE,
                decode_query_lens=vc.get_decode_cudagraph_query_lens(decode_len),
            )
        else:
            m = CudaGraphManager(
                vc, torch.device("cpu"), CUDAGraphMode.FULL_AND_PIECEWISE, decode_query_len=decode_len
            )
        m._graphs_captured = True  # what capture() sets once the graphs exist
        yield m, schedule


def _no_graph_pool(platform_cls: Any) -> Any:
    """The platform's graph memory pool, which only capture uses: a placeholder (no CUDA here)."""
    return object()


@pytest.fixture
def manager(model_dirs: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[list[int]]]]:
    from vllm.platforms import current_platform

    use_model_runner(monkeypatch, "MRV2")
    monkeypatch.setattr(type(current_platform), "get_global_graph_pool", _no_graph_pool)
    with graph_manager(model_dirs) as built:
        yield built


def mode(m: Any, batch: int, depth: int) -> str:
    """The graph mode of a decode step of ``batch`` requests verifying ``depth`` drafts each."""
    q = 1 + depth
    return str(m.dispatch(batch, batch * q, q, 0).cg_mode.name)


def widest(schedule: list[list[int]], depth: int) -> int:
    """The widest batch the schedule gives ``depth`` (vLLM sizes each depth's graphs up to it)."""
    return max(hi for lo, hi, k in schedule if k == depth)


def test_depth_0_and_depth_k_replay_full_decode_graphs(manager: tuple[Any, list[list[int]]]) -> None:
    m, schedule = manager
    deep = {n: mode(m, n, K_MAX) for n in range(1, MAX_SEQS + 1)}
    off = {n: mode(m, n, 0) for n in range(1, MAX_SEQS + 1)}
    # depth K: a FULL graph at every batch size its schedule range covers, on every release
    assert all(deep[n] == "FULL" for n in range(1, widest(schedule, K_MAX) + 1)), deep
    if RELEASE.mrv2_graphs_per_depth:
        # depth 0 has its own table, sized up to max_num_seqs: FULL at every batch size
        assert set(off.values()) == {"FULL"}, off
        assert all(deep[n] in ("FULL", "PIECEWISE") for n in deep), deep  # never eager
    else:
        # the table is keyed by token count first: depth 0 is FULL where its token count is a capture
        # size, but a batch whose token count falls short of a deeper depth's rounded graph runs eagerly
        sizes = set(m.compilation_config.cudagraph_capture_sizes)
        assert all(off[n] == "FULL" for n in off if n in sizes), off
        assert "NONE" in off.values(), off


def test_switching_depth_every_step_replays_the_graph_of_each_depth(
    manager: tuple[Any, list[list[int]]],
) -> None:
    """Dispatch depends on the step's shape only, so alternating depths alternate between FULL graphs."""
    m, schedule = manager
    batch = min(widest(schedule, K_MAX), 4 if RELEASE.mrv2_graphs_per_depth else 2)
    seen = []
    for depth in [0, K_MAX, 0, K_MAX, 1, 0]:
        q = 1 + depth
        desc = m.dispatch(batch, batch * q, q, 0)
        seen.append((desc.cg_mode.name, desc.uniform_token_count))
    assert seen == [("FULL", 1 + d) for d in [0, K_MAX, 0, K_MAX, 1, 0]]


def main(argv: list[str]) -> None:
    """Print, per depth, the batch sizes 1..max_num_seqs that replay each graph mode (K=3, the adapter's
    schedule): ``python tests/engines/vllm/test_mrv2_graphs.py [MAX_NUM_SEQS]`` inside an engine venv."""
    import tempfile
    from pathlib import Path

    from _vllm_harness import write_model_dirs
    from vllm.platforms import current_platform

    max_seqs = int(argv[0]) if argv else 128
    type(current_platform).get_global_graph_pool = _no_graph_pool  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp, graph_manager(write_model_dirs(Path(tmp)), max_seqs) as built:
        m, schedule = built
        print(f"vLLM {RELEASE.version}, max_num_seqs={max_seqs}, schedule {schedule}")
        for depth in (0, K_MAX):
            by_mode: dict[str, list[int]] = {}
            for n in range(1, max_seqs + 1):
                by_mode.setdefault(mode(m, n, depth), []).append(n)
            for name, sizes in sorted(by_mode.items()):
                print(f"depth {depth} {name}: {len(sizes)} batch sizes {sizes}")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    main(sys.argv[1:])
