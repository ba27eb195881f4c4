"""Depth-0 steps that leave vLLM's draft-model drafter alone, and the catch-up that makes it exact on resume.

On the V2 model runner the draft-model drafter (``StandaloneARSpeculator``) keeps its own KV cache in the
slots the target allocates for each position. Every ``propose`` starts with one forward over the step's
accepted tokens plus the newly sampled one, which writes the drafter's KV there; vLLM runs that forward at
depth 0 too, only to keep the KV in step. Here a depth-0 step runs no drafter forward at all: each request's
skipped positions are counted (``SlotLag``, by request-state slot), and the next ``propose`` that drafts
feeds the drafter, per request, its missed positions followed by the step's own tokens (``extend_batch``),
with the tokens read from the runner's token history (``req_states.all_token_ids``). The drafter's KV and
proposals are then exactly what an always-on drafter would have: every KV row is written from the same
token at the same position over the same earlier rows. The catch-up is lazy and batched (one forward,
part of the step's own first pass), and a request that finishes while off never pays.

A step is skipped only when it verifies no drafts (``num_draft_tokens == 0``): then every query token is
a committed token and the missed counts are known on the host. The first depth-0 step after a speculative
one verifies that step's drafts, whose accepted count only the GPU knows yet, so it runs the drafter's
first pass as vLLM does. When missed positions and the step's tokens do not fit the drafter's token budget
together, the missed positions are fed first in passes of their own (``lag_passes``), each request's
chunk ending where the next begins; the step's own first pass then runs unchanged.

Only engines on the specpolicy scheduler are affected; dummy runs (warm-up, capture) never skip, nor does a
drafter with vLLM's adaptive verification, which records the drafter's confidences every step.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from .._patch import HookPlan, apply
from .config import uses_specpolicy_scheduler
from .versions import release

__all__ = [
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
    "STATE",
    "needed",
    "new_lag",
    "hook_plan",
    "targets",
    "install",
]

log = logging.getLogger("vllm.specpolicy")

#: On the speculator: its ``SlotLag`` (present only on an engine running the specpolicy scheduler).
STATE = "_specpolicy_lag"
_ACTIVE = "_specpolicy_off_drafter"  # on the runner: whether its engine runs the specpolicy scheduler

_GPU = "vllm.v1.worker.gpu"
_RUNNER = f"{_GPU}.model_runner.GPUModelRunner"
_SPECULATOR = f"{_GPU}.spec_decode.standalone_ar.speculator.StandaloneARSpeculator"
#: The vLLM names the hook wraps.
TARGETS: tuple[str, ...] = (
    f"{_RUNNER}.execute_model",
    f"{_RUNNER}.add_requests",
    f"{_SPECULATOR}.propose",
)

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
    out = dataclasses.replace(
        batch,
        num_scheduled_tokens=lens.astype(batch.num_scheduled_tokens.dtype),
        num_tokens=total,
        num_tokens_after_padding=total,
        query_start_loc=qsl_d.to(batch.query_start_loc.dtype),
        query_start_loc_np=new_qsl.astype(batch.query_start_loc_np.dtype),
        seq_lens=batch.seq_lens - cut_d.to(batch.seq_lens.dtype),
        seq_lens_cpu_upper_bound=batch.seq_lens_cpu_upper_bound - torch.from_numpy(cut).to(torch.int32),
        decode_graph_eligible=False,
        input_ids=input_ids,
        positions=positions,
        is_padding=torch.zeros(total, dtype=torch.bool, device=device),
        max_query_len=None,
    )
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


def needed(version: str | None) -> bool:
    """Whether the tested release ``version`` gets the hook (for a draft model, an EAGLE drafter or both)."""
    row = release(version)
    return row is not None and (row.mrv2_off_drafter or row.mrv2_off_eagle)


def new_lag(runner: Any, speculator: Any) -> SlotLag | None:
    """The bookkeeping for ``speculator``'s off steps (None: a drafter the hook leaves to vLLM)."""
    from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

    from . import off_eagle

    tokens = runner.req_states.all_token_ids.gpu
    if isinstance(speculator, StandaloneARSpeculator):
        return SlotLag(speculator.max_num_reqs, tokens)
    return off_eagle.new_lag(runner, speculator, tokens)


