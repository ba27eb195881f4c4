"""Installing the legacy hooks in a scheduler process; attaching a policy to the worker SGLang builds there.

``install`` patches classes (idempotent; nothing happens per step until a worker is attached). The scheduler's
``maybe_init_draft_worker`` then calls ``attach``, which checks that the live worker is one we support, builds
the one-token target state, the policy, the controller and the rank agreement, and logs the live path. A
problem found there either stops the scheduler with the reason (``on_install_failure="refuse"``, default) or
is logged as an error and the worker runs SGLang's own speculation untouched (``"warn"``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ....errors import ConfigError
from ....runtime.settings import AdapterSettings
from ....runtime.tp import BroadcastSync
from ..._patch import HookPlan, apply
from ..._support import installed_version
from ...hidden_window import HiddenWindow
from ..releases import layout_for, legacy_releases
from . import hooks
from .decode_target import build_decode_target
from .draft_lag import DraftLag
from .gpu_timer import GpuStepTimer
from .off_path import OffPath
from .one_token import FieldNames, build_one_token_target, sizes_only_target
from .runtime import PATH_LABELS, StepRuntime, make_runtime
from .targets import check_targets

__all__ = ["InstallError", "InstallInfo", "install", "attach", "sglang_version"]

log = logging.getLogger("specpolicy.sglang.legacy")

SUPPORTED_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE")


class InstallError(RuntimeError):
    """The adapter cannot run on this engine or configuration; the message says why and what is supported."""


@dataclass
class InstallInfo:
    """What ``install`` did in this process."""

    version: str
    installed: bool
    reason: str = ""
    patched: list[str] = field(default_factory=list)


@dataclass
class _State:
    settings: AdapterSettings | None = None
    names: FieldNames | None = None
    info: InstallInfo | None = None


_STATE = _State()


def sglang_version() -> str:
    version = installed_version("sglang")
    if version is None:
        raise InstallError("sglang is not installed in this Python")
    return version


def _fail(settings: AdapterSettings, reason: str) -> str:
    if settings.on_install_failure == "refuse":
        raise InstallError(reason)
    log.error("specpolicy: NOT ACTIVE, SGLang runs its own speculation unchanged: %s", reason)
    return reason


def install(settings: AdapterSettings | None = None) -> InstallInfo:
    """Patch SGLang's legacy workers and scheduler in this process (see the package docstring)."""
    if settings is None:
        settings = AdapterSettings.from_env()
        if settings is None:
            raise ConfigError("policy: missing (pass settings, or set SPECPOLICY_POLICY / SPECPOLICY_CONFIG)")
    version = sglang_version()
    if _STATE.info is not None and _STATE.info.installed:
        _STATE.settings = settings
        return _STATE.info
    row = layout_for(version)  # a tested release's own row, or the row whose code layout it has
    table = row.version if row is not None and row.route == "legacy" else None
    if table != version:
        supported = ", ".join(r.version for r in legacy_releases())
        reason = f"sglang {version} is not supported by the legacy adapter; supported: {supported}"
        if table is None:
            return InstallInfo(version, False, _fail(settings, reason + " (no legacy hook table fits it)"))
        if not settings.allow_untested:
            return InstallInfo(version, False, _fail(settings, reason + " (allow_untested overrides)"))
        log.warning(
            "specpolicy: UNTESTED: %s; using the %s hook table because allow_untested is set", reason, table
        )
    problems = check_targets(table)
    if problems:
        return InstallInfo(
            version, False, _fail(settings, "hook targets do not match:\n  " + "\n  ".join(problems))
        )
    names = FieldNames.detect()
    patched = _patch(table, names)
    _STATE.settings, _STATE.names = settings, names
    _STATE.info = InstallInfo(version, True, "", patched)
    return _STATE.info


def _patch(version: str, names: FieldNames) -> list[str]:
    return apply(hook_plan(version, names))


