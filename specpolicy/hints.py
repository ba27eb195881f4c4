"""Per-request speculation hints: a request may say ``off``, ``max_depth=N``, or nothing.

A hint rides in the engine's own per-request channel (SGLang's ``custom_params``, vLLM's
``SamplingParams.extra_args``) under the key ``HINT_KEY``. A request's hint is read once, when the adapter
first sees the request (``HintBook.admit``), and kept while the request lives, so a step whose batch holds
no hinted request pays one truthiness check. The batch's hints reach the policy as ``StepStats.hints``
(``BatchHints``), and the controller applies ``BatchRule`` after decide(), so every policy respects them.

A hint is an allowance: ``off`` allows depth 0, ``max_depth=N`` allows at most N, no hint allows any depth.
Hints only lower the depth; speculative decoding stays lossless whatever depth runs.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from .errors import short_repr
from .mode import MAX_NUM_STEPS

__all__ = [
    "HINT_KEY",
    "BatchHints",
    "BatchRule",
    "HintBook",
    "HintError",
    "OffRule",
    "aggregate",
    "hint_of",
    "parse_hint",
]

log = logging.getLogger("specpolicy.hints")

#: The key of a request's hint in the engine's per-request parameters.
HINT_KEY = "specpolicy"

OffRule = Literal["any", "majority", "all"]

_ALLOWED = f"'off', 'max_depth=N' or {{'max_depth': N}} with N an int in [0, {MAX_NUM_STEPS}], or null"


class HintError(ValueError):
    """A hint that is none of the allowed forms; the message names the allowed ones."""


class BatchHints(NamedTuple):
    """The hints of one batch: requests that opt out, requests with a cap, and the caps' range.

    ``min_cap`` / ``max_cap`` are 0 when ``capped`` is 0. StepStats carries None instead of a BatchHints when
    no request of the batch has a hint, so the common step allocates nothing.
    """

    off: int
    capped: int
    min_cap: int
    max_cap: int


def parse_hint(value: object) -> int | None:
    """The allowance a hint value gives (0 = off, N = at most N drafts), or None for no hint.

    Accepts ``None`` / ``"auto"`` (no hint), ``"off"``, ``"max_depth=N"`` and ``{"max_depth": N}``. Raises
    ``HintError`` naming the allowed forms for anything else.
    """
    if value is None:
        return None
    n: object
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("", "auto"):
            return None
        if text == "off":
            return 0
        name, sep, rest = text.partition("=")
        if not sep or name.strip() != "max_depth":
            raise HintError(f"{HINT_KEY}: must be {_ALLOWED}, got {short_repr(value)}")
        try:
            n = int(rest.strip())
        except ValueError:
            raise HintError(f"{HINT_KEY}: must be {_ALLOWED}, got {short_repr(value)}") from None
    elif isinstance(value, Mapping):
        if set(value) - {"max_depth"} or "max_depth" not in value:
            raise HintError(f"{HINT_KEY}: must be {_ALLOWED}, got {short_repr(value)}")
        n = value["max_depth"]
    else:
        raise HintError(f"{HINT_KEY}: must be {_ALLOWED}, got {short_repr(value)}")
    if type(n) is not int or not 0 <= n <= MAX_NUM_STEPS:
        raise HintError(f"{HINT_KEY}.max_depth: must be an int in [0, {MAX_NUM_STEPS}], got {short_repr(n)}")
    return n


_new = tuple.__new__


def aggregate(allowances: Iterable[int]) -> BatchHints | None:
    """The BatchHints of the allowances of a batch's hinted requests, or None when there are none."""
    al = allowances if isinstance(allowances, list) else list(allowances)
    n = len(al)
    if not n:
        return None
    off = al.count(0)
    hints: BatchHints
    if off == n:
        hints = _new(BatchHints, (off, 0, 0, 0))
    else:
        caps = [a for a in al if a] if off else al
        hints = _new(BatchHints, (off, n - off, min(caps), max(caps)))
    return hints


class BatchRule(NamedTuple):
    """How a batch's hints limit its depth, applied by the controller after decide().

    ``per_request`` (engines that verify per request, vLLM): the adapter trims each request's drafts, so the
    batch depth only drops to what its most permissive request allows (0 when every request opts out).
    Otherwise (one depth per batch, SGLang): the batch runs off when ``off`` says so (``any`` request,
    a strict ``majority``, or ``all`` of them opt out), and at most the smallest ``max_depth`` of the batch.
    """

    off: OffRule = "majority"
    per_request: bool = False

    def limit(self, hints: Sequence[int], batch_size: int) -> int:
        """The largest depth the batch's hints allow (``MAX_NUM_STEPS`` when they allow any)."""
        off, capped, min_cap, max_cap = hints
        rule, per_request = self
        if per_request:
            if off >= batch_size:
                return 0
            return max_cap if off + capped >= batch_size else MAX_NUM_STEPS
        if off and (rule == "any" or off >= batch_size or (rule == "majority" and 2 * off > batch_size)):
            return 0
        return min_cap if capped else MAX_NUM_STEPS


class HintBook:
    """The live hinted requests of one engine process, and the hint counters.

    ``admit`` reads a request's hint once; a malformed hint is counted in ``bad``, logged once, and treated
    as no hint (never raised into the engine). Only requests with a hint are kept, so the per-step
    ``batch`` costs O(hinted requests) and nothing when there are none. Owned by one adapter.
    """

    __slots__ = ("live", "requests_off", "requests_capped", "bad", "trimmed", "_logged")

    def __init__(self) -> None:
        #: request key -> allowance, for the requests with a hint still alive
        self.live: dict[Hashable, int] = {}
        self.requests_off = 0
        self.requests_capped = 0
        self.bad = 0
        #: request steps whose drafts an engine that verifies per request cut to the request's allowance
        self.trimmed = 0
        self._logged = False

    def admit(self, key: Hashable, params: object) -> int | None:
        """Read the hint of request ``key`` from its per-request parameters (a mapping or None), once.

        Returns the allowance, or None for no hint (also for a bad hint). A key already admitted keeps its
        first reading (a request retracted and admitted again is counted once).
        """
        live = self.live
        if key in live:
            return live[key]
        if params is None:
            return None
        try:
            value = params.get(HINT_KEY) if isinstance(params, Mapping) else None
            if value is None:
                return None
            allowance = parse_hint(value)
        except Exception as exc:  # noqa: BLE001 - a request's bad hint must never reach the engine
            self.bad += 1
            if not self._logged:
                self._logged = True
                log.warning(
                    "specpolicy: a request's hint is ignored (the policy decides for it): %s. Further bad "
                    "hints are counted in specpolicy_hints_total{event=\"bad\"}, not logged.",
                    exc,
                )
            return None
        if allowance is None:
            return None
        live[key] = allowance
        if allowance == 0:
            self.requests_off += 1
        else:
            self.requests_capped += 1
        return allowance

    def drop(self, key: Hashable) -> None:
        """Request ``key`` finished: forget it."""
        self.live.pop(key, None)

    def counts(self) -> dict[str, int]:
        """The running totals the metrics mirror (``specpolicy_hints_total{event}``)."""
        return {
            "requests_off": self.requests_off,
            "requests_capped": self.requests_capped,
            "bad": self.bad,
            "request_steps_trimmed": self.trimmed,
        }


def hint_of(params: Any) -> int | None:
    """The allowance in a per-request parameter mapping, or None; raises HintError for a bad hint (for
    clients and tests that validate a hint before sending it)."""
    if not isinstance(params, Mapping):
        return None
    return parse_hint(params.get(HINT_KEY))
