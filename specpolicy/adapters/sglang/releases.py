"""The SGLang releases specpolicy is tested with: one row per release holds everything that differs.

A row says which adapter code drives the release (``route``), every SGLang name it hooks or reads
(``hooks``: checked by ``specpolicy doctor``, by the contract tests, and by the legacy installer before it
patches anything), whether SGLang loads plugins in its scheduler processes, and the scheduler method that
resolves the overlap worker's delayed tokens. Field names that moved between releases (``bonus_tokens`` /
``verified_id``, ``retrieve_`` / ``retrive_``) are not listed: ``legacy.one_token.FieldNames.detect`` reads
them from SGLang's own types, and the hook table names those fields, so a layout the adapter does not know
is refused before anything is patched.

``since`` is the first release with the row's code layout. An untested release (allowed with
``allow_untested``) runs as the row with the newest ``since`` at or below it; one older than every row is
refused. Adding a release is one row here and its test environment in ``scripts/engine-envs.sh``
(``tests/test_adapter_releases.py`` checks that the two agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .._support import Target, parse_version, release_key
from .v0_5_23 import HOOK_TARGETS as _ADAPTIVE_HOOKS

__all__ = ["Release", "RELEASES", "Route", "release", "layout_for", "legacy_releases", "tested"]

Route = Literal["legacy", "v2", "adaptive"]


@dataclass(frozen=True)
class Release:
    """One tested SGLang release; see the module docstring for what each field decides."""

    version: str
    since: str
    route: Route
    hooks: tuple[Target, ...]
    plugins: bool
    overlap_resolve: str | None = None

    def __post_init__(self) -> None:
        if parse_version(self.version) is None or parse_version(self.since) is None:
            raise ValueError(f"release row {self.version!r}: version and since must be PEP 440 versions")
        if release_key(self.since) > release_key(self.version):
            raise ValueError(f"release row {self.version!r}: since {self.since} is newer than the release")
        if self.route == "legacy" and not any(
            t.dotted.endswith(f".{self.overlap_resolve}") for t in self.hooks if self.overlap_resolve
        ):
            raise ValueError(f"release row {self.version!r}: overlap_resolve must name one of its hooks")


_W1 = "sglang.srt.speculative.eagle_worker.EAGLEWorker"
_W2 = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2"
_DW2 = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker"
_SCHED = "sglang.srt.managers.scheduler.Scheduler"
_FUTURE = "sglang.srt.managers.overlap_utils.FutureMap"
_MIXIN = "sglang.srt.managers.scheduler_output_processor_mixin.SchedulerOutputProcessorMixin"
_INFO = "sglang.srt.speculative.eagle_info"
_RESULT = "sglang.srt.managers.utils.GenerationBatchResult"


def _legacy_common() -> tuple[Target, ...]:
    return (
        Target(f"{_W1}.forward_batch_generation", ("self", "batch"), why="v1 per-step decision"),
        Target(f"{_W1}.draft", ("self", "batch"), why="v1 off step: one-token verify input"),
        Target(f"{_W1}._draft_preprocess_decode", ("self", "batch"), why="bookkeeping mirrored on off steps"),
        Target(f"{_W1}.forward_draft_extend_after_decode", ("self", "batch"), why="draft catch-up"),
        Target(f"{_W2}.forward_batch_generation", ("self", "model_worker_batch"), why="v2 per-step decision"),
        Target(f"{_W2}.verify", ("self", "batch"), why="v2 off step: one-token target state"),
        Target(f"{_DW2}.draft", ("self", "model_worker_batch"), why="v2 off step: one-token verify input"),
        Target(f"{_DW2}._draft_extend_for_decode", ("self", "batch", "batch_result"), why="draft catch-up"),
        Target(f"{_SCHED}.run_batch", ("self", "batch"), why="waiting-queue length"),
        Target(
            f"{_FUTURE}.store_to_map_for_new_batch",
            ("self", "future_indices", "draft_input"),
            why="v2 lazy off step: placeholders not stored",
        ),
        Target(
            f"{_FUTURE}.resolve_future", ("self", "model_worker_batch"), why="v2 lazy off step: nor gathered"
        ),
        Target(f"{_SCHED}.maybe_init_draft_worker", ("self",), why="attach to the built worker"),
        Target(
            f"{_MIXIN}.process_batch_result_decode", ("self", "batch", "result"), why="consumes the result"
        ),
        Target(
            "sglang.srt.model_executor.model_runner.ModelRunner._get_attention_backend",
            ("self", "init_new_workspace"),
            why="one-token target attention backend",
        ),
        Target(
            "sglang.srt.model_executor.cuda_graph_runner.CudaGraphRunner.can_run", ("self", "forward_batch")
        ),
        Target("sglang.srt.managers.scheduler.run_scheduler_process", ("server_args", "port_args")),
        Target("sglang.srt.entrypoints.engine.Engine.run_scheduler_process_func"),
    )


_HOOKS_0_5_10 = (
    *_legacy_common(),
    Target(f"{_W1}.verify", ("self", "batch", "spec_info"), why="v1 off step: one-token target state"),
    Target(f"{_MIXIN}._resolve_spec_overlap_token_ids", ("self", "result", "batch"), why="v2 feedback"),
    Target(
        f"{_INFO}.EagleVerifyInput",
        fields=(
            "draft_token",
            "custom_mask",
            "positions",
            "retrive_index",
            "retrive_next_token",
            "retrive_next_sibling",
            "retrive_cum_len",
            "spec_steps",
            "topk",
            "draft_token_num",
            "capture_hidden_mode",
            "seq_lens_sum",
            "seq_lens_cpu",
        ),
    ),
    Target(f"{_INFO}.EagleDraftInput", fields=("verified_id", "hidden_states", "topk_p", "topk_index")),
    Target(
        _RESULT, fields=("next_token_ids", "accept_length_per_req_cpu", "accept_lens", "next_draft_input")
    ),
)

_HOOKS_0_5_12 = (
    *_legacy_common(),
    Target(f"{_W1}.verify", ("self", "batch"), why="v1 off step: one-token target state"),
    Target(f"{_MIXIN}._resolve_spec_overlap_tokens", ("self", "result", "batch"), why="v2 feedback"),
    Target(
        f"{_INFO}.EagleVerifyInput",
        fields=(
            "draft_token",
            "custom_mask",
            "positions",
            "retrieve_index",
            "retrieve_next_token",
            "retrieve_next_sibling",
            "retrieve_cum_len",
            "spec_steps",
            "topk",
            "draft_token_num",
            "capture_hidden_mode",
            "seq_lens_sum",
            "seq_lens_cpu",
        ),
    ),
    Target(f"{_INFO}.EagleDraftInput", fields=("bonus_tokens", "hidden_states", "topk_p", "topk_index")),
    Target(
        _RESULT,
        fields=(
            "next_token_ids",
            "num_correct_drafts_per_req_cpu",
            "accept_lens",
            "next_draft_input",
            "speculative_num_draft_tokens",
        ),
    ),
    Target(
        "sglang.srt.model_executor.cuda_graph_runner.CudaGraphRunner.__init__",
        ("self", "model_runner", "attn_backend", "speculative_num_steps", "speculative_num_draft_tokens"),
        why="one-token verify graph",
    ),
    Target("sglang.srt.plugins.load_plugins", ()),
)

_V2_HOOKS = (
    Target(f"{_W2}.forward_batch_generation", ("self", "batch"), why="per-step decision and off step"),
    Target(f"{_W2}.activate_step_by_batch", ("self", "batch_size"), why="applies the decided depth"),
    Target(
        f"{_W2}.on_verify_complete_cpu",
        ("self", "num_correct_drafts_per_req", "batch_size"),
        why="accepted-draft feedback",
    ),
    Target(f"{_W2}.init_cuda_graphs", ("self",), why="attach; decode graphs beside the verify graphs"),
    Target(f"{_DW2}._draft_extend_for_prefill", why="the drafter's extend form the catch-up mirrors"),
    Target(f"{_SCHED}.run_batch", ("self", "batch"), why="waiting-queue length"),
    Target(
        "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.__init__",
        ("self", "model_runner"),
        why="decode CUDA graphs for off steps",
    ),
    Target(
        "sglang.srt.model_executor.model_runner.ModelRunner._get_attention_backend",
        ("self", "init_new_workspace"),
        why="decode attention backend for off steps",
    ),
    Target(
        "sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new",
        ("batch", "model_runner"),
        why="off-step and catch-up forward batches",
    ),
    Target(f"{_INFO}.EagleDraftInput", fields=("bonus_tokens", "hidden_states", "topk_p", "topk_index")),
    Target(f"{_INFO}.EagleDraftExtendInput", fields=("hidden_states", "num_tokens_per_req")),
    Target(_RESULT, fields=("next_token_ids", "accept_lens", "new_seq_lens", "next_draft_input")),
    Target("sglang.srt.speculative.adaptive_runtime_state.AdaptiveController._activate", ("self",)),
    Target("sglang.srt.speculative.eagle_utils.get_draft_input_from_target_hidden_dim", ("model_runner",)),
    Target("sglang.srt.speculative.spec_utils.renorm_draft_probs"),
    Target("sglang.srt.plugins.load_plugins", ()),
)
# 0.5.13 - 0.5.19: the draft worker's TP context is entered over its runner's group (0.5.20+: its layout)
_V2_HOOKS_0_5_17 = (
    *_V2_HOOKS,
    Target(
        "sglang.srt.speculative.spec_utils.draft_tp_context", ("tp_group",), why="the catch-up's TP context"
    ),
)

#: The tested releases, oldest first.
RELEASES: tuple[Release, ...] = (
    Release(
        "0.5.10.post1",
        since="0.5.10",
        route="legacy",
        hooks=_HOOKS_0_5_10,
        plugins=False,
        overlap_resolve="_resolve_spec_overlap_token_ids",
    ),
    Release(
        "0.5.12.post1",
        since="0.5.11",
        route="legacy",
        hooks=_HOOKS_0_5_12,
        plugins=True,
        overlap_resolve="_resolve_spec_overlap_tokens",
    ),
    Release("0.5.17", since="0.5.13", route="v2", hooks=_V2_HOOKS_0_5_17, plugins=True),
    Release(
        "0.5.23",
        since="0.5.20",
        route="adaptive",
        hooks=(
            *(Target(t) for t in _ADAPTIVE_HOOKS),
            Target(
                "sglang.srt.speculative.adaptive_runtime_state.AdaptiveSpecPolicy",
                why="the bridge's Protocol",
            ),
        ),
        plugins=True,
    ),
)


def tested() -> tuple[str, ...]:
    """The tested version strings, oldest first."""
    return tuple(r.version for r in RELEASES)


def legacy_releases() -> tuple[Release, ...]:
    """The tested releases the legacy adapter drives."""
    return tuple(r for r in RELEASES if r.route == "legacy")


def release(version: str | None) -> Release | None:
    """The row of a tested release, None for any other version (compared as versions, not strings)."""
    parsed = parse_version(version) if version else None
    if parsed is None:
        return None
    return next((r for r in RELEASES if parse_version(r.version) == parsed), None)


def layout_for(version: str | None) -> Release | None:
    """The row whose code layout ``version`` has: its own, else the newest ``since`` at or below it.

    None for a version older than every row, or one that is no version at all.
    """
    own = release(version)
    if own is not None:
        return own
    try:
        key = release_key(version or "")
    except ValueError:
        return None
    fitting = [r for r in RELEASES if release_key(r.since) <= key]
    return max(fitting, key=lambda r: release_key(r.since), default=None)
