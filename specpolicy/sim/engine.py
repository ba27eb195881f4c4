"""The simulated serving engine: continuous batching with speculative decoding, one decode step at a time.

Each iteration admits waiting requests up to ``max_running`` (one prefill step, whose cost comes from the
profile and which emits every admitted request's first token), then runs one decode step for the running
batch. Before the decode step the decider (a policy under test, or the oracle) sees a real ``StepStats``:
batch size, queue, mean context length, the ids of the running requests, and the outcome of the most recent
step whose result is known, with the id of each request it reports on (the previous step, as in SGLang's
non-overlap worker, or the one before with ``feedback_lag=1``, as with overlap or async scheduling). The
decider runs inside the same ``StepController`` as in live serving: it numbers the decisions, receives each
step's outcome and builds the next StepStats from it, and contains a failing decider the same way (the step
runs the engine's default depth, here the profile's deepest, as a vLLM engine runs its configured
``num_speculative_tokens``). The chosen depth k (clamped to the profile's range) decides the step: each
request emits ``1 + min(k, G)`` tokens, clipped to what it still owes, and the step costs the profile's
spec step at (batch, k, context) or its "off" step at k = 0, plus the decider's fixed per-step charge.

The requests live in ``batch.RunningBatch`` (one numpy array per attribute, so a step's per-request work is a
few vectorised operations whatever the batch size); ``metrics.Meter`` decides what falls in the measurement
window. This module is the loop that ties them to the profile and the decider.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from ..hints import BatchHints, BatchRule
from ..mode import MAX_NUM_STEPS, SpecMode
from ..policy import Stateful
from ..runtime.controller import StepController
from ..stats import StepStats
from .acceptance import accepted_drafts, hash_uniform
from .batch import Arrivals, Request, RunningBatch
from .metrics import Meter, RunResult, Timeline
from .scenario import Scenario

__all__ = ["SimProfile", "Decider", "DeciderSwap", "EngineConfig", "RunResult", "Timeline", "simulate"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class SimProfile(Protocol):
    """What the engine needs of a step-cost profile (``specpolicy.profiles.CostProfile`` provides it)."""

    @property
    def max_steps(self) -> int: ...

    @property
    def off_cost(self) -> Literal["catch_up", "lazy"]: ...

    def step_time_s(self, batch_size: float, num_steps: int, seq_len: float | None = None) -> float: ...

    def never_step_s(self, batch_size: float, seq_len: float | None = None) -> float: ...

    def catch_up_s(self, batch_size: float, num_tokens: int = 1, seq_len: float | None = None) -> float: ...

    def prefill_s(self, num_tokens: int) -> float: ...

    def is_extrapolated(self, batch_size: float, seq_len: float | None = None) -> bool: ...


class Decider(Protocol):
    """Chooses the depth of one decode step.

    ``p`` is every running request's TRUE per-token acceptance and ``remaining`` the tokens it still owes:
    only the oracle looks at them; policies see ``stats`` alone.
    """

    def __call__(self, stats: StepStats, p: FloatArray, remaining: IntArray, seq_len: float) -> int: ...


class DeciderSwap(NamedTuple):
    """``decider`` replaces the running one at simulated time ``at_s`` or before decision ``at_step``
    (whichever is given; ``sim.swap.PolicySwap`` is the user's side of it)."""

    decider: Decider
    at_s: float | None = None
    at_step: int | None = None


@dataclass(frozen=True)
class EngineConfig:
    """Engine knobs. ``speculative=False`` is the speculation-free engine (``never``): no decider."""

    max_running: int = 256
    max_prefill_tokens: int = 16384
    feedback_lag: int = 0
    decide_cost_s: float = 0.0
    jitter: float = 0.01
    #: extra time of the first decode step after the depth changed (live on SGLang's overlap worker the
    #: first off step after speculating took 0.5-1.3 ms longer than the next ones)
    switch_cost_s: float = 0.0
    speculative: bool = True
    seed: int = 0
    timeline_bin_s: float | None = None
    max_steps_cap: int = 2_000_000
    #: keep the policy's state at the end of the run (``RunResult.policy_state``)
    save_state: bool = False

    def __post_init__(self) -> None:
        if type(self.max_running) is not int or self.max_running < 1:
            raise ValueError(f"max_running must be an int >= 1, got {self.max_running!r}")
        if type(self.max_prefill_tokens) is not int or self.max_prefill_tokens < 1:
            raise ValueError(f"max_prefill_tokens must be an int >= 1, got {self.max_prefill_tokens!r}")
        if self.feedback_lag not in (0, 1):
            raise ValueError(
                f"feedback_lag must be 0 (non-overlap) or 1 (overlap/async), got {self.feedback_lag!r}"
            )
        if not (math.isfinite(self.decide_cost_s) and self.decide_cost_s >= 0):
            raise ValueError(f"decide cost must be a finite number >= 0, got {self.decide_cost_s!r}")
        if not (math.isfinite(self.jitter) and 0 <= self.jitter < 1):
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter!r}")
        if not (math.isfinite(self.switch_cost_s) and 0 <= self.switch_cost_s < 10):
            raise ValueError(f"switch cost must be in [0, 10) seconds, got {self.switch_cost_s!r}")


