"""Installing the 0.5.13+ hooks in a scheduler process; attaching a policy to the worker SGLang builds there.

``install`` patches classes (idempotent; nothing happens per step until a worker is attached). The worker's
``init_cuda_graphs`` then attaches, with the settings ``install`` was given or, failing those, the ones the
worker's adaptive config carries under ``"specpolicy"`` (none of either: SGLang runs unchanged). Before
SGLang captures its graphs the policy bridge takes the adaptive controller's params slot (so the controller
builds states for the policy's speculative depths only, never for depth 0); after it, the decode attention
backend and CUDA graphs of the off step are built beside SGLang's, the memory they take is logged, and the
start-up line says which path is live. A problem found there stops the scheduler with the reason
(``on_install_failure="refuse"``, default) or is logged as an error and SGLang runs unchanged (``"warn"``).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ....errors import ConfigError
from ....policies.compose import OnOffAtDepth
from ....runtime.runtime import AdapterInstallError, AdapterRuntime, check_candidate_steps
from ....runtime.settings import AdapterSettings
from ....runtime.tp import BroadcastSync
from ... import _patch as patching
from ..._patch import HookPlan
from ..._support import installed_version, refuse_or_warn
from ...hidden_window import HiddenWindow
from ..adaptive import SpecPolicyParams, overlap_on, resolve_settings, tp_info
from ..legacy.decode_target import DecodeTarget
from ..legacy.draft_lag import DraftLag
from ..legacy.install import InstallInfo, fitted_window
from ..legacy.swap import KEEP, swapped
from . import step

__all__ = ["InstallError", "InstallInfo", "install", "attach", "hook_plan"]

log = logging.getLogger("specpolicy.sglang.v2")

SUPPORTED_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE")


class InstallError(AdapterInstallError):
    """The adapter cannot run on this engine or configuration; the message says why."""


@dataclass
class _Installed:
    settings: AdapterSettings | None = None
    info: InstallInfo | None = None


_STATE = _Installed()


def _fail(settings: AdapterSettings, reason: str) -> None:
    refuse_or_warn(
        settings.on_install_failure,
        InstallError(reason),
        log,
        refuse=lambda why: InstallError(f"specpolicy cannot run the policy: {why}"),
    )


def hook_plan() -> HookPlan:
    """(class, method, wrapper factory) of every SGLang method the adapter wraps on 0.5.13+."""
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    return [
        (EAGLEWorkerV2, "forward_batch_generation", step.forward_wrapper),
        (EAGLEWorkerV2, "activate_step_by_batch", step.activate_wrapper),
        (EAGLEWorkerV2, "on_verify_complete_cpu", step.feedback_wrapper),
        (EAGLEWorkerV2, "init_cuda_graphs", _init_cuda_graphs_wrapper),
        (Scheduler, "run_batch", step.run_batch_wrapper),
    ]


def install(settings: AdapterSettings | None = None) -> InstallInfo:
    """Patch SGLang's v2 workers and scheduler in this process (see the module docstring). Without
    ``settings`` they are read at attach time: the environment, then the worker's adaptive config."""
    version = installed_version("sglang") or "unknown"
    _STATE.settings = settings
    if _STATE.info is not None and _STATE.info.installed:
        return _STATE.info
    _STATE.info = InstallInfo(version, True, "", patching.apply(hook_plan()))
    return _STATE.info


def _init_cuda_graphs_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def init_cuda_graphs(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, step.ATTR, None) is not None:
            return orig(self, *args, **kwargs)
        settings = _STATE.settings or _config_settings(self)
        if settings is None:  # nothing configured: SGLang runs as without specpolicy
            return orig(self, *args, **kwargs)
        bridge = _bridge(self, settings)  # before SGLang builds the controller's states
        out = orig(self, *args, **kwargs)
        if bridge is not None:
            attach(self, settings, bridge)
        return out

    return init_cuda_graphs


