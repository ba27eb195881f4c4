"""Where the vLLM adapter's settings come from: ``--additional-config`` first, then the environment.

vLLM rejects unknown keys in ``--speculative-config`` and offers plugins no CLI flags, but it carries
``--additional-config`` (a JSON object) into every process inside ``VllmConfig``. The adapter reads its
section, ``{"specpolicy": {"policy": ..., "trace_path": ..., ...}}`` (the ``AdapterSettings`` fields), or the
shorthand ``{"specpolicy": "hysteresis"}``. Without that key it falls back to ``SPECPOLICY_CONFIG`` /
``SPECPOLICY_POLICY`` and friends, which multiprocess and Ray workers inherit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...config_files import loads_json_object
from ...errors import ConfigError
from ...runtime.settings import ENV_CONFIG, ENV_POLICY, AdapterSettings

__all__ = ["SECTION", "SCHEDULER_CLS", "settings_from", "uses_specpolicy_scheduler"]

#: The key of the adapter's section in ``--additional-config``.
SECTION = "specpolicy"
#: What users pass to ``--scheduler-cls``.
SCHEDULER_CLS = "specpolicy.adapters.vllm.Scheduler"


def settings_from(additional_config: Any, environ: Mapping[str, str] | None = None) -> AdapterSettings | None:
    """The adapter settings of one engine configuration, or None when none are given anywhere.

    Raises ConfigError naming the field (``additional_config.specpolicy.policy.<name>.<field>: ...``).
    """
    section = additional_config.get(SECTION) if isinstance(additional_config, Mapping) else None
    if section is None:
        try:
            return AdapterSettings.from_env(environ)
        except ConfigError as exc:
            raise ConfigError(f"environment ({ENV_CONFIG} / {ENV_POLICY} ...):\n{exc}") from None
    prefix = f"additional_config.{SECTION}."
    if isinstance(section, str):
        text = section.strip()
        if text.startswith("{"):
            section = loads_json_object(text, prefix.rstrip("."))
        else:
            section = {"policy": text}
    if not isinstance(section, Mapping):
        raise ConfigError(
            f'{prefix.rstrip(".")}: must be an object such as {{"policy": "hysteresis"}} or a policy name, '
            f"got {type(section).__name__}"
        )
    try:
        return AdapterSettings.from_mapping(section)
    except ConfigError as exc:
        raise ConfigError("\n".join(prefix + line for line in str(exc).splitlines())) from None


def uses_specpolicy_scheduler(scheduler_cls: object) -> bool:
    """Whether vLLM's ``scheduler_cls`` (a dotted path or a class) is this adapter's scheduler."""
    if isinstance(scheduler_cls, str):
        return scheduler_cls.strip().startswith("specpolicy.adapters.vllm.")
    module = getattr(scheduler_cls, "__module__", "")
    return isinstance(module, str) and module.startswith("specpolicy.adapters.vllm")
