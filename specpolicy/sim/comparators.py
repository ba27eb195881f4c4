"""What every report compares: the baselines, the registered policies, the oracle and the engines' own rules.

Labels, in report order: ``never`` (a speculation-free engine), ``static-0`` .. ``static-K`` (K = the
profile's deepest depth; ``static-0`` is speculation off inside the speculative engine), every registered
policy by its registry name (defaults, or the configs given with ``--policy``), ``schedule-vllm`` (vLLM's
documented EAGLE-3 example table through the ``schedule`` policy, depths clamped to K), ``sglang-adaptive``
(SGLang's own class, when importable), ``oracle`` (per step, myopic) and ``lookahead`` (``lookahead.py``).

A comparator is plain data (label + policy config), so runs can be built in worker processes.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..errors import ConfigError
from ..policy import Policy
from ..registry import available_policies, get_entry, make_policy, parse_config
from ..stats import StepStats
from .acceptance import expected_tokens
from .engine import Decider, FloatArray, IntArray, SimProfile
from .lookahead import LookaheadDecider
from .sglang_adaptive import SGLangAdaptivePolicy, load_sglang_adaptive
from .step_costs import StepCosts
from .warm import warm_load

__all__ = [
    "VLLM_EAGLE3_TABLE",
    "Comparator",
    "OracleDecider",
    "REFERENCE_KINDS",
    "PolicyDecider",
    "build_decider",
    "default_comparators",
    "measure_decide_cost_s",
    "policy_label",
]

#: vLLM's documented EAGLE-3 example for ``num_speculative_tokens_per_batch_size``.
VLLM_EAGLE3_TABLE = ((1, 16, 5), (17, 32, 4), (33, 64, 3), (65, 128, 1), (129, 512, 0))

Kind = Literal["never", "policy", "oracle", "lookahead", "sglang"]
#: References with perfect knowledge, not policies: no decide() charge, never the "best policy".
REFERENCE_KINDS = ("oracle", "lookahead")


@dataclass(frozen=True)
class Comparator:
    """One row group of the report: ``spec`` is a JSON-able policy config for ``kind == "policy"``."""

    label: str
    kind: Kind
    spec: dict[str, Any] | None = None
    #: the off step's price for this row, where it differs from the simulation's ("catch_up" or "lazy")
    off_cost: str | None = None

    @property
    def is_static(self) -> bool:
        return self.label.startswith("static-")


class PolicyDecider:
    """A policy under test: sees StepStats only."""

    __slots__ = ("policy",)

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def __call__(self, stats: StepStats, p: FloatArray, remaining: IntArray, seq_len: float) -> int:
        return self.policy.decide(stats).num_steps


class OracleDecider:
    """Per step, the depth with the best expected tokens per second, from the TRUE acceptance and costs.

    Myopic: it maximises this step's expected tokens (each request's output clipped to what it still owes)
    over this step's expected cost, and ignores what a choice does to later steps (with ``lazy`` off costs,
    the deferred catch-up). That is the optimum for a stationary closed loop; elsewhere a policy may beat it.
    """

    def __init__(self, profile: SimProfile) -> None:
        self.profile = profile
        self.max_k = int(profile.max_steps)
        self._costs = StepCosts(profile, self.max_k)

    def __call__(self, stats: StepStats, p: FloatArray, remaining: IntArray, seq_len: float) -> int:
        costs = self._costs(len(p), seq_len)
        return int(np.argmax(expected_tokens(p, remaining, self.max_k) / costs))


def policy_label(config: dict[str, Any]) -> str:
    """The registry name, plus the parameters that differ from that policy's defaults: ``hysteresis{...}``."""
    name = str(config["name"])
    diff = _differs(config, parse_config({"name": name}).model_dump(mode="json"))
    if not diff:
        return name
    return name + json.dumps(diff, separators=(",", ":"), sort_keys=True)