def adaptive_config_path(worker: Any) -> str | None:
    """The worker's ``--speculative-adaptive-config`` (SGLang's resolved spec config, else its args)."""
    try:
        from sglang.srt.runtime_context import get_spec

        path = getattr(get_spec(), "speculative_adaptive_config", None)
    except Exception:
        path = None
    return path or getattr(getattr(worker, "server_args", None), "speculative_adaptive_config", None)


def _config_settings(worker: Any) -> AdapterSettings | None:
    """Settings from the environment, else from the adaptive config; an invalid one stops the scheduler."""
    path = adaptive_config_path(worker)
    try:
        return resolve_settings(path)
    except ConfigError as exc:
        raise ConfigError(f"specpolicy settings in {path or 'the environment'} are invalid:\n{exc}") from None


# ------------------------------------------------------------------------------------------------- attach


def unsupported_reason(worker: Any) -> str | None:
    """Why the adapter cannot drive this worker, or None."""
    from ..legacy.install import parallelism_problems

    sa = worker.server_args
    algo = str(getattr(sa, "speculative_algorithm", None)).upper()
    if algo not in SUPPORTED_ALGORITHMS:
        return (
            f"speculative worker {type(worker).__name__} (algorithm {algo}) is not supported; specpolicy "
            f"drives EAGLEWorkerV2 / StandaloneWorkerV2 with {', '.join(SUPPORTED_ALGORITHMS)}"
        )
    if not getattr(worker, "_hosts_draft", True):
        return "pipeline parallelism is not supported by this adapter"
    for name in ("forward_batch_generation", "activate_step_by_batch", "on_verify_complete_cpu"):
        if not hasattr(getattr(type(worker), name), "__specpolicy_wrapped__"):
            return f"{type(worker).__name__}.{name} overrides the hooked method; this worker is not supported"
    problems = [p for p in parallelism_problems(sa) if "--speculative-adaptive" not in p]
    if problems:
        return problems[0]
    if int(getattr(sa, "speculative_num_steps", 0) or 0) < 1:
        return "speculative_num_steps must be >= 1"
    if getattr(sa, "enable_mixed_chunk", False):
        return "mixed chunked prefill (--enable-mixed-chunk) runs decode requests inside extend batches"
    if getattr(sa, "page_size", 1) not in (None, 1):
        return "paged KV (--page-size > 1) is not covered by the drafter's catch-up"
    if getattr(sa, "speculative_use_rejection_sampling", False):
        return "rejection sampling (--speculative-use-rejection-sampling) is not covered by the catch-up"
    return None


@dataclass(frozen=True)
class Bridge:
    """The policy bridge of one worker, and the state ``attach`` adds to it (the metrics read its totals)."""

    params: SpecPolicyParams
    attached: list[step.V2State]


def settings_problem(settings: AdapterSettings) -> str | None:
    """Settings of the legacy route that this route does not offer."""
    if settings.off_step != "decode":
        return f"off_step={settings.off_step!r}: on SGLang 0.5.13+ the off step is the target's decode"
    if settings.draft_catch_up == "per_step":
        return "draft_catch_up='per_step': on SGLang 0.5.13+ the drafter is caught up on resume (auto, lazy)"
    return None


