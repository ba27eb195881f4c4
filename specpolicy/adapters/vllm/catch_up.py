"""What vLLM's two drafter hooks share: the missed positions per request slot, the longer batch that feeds
them, and the catch-up passes of their own.

``SlotLag`` counts, per request-state slot, the positions its drafter missed while off (one add per off
step, on the host). ``extended`` turns vLLM's ``InputBatch`` into one whose rows feed the missed positions
ahead of (some of) their own query tokens, and says which token each fed one is (``Fed``); ``lag_passes``
splits missed positions beyond the drafter's token budget into passes of their own. ``step_of`` reads what
a propose wrapper needs of a step. ``off_drafter`` (the draft model) and ``off_eagle`` (EAGLE / EAGLE-3 /
MTP) build on these.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = [
    "STATE",
    "SlotLag",
    "Extension",
    "Fed",
    "extend_batch",
    "extended",
    "lag_passes",
    "pass_args",
    "arg",
    "Step",
    "step_of",
    "no_drafts",
]

#: On the speculator: its ``SlotLag`` (present only on an engine running the specpolicy scheduler).
STATE = "_specpolicy_lag"

# indices of propose's parameters after input_batch in ``args`` (vLLM's model runner passes the first ten
# by position, the rest by name)
ATTN_METADATA, SLOT_MAPPINGS, LAST_HIDDEN, AUX_HIDDEN = 0, 1, 2, 3
NUM_REJECTED, DUMMY_RUN, NUM_SPEC = 5, 11, 15


class SlotLag:
    """Positions each request-state slot's drafter missed, counted on the host (one add per off step).

    ``tokens`` is the runner's token history (``[max_num_reqs, max_model_len]``, committed tokens by
    position). The counters are what metrics report: steps skipped, positions skipped and caught up, and
    forwards the catch-up ran on its own (``lag_passes``; a catch-up inside the step's first pass adds none).
    """

    __slots__ = (
        "missed",
        "tokens",
        "skipped_steps",
        "skipped_positions",
        "caught_up_positions",
        "own_passes",
    )

    def __init__(self, max_num_reqs: int, tokens: Any) -> None:
        self.missed = np.zeros(max_num_reqs, dtype=np.int64)
        self.tokens = tokens
        self.skipped_steps = 0
        self.skipped_positions = 0
        self.caught_up_positions = 0
        self.own_passes = 0

    def skip(self, slots: np.ndarray, query_lens: np.ndarray) -> None:
        """A step ran no drafter forward over these slots' queries (the slots of one batch are distinct)."""
        self.missed[slots] += query_lens
        self.skipped_steps += 1
        self.skipped_positions += int(query_lens.sum())

    def take(self, slots: np.ndarray) -> np.ndarray:
        """The missed counts of a batch's slots, now to be caught up (cleared here)."""
        m: np.ndarray = self.missed[slots].copy()
        self.missed[slots] = 0
        self.caught_up_positions += int(m.sum())
        return m

    def reset(self, slot: int) -> None:
        """A new request took ``slot``: its drafter runs over its whole prefill."""
        self.missed[slot] = 0


@dataclasses.dataclass(frozen=True)
class Extension:
    """Per row of a batch: feed ``count`` missed positions starting ``back`` positions before the row's
    first query position, then the first ``own`` tokens of its query (``own <= query length``; with
    ``own > 0``, ``count == back``: the positions fed are consecutive)."""

    back: np.ndarray
    count: np.ndarray
    own: np.ndarray


@dataclasses.dataclass(frozen=True)
class Fed:
    """The tokens an ``Extension`` feeds, one entry each, on the device: its batch row, whether it is a
    missed position (else one of the row's own query tokens), its position, and the batch token it is
    (own tokens; a missed one gives its row's first query token)."""

    row: Any
    lag: Any
    pos: Any
    src: Any


_LATER_FIELDS: dict[str, Any] = {"decode_graph_eligible": False, "max_query_len": None}


def extend_batch(batch: Any, ext: Extension, tokens: Any) -> Any:
    """``batch`` (vLLM's ``InputBatch``) with each row's query replaced by the positions ``ext`` names."""
    return extended(batch, ext, tokens)[0]


def extended(batch: Any, ext: Extension, tokens: Any) -> tuple[Any, Fed]:
    """``extend_batch``'s batch, and which token each fed one is (``Fed``).

    Tokens of missed positions come from ``tokens`` (the token history, by request-state slot and
    position), the others from the batch. Sequence lengths end at each row's last fed position, so the
    attention sees every earlier position as context. Indices are built on the host and cross to the device
    in one copy; nothing waits for the GPU.
    """
    import torch

    n = batch.num_reqs
    qsl = batch.query_start_loc_np[: n + 1].astype(np.int64)
    q = qsl[1:] - qsl[:-1]
    gap = (ext.own > 0) & (ext.count != ext.back)
    if np.any(ext.own > q) or np.any(ext.count > ext.back) or np.any(ext.count + ext.own == 0) or gap.any():
        raise ValueError(
            "extension must feed each row consecutive positions, at least one, within its query and history"
        )
    lens = ext.count + ext.own
    new_qsl = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=new_qsl[1:])
    total = int(new_qsl[-1])
    row = np.repeat(np.arange(n), lens)
    j = np.arange(total) - new_qsl[row]
    is_lag = j < ext.count[row]
    offset = np.where(is_lag, j - ext.back[row], 0)  # from the row's first query position
    src = np.where(is_lag, qsl[row], qsl[row] + j - ext.count[row])  # the batch token fed (own part)
    device = batch.input_ids.device
    packed = torch.from_numpy(np.concatenate([row, offset, src, is_lag.astype(np.int64), new_qsl]))
    row_d, offset_d, src_d, lag_d, qsl_d = packed.to(device, non_blocking=True).split([total] * 4 + [n + 1])
    lag_b = lag_d.bool()
    first = batch.positions[batch.query_start_loc[:n].long()]
    lag_pos = first[row_d] + offset_d
    positions = torch.where(lag_b, lag_pos, batch.positions[src_d])
    history = tokens[batch.idx_mapping[row_d].long(), lag_pos.clamp(min=0)]
    input_ids = torch.where(lag_b, history.to(batch.input_ids.dtype), batch.input_ids[src_d])
    cut = q - ext.own + ext.back - ext.count  # positions after the last one fed, per row
    cut_d = torch.from_numpy(cut).to(batch.seq_lens.device, non_blocking=True)
    changes = dict(
        num_scheduled_tokens=lens.astype(batch.num_scheduled_tokens.dtype),
        num_tokens=total,
        num_tokens_after_padding=total,
        query_start_loc=qsl_d.to(batch.query_start_loc.dtype),
        query_start_loc_np=new_qsl.astype(batch.query_start_loc_np.dtype),
        seq_lens=batch.seq_lens - cut_d.to(batch.seq_lens.dtype),
        seq_lens_cpu_upper_bound=batch.seq_lens_cpu_upper_bound - torch.from_numpy(cut).to(torch.int32),
        input_ids=input_ids,
        positions=positions,
        is_padding=torch.zeros(total, dtype=torch.bool, device=device),
    )
    # from 0.33 on: no FULL decode graph for this batch, and no query length promised beyond its own
    changes.update({k: v for k, v in _LATER_FIELDS.items() if hasattr(batch, k)})
    out = dataclasses.replace(batch, **changes)
    return out, Fed(row_d, lag_b, positions, src_d)


