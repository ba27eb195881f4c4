"""specpolicy_gpucheck.host_timers: the scheduler's host time per engine method, sampled into a file."""

from __future__ import annotations

import gc
import json
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from specpolicy_gpucheck import DispatchConfig, DispatchPolicy
from specpolicy_gpucheck import host_timers as ht


@pytest.fixture
def engine_module() -> Iterator[types.ModuleType]:
    """A stand-in scheduler module: ``run_batch`` (the tick) calls ``forward``, which sleeps."""
    mod = types.ModuleType("fake_engine_for_timers")

    class Worker:
        def forward(self, s: float) -> str:
            time.sleep(s)
            return "out"

    class Scheduler:
        def __init__(self) -> None:
            self.worker = Worker()

        def run_batch(self, s: float) -> str:
            return self.worker.forward(s)

    mod.Worker, mod.Scheduler = Worker, Scheduler  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_wrapped_methods_are_timed_inclusively_and_missing_ones_listed(
    engine_module: types.ModuleType, tmp_path: Path
) -> None:
    name = engine_module.__name__
    path = tmp_path / "t.jsonl"
    timers = ht.HostTimers(
        str(path),
        interval_s=0.0,
        targets=[(name, "Scheduler", "run_batch"), (name, "Worker", "forward"), (name, "Worker", "gone")],
    )
    timers.install()
    try:
        sched = engine_module.Scheduler()
        assert sched.run_batch(0.01) == "out"  # the wrapper returns what the method returns
        sched.run_batch(0.02)
        t = timers.totals
        assert t["Worker.forward"][0] == 2 and t["Scheduler.run_batch"][0] == 2
        assert t["Scheduler.run_batch"][1] >= t["Worker.forward"][1] >= 0.03
        lines = _lines(path)
        assert lines[0] == {"kind": "header", "pid": lines[0]["pid"], "missing": ["Worker.gone"]}
        assert [r["kind"] for r in lines[1:]] == ["totals", "totals"]  # one per tick (interval 0)
        assert lines[-1]["t"]["Worker.forward"][0] == 2  # type: ignore[index]
    finally:
        gc.callbacks.remove(timers._on_gc)


def test_collections_are_counted_by_generation(tmp_path: Path) -> None:
    timers = ht.HostTimers(str(tmp_path / "t.jsonl"), targets=[])
    timers.install()
    try:
        gc.collect(1)
        gc.collect(2)
    finally:
        gc.callbacks.remove(timers._on_gc)
    assert timers.gc_totals["gen1"][0] >= 1 and timers.gc_totals["gen2"][0] >= 1
    assert timers.gc_totals["gen2"][1] > 0


def test_deltas_take_the_last_lines_at_or_before_each_end() -> None:
    def line(ts: float, n: int, s: float, cpu: float) -> dict[str, object]:
        return {
            "kind": "totals",
            "ts": ts,
            "t": {"A.f": [n, s]},
            "gc": {},
            "process_cpu_s": cpu,
            "thread_cpu_s": cpu / 2,
            "threads": 3,
        }

    lines = [{"kind": "header"}, line(10.0, 5, 1.0, 2.0), line(11.0, 9, 1.5, 2.6), line(12.5, 20, 3.0, 4.0)]
    d = ht.deltas(lines, 10.5, 12.6)
    assert d is not None
    assert d["span_s"] == 2.5 and d["t"] == {"A.f": [15, 2.0]}
    assert d["process_cpu_s"] == pytest.approx(2.0) and d["thread_cpu_s"] == pytest.approx(1.0)
    assert ht.deltas(lines, 11.2, 12.0) is None  # no line inside the span
    assert ht.deltas(lines, 9.0, 12.0) is None  # none before it


def test_the_dispatcher_installs_the_timers_it_is_configured_with(tmp_path: Path) -> None:
    control = tmp_path / "control.txt"
    path = tmp_path / "timers.jsonl"
    cfg = DispatchConfig(
        control_file=str(control),
        policies={"off": {"name": "static", "num_steps": 0}},
        initial="off",
        host_timers=str(path),
    )
    try:
        DispatchPolicy(cfg)
        timers = ht.HOST_TIMERS[str(path)]
        assert timers.installed and _lines(path)[0]["kind"] == "header"
    finally:
        timers = ht.HOST_TIMERS.pop(str(path), None)
        if timers is not None:
            gc.callbacks.remove(timers._on_gc)
            _unwrap(timers)


def _unwrap(timers: ht.HostTimers) -> None:
    """Put the originals back on the real classes the default targets wrapped."""
    import importlib

    for module, cls_name, method in timers.targets:
        try:
            cls = getattr(importlib.import_module(module), cls_name)
        except (ImportError, AttributeError):
            continue
        f = cls.__dict__.get(method)
        if f is not None and hasattr(f, "__wrapped__"):
            setattr(cls, method, f.__wrapped__)


def test_the_plugin_hook_installs_the_timers_as_the_scheduler_is_built_when_the_variable_names_a_file(
    engine_module: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = engine_module.__name__
    monkeypatch.setattr(ht, "TARGETS", ((name, "Scheduler", "run_batch"),))
    monkeypatch.setattr(ht, "SCHEDULER", (name, "Scheduler"))
    monkeypatch.setattr(ht, "HOST_TIMERS", {})
    monkeypatch.delenv(ht.ENV, raising=False)
    init = engine_module.Scheduler.__init__
    ht.register()  # an engine without the variable: nothing wrapped, nothing written
    assert engine_module.Scheduler.__init__ is init
    path = tmp_path / "timers-base_v1.jsonl"
    monkeypatch.setenv(ht.ENV, str(path))
    ht.register()
    ht.register()  # SGLang loads plugins once per process; a second call wraps nothing twice
    assert engine_module.Scheduler.__init__.__wrapped__ is init
    # a hook applied after the plugins ran (as SGLang's registry applies them) is inside the timers
    inner = engine_module.Scheduler.run_batch
    engine_module.Scheduler.run_batch = lambda self, s: "hooked " + inner(self, s)
    assert ht.HOST_TIMERS == {} and not path.exists()  # nothing until a scheduler is built
    sched = engine_module.Scheduler()
    timers = ht.HOST_TIMERS[str(path)]
    try:
        timers.interval_s = 0.0
        assert sched.run_batch(0.0) == "hooked out"
        assert [r["kind"] for r in _lines(path)] == ["header", "totals"]
    finally:
        gc.callbacks.remove(timers._on_gc)
        engine_module.Scheduler.__init__ = init


def test_the_package_declares_the_plugin_entry_point_sglang_loads() -> None:
    import tomllib

    meta = tomllib.loads((Path(ht.__file__).parents[1] / "pyproject.toml").read_text())
    eps = meta["project"]["entry-points"]["sglang.srt.plugins"]
    module, func = next(iter(eps.values())).split(":")
    assert module == ht.__name__ and callable(getattr(ht, func))
