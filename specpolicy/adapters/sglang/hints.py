"""Per-request hints on SGLang: read from ``SamplingParams.custom_params["specpolicy"]``.

A request's hint is read when it is prefilled (every extend batch passes through ``on_extend``), once; a
decode batch's hints are gathered by ``of_batch`` only while some hinted request is alive, so a server
without hints pays one truthiness check per step, and only when the batch's membership changed: SGLang
replaces ``ScheduleBatch.reqs`` when it filters the batch and extends it when it merges one in, so the same
list object at the same length holds the same requests (the list is kept referenced, so no other list can
take its address). SGLang runs one depth per batch, so the controller's
``BatchRule`` (``hint_off_rule``, the smallest cap) turns the batch's hints into its depth.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from ...hints import BatchHints, HintBook, aggregate

__all__ = ["RequestHints", "PRUNE_EVERY"]

#: Decode steps between two sweeps for finished hinted requests (while some are not in the batch).
PRUNE_EVERY = 64


class RequestHints:
    """The hinted requests of one scheduler process (owned by its adapter); never raises into SGLang."""

    __slots__ = ("book", "live", "_reqs", "_age", "_list", "_len", "_last")

    def __init__(self, book: HintBook) -> None:
        self.book = book
        #: request id -> allowance of the live hinted requests (the book's own dict: adapters check it
        #: before calling ``of_batch``)
        self.live = book.live
        self._reqs: dict[Hashable, Any] = {}  # rid -> Req of the live hinted requests, to see them finish
        self._age = 0
        self._list: object = None  # the batch list of the last scan, its length, and what it found
        self._len = -1
        self._last: BatchHints | None = None

    def on_extend(self, reqs: Sequence[Any] | None) -> None:
        """Read the hints of the requests of an extend (prefill) batch."""
        if not reqs:
            return
        try:
            admit = self.book.admit
            for r in reqs:
                params = r.sampling_params.custom_params
                if params is not None and admit(r.rid, params) is not None:
                    self._reqs[r.rid] = r
        except Exception:  # noqa: BLE001 - an odd request object: its hint is unknown, the step goes on
            return

    def of_batch(self, reqs: Sequence[Any] | None) -> BatchHints | None:
        """The hints of a decode batch's requests, or None when none of them has one."""
        live = self.book.live
        if not live or not reqs:
            return None
        if reqs is self._list and len(reqs) == self._len:
            return self._last
        try:
            get = live.get
            hits = [a for r in reqs if (a := get(r.rid)) is not None]
            if len(hits) < len(live):
                self._age += 1
                if self._age >= PRUNE_EVERY:
                    self._age = 0
                    self._prune()
            self._last = last = aggregate(hits)
            self._list = reqs
            self._len = len(reqs)
            return last
        except Exception:  # noqa: BLE001 - hints are optional inputs
            return None

    def _prune(self) -> None:
        """Forget the hinted requests that finished."""
        for rid, r in list(self._reqs.items()):
            if r.finished():
                del self._reqs[rid]
                self.book.drop(rid)
        self._list = None
