"""Depth-0 steps without vLLM's EAGLE / EAGLE-3 / MTP drafter, and the exact catch-up on resume.

On the V2 model runner these drafters (``EagleSpeculator``, ``MTPSpeculator``, both
``TargetDependentARSpeculator``) start every ``propose`` with one forward over the step's query positions: at
position ``p`` the drafter reads the token of ``p + 1`` (the target's input shifted by one, the sampled token
last) and the target's hidden state at ``p`` (EAGLE-3: its auxiliary layers, which the drafter combines), and
writes its KV at ``p``. vLLM runs that forward at depth 0 too, only to keep the KV in step. Here an off step
(depth 0, no drafts verified) runs no drafter forward: the target's hidden states of the step's positions go
into a ``HiddenWindow`` (``W`` positions per request-state slot, position ``p`` in column ``p % W``), and
``catch_up.SlotLag`` counts the positions each slot missed. The next ``propose`` that drafts feeds each
request its missed positions ahead of the step's own (``catch_up.extended``; the tokens from the runner's
token history, the hidden states from the window), in the step's own first pass: the drafter's KV, its hidden
state and its proposals are then exactly an always-on drafter's. A request that finishes while off never pays.

That pass is longer than the target's batch, so it gets attention metadata and slot mappings of its own, built
through the model state's ``prepare_attn`` for the drafter's layers, as vLLM 0.34 builds them under
micro-batching (the draft prefill otherwise takes the target's). A request whose missed positions and query
would not fit the window (a prefill chunk longer than ``W`` while off, or ``W`` off steps in a row) forces a
catch-up of the whole batch in that step, at depth 0 (``EagleLag.forced``). Beyond the drafter's token budget
the missed positions go first in passes of their own; there each chunk is followed by one more position, whose
input (the sampled token) is not its committed one, and which the next chunk or the step's own pass rewrites.

On 0.26 the drafters' base is ``AutoRegressiveSpeculator``, whose propose takes no depth: this wrapper goes
around ``drafter_depth``'s, reads its depth note and hands each pass its depth through it (``runner_hooks``).

The first depth-0 step after a speculative one verifies drafts whose accepted count only the GPU knows yet:
it runs vLLM's first pass. Dummy runs, adaptive verification, multimodal drafters, prefill context
parallelism and sliding-window KV groups keep vLLM's own path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from ...runtime.settings import AdapterSettings
from ..hidden_window import HiddenWindow
from . import drafter_depth
from .catch_up import (
    ATTN_METADATA,
    AUX_HIDDEN,
    LAST_HIDDEN,
    SLOT_MAPPINGS,
    STATE,
    Extension,
    SlotLag,
    extended,
    lag_passes,
    no_drafts,
    pass_args,
    step_of,
)
from .config import settings_from
from .drafter_depth import DEPTH

__all__ = [
    "EagleLag",
    "TARGETS",
    "CLASSES",
    "new_lag",
    "eagle_passes",
    "speculator_propose",
    "targets",
    "hook_plan",
]

log = logging.getLogger("vllm.specpolicy")

_SD = "vllm.v1.worker.gpu.spec_decode"
#: The drafters the hook drives (exact classes: a subclass may read more of the target than hidden states).
CLASSES: tuple[str, ...] = (f"{_SD}.eagle.speculator.EagleSpeculator", f"{_SD}.mtp.speculator.MTPSpeculator")
_BASE = f"{_SD}.target_dependent_ar.speculator.TargetDependentARSpeculator"
#: The vLLM names the hook wraps or reads from 0.32 on (``targets``: on any release).
TARGETS: tuple[str, ...] = (
    f"{_BASE}.propose",
    "vllm.v1.worker.gpu.attn_utils.build_slot_mappings_by_layer",
    *CLASSES,
)
_DEFAULT_WINDOW = int(AdapterSettings.model_fields["draft_catch_up_window"].default)


class EagleLag(SlotLag):
    """``SlotLag`` plus the window of the target's hidden states of the missed positions (allocated at the
    first off step, at the width the target hands the drafter) and the catch-ups an overflow forced."""

    __slots__ = ("size", "window", "forced")

    def __init__(self, max_num_reqs: int, tokens: Any, size: int) -> None:
        super().__init__(max_num_reqs, tokens)
        self.size = size
        self.window: HiddenWindow | None = None
        self.forced = 0

    def fits(self, slots: np.ndarray, query_lens: np.ndarray) -> bool:
        """Whether every row's missed positions and this step's fit the window."""
        return bool(np.all(self.missed[slots] + query_lens <= self.size))

    def record(self, batch: Any, slots: np.ndarray, query_lens: np.ndarray, hidden: Any) -> None:
        """Keep the hidden states of the batch's query positions (``hidden``: one row per token): one copy."""
        import torch

        if self.window is None:
            width, rows = int(hidden.shape[-1]), len(self.missed)
            self.window = HiddenWindow(
                rows=rows, window=self.size, width=width, dtype=hidden.dtype, device=hidden.device
            )
            log.info(
                "specpolicy: hidden-state window for the EAGLE catch-up: %d positions x %d slots, %.0f MiB",
                self.size,
                len(self.missed),
                self.window.nbytes / 2**20,
            )
        t = batch.num_tokens
        slot_tok = torch.from_numpy(np.repeat(slots, query_lens).astype(np.int64))
        slot_d = slot_tok.to(hidden.device, non_blocking=True)
        flat = (batch.positions[:t] % self.size) * self.window.rows + slot_d
        self.window.put(flat, hidden[:t])