def hook_plan(version: str, names: FieldNames) -> HookPlan:
    """(class, method, wrapper factory) of every SGLang method the adapter wraps on this release."""
    from sglang.srt.managers.overlap_utils import FutureMap
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.speculative.eagle_worker import EAGLEWorker
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2

    row = layout_for(version)
    assert row is not None and row.overlap_resolve is not None
    resolve_name = row.overlap_resolve
    return [
        (EAGLEWorker, "forward_batch_generation", lambda o: hooks.v1_forward(o, names)),
        (EAGLEWorker, "draft", lambda o: hooks.v1_draft(o, names)),
        (EAGLEWorker, "verify", hooks.v1_verify),
        (EAGLEWorkerV2, "forward_batch_generation", hooks.v2_forward),
        (EAGLEWorkerV2, "verify", lambda o: hooks.v2_verify(o, names)),
        (EagleDraftWorker, "draft", lambda o: hooks.v2_draft(o, names)),
        (Scheduler, "run_batch", hooks.scheduler_run_batch),
        (Scheduler, "maybe_init_draft_worker", lambda o: hooks.scheduler_init_draft(o, attach)),
        # On Scheduler itself: the method is inherited from the output-processor mixin.
        (Scheduler, resolve_name, lambda o: hooks.v2_resolve(o, names)),
        (FutureMap, "store_to_map_for_new_batch", lambda o: hooks.future_store(o, names)),
        (FutureMap, "resolve_future", lambda o: hooks.future_resolve(o, names)),
    ]


# ------------------------------------------------------------------------------------------------- attach


def _worker_path(worker: Any) -> str | None:
    from sglang.srt.speculative.eagle_worker import EAGLEWorker
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    if isinstance(worker, EAGLEWorkerV2):
        return "v2"
    if isinstance(worker, EAGLEWorker):
        return "v1"
    return None


def parallelism_problems(server_args: Any) -> list[str]:
    """What the adapter refuses beside the algorithm, checked in the launching process
    (``launch.server_args_problems``) and again in the scheduler (``attach``): one list for both."""
    out: list[str] = []
    if getattr(server_args, "enable_dp_attention", False):
        out.append("attention data parallelism (--enable-dp-attention) is not supported by this adapter")
    if getattr(server_args, "pp_size", 1) > 1:
        out.append("pipeline parallelism (--pp-size > 1) is not supported by this adapter")
    if getattr(server_args, "speculative_adaptive", False):
        out.append(
            "--speculative-adaptive conflicts with specpolicy: SGLang's own adaptive controller and "
            "specpolicy would both switch the draft depth"
        )
    return out


def _unsupported_reason(scheduler: Any, worker: Any, path: str | None) -> str | None:
    sa = scheduler.server_args
    algo = str(getattr(sa, "speculative_algorithm", None))
    if worker is None:
        return "speculative decoding is off in this server (no --speculative-algorithm): nothing to control"
    if path is None or algo.upper() not in SUPPORTED_ALGORITHMS:
        return (
            f"speculative worker {type(worker).__name__} (algorithm {algo}) is not supported; the legacy "
            f"adapter drives EAGLEWorker / EAGLEWorkerV2 with {', '.join(SUPPORTED_ALGORITHMS)}"
        )
    methods = ("forward_batch_generation", "verify") + (("draft",) if path == "v1" else ())
    for name in methods:
        if not hasattr(getattr(type(worker), name), "__specpolicy_wrapped__"):
            return f"{type(worker).__name__}.{name} overrides the hooked method; this worker is not supported"
    if path == "v2" and not hasattr(type(worker.draft_worker).draft, "__specpolicy_wrapped__"):
        return f"{type(worker.draft_worker).__name__}.draft overrides the hooked method; not supported"
    problems = parallelism_problems(sa)
    if problems:
        return problems[0]
    if getattr(sa, "speculative_num_steps", 0) < 1:
        return "speculative_num_steps must be >= 1"
    return None


def _lazy_draft(settings: AdapterSettings, sa: Any) -> tuple[bool, str]:
    """Whether off steps may skip the drafter (see ``draft_lag``), and why not when they may not.

    ``auto`` is lazy for every drafter: measured live, the EAGLE off step without its per-step draft extend
    is as fast or faster (docs/results/methodology.md), and the catch-up keeps acceptance exact."""
    if settings.draft_catch_up == "per_step":
        return False, "configured"
    if getattr(sa, "enable_mixed_chunk", False):
        return False, "mixed chunked prefill runs decode requests inside extend batches"
    if getattr(sa, "page_size", 1) not in (None, 1):
        return False, "paged KV (page_size > 1) is not covered by the catch-up"
    return True, ""


