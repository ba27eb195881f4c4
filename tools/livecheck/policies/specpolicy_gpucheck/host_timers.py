"""Where a scheduler process spends its host time, per engine method, sampled into a JSONL file (test only).

On one GPU host an off step ran 0.3 ms slower after the engine had run speculative steps than before any,
and stayed slower; SGLang's profiler showed the same kernels, launches and GPU time both ways (its own
overhead hides a host-side difference of that size). These timers sum the wall time of each listed method
of the scheduler process (inclusive: a wrapped method inside another counts in both), and the process's
garbage collections by generation, CPU time of the whole process against the scheduler thread's own (other
threads' work competes for the GIL) and the thread count. Every ``interval_s`` (checked at each
``run_batch``) one line with the running totals and the wall-clock time is appended to the file; the
difference of two lines is what the engine did between them (``deltas``).

Installed by the dispatcher when its configuration names a file (``DispatchConfig.host_timers``), in the
process that builds the policy: SGLang's scheduler process; or, in an engine that runs no specpolicy policy
at all (a speculation-free engine, SGLang's own speculation), by SGLang's plugin loader through this
package's ``sglang.srt.plugins`` entry point when ``$SPECPOLICY_GPUCHECK_HOST_TIMERS`` names the file
(``register``). A method that does not exist in the running SGLang is listed under ``missing`` in the
first line and not timed.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["ENV", "SCHEDULER", "TARGETS", "HostTimers", "deltas", "register"]

#: the variable that names the timers' file for ``register`` (SGLang's plugin route)
ENV = "SPECPOLICY_GPUCHECK_HOST_TIMERS"

#: (module, class, method): the scheduler loop's stages, the v1 and v2 workers' step, the target forward, the
#: graph replay and its preparation (flashinfer's host-side plan runs there), sampling, batch bookkeeping,
#: and the off step's own target forward.
TARGETS: tuple[tuple[str, str, str], ...] = (
    ("sglang.srt.managers.scheduler", "Scheduler", "recv_requests"),
    ("sglang.srt.managers.scheduler", "Scheduler", "process_input_requests"),
    ("sglang.srt.managers.scheduler", "Scheduler", "get_next_batch_to_run"),
    ("sglang.srt.managers.scheduler", "Scheduler", "update_running_batch"),
    ("sglang.srt.managers.scheduler", "Scheduler", "run_batch"),
    ("sglang.srt.managers.scheduler", "Scheduler", "process_batch_result"),
    ("sglang.srt.managers.scheduler", "Scheduler", "process_batch_result_decode"),
    ("sglang.srt.speculative.eagle_worker", "EAGLEWorker", "forward_batch_generation"),
    ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2", "forward_batch_generation"),
    ("sglang.srt.managers.tp_worker", "TpModelWorker", "forward_batch_generation"),
    ("sglang.srt.model_executor.model_runner", "ModelRunner", "forward"),
    ("sglang.srt.model_executor.cuda_graph_runner", "CudaGraphRunner", "replay"),
    ("sglang.srt.model_executor.cuda_graph_runner", "CudaGraphRunner", "replay_prepare"),
    (
        "sglang.srt.layers.attention.flashinfer_backend",
        "FlashInferAttnBackend",
        "init_forward_metadata_replay_cuda_graph",
    ),
    ("sglang.srt.layers.attention.flashinfer_backend", "FlashInferIndicesUpdaterDecode", "update"),
    ("sglang.srt.layers.sampler", "Sampler", "forward"),
    ("sglang.srt.layers.logits_processor", "LogitsProcessor", "forward"),
    ("sglang.srt.managers.schedule_batch", "ScheduleBatch", "get_model_worker_batch"),
    ("sglang.srt.managers.schedule_batch", "ScheduleBatch", "filter_batch"),
    ("sglang.srt.managers.schedule_batch", "ScheduleBatch", "merge_batch"),
    ("specpolicy.adapters.sglang.legacy.decode_target", "DecodeTarget", "forward"),
    # finer: the batch's preparation for decode (the speculation-free engine's, and the off step's own
    # lengths), the adapter's per-step calls, the results sent to the detokenizer, and every device-to-host
    # read of a tensor as a list: a step's wait for the GPU happens in one of those reads
    ("sglang.srt.managers.schedule_batch", "ScheduleBatch", "prepare_for_decode"),
    ("sglang.srt.managers.scheduler", "Scheduler", "stream_output"),
    ("specpolicy.adapters.sglang.legacy.runtime", "StepRuntime", "begin_decode"),
    ("specpolicy.adapters.sglang.legacy.runtime", "StepRuntime", "on_result"),
    ("torch", "Tensor", "tolist"),
)
#: the method whose calls write the periodic line (one per scheduler loop iteration that runs a batch)
TICK = "Scheduler.run_batch"


class HostTimers:
    """Running totals per wrapped method: ``[calls, seconds]``; GC pauses by generation."""

    def __init__(
        self, path: str, interval_s: float = 0.25, targets: Sequence[tuple[str, str, str]] | None = None
    ) -> None:
        self.path = path
        self.interval_s = interval_s
        self.targets = tuple(TARGETS if targets is None else targets)
        self.totals: dict[str, list[float]] = {}
        self.gc_totals: dict[str, list[float]] = {}  # "gen<N>" -> [collections, seconds]
        self.missing: list[str] = []
        self.installed = False
        self._next = 0.0
        self._gc_t0 = 0.0
        self._thread = threading.get_ident()

    def install(self) -> bool:
        """Wrap every target that exists (once per process); start the file with what was left out."""
        if self.installed:
            return True
        for module, cls_name, method in self.targets:
            key = f"{cls_name}.{method}"
            try:
                cls = getattr(importlib.import_module(module), cls_name)
                original = cls.__dict__[method] if method in cls.__dict__ else getattr(cls, method)
            except Exception:  # noqa: BLE001 - a module that fails to import is left out, not fatal
                self.missing.append(key)
                continue
            setattr(cls, method, self._wrap(key, original))
        gc.callbacks.append(self._on_gc)
        self._thread = threading.get_ident()
        self.installed = True
        self._write({"kind": "header", "pid": os.getpid(), "missing": self.missing})
        return True

    def _wrap(self, key: str, original: Callable[..., Any]) -> Callable[..., Any]:
        slot = self.totals.setdefault(key, [0, 0.0])
        perf = time.perf_counter
        tick = self._tick if key == TICK else None

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = perf()
            try:
                return original(*args, **kwargs)
            finally:
                slot[1] += perf() - t0
                slot[0] += 1
                if tick is not None:
                    tick()

        timed.__wrapped__ = original  # type: ignore[attr-defined]
        timed.__name__ = getattr(original, "__name__", key)
        return timed

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
            return
        slot = self.gc_totals.setdefault(f"gen{info.get('generation', '?')}", [0, 0.0])
        slot[0] += 1
        slot[1] += time.perf_counter() - self._gc_t0

    def _tick(self) -> None:
        now = time.perf_counter()
        if now < self._next:
            return
        self._next = now + self.interval_s
        self._write(self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        return {
            "kind": "totals",
            "ts": time.time(),
            "t": {k: [int(v[0]), round(v[1], 6)] for k, v in self.totals.items()},
            "gc": {k: [int(v[0]), round(v[1], 6)] for k, v in self.gc_totals.items()},
            "process_cpu_s": round(time.process_time(), 6),
            "thread_cpu_s": round(time.thread_time(), 6) if threading.get_ident() == self._thread else None,
            "threads": threading.active_count(),
        }

    def _write(self, rec: dict[str, Any]) -> None:
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec) + "\n")
        except OSError:  # a diagnostic must not stop the engine
            pass


HOST_TIMERS: dict[str, HostTimers] = {}  # path -> timers: one set per process and file


def install(path: str) -> HostTimers:
    """The process's timers writing to ``path``, installed on first use."""
    timers = HOST_TIMERS.get(path)
    if timers is None:
        timers = HOST_TIMERS[path] = HostTimers(path)
    timers.install()
    return timers


