"""The request ids of an SGLang batch (``Req.rid``, in batch order), for StepStats' request fields."""

from __future__ import annotations

import operator
from collections.abc import Hashable, Sequence
from typing import Any

__all__ = ["request_ids"]

_RID = operator.attrgetter("rid")


def request_ids(reqs: Sequence[Any] | None, n: int | None = None) -> list[Hashable] | None:
    """``[r.rid for r in reqs]`` (one C-level pass), or None when the batch has no requests, a request has
    no id, or there are not ``n`` of them (the ids would not line up with the per-request counts). Never
    raises: the ids are optional."""
    try:
        if not reqs:
            return None
        ids: list[Hashable] = list(map(_RID, reqs))
    except Exception:  # noqa: BLE001 - a batch without request objects: no ids
        return None
    if n is not None and len(ids) != n:
        return None
    return ids
