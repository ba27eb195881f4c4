"""AdapterRuntime: the policy, its guard, its rank agreement and its observers, built once per engine process.

Every engine adapter does the same five things at start-up: build the policy from the settings, check its
depths against what the engine pre-built, wrap it in a StepController, pick the rank-agreement mode, and
attach the trace writer and metrics. This module does them once for all engines, in one constructor; the
adapters only supply what the engine knows (the depths it runs, its default depth, rank, world size, CPU
group) and, where the engine runs fewer depths than a policy may choose, a policy wrapper that maps them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from .. import __version__
from ..errors import short_str
from ..hints import BatchRule, HintBook
from ..policy import Policy
from ..registry import get_entry
from ..stats import StepStats
from .control_file import attach_control
from .controller import StepController
from .decision import Decision, StepObserver
from .settings import AdapterSettings
from .tp import AgreedDecider, DecisionSync, agreement_mode
from .warm_start import WarmStart, gpu_name

__all__ = ["AdapterRuntime", "AdapterInstallError", "check_candidate_steps"]

log = logging.getLogger("specpolicy.adapter")


class AdapterInstallError(RuntimeError):
    """The adapter cannot run the policy in this engine configuration; the message says why and what to
    change."""


def check_candidate_steps(policy_steps: Sequence[int], engine_steps: Sequence[int], where: str) -> None:
    """Refuse a policy that may choose a depth the engine did not pre-build (buffers, KV reservation,
    graphs)."""
    extra = sorted(set(policy_steps) - set(engine_steps))
    if extra:
        raise AdapterInstallError(
            f"the policy can choose draft depth(s) {extra}, but the engine only prepared "
            f"{sorted(set(engine_steps))} "
            f"({where}); add them to the engine's candidate steps or change the policy"
        )


class AdapterRuntime:
    """Per-process policy runtime.

    The adapter's one handle (a ``StepPath``): per step it calls ``step, k = decide(next_stats(...))`` and,
    once the engine has reported how that step went, ``outcome(step, accepted, step_time_s)``.

    Args:
        settings: the policy and adapter settings.
        engine, engine_version, path: what runs (the start-up line and the trace header).
        allowed_steps: every depth the engine can run (pre-built states, graphs); the policy's candidate
            depths must be among them unless ``wrap`` maps them.
        default_steps: the engine's configured depth, run whenever the policy fails.
        rank, world_size, sync_factory: this rank, the ranks that must agree, and their CPU group.
        wrap: applied to the policy before the controller guards it (e.g. ``OnOffAtDepth`` for an engine
            with graphs for one depth only); it maps every candidate depth onto ``allowed_steps``. Where the
            settings' policy can only choose depths the engine runs, that mapping is the identity and the
            policy runs unwrapped (a wrapper's call less per step).
        policy: an already built policy to run instead of the one the settings name (tests, embedding).
        observers: more observers of the step records, beside the trace and the metrics.
        per_request_hints: the engine verifies per request, so the adapter trims each hinted request's
            drafts and the batch depth only drops where every request allows less (``BatchRule``).
        header, metrics_registry, engine_counts: the trace header's extra keys, the Prometheus registry,
            and the adapter's running totals for the metrics.
        model, drafter: what the engine serves, for the warm start's fingerprint (``warm_start``).
    """

    def __init__(
        self,
        settings: AdapterSettings,
        *,
        engine: str,
        engine_version: str,
        path: str,
        allowed_steps: Sequence[int],
        default_steps: int,
        rank: int = 0,
        world_size: int = 1,
        sync_factory: Callable[[], DecisionSync] | None = None,
        header: Mapping[str, Any] | None = None,
        metrics_registry: Any = None,
        engine_counts: Callable[[], Mapping[str, int]] | None = None,
        wrap: Callable[[Policy], Policy] | None = None,
        policy: Policy | None = None,
        observers: Sequence[StepObserver] = (),
        per_request_hints: bool = False,
        model: str | None = None,
        drafter: str | None = None,
    ) -> None:
        config = settings.policy
        candidates = config.candidate_steps()
        given_wrap = wrap  # a policy swapped in later may need it
        if wrap is not None and policy is None and set(candidates) <= set(allowed_steps):
            wrap = None  # it would map every depth the policy can choose onto itself
        if wrap is None:
            check_candidate_steps(candidates, allowed_steps, where=f"{engine} {engine_version}, {path}")
        self.settings = settings
        self.engine = engine
        self.engine_version = engine_version
        self.path = path
        self.rank = rank
        self.world_size = world_size
        self.candidate_steps = tuple(sorted(set(candidates)))
        #: whether to collect the request ids each step (a policy given directly may read anything)
        self.wants_request_ids = policy is not None or config.needs_request_ids()
        self.policy = get_entry(config.name).factory(config) if policy is None else policy
        observers = list(observers)
        #: the live hinted requests and the hint counters; adapters admit requests only when ``hints`` is on
        self.hints = HintBook()
        self.warm_start = _warm_start(self, model, drafter)
        if self.warm_start is not None:
            observers.append(self.warm_start)
            engine_counts = _with_counts(engine_counts, self.warm_start.counts)
        self.trace = None
        self.metrics = None
        if settings.trace_path is not None:
            from .trace_writer import TraceWriter

            self.trace = TraceWriter(
                settings.trace_path,
                rank=rank,
                max_bytes=settings.trace_max_bytes,
                backups=settings.trace_backups,
                header={
                    "engine": engine,
                    "engine_version": engine_version,
                    "path": path,
                    "policy": config.model_dump(mode="json"),
                    "world_size": world_size,
                    **(header or {}),
                },
            )
            observers.append(self.trace)
        if settings.metrics:
            try:
                from .metrics import MetricsObserver

                self.metrics = MetricsObserver(
                    engine=engine,
                    rank=rank,
                    policy=self.policy,
                    registry=metrics_registry,
                    decide_budget_s=settings.decide_budget_s,
                    trace=self.trace,
                    engine_counts=engine_counts,
                    hints=self.hint_counts,
                )
                observers.append(self.metrics)
            except ImportError:
                log.warning("specpolicy: prometheus-client is not installed; metrics are off")
        self.controller = StepController(
            self.policy if wrap is None else wrap(self.policy),
            allowed_steps=allowed_steps,
            default_steps=default_steps,
            rank=rank,
            observers=observers,
            policy_name=config.name,
            decide_budget_s=settings.decide_budget_s,
            budget_steps=settings.decide_budget_steps,
            watchdog_s=settings.watchdog_s,
            hint_rule=BatchRule(settings.hint_off_rule, per_request_hints),
        )
        self.mode = agreement_mode(
            settings.tp_agreement, config, world_size, can_broadcast=sync_factory is not None
        )
        if self.mode == "local" and world_size > 1:
            log.warning(
                "specpolicy rank %d: tp_agreement=local over %d ranks: each rank decides alone, so a fault "
                "on one rank only (an exception, a decide() over its budget) makes the ranks run different "
                "depths; tp_agreement=broadcast is safe against that",
                rank,
                world_size,
            )
        sync = sync_factory() if self.mode == "broadcast" and sync_factory is not None else None
        if self.mode == "broadcast" and sync is None:
            raise AdapterInstallError(
                f"the policy {config.name!r} needs rank 0's decision broadcast to {world_size} ranks, "
                "but this engine path offers no CPU process group; use tp_agreement='local'"
            )
        #: The depth to run this step, guarded and agreed across ranks: the controller's own ``decide`` when
        #: there is nothing to agree on (one rank), so the step pays for no extra call.
        agreed = None if world_size <= 1 else AgreedDecider(self.controller, self.mode, sync, world_size)
        self.decide: Callable[[StepStats], Decision] = (
            self.controller.decide if agreed is None else agreed.decide
        )
        #: the controller's own methods, so that the step pays for no call in between
        self.next_stats = self.controller.next_stats
        self.outcome = self.controller.outcome
        self.forget = self.controller.forget
        #: records a depth the engine imposed on this rank (a step that must speculate); no policy is asked
        self.force = self.controller.force
        #: policy changes without a restart (``settings.control_path``); None when off
        self.control = attach_control(self, given_wrap, agreed)

    def hint_counts(self) -> dict[str, int]:
        """The hint counters: requests that opted out or set a cap, bad hints, steps turned off or capped."""
        return {**self.hints.counts(), **self.controller.hint_counts()}

    def startup_line(self) -> str:
        """The one log line that says what is live: engine, path, policy and its configuration, depths."""
        return (
            f"specpolicy active: engine={self.engine} {self.engine_version} path={self.path} "
            f"{self.settings.summary()} candidate_steps={list(self.candidate_steps)} "
            f"engine_steps={sorted(self.controller.allowed_steps)} "
            f"default_steps={self.controller.default_steps} "
            f"rank={self.rank}/{self.world_size} agreement={self.mode}"
        )

    def close(self) -> None:
        """Close metrics, trace and watchdog; never raises, and one failing does not skip the others."""
        # the controller first (its waiting decisions reach the observers), then the trace: its final counts
        # reach the metrics' last push
        closers = (
            ("controller", self.controller.close),
            (
                "warm start",
                None if self.warm_start is None else partial(self.warm_start.close, self.controller.step),
            ),
            ("trace", None if self.trace is None else self.trace.close),
            ("metrics", None if self.metrics is None else self.metrics.close),
        )
        for what, closer in closers:
            if closer is None:
                continue
            try:
                closer()
            except Exception as exc:  # noqa: BLE001 - shutdown must finish
                log.error("specpolicy rank %d: closing the %s failed: %s", self.rank, what, short_str(exc))


def _warm_start(runtime: AdapterRuntime, model: str | None, drafter: str | None) -> WarmStart | None:
    """The settings' warm start, its state loaded into the runtime's policy (or the reason it was not)."""
    settings = runtime.settings
    if settings.warm_start_path is None:
        return None
    gpu = gpu_name()

    def fingerprint() -> dict[str, object]:
        return {
            "engine": runtime.engine,
            "engine_version": runtime.engine_version,
            "model": model,
            "drafter": drafter,
            "gpu": gpu,
            "world_size": runtime.world_size,
            "policy": runtime.settings.policy.model_dump(mode="json"),  # the running one's (control file)
            "specpolicy": __version__,
        }

    warm = WarmStart(
        settings.warm_start_path,
        lambda: runtime.policy,
        fingerprint,
        every=settings.warm_start_every,
        max_age_s=settings.warm_start_max_age_s,
        rank=runtime.rank,
    )
    warm.load()
    return warm


def _with_counts(
    counts: Callable[[], Mapping[str, int]] | None, more: Mapping[str, int]
) -> Callable[[], Mapping[str, int]]:
    """The adapter's running totals and ``more`` (a live mapping) together, for the metrics."""
    if counts is None:
        return lambda: dict(more)
    return lambda: {**counts(), **more}
