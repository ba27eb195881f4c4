"""Per-request hints on vLLM: read from ``SamplingParams.extra_args["specpolicy"]``.

vLLM verifies each request's drafts on their own, so a hint is applied per request: before each
``schedule()`` the drafts a hinted request carries (``Request.spec_token_ids``: the drafter's proposals with
sync scheduling, the placeholders with async scheduling) are cut to its allowance, so an opted-out request
is scheduled and verified with no drafts while the rest of the batch verifies K, and a capped request
verifies at most N. vLLM's scheduler then counts the tokens, KV slots and async placeholders from what is
left; rejection sampling is per request, so the tokens each request gets are unchanged (lossless). The batch
depth drops only where every request of the batch allows less (``BatchRule(per_request=True)``).
"""

from __future__ import annotations

from typing import Any

from ...hints import BatchHints, HintBook, aggregate

__all__ = ["RequestHints"]


class RequestHints:
    """The hinted requests of one engine core (owned by its ``CoreBridge``); never raises into vLLM."""

    __slots__ = ("book", "live")

    def __init__(self, book: HintBook) -> None:
        self.book = book
        #: request id -> allowance of the live hinted requests (the book's own dict: a truthiness check
        #: per step when there are none)
        self.live = book.live

    def admit(self, request: Any) -> None:
        """Read a new request's hint (``add_request``)."""
        try:
            params = request.sampling_params
            extra = None if params is None else params.extra_args
            if extra is not None:
                self.book.admit(request.request_id, extra)
        except Exception:  # noqa: BLE001 - a request without sampling params (pooling): no hint
            return

    def trim(self, requests: Any) -> None:
        """Before ``schedule()``: cut each hinted request's drafts to its allowance; forget finished ones."""
        book = self.book
        try:
            for rid, allowance in list(self.live.items()):
                r = requests.get(rid)
                if r is None or r.is_finished():
                    book.drop(rid)
                    continue
                spec = r.spec_token_ids
                if len(spec) > allowance:
                    r.spec_token_ids = spec[:allowance] if allowance else []
                    book.trimmed += 1
        except Exception:  # noqa: BLE001 - the step runs with the drafts it has
            return

    def of_step(self, scheduled: Any, requests: Any) -> BatchHints | None:
        """The hints of the decoding requests of a step (``num_scheduled_tokens``: id -> tokens), found
        from the hinted requests (O(hinted), not O(batch)); decoding as ``CoreBridge.schedule`` counts it."""
        try:
            got = []
            for rid, allowance in self.live.items():
                n = scheduled.get(rid)
                if n is None:
                    continue
                r = requests[rid]
                c = r.num_computed_tokens
                placeholders = r.num_output_placeholders
                end = r.num_tokens + placeholders
                if c + n >= end and c + 1 >= end and (placeholders or r.num_output_tokens):
                    got.append(allowance)
            return aggregate(got)
        except Exception:  # noqa: BLE001 - hints are optional inputs
            return None