def _differs(config: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``config`` that differ from ``defaults``; a nested policy config (a composition's part)
    shows its name and the fields that differ from that policy's defaults."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        default = defaults.get(key)
        if key == "name" or default == value:
            continue
        if isinstance(value, dict) and isinstance(value.get("name"), str):  # a nested policy config
            if not (isinstance(default, dict) and default.get("name") == value["name"]):
                default = parse_config({"name": value["name"]}).model_dump(mode="json")
            value = {"name": value["name"], **_differs(value, default)}
        out[key] = value
    return out


def _resolve(spec: Any, profile_ref: str | None) -> tuple[str, dict[str, Any]]:
    """(label, normalised config). A policy with a ``profile`` field (cost_model's prior) that the spec leaves
    unset is pointed at the simulated profile; the label shows only what the user changed."""
    user = parse_config(spec)
    label = policy_label(user.model_dump(mode="json"))
    data = user.model_dump(mode="json")
    if (
        profile_ref is not None
        and "profile" in type(user).model_fields
        and "profile" not in user.model_fields_set
    ):
        data["profile"] = profile_ref
    return label, parse_config(data).model_dump(mode="json")


def _diagnostic(name: str) -> bool:
    """Switching stress tests (e.g. ``alternate``) are not candidates for serving, and compositions (``gate``)
    combine policies compared already: left out by default."""
    try:
        config = get_entry(name).config
        return config.diagnostic or config.composite
    except ConfigError:
        return False  # reported as skipped by the loop below


def default_comparators(
    max_steps: int,
    policies: Sequence[Any] | None = None,
    *,
    profile_ref: str | None = None,
    include_references: bool = True,
) -> tuple[list[Comparator], list[str]]:
    """Comparators for a report, and notes (skipped ones, with why).

    ``policies`` None means every registered policy with its defaults (``static`` is covered by the
    ``static-k`` rows); otherwise each item is a name or config that ``make_policy`` accepts.
    """
    notes: list[str] = []
    out: list[Comparator] = []
    if include_references:
        out.append(Comparator("never", "never"))
        out.extend(
            Comparator(f"static-{k}", "policy", {"name": "static", "num_steps": k})
            for k in range(max_steps + 1)
        )
    specs: list[Any] = (
        [n for n in available_policies() if n != "static" and not _diagnostic(n)]
        if policies is None
        else list(policies)
    )
    seen: dict[str, int] = {}
    for spec in specs:
        try:
            label, cfg = _resolve(spec, profile_ref)
        except ConfigError as exc:
            if policies is not None:
                raise
            # A registered policy that cannot run on its defaults (it needs configuration): say so, go on.
            first = str(exc).splitlines()[0]
            notes.append(f"{spec} skipped: no valid default config ({first}); give one with --policy")
            continue
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        out.append(Comparator(label, "policy", cfg))
    if not include_references:
        return out, notes
    if "schedule" in available_policies():
        table = [[lo, hi, min(k, max_steps)] for lo, hi, k in VLLM_EAGLE3_TABLE]
        out.append(Comparator("schedule-vllm", "policy", {"name": "schedule", "table": table}))
    else:
        notes.append("schedule-vllm skipped: the schedule policy is not registered")
    cls, note = load_sglang_adaptive()
    notes.append(note)
    if cls is not None:
        out.append(Comparator("sglang-adaptive", "sglang"))
    out.append(Comparator("oracle", "oracle"))
    out.append(Comparator("lookahead", "lookahead"))
    return out, notes


def build_policy(comp: Comparator) -> Policy:
    if comp.kind == "sglang":
        return SGLangAdaptivePolicy()
    if comp.kind != "policy" or comp.spec is None:
        raise ValueError(f"comparator {comp.label!r} is not a policy")
    return make_policy(comp.spec)


def build_decider(
    comp: Comparator, profile: SimProfile, warm_state: Mapping[str, Any] | None = None
) -> Decider | None:
    """The engine-side decider for a comparator; None for the speculation-free engine. ``warm_state``: a
    saved state its policy starts from (``warm``)."""
    if comp.kind == "never":
        return None
    if comp.kind == "oracle":
        return OracleDecider(profile)
    if comp.kind == "lookahead":
        return LookaheadDecider(profile)
    policy = build_policy(comp)
    warm_load(policy, warm_state)
    return PolicyDecider(policy)


def measure_decide_cost_s(comp: Comparator, *, calls: int = 400, batch_size: int = 64) -> float:
    """Median wall time of one decide() call on a fresh instance, fed a realistic closed-loop sequence.

    The sequence: batch ``batch_size`` with small variations, each step reporting the previous decision's
    depth, per-request accepted drafts (a fixed pseudo-random pattern) with their mean, as the simulated
    engine passes them, and a step time growing with depth.
    """
    if comp.kind == "never" or comp.kind in REFERENCE_KINDS:
        return 0.0
    policy = build_policy(comp)
    rng = np.random.default_rng(12345)
    pattern = rng.integers(0, 8, size=(16, batch_size + 8)).tolist()
    last_k = 0
    times: list[float] = []
    perf = time.perf_counter
    for i in range(calls + 50):
        b = batch_size + (i % 5) - 2
        acc = None
        if last_k > 0:
            acc = [min(a, last_k) for a in pattern[i % 16][:b]]
        mean = None if acc is None else sum(acc) / len(acc)
        stats = StepStats.fast(
            b,
            i % 3,
            700.0 + i,
            last_num_steps=last_k,
            accepted_draft_tokens=acc,
            last_step_time_s=0.008 + 0.001 * last_k,
            mean_accepted=mean,
        )
        t0 = perf()
        mode = policy.decide(stats)
        dt = perf() - t0
        last_k = mode.num_steps
        if i >= 50:
            times.append(dt)
    return statistics.median(times)
