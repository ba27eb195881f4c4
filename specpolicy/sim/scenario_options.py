"""The scenario's request population from the command line: ``--acceptance`` and the request-shape options.

``--acceptance`` takes one Beta per use, as ``mean=M[,concentration=C]`` or ``alpha=A,beta=B``, or the same
keys as a JSON object; given more than once it builds a mixture whose components carry ``weight=W``
(relative, default 1). Every value is checked here, before any simulation runs, and a bad one is reported
with the option, the key and the range it must lie in.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..config_files import loads_json_object
from ..errors import ConfigError
from .acceptance import AcceptanceModel, BetaAcceptance, BetaMixture
from .scenario import RequestShape

__all__ = ["add_arguments", "parse_acceptance", "parse_component", "request_shape", "from_args"]

_KEYS = ("mean", "concentration", "alpha", "beta", "weight")
_RANGES = {
    "mean": "in (0, 1)",
    "concentration": "a finite number > 0",
    "alpha": "a finite number > 0",
    "beta": "a finite number > 0",
    "weight": "a finite number > 0",
}
_FORMS = "mean=M[,concentration=C][,weight=W] or alpha=A,beta=B[,weight=W]"


def _fields(text: str) -> Mapping[str, Any]:
    text = text.strip()
    if text.startswith("{"):
        return loads_json_object(text, "--acceptance")
    out: dict[str, Any] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(f"--acceptance: expected {_FORMS}, got {text!r}")
        if key in out:
            raise ConfigError(f"--acceptance: {key} given twice in {text!r}")
        out[key] = value.strip()
    return out


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"--acceptance: {key} must be {_RANGES[key]}, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"--acceptance: {key} must be {_RANGES[key]}, got {value!r}") from None
    ok = 0.0 < x < 1.0 if key == "mean" else math.isfinite(x) and x > 0
    if not ok:
        raise ConfigError(f"--acceptance: {key} must be {_RANGES[key]}, got {value!r}")
    return x


def parse_component(text: str) -> tuple[float, BetaAcceptance]:
    """One ``--acceptance`` value -> (weight, Beta)."""
    fields = _fields(text)
    unknown = [k for k in fields if k not in _KEYS]
    if unknown:
        raise ConfigError(f"--acceptance: unknown key {unknown[0]!r} (keys: {', '.join(_KEYS)}; {_FORMS})")
    vals = {k: _number(k, v) for k, v in fields.items()}
    weight = vals.pop("weight", 1.0)
    if "mean" in vals:
        if "alpha" in vals or "beta" in vals:
            raise ConfigError(
                f"--acceptance: give mean (and concentration) or alpha and beta, not both: {_FORMS}"
            )
        return weight, BetaAcceptance.from_mean(vals["mean"], vals.get("concentration", 10.0))
    if "concentration" in vals or not ("alpha" in vals and "beta" in vals):
        raise ConfigError(f"--acceptance: expected {_FORMS}, got {text!r}")
    return weight, BetaAcceptance(vals["alpha"], vals["beta"])


def parse_acceptance(specs: Sequence[str] | None) -> AcceptanceModel | None:
    """None (the reference Beta(7, 3)) without specs; one Beta for one; a mixture for several."""
    if not specs:
        return None
    comps = tuple(parse_component(s) for s in specs)
    if len(comps) == 1:
        return comps[0][1]
    return BetaMixture(comps)


_SHAPE_OPTIONS = {
    "prompt_mean": "--prompt-tokens",
    "output_mean": "--output-tokens",
    "prompt_spread": "--prompt-spread",
    "output_spread": "--output-spread",
}


def request_shape(
    prompt_tokens: int | None = None,
    output_tokens: int | None = None,
    prompt_spread: float | None = None,
    output_spread: float | None = None,
) -> RequestShape | None:
    """The request shape from the options (None when none is given: the reference shape)."""
    given: dict[str, float | None] = {
        "prompt_mean": prompt_tokens,
        "output_mean": output_tokens,
        "prompt_spread": prompt_spread,
        "output_spread": output_spread,
    }
    values: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if not values:
        return None
    for key, v in values.items():
        opt = _SHAPE_OPTIONS[key]
        if key.endswith("_mean") and (type(v) is not int or v < 1):
            raise ConfigError(f"{opt} must be an integer >= 1 (the mean length in tokens), got {v!r}")
        if key.endswith("_spread") and not (isinstance(v, (int, float)) and 0.0 <= v < 1.0):
            raise ConfigError(
                f"{opt} must be in [0, 1) (each length uniform within +-spread of its mean), got {v!r}"
            )
    return RequestShape(**values)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The population options, shared by ``simulate`` and ``tune``."""
    p.add_argument(
        "--acceptance",
        action="append",
        metavar="SPEC",
        help="per-request acceptance: a Beta as mean=M[,concentration=C] (C = alpha + beta, default 10) or "
        "alpha=A,beta=B, or a JSON object with those keys; repeat for a mixture, each with weight=W "
        "(default: Beta(7, 3), mean 0.7)",
    )
    p.add_argument("--prompt-tokens", type=int, metavar="N", help="mean prompt length (default 512)")
    p.add_argument("--output-tokens", type=int, metavar="N", help="mean output length (default 256)")
    p.add_argument(
        "--prompt-spread",
        type=float,
        metavar="F",
        help="prompt lengths uniform within +-F of the mean, F in [0, 1) (default 0.5)",
    )
    p.add_argument(
        "--output-spread",
        type=float,
        metavar="F",
        help="output lengths uniform within +-F of the mean, F in [0, 1) (default 0.5)",
    )


def from_args(args: argparse.Namespace) -> tuple[AcceptanceModel | None, RequestShape | None]:
    return (
        parse_acceptance(args.acceptance),
        request_shape(args.prompt_tokens, args.output_tokens, args.prompt_spread, args.output_spread),
    )
