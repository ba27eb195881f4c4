"""AdapterSettings: everything an engine adapter needs to know, validated before any engine import.

Engines spawn their worker processes, so a setting must survive the trip: the launcher serialises the
validated settings into ``SPECPOLICY_CONFIG`` (JSON) and every spawned process rebuilds them with
``from_env``. Users who launch the engine their own way set ``SPECPOLICY_POLICY`` (a policy name, JSON object
or file) and, optionally, the ``SPECPOLICY_TRACE`` / ``SPECPOLICY_METRICS`` / ... variables listed in
``ENV_VARS``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, field_validator

from ..config_files import loads_json
from ..errors import ConfigError, format_validation_error
from ..hints import OffRule
from ..policy import PolicyConfig
from ..registry import parse_config

__all__ = [
    "AdapterSettings",
    "ENV_CONFIG",
    "ENV_POLICY",
    "ENV_VARS",
    "OnInstallFailure",
    "TpAgreement",
    "bounds",
]

ENV_CONFIG = "SPECPOLICY_CONFIG"
ENV_POLICY = "SPECPOLICY_POLICY"

#: Single-field environment variables (besides the two above), field name -> variable.
ENV_VARS: dict[str, str] = {
    "trace_path": "SPECPOLICY_TRACE",
    "trace_max_bytes": "SPECPOLICY_TRACE_MAX_BYTES",
    "trace_backups": "SPECPOLICY_TRACE_BACKUPS",
    "metrics": "SPECPOLICY_METRICS",
    "on_install_failure": "SPECPOLICY_ON_INSTALL_FAILURE",
    "allow_untested": "SPECPOLICY_ALLOW_UNTESTED",
    "tp_agreement": "SPECPOLICY_TP_AGREEMENT",
    "off_step": "SPECPOLICY_OFF_STEP",
    "draft_catch_up": "SPECPOLICY_DRAFT_CATCH_UP",
    "draft_catch_up_window": "SPECPOLICY_DRAFT_CATCH_UP_WINDOW",
    "step_clock": "SPECPOLICY_STEP_CLOCK",
    "decide_budget_s": "SPECPOLICY_DECIDE_BUDGET_S",
    "decide_budget_steps": "SPECPOLICY_DECIDE_BUDGET_STEPS",
    "watchdog_s": "SPECPOLICY_WATCHDOG_S",
    "hints": "SPECPOLICY_HINTS",
    "hint_off_rule": "SPECPOLICY_HINT_OFF_RULE",
    "control_path": "SPECPOLICY_CONTROL",
    "control_every": "SPECPOLICY_CONTROL_EVERY",
    "warm_start_path": "SPECPOLICY_WARM_START",
    "warm_start_every": "SPECPOLICY_WARM_START_EVERY",
    "warm_start_max_age_s": "SPECPOLICY_WARM_START_MAX_AGE_S",
}

OnInstallFailure = Literal["refuse", "warn"]
TpAgreement = Literal["auto", "local", "broadcast"]
OffStep = Literal["decode", "verify"]
DraftCatchUp = Literal["auto", "lazy", "per_step"]
StepClock = Literal["auto", "host"]


class AdapterSettings(BaseModel):
    """How an adapter runs a policy inside an engine.

    ``on_install_failure``: ``refuse`` (default) stops the engine at start-up with the reason when the adapter
    cannot install its hooks (unsupported version, engine feature that disables the path); ``warn`` logs the
    reason loudly and lets the engine serve without specpolicy.
    ``tp_agreement``: how tensor/data-parallel ranks agree on each step's depth (see ``runtime.tp``).
    ``off_step`` (legacy SGLang): ``decode`` (default) runs an off step as the target's plain decode with its
    own CUDA graphs; ``verify`` keeps the older one-token verify (also the fallback when decode cannot be
    built). ``draft_catch_up`` (legacy SGLang): ``lazy`` skips the drafter while off and brings its state up
    to date in one batched extend when speculation resumes (for EAGLE drafters from the target's hidden
    states kept on the GPU for ``draft_catch_up_window`` positions, caught up inside an off step when the
    window fills); ``per_step`` runs SGLang's one-token draft extend in every off step; ``auto`` is ``lazy``
    with the EAGLE window shortened to 10% of the free GPU memory, and ``per_step`` where no window fits;
    both fall back to ``per_step`` with mixed chunked prefill or paged KV, which the catch-up does not cover.
    ``step_clock`` (legacy SGLang): how step times are measured. ``auto`` times the overlap worker's steps
    with CUDA events (its wall-clock intervals belong to neighbouring steps) and the others with the host
    clock; ``host`` uses the host clock everywhere (no event is recorded on the GPU stream).
    ``hints``: read each request's speculation hint (``off``, ``max_depth=N``; ``specpolicy.hints``).
    ``hint_off_rule`` (SGLang, one depth per batch): the batch runs off when ``any`` request, a strict
    ``majority`` (default) or ``all`` of its requests opt out; vLLM drops the drafts of each opted-out
    request instead.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: SerializeAsAny[PolicyConfig]
    trace_path: Path | None = Field(None, description="JSONL step trace file; none = no trace")
    trace_max_bytes: int = Field(
        64 * 2**20, ge=4096, le=2**40, description="rotate the trace file when it grows past this size"
    )
    trace_backups: int = Field(3, ge=0, le=1000, description="rotated trace files kept (FILE.1 .. FILE.N)")
    metrics: bool = Field(True, description="export Prometheus metrics where the engine exports its own")
    on_install_failure: OnInstallFailure = "refuse"
    allow_untested: bool = Field(False, description="run on an engine version specpolicy was not tested with")
    tp_agreement: TpAgreement = "auto"
    off_step: OffStep = "decode"
    draft_catch_up: DraftCatchUp = "auto"
    draft_catch_up_window: int = Field(
        32,
        ge=1,
        le=4096,
        description="EAGLE lazy catch-up: off-step hidden states kept per request before a catch-up runs"
        " (auto: shortened to 10% of the free GPU memory)",
    )
    step_clock: StepClock = "auto"
    decide_budget_s: float = Field(
        1e-3,
        ge=1e-5,
        le=60.0,
        description="a decide() call slower than this is logged (once) and counted; >= 10 us (timer noise)",
    )
    decide_budget_steps: int = Field(
        16, ge=0, le=10**9, description="over-budget calls in a row before the default depth runs; 0 = never"
    )
    watchdog_s: float | None = Field(
        None,
        ge=0.01,
        le=86_400.0,
        description="log the stack of a decide() call running longer than this, >= 10 ms; none = off",
    )
    control_path: Path | None = Field(
        None, description="control file checked for a policy change while running; none = off"
    )
    control_every: int = Field(
        256, ge=1, le=10**6, description="steps between two checks of the control file (one os.stat each)"
    )
    warm_start_path: Path | None = Field(
        None,
        description="file the policy's learned state is saved to and loaded from at start (warm start);"
        " none = off",
    )
    warm_start_every: int = Field(
        4096,
        ge=16,
        le=10**9,
        description="warm start: steps between two saves of the state (and at shutdown)",
    )
    warm_start_max_age_s: float = Field(
        7 * 86_400.0,
        ge=1.0,
        le=10 * 365 * 86_400.0,
        description="warm start: a state file saved longer ago than this is stale, and not loaded",
    )

    hints: bool = Field(True, description="read per-request speculation hints (off, max_depth=N)")
    hint_off_rule: OffRule = "majority"

    @field_validator("policy", mode="before")
    @classmethod
    def _parse_policy(cls, value: Any) -> PolicyConfig:
        if isinstance(value, PolicyConfig):
            return value
        return parse_config(value)

    @classmethod
    def build(cls, policy: Any, **fields: Any) -> AdapterSettings:
        """Validate settings; ConfigError naming the field on bad input (policy fields as
        ``policy.<name>``)."""
        try:
            config = policy if isinstance(policy, PolicyConfig) else parse_config(policy)
        except ConfigError as exc:
            raise ConfigError(_prefix_lines(str(exc), "policy.")) from None
        try:
            return cls(policy=config, **fields)
        except ValidationError as exc:
            text = format_validation_error(exc).replace(
                "(not a parameter of this policy)", "(known: " + ", ".join(cls.model_fields) + ")"
            )
            raise ConfigError(_with_ranges(text)) from None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AdapterSettings:
        """Validate a settings mapping (``{"policy": ..., "trace_path": ...}``)."""
        data = dict(data)
        if "policy" not in data:
            raise ConfigError("policy: missing (a policy name, JSON object or file is required)")
        return cls.build(data.pop("policy"), **data)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AdapterSettings | None:
        """Settings from the environment, or None when neither SPECPOLICY_CONFIG nor SPECPOLICY_POLICY is set.

        SPECPOLICY_CONFIG holds the whole settings object; the single-field variables override its fields.
        """
        env = os.environ if environ is None else environ
        raw = env.get(ENV_CONFIG, "").strip()
        data: dict[str, Any] = {}
        if raw:
            loaded = loads_json(raw, ENV_CONFIG)
            if not isinstance(loaded, dict):
                raise ConfigError(f"{ENV_CONFIG}: must be a JSON object")
            data.update(loaded)
        policy = env.get(ENV_POLICY, "").strip()
        if policy:
            data["policy"] = policy
        if not data:
            return None
        from_vars: dict[str, str] = {}
        for fname, var in ENV_VARS.items():
            value = env.get(var)
            if value is not None and value.strip() != "":
                data[fname] = value.strip()
                from_vars[fname] = var
        try:
            return cls.from_mapping(data)
        except ConfigError as exc:  # name the variable a bad value came from
            lines = str(exc).splitlines()
            raise ConfigError("\n".join(_from_var(line, from_vars) for line in lines)) from None

    def to_env(self) -> dict[str, str]:
        """The variables that make ``from_env`` rebuild exactly these settings in a spawned process."""
        return {ENV_CONFIG: self.model_dump_json()}

    def summary(self) -> str:
        """One line for start-up logs: the policy with its configuration and the options that are set."""
        cfg = self.policy.model_dump(mode="json")
        parts = [f"policy={json.dumps(cfg, separators=(',', ':'))}"]
        if self.trace_path is not None:
            parts.append(f"trace={self.trace_path}")
        parts.append(f"metrics={'on' if self.metrics else 'off'}")
        if self.control_path is not None:
            parts.append(f"control={self.control_path} every {self.control_every} steps")
        if self.warm_start_path is not None:
            parts.append(f"warm_start={self.warm_start_path}")
        parts.append(f"tp_agreement={self.tp_agreement}")
        return " ".join(parts)