def build_off_path(worker: Any, sa: Any, settings: AdapterSettings, names: FieldNames) -> OffPath:
    """The off step's machinery: a decode target (falling back to the one-token verify) and the draft
    catch-up mode. Called once per worker at start-up."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    mr = worker.target_worker.model_runner
    graphs = not getattr(sa, "disable_cuda_graph", False)
    algo = str(getattr(sa, "speculative_algorithm", "")).upper()
    capture = CaptureHiddenMode.NULL if algo == "STANDALONE" else CaptureHiddenMode.FULL
    decode = None
    if settings.off_step == "decode":
        try:
            decode = build_decode_target(mr, sa, graphs=graphs, capture_hidden_mode=capture)
        except Exception as exc:
            log.warning(
                "specpolicy: cannot build the decode off step (%s: %s); off steps run the one-token verify",
                type(exc).__name__,
                exc,
                exc_info=True,
            )
    sizes = sizes_only_target(mr, sa) if decode is not None else build_one_token_target(mr, sa, graphs=graphs)
    lazy, why = _lazy_draft(settings, sa) if decode is not None else (False, "one-token verify off step")
    window, draft_hidden = None, None
    if lazy and algo != "STANDALONE":
        try:
            window = _hidden_window(
                worker, settings.draft_catch_up_window, fit=settings.draft_catch_up == "auto"
            )
            draft_hidden = _draft_hidden(worker)
        except Exception as exc:
            if settings.draft_catch_up == "lazy":  # asked for explicitly: refuse (or warn) at start-up
                raise
            # auto: the per-step extend needs none of this and is exact too, only slower while off
            lazy, window, why = False, None, ""
            log.warning(
                "specpolicy: off steps run a one-token draft extend: no hidden-state window (%s: %s)",
                type(exc).__name__,
                exc,
            )
    if not lazy and why:
        log.info("specpolicy: off steps run a one-token draft extend: %s", why)
    return OffPath(
        names=names,
        sizes=sizes,
        decode=decode,
        lag=DraftLag(window) if lazy else None,
        topk=int(getattr(worker, "topk", 1) or 1),
        draft_hidden=draft_hidden,
    )


def _draft_runner(worker: Any) -> Any:
    dw = getattr(worker, "draft_worker", None)  # v2 keeps its draft model in a draft worker
    return dw.draft_runner if dw is not None else worker.draft_model_runner


def _target_hidden_width(worker: Any) -> int:
    """The width of the hidden states the target's decode returns for the drafter (EAGLE-3: its
    auxiliary layers concatenated), as SGLang computes it for its own draft extend input."""
    from sglang.srt.speculative import eagle_info

    dw = getattr(worker, "draft_worker", None) or worker  # v2: the draft worker knows the aux layers
    extend_cls = getattr(eagle_info, "EagleDraftExtendInput", None)
    if extend_cls is not None and hasattr(extend_cls, "hidden_size_for"):  # 0.5.12.post1
        width = extend_cls.hidden_size_for(dw)
        if width:
            return int(width)
    cfg = dw.target_worker.model_runner.model_config
    aux = dw.speculative_algorithm.is_eagle3() and getattr(dw, "eagle_use_aux_hidden_state", False)
    return int(cfg.hidden_size) * (3 if aux else 1)  # 0.5.10.post1's EAGLEWorker rule


#: ``auto``: the hidden-state window takes at most this share of the GPU memory free when the worker is
#: attached (SGLang has sized its KV pool by then); a window that does not fit is shortened, and below
#: ``_MIN_AUTO_WINDOW`` positions (a catch-up every few off steps) the per-step extend runs instead.
_WINDOW_FREE_SHARE = 0.1
_MIN_AUTO_WINDOW = 4


def fitted_window(window: int, *, rows: int, width: int, itemsize: int, free: int | None) -> int:
    """The positions per request an ``auto`` window keeps: ``window``, or fewer where its buffer would take
    more than ``_WINDOW_FREE_SHARE`` of ``free`` bytes (None: unknown, off CUDA); MemoryError below
    ``_MIN_AUTO_WINDOW``."""
    if free is None:
        return window
    per_position = rows * width * itemsize
    fits = int(free * _WINDOW_FREE_SHARE) // per_position
    if fits >= window:
        return window
    if fits < _MIN_AUTO_WINDOW:
        raise MemoryError(
            f"{_MIN_AUTO_WINDOW} positions of {rows} x {width} x {itemsize} bytes need"
            f" {_MIN_AUTO_WINDOW * per_position / 2**20:.1f} MiB, more than {_WINDOW_FREE_SHARE:.0%} of the"
            f" {free / 2**20:.0f} MiB free"
        )
    log.info(
        "specpolicy: the hidden-state window keeps %d positions per request, not %d: %d would take more than"
        " %.0f%% of the %.0f MiB of GPU memory free",
        fits,
        window,
        window,
        100 * _WINDOW_FREE_SHARE,
        free / 2**20,
    )
    return fits


def _free_gpu_bytes(device: Any) -> int | None:
    import torch

    if torch.device(device).type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


def _hidden_window(worker: Any, window: int, *, fit: bool) -> HiddenWindow:
    """The buffer for the target's hidden states while off: one row per request-pool slot; ``fit``
    (``auto``) shortens it to what the free GPU memory allows (``fitted_window``)."""
    import torch

    req_to_token = worker.req_to_token_pool.req_to_token
    cfg = worker.target_worker.model_runner.model_config
    rows, width = int(req_to_token.shape[0]), _target_hidden_width(worker)
    if fit:
        itemsize = torch.empty((), dtype=cfg.dtype).element_size()
        free = _free_gpu_bytes(req_to_token.device)
        window = fitted_window(window, rows=rows, width=width, itemsize=itemsize, free=free)
    return HiddenWindow(rows=rows, window=window, width=width, dtype=cfg.dtype, device=req_to_token.device)


def _draft_hidden(worker: Any) -> tuple[int, Any]:
    """Width and dtype of the drafter's own hidden state (what its draft steps read)."""
    cfg = _draft_runner(worker).model_config
    width = getattr(cfg, "spec_hidden_size", None) or cfg.hidden_size
    return int(width), cfg.dtype


