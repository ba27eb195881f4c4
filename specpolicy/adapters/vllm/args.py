"""``specpolicy vllm-args``: the vLLM flags that run a policy. Pure formatting; vLLM need not be installed.

The one non-obvious part is the ``num_speculative_tokens_per_batch_size`` schedule. The specpolicy scheduler
overrides its values every step, but vLLM needs it for its side effects: it enables the dynamic-K plumbing and
captures one CUDA-graph tier per depth it lists, each tier sized up to the widest batch that uses that depth.
So the covering schedule gives the largest depth the wide head range and every other depth one batch size at
the top, just below ``max_num_seqs``: every depth's tier then spans (almost) every batch size. Should the
scheduler not be installed, the schedule degrades to the static maximum depth, vLLM's own default.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError
from ...mode import MAX_NUM_STEPS
from ...policy import PolicyConfig
from ...registry import parse_config
from .config import SCHEDULER_CLS, SECTION

__all__ = ["VllmArgs", "covering_schedule", "build_vllm_args"]


def covering_schedule(
    depths: Iterable[int], num_speculative_tokens: int, max_num_seqs: int
) -> list[list[int]]:
    """A valid vLLM schedule listing ``num_speculative_tokens`` and every depth, each with a wide graph tier.

    ``[[1, M-n+1, K], [M-n+2, M-n+2, d2], ..., [M, M, dn]]`` for depths K > d2 > ... > dn, M = max_num_seqs.
    """
    k_max = num_speculative_tokens
    if type(k_max) is not int or not 1 <= k_max <= MAX_NUM_STEPS:
        raise ConfigError(f"num_speculative_tokens: must be an int in [1, {MAX_NUM_STEPS}], got {k_max!r}")
    ks = sorted({int(d) for d in depths} | {k_max}, reverse=True)
    too_deep = [d for d in ks if d > k_max or d < 0]
    if too_deep:
        raise ConfigError(
            f"num_speculative_tokens: the policy can choose depth(s) {sorted(too_deep)}, deeper than "
            f"num_speculative_tokens={k_max} (vLLM sizes its buffers for that maximum); raise it to "
            f"{max(too_deep)} or change the policy"
        )
    n = len(ks)
    if type(max_num_seqs) is not int or max_num_seqs < n:
        raise ConfigError(
            f"max_num_seqs: must be an int >= {n} (one batch size per depth {ks}), got {max_num_seqs!r}"
        )
    head_end = max_num_seqs - n + 1
    table = [[1, head_end, ks[0]]]
    table += [[head_end + i, head_end + i, k] for i, k in enumerate(ks[1:], start=1)]
    return table


@dataclass(frozen=True)
class VllmArgs:
    """The engine arguments, as a mapping for ``vllm.LLM(**kwargs)`` or as ``vllm serve`` flags."""

    speculative_config: dict[str, Any]
    additional_config: dict[str, Any]
    max_num_seqs: int
    scheduler_cls: str = SCHEDULER_CLS
    notes: tuple[str, ...] = field(default=())

    def as_kwargs(self) -> dict[str, Any]:
        return {
            "speculative_config": self.speculative_config,
            "scheduler_cls": self.scheduler_cls,
            "additional_config": self.additional_config,
            "max_num_seqs": self.max_num_seqs,
        }

    def as_cli(self) -> list[str]:
        """``vllm serve`` arguments, one list item per token (quote with ``shlex.join`` for a shell)."""
        dump = _compact_json
        return [
            "--speculative-config",
            dump(self.speculative_config),
            "--scheduler-cls",
            self.scheduler_cls,
            "--additional-config",
            dump(self.additional_config),
            "--max-num-seqs",
            str(self.max_num_seqs),
        ]

    def shell(self) -> str:
        tokens = self.as_cli()
        pairs = [f"{tokens[i]} {shlex.quote(tokens[i + 1])}" for i in range(0, len(tokens), 2)]
        return " \\\n  ".join(pairs)


def _compact_json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _steps_within(config: PolicyConfig, num_speculative_tokens: Any, notes: list[str]) -> PolicyConfig:
    """The engine's depth bounds a policy's ``steps``: derived from it when not given, checked when given.

    The covering schedule captures a graph tier for every depth up to the engine's, so 1..N are all usable.
    """
    steps = getattr(config, "steps", None)
    n = num_speculative_tokens
    if "steps" not in type(config).model_fields or type(n) is not int or not 1 <= n <= MAX_NUM_STEPS:
        return config  # covering_schedule reports a bad depth
    if "steps" in config.model_fields_set:
        if steps and max(steps) > n:
            raise ConfigError(
                f"policy.steps: {list(steps)} goes deeper than num_speculative_tokens={n} (vLLM prepares at "
                f"most that depth): give steps within 1..{n}, leave steps out to use 1..{n}, or raise "
                f"--num-speculative-tokens to {max(steps)}"
            )
        return config
    derived = list(range(1, n + 1))
    if steps is not None and list(steps) == derived:
        return config
    notes.append(
        f"policy steps {derived}: derived from num_speculative_tokens={n} (the policy's default is "
        f"{list(steps or ())}); give steps to choose others"
    )
    try:
        return parse_config({**config.model_dump(mode="json"), "steps": derived})
    except ConfigError as exc:
        raise ConfigError("\n".join(f"policy.{line}" for line in str(exc).splitlines())) from None


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _policy_section(given: PolicyConfig, config: PolicyConfig, notes: list[str]) -> dict[str, Any]:
    """The policy as ``--additional-config`` carries it: its name, every field the user gave (one equal to
    today's default too: the deployment keeps it should a later release change the default) and what
    differs from the defaults (steps derived from the engine's depth). The fields left out follow the
    defaults of the specpolicy the server runs; when the user gave any field, a note names them."""
    section = _merge(
        given.model_dump(mode="json", exclude_unset=True),
        config.model_dump(mode="json", exclude_defaults=True),
    )
    section = {"name": config.name, **section}
    left = [f for f in type(config).model_fields if f not in section]
    if given.model_fields_set - {"name"} and left:
        notes.append(
            f"--additional-config carries the policy fields given or derived; {len(left)} not given follow "
            f"the defaults of the specpolicy the server runs: {', '.join(left)}"
        )
    return section


def build_vllm_args(
    policy: Any,
    num_speculative_tokens: int | None = None,
    *,
    max_num_seqs: int = 256,
    method: str | None = None,
    draft_model: str | None = None,
    speculative_config: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> VllmArgs:
    """Flags for a policy spec (name, JSON, file or config). ConfigError names the field on bad input.

    ``speculative_config`` is the user's own ``--speculative-config`` to extend (its ``method``, ``model`` and
    ``num_speculative_tokens`` are kept unless given here); ``settings`` are further AdapterSettings fields
    (``trace_path``, ``metrics``, ...) for the ``--additional-config`` section.
    """
    try:
        config: PolicyConfig = parse_config(policy)
    except ConfigError as exc:
        raise ConfigError("\n".join(f"policy.{line}" for line in str(exc).splitlines())) from None
    given = config
    spec = dict(speculative_config or {})
    notes: list[str] = []
    if num_speculative_tokens is None:
        num_speculative_tokens = spec.get("num_speculative_tokens")
    if num_speculative_tokens is None:
        num_speculative_tokens = max(config.candidate_steps())
    else:
        config = _steps_within(config, num_speculative_tokens, notes)
    if method is not None:
        spec["method"] = method
    if draft_model is not None:
        spec["model"] = draft_model
    spec.setdefault("method", "eagle3")
    if "model" not in spec and spec["method"] not in ("ngram", "suffix", "mtp"):
        spec["model"] = "<draft model>"
        notes.append("replace <draft model> in --speculative-config with the drafter (or pass --draft-model)")
    if "num_speculative_tokens_per_batch_size" in spec:
        notes.append("replaced the given num_speculative_tokens_per_batch_size with one covering the policy")
    candidates = config.candidate_steps()
    spec["num_speculative_tokens"] = num_speculative_tokens
    spec["num_speculative_tokens_per_batch_size"] = covering_schedule(
        candidates, num_speculative_tokens, max_num_seqs
    )
    section: dict[str, Any] = {"policy": _policy_section(given, config, notes)}
    if settings:
        section.update(settings)
        from ...runtime.settings import AdapterSettings

        AdapterSettings.from_mapping(section)  # validate the extra fields now, not at server start-up
    return VllmArgs(
        speculative_config=spec,
        additional_config={SECTION: section},
        max_num_seqs=max_num_seqs,
        notes=tuple(notes),
    )
