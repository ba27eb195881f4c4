"""Per-request hints in a simulated workload (``--hints``): which requests opt out or cap their depth.

Which requests get a hint is a hash of the request number, the same for every policy simulated on the
scenario (common random numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from ..hints import OffRule
from ..mode import MAX_NUM_STEPS
from .acceptance import hash_uniform

__all__ = ["HintMix", "parse_hint_mix"]

IntArray = npt.NDArray[np.int64]

_OFF_RULES = ("any", "majority", "all")


@dataclass(frozen=True)
class HintMix:
    """Per-request hints in a workload: a fraction ``off`` of the requests opts out, a further fraction
    ``capped`` says ``max_depth``; ``per_request`` runs them as an engine that verifies per request (vLLM:
    each request's drafts are cut to its allowance), otherwise one depth per batch under ``off_rule``
    (SGLang)."""

    off: float = 0.0
    capped: float = 0.0
    max_depth: int = 1
    per_request: bool = False
    off_rule: OffRule = "majority"

    def __post_init__(self) -> None:
        for name in ("off", "capped"):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
                raise ConfigError(f"--hints: {name} must be a fraction in [0, 1], got {v!r}")
        if self.off + self.capped > 1.0:
            raise ConfigError(f"--hints: off + capped must be <= 1, got {self.off + self.capped!r}")
        if type(self.max_depth) is not int or not 1 <= self.max_depth <= MAX_NUM_STEPS:
            raise ConfigError(
                f"--hints: max_depth must be an int in [1, {MAX_NUM_STEPS}], got {self.max_depth!r}"
            )
        if self.off_rule not in _OFF_RULES:
            raise ConfigError(f"--hints: rule must be one of {', '.join(_OFF_RULES)}, got {self.off_rule!r}")

    def allowances(self, seed: int, request_ids: IntArray) -> IntArray:
        """Each request's allowance: 0 (off), ``max_depth`` (capped) or -1 (no hint)."""
        u = hash_uniform(seed ^ 0x4172, request_ids, np.zeros(len(request_ids), dtype=np.int64))
        out = np.full(len(request_ids), -1, dtype=np.int64)
        out[u < self.off + self.capped] = self.max_depth
        out[u < self.off] = 0
        return out

    def to_json(self) -> dict[str, Any]:
        return {"off": self.off, "capped": self.capped, "max_depth": self.max_depth,
                "per_request": self.per_request, "off_rule": self.off_rule}


def parse_hint_mix(text: str | None) -> HintMix | None:
    """``--hints off=F[,capped=F,max_depth=N][,per_request=true][,rule=any|majority|all]``, or None."""
    if text is None or not text.strip():
        return None
    forms = "off=F[,capped=F,max_depth=N][,per_request=true|false][,rule=any|majority|all]"
    kw: dict[str, Any] = {}
    for part in text.split(","):
        key, eq, value = (s.strip() for s in part.partition("="))
        if not eq or key not in ("off", "capped", "max_depth", "per_request", "rule") or key in kw:
            raise ConfigError(f"--hints: expected {forms}, got {text!r}")
        try:
            if key in ("off", "capped"):
                kw[key] = float(value)
            elif key == "max_depth":
                kw[key] = int(value)
            elif key == "per_request":
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                kw[key] = value.lower() in ("true", "1")
            else:
                kw["off_rule"] = value
        except ValueError:
            raise ConfigError(f"--hints: {key} has a bad value {value!r} ({forms})") from None
    return HintMix(**kw)
