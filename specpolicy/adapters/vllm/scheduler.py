"""The scheduler classes behind ``--scheduler-cls specpolicy.adapters.vllm.Scheduler``.

vLLM's scheduler (engine-core process) writes one integer per step,
``SchedulerOutput.num_spec_tokens_to_schedule``: how many draft tokens the model runner proposes after this
step (0 = none); both model runners and every K-aware proposer obey it, and
``AsyncScheduler._update_after_schedule`` sizes the next step's placeholders from it.
So the adapter overrides three methods and patches nothing:

* ``_update_after_schedule``: read the decode batch, waiting queue and context lengths, ask the policy
  (guarded by the StepController), write the depth into the SchedulerOutput, then let vLLM continue. It
  must run before ``super()``, which builds the async placeholders from that number.
* ``make_spec_decoding_stats``: vLLM calls it for every verified request, with stats logging on or off; the
  per-request (drafted, accepted) counts go to the ledger.
* ``update_from_output``: closes the step in the ledger, which reports the verified decision's outcome
  (acceptance, timing) to the controller.

TP/PP ranks receive the same SchedulerOutput, so they share the decision by construction. Data parallelism is
refused (``checks.py``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler as _VllmAsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler as _VllmScheduler

from ...runtime.runtime import AdapterRuntime
from .checks import preflight
from .hints import RequestHints
from .ledger import StepLedger
from .versions import installed_version

__all__ = ["Scheduler", "PolicyScheduler", "PolicyAsyncScheduler", "CoreBridge", "install"]

# A child of vLLM's logger, so the start-up line appears where vLLM's own lines do.
log = logging.getLogger("vllm.specpolicy")

_perf_counter = time.perf_counter


class CoreBridge:
    """A policy running in one engine core: the runtime, the ledger and the log-once error guard."""

    __slots__ = (
        "runtime",
        "ledger",
        "default_steps",
        "errors",
        "_logged",
        "_with_ids",
        "hints",
        "_hint_live",
    )

    def __init__(self, runtime: AdapterRuntime, default_steps: int) -> None:
        self.runtime = runtime
        self.ledger = StepLedger(runtime, request_ids=runtime.wants_request_ids)
        self.default_steps = default_steps
        self.errors = 0
        self._logged = False
        self._with_ids = runtime.wants_request_ids
        #: the requests' own hints (``extra_args["specpolicy"]``); None when the settings turn them off
        self.hints = RequestHints(runtime.hints) if runtime.settings.hints else None
        #: the live hinted requests (empty: the step pays one truthiness check)
        self._hint_live: dict[Any, int] = {} if self.hints is None else self.hints.live

    def schedule(self, sched: Any, so: Any) -> int:
        """Depth for a non-empty step: O(scheduled requests) attribute reads, then one guarded decide()."""
        requests = sched.requests
        n_decode = 0
        ctx = 0
        samples = False
        ids: list[str] | None = [] if self._with_ids else None
        for req_id, n in so.num_scheduled_tokens.items():
            r = requests[req_id]
            c = r.num_computed_tokens
            placeholders = r.num_output_placeholders
            end = r.num_tokens + placeholders  # known tokens, in-flight async outputs included
            if c + n >= end:  # the step samples this request's next token: its drafts get verified
                samples = True
                # In decode: only the newest token is uncomputed and the request has produced output
                # (a prefix-cache hit leaves a fresh prompt one token short too; it is a prefill joining).
                if c + 1 >= end and (placeholders or r.num_output_tokens):
                    n_decode += 1
                    ctx += end
                    if ids is not None:
                        ids.append(req_id)
        waiting = sched.get_request_counts()[1]
        mean_seq_len = ctx / n_decode if n_decode else None
        live = self._hint_live
        hints = self.hints.of_step(so.num_scheduled_tokens, requests) if live else None  # type: ignore[union-attr]
        now = _perf_counter()
        return self.ledger.on_schedule(so, n_decode, waiting, mean_seq_len, samples, now, ids, hints)

    def fail(self, exc: BaseException) -> int:
        """An adapter error (not a policy error, which the controller contains): log once, run the default."""
        self.errors += 1
        if not self._logged:
            self._logged = True
            log.error(
                "specpolicy: adapter error; this step runs the default depth %d and the engine keeps "
                "serving. Further adapter errors are counted, not logged.",
                self.default_steps,
                exc_info=exc,
            )
        return self.default_steps

    def close(self) -> None:
        self.runtime.close()


def _name(value: Any) -> str | None:
    """A model or drafter name for the warm-start fingerprint (None when the config has none)."""
    return str(value) if value else None


def install(vllm_config: Any) -> CoreBridge | None:
    """Check the configuration and build the policy runtime for one engine core (see ``checks.preflight``)."""
    pre = preflight(vllm_config, installed_version())
    if pre is None:
        return None
    facts = pre.facts
    k_max = facts.num_speculative_tokens
    spec = vllm_config.speculative_config
    drafter = getattr(spec, "model", None) or getattr(spec, "method", None)
    runtime = AdapterRuntime(
        pre.settings,
        engine="vllm",
        engine_version=str(facts.version),
        path=facts.path(),
        allowed_steps=range(k_max + 1),
        default_steps=k_max,
        rank=int(getattr(vllm_config.parallel_config, "data_parallel_rank", 0) or 0),
        world_size=1,  # one scheduler per engine core; TP/PP ranks receive its SchedulerOutput
        per_request_hints=True,
        model=_name(getattr(getattr(vllm_config, "model_config", None), "model", None)),
        drafter=_name(drafter),
        header={
            "model_runner": facts.model_runner,
            "async_scheduling": facts.async_scheduling,
            "cudagraph_mode": facts.cudagraph_mode,
        },
    )
    for w in pre.warnings:
        log.warning("specpolicy: %s", w)
    log.info("%s", runtime.startup_line())
    return CoreBridge(runtime, k_max)


class _PolicyMixin:
    """The three overrides, shared by the sync and async bases."""

    _specpolicy: CoreBridge | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        installed = kwargs.pop("_specpolicy", _UNSET)
        super().__init__(*args, **kwargs)
        if installed is _UNSET:
            installed = install(kwargs["vllm_config"] if "vllm_config" in kwargs else args[0])
        self._specpolicy = installed

    def add_request(self, request: Any) -> None:
        super().add_request(request)  # type: ignore[misc]
        sp = self._specpolicy
        if sp is not None and sp.hints is not None:
            sp.hints.admit(request)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        sp = self._specpolicy
        if sp is not None and sp._hint_live:
            sp.hints.trim(self.requests)  # type: ignore[union-attr,attr-defined] # drafts cut to allowances
        return super().schedule(*args, **kwargs)  # type: ignore[misc]

    def _update_after_schedule(self, scheduler_output: Any) -> None:
        sp = self._specpolicy
        if sp is not None and scheduler_output.num_scheduled_tokens:
            try:
                k = sp.schedule(self, scheduler_output)
            except Exception as exc:
                k = sp.fail(exc)
            scheduler_output.num_spec_tokens_to_schedule = k
        super()._update_after_schedule(scheduler_output)  # type: ignore[misc]

    def make_spec_decoding_stats(
        self,
        spec_decoding_stats: Any,
        num_draft_tokens: int,
        num_accepted_tokens: int,
        num_invalid_spec_tokens: dict[str, int] | None,
        request_id: str,
    ) -> Any:
        sp = self._specpolicy
        if sp is not None:
            drafted = num_draft_tokens
            if num_invalid_spec_tokens:
                drafted -= num_invalid_spec_tokens.get(request_id, 0)
            sp.ledger.on_draft(drafted, num_accepted_tokens, request_id)
        return super().make_spec_decoding_stats(  # type: ignore[misc]
            spec_decoding_stats,
            num_draft_tokens=num_draft_tokens,
            num_accepted_tokens=num_accepted_tokens,
            num_invalid_spec_tokens=num_invalid_spec_tokens,
            request_id=request_id,
        )

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = super().update_from_output(scheduler_output, model_runner_output)  # type: ignore[misc]
        sp = self._specpolicy
        if sp is not None:
            try:
                sp.ledger.on_update(scheduler_output, _perf_counter())
            except Exception as exc:
                sp.fail(exc)
        return outputs

    def shutdown(self) -> None:
        try:
            super().shutdown()  # type: ignore[misc]
        finally:
            sp = self._specpolicy
            if sp is not None:
                sp.close()


_UNSET: Any = object()


class PolicyScheduler(_PolicyMixin, _VllmScheduler):  # type: ignore[misc]
    """vLLM's synchronous Scheduler with the policy deciding each step's speculative length."""


class PolicyAsyncScheduler(_PolicyMixin, _VllmAsyncScheduler):  # type: ignore[misc]
    """vLLM's AsyncScheduler (async scheduling, the default for EAGLE-family methods) with the policy."""


class Scheduler:
    """The ``--scheduler-cls`` entry: builds the policy scheduler on the base vLLM would have chosen.

    A custom scheduler class replaces vLLM's own pick between ``Scheduler`` and ``AsyncScheduler``; using
    the wrong one either loses the overlap of async scheduling or corrupts its placeholders. So this class
    looks at ``vllm_config.scheduler_config.async_scheduling`` (already resolved by vLLM) and returns an
    instance of ``PolicyAsyncScheduler`` or ``PolicyScheduler``.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        vllm_config = kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]
        installed = install(vllm_config)
        base: type[Any] = (
            PolicyAsyncScheduler if vllm_config.scheduler_config.async_scheduling else PolicyScheduler
        )
        return base(*args, _specpolicy=installed, **kwargs)