def new_lag(runner: Any, speculator: Any, tokens: Any) -> EagleLag | None:
    """An ``EagleLag`` for a drafter of ``CLASSES`` the catch-up covers; None for any other."""
    cls = type(speculator)
    if f"{cls.__module__}.{cls.__qualname__}" not in CLASSES:
        return None
    if (
        getattr(speculator, "pcp_manager", None) is not None
        or getattr(speculator, "supports_mm_inputs", False)
        or _sliding_window(speculator)
    ):
        log.info(
            "specpolicy: the EAGLE drafter runs its first pass at depth 0 here (multimodal inputs, prefill "
            "context parallelism or sliding-window KV groups, which the catch-up does not cover)"
        )
        return None
    try:
        settings = settings_from(runner.vllm_config.additional_config)
    except Exception:  # checked at start-up already; the worker keeps serving
        settings = None
    size = settings.draft_catch_up_window if settings is not None else _DEFAULT_WINDOW
    return EagleLag(speculator.max_num_reqs, tokens, size)


def _sliding_window(speculator: Any) -> bool:
    """Whether a KV group slides its window (its blocks below the window may be freed before a catch-up
    reads them): the block tables say so from 0.33 on; 0.26's do not, so its KV cache groups are read, as
    0.33 reads them (a ``SlidingWindowSpec`` group, or one of a ``UniformTypeKVCacheSpecs`` group's)."""
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    flag = getattr(getattr(speculator, "block_tables", None), "has_sliding_window_groups", None)
    if flag is not None:
        return bool(flag)
    for group in getattr(getattr(speculator, "kv_cache_config", None), "kv_cache_groups", ()):
        spec = group.kv_cache_spec
        if any(isinstance(s, SlidingWindowSpec) for s in getattr(spec, "kv_cache_specs", {0: spec}).values()):
            return True
    return False


def eagle_passes(missed: np.ndarray, budget: int) -> list[Extension]:
    """``catch_up.lag_passes`` within ``budget`` tokens, each chunk followed by one more position (the
    next missed one, or the row's first query token): the drafter's input at a pass's last position is the
    sampled token, so that position is rewritten by the next pass."""
    n = missed.shape[0]
    out = []
    for ext in lag_passes(missed, budget - n):
        more = (ext.count > 0) & (ext.count < ext.back)
        own = np.where(ext.count == ext.back, 1, ext.own)
        out.append(Extension(back=ext.back, count=ext.count + more, own=own))
    return out


def _hidden(args: tuple[Any, ...]) -> Any:
    """The target's hidden states propose gets, as the window keeps them (EAGLE-3: the auxiliary layers,
    concatenated, before the drafter combines them)."""
    import torch

    aux = args[AUX_HIDDEN]
    return torch.cat(aux, dim=-1) if aux else args[LAST_HIDDEN]


def _fed(
    self: Any, orig: Callable[..., Any], lag: EagleLag, batch: Any, ext: Extension, args: Any, kw: Any
) -> Any:
    """Run ``orig`` over ``batch`` extended by ``ext``, with the missed positions' hidden states from the
    window, and the drafter's own attention metadata and slot mappings for the longer batch."""
    import torch

    assert lag.window is not None
    merged, fed = extended(batch, ext, lag.tokens)
    hidden = _hidden(args)
    flat = (fed.pos % lag.size) * lag.window.rows + batch.idx_mapping[fed.row].long()
    kept = lag.window.take(flat).to(hidden.dtype)
    inputs = torch.where(fed.lag[:, None], kept, hidden[fed.src])
    rest = list(args)
    if args[AUX_HIDDEN]:
        rest[AUX_HIDDEN] = [inputs]
    else:
        rest[LAST_HIDDEN] = inputs
    rest[ATTN_METADATA], rest[SLOT_MAPPINGS] = _drafter_attention(self, merged)
    return orig(self, merged, *rest, **_off_graph(merged, kw))


def _off_graph(batch: Any, kw: dict[str, Any]) -> dict[str, Any]:
    """propose's keywords that keep a catch-up ``batch`` off the drafter's FULL prefill graph, which replays
    over the target's metadata. From 0.33 on ``extended`` marks the batch ineligible; 0.26's ``InputBatch``
    has no such flag and replays a uniform batch whose query length is the graph's: such a batch runs
    eagerly (``is_profile``, vLLM's own eager switch there)."""
    if hasattr(batch, "decode_graph_eligible") or len(set(np.diff(batch.query_start_loc_np).tolist())) != 1:
        return kw
    return {**kw, "is_profile": True}


