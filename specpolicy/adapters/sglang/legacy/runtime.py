"""StepRuntime: the per-worker state between SGLang's legacy workers and a specpolicy policy.

Pure Python (no torch, no sglang), so its logic is tested without a GPU or model. The engine hooks call three
methods: ``begin_decode`` once per decode step before drafting (returns whether to skip speculation),
``on_result`` when the accepted-draft counts of a finished step reach the CPU, and ``on_non_decode`` for
prefill/idle forwards (which break the step-time chain).

Legacy releases build one set of CUDA graphs and buffers for the launch depth, so the runtime runs a policy as
on/off at that depth: any ``SpecMode.on(k)`` runs the launch depth, ``SpecMode.off()`` runs the one-token
verify.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from ....policies.compose import OnOffAtDepth
from ....policy import Policy
from ....stats import StepStats
from ...controller import StepController, StepObserver
from .gpu_timer import GpuStepTimer

__all__ = ["OnOffAtDepth", "StepRuntime", "Path"]

Path = Literal["v1", "v2"]

PATH_LABELS: Mapping[str, str] = {
    "v1": "v1 worker (EAGLEWorker, non-overlap scheduling)",
    "v2": "v2 worker (EAGLEWorkerV2, overlap scheduling)",
}


class StepRuntime:
    """Builds StepStats from CPU-side engine data, asks the controller once per step, remembers the outcome.

    Args:
        decide: the rank-agreed decision function (``StepController.decide`` or ``AgreedDecider.decide``).
        controller: the controller behind ``decide`` (for step-time reports and counters).
        launch_depth: the worker's ``speculative_num_steps``; every "on" step runs this depth.
        path: which worker path this runtime serves.
        clock: monotonic clock (tests pass a fake).
        gpu_timer: per-step GPU times from CUDA events (the overlap path, see ``gpu_timer``); each step's
            time is then reported one step late, with the acceptance of the same step. None: the wall time
            between consecutive decode steps (the non-overlap path, whose steps end with a sync).
    """

    __slots__ = (
        "decide",
        "controller",
        "launch_depth",
        "path",
        "num_waiting",
        "skip",
        "_clock",
        "_last_depth",
        "_last_accepted",
        "_t_prev",
        "_t_last_interval",
        "skipped_steps",
        "decode_steps",
        "forced_steps",
        "gpu_timer",
    )

    def __init__(
        self,
        decide: Callable[[StepStats], int],
        controller: StepController,
        *,
        launch_depth: int,
        path: Path,
        clock: Callable[[], float] = time.perf_counter,
        gpu_timer: GpuStepTimer | None = None,
    ) -> None:
        if launch_depth < 1:
            raise ValueError(f"launch_depth must be >= 1 (a speculative worker), got {launch_depth}")
        self.decide = decide
        self.controller = controller
        self.launch_depth = launch_depth
        self.path = path
        self.num_waiting = 0
        self.skip = False
        self._clock = clock
        self._last_depth = 0
        self._last_accepted: Sequence[int] | None = None
        self._t_prev: float | None = None
        self._t_last_interval: float | None = None
        self.skipped_steps = 0
        self.decode_steps = 0
        self.forced_steps = 0
        self.gpu_timer = gpu_timer

    def begin_decode(self, batch_size: int, seq_lens_sum: int | None, forced_on: bool = False) -> bool:
        """Decide the coming decode step; True means skip speculation (one-token verify). Never raises.

        ``forced_on``: the engine must speculate this step whatever the policy says (a rank-identical property
        of the batch, so no rank consults its policy); the step is recorded, the policy is not asked.
        """
        timer = self.gpu_timer
        if timer is not None:
            # the time of the step before the previous one: the step whose acceptance just arrived
            step_time = timer.start()
            if step_time is not None and self.controller.step >= 2:
                self.controller.step_time(step_time, step=self.controller.step - 1)
        else:
            now = self._clock()
            prev = self._t_prev
            step_time = None if prev is None else now - prev
            self._t_prev = now
            if prev is not None:
                self.controller.step_time(step_time)
        mean_len = None if not batch_size or seq_lens_sum is None else seq_lens_sum / batch_size
        depth = self._last_depth
        stats = StepStats.fast(
            batch_size,
            self.num_waiting,
            mean_len,
            depth,
            self._last_accepted if depth > 0 else None,
            None,
            step_time,
        )
        if forced_on:
            self.controller.force(stats, self.launch_depth)
            self.forced_steps += 1
            skip = False
        else:
            skip = self.decide(stats) == 0
        self.skip = skip
        self.decode_steps += 1
        self.skipped_steps += skip
        return skip

    def end_decode(self) -> None:
        """The step's forward returned (the flag only lives for the duration of one forward)."""
        self.skip = False

    def on_result(self, executed_depth: int, accepted_per_req: Sequence[int] | None) -> None:
        """Accepted drafts per request of a finished step (v1: same step; v2: one step late)."""
        self._last_depth = executed_depth
        self._last_accepted = accepted_per_req if executed_depth > 0 else None

    def on_non_decode(self) -> None:
        """A prefill or idle forward ran: the next decode step's wall time would include it, so drop it."""
        self._t_prev = None
        if self.gpu_timer is not None:
            self.gpu_timer.reset()


def make_runtime(
    policy: Policy,
    *,
    launch_depth: int,
    path: Path,
    rank: int = 0,
    observers: Sequence[StepObserver] = (),
    policy_name: str = "",
    decide_wrapper: Callable[[StepController], Callable[[StepStats], int]] | None = None,
) -> StepRuntime:
    """A runtime whose controller allows exactly {0, launch_depth} and falls back to the launch depth."""
    if type(launch_depth) is not int or launch_depth < 1:
        raise ValueError(f"launch_depth must be an int >= 1 (a speculative worker), got {launch_depth!r}")
    controller = StepController(
        OnOffAtDepth(policy, launch_depth),
        allowed_steps=(0, launch_depth),
        default_steps=launch_depth,
        rank=rank,
        observers=observers,
        policy_name=policy_name or type(policy).__name__,
    )
    decide = controller.decide if decide_wrapper is None else decide_wrapper(controller)
    return StepRuntime(decide, controller, launch_depth=launch_depth, path=path)
