"""Can this vLLM configuration run a policy? Checked in the front-end (before weights load) and again in the
engine core, from plain facts so the rules are testable without vLLM.

Each refusal says what to change. The rules come from how vLLM 0.33 applies a per-step K
(docs/getting-started/vllm.md): the scheduler's ``num_spec_tokens_to_schedule`` only reaches proposers that
take a variable K, vLLM's dynamic speculation plumbing (per-K CUDA graphs, no uniform padding of new decodes)
is switched on only by a ``num_speculative_tokens_per_batch_size`` schedule, and data-parallel ranks must
draft the same number of steps or their collectives deadlock. An older tested release adds the rules its row
in ``versions.RELEASES`` calls for: 0.26's V2 model runner drafts ``num_speculative_tokens`` tokens whatever
the depth, except with the autoregressive drafters the adapter's own hook drives (``drafter_depth``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ...runtime.runtime import AdapterInstallError, check_candidate_steps
from ...runtime.settings import AdapterSettings
from .._support import refuse_or_warn
from . import drafter_depth
from .config import SECTION, settings_from
from .versions import check_version, release

__all__ = [
    "EngineFacts",
    "Preflight",
    "UNSUPPORTED_METHODS",
    "check_engine",
    "facts_from_vllm_config",
    "preflight",
    "schedule_depths",
]

log = logging.getLogger("vllm.specpolicy")

#: Speculative methods that cannot follow a per-step K, with the reason.
UNSUPPORTED_METHODS: dict[str, str] = {
    "ngram_gpu": "its GPU n-gram proposer asserts a fixed K (ngram_proposer_gpu.py)",
    "extract_hidden_states": "it only supports K = 1",
    "custom_class": "vLLM never passes the per-step K to a custom proposer class",
    "dspark": "it chooses its own per-step draft budget (adaptive verification); untested with an external K",
}


@dataclass(frozen=True)
class EngineFacts:
    """What the adapter needs to know about one engine configuration."""

    version: str | None
    method: str | None  # None: no speculative decoding configured
    num_speculative_tokens: int
    schedule: (
        tuple[tuple[int, int, int], ...] | None
    )  # num_speculative_tokens_per_batch_size, as vLLM kept it
    use_v2_model_runner: bool
    async_scheduling: bool
    data_parallel_size: int = 1
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_num_seqs: int = 256
    #: ``compilation_config.cudagraph_mode`` by name after vLLM's adjustments (None: not known)
    cudagraph_mode: str | None = None

    @property
    def model_runner(self) -> str:
        return "MRV2" if self.use_v2_model_runner else "MRV1"

    def path(self) -> str:
        """The engine path in the words of the start-up line: model runner, scheduler base, graph mode."""
        sched = "async" if self.async_scheduling else "sync"
        return (
            f"{self.model_runner} {sched}-scheduler cudagraphs={self.cudagraph_mode or 'unknown'} "
            f"method={self.method} "
            f"num_speculative_tokens={self.num_speculative_tokens} tp={self.tensor_parallel_size} "
            f"pp={self.pipeline_parallel_size} dp={self.data_parallel_size}"
        )


def facts_from_vllm_config(vllm_config: Any, version: str | None) -> EngineFacts:
    """Read the facts off a finished ``VllmConfig`` (after vLLM's own adjustments in ``__post_init__``)."""
    spec = vllm_config.speculative_config
    par = vllm_config.parallel_config
    sched = vllm_config.scheduler_config
    schedule = None
    if spec is not None and spec.num_speculative_tokens_per_batch_size:
        schedule = tuple((int(a), int(b), int(k)) for a, b, k in spec.num_speculative_tokens_per_batch_size)
    return EngineFacts(
        version=version,
        method=None if spec is None else str(spec.method),
        num_speculative_tokens=0 if spec is None else int(spec.num_speculative_tokens or 0),
        schedule=schedule,
        # 0.34 removed the V1 runner and this property with it: the V2 runner is the only one
        use_v2_model_runner=bool(getattr(vllm_config, "use_v2_model_runner", True)),
        async_scheduling=bool(sched.async_scheduling),
        data_parallel_size=int(par.data_parallel_size),
        tensor_parallel_size=int(par.tensor_parallel_size),
        pipeline_parallel_size=int(par.pipeline_parallel_size),
        max_num_seqs=int(sched.max_num_seqs),
        cudagraph_mode=_cudagraph_mode(vllm_config),
    )


def _cudagraph_mode(vllm_config: Any) -> str | None:
    mode = getattr(getattr(vllm_config, "compilation_config", None), "cudagraph_mode", None)
    return None if mode is None else str(getattr(mode, "name", mode))


def schedule_depths(schedule: Sequence[Sequence[int]], num_speculative_tokens: int) -> set[int]:
    """The depths a schedule makes vLLM prepare (values clamped to num_speculative_tokens, as vLLM does)."""
    return {min(int(k), num_speculative_tokens) for _, _, k in schedule}


def check_engine(facts: EngineFacts, candidate_steps: Sequence[int]) -> list[str]:
    """Refuse (AdapterInstallError) a configuration the policy cannot run in; return warnings otherwise.

    The version is checked separately (``versions.check_version``), because ``allow_untested`` governs it.
    """
    fix = "run `specpolicy vllm-args --policy ... --num-speculative-tokens K` for matching flags"
    if facts.method is None or facts.num_speculative_tokens <= 0:
        raise AdapterInstallError(
            "speculative_config: no speculative decoding is configured; the specpolicy scheduler needs "
            f"--speculative-config with num_speculative_tokens >= 1 ({fix})"
        )
    if facts.data_parallel_size > 1:
        raise AdapterInstallError(
            f"parallel_config.data_parallel_size={facts.data_parallel_size}: data parallelism is not "
            "supported. vLLM turns num_speculative_tokens_per_batch_size off under DP (the adapter needs it "
            "for per-step depths), and for MoE models the DP ranks run their drafter passes collectively, so "
            "ranks choosing different depths would deadlock. Run one server per replica behind a load "
            "balancer, or drop --scheduler-cls."
        )
    reason = UNSUPPORTED_METHODS.get(facts.method)
    if reason is not None:
        raise AdapterInstallError(
            f"speculative_config.method={facts.method!r} cannot follow a per-step "
            f"speculative length: {reason}"
        )
    if facts.schedule is None:
        why = ""
        if not facts.use_v2_model_runner and facts.method not in (
            "ngram",
            "eagle",
            "eagle3",
            "mtp",
            "draft_model",
            "dflash",
        ):
            why = (
                f" (vLLM 0.33 drops it on the V1 model runner for method {facts.method!r}; use "
                "VLLM_USE_V2_MODEL_RUNNER=1 or an EAGLE/MTP/draft-model method)"
            )
        raise AdapterInstallError(
            "speculative_config.num_speculative_tokens_per_batch_size is not set" + why + ". vLLM prepares "
            "per-step speculative lengths (CUDA graphs per K, no uniform padding of new decodes) only with "
            f"that schedule; list every depth the policy may choose in it ({fix})"
        )
    row = release(facts.version)
    mrv2_drafts_all = (
        facts.use_v2_model_runner
        and row is not None
        and not row.mrv2_drafts_k
        and facts.method not in drafter_depth.METHODS
    )
    if mrv2_drafts_all and not facts.async_scheduling:
        raise AdapterInstallError(
            f"vLLM {facts.version}'s V2 model runner drafts num_speculative_tokens tokens every step, and "
            "with sync scheduling the scheduler then verifies all of them: the policy's depth would be "
            "ignored. Use VLLM_USE_V2_MODEL_RUNNER=0 (the V1 runner drafts the policy's depth), or async "
            f"scheduling, or a method whose drafter the adapter drives ({', '.join(drafter_depth.METHODS)})"
        )
    k_max = facts.num_speculative_tokens
    check_candidate_steps(
        candidate_steps, range(k_max + 1), where=f"speculative_config.num_speculative_tokens={k_max}"
    )
    warnings: list[str] = []
    missing = sorted(set(candidate_steps) - schedule_depths(facts.schedule, k_max))
    if missing:
        graphs = "FULL CUDA graphs" if facts.use_v2_model_runner else "CUDA graph tiers"
        warnings.append(
            f"depth(s) {missing} are not in num_speculative_tokens_per_batch_size, so vLLM captures no "
            f"{graphs} for them and they run slower (eager/piecewise); {fix}"
        )
    if mrv2_drafts_all:
        warnings.append(
            f"vLLM {facts.version}'s V2 model runner drafts num_speculative_tokens={k_max} tokens every "
            "step whatever the depth; the policy's depth only sets how many of them are verified, so a lower "
            "depth saves verification, not drafting. VLLM_USE_V2_MODEL_RUNNER=0 drafts the policy's depth, "
            f"as does the V2 runner with {', '.join(drafter_depth.METHODS)}"
        )
    if (
        facts.use_v2_model_runner
        and row is not None
        and not row.mrv2_graphs_per_depth
        and 0 in candidate_steps
        and facts.cudagraph_mode not in (None, "NONE", "PIECEWISE")
    ):
        warnings.append(
            f"vLLM {facts.version}'s V2 model runner looks its decode CUDA graphs up by token count before "
            "query length, so a depth-0 step whose batch size falls short of a deeper depth's rounded graph "
            "size runs without a graph (vLLM 0.33 and later keep one table per depth)"
        )
    if not facts.use_v2_model_runner and facts.cudagraph_mode == "PIECEWISE" and 0 in candidate_steps:
        warnings.append(
            "vLLM's V1 model runner keeps only piecewise CUDA graphs when the speculative length may change "
            "per step (it overrides FULL_AND_PIECEWISE), so a depth-0 step is not the full-graph decode step "
            "of a speculation-free engine, and the drafter's first pass still runs: measured on an H100 with "
            "vLLM 0.26.0 and a 2.6 B-parameter model, depth 0 gave 0.28-0.56x the speculation-free engine's "
            "throughput at 1-128 requests (docs/results/methodology.md). Policies that turn speculation off "
            "under load gain less here than on SGLang; VLLM_USE_V2_MODEL_RUNNER=1 keeps full graphs for the "
            "methods it serves"
        )
    if facts.pipeline_parallel_size > 1:
        warnings.append(
            "pipeline parallelism: the depth applies to every stage, but the acceptance statistics given "
            "to the policy are attributed to the previous step's depth, which is approximate under PP "
            "(untested)"
        )
    return warnings


@dataclass(frozen=True)
class Preflight:
    """A configuration that passed every check: what ``install`` needs to build the runtime."""

    settings: AdapterSettings
    facts: EngineFacts
    warnings: tuple[str, ...]


def preflight(vllm_config: Any, version: str | None) -> Preflight | None:
    """Every start-up check on a finished ``VllmConfig``, shared by the front-end plugin and the engine core.

    Raises ConfigError (field named) for a missing or bad policy configuration, and AdapterInstallError for an
    engine the policy cannot run in; with ``on_install_failure: warn`` the latter is logged and None returned
    (vLLM then runs without the policy).
    """
    settings = settings_from(vllm_config.additional_config)
    if settings is None:
        raise ConfigError(
            f"additional_config.{SECTION}: missing; the specpolicy scheduler needs a policy, e.g. "
            f'--additional-config \'{{"{SECTION}": {{"policy": "hysteresis"}}}}\' or SPECPOLICY_POLICY=...'
        )
    try:
        version = check_version(version, allow_untested=settings.allow_untested)
        facts = facts_from_vllm_config(vllm_config, version)
        warnings = check_engine(facts, settings.policy.candidate_steps())
    except AdapterInstallError as exc:
        refuse_or_warn(settings.on_install_failure, exc, log, without="vLLM runs without the policy")
        return None
    return Preflight(settings, facts, tuple(warnings))