def _batch_hints(allow: IntArray) -> BatchHints | None:
    """The BatchHints of the running requests' allowances (-1: no hint), as an adapter aggregates them."""
    off = int((allow == 0).sum())
    caps = allow[allow > 0]
    if not off and not len(caps):
        return None
    if not len(caps):
        return BatchHints(off, 0, 0, 0)
    return BatchHints(off, len(caps), int(caps.min()), int(caps.max()))


class _AsPolicy:
    """A decider as the controller's policy: the engine sets the step's true acceptance, what each request
    still owes and the context length (the oracle's inputs) before every decision."""

    __slots__ = ("decider", "p", "remaining", "seq_len")

    def __init__(self, decider: Decider) -> None:
        self.decider = decider
        self.p: FloatArray = np.zeros(0)
        self.remaining: IntArray = np.zeros(0, dtype=np.int64)
        self.seq_len = 0.0

    def decide(self, stats: StepStats) -> SpecMode:
        return SpecMode.of(int(self.decider(stats, self.p, self.remaining, self.seq_len)))

    def reset(self) -> None:
        pass


def simulate(
    scenario: Scenario,
    profile: SimProfile,
    decider: Decider | None,
    config: EngineConfig,
    *,
    track_requests: bool = False,
    progress: Callable[[float], None] | None = None,
    swap: DeciderSwap | None = None,
) -> RunResult:
    """Run one scenario with one decider (replaced mid-run by ``swap``'s, through the controller's
    ``replace_policy`` as a live policy change). Deterministic given its arguments."""
    wall0 = time.perf_counter()
    if config.speculative and decider is None:
        raise ValueError("a speculative engine needs a decider (a policy or the oracle)")
    seed = config.seed
    arrivals = Arrivals(scenario, seed)
    rng = np.random.default_rng([seed, 0x71773])
    max_k = max(0, int(profile.max_steps)) if config.speculative else 0
    lazy = config.speculative and profile.off_cost == "lazy"
    duration = scenario.duration_s
    drain = scenario.drain
    phases = scenario.acceptance_phases
    beta_model = scenario.acceptance
    meter = Meter(scenario.warmup_s, duration, drain, config.timeline_bin_s)
    batch = RunningBatch()
    waiting: deque[Request] = deque()
    per_req: dict[int, tuple[int, int]] = {}
    if scenario.prewarmed and scenario.closed_loop is not None:
        # Start in steady state: the first max_running requests are already part-way through their output.
        arrivals.pull(0.0, 0, waiting)
        pre = [waiting.popleft() for _ in range(min(len(waiting), config.max_running))]
        if pre:
            batch.prewarm(pre, np.random.default_rng([seed, 0x9BE]).random(len(pre)))

    def finish(t: float) -> None:
        done = batch.emitted >= batch.out
        if not done.any():
            return
        if track_requests:
            for i in np.flatnonzero(done):
                per_req[int(batch.rid[i])] = (int(batch.emitted[i]), int(batch.out[i]))
        meter.finished(t, batch.out[done], batch.base[done], batch.first[done], batch.arrival[done])
        batch.remove(done)

    t = 0.0
    phase_idx = -1
    shift = 0.0
    clamped = max_batch = 0
    extrapolated = False
    extrap_seen: set[tuple[int, int]] = set()
    controller: StepController | None = None
    hint_mix = scenario.hints
    bound = _AsPolicy(decider) if config.speculative and decider is not None else None
    if bound is not None:
        controller = StepController(
            bound,
            allowed_steps=range(MAX_NUM_STEPS + 1),  # beyond the profile: clamped below, and counted
            default_steps=max_k,
            policy_name=type(decider).__name__,
            decide_budget_s=math.inf,  # simulated time does not depend on the host's speed
            budget_steps=0,
            hint_rule=None if hint_mix is None else BatchRule(hint_mix.off_rule, hint_mix.per_request),
        )
    # (decision number, depth, accepted drafts per request, step time, their mean, request ids) of decode
    # steps whose outcome the policy has not seen yet (``feedback_lag`` of them stay back).
    unseen: deque[tuple[int, int, list[int] | None, float, float | None, list[int]]] = deque()
    ids: list[int] = []
    decide_cost = config.decide_cost_s if config.speculative else 0.0
    switch_cost = config.switch_cost_s if config.speculative else 0.0
    k_prev = -1  # the depth of the last decode step
    swap_step: int | None = None  # the first decision of swap's decider
    swap_s: float | None = None
    last_progress = 0.0
    iterations = 0
    while True:
        iterations += 1
        if iterations > config.max_steps_cap:
            raise RuntimeError(f"simulation exceeded {config.max_steps_cap} iterations (runaway scenario?)")
        if progress is not None and t - last_progress >= 1.0:
            progress(t - last_progress)
            last_progress = t
        if not arrivals.stopped and t >= duration:
            arrivals.stopped = True
            if not drain:
                break
        if phases:  # the acceptance population's phase
            j = phase_idx
            while j + 1 < len(phases) and phases[j + 1][0] <= t:
                j += 1
            if j != phase_idx:
                phase_idx = j
                shift = beta_model.shift_for_mean(phases[j][1]) if j >= 0 else 0.0
                batch.reshift(shift)
        arrivals.pull(t, len(batch) + len(waiting), waiting)

        # Admission: one prefill step for what fits in the free slots and the prefill token budget.
        if waiting and len(batch) < config.max_running:
            slots = config.max_running - len(batch)
            adm = [waiting.popleft()]
            prompt_tokens = adm[0][2]
            while waiting and len(adm) < slots and prompt_tokens + waiting[0][2] <= config.max_prefill_tokens:
                adm.append(waiting.popleft())
                prompt_tokens += adm[-1][2]
            t += profile.prefill_s(prompt_tokens)
            batch.admit(adm, t, shift)
            meter.prefill(t, [r[1] for r in adm])
            finish(t)
        n_run = len(batch)
        if n_run == 0:
            if waiting:
                continue
            nxt = arrivals.next_arrival()
            if nxt is not None:
                t = max(t, nxt)
                continue
            if arrivals.stopped or scenario.requests is not None:
                break
            continue  # a closed loop refills on the next iteration

        # Decode step.
        seq_mean = float(batch.seqlen.mean())
        remaining = batch.out - batch.emitted
        acc_list: list[int] | None = None
        acc_total = 0
        decision = 0
        if controller is not None:
            assert bound is not None
            if swap is not None and swap_step is None:
                at_step = swap.at_step if swap.at_step is not None else 0
                if t >= swap.at_s if swap.at_s is not None else controller.step + 1 >= at_step:
                    bound = _AsPolicy(swap.decider)
                    controller.replace_policy(bound, type(swap.decider).__name__)
                    swap_step, swap_s = controller.step + 1, t
            bound.p, bound.remaining, bound.seq_len = batch.p, remaining, seq_mean
            ids = batch.rid.tolist()  # as an adapter passes the engine's request ids
            allow = None if hint_mix is None else hint_mix.allowances(seed, batch.rid)
            hints = None if allow is None else _batch_hints(allow)
            decision, k = controller.decide(controller.next_stats(n_run, len(waiting), seq_mean, ids, hints))
            if k > max_k or k < 0:
                clamped += 1
                k = min(max(k, 0), max_k)
            dt = profile.step_time_s(n_run, k, seq_mean)
            if k != k_prev:
                if k_prev >= 0:
                    dt += switch_cost
                k_prev = k
            if k > 0:
                acc = accepted_drafts(batch.p, k, hash_uniform(seed, batch.rid, batch.emitted))
                if hints is not None and hint_mix is not None and hint_mix.per_request:
                    assert allow is not None  # each request verifies at most its allowance
                    acc = np.where(allow >= 0, np.minimum(acc, allow), acc)
                emit = np.minimum(acc + 1, remaining)
                if lazy:
                    missed = batch.missed
                    m = missed > 0
                    n_m = int(m.sum())
                    if n_m:
                        dt += profile.catch_up_s(n_m, max(1, math.ceil(float(missed[m].mean()))), seq_mean)
                    missed[:] = 0
                acc_list = acc.tolist()
                acc_total = int(acc.sum())
            else:
                emit = np.ones(n_run, dtype=np.int64)
                if lazy:
                    batch.missed += 1
        else:
            k = 0
            dt = profile.never_step_s(n_run, seq_mean)
            emit = np.ones(n_run, dtype=np.int64)
        if config.jitter:
            dt *= math.exp(config.jitter * float(rng.standard_normal()))
        t += dt + decide_cost
        if controller is not None:
            # The per-request list and its mean, as an adapter that reduces on the device would pass them.
            mean = acc_total / n_run if acc_list is not None else None
            unseen.append((decision, k, acc_list, dt + decide_cost, mean, ids))
            if len(unseen) > config.feedback_lag:
                step, k_ran, acc_ran, dt_ran, mean_ran, ids_ran = unseen.popleft()
                controller.outcome(
                    step, acc_ran, dt_ran, num_steps=k_ran, mean_accepted=mean_ran, request_ids=ids_ran
                )
        max_batch = max(max_batch, n_run)
        ekey = (n_run, int(seq_mean) >> 5)
        if ekey not in extrap_seen:
            extrap_seen.add(ekey)
            extrapolated = extrapolated or profile.is_extrapolated(n_run, seq_mean)
        batch.emitted += emit
        batch.seqlen += emit
        meter.decode(t, k, n_run, int(emit.sum()), acc_total)
        finish(t)

    if controller is not None:
        controller.close()
    # Requests still running or queued at the end: recorded for the conservation check.
    if track_requests:
        for i in range(len(batch)):
            per_req[int(batch.rid[i])] = (int(batch.emitted[i]), int(batch.out[i]))
        for w in waiting:
            per_req[w[0]] = (0, w[3])
    if progress is not None:
        progress(max(0.0, min(t, duration) - last_progress))
    return RunResult(
        window_s=(t if drain else duration) - scenario.warmup_s,
        output_tokens=meter.tokens,
        tpot_ms=np.asarray(meter.tpot, dtype=np.float64),
        ttft_ms=np.asarray(meter.ttft, dtype=np.float64),
        completed_output_tokens=np.asarray(meter.done_out, dtype=np.int64),
        decode_steps=meter.decode_steps,
        decode_steps_total=meter.decode_steps_total,
        spec_steps=meter.spec_steps,
        prefill_steps=meter.prefill_steps,
        switches=meter.switches,
        clamped_steps=clamped,
        policy_errors=0 if controller is None else controller.errors,
        mean_batch=meter.batch_sum / meter.decode_steps if meter.decode_steps else 0.0,
        mean_accept_len=1.0 + meter.acc_sum / meter.acc_n if meter.acc_n else None,
        max_batch=max_batch,
        extrapolated=extrapolated,
        wall_s=time.perf_counter() - wall0,
        sim_end_s=t,
        requests_created=arrivals.created,
        requests_completed=meter.completed,
        emitted_per_request=per_req,
        timeline=meter.timeline(),
        first_error=None if controller is None else controller.first_error,
        swap_step=swap_step,
        swap_s=swap_s,
        policy_state=_final_state(decider) if config.save_state else None,
    )


def _final_state(decider: Decider | None) -> dict[str, object] | None:
    """The state of a policy decider's policy (``Stateful``) at the end of its run, else None."""
    policy = getattr(decider, "policy", None)
    return policy.state_dict() if isinstance(policy, Stateful) else None
