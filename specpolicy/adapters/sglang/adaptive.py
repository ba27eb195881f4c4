"""The policy bridge to SGLang's ``AdaptiveController`` (0.5.13+), and the settings it may carry.

``SpecPolicyParams`` has the members of SGLang's ``AdaptiveSpecPolicy`` (a Protocol from 0.5.20; the same
members the controller calls on 0.5.13 to 0.5.19), backed by an ``AdapterRuntime``. The v2 route
(``v2/install.py``) puts it into the controller's params slot, so the controller builds runtime states for
the policy's speculative depths only, and calls it from its own wrappers of the worker's decision and
feedback points; depth 0 is the v2 route's decode step, never a controller state.

Where each StepStats field comes from (all CPU data the engine already has; nothing adds a GPU sync):

* batch size: ``get_steps_for_batch(batch_size)``, called once per decode round before drafting; the
  decision is applied there.
* accepted drafts: ``on_verify_complete(num_correct_drafts_per_req, batch_size)``, fed by the scheduler after
  its asynchronous copy of ``accept_lens``. With overlap scheduling it arrives one round late, so the
  depth each round ran with is kept in a FIFO and matched to its feedback (``last_num_steps`` is that round's
  depth).
* waiting queue and context lengths: ``note_batch``, called from the v2 route's wrapper of
  ``Scheduler.run_batch`` (same thread, just before the worker runs the batch), reads ``len(waiting_queue)``
  and, every ``SEQ_LEN_EVERY`` rounds or when the batch size changes, the mean of ``req.seqlen`` (an
  O(batch) Python sum, so it is sampled, not done every round).
* step time (``last_step_time_s``): the interval between the feedback of the previous decode round and the
  feedback of the round it is reported with (``time.perf_counter`` in ``on_verify_complete``). SGLang calls
  that right after its own wait for the round's results, so the interval runs from the end of the round
  before to the end of this round: with overlap and a busy GPU, the round's own GPU time; without overlap,
  its cycle time (GPU plus the scheduler's CPU work). Measured where the feedback is, time, depth and
  accepted drafts always describe the same round (the bridge reports them together, with the round's
  decision number, and the controller builds the next StepStats from them). The interval between decisions
  would not: with overlap the decision for round N+1 waits on round N's verify when an attention backend
  needs CPU sequence lengths (the scheduler's ``resolve_seq_lens_cpu``; e.g. FlashInfer) and only on round
  N-1's results otherwise (e.g. FA3, Triton), so the round it times depends on the backend. None for the
  first round after a prefill (its interval holds the prefill) and when the previous round's feedback never
  came. No CUDA event or sync is added. The same interval is the trace's ``step_time_s`` for that round.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Hashable, Mapping
from typing import Any

from ...hints import BatchHints
from ...runtime.runtime import AdapterRuntime
from ...runtime.settings import AdapterSettings
from .hints import RequestHints
from .request_ids import request_ids

__all__ = [
    "SpecPolicyParams",
    "CONFIG_KEY",
    "settings_from_adaptive_config",
    "resolve_settings",
    "tp_info",
    "overlap_on",
]

log = logging.getLogger("specpolicy.sglang")
_clock = time.perf_counter  # module-level so tests can drive a simulated clock

#: Key under which specpolicy settings may ride in the ``--speculative-adaptive-config`` JSON (SGLang ignores
#: non-integer top-level keys for routing).
CONFIG_KEY = "specpolicy"
SEQ_LEN_EVERY = 16


class SpecPolicyParams:
    """An ``AdaptiveSpecPolicy`` whose decisions come from a specpolicy policy (through an AdapterRuntime)."""

    def __init__(
        self, runtime: AdapterRuntime, initial_steps: int, engine_candidates: list[int] | None = None
    ) -> None:
        self.runtime = runtime
        self._decide = runtime.decide
        self._next_stats = runtime.next_stats
        self._outcome = runtime.outcome
        # the depths SGLang builds runtime states for: the policy's, unless the adapter runs some itself
        # (the 0.5.13+ adapter's decode step serves depth 0)
        steps = runtime.candidate_steps if engine_candidates is None else engine_candidates
        self._candidates = sorted(set(steps) | {initial_steps})
        self._cuda_graph_bs: list[int] | None = None
        # (controller step, batch size, a non-decode batch ran just before it) of each round decided and
        # not yet reported: SGLang's feedback names only the batch size, so this says which decision it is
        self._inflight: deque[tuple[int, int, bool, list[Hashable] | None]] = deque(maxlen=8)
        self._fed_t: float | None = None  # when the latest feedback came (None: the next interval is unknown)
        self._gap = True
        self.num_waiting = 0
        self.mean_seq_len: float | None = None
        #: the request ids of the decode batch about to run (None: unknown)
        self.request_ids: list[Hashable] | None = None
        self._wants_ids = runtime.wants_request_ids
        self._seq_bs = -1
        self._seq_age = 0
        #: the requests' own hints (``custom_params["specpolicy"]``), read at their prefill; None: off
        self.request_hints = RequestHints(runtime.hints) if runtime.settings.hints else None
        #: the hints of the decode batch about to run (None: none of its requests has one)
        self.hints: BatchHints | None = None
        self._hints_n = 0
        #: the live hinted requests (empty: the step pays one truthiness check)
        self._hint_live: dict[Any, int] = {} if self.request_hints is None else self.request_hints.live

    # -- AdaptiveSpecPolicy --
    @property
    def candidate_steps(self) -> list[int]:
        return self._candidates

    def set_cuda_graph_bs(self, cuda_graph_bs: list[int] | None) -> None:
        self._cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    def cuda_graph_bs_for_step(self, step: int) -> list[int] | None:
        # Any depth may be chosen at any batch size, so every candidate gets every captured batch size.
        return None if self._cuda_graph_bs is None else list(self._cuda_graph_bs)

    def get_steps_for_batch(self, batch_size: int) -> int:
        gap = self._gap
        self._gap = False
        ids = self.request_ids
        if ids is not None:
            self.request_ids = None
            if len(ids) != batch_size:
                ids = None  # not the batch noted: no ids rather than another batch's
        hints = self.hints
        if hints is not None:
            self.hints = None
            if self._hints_n != batch_size:
                hints = None  # not the batch noted
        step, k = self._decide(self._next_stats(batch_size, self.num_waiting, self.mean_seq_len, ids, hints))
        self._inflight.append((step, batch_size, gap, ids))
        return k

    def on_verify_complete(self, num_correct_drafts_per_req: list[int], batch_size: int) -> int | None:
        now = _clock()
        n = len(num_correct_drafts_per_req)
        inflight = self._inflight
        prev = self._fed_t
        while inflight:
            step, bs, gap, ids = inflight.popleft()
            if bs == n:
                self._fed_t = now
                round_s = None if (prev is None or gap) else now - prev
                if ids is None:
                    self._outcome(step, num_correct_drafts_per_req if n else None, round_s)
                elif not n:
                    self._outcome(step, None, round_s)
                else:
                    self._outcome(step, num_correct_drafts_per_req, round_s, None, None, None, ids)
                return None  # the depth is chosen in get_steps_for_batch, before drafting
            prev = None  # a round whose result never came back lies inside the interval
        # Feedback that matches no recorded round (a round whose result never came back): say nothing rather
        # than attribute it to the wrong depth.
        self._fed_t = None
        self.runtime.forget()
        return None

    # -- fed by the Scheduler.run_batch hook --
    def note_batch(self, scheduler: Any, batch: Any) -> None:
        """Record the waiting queue and (sampled) context lengths of the batch about to run."""
        try:
            mode = batch.forward_mode
            if not mode.is_decode():
                self._gap = True
                self.request_ids = None
                self.hints = None
                rh = self.request_hints
                if rh is not None:
                    rh.on_extend(batch.reqs)
                return
            self.num_waiting = len(scheduler.waiting_queue)
            reqs = batch.reqs
            n = len(reqs)
            self.request_ids = request_ids(reqs) if self._wants_ids else None
            if self._hint_live:
                self.hints = self.request_hints.of_batch(reqs)  # type: ignore[union-attr]
                self._hints_n = n
            else:
                self.hints = None
            self._seq_age += 1
            if n != self._seq_bs or self._seq_age >= SEQ_LEN_EVERY:
                self._seq_bs = n
                self._seq_age = 0
                self.mean_seq_len = (sum(r.seqlen for r in reqs) / n) if n else None
        except Exception:  # a hook on the scheduler's step must never raise; these inputs are optional
            self._gap = True
            self.mean_seq_len = None
            self.request_ids = None
            self.hints = None

    def close(self) -> None:
        self.runtime.close()


# ---------------------------------------------------------------------------------------------------------
# Settings and the process's place (read when the v2 route attaches to a worker)


def settings_from_adaptive_config(cfg_path: str | None) -> AdapterSettings | None:
    """specpolicy settings carried in the adaptive config JSON under ``"specpolicy"``, or None."""
    if not cfg_path:
        return None
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None  # SGLang reports its own config errors
    value = data.get(CONFIG_KEY) if isinstance(data, dict) else None
    if value is None:
        return None
    if isinstance(value, Mapping) and "policy" in value:
        return AdapterSettings.from_mapping(value)
    return AdapterSettings.build(value)


def resolve_settings(cfg_path: str | None) -> AdapterSettings | None:
    """Environment first (the launcher sets it), then the adaptive config JSON."""
    return AdapterSettings.from_env() or settings_from_adaptive_config(cfg_path)


def tp_info() -> tuple[int, int, Any]:
    """(rank label, TP world size, TP CPU group) of this scheduler process."""
    try:
        from sglang.srt.runtime_context import get_parallel

        group = get_parallel().tp_group
        tp_rank, tp_size = int(group.rank_in_group), int(group.world_size)
        cpu_group = group.cpu_group
    except Exception:
        # Unknown layout: assume every process of the job is a rank that must agree (local mode then hides
        # timing; broadcast mode refuses for lack of a group) rather than risk ranks diverging.
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank()), int(dist.get_world_size()), None
        except Exception:
            pass
        return 0, 1, None
    try:
        dp_rank = int(get_parallel().dp_rank or 0)
    except Exception:
        dp_rank = 0
    return dp_rank * tp_size + tp_rank, tp_size, cpu_group


def overlap_on(worker: Any) -> bool:
    try:
        from sglang.srt.runtime_context import get_schedule

        return not bool(get_schedule().disable_overlap_schedule)
    except Exception:
        return not bool(getattr(getattr(worker, "server_args", None), "disable_overlap_schedule", False))
