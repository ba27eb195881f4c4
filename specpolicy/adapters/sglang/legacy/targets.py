"""Every SGLang symbol the legacy adapter touches, per supported release, with the parameters it relies on.

``install`` checks this table before patching anything (a mismatch refuses with the list of problems), and the
contract tests check it against the real packages, so a renamed method or parameter fails loudly in CI instead
of silently disabling the adapter in production.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, fields, is_dataclass

__all__ = ["SUPPORTED_VERSIONS", "Target", "TARGETS", "check_targets", "resolve", "release_tuple"]

SUPPORTED_VERSIONS: tuple[str, ...] = ("0.5.10.post1", "0.5.12.post1")

_W1 = "sglang.srt.speculative.eagle_worker.EAGLEWorker"
_W2 = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2"
_DW2 = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker"
_SCHED = "sglang.srt.managers.scheduler.Scheduler"
_MIXIN = "sglang.srt.managers.scheduler_output_processor_mixin.SchedulerOutputProcessorMixin"
_INFO = "sglang.srt.speculative.eagle_info"
_RESULT = "sglang.srt.managers.utils.GenerationBatchResult"


@dataclass(frozen=True)
class Target:
    """A callable (``params``: leading parameter names it must accept) or a dataclass (``fields``)."""

    dotted: str
    params: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    why: str = ""


def _common() -> list[Target]:
    return [
        Target(f"{_W1}.forward_batch_generation", ("self", "batch"), why="v1 per-step decision"),
        Target(f"{_W1}.draft", ("self", "batch"), why="v1 off step: one-token verify input"),
        Target(f"{_W1}._draft_preprocess_decode", ("self", "batch"), why="bookkeeping mirrored on off steps"),
        Target(f"{_W1}.forward_draft_extend_after_decode", ("self", "batch"), why="draft catch-up"),
        Target(f"{_W2}.forward_batch_generation", ("self", "model_worker_batch"), why="v2 per-step decision"),
        Target(f"{_W2}.verify", ("self", "batch"), why="v2 off step: one-token target state"),
        Target(f"{_DW2}.draft", ("self", "model_worker_batch"), why="v2 off step: one-token verify input"),
        Target(f"{_DW2}._draft_extend_for_decode", ("self", "batch", "batch_result"), why="draft catch-up"),
        Target(f"{_SCHED}.run_batch", ("self", "batch"), why="waiting-queue length"),
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
    ]


TARGETS: dict[str, tuple[Target, ...]] = {
    "0.5.10.post1": (
        *_common(),
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
    ),
    "0.5.12.post1": (
        *_common(),
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
    ),
}


def release_tuple(version: str) -> tuple[int, ...]:
    """``"0.5.12.post1"`` -> ``(0, 5, 12)``: the release numbers, for ordering versions."""
    out: list[int] = []
    for part in version.split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def resolve(dotted: str) -> object:
    """Import the longest module prefix of ``dotted`` and walk the remaining attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def check_targets(version: str) -> list[str]:
    """Problems found with the targets of ``version`` (empty when all exist with the expected shape)."""
    problems: list[str] = []
    for t in TARGETS[version]:
        try:
            obj = resolve(t.dotted)
        except Exception as exc:  # missing module or attribute, or an import error inside sglang
            problems.append(f"{t.dotted}: not found ({type(exc).__name__}: {exc})")
            continue
        if t.params:
            try:
                names = list(inspect.signature(obj).parameters)  # type: ignore[arg-type]
            except (TypeError, ValueError) as exc:
                problems.append(f"{t.dotted}: no signature ({exc})")
                continue
            missing = [p for p in t.params if p not in names]
            if missing or names[:1] != [t.params[0]]:
                problems.append(f"{t.dotted}: expected parameters {list(t.params)}, found {names}")
        if t.fields:
            have = {f.name for f in fields(obj)} if is_dataclass(obj) else set(dir(obj))
            missing = [f for f in t.fields if f not in have]
            if missing:
                problems.append(f"{t.dotted}: missing fields {missing}")
    return problems
