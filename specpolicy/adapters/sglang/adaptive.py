"""SGLang 0.5.20+ (tested: 0.5.23): a specpolicy policy drives SGLang's own ``AdaptiveController``.

SGLang already owns the hard part here: one prebuilt runtime state (draft/verify/extend backends and CUDA
graphs)
per candidate depth, swapped between rounds, and a native steps=0 "trivial verify" that keeps the draft
model's
KV cache and EAGLE-3 hidden states in step. Its controller accepts any object with the ``AdaptiveSpecPolicy``
members; ``SpecPolicyParams`` is that object, backed by an ``AdapterRuntime``.

Where each StepStats field comes from (all CPU data the engine already has; nothing adds a GPU sync):

* batch size: ``get_steps_for_batch(batch_size)``, called by ``activate_step_by_batch`` on every decode
  round before drafting; the decision is applied there.
* accepted drafts: ``on_verify_complete(num_correct_drafts_per_req, batch_size)``, fed by the scheduler after
  its asynchronous copy of ``accept_lens``. With overlap scheduling it arrives one round late, so the
  depth each round ran with is kept in a FIFO and matched to its feedback (``last_num_steps`` is that round's
  depth).
* waiting queue and context lengths: a BEFORE hook on ``Scheduler.run_batch`` (same thread, just before the
  worker runs the batch) reads ``len(waiting_queue)`` and, every ``SEQ_LEN_EVERY`` rounds or when the batch
  size changes, the mean of ``req.seqlen`` (an O(batch) Python sum, so it is sampled, not done every round).
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

from ..runtime import AdapterInstallError, AdapterRuntime, check_candidate_steps
from ..settings import AdapterSettings
from ..tp import BroadcastSync
from .request_ids import request_ids

__all__ = [
    "SpecPolicyParams",
    "CONFIG_KEY",
    "HOOK_TARGETS",
    "install",
    "settings_from_adaptive_config",
    "active_params",
]

log = logging.getLogger("specpolicy.sglang")
_clock = time.perf_counter  # module-level so tests can drive a simulated clock

#: Key under which specpolicy settings may ride in the ``--speculative-adaptive-config`` JSON (SGLang ignores
#: non-integer top-level keys for routing).
CONFIG_KEY = "specpolicy"
SEQ_LEN_EVERY = 16

WORKER_INIT = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.__init__"
RUN_BATCH = "sglang.srt.managers.scheduler.Scheduler.run_batch"
#: Every engine attribute the adapter hooks or calls, for the contract tests and ``specpolicy doctor``.
HOOK_TARGETS: tuple[str, ...] = (
    WORKER_INIT,
    RUN_BATCH,
    "sglang.srt.speculative.adaptive_runtime_state.AdaptiveController.activate_step_by_batch",
    "sglang.srt.speculative.adaptive_runtime_state.AdaptiveController.on_verify_complete",
    "sglang.srt.speculative.adaptive_spec_params.resolve_candidate_steps_from_config",
    "sglang.srt.speculative.adaptive_spec_params.adaptive_unsupported_reason",
    "sglang.srt.plugins.hook_registry.HookRegistry.register",
)

_ACTIVE: SpecPolicyParams | None = None


def active_params() -> SpecPolicyParams | None:
    """The bridge installed in this process, if any."""
    return _ACTIVE


class SpecPolicyParams:
    """An ``AdaptiveSpecPolicy`` whose decisions come from a specpolicy policy (through an AdapterRuntime)."""

    def __init__(
        self, runtime: AdapterRuntime, initial_steps: int, engine_candidates: list[int] | None = None
    ) -> None:
        self.runtime = runtime
        self._controller = controller = runtime.controller
        self._decide = runtime.decide
        self._next_stats = controller.next_stats
        self._outcome = controller.outcome
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
        k = self._decide(self._next_stats(batch_size, self.num_waiting, self.mean_seq_len, ids))
        self._inflight.append((self._controller.step, batch_size, gap, ids))
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
        self.runtime.controller.forget()
        return None

    # -- fed by the Scheduler.run_batch hook --
    def note_batch(self, scheduler: Any, batch: Any) -> None:
        """Record the waiting queue and (sampled) context lengths of the batch about to run."""
        try:
            mode = batch.forward_mode
            if not mode.is_decode():
                self._gap = True
                self.request_ids = None
                return
            self.num_waiting = len(scheduler.waiting_queue)
            reqs = batch.reqs
            n = len(reqs)
            self.request_ids = request_ids(reqs) if self._wants_ids else None
            self._seq_age += 1
            if n != self._seq_bs or self._seq_age >= SEQ_LEN_EVERY:
                self._seq_bs = n
                self._seq_age = 0
                self.mean_seq_len = (sum(r.seqlen for r in reqs) / n) if n else None
        except Exception:  # a hook on the scheduler's step must never raise; these inputs are optional
            self._gap = True
            self.mean_seq_len = None
            self.request_ids = None

    def close(self) -> None:
        self.runtime.close()


# ---------------------------------------------------------------------------------------------------------
# Installation (runs in every process where SGLang loads plugins; the hooks act only in scheduler processes)


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


def _after_worker_init(result: Any, worker: Any, *args: Any, **kwargs: Any) -> None:
    from sglang.srt.runtime_context import get_spec

    spec = get_spec()
    cfg_path = getattr(spec, "speculative_adaptive_config", None)
    settings = resolve_settings(cfg_path)
    if settings is not None:
        attach(worker, settings, cfg_path, adaptive_on=bool(getattr(spec, "speculative_adaptive", False)))
    return None


def attach(
    worker: Any, settings: AdapterSettings, cfg_path: str | None, *, adaptive_on: bool = True
) -> SpecPolicyParams | None:
    """Put the policy into ``worker.adaptive_controller`` (an EAGLEWorkerV2 right after its ``__init__``).

    Refuses (AdapterInstallError, or an error log with ``on_install_failure="warn"``) when SGLang runs no
    adaptive controller or when the policy may choose a depth outside the configured candidate steps.
    """
    global _ACTIVE
    controller = getattr(worker, "adaptive_controller", None)
    if controller is None:
        if not getattr(worker, "_hosts_draft", True):
            return None  # pipeline parallelism: only the last stage drafts and decides
        _refuse_or_warn(settings, _why_no_controller(worker, adaptive_on))
        return None
    from sglang.srt.speculative.adaptive_spec_params import resolve_candidate_steps_from_config

    from .versions import installed_version, worker_path

    version = installed_version() or "unknown"
    engine_steps = resolve_candidate_steps_from_config(cfg_path)
    initial = int(worker.speculative_num_steps)
    try:
        check_candidate_steps(
            settings.policy.candidate_steps(),
            engine_steps,
            where="the candidate steps of --speculative-adaptive-config",
        )
        rank, world, cpu_group = tp_info()
        runtime = AdapterRuntime(
            settings,
            engine="sglang",
            engine_version=version,
            path=worker_path(version, overlap_on(worker)),
            allowed_steps=sorted(set(settings.policy.candidate_steps()) | {initial}),
            default_steps=initial,
            rank=rank,
            world_size=world,
            sync_factory=(lambda: BroadcastSync(cpu_group)) if cpu_group is not None else None,
            header={"adaptive_config": cfg_path, "engine_candidate_steps": engine_steps},
        )
    except AdapterInstallError as exc:
        _refuse_or_warn(settings, str(exc))
        return None
    params = SpecPolicyParams(runtime, initial)
    controller.params = params
    _ACTIVE = params
    line = runtime.startup_line()
    if rank == 0:
        log.info(line)
    else:
        log.debug(line)
    return params


def _before_run_batch(scheduler: Any, batch: Any = None, *args: Any, **kwargs: Any) -> None:
    params = _ACTIVE
    if params is not None:
        batch = kwargs.get("batch", batch)
    if params is not None and batch is not None:
        params.note_batch(scheduler, batch)
    return None


def overlap_on(worker: Any) -> bool:
    try:
        from sglang.srt.runtime_context import get_schedule

        return not bool(get_schedule().disable_overlap_schedule)
    except Exception:
        return not bool(getattr(getattr(worker, "server_args", None), "disable_overlap_schedule", False))


def _why_no_controller(worker: Any, adaptive_on: bool) -> str:
    if not adaptive_on:
        reason = "SGLang's adaptive speculation is off"
        try:
            from sglang.srt.speculative.adaptive_spec_params import adaptive_unsupported_reason

            why = adaptive_unsupported_reason(worker.server_args)
            if why:
                reason = f"SGLang disabled its adaptive speculation: {why}"
        except Exception:
            pass
        return (
            f"{reason}. On SGLang 0.5.20+ specpolicy drives SGLang's AdaptiveController, so the server needs "
            "--speculative-adaptive and a --speculative-adaptive-config whose candidate steps include the "
            "policy's (specpolicy-sglang adds both when they are missing)"
        )
    return "the speculative worker has no adaptive controller"


def _refuse_or_warn(settings: AdapterSettings, reason: str) -> None:
    if settings.on_install_failure == "refuse":
        raise AdapterInstallError(f"specpolicy cannot run the policy: {reason}")
    log.error("specpolicy: NOT ACTIVE, the server runs without the policy: %s", reason)


def install() -> None:
    """Register the hooks with SGLang's HookRegistry (applied by ``load_plugins``)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(WORKER_INIT, _after_worker_init, HookType.AFTER)
    HookRegistry.register(RUN_BATCH, _before_run_batch, HookType.BEFORE)