def lag_passes(missed: np.ndarray, budget: int) -> list[Extension]:
    """Catch-up passes of their own for ``missed`` positions per row, at most ``budget`` tokens each.

    Each pass feeds every row at least one position: a chunk of its missed positions, or, once those are
    done, its first query token (recomputed from exact KV, and rewritten by the step's own first pass). A
    chunk's last position is followed by a scratch write of the drafter (its "correction" slot), which the
    next chunk, or the step's own pass, overwrites.
    """
    n = missed.shape[0]
    if budget < n:
        raise ValueError(f"budget {budget} below the batch's {n} rows")
    done = np.zeros(n, dtype=np.int64)
    passes: list[Extension] = []
    while np.any(done < missed):
        left = missed - done
        room = budget - n  # one token per row is always there
        take = np.zeros(n, dtype=np.int64)
        for i in np.flatnonzero(left):
            extra = min(int(left[i]) - 1, room)
            take[i] = 1 + extra
            room -= extra
        passes.append(Extension(back=missed - done, count=take, own=(take == 0).astype(np.int64)))
        done += take
    return passes


def arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str, default: Any) -> Any:
    """propose's parameter ``name``, at ``args[index]`` when passed by position."""
    return args[index] if len(args) > index else kwargs.get(name, default)


@dataclasses.dataclass(frozen=True)
class Step:
    """What a propose wrapper reads of a step: its rows' request-state slots and query lengths, and whether
    it is an off step (depth 0, no drafts verified: every query token is committed)."""

    slots: np.ndarray
    query_lens: np.ndarray
    off: bool


def step_of(
    speculator: Any, lag: Any, batch: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Step | None:
    """The step ``propose`` is called for; None where vLLM's own runs unchanged (no bookkeeping, a dummy
    run, or adaptive verification, which reads the drafter's confidences every step)."""
    if lag is None or arg(args, kwargs, DUMMY_RUN, "dummy_run", False):
        return None
    if getattr(speculator, "enable_adaptive_verification", False):
        return None
    n = batch.num_reqs
    qsl = batch.query_start_loc_np
    depth = arg(args, kwargs, NUM_SPEC, "num_speculative_tokens", None)
    q = (qsl[1 : n + 1] - qsl[:n]).astype(np.int64)
    return Step(batch.idx_mapping_np[:n], q, depth == 0 and batch.num_draft_tokens == 0)


def no_drafts(speculator: Any, n: int) -> Any:
    """What propose returns at depth 0: every draft -1."""
    drafts = speculator.draft_tokens[:n]
    drafts.fill_(-1)
    return drafts


def pass_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """propose's arguments for a catch-up pass of its own: nothing rejected (every position it feeds is
    committed), depth 0 (it only writes the drafter's KV)."""
    rest = list(args)
    rest[NUM_REJECTED] = args[NUM_REJECTED].new_zeros(args[NUM_REJECTED].shape)
    own_kwargs = {k: v for k, v in kwargs.items() if k != "num_speculative_tokens"}
    own_kwargs["num_speculative_tokens"] = 0
    return rest, own_kwargs
