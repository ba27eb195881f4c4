"""StepRuntime: the per-worker state between SGLang's legacy workers and a specpolicy policy.

Pure Python (no torch, no sglang), so its logic is tested without a GPU or model. The engine hooks call three
methods: ``begin_decode`` once per decode step before drafting (returns whether to skip speculation),
``on_result`` when the accepted-draft counts of a finished step reach the CPU, and ``on_non_decode`` for
prefill/idle forwards (which break the step-time chain).

Legacy releases build one set of CUDA graphs and buffers for the launch depth, so the runtime runs a policy as
on/off at that depth: any ``SpecMode.on(k)`` runs the launch depth, ``SpecMode.off()`` runs the one-token
verify.

Each step's outcome reaches the controller in two parts that arrive in either order: its accepted drafts
(``on_result``, with the step's decision number: the same step on the v1 worker, one step late on the
overlap worker) and its time (at a later ``begin_decode``: the interval between two step starts, on the
host clock or, on the overlap worker, from CUDA events read two starts later, see ``gpu_timer``). The
runtime reports them together, so a StepStats always pairs one step's depth, acceptance, batch size and
time; a part that can no longer come (a prefill broke the chain, an event was not ready) is reported as
unknown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Literal

from ....policies.compose import OnOffAtDepth
from ....policy import Policy
from ....runtime.decision import StepObserver
from ....runtime.pairing import MAX_OPEN
from ....runtime.runtime import AdapterRuntime
from ....runtime.settings import AdapterSettings
from ....runtime.tp import DecisionSync
from ..hints import RequestHints
from .gpu_timer import GpuStepTimer

__all__ = ["StepRuntime", "Path", "make_runtime"]

_ID_SLOT = MAX_OPEN - 1

Path = Literal["v1", "v2"]

PATH_LABELS: Mapping[str, str] = {
    "v1": "v1 worker (EAGLEWorker, non-overlap scheduling)",
    "v2": "v2 worker (EAGLEWorkerV2, overlap scheduling)",
}


class StepRuntime:
    """Asks the controller once per decode step and reports each step's outcome to it.

    Args:
        runtime: the process's AdapterRuntime (its controller runs only {0, launch_depth}).
        launch_depth: the worker's ``speculative_num_steps``; every "on" step runs this depth.
        path: which worker path this runtime serves.
        clock: monotonic clock (tests pass a fake).
        gpu_timer: per-step GPU times from CUDA events (the overlap path, see ``gpu_timer``). None: the host
            clock's interval between two step starts is the earlier step's time.
    """

    __slots__ = (
        "runtime",
        "decide",
        "current_step",
        "launch_depth",
        "path",
        "num_waiting",
        "skip",
        "_clock",
        "_t_prev",
        "_acc_step",
        "_acc",
        "_timed",
        "_untimed_upto",
        "forced_steps",
        "gpu_timer",
        "wants_ids",
        "_outcome",
        "_report",
        "_next_stats",
        "_ids",
        "request_hints",
        "_hint_live",
    )

    def __init__(
        self,
        runtime: AdapterRuntime,
        *,
        launch_depth: int,
        path: Path,
        clock: Callable[[], float] = time.perf_counter,
        gpu_timer: GpuStepTimer | None = None,
    ) -> None:
        if launch_depth < 1:
            raise ValueError(f"launch_depth must be >= 1 (a speculative worker), got {launch_depth}")
        self.runtime = runtime
        self.decide = runtime.decide
        #: the number of the latest decision (decided, forced, or imposed by rank 0; 0: none yet): v2 results
        #: carry it to ``on_result``
        self.current_step = 0
        self.launch_depth = launch_depth
        self.path = path
        self.num_waiting = 0
        self.skip = False
        self._clock = clock
        self._t_prev: float | None = None
        # one part of a step's outcome waiting for the other: (step, accepted) and (step, time)
        self._acc_step = 0  # the step whose acceptance ``_acc`` waits for its time (0: none)
        self._acc: Sequence[int] | None = None
        self._timed: tuple[int, float] | None = None
        self._untimed_upto = 0  # steps up to this one will get no time (a non-decode forward broke the chain)
        self.forced_steps = 0
        self.gpu_timer = gpu_timer
        #: whether the policy reads request ids (the hooks collect them only then)
        self.wants_ids = runtime.wants_request_ids
        self._outcome = runtime.outcome
        #: reports decision ``step``'s outcome: the controller's own ``outcome`` (no call in between) unless
        #: the policy reads request ids
        self._report: Callable[[int, Sequence[int] | None, float | None], None] = (
            self._report_with_ids if self.wants_ids else self._outcome
        )
        self._next_stats = runtime.next_stats
        #: (step, request ids of its batch) of recent decisions, in slot ``step & _ID_SLOT``: each outcome
        #: is reported with the ids of the step it describes (v2 results come one step late).
        self._ids: list[tuple[int, Sequence[Hashable] | None] | None] = [None] * (_ID_SLOT + 1)
        #: the requests' own hints (``custom_params["specpolicy"]``), read at their prefill; None: off
        self.request_hints = RequestHints(runtime.hints) if runtime.settings.hints else None
        #: the live hinted requests (empty: the step pays one truthiness check)
        self._hint_live: dict[Any, int] = {} if self.request_hints is None else self.request_hints.live

    def begin_decode(
        self,
        batch_size: int,
        seq_lens_sum: int | None,
        forced_on: bool = False,
        request_ids: Sequence[Hashable] | None = None,
        reqs: Sequence[Any] | None = None,
    ) -> bool:
        """Decide the coming decode step; True means skip speculation (one-token verify). Never raises.

        ``forced_on``: the engine must speculate this step whatever the policy says (a rank-identical property
        of the batch, so no rank consults its policy); the step is recorded, the policy is not asked.
        ``request_ids``: the batch's request ids in batch order (that of the accepted counts), or None.
        ``reqs``: the batch's requests, whose hints (read at their prefill) limit the depth.
        """
        timer = self.gpu_timer
        if timer is not None:
            timed_step = self.current_step - 1  # the step that started two starts ago
            step_time = timer.start()
        else:
            timed_step = self.current_step  # the step that started at the previous start
            now = self._clock()
            prev, self._t_prev = self._t_prev, now
            step_time = None if prev is None else now - prev
        if step_time is not None and timed_step > 0:
            if self._acc_step == timed_step:  # the common case: the acceptance came first
                self._acc_step = 0
                self._report(timed_step, self._acc, step_time)
            else:
                self._hold_time(timed_step, step_time)
        elif 0 < self._acc_step <= timed_step:  # its time, had there been one, came just now
            self._flush_accepted()
        mean_len = None if not batch_size or seq_lens_sum is None else seq_lens_sum / batch_size
        hints = self.request_hints.of_batch(reqs) if self._hint_live else None  # type: ignore[union-attr]
        stats = self._next_stats(batch_size, self.num_waiting, mean_len, request_ids, hints)
        if forced_on:
            step = self.runtime.force(stats, self.launch_depth)[0]
            self.forced_steps += 1
            skip = False
        else:
            step, k = self.decide(stats)
            skip = k == 0
        self.current_step = step
        if self.wants_ids:
            self._ids[step & _ID_SLOT] = (step, request_ids)
        self.skip = skip
        return skip

    def end_decode(self) -> None:
        """The step's forward returned (the flag only lives for the duration of one forward)."""
        self.skip = False

    @property
    def decode_steps(self) -> int:
        """Decode steps begun: each is one controller decision (decided, forced, or imposed by rank 0), and
        decisions are numbered from 1."""
        return self.current_step

    @property
    def skipped_steps(self) -> int:
        """Decode steps that ran without speculation: the controller's count of depth-0 decisions."""
        return self.runtime.controller.steps_by_depth.get(0, 0)

    def on_result(self, step: int, accepted_per_req: Sequence[int] | None) -> None:
        """Accepted drafts per request of the finished step ``step`` (v1: the step just run; v2: one late)."""
        timed = self._timed
        if timed is not None and timed[0] == step:
            self._timed = None
            self._report(step, accepted_per_req, timed[1])
            return
        if step <= self._untimed_upto:  # no time will come for it
            self._report(step, accepted_per_req, None)
            return
        if self._acc_step:
            self._flush_accepted()
        self._acc_step = step
        self._acc = accepted_per_req

    def _flush_accepted(self) -> None:
        """The waiting acceptance without a time: none will come for it."""
        step, self._acc_step = self._acc_step, 0
        self._report(step, self._acc, None)

    def _report_with_ids(self, step: int, accepted: Sequence[int] | None, step_time_s: float | None) -> None:
        """Decision ``step``'s outcome to the controller with the request ids of its batch."""
        self._outcome(step, accepted, step_time_s, None, None, None, self._ids_of(step))

    def _ids_of(self, step: int) -> Sequence[Hashable] | None:
        """The request ids recorded for decision ``step`` (None when unknown or overwritten)."""
        item = self._ids[step & _ID_SLOT]
        return item[1] if item is not None and item[0] == step else None

    def _hold_time(self, step: int, step_time_s: float) -> None:
        """A step's time that came before its acceptance (the overlap worker's host clock); an acceptance
        of an earlier step still waiting will get no time."""
        if 0 < self._acc_step < step:
            self._flush_accepted()
        old = self._timed
        if old is not None:  # its acceptance never came: the time alone
            self._outcome(old[0], None, old[1])
        self._timed = (step, step_time_s)

    def on_non_decode(self, reqs: Sequence[Any] | None = None) -> None:
        """A prefill or idle forward ran: the next decode step's wall time would include it, so drop it.
        ``reqs``: the requests it prefilled, whose hints are read now."""
        if reqs and self.request_hints is not None:
            self.request_hints.on_extend(reqs)
        self._t_prev = None
        self._untimed_upto = self.current_step
        if self.gpu_timer is not None:
            self.gpu_timer.reset()
        if self._acc_step:
            self._flush_accepted()