#: the class whose construction installs the timers on the plugin route (module, class)
SCHEDULER = ("sglang.srt.managers.scheduler", "Scheduler")


def register() -> None:
    """SGLang's plugin hook (``sglang.srt.plugins``, run early in every engine process): when
    ``$SPECPOLICY_GPUCHECK_HOST_TIMERS`` names a file, install the timers as the scheduler is built, else
    do nothing. Built then, after every plugin's hooks are in place, they wrap those hooks (the adapter's
    off step included) as they do on the dispatcher's route; only the scheduler process builds a
    ``Scheduler``, so only it writes."""
    path = os.environ.get(ENV)
    if not path:
        return
    cls = getattr(importlib.import_module(SCHEDULER[0]), SCHEDULER[1])
    original = cls.__init__
    if getattr(original, "_host_timers_path", None) == path:
        return  # registered already in this process

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        install(path)

    __init__._host_timers_path = path  # type: ignore[attr-defined]
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__


def deltas(lines: Sequence[dict[str, Any]], t0: float, t1: float) -> dict[str, Any] | None:
    """What the engine did between wall-clock times ``t0`` and ``t1``: the totals of the last line at or
    before ``t1`` minus those of the last line at or before ``t0`` (None when no two such lines exist), with
    the seconds the two lines span."""
    rows = [r for r in lines if r.get("kind") == "totals"]
    before = [r for r in rows if r["ts"] <= t0]
    upto = [r for r in rows if r["ts"] <= t1]
    if not before or not upto or upto[-1] is before[-1]:
        return None
    a, b = before[-1], upto[-1]

    def diff(x: dict[str, list[float]], y: dict[str, list[float]]) -> dict[str, list[float]]:
        out = {}
        for k, (n, s) in y.items():
            n0, s0 = x.get(k, [0, 0.0])
            out[k] = [int(n - n0), round(s - s0, 6)]
        return out

    cpu = (b["process_cpu_s"] - a["process_cpu_s"]) if "process_cpu_s" in a else None
    thread = None
    if a.get("thread_cpu_s") is not None and b.get("thread_cpu_s") is not None:
        thread = b["thread_cpu_s"] - a["thread_cpu_s"]
    return {
        "span_s": round(b["ts"] - a["ts"], 6),
        "t": diff(a["t"], b["t"]),
        "gc": diff(a.get("gc", {}), b.get("gc", {})),
        "process_cpu_s": None if cpu is None else round(cpu, 6),
        "thread_cpu_s": None if thread is None else round(thread, 6),
        "threads": b.get("threads"),
    }
