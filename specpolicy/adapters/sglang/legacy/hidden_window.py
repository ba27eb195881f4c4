"""The target's hidden states of the last ``W`` off steps, kept on the GPU for an EAGLE drafter's catch-up.

An EAGLE / EAGLE-3 drafter reads, at each position ``p``, the token of ``p+1`` and the target's hidden state
at ``p`` (EAGLE-3: its auxiliary layers, concatenated). An off step's decode forward already computes that
hidden state for the position it writes; ``HiddenWindow`` keeps it, so the resume-time extend can feed the
drafter exactly what an always-on engine's verify would have fed it.

The buffer is ``rows x W x width`` (``rows`` = the request pool's size, ``width`` = the hidden width the
target returns), allocated once at start-up: ``rows * W * width * itemsize`` bytes. Off step number ``j``
(counted by ``DraftLag``) writes column ``(j - 1) % W`` of each running request's pool row; a request that
missed the last ``m <= W`` off steps finds its hidden states in the ``m`` columns before the current one.
Writes and reads are device-side indexing from host-side counters: nothing waits for the GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

__all__ = ["HiddenWindow"]

log = logging.getLogger("specpolicy.sglang.legacy")


class HiddenWindow:
    """A ring of ``window`` hidden-state columns per request-pool row (see the module docstring)."""

    __slots__ = ("rows", "window", "width", "dtype", "device", "buf", "resized")

    def __init__(self, *, rows: int, window: int, width: int, dtype: Any, device: Any) -> None:
        import torch

        if rows < 1 or window < 1 or width < 1:
            raise ValueError(f"HiddenWindow needs rows, window, width >= 1 (got {rows}, {window}, {width})")
        self.rows, self.window, self.width = int(rows), int(window), int(width)
        self.dtype, self.device = dtype, device
        self.buf = torch.zeros((self.rows, self.window, self.width), dtype=dtype, device=device)
        self.resized = False

    @property
    def nbytes(self) -> int:
        return int(self.buf.numel() * self.buf.element_size())

    def write(self, step: int, pool_rows: Any, hidden: Any) -> None:
        """Keep ``hidden`` (one row per request, in the order of ``pool_rows``) for off step ``step``."""
        if hidden is None or int(hidden.shape[0]) == 0:
            return
        if int(hidden.shape[-1]) != self.width or hidden.dtype != self.dtype:
            self._resize(int(hidden.shape[-1]), hidden.dtype)
        self.buf[pool_rows.to(self.buf.device, non_blocking=True).long(), (step - 1) % self.window] = hidden

    def gather(self, now: int, pool_rows: Any, missing: Sequence[int]) -> Any:
        """The hidden states of each request's ``missing[i]`` positions, oldest first, concatenated.

        The positions were written by off steps ``now - missing[i] + 1 .. now``. A request with
        ``missing[i] == 0`` gets one zero row (its input is thrown away by the caller).
        """
        import torch

        cols: list[int] = []
        per_req: list[int] = []
        for m in missing:
            if m <= 0:
                cols.append(-1)
                per_req.append(1)
                continue
            if m > self.window:
                raise ValueError(f"{m} missing positions exceed the hidden-state window of {self.window}")
            cols.extend((now - m + i) % self.window for i in range(m))
            per_req.append(m)
        counts = torch.tensor(per_req, dtype=torch.int64)
        rows = pool_rows.to(self.buf.device).long().repeat_interleave(counts.to(self.buf.device))
        col_cpu = torch.tensor(cols, dtype=torch.int64)
        blank = col_cpu < 0
        col = col_cpu.clamp(min=0).to(self.buf.device, non_blocking=True)
        out = self.buf[rows, col]
        if bool(blank.any()):
            out[blank.to(self.buf.device, non_blocking=True)] = 0
        return out

    def _resize(self, width: int, dtype: Any) -> None:
        """The target returned another width or dtype than start-up computed: reallocate, loudly. What was
        kept is lost: acceptance after the next resume may suffer, an output token cannot change."""
        import torch

        log.warning(
            "specpolicy: the target's hidden states are %d wide (%s), not %d (%s) as computed at start-up; "
            "the hidden-state window is reallocated",
            width,
            dtype,
            self.width,
            self.dtype,
        )
        self.width, self.dtype, self.resized = width, dtype, True
        self.buf = torch.zeros((self.rows, self.window, width), dtype=dtype, device=self.device)
