"""The off step's target forward on legacy SGLang: a plain decode, as a speculation-free engine runs it.

A one-token verify is mathematically a decode step (one query token per request attending to its prefix
and itself), but SGLang runs it through the attention backend's verify path: the triton backend's extend
kernel, flashinfer's host-side verify planning. Measured live, that made an off step 2-4x slower than a step
of a speculation-free engine. ``DecodeTarget`` holds what such an engine has: an attention backend built for
decode and a CUDA graph runner captured in ``ForwardMode.DECODE`` for every captured batch size, both built
once at start-up beside the launch-depth verify graphs (graphs share SGLang's global graph memory pool).

``decode_batch`` turns the batch of an off step into a decode batch: the one new token per request is the
last verified token at position ``seq_len``, so the decode view has ``seq_lens + 1`` and no speculative input
(``as_decode`` does it in place, for a batch whose lengths already count the new token).
Everything around the forward (slot allocation, sampling, the result the scheduler consumes) stays with the
caller, so the same object serves both workers. ``swap_in``/``swap_out`` exchange the target runner's
backend and graph runner around one forward, through the legacy adapter's one ``AttrSwap``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from .one_token import capture_like
from .swap import KEEP, AttrSwap, swapped

__all__ = ["DecodeTarget", "build_decode_target"]

log = logging.getLogger("specpolicy.sglang.legacy")


class DecodeTarget:
    """Decode attention backend and graph runner of the target model, and the hidden-state mode to capture.

    ``mode`` is ``"graph"`` when a decode CUDA graph runner was captured, else ``"eager"`` (the decode
    attention path still runs; only the graph is missing). ``capture_hidden_mode`` is SGLang's
    ``CaptureHiddenMode`` the off step needs: FULL when the drafter reads the target's hidden states
    (EAGLE, EAGLE-3), NULL for a draft model (STANDALONE).
    """

    __slots__ = (
        "attn_backend",
        "graph_runner",
        "graph_attr",
        "mode",
        "capture_hidden_mode",
        "_decode",
        "_none",
        "_swap",
    )

    def __init__(
        self, attn_backend: Any, graph_runner: Any, capture_hidden_mode: Any, graph_attr: str = "graph_runner"
    ) -> None:
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.attn_backend = attn_backend
        self.graph_runner = graph_runner
        #: the model runner's attribute holding its graph runner: ``graph_runner`` up to 0.5.12.post1,
        #: ``decode_cuda_graph_runner`` from 0.5.13
        self.graph_attr = graph_attr
        self.mode = "graph" if graph_runner is not None else "eager"
        self.capture_hidden_mode = capture_hidden_mode
        self._decode = ForwardMode.DECODE
        self._none = SpeculativeAlgorithm.NONE
        self._swap = AttrSwap()

    def decode_batch(
        self, mwb: Any, *, input_ids: Any = None, out_cache_loc: Any = None, seq_lens: Any = None
    ) -> Any:
        """A copy of ``mwb`` (a ModelWorkerBatch whose ``seq_lens`` exclude the new token) in decode form.

        ``input_ids`` (one token per request) and ``out_cache_loc`` (one KV slot per request) default to the
        batch's own, which is what a one-token verify batch already holds; ``seq_lens`` (the batch's plus
        one) to a new tensor.
        """
        bs = int(mwb.seq_lens.shape[0])
        seq_cpu = mwb.seq_lens_cpu
        orig = getattr(mwb, "orig_seq_lens", None)
        return dataclasses.replace(
            mwb,
            forward_mode=self._decode,
            input_ids=mwb.input_ids if input_ids is None else input_ids,
            out_cache_loc=mwb.out_cache_loc if out_cache_loc is None else out_cache_loc,
            seq_lens=mwb.seq_lens + 1 if seq_lens is None else seq_lens,
            seq_lens_cpu=None if seq_cpu is None else seq_cpu + 1,
            seq_lens_sum=(int(mwb.seq_lens_sum) if mwb.seq_lens_sum is not None else 0) + bs,
            orig_seq_lens=None if orig is None else orig + 1,
            spec_algorithm=self._none,
            spec_info=None,
            capture_hidden_mode=self.capture_hidden_mode,
        )

    def as_decode(self, mwb: Any) -> Any:
        """``mwb`` itself in decode form, for a batch whose lengths already count the new token (v1 builds
        its ModelWorkerBatch for the off step alone, so no copy is needed); returns it."""
        mwb.forward_mode = self._decode
        mwb.spec_algorithm = self._none
        mwb.spec_info = None
        mwb.capture_hidden_mode = self.capture_hidden_mode
        return mwb

    def swap_in(self, model_runner: Any) -> None:
        """Put the decode backend and graph runner on ``model_runner`` (restored by ``swap_out``)."""
        mr = model_runner
        self._swap.swap_in(
            ((mr, "attn_backend", self.attn_backend), (mr, self.graph_attr, self.graph_runner))
        )

    def swap_out(self) -> None:
        self._swap.swap_out()

    def forward(self, forward_fn: Any, model_runner: Any, decode_mwb: Any) -> Any:
        """Run ``forward_fn`` (the target worker's unbound-safe ``forward_batch_generation``) on the decode
        batch with the decode backend and graphs in place; the engine's sampler picks the tokens.

        The two attributes are exchanged directly (every step's path), not through ``swap_in``: a model
        runner has both, and the old values are back when the forward returns or raises."""
        mr, name = model_runner, self.graph_attr
        attn, graphs = mr.attn_backend, getattr(mr, name)
        mr.attn_backend = self.attn_backend
        setattr(mr, name, self.graph_runner)
        try:
            return forward_fn(decode_mwb)
        finally:
            mr.attn_backend = attn
            setattr(mr, name, graphs)


def build_decode_target(
    model_runner: Any, server_args: Any, *, graphs: bool, capture_hidden_mode: Any
) -> DecodeTarget:
    """Build the target's decode attention backend and, if ``graphs``, its decode CUDA graphs.

    SGLang's backends and graph runner choose verify shapes when the model runner is speculative, so both
    are built with the runner's ``spec_algorithm`` set to NONE for the duration (what a speculation-free
    engine sees). A graph runner that must return hidden states (EAGLE) is captured with them, so that a
    replay never triggers SGLang's recapture. A capture failure falls back to eager decode with a warning;
    a backend that cannot be built at all raises (the caller then keeps the one-token verify off step).
    """
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    mr = model_runner
    launch_runner = mr.graph_runner
    restore = (
        (mr, "spec_algorithm", SpeculativeAlgorithm.NONE),
        (mr, "attn_backend", KEEP),  # building and capturing install their own: put the launch ones back
        (mr, "graph_runner", KEEP),
        (mr, "init_new_workspace", KEEP),
        (mr.server_args, "enable_return_hidden_states", KEEP),
    )
    with swapped(restore):
        attn = mr._get_attention_backend(init_new_workspace=True)
        graph_runner = None
        if graphs and launch_runner is not None and not server_args.disable_cuda_graph:
            if capture_hidden_mode == CaptureHiddenMode.FULL:
                mr.server_args.enable_return_hidden_states = True  # read once, to capture hidden states
            graph_runner = capture_like(
                launch_runner, mr, attn, {}, what="the decode CUDA graphs for off steps"
            )
        return DecodeTarget(attn, graph_runner, capture_hidden_mode)