def _prefix_lines(text: str, prefix: str) -> str:
    return "\n".join(line if line.startswith(prefix) else prefix + line for line in text.splitlines())


def bounds(name: str) -> tuple[float | None, float | None]:
    """The (ge, le) bounds of a numeric settings field (None where it has none)."""
    lo = hi = None
    for m in AdapterSettings.model_fields[name].metadata:
        lo = getattr(m, "ge", lo)
        hi = getattr(m, "le", hi)
    return lo, hi


_BOUND = re.compile(r"^(\w+): Input should be (?:greater|less) than or equal to [^ ]+ (\(got .*\))$")


def _with_ranges(text: str) -> str:
    """Pydantic names one bound of a field's range; a field with two is told with both."""
    out = []
    for line in text.splitlines():
        m = _BOUND.match(line)
        if m and m.group(1) in AdapterSettings.model_fields:
            lo, hi = bounds(m.group(1))
            if lo is not None and hi is not None:
                unit = {"bytes": " bytes", "s": " s"}.get(m.group(1).rsplit("_", 1)[-1], "")
                line = f"{m.group(1)}: must be from {_num(lo)} to {_num(hi)}{unit} {m.group(2)}"
        out.append(line)
    return "\n".join(out)


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:.12f}".rstrip("0")


def _from_var(line: str, from_vars: Mapping[str, str]) -> str:
    name, sep, rest = line.partition(":")
    return f"{name} ({from_vars[name]}){sep}{rest}" if name in from_vars else line
