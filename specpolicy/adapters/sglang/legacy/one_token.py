"""The skipped-speculation step on legacy SGLang: a one-token verify rooted at the last verified token.

A step without drafting must still look like a speculative step to the rest of the engine, so it keeps the
verify path (``ForwardMode.TARGET_VERIFY``) with a one-node draft tree: the draft token is the previous bonus
token, which the target always "accepts", and the target samples one new token after it. The result is then in
the exact shape of a launch-depth step whose drafts were all rejected (accept length 1 per request), which
every downstream consumer already handles: the draft catch-up (draft extend, which keeps the drafter's KV
cache and the EAGLE-3 hidden states in step), the scheduler's result processing, the v2 FutureMap.

The target forward of a one-token verify needs its own attention backend and CUDA graph: the launch-depth
graph runner only checks the batch size in ``can_run`` and would replay a graph captured for
``num_draft_tokens`` tokens per request on a one-token input. ``OneTokenTarget`` builds both once at start-up
(eager when graphs are off or capture fails) and ``swap_in``/``swap_out`` exchange them around the verify
call, through the legacy adapter's one ``AttrSwap``.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, fields
from typing import Any

from .swap import KEEP, Assignment, AttrSwap, swapped

__all__ = [
    "FieldNames",
    "OneTokenTarget",
    "build_one_token_target",
    "build_verify_input",
    "capture_like",
    "pad_v2_result",
    "sizes_only_target",
    "v2_launch_cache_locs",
]

log = logging.getLogger("specpolicy.sglang.legacy")


@dataclass(frozen=True)
class FieldNames:
    """Names that differ between legacy releases (0.5.10.post1 vs 0.5.12.post1)."""

    root: str  # EagleDraftInput: the last verified token per request ("verified_id" / "bonus_tokens")
    retrieve: str  # EagleVerifyInput tree-index prefix ("retrive_" / "retrieve_")
    accepted_per_req: str  # GenerationBatchResult: accepted drafts per request, CPU list
    accepted_total: str  # GenerationBatchResult: accepted drafts of the whole batch
    has_result_stride: bool  # GenerationBatchResult.speculative_num_draft_tokens exists (0.5.12.post1)

    @classmethod
    def detect(cls) -> FieldNames:
        from sglang.srt.managers.utils import GenerationBatchResult
        from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput

        draft_fields = {f.name for f in fields(EagleDraftInput)}
        verify_fields = {f.name for f in fields(EagleVerifyInput)}
        result_fields = {f.name for f in fields(GenerationBatchResult)}
        root = "bonus_tokens" if "bonus_tokens" in draft_fields else "verified_id"
        retrieve = "retrieve_" if "retrieve_index" in verify_fields else "retrive_"
        new = "num_correct_drafts_per_req_cpu" in result_fields
        acc = "num_correct_drafts_per_req_cpu" if new else "accept_length_per_req_cpu"
        total = "num_correct_drafts" if new else "num_accepted_tokens"
        return cls(root, retrieve, acc, total, "speculative_num_draft_tokens" in result_fields)


def build_verify_input(
    verify_cls: Any,
    names: FieldNames,
    root_tokens: Any,
    seq_lens: Any,
    *,
    topk: int,
    capture_hidden_mode: Any,
    seq_lens_sum: int | None,
    seq_lens_cpu: Any,
) -> Any:
    """A one-node EagleVerifyInput per request: draft token = the last verified token, at position seq_len.

    ``spec_steps=0`` makes the verify kernels' accept-index rows one wide, ``draft_token_num=1`` sizes the KV
    slots verify allocates (v1) or assigns (v2) to one per request; the all-ones mask is correct for a
    one-node tree under any mask layout (per request: seq_len context columns + 1 tree column).
    """
    import torch

    bs = int(seq_lens.shape[0])
    device = seq_lens.device
    mask_len = (seq_lens_sum if seq_lens_sum is not None else int(seq_lens.sum())) + bs
    r = names.retrieve
    kwargs = {
        "draft_token": root_tokens.to(torch.int64),  # verify kernels take int64 candidates (live GPU check)
        "custom_mask": torch.ones(mask_len, dtype=torch.bool, device=device),
        "positions": seq_lens.to(torch.int64),
        f"{r}index": torch.arange(bs, dtype=torch.long, device=device).unsqueeze(1),
        f"{r}next_token": torch.full((bs, 1), -1, dtype=torch.long, device=device),
        f"{r}next_sibling": torch.full((bs, 1), -1, dtype=torch.long, device=device),
        f"{r}cum_len": None,
        "spec_steps": 0,
        "topk": topk,
        "draft_token_num": 1,
        "capture_hidden_mode": capture_hidden_mode,
        "seq_lens_sum": seq_lens_sum,
        "seq_lens_cpu": seq_lens_cpu,
    }
    return verify_cls(**kwargs)


def pad_v2_result(result: Any, num_draft_tokens: int, names: FieldNames) -> None:
    """Give a one-token v2 verify result the launch stride: token i at i*D, accept length 1 (in place).

    The scheduler reads ``next_token_ids[i*stride : i*stride + accept_len]`` (stride = the result's
    ``speculative_num_draft_tokens`` on 0.5.12.post1, the worker's launch value on 0.5.10.post1), and the
    draft extend runs D positions per request and keeps position ``accept_len - 1``. Repeating each token and
    hidden state D times fills the unused positions with valid values, exactly like the rejected positions of
    a normal step.
    """
    d = num_draft_tokens
    result.next_token_ids = result.next_token_ids.repeat_interleave(d)
    lo = result.logits_output
    if lo is not None and lo.hidden_states is not None:
        lo.hidden_states = lo.hidden_states.repeat_interleave(d, dim=0)
    if names.has_result_stride:
        result.speculative_num_draft_tokens = d


class OneTokenTarget:
    """The target model's attention backend and graph runner for a one-token verify, built once.

    ``mode`` is ``"graph"`` when a CUDA graph runner was captured, else ``"eager"``. ``server_args`` are the
    distinct ServerArgs objects the worker and the target runner read (normally one shared object). Built
    with ``attn_backend=None`` it only swaps the speculative sizes (the decode off step's verify
    bookkeeping, whose target forward runs elsewhere); ``mode`` is then ``"sizes"``.
    """

    __slots__ = ("attn_backend", "graph_runner", "mode", "server_args", "_swap")

    def __init__(self, attn_backend: Any, graph_runner: Any, server_args: list[Any]) -> None:
        self.attn_backend = attn_backend
        self.graph_runner = graph_runner
        if attn_backend is None:
            self.mode = "sizes"
        else:
            self.mode = "graph" if graph_runner is not None else "eager"
        self.server_args = server_args
        self._swap = AttrSwap()

    def swap_in(self, worker: Any, model_runner: Any) -> None:
        """Point the worker, server args and target runner at the one-token state (restored by swap_out)."""
        todo = _one_token_sizes((worker, *self.server_args))
        if self.attn_backend is not None:
            todo += (
                (model_runner, "attn_backend", self.attn_backend),
                (model_runner, "graph_runner", self.graph_runner),
            )
        self._swap.swap_in(todo)

    def swap_out(self) -> None:
        self._swap.swap_out()


def _one_token_sizes(objs: tuple[Any, ...] | list[Any]) -> tuple[Assignment, ...]:
    """The speculative sizes of a one-token verify (no draft steps, one token per request) on ``objs``."""
    out: list[Assignment] = []
    for o in objs:
        out.append((o, "speculative_num_steps", 0))
        out.append((o, "speculative_num_draft_tokens", 1))
    return tuple(out)


def build_one_token_target(model_runner: Any, server_args: Any, *, graphs: bool) -> OneTokenTarget:
    """Build the target attention backend (and, if ``graphs``, a graph runner) for ``num_draft_tokens=1``.

    Backends and graph runners read the speculative sizes from ``server_args`` when constructed, so both are
    built with ``speculative_num_steps=0, speculative_num_draft_tokens=1`` temporarily in place (the same
    override SGLang's own adaptive mode uses to pre-build its states). Graph capture failures fall back to
    eager with a warning; a backend that cannot be built at all raises (the off step cannot run without one).
    """
    mr = model_runner
    arg_objs = _distinct(server_args, getattr(mr, "server_args", None))
    launch_runner = mr.graph_runner
    restore = _one_token_sizes(arg_objs) + (
        (mr, "attn_backend", KEEP),  # building and capturing install their own: put the launch ones back
        (mr, "graph_runner", KEEP),
        (mr, "init_new_workspace", KEEP),
    )
    with swapped(restore):
        attn = mr._get_attention_backend(init_new_workspace=True)
        graph_runner = None
        if graphs and launch_runner is not None and not server_args.disable_cuda_graph:
            graph_runner = capture_like(
                launch_runner,
                mr,
                attn,
                {"speculative_num_steps": 0, "speculative_num_draft_tokens": 1},
                what="the one-token verify CUDA graph",
            )
        return OneTokenTarget(attn, graph_runner, arg_objs)


def capture_like(
    launch_runner: Any, model_runner: Any, attn_backend: Any, sizes: dict[str, int], *, what: str
) -> Any:
    """A new graph runner of the launch runner's class, captured with ``attn_backend`` (and the ``sizes``
    keyword arguments the class accepts), or None after a logged capture failure: the caller then runs that
    forward eagerly. Leaves ``attn_backend`` installed on the runner; callers restore it."""
    runner_cls = type(launch_runner)
    params = inspect.signature(runner_cls.__init__).parameters
    kwargs: dict[str, Any] = {k: v for k, v in sizes.items() if k in params}
    if "attn_backend" in params:
        kwargs["attn_backend"] = attn_backend
    model_runner.attn_backend = attn_backend  # runners that take no attn_backend argument capture with it
    try:
        return runner_cls(model_runner, **kwargs)
    except Exception:
        log.warning(
            "specpolicy: capturing %s failed; that forward runs eagerly (correct, slower)",
            what,
            exc_info=True,
        )
        return None


def sizes_only_target(model_runner: Any, server_args: Any) -> OneTokenTarget:
    """A OneTokenTarget that swaps only the speculative sizes (no backend or graph of its own)."""
    return OneTokenTarget(None, None, _distinct(server_args, getattr(model_runner, "server_args", None)))


def _distinct(*objs: Any) -> list[Any]:
    out: list[Any] = []
    for o in objs:
        if o is not None and all(o is not x for x in out):
            out.append(o)
    return out


def v2_launch_cache_locs(worker: Any, batch: Any, num_draft_tokens: int) -> None:
    """The draft extend after verify runs ``num_draft_tokens`` positions per request and writes the draft KV
    at the slots a launch-depth verify assigns; a one-token verify assigned one, so assign all of them again
    (the scheduler's v2 reservation already holds them). Found by the live GPU check: the draft-extend CUDA
    graph failed with "size of tensor a (128) must match the size of tensor b (32)"."""
    from sglang.srt.speculative.eagle_info_v2 import assign_extend_cache_locs_func

    if batch.forward_mode.is_idle():
        return
    seq_lens = batch.seq_lens
    batch.out_cache_loc = assign_extend_cache_locs_func(
        req_pool_indices=batch.req_pool_indices,
        req_to_token=worker.req_to_token_pool.req_to_token,
        start_offset=seq_lens,
        end_offset=seq_lens + num_draft_tokens,
        batch_size=len(seq_lens),
        draft_token_num=num_draft_tokens,
        device=seq_lens.device,
    )