def _drafter_attention(self: Any, batch: Any) -> tuple[Any, Any]:
    """Attention metadata and slot mappings of the drafter's layers for ``batch`` (the draft prefill
    otherwise takes the target's, made for the target's shorter batch). A catch-up batch is never
    uniform, so it never replays a FULL graph: the metadata is the eager / piecewise one."""
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.worker.gpu import attn_utils

    tables = self.block_tables
    slots = tables.compute_slot_mappings(
        batch.idx_mapping, batch.query_start_loc, batch.positions, batch.num_tokens
    )
    blocks = tuple(t[: batch.num_reqs_after_padding] for t in tables.input_block_tables)
    metadata = self.model_state.prepare_attn(
        batch, CUDAGraphMode.NONE, blocks, slots, self.attn_groups, self.kv_cache_config
    )
    return metadata, attn_utils.build_slot_mappings_by_layer(slots, self.kv_cache_config)


def _catch_up(
    self: Any, orig: Callable[..., Any], lag: EagleLag, batch: Any, missed: np.ndarray, args: Any, kw: Any
) -> Any:
    """The step's first pass with every row's missed positions fed first (in passes of their own where
    they do not fit the drafter's token budget together with the step's tokens)."""
    if not missed.any():
        return orig(self, batch, *args, **kw)
    n = batch.num_reqs
    qsl = batch.query_start_loc_np
    q = (qsl[1 : n + 1] - qsl[:n]).astype(np.int64)
    if int(missed.sum()) + batch.num_tokens <= self.max_num_tokens:
        return _fed(self, orig, lag, batch, Extension(missed, missed, q), args, kw)
    rest, own_kw = pass_args(args, kw)
    try:
        passes = eagle_passes(missed, self.max_num_tokens)
    except ValueError as exc:  # fewer than two tokens per row: the drafter's state stays behind
        log.warning("specpolicy: the EAGLE catch-up does not fit the token budget (%s)", exc)
        passes = []
    for ext in passes:
        lag.own_passes += 1
        _fed(self, orig, lag, batch, ext, tuple(rest), own_kw)
    return orig(self, batch, *args, **kw)


def _depth_by_note(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``orig`` (``drafter_depth``'s propose) called as a propose that takes the depth: each call's
    ``num_speculative_tokens`` becomes the note that wrapper consumes."""

    def call(self: Any, input_batch: Any, *args: Any, **kwargs: Any) -> Any:
        setattr(self, DEPTH, kwargs.pop("num_speculative_tokens", None))
        return orig(self, input_batch, *args, **kwargs)

    return call


def speculator_propose(orig: Callable[..., Any], depth_note: bool = False) -> Callable[..., Any]:
    """The off-step propose around ``orig``. With ``depth_note`` (0.26: vLLM's propose takes no depth) the
    step's depth is ``drafter_depth``'s note, taken here and handed on with every pass ``orig`` runs."""
    inner = _depth_by_note(orig) if depth_note else orig

    def propose(self: Any, input_batch: Any, *args: Any, **kwargs: Any) -> Any:
        if depth_note:
            kwargs = {**kwargs, "num_speculative_tokens": self.__dict__.pop(DEPTH, None)}
        lag = self.__dict__.get(STATE)
        step = step_of(self, lag, input_batch, args, kwargs) if isinstance(lag, EagleLag) else None
        if not isinstance(lag, EagleLag) or step is None:
            return inner(self, input_batch, *args, **kwargs)
        slots, q = step.slots, step.query_lens
        if step.off:
            if not lag.fits(slots, q):  # the window would overwrite positions still missed: catch up now
                lag.forced += 1
                return _catch_up(self, inner, lag, input_batch, lag.take(slots), args, kwargs)
            lag.record(input_batch, slots, q, _hidden(args))
            lag.skip(slots, q)
            return no_drafts(self, input_batch.num_reqs)
        return _catch_up(self, inner, lag, input_batch, lag.take(slots), args, kwargs)

    return propose


def _base(depth_note: bool) -> str:
    """The drafters' base class: ``AutoRegressiveSpeculator`` on a release whose propose takes no depth
    (0.26), ``TargetDependentARSpeculator`` from 0.32 on."""
    return f"{_SD}.autoregressive.speculator.AutoRegressiveSpeculator" if depth_note else _BASE


def targets(depth_note: bool = False) -> tuple[str, ...]:
    """The vLLM names the hook wraps or reads (``depth_note``: as ``hook_plan``)."""
    return (f"{_base(depth_note)}.propose", *TARGETS[1:])


def hook_plan(depth_note: bool = False) -> list[Any]:
    """The EAGLE part of ``runner_hooks.hook_plan``; with ``depth_note``, one wrapper around
    ``drafter_depth``'s propose, which honours the depth this one hands on."""
    import importlib

    module, name = _base(depth_note).rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    if not depth_note:
        return [(cls, "propose", speculator_propose)]
    return [(cls, "propose", lambda orig: speculator_propose(drafter_depth.speculator_propose(orig), True))]
