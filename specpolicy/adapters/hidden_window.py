"""The target's hidden states of the last ``W`` off positions, kept on the GPU for an EAGLE catch-up.

An EAGLE / EAGLE-3 drafter reads, at each position ``p``, the token of ``p+1`` and the target's hidden state
at ``p`` (EAGLE-3: its auxiliary layers, concatenated). An off step's decode forward already computes that
hidden state for the position it writes; ``HiddenWindow`` keeps it, so the resume-time extend can feed the
drafter exactly what an always-on engine's verify would have fed it.

The buffer is ``W x rows x width`` (``rows`` = the request pool's size, ``width`` = the hidden width the
target returns), allocated once at start-up: ``rows * W * width * itemsize`` bytes, whatever the batch or
the length of the off stretch. Off step number ``j`` (counted by ``DraftLag``) writes column
``(j - 1) % W``, one row per running request (its pool row); a request that missed the last ``m <= W`` off
steps finds its hidden states in the ``m`` columns before the current one.

Per off step the write is one ``index_copy_`` (one kernel) into a column view made at start-up: the
decode forward's hidden states are the CUDA graph's output buffer, which the next replay overwrites, so
one copy out of it is the least an off step can do. Reads (``flat_index`` on the host, ``take`` on the
device) happen once per catch-up. Nothing waits for the GPU.

SGLang numbers the columns by off step (every running request is in every decode batch there); vLLM's
adapter numbers them by position (``put``: position ``p`` of a request lives in column ``p % W``), since a
request's off positions there include prefill chunks of many tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

__all__ = ["HiddenWindow"]

log = logging.getLogger("specpolicy.adapters")


class HiddenWindow:
    """A ring of ``window`` hidden-state columns per request-pool row (see the module docstring)."""

    __slots__ = ("rows", "window", "width", "dtype", "device", "buf", "cols", "resized", "_int64")

    def __init__(self, *, rows: int, window: int, width: int, dtype: Any, device: Any) -> None:
        import torch

        if rows < 1 or window < 1 or width < 1:
            raise ValueError(f"HiddenWindow needs rows, window, width >= 1 (got {rows}, {window}, {width})")
        self.rows, self.window, self.width = int(rows), int(window), int(width)
        self.dtype, self.device = dtype, device
        self._int64 = torch.int64
        self.resized = False
        self._allocate()

    def _allocate(self) -> None:
        import torch

        self.buf = torch.zeros((self.window, self.rows, self.width), dtype=self.dtype, device=self.device)
        self.cols = self.buf.unbind(0)  # one view per column, made once: a write makes no view

    @property
    def nbytes(self) -> int:
        return int(self.buf.numel() * self.buf.element_size())

    def write(self, step: int, pool_rows: Any, hidden: Any) -> None:
        """Keep ``hidden`` (one row per request, in the order of ``pool_rows``: SGLang's int64
        ``req_pool_indices``, on the buffer's device) for off step ``step``: one ``index_copy_``."""
        if hidden is None:
            return
        if hidden.shape[-1] != self.width or hidden.dtype != self.dtype:
            if int(hidden.shape[0]) == 0:
                return
            self._resize(int(hidden.shape[-1]), hidden.dtype)
        if pool_rows.dtype != self._int64:
            pool_rows = pool_rows.long()
        self.cols[(step - 1) % self.window].index_copy_(0, pool_rows, hidden)

    def put(self, flat: Any, hidden: Any) -> None:
        """Keep ``hidden`` at rows ``flat`` of ``buf`` seen as ``(W * rows) x width`` (row ``column * rows +
        pool_row``; a device int64 tensor): one ``index_copy_``, for a caller choosing the columns."""
        if hidden.shape[-1] != self.width or hidden.dtype != self.dtype:
            if int(hidden.shape[0]) == 0:
                return
            self._resize(int(hidden.shape[-1]), hidden.dtype)
        self.buf.view(-1, self.width).index_copy_(0, flat, hidden)

    def flat_index(
        self, now: int, pool_rows: Sequence[int], missing: Sequence[int]
    ) -> tuple[list[int], list[int]]:
        """Host-side: the rows of ``buf`` seen as ``(W * rows) x width`` that hold each request's
        ``missing[i]`` positions, oldest first, concatenated (written by off steps ``now - missing[i] + 1 ..
        now``); and where in that list the requests with ``missing[i] == 0`` have their one placeholder
        row (to be zeroed by ``take``)."""
        idx: list[int] = []
        blank: list[int] = []
        w, rows = self.window, self.rows
        for row, m in zip(pool_rows, missing, strict=True):
            row = int(row)
            if m <= 0:
                blank.append(len(idx))
                idx.append(row)
                continue
            if m > w:
                raise ValueError(f"{m} missing positions exceed the hidden-state window of {w}")
            first = (now - m) % w  # the columns first .. first + m - 1, wrapping round at w
            wrap = max(first + m - w, 0)
            idx.extend(range(first * rows + row, (first + m - wrap) * rows + row, rows))
            idx.extend(range(row, wrap * rows + row, rows))
        return idx, blank

    def take(self, flat: Any, blank: Any = None) -> Any:
        """The rows ``flat`` (a device int64 tensor from ``flat_index``) of the buffer; rows ``blank`` (a
        device index, or None) zeroed. One gather, plus one fill where there are blank rows."""
        out = self.buf.view(-1, self.width).index_select(0, flat)
        if blank is not None and int(blank.shape[0]) > 0:
            out[blank] = 0
        return out

    def gather(self, now: int, pool_rows: Sequence[int], missing: Sequence[int]) -> Any:
        """The hidden states of each request's ``missing[i]`` positions, oldest first, concatenated.

        The positions were written by off steps ``now - missing[i] + 1 .. now``. A request with
        ``missing[i] == 0`` gets one zero row (its input is thrown away by the caller). ``pool_rows`` are
        host ints (each request's ``req_pool_idx``).
        """
        import torch

        idx, blank = self.flat_index(now, pool_rows, missing)
        packed = torch.tensor(idx + blank, dtype=torch.int64).to(self.buf.device, non_blocking=True)
        flat, blank_rows = packed.split([len(idx), len(blank)])
        return self.take(flat, blank_rows if blank else None)

    def _resize(self, width: int, dtype: Any) -> None:
        """The target returned another width or dtype than start-up computed: reallocate, loudly. What was
        kept is lost: acceptance after the next resume may suffer, an output token cannot change."""
        log.warning(
            "specpolicy: the target's hidden states are %d wide (%s), not %d (%s) as computed at start-up; "
            "the hidden-state window is reallocated",
            width,
            dtype,
            self.width,
            self.dtype,
        )
        self.width, self.dtype, self.resized = width, dtype, True
        self._allocate()
