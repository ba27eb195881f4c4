"""pydantic's plugin loader, run once under a guard before specpolicy defines its first model.

pydantic (2.x) looks for its own plugins (entry-point group ``pydantic``) the first time a model class is
built, reading the ``entry_points.txt`` of every installed distribution. One malformed file anywhere, in a
package that has nothing to do with pydantic, makes that lookup raise, and with it ``import specpolicy``
and every command. Its loader marks the lookup as done before it reads the first distribution, so after
one failed call the plugins loaded until then stay in effect and later model classes are built normally:
this module makes that first call itself, catches the failure and logs it once. ``PYDANTIC_DISABLE_PLUGINS``
(pydantic's own setting) is respected as it is: with it set, no lookup happens.
"""

from __future__ import annotations

import logging

from .errors import short_str

__all__ = ["load_pydantic_plugins"]

log = logging.getLogger("specpolicy.policy")


def load_pydantic_plugins() -> str | None:
    """Run pydantic's plugin lookup; the reason it failed (logged), or None when it did not."""
    try:
        from pydantic.plugin._loader import get_plugins
    except Exception:  # noqa: BLE001 - another pydantic layout: nothing to guard
        return None
    try:
        get_plugins()
    except Exception as exc:  # noqa: BLE001 - some installed distribution's metadata cannot be parsed
        reason = f"{type(exc).__name__}: {short_str(exc)}"
        log.warning(
            "specpolicy: pydantic's plugin lookup failed (%s): an installed package's entry_points.txt "
            "cannot be parsed; pydantic plugins found before it stay loaded, the rest are not",
            reason,
        )
        try:
            get_plugins()  # the lookup is marked done: this call must not raise any more
        except Exception:  # noqa: BLE001 - a pydantic whose loader retries: say so, models may still fail
            log.warning(
                "specpolicy: pydantic retries its plugin lookup; set PYDANTIC_DISABLE_PLUGINS=__all__"
            )
        return reason
    return None


load_pydantic_plugins()