def runner_execute_model(orig: Callable[..., Any]) -> Callable[..., Any]:
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        active = self.__dict__.get(_ACTIVE)
        if active is None:
            active = uses_specpolicy_scheduler(self.vllm_config.scheduler_config.scheduler_cls)
            setattr(self, _ACTIVE, active)
        speculator = getattr(self, "speculator", None)
        if active and speculator is not None and STATE not in speculator.__dict__:
            setattr(speculator, STATE, new_lag(self, speculator))
        return orig(self, scheduler_output, *args, **kwargs)

    return execute_model


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


def speculator_propose(orig: Callable[..., Any]) -> Callable[..., Any]:
    def propose(self: Any, input_batch: Any, *args: Any, **kwargs: Any) -> Any:
        lag: SlotLag | None = self.__dict__.get(STATE)
        step = step_of(self, lag, input_batch, args, kwargs)
        if lag is None or step is None:
            return orig(self, input_batch, *args, **kwargs)
        if step.off:
            lag.skip(step.slots, step.query_lens)
            return no_drafts(self, input_batch.num_reqs)
        missed = lag.take(step.slots)
        if not missed.any():
            return orig(self, input_batch, *args, **kwargs)
        if int(missed.sum()) + input_batch.num_tokens <= self.max_num_tokens:
            merged = extend_batch(input_batch, Extension(missed, missed, step.query_lens), lag.tokens)
            return orig(self, merged, *args, **kwargs)
        rest, own_kwargs = pass_args(args, kwargs)
        for ext in lag_passes(missed, self.max_num_tokens):
            lag.own_passes += 1
            orig(self, extend_batch(input_batch, ext, lag.tokens), *rest, **own_kwargs)
        return orig(self, input_batch, *args, **kwargs)

    return propose


def pass_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """propose's arguments for a catch-up pass of its own: nothing rejected (every position it feeds is
    committed), depth 0 (it only writes the drafter's KV)."""
    rest = list(args)
    rest[NUM_REJECTED] = args[NUM_REJECTED].new_zeros(args[NUM_REJECTED].shape)
    own_kwargs = {k: v for k, v in kwargs.items() if k != "num_speculative_tokens"}
    own_kwargs["num_speculative_tokens"] = 0
    return rest, own_kwargs


def runner_add_requests(orig: Callable[..., Any]) -> Callable[..., Any]:
    def add_requests(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, scheduler_output, *args, **kwargs)
        speculator = getattr(self, "speculator", None)
        lag: SlotLag | None = getattr(speculator, "__dict__", {}).get(STATE)
        if lag is not None:  # a new request took these slots: its drafter runs over its whole prefill
            index = self.req_states.req_id_to_index
            for new in scheduler_output.scheduled_new_reqs:
                slot = index.get(new.req_id)
                if slot is not None:
                    lag.reset(slot)
        return out

    return add_requests


def hook_plan(version: str | None = None) -> HookPlan:
    """(class, method, wrapper factory) of every vLLM method the hook wraps on ``version`` (None: all)."""
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

    from . import off_eagle

    row = release(version)
    plan: HookPlan = [
        (GPUModelRunner, "execute_model", runner_execute_model),
        (GPUModelRunner, "add_requests", runner_add_requests),
    ]
    if row is None or row.mrv2_off_drafter:
        plan.append((StandaloneARSpeculator, "propose", speculator_propose))
    if row is None or row.mrv2_off_eagle:
        plan += off_eagle.hook_plan()
    return plan


def targets(version: str | None) -> tuple[str, ...]:
    """The vLLM names the hook wraps on ``version``."""
    from . import off_eagle

    row = release(version)
    if row is None:
        return TARGETS + off_eagle.TARGETS
    return (
        TARGETS[:2]
        + (TARGETS[2:] if row.mrv2_off_drafter else ())
        + (off_eagle.TARGETS if row.mrv2_off_eagle else ())
    )


def install(version: str | None) -> list[str]:
    """Wrap the methods where ``version`` gets the hook (idempotent); the names wrapped."""
    if not needed(version):
        return []
    return apply(hook_plan(version))
