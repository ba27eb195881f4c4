"""The off step's machinery for one legacy worker (``OffPath``), built at start-up by ``install``.

It says which target forward an off step runs (the decode with its own CUDA graphs, or the one-token verify
fallback) and how the drafter follows (caught up lazily on resume, or a draft extend per step), and keeps
the placeholder buffers an off step hands on, so that no step allocates them again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .decode_target import DecodeTarget
from .draft_lag import DraftLag
from .one_token import FieldNames, OneTokenTarget

__all__ = ["OffPath", "PLACEHOLDERS"]

#: on the draft input of a lazy v2 off step: its proposals and hidden states are placeholders. The FutureMap
#: hooks replace ``True`` by ``(FutureIndices, indices)`` of the store that skipped them.
PLACEHOLDERS = "_specpolicy_placeholders"


@dataclasses.dataclass
class OffPath:
    """The off step's machinery for one worker: which target forward, which draft catch-up."""

    names: FieldNames
    sizes: OneTokenTarget  # swaps the worker's speculative sizes (and, for the verify fallback, backends)
    decode: DecodeTarget | None  # None: the one-token verify off step (fallback or configured)
    lag: DraftLag | None  # None: per-step draft extend while off
    topk: int = 1
    prev_draft_dtype: Any = None  # dtype of the draft proposal tensors (placeholders match it)
    draft_hidden: tuple[int, Any] | None = None  # (width, dtype) of the drafter's own hidden state (EAGLE)
    #: placeholder buffers of the lazy draft input, by (width, dtype, device, zeroed); sliced per step
    scratch: dict[tuple[Any, ...], Any] = dataclasses.field(default_factory=dict)
    #: (rows, proposal dtype, topk_p, topk_index, hidden_states) placeholders of the last v1 off step: the
    #: next off step of as many requests hands out the same views (no slicing per step)
    placeholders: tuple[int, Any, Any, Any, Any] | None = None
    #: the lazy draft input the last v1 off step installed, while no other decode or extend step has run
    #: on the worker since (the hooks clear it): the next off step updates it in place instead of building
    #: one (the scheduler's filter and merge change it in place; the off step rewrites every field they
    #: touch)
    draft_input: Any = None
    #: (rows, device, int32 ones) of the last lazy v2 off step: its accept lengths (read, never written)
    ones: tuple[int, Any, Any] | None = None

    def counts(self, runtime: Any) -> dict[str, int]:
        """Running totals for the metrics (``specpolicy_engine_events_total``): off steps, steps forced to
        speculate (logprobs, hidden states, grammars), and the drafter's skipped and caught-up positions."""
        out = {
            "decode_steps": runtime.decode_steps,
            "off_steps": runtime.skipped_steps,
            "forced_steps": runtime.forced_steps,
        }
        lag = self.lag
        if lag is not None:
            out["draft_positions_skipped"] = lag.skipped_positions
            out["draft_positions_caught_up"] = lag.caught_up_positions
            out["draft_catch_ups"] = lag.catch_ups
            out["draft_unrecoverable"] = lag.unrecoverable
        timer = getattr(runtime, "gpu_timer", None)
        if timer is not None:
            out["step_times_not_ready"] = timer.incomplete
        return out

    @property
    def label(self) -> str:
        if self.decode is None:
            target = "one-token verify, " + ("CUDA graph" if self.sizes.mode == "graph" else "eager")
        else:
            target = f"decode ({'CUDA graphs' if self.decode.mode == 'graph' else 'eager'})"
        lag = self.lag
        if lag is None:
            draft = "one-token draft extend per step"
        elif lag.hidden is None:
            draft = "drafter skipped, lazy catch-up on resume"
        else:
            h = lag.hidden
            dtype = str(h.dtype).replace("torch.", "")
            draft = (
                f"drafter skipped, lazy catch-up on resume with the target's hidden states kept for"
                f" {h.window} positions ({h.rows} x {h.window} x {h.width} {dtype},"
                f" {h.nbytes / 2**20:.1f} MiB)"
            )
        return f"{target}; {draft}"