def make_runtime(
    settings: AdapterSettings,
    *,
    launch_depth: int,
    path: Path,
    engine_version: str = "unknown",
    rank: int = 0,
    world_size: int = 1,
    sync_factory: Callable[[], DecisionSync] | None = None,
    header: Mapping[str, Any] | None = None,
    engine_counts: Callable[[], Mapping[str, int]] | None = None,
    gpu_timer: GpuStepTimer | None = None,
    policy: Policy | None = None,
    observers: Sequence[StepObserver] = (),
    model: str | None = None,
    drafter: str | None = None,
) -> StepRuntime:
    """The legacy assembly: a controller that runs exactly {0, launch_depth} (every policy depth maps onto
    them through ``OnOffAtDepth``) and falls back to the launch depth. ``policy`` replaces the one the
    settings name, ``observers`` watch the records beside the trace and metrics (tests)."""
    if type(launch_depth) is not int or launch_depth < 1:
        raise ValueError(f"launch_depth must be an int >= 1 (a speculative worker), got {launch_depth!r}")
    art = AdapterRuntime(
        settings,
        engine="sglang",
        engine_version=engine_version,
        path=PATH_LABELS[path],
        allowed_steps=(0, launch_depth),
        default_steps=launch_depth,
        rank=rank,
        world_size=world_size,
        sync_factory=sync_factory,
        header={"launch_depth": launch_depth, "legacy_on_off": True, **(header or {})},
        engine_counts=engine_counts,
        wrap=lambda p: OnOffAtDepth(p, launch_depth),
        policy=policy,
        observers=observers,
        model=model,
        drafter=drafter,
    )
    return StepRuntime(art, launch_depth=launch_depth, path=path, gpu_timer=gpu_timer)
