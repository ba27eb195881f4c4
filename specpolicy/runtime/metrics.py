"""Prometheus metrics for a running policy, exported beside the engine's own.

Engines that export metrics from several processes (SGLang, vLLM) point ``PROMETHEUS_MULTIPROC_DIR`` at a
shared
directory and serve it from their HTTP process; metrics created here in the default registry land there too,
so
they appear on the engine's ``/metrics`` with no extra port. The step path only bumps plain Python counters;
they are pushed into prometheus-client every ``push_every`` steps (and on ``close``), because a multiprocess
metric update is an mmap write that does not belong on every step.

Metric names (all prefixed ``specpolicy_``, labelled ``engine`` and ``rank``): ``steps_total{depth}``,
``switches_total``, ``policy_errors_total``, ``decide_seconds`` (histogram), ``decide_over_budget_total``
(decide() calls slower than the controller's budget), ``depth`` (gauge, last decision), ``estimate{name}``
(gauge, from a policy implementing ``specpolicy.ReportsEstimates``; values that are not numbers are skipped,
and at most ``MAX_ESTIMATE_NAMES`` distinct names get a series: the first ones seen),
``estimates_dropped_total`` (estimate values not exported: beyond those names, or not numbers),
``trace_records_total{outcome}`` (the step trace's written and dropped-by-cause records),
``policy_swaps_total`` and ``policy_swaps_refused_total`` (policy changes through the control file, see
``runtime.control_file``), ``engine_events_total{event}`` (what the adapter did inside the engine: steps
forced to speculate, draft positions skipped and caught up, ...; running totals an adapter reports through
``engine_counts``), ``hints_total{event}`` (per-request hints: ``requests_off``, ``requests_capped``,
``bad``, ``request_steps_trimmed``, ``steps_off``, ``steps_capped``).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..policy import Policy, ReportsEstimates
from .decision import StepRecord

__all__ = ["MAX_ESTIMATE_NAMES", "MetricsObserver", "metric_families", "DECIDE_BUCKETS"]


class TraceCounts(Protocol):
    """What the metrics read from a trace writer: records written, and dropped by cause."""

    @property
    def written(self) -> int: ...

    @property
    def drops(self) -> dict[str, int]: ...


#: Estimates mirrored per push, at most (a policy returning thousands of names must not flood the registry).
_MAX_ESTIMATES = 64
#: Distinct estimate names that get a series, per observer, ever: a policy whose names change from push to
#: push (a per-request or per-bucket key) must not grow the registry without bound. Later names are dropped
#: and counted.
MAX_ESTIMATE_NAMES = 64

DECIDE_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2)

# Keyed by the registry object itself (weakly): keying by id() would hand a new registry the families of a
# collected one that happened to share its address.
_FAMILIES: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def metric_families(registry: Any = None) -> dict[str, Any]:
    """The specpolicy metric objects in ``registry`` (default: prometheus-client's), created once per
    registry."""
    import prometheus_client as prom

    reg = prom.REGISTRY if registry is None else registry
    fams = _FAMILIES.get(reg)
    if fams is not None:
        return fams
    labels = ("engine", "rank")
    multiproc = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    gauge_kw: dict[str, Any] = {"multiprocess_mode": "mostrecent"} if multiproc else {}
    fams = {
        "steps": prom.Counter(
            "specpolicy_steps",
            "Engine steps run, by the draft depth applied (0 = no speculation)",
            (*labels, "depth"),
            registry=reg,
        ),
        "switches": prom.Counter(
            "specpolicy_switches", "Steps whose depth differs from the previous step's", labels, registry=reg
        ),
        "errors": prom.Counter(
            "specpolicy_policy_errors",
            "Steps the policy failed (exception, invalid mode, over its decide() budget); the engine default "
            "depth ran instead",
            labels,
            registry=reg,
        ),
        "decide": prom.Histogram(
            "specpolicy_decide_seconds",
            "Wall time of one policy decide() call",
            labels,
            buckets=DECIDE_BUCKETS,
            registry=reg,
        ),
        "over_budget": prom.Counter(
            "specpolicy_decide_over_budget",
            "decide() calls slower than the controller's budget (decide_budget_s)",
            labels,
            registry=reg,
        ),
        "trace": prom.Counter(
            "specpolicy_trace_records",
            "Step trace records by outcome: written, or dropped_<cause> (see TraceWriter.DROP_CAUSES)",
            (*labels, "outcome"),
            registry=reg,
        ),
        "swaps": prom.Counter(
            "specpolicy_policy_swaps",
            "Policy changes installed without a restart (the control file)",
            labels,
            registry=reg,
        ),
        "swaps_refused": prom.Counter(
            "specpolicy_policy_swaps_refused",
            "Policy changes refused (invalid, or not runnable by this engine); the running policy stayed",
            labels,
            registry=reg,
        ),
        "engine_events": prom.Counter(
            "specpolicy_engine_events",
            "What the adapter did inside the engine, by event (e.g. forced_steps, draft_catch_ups), as "
            "reported through MetricsObserver.engine_counts",
            (*labels, "event"),
            registry=reg,
        ),
        "hints": prom.Counter(
            "specpolicy_hints",
            "Per-request speculation hints, by event: requests_off, requests_capped, bad (ignored), "
            "steps_off and steps_capped (steps the hints made shallower than the policy decided)",
            (*labels, "event"),
            registry=reg,
        ),
        "depth": prom.Gauge(
            "specpolicy_depth", "Draft depth of the latest step", labels, registry=reg, **gauge_kw
        ),
        "estimates_dropped": prom.Counter(
            "specpolicy_estimates_dropped",
            "Estimate values not exported: a name beyond the first MAX_ESTIMATE_NAMES, or not a number",
            labels,
            registry=reg,
        ),
        "estimate": prom.Gauge(
            "specpolicy_estimate",
            "The policy's own estimates (ReportsEstimates), by name",
            (*labels, "name"),
            registry=reg,
            **gauge_kw,
        ),
    }
    _FAMILIES[reg] = fams
    return fams


class MetricsObserver:
    """StepObserver that counts steps, switches, errors and decide() time, and mirrors the policy's
    estimates."""

    def __init__(
        self,
        *,
        engine: str,
        rank: int = 0,
        policy: Policy | None = None,
        registry: Any = None,
        push_every: int = 64,
        clock: Callable[[], float] | None = None,
        decide_budget_s: float = 1e-3,
        trace: TraceCounts | None = None,
        engine_counts: Callable[[], Mapping[str, int]] | None = None,
        hints: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        if push_every < 1:
            raise ValueError(f"MetricsObserver.push_every must be >= 1, got {push_every}")
        fams = metric_families(registry)
        lv = (engine, str(rank))
        self._steps_family = fams["steps"]
        self._lv = lv
        self._switches = fams["switches"].labels(*lv)
        self._errors = fams["errors"].labels(*lv)
        self._decide = fams["decide"].labels(*lv)
        self._over_budget = fams["over_budget"].labels(*lv)
        self._budget = decide_budget_s
        self._trace = trace
        self._trace_family = fams["trace"]
        self._trace_seen: dict[str, int] = {}
        self.engine_counts = engine_counts
        self._events_family = fams["engine_events"]
        self._events_seen: dict[str, int] = {}
        self.hints = hints
        self._hints_family = fams["hints"]
        self._hints_seen: dict[str, int] = {}
        self._depth = fams["depth"].labels(*lv)
        self._swaps = fams["swaps"].labels(*lv)
        self._swaps_refused = fams["swaps_refused"].labels(*lv)
        self._estimate_family = fams["estimate"]
        self._estimate_names: set[str] = set()
        self._estimates_dropped = fams["estimates_dropped"].labels(*lv)
        #: estimate values not exported (see MAX_ESTIMATE_NAMES), in all
        self.estimates_dropped = 0
        self._estimates = policy if isinstance(policy, ReportsEstimates) else None
        self._push_every = push_every
        self._by_depth: dict[int, int] = {}
        self._decide_times: list[float] = []
        self._n_switches = 0
        self._n_errors = 0
        self._last_k = -1
        self._pending = 0

    # -- StepObserver (hot path) --
    def on_record(self, record: StepRecord) -> None:
        num_steps = record[2]
        by = self._by_depth
        by[num_steps] = by.get(num_steps, 0) + 1
        if num_steps != self._last_k and self._last_k >= 0:
            self._n_switches += 1
        self._last_k = num_steps
        self._n_errors += record[4]
        self._decide_times.append(record[3])
        self._pending += 1
        if self._pending >= self._push_every:
            self.push()

    def push(self) -> None:
        """Move the counts gathered since the last push into the Prometheus metrics."""
        for k, n in self._by_depth.items():
            self._steps_family.labels(*self._lv, str(k)).inc(n)
        self._by_depth = {}
        if self._n_switches:
            self._switches.inc(self._n_switches)
            self._n_switches = 0
        if self._n_errors:
            self._errors.inc(self._n_errors)
            self._n_errors = 0
        over = 0
        for t in self._decide_times:
            self._decide.observe(t)
            over += t > self._budget
        if over:
            self._over_budget.inc(over)
        self._decide_times = []
        if self._last_k >= 0:
            self._depth.set(self._last_k)
        self._pending = 0
        if self._trace is not None:
            self._push_trace(self._trace)
        if self.engine_counts is not None:
            self._push_engine_counts()
        if self.hints is not None:
            self._push_totals(self._hints_family, self.hints(), self._hints_seen)
        if self._estimates is not None:
            self._push_estimates()

    def _push_trace(self, trace: TraceCounts) -> None:
        counts = {"written": trace.written, **{f"dropped_{c}": n for c, n in trace.drops.items()}}
        self._push_totals(self._trace_family, counts, self._trace_seen)

    def _push_engine_counts(self) -> None:
        """Mirror the adapter's running totals; a failing or malformed report is skipped, never raised."""
        assert self.engine_counts is not None
        try:
            counts = {str(k): int(v) for k, v in dict(self.engine_counts()).items()}
        except Exception:  # noqa: BLE001 - informative only
            return
        self._push_totals(self._events_family, counts, self._events_seen)

    def _push_totals(self, family: Any, totals: Mapping[str, int], seen: dict[str, int]) -> None:
        """Increment ``family`` by how far each running total moved since the last push."""
        for label, n in totals.items():
            delta = n - seen.get(label, 0)
            if delta > 0:
                family.labels(*self._lv, label).inc(delta)
                seen[label] = n

    def _push_estimates(self) -> None:
        """Mirror the policy's estimates; informative only, so whatever it returns cannot raise here. A name
        gets a series only among the first MAX_ESTIMATE_NAMES seen; the rest, and values that are not
        numbers, are counted in ``estimates_dropped``."""
        assert self._estimates is not None
        try:
            items = list(dict(self._estimates.estimates()).items())
        except Exception:  # noqa: BLE001 - not a mapping, or estimates() raised
            return
        names = self._estimate_names
        dropped = max(len(items) - _MAX_ESTIMATES, 0)
        for name, value in items[:_MAX_ESTIMATES]:
            try:
                f = float(value)
                if type(name) is not str or len(name) > 64:
                    dropped += 1
                    continue
                if name not in names:
                    if len(names) >= MAX_ESTIMATE_NAMES:
                        dropped += 1
                        continue
                    names.add(name)
                self._estimate_family.labels(*self._lv, name).set(f)
            except Exception:  # noqa: BLE001 - a value that is not a number is skipped
                dropped += 1
        if dropped:
            self.estimates_dropped += dropped
            self._estimates_dropped.inc(dropped)

    def count_swap(self, policy: Policy | None, refused: bool) -> None:
        """A policy change installed (``policy``, whose estimates are mirrored from now on) or refused;
        counted at once (changes are rare)."""
        if refused:
            self._swaps_refused.inc()
            return
        self._swaps.inc()
        self._estimates = policy if isinstance(policy, ReportsEstimates) else None

    def close(self) -> None:
        self.push()
