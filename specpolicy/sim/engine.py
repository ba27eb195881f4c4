"""The simulated serving engine: continuous batching with speculative decoding, one decode step at a time.

Each iteration admits waiting requests up to ``max_running`` (one prefill step, whose cost comes from the
profile and which emits every admitted request's first token), then runs one decode step for the running
batch. Before the decode step the decider (a policy under test, or the oracle) sees a real ``StepStats``:
batch size, queue, mean context length, and the outcome of the most recent step whose result is known (the
previous step, as in SGLang's non-overlap worker, or the one before with ``feedback_lag=1``, as with overlap
or async scheduling). The chosen depth k (clamped to the profile's range) decides the step: each request emits
``1 + min(k, G)`` tokens, clipped to what it still owes, and the step costs the profile's spec step at
(batch, k, context) or its "off" step at k = 0, plus the decider's fixed per-step charge.

Per-request work is vectorised with numpy; the loop itself is Python, so the cost per simulated step is a few
tens of microseconds whatever the batch size.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from ..stats import StepStats
from .acceptance import accepted_drafts, hash_uniform, logit, logit_shift_for_mean, shifted
from .workloads import RequestStream, Scenario

__all__ = ["SimProfile", "Decider", "EngineConfig", "RunResult", "Timeline", "simulate"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class SimProfile(Protocol):
    """What the engine needs of a step-cost profile (``specpolicy.sim.profile.CostProfile`` provides it)."""

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


@dataclass(frozen=True)
class EngineConfig:
    """Engine knobs. ``speculative=False`` is the speculation-free engine (``never``): no decider."""

    max_running: int = 256
    max_prefill_tokens: int = 16384
    feedback_lag: int = 0
    decide_cost_s: float = 0.0
    jitter: float = 0.01
    speculative: bool = True
    seed: int = 0
    timeline_bin_s: float | None = None
    max_steps_cap: int = 2_000_000

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


@dataclass(frozen=True, eq=False)
class Timeline:
    """Per time bin: output tokens/s, mean depth of decode steps, mean batch size."""

    bin_s: float
    tok_s: FloatArray
    mean_depth: FloatArray
    mean_batch: FloatArray


@dataclass(frozen=True, eq=False)
class RunResult:
    """What one simulation measured. Counts and per-request arrays cover the measurement window (after the
    warm-up, up to the duration); ``decode_steps_total`` and ``wall_s`` cover the whole run."""

    window_s: float
    output_tokens: int
    tpot_ms: FloatArray
    ttft_ms: FloatArray
    completed_output_tokens: IntArray
    decode_steps: int
    decode_steps_total: int
    spec_steps: int
    prefill_steps: int
    switches: int
    clamped_steps: int
    policy_errors: int
    mean_batch: float
    mean_accept_len: float | None
    max_batch: int
    extrapolated: bool
    wall_s: float
    sim_end_s: float
    requests_created: int
    requests_completed: int
    emitted_per_request: dict[int, tuple[int, int]] = field(default_factory=dict)
    timeline: Timeline | None = None
    first_error: str | None = None

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.window_s if self.window_s > 0 else 0.0

    @property
    def spec_step_share(self) -> float:
        return self.spec_steps / self.decode_steps if self.decode_steps else 0.0

    def tpot_p(self, q: float) -> float:
        return float(np.percentile(self.tpot_ms, q)) if len(self.tpot_ms) else math.nan

    def goodput_tok_s(self, slo_tpot_ms: float) -> float:
        """Output tokens/s of completed requests whose TPOT met the SLO."""
        if not len(self.tpot_ms) or self.window_s <= 0:
            return 0.0
        ok = self.tpot_ms <= slo_tpot_ms
        return float(self.completed_output_tokens[ok].sum()) / self.window_s


class _Arrivals:
    """Feeds the waiting queue: closed loop (refill to a target) or open loop (explicit arrival times)."""

    def __init__(self, scenario: Scenario, seed: int) -> None:
        self.sc = scenario
        self.stream = RequestStream(seed, scenario.shape, scenario.acceptance)
        self.created = 0
        self.stopped = False
        loop = scenario.closed_loop
        self._cl_times = [t for t, _ in loop] if loop is not None else []
        self._cl_vals = [c for _, c in loop] if loop is not None else []
        self._cl_idx = 0

    def target(self, t: float) -> int:
        while self._cl_idx + 1 < len(self._cl_times) and self._cl_times[self._cl_idx + 1] <= t:
            self._cl_idx += 1
        return self._cl_vals[self._cl_idx]

    def next_arrival(self) -> float | None:
        reqs = self.sc.requests
        if reqs is None or self.stopped or self.created >= len(reqs):
            return None
        return float(reqs.arrival_s[self.created])

    def pull(self, t: float, in_system: int, out: deque[tuple[int, float, int, int, float]]) -> None:
        """Append (id, arrival, prompt, output, acceptance) of every request arriving by time t."""
        if self.stopped:
            return
        reqs = self.sc.requests
        if reqs is None:
            need = self.target(t) - in_system
            for _ in range(need):
                prompt, outn, acc = self.stream.get(self.created)
                out.append((self.created, t, prompt, outn, acc))
                self.created += 1
            return
        n = len(reqs)
        while self.created < n and reqs.arrival_s[self.created] <= t:
            i = self.created
            acc = float(reqs.acceptance[i])
            if math.isnan(acc):
                acc = self.stream.get(i)[2]
            out.append(
                (i, float(reqs.arrival_s[i]), int(reqs.prompt_tokens[i]), int(reqs.output_tokens[i]), acc)
            )
            self.created += 1


def simulate(
    scenario: Scenario,
    profile: SimProfile,
    decider: Decider | None,
    config: EngineConfig,
    *,
    track_requests: bool = False,
    progress: Callable[[float], None] | None = None,
) -> RunResult:
    """Run one scenario with one decider. Deterministic given (scenario, profile, decider, config)."""
    wall0 = time.perf_counter()
    if config.speculative and decider is None:
        raise ValueError("a speculative engine needs a decider (a policy or the oracle)")
    seed = config.seed
    arrivals = _Arrivals(scenario, seed)
    rng = np.random.default_rng([seed, 0x71773])
    max_k = max(0, int(profile.max_steps)) if config.speculative else 0
    lazy = config.speculative and profile.off_cost == "lazy"
    duration = scenario.duration_s
    w0 = scenario.warmup_s
    drain = scenario.drain
    phases = scenario.acceptance_phases
    beta_model = scenario.acceptance
    phase_idx = -1
    shift = 0.0

    # Running batch, one entry per request, kept compact (finished requests are removed).
    rid = np.zeros(0, dtype=np.int64)
    arr = np.zeros(0)
    first = np.zeros(0)
    base = np.zeros(0, dtype=np.int64)  # tokens a request had before `first` (1: its prefill token)
    out = np.zeros(0, dtype=np.int64)
    emitted = np.zeros(0, dtype=np.int64)
    seqlen = np.zeros(0)
    lz = np.zeros(0)
    p = np.zeros(0)
    missed = np.zeros(0, dtype=np.int64)
    waiting: deque[tuple[int, float, int, int, float]] = deque()
    if scenario.prewarmed and scenario.closed_loop is not None:
        # Start in steady state: the first max_running requests are already decoding, each at a uniformly
        # drawn point of its output; they arrived before the window, so no TTFT/TPOT is recorded for them.
        arrivals.pull(0.0, 0, waiting)
        n0 = min(len(waiting), config.max_running)
        pre = [waiting.popleft() for _ in range(n0)]
        if pre:
            frac = np.random.default_rng([seed, 0x9BE]).random(n0)
            rid = np.array([a[0] for a in pre], dtype=np.int64)
            out = np.array([a[3] for a in pre], dtype=np.int64)
            emitted = np.minimum(1 + (frac * (out - 1)).astype(np.int64), np.maximum(out - 1, 1))
            arr = np.full(n0, -math.inf)
            first = np.zeros(n0)
            base = emitted.copy()
            seqlen = np.array([a[2] for a in pre], dtype=np.float64) + emitted
            lz = logit(np.array([a[4] for a in pre], dtype=np.float64))
            p = 1.0 / (1.0 + np.exp(-lz))
            missed = np.zeros(n0, dtype=np.int64)

    tpot: list[float] = []
    ttft: list[float] = []
    done_out: list[int] = []
    per_req: dict[int, tuple[int, int]] = {}
    t = 0.0
    tokens_in_window = 0
    decode_steps = spec_steps = prefill_steps = switches = clamped = errors = 0
    batch_sum = 0
    max_batch = 0
    extrapolated = False
    extrap_seen: set[tuple[int, int]] = set()
    acc_sum = 0
    acc_n = 0
    prev_k = -1
    first_error: str | None = None
    history: deque[tuple[int, list[int] | None, float, float | None]] = deque(maxlen=2)
    decide_cost = config.decide_cost_s if config.speculative else 0.0
    jitter = config.jitter
    bin_s = config.timeline_bin_s
    tl_tok: list[float] = []
    tl_depth: list[float] = []
    tl_steps: list[float] = []
    tl_batch: list[float] = []
    last_progress = 0.0

    def tl_add(at: float, tokens: int, depth: int, batch: int, step: bool) -> None:
        assert bin_s is not None
        b = int(at / bin_s)
        while len(tl_tok) <= b:
            tl_tok.append(0.0)
            tl_depth.append(0.0)
            tl_steps.append(0.0)
            tl_batch.append(0.0)
        tl_tok[b] += tokens
        if step:
            tl_depth[b] += depth
            tl_steps[b] += 1
            tl_batch[b] += batch

    completed = 0
    len_steps = 0

    def finish(mask: npt.NDArray[np.bool_]) -> None:
        nonlocal rid, arr, first, base, out, emitted, seqlen, lz, p, missed, completed
        idx = np.flatnonzero(mask)
        in_window = t > w0 and (drain or t <= duration)
        for i in idx:
            o = int(out[i])
            if track_requests:
                per_req[int(rid[i])] = (int(emitted[i]), o)
            if in_window:
                completed += 1
                n_tok = o - int(base[i])
                if n_tok > 0:
                    # Prewarmed requests count from t=0: the tokens they emitted inside the simulation.
                    tpot.append((t - first[i]) * 1e3 / n_tok)
                    done_out.append(o if math.isfinite(arr[i]) else n_tok)
        keep = ~mask
        rid, arr, first, out, emitted = rid[keep], arr[keep], first[keep], out[keep], emitted[keep]
        base = base[keep]
        seqlen, lz, p, missed = seqlen[keep], lz[keep], p[keep], missed[keep]

    steps_total = 0
    acc_total = 0
    while True:
        steps_total += 1
        if steps_total > config.max_steps_cap:
            raise RuntimeError(f"simulation exceeded {config.max_steps_cap} iterations (runaway scenario?)")
        if progress is not None and t - last_progress >= 1.0:
            progress(t - last_progress)
            last_progress = t
        if not arrivals.stopped and t >= duration:
            arrivals.stopped = True
            if not drain:
                break
        # Phase of the acceptance population.
        if phases:
            j = phase_idx
            while j + 1 < len(phases) and phases[j + 1][0] <= t:
                j += 1
            if j != phase_idx:
                phase_idx = j
                shift = (
                    logit_shift_for_mean(beta_model.alpha, beta_model.beta, phases[j][1]) if j >= 0 else 0.0
                )
                p = shifted(lz, shift)
        arrivals.pull(t, len(rid) + len(waiting), waiting)
        n_run = len(rid)
        # Admission: one prefill step for everything that fits.
        if waiting and n_run < config.max_running:
            slots = config.max_running - n_run
            budget = config.max_prefill_tokens
            adm = [waiting.popleft()]
            prompt_tokens = adm[0][2]
            while waiting and len(adm) < slots and prompt_tokens + waiting[0][2] <= budget:
                nxt_req = waiting.popleft()
                adm.append(nxt_req)
                prompt_tokens += nxt_req[2]
            n_adm = len(adm)
            t += profile.prefill_s(prompt_tokens)
            if t > w0 and (drain or t <= duration):
                prefill_steps += 1
            new_acc = np.fromiter((a[4] for a in adm), dtype=np.float64, count=n_adm)
            new_lz = logit(new_acc)
            rid = np.concatenate([rid, np.fromiter((a[0] for a in adm), dtype=np.int64, count=n_adm)])
            arr = np.concatenate([arr, np.fromiter((a[1] for a in adm), dtype=np.float64, count=n_adm)])
            first = np.concatenate([first, np.full(n_adm, t)])
            base = np.concatenate([base, np.ones(n_adm, dtype=np.int64)])
            if drain or t <= duration:
                ttft.extend((t - a[1]) * 1e3 for a in adm if a[1] >= w0)
            out = np.concatenate([out, np.fromiter((a[3] for a in adm), dtype=np.int64, count=n_adm)])
            emitted = np.concatenate([emitted, np.ones(n_adm, dtype=np.int64)])
            seqlen = np.concatenate(
                [seqlen, np.fromiter((a[2] + 1 for a in adm), dtype=np.float64, count=n_adm)]
            )
            lz = np.concatenate([lz, new_lz])
            p = np.concatenate([p, new_acc if shift == 0.0 else shifted(new_lz, shift)])
            missed = np.concatenate([missed, np.zeros(n_adm, dtype=np.int64)])
            if t > w0 and (drain or t <= duration):
                tokens_in_window += n_adm
            if bin_s is not None:
                tl_add(t, n_adm, 0, 0, False)
            done = emitted >= out
            if done.any():
                finish(done)
            n_run = len(rid)
        if n_run == 0:
            if waiting:
                continue
            nxt = arrivals.next_arrival()
            if nxt is not None:
                t = max(t, nxt)
                continue
            if arrivals.stopped or scenario.requests is not None:
                break
            continue  # closed loop with target 0: refill next iteration
        # Decode step.
        seq_mean = float(seqlen.mean())
        remaining = out - emitted
        if config.speculative:
            assert decider is not None
            if history and (config.feedback_lag == 0 or len(history) == 2):
                last_k, last_acc, last_dt, last_mean = history[-1] if config.feedback_lag == 0 else history[0]
            else:
                last_k, last_acc, last_dt, last_mean = 0, None, None, None
            # The per-request list and its mean, as an adapter that reduces on the device would pass them.
            stats = StepStats.fast(n_run, len(waiting), seq_mean, last_k, last_acc, None, last_dt, last_mean)
            try:
                k = int(decider(stats, p, remaining, seq_mean))
            except Exception as exc:  # a broken policy is reported, not fatal: the step runs without drafts
                errors += 1
                first_error = first_error or f"{type(exc).__name__}: {exc}"
                k = 0
            if k > max_k or k < 0:
                clamped += 1
                k = min(max(k, 0), max_k)
            dt = profile.step_time_s(n_run, k, seq_mean)
            if k > 0:
                u = hash_uniform(seed, rid, emitted)
                acc = accepted_drafts(p, k, u)
                emit = np.minimum(acc + 1, remaining)
                if lazy:
                    m = missed > 0
                    n_m = int(m.sum())
                    if n_m:
                        dt += profile.catch_up_s(n_m, max(1, math.ceil(float(missed[m].mean()))), seq_mean)
                    missed[:] = 0
                acc_list: list[int] | None = acc.tolist()
                acc_total = int(acc.sum())
            else:
                emit = np.ones(n_run, dtype=np.int64)
                if lazy:
                    missed += 1
                acc_list = None
        else:
            k = 0
            dt = profile.never_step_s(n_run, seq_mean)
            emit = np.ones(n_run, dtype=np.int64)
            acc_list = None
        if jitter:
            dt *= math.exp(jitter * float(rng.standard_normal()))
        t += dt + decide_cost
        history.append((k, acc_list, dt + decide_cost, acc_total / n_run if acc_list is not None else None))
        len_steps += 1
        counted = t > w0 and (drain or t <= duration)
        if counted:
            if prev_k >= 0 and k != prev_k:
                switches += 1
            decode_steps += 1
            batch_sum += n_run
            if k > 0:
                spec_steps += 1
                acc_sum += acc_total
                acc_n += n_run
        prev_k = k
        if n_run > max_batch:
            max_batch = n_run
        ekey = (n_run, int(seq_mean) >> 5)
        if ekey not in extrap_seen:
            extrap_seen.add(ekey)
            if not extrapolated and profile.is_extrapolated(n_run, seq_mean):
                extrapolated = True
        emitted += emit
        seqlen += emit
        n_tok = int(emit.sum())
        if counted:
            tokens_in_window += n_tok
        if bin_s is not None:
            tl_add(t, n_tok, k, n_run, True)
        done = emitted >= out
        if done.any():
            finish(done)

    end = t
    window = (end if drain else duration) - w0
    # Requests still running or queued at the end: recorded for the conservation check.
    if track_requests:
        for i in range(len(rid)):
            per_req[int(rid[i])] = (int(emitted[i]), int(out[i]))
        for w in waiting:
            per_req[w[0]] = (0, w[3])
    timeline = None
    if bin_s is not None:
        steps_arr = np.maximum(np.asarray(tl_steps), 1.0)
        timeline = Timeline(
            bin_s,
            np.asarray(tl_tok) / bin_s,
            np.asarray(tl_depth) / steps_arr,
            np.asarray(tl_batch) / steps_arr,
        )
    if progress is not None:
        progress(max(0.0, min(end, duration) - last_progress))
    return RunResult(
        window_s=window,
        output_tokens=tokens_in_window,
        tpot_ms=np.asarray(tpot, dtype=np.float64),
        ttft_ms=np.asarray(ttft, dtype=np.float64),
        completed_output_tokens=np.asarray(done_out, dtype=np.int64),
        decode_steps=decode_steps,
        decode_steps_total=len_steps,
        spec_steps=spec_steps,
        prefill_steps=prefill_steps,
        switches=switches,
        clamped_steps=clamped,
        policy_errors=errors,
        mean_batch=batch_sum / decode_steps if decode_steps else 0.0,
        mean_accept_len=1.0 + acc_sum / acc_n if acc_n else None,
        max_batch=max_batch,
        extrapolated=extrapolated,
        wall_s=time.perf_counter() - wall0,
        sim_end_s=end,
        requests_created=arrivals.created,
        requests_completed=completed,
        emitted_per_request=per_req,
        timeline=timeline,
        first_error=first_error,
    )
