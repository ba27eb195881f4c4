"""The ``vllm.general_plugins`` entry point: fail a bad policy configuration in the front-end process.

vLLM builds the scheduler only after the model weights are loaded and the KV cache is profiled, minutes into
start-up on a large model. The entry point runs in every vLLM process much earlier (the front-end loads it
while constructing ``EngineArgs``), so it checks the configuration there: the ``SPECPOLICY_*`` environment at
once, and the finished ``VllmConfig`` right after ``EngineArgs.create_engine_config`` (the same checks the
scheduler repeats in the engine core). A bad configuration raises with the field named before any engine
process starts. Nothing happens when the engine does not use the specpolicy scheduler.

``register`` also installs the drafter hooks the release's row names (``runner_hooks``: ``drafter_depth``
where the V2 drafter ignores the per-step depth, ``off_drafter`` / ``off_eagle`` for no drafter forward at
depth 0); the worker processes load the plugins before they build the model runner, so they are in place
there.

vLLM loads plugins once per process but may import this module in many processes; ``register`` is idempotent.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from ...errors import ConfigError
from ...runtime.settings import AdapterSettings
from .config import uses_specpolicy_scheduler

__all__ = ["register", "check_engine_config"]

log = logging.getLogger("vllm.specpolicy")

_GUARD = "_specpolicy_guard"


def register() -> None:
    """Validate the environment's settings and install the front-end configuration check."""
    try:
        AdapterSettings.from_env()
    except ConfigError as exc:
        raise ConfigError(f"specpolicy: invalid configuration in the environment:\n{exc}") from None
    _install_drafter_hooks()
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:  # a process without the engine front-end: nothing to guard
        return
    original = EngineArgs.create_engine_config
    if getattr(original, _GUARD, False):
        return

    @functools.wraps(original)
    def create_engine_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        config = original(self, *args, **kwargs)
        check_engine_config(config)
        return config

    setattr(create_engine_config, _GUARD, True)
    EngineArgs.create_engine_config = create_engine_config


def _install_drafter_hooks() -> None:
    from . import runner_hooks
    from .versions import installed_version

    version = installed_version()
    which = runner_hooks.pieces(version)
    if not which.any:
        return
    try:
        names = runner_hooks.install(version)
    # a process that cannot load the GPU model runner does not run it; without Triton, 0.34's drafter
    # modules fail at import with an AttributeError from vLLM's Triton placeholder
    except (ImportError, AttributeError) as exc:
        missing = [
            "its drafter drafts num_speculative_tokens tokens whatever the policy's depth"
            if which.depth
            else "",
            "its drafters still run their first pass at depth 0" if which.lag else "",
        ]
        log.warning(
            "specpolicy: vLLM %s's V2 model runner cannot be loaded here (%s); if this process runs it, %s",
            version,
            exc,
            " and ".join(m for m in missing if m),
        )
        return
    log.debug("specpolicy: drafter hooks on %s", names)


def check_engine_config(vllm_config: Any) -> None:
    """Run the start-up checks on a finished VllmConfig using the specpolicy scheduler; raise on failure."""
    if not uses_specpolicy_scheduler(vllm_config.scheduler_config.scheduler_cls):
        return
    from .checks import preflight
    from .versions import installed_version

    pre = preflight(vllm_config, installed_version())
    if pre is None:
        return
    for w in pre.warnings:
        log.warning("specpolicy: %s", w)
    log.info(
        "specpolicy: configuration checked (vLLM %s, %s): %s candidate_steps=%s",
        pre.facts.version,
        pre.facts.path(),
        pre.settings.summary(),
        list(pre.settings.policy.candidate_steps()),
    )