def _bridge(worker: Any, settings: AdapterSettings) -> Bridge | None:
    """The policy bridge for ``worker``, installed in its adaptive controller when it has one; None (after
    refusing or warning) when the worker is one the adapter cannot drive."""
    reason = unsupported_reason(worker) or settings_problem(settings)
    if reason is not None:
        _fail(settings, reason)
        return None
    launch = int(worker.speculative_num_steps)
    controller = getattr(worker, "adaptive_controller", None)
    # the depths the adaptive config prepares, less 0 (the decode step serves it, never a controller state)
    engine_steps = sorted(set(controller.candidate_steps) - {0}) if controller is not None else [launch]
    policy_steps = sorted(set(settings.policy.candidate_steps()) - {0})
    version = installed_version("sglang") or "unknown"
    rank, world, cpu_group = tp_info()
    overlap = overlap_on(worker)
    path = f"{type(worker).__name__}, {'overlap' if overlap else 'non-overlap'}"
    attached: list[step.V2State] = []  # filled by ``attach``; the metrics read its totals
    try:
        if controller is not None:
            check_candidate_steps(
                policy_steps, engine_steps, where="the candidate steps of --speculative-adaptive-config"
            )
            # states for the policy's depths and the launch depth only: a configured depth the policy
            # never chooses would cost its graphs and backends for nothing
            engine_steps = sorted(set(policy_steps) | {launch})
        runtime = AdapterRuntime(
            settings,
            engine="sglang",
            engine_version=version,
            path=path,
            allowed_steps=sorted({0, *engine_steps}),
            default_steps=launch,
            rank=rank,
            world_size=world,
            sync_factory=(lambda: BroadcastSync(cpu_group)) if cpu_group is not None else None,
            header={"off_step": "decode", "engine_candidate_steps": engine_steps},
            engine_counts=lambda: attached[0].engine_counts() if attached else {},
            model=getattr(getattr(worker, "server_args", None), "model_path", None),
            drafter=getattr(getattr(worker, "server_args", None), "speculative_draft_model_path", None),
            wrap=None if controller is not None else (lambda p: OnOffAtDepth(p, launch)),
        )
    except AdapterInstallError as exc:
        _fail(settings, str(exc))
        return None
    params = SpecPolicyParams(runtime, launch, engine_candidates=engine_steps)
    if controller is not None:
        controller.params = params  # its states are built for ``engine_steps`` only: depth 0 is ours
    return Bridge(params, attached)


def attach(worker: Any, settings: AdapterSettings, bridge: Bridge) -> step.V2State | None:
    """Build the off step's machinery for ``worker`` (after SGLang captured its graphs) and attach it."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    sa = worker.server_args
    standalone = str(sa.speculative_algorithm).upper() == "STANDALONE"
    capture = CaptureHiddenMode.NULL if standalone else CaptureHiddenMode.FULL
    mr = worker.target_worker.model_runner
    params = bridge.params
    free_before = _free_gpu_bytes(mr)
    try:
        decode = build_decode_target(mr, graphs=_graphs_on(sa), capture_hidden_mode=capture)
        window = None if standalone else _hidden_window(worker, settings)
    except Exception as exc:
        params.close()
        _fail(settings, f"cannot build the decode off step: {type(exc).__name__}: {exc}")
        return None
    free_after = _free_gpu_bytes(mr)
    controller = getattr(worker, "adaptive_controller", None)
    st = step.V2State(
        params=params,
        decode=decode,
        lag=DraftLag(window),
        launch=int(worker.speculative_num_steps),
        topk=int(getattr(worker, "topk", 1) or 1),
        capture_hidden_mode=capture,
        controller=controller,
    )
    setattr(worker, step.ATTR, st)
    bridge.attached.append(st)
    rt = params.runtime
    memory = _memory_line(free_before, free_after, window)
    depths = sorted(set(rt.candidate_steps))
    line = (
        f"{rt.startup_line()} | live path: {rt.path} | off = target decode ({decode.mode}), drafter skipped"
        f" and caught up on resume | depths {depths} ({'adaptive controller' if controller else 'on/off at'}"
        f" launch depth {st.launch}) | {memory}"
    )
    if rt.rank == 0:
        log.info(line)
    else:
        log.debug(line)
    return st


def _graphs_on(sa: Any) -> bool:
    try:
        from sglang.srt.model_executor.cuda_graph_config import Backend, Phase, check_cuda_graph_backend

        return not check_cuda_graph_backend(Phase.DECODE, Backend.DISABLED)
    except Exception:
        return not bool(getattr(sa, "disable_cuda_graph", False))


def build_decode_target(model_runner: Any, *, graphs: bool, capture_hidden_mode: Any) -> DecodeTarget:
    """The target's decode attention backend and, if ``graphs``, its decode CUDA graphs (0.5.13+).

    Built with the runner's ``spec_algorithm`` set to NONE for the duration, which is what a
    speculation-free engine's runner sees (SGLang's backends and graph runner choose verify shapes for a
    speculative one); a graph runner that must return hidden states (EAGLE) is captured with them. The
    server args are read-only once resolved (0.5.13+ raises on assignment), so the graph runner reads a
    private copy that asks for the hidden states; the engine's own record is never written."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    mr = model_runner
    hidden = capture_hidden_mode == CaptureHiddenMode.FULL
    restore = (
        (mr, "spec_algorithm", SpeculativeAlgorithm.NONE),
        (mr, "attn_backend", KEEP),  # building and capturing install their own: put the launch ones back
        (mr, "decode_cuda_graph_runner", KEEP),
        (mr, "init_new_workspace", KEEP),
    )
    with swapped(restore):
        attn = mr._get_attention_backend(init_new_workspace=True)
        runner = None
        if graphs:
            with _full_hidden_states(mr) if hidden else contextlib.nullcontext():
                runner = DecodeCudaGraphRunner(mr, attn_backend=attn)
        return DecodeTarget(attn, runner, capture_hidden_mode, graph_attr="decode_cuda_graph_runner")


