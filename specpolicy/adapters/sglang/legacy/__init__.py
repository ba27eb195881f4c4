"""specpolicy on SGLang's legacy releases 0.5.10.post1 and 0.5.12.post1, v1 (non-overlap) and v2 (overlap).

These releases have no way to skip speculation for a step, so this package implements the off step itself (see
``one_token``): a one-token verify rooted at the last verified token, a target attention backend and CUDA
graph built for it, the draft catch-up at the launch depth, and a result in the shape of a step whose drafts
were all rejected. A policy runs as on/off at the launch depth (``--speculative-num-steps``).

Public API (called by ``specpolicy.adapters.sglang.plugin`` and ``.launch``):

``install(settings=None) -> InstallInfo``
    Call in the scheduler process (the plugin's ``register()`` on 0.5.12.post1; ``scheduler_entry`` on both).
    ``settings`` is an ``AdapterSettings`` (None: ``AdapterSettings.from_env()``). Patches the worker and
    scheduler classes; each scheduler then attaches a policy runtime to the worker it builds and logs the live
    path. Idempotent. Unsupported version, missing hook target or unsupported worker/configuration:
    ``InstallError`` with the reason (``on_install_failure="refuse"``) or an error log and SGLang unchanged
    (``"warn"``). ``allow_untested`` lets other versions try the hook table of the code layout they have
    (``sglang.releases.layout_for``), loudly. Trace, metrics and rank agreement come from the shared
    ``specpolicy.runtime.runtime.AdapterRuntime``.

``prepare_launch(settings, server_args=None) -> LegacyLaunch``
    Call in the launching process, before starting SGLang. Validates the version and (if given) the parsed
    server args, and returns what to do: ``os.environ.update(plan.env)`` and pass
    ``plan.run_scheduler_process_func`` to ``launch_server(..., run_scheduler_process_func=...)`` or set it as
    ``Engine.run_scheduler_process_func`` (required on 0.5.10.post1, harmless on 0.5.12.post1).

``server_args_problems(server_args) -> list[str]``: the configuration checks alone.
"""

from __future__ import annotations

from .install import InstallError, InstallInfo, install, sglang_version
from .launch import LegacyLaunch, prepare_launch, server_args_problems
from .targets import SUPPORTED_VERSIONS

__all__ = [
    "SUPPORTED_VERSIONS",
    "InstallError",
    "InstallInfo",
    "LegacyLaunch",
    "install",
    "prepare_launch",
    "server_args_problems",
    "sglang_version",
]
