"""What a launcher must do to run specpolicy on a legacy SGLang release (``prepare_launch``).

Two routes reach the spawned scheduler processes, where the worker lives:

* 0.5.12.post1: SGLang's plugin entry point (``sglang.srt.plugins``) loads specpolicy's plugin in every
  scheduler process, and the plugin calls ``install``. Works however SGLang is launched.
* 0.5.10.post1 (no plugin framework): a custom ``run_scheduler_process_func`` (``Engine`` class attribute and
  ``launch_server`` keyword since 0.5.7). Chosen over a ``.pth`` file because it touches only the processes
  the launcher starts: a ``.pth`` runs in every Python process of the environment and must be written into
  site-packages outside pip's control. The scheduler function is also handed out on 0.5.12.post1 (``install``
  is idempotent), so the launcher can treat both releases alike.

Both routes read the settings from the environment the children inherit (``AdapterSettings.to_env``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ....runtime.settings import AdapterSettings
from ..releases import layout_for, legacy_releases
from .install import SUPPORTED_ALGORITHMS, InstallError, parallelism_problems, sglang_version
from .scheduler_entry import run_scheduler_process

__all__ = ["LegacyLaunch", "prepare_launch", "server_args_problems"]


@dataclass(frozen=True)
class LegacyLaunch:
    """Do all of it before launching: ``os.environ.update(plan.env)``; pass ``run_scheduler_process_func`` to
    ``sglang.srt.entrypoints.http_server.launch_server(server_args, run_scheduler_process_func=...)`` or set
    ``sglang.Engine.run_scheduler_process_func = staticmethod(plan.run_scheduler_process_func)``."""

    version: str
    env: dict[str, str]
    run_scheduler_process_func: Callable[..., Any]
    route: str  # "plugin+scheduler-func" (0.5.12.post1) or "scheduler-func" (0.5.10.post1)
    warnings: tuple[str, ...] = ()


def server_args_problems(server_args: Any) -> list[str]:
    """Reasons the adapter cannot run with these (parsed) SGLang server arguments; empty when it can."""
    out: list[str] = []
    algo = getattr(server_args, "speculative_algorithm", None)
    if algo is None:
        out.append("no --speculative-algorithm: speculative decoding is off, there is nothing to control")
    elif str(algo).upper() not in SUPPORTED_ALGORITHMS:
        out.append(
            f"--speculative-algorithm {algo} is not supported; use one of {', '.join(SUPPORTED_ALGORITHMS)}"
        )
    return out + parallelism_problems(server_args)


def prepare_launch(settings: AdapterSettings, server_args: Any = None) -> LegacyLaunch:
    """Validate in the launching process and say what to do; InstallError with the reason if it cannot run.

    With ``settings.on_install_failure == "warn"`` problems are returned in ``warnings`` instead of raised.
    """
    version = sglang_version()
    row = layout_for(version)  # a tested release's own row, or the row whose code layout it has
    problems: list[str] = []
    if row is None or row.route != "legacy" or (row.version != version and not settings.allow_untested):
        problems.append(
            f"sglang {version} is not supported by the legacy adapter; "
            f"supported: {', '.join(r.version for r in legacy_releases())}"
        )
    if server_args is not None:
        problems.extend(server_args_problems(server_args))
    if problems and settings.on_install_failure == "refuse":
        raise InstallError("; ".join(problems))
    route = "plugin+scheduler-func" if row is not None and row.plugins else "scheduler-func"
    return LegacyLaunch(version, settings.to_env(), run_scheduler_process, route, tuple(problems))