def _full_hidden_states(model_runner: Any) -> contextlib.AbstractContextManager[Any]:
    """The server's return-hidden-states mode as FULL for a block: a graph runner reads it once, at
    construction, for the hidden-state mode its graphs capture (``"last"`` would capture LAST, and a
    replay asking for FULL then raises). The resolved config is read-only, so nothing of the engine's is
    written: where SGLang reads the mode off the runner's server args (0.5.17, and releases without the
    reader), the runner holds a private copy for the block; where it reads the config's features (0.5.23),
    those are overridden for it."""
    import inspect

    from sglang.srt.model_executor import forward_batch_info as fbi

    reader = getattr(fbi, "get_server_return_hidden_states_mode", None)
    if reader is None or inspect.signature(reader).parameters:
        args = copy.copy(model_runner.server_args)
        object.__setattr__(args, "enable_return_hidden_states", True)  # past ServerArgs' read-only guard
        if hasattr(args, "return_hidden_states_mode"):
            object.__setattr__(args, "return_hidden_states_mode", None)
        return swapped(((model_runner, "server_args", args),))
    from sglang.srt.runtime_context import get_exec

    features: Any = get_exec().features
    return features.override(enable_return_hidden_states=True, return_hidden_states_mode=None)  # type: ignore[no-any-return]


def _hidden_window(worker: Any, settings: AdapterSettings) -> HiddenWindow:
    """The target's hidden states of each request's off positions, one row per request-pool slot, as wide
    as the drafter reads them (EAGLE-3: its auxiliary layers concatenated)."""
    import torch
    from sglang.srt.speculative.eagle_utils import get_draft_input_from_target_hidden_dim

    req_to_token = worker.req_to_token_pool.req_to_token
    cfg = worker.target_worker.model_runner.model_config
    rows = int(req_to_token.shape[0])
    width = int(get_draft_input_from_target_hidden_dim(worker.draft_worker.draft_runner))
    window = settings.draft_catch_up_window
    if settings.draft_catch_up == "auto":
        itemsize = torch.empty((), dtype=cfg.dtype).element_size()
        free = _free_gpu_bytes(worker.target_worker.model_runner)
        window = fitted_window(window, rows=rows, width=width, itemsize=itemsize, free=free)
    return HiddenWindow(rows=rows, window=window, width=width, dtype=cfg.dtype, device=req_to_token.device)


def _free_gpu_bytes(model_runner: Any) -> int | None:
    import torch

    device = torch.device(getattr(model_runner, "device", "cpu"))
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


def _memory_line(before: int | None, after: int | None, window: HiddenWindow | None) -> str:
    """What the off step's start-up took in GPU memory (the KV pool was sized before it)."""
    parts = []
    if before is not None and after is not None:
        parts.append(f"decode graphs and backend {max(before - after, 0) / 2**20:.0f} MiB")
    if window is not None:
        parts.append(f"hidden-state window {window.window} positions, {window.nbytes / 2**20:.0f} MiB")
    return "GPU memory: " + (", ".join(parts) if parts else "not measured (no CUDA device)")
