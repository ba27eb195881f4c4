"""The ``sglang.srt.plugins`` entry point (SGLang 0.5.11+ loads it in every process, schedulers included).

Scheduler processes are spawned, so a patch made in the launching process never reaches them; the entry point
does, because SGLang's ``load_plugins()`` runs at the top of every scheduler process. ``register`` checks the
installed release and hands over to the hook module for it. With specpolicy installed but not configured (no
``SPECPOLICY_*`` variable, no ``"specpolicy"`` key in the adaptive config) the hooks find nothing to do and
SGLang runs exactly as without it. On 0.5.13+ the hooks are installed even then, because the adaptive config
(read when the worker is built) may carry the settings; on legacy releases only for a configured policy.
"""

from __future__ import annotations

import logging

from ...errors import ConfigError
from ...runtime.settings import AdapterSettings
from .._support import refuse_or_warn
from .versions import UnsupportedVersion, check_version, installed_version, route_for

__all__ = ["register"]

log = logging.getLogger("specpolicy.sglang")


def register() -> None:
    """Install the hooks for the installed SGLang release in this process."""
    try:
        settings = AdapterSettings.from_env()
    except ConfigError as exc:
        # Raised as SystemExit: SGLang's plugin loader swallows exceptions, and a misconfigured policy must
        # stop the server rather than let it serve without the policy the user asked for.
        raise SystemExit(f"specpolicy: invalid configuration in the environment:\n{exc}") from None
    version = installed_version()
    try:
        version = check_version(version, allow_untested=bool(settings and settings.allow_untested))
    except UnsupportedVersion as exc:
        if settings is None:
            log.info("specpolicy: plugin inactive: %s", exc)
            return
        _refuse_or_warn(settings, exc)
        return
    if route_for(version) == "v2":
        from . import v2

        try:
            v2.install(settings)  # None: the adaptive config may carry them (resolved at attach time)
        except Exception as exc:  # the plugin loader would swallow it
            if settings is None:
                log.error("specpolicy: NOT ACTIVE, cannot install the hooks: %s", exc)
                return
            _refuse_or_warn(settings, exc)
        return
    if settings is None:
        return  # the legacy hooks are installed only for a configured policy
    from . import legacy

    try:
        legacy.install(settings)
    except Exception as exc:  # InstallError with the reason; the plugin loader would swallow it
        _refuse_or_warn(settings, exc)


def _refuse_or_warn(settings: AdapterSettings, exc: Exception) -> None:
    # SystemExit, because SGLang's plugin loader swallows exceptions
    refuse_or_warn(
        settings.on_install_failure,
        exc,
        log,
        refuse=lambda why: SystemExit(f"specpolicy: refusing to start: {why}"),
    )