def _gpu_timer(worker: Any) -> GpuStepTimer | None:
    """CUDA-event step timing for the overlap worker (None off CUDA: the wall clock is used instead)."""
    import torch

    device = torch.device(getattr(worker, "device", "cpu"))
    if device.type != "cuda":
        return None
    module = torch.get_device_module(device)
    return GpuStepTimer(lambda: module.Event(enable_timing=True))


def _tp_sync() -> BroadcastSync:
    from sglang.srt.distributed import get_tp_group

    return BroadcastSync(get_tp_group().cpu_group)


def attach(scheduler: Any) -> StepRuntime | None:
    """Give the freshly built speculative worker a policy runtime (called by the scheduler hook)."""
    settings = _STATE.settings
    names = _STATE.names
    if settings is None or names is None:
        return None
    worker: Any = getattr(scheduler, "draft_worker", None)
    path = _worker_path(worker) if worker is not None else None
    reason = _unsupported_reason(scheduler, worker, path)
    if reason is not None:
        _fail(settings, reason)
        return None
    assert path is not None
    sa = worker.server_args
    rank = int(getattr(scheduler, "tp_rank", 0))
    world = int(getattr(sa, "tp_size", 1))
    launch = int(worker.speculative_num_steps)
    try:
        off = build_off_path(worker, sa, settings, names)
    except Exception as exc:
        _fail(settings, f"cannot build the off-step state: {type(exc).__name__}: {exc}")
        return None
    cfg = settings.policy
    runtimes: list[StepRuntime] = []  # filled below; the metrics read the totals of the runtime once built
    rt = make_runtime(
        settings,
        launch_depth=launch,
        path=path,  # type: ignore[arg-type]
        engine_version=_STATE.info.version if _STATE.info else sglang_version(),
        rank=rank,
        world_size=world,
        sync_factory=_tp_sync,
        header={"off_step": off.label},
        engine_counts=lambda: off.counts(runtimes[0]) if runtimes else {},
        model=getattr(sa, "model_path", None),
        drafter=getattr(sa, "speculative_draft_model_path", None),
        gpu_timer=_gpu_timer(worker) if path == "v2" and settings.step_clock == "auto" else None,
    )
    art = rt.runtime
    runtimes.append(rt)
    setattr(worker, hooks.OT, off)
    setattr(worker, hooks.RT, rt)
    worker._specpolicy_runtime = art
    if path == "v2":
        setattr(worker.draft_worker, hooks.RT, rt)
    mapped = sorted({0 if k == 0 else launch for k in cfg.candidate_steps()})
    log.info(
        "%s | live path: %s | legacy release: policy depths %s run as %s (on = launch depth %d; off = %s)",
        art.startup_line(),
        PATH_LABELS[path],
        list(art.candidate_steps),
        mapped,
        launch,
        off.label,
    )
    return rt
