"""``paired --control-variant V``: per-request hints and a policy swap on one serving engine, after the
measured batches, and the checks the report holds them to.

The variant must run specpolicy's ``static`` (its launch depth ``D``). Its engine alone starts with the
control-file settings (``control_env``: the file, checked every ``CONTROL_EVERY`` steps, and the batch rule
``any``: one opted-out request turns its batch's steps off); the other engines are as without the flag.
``run`` then serves, on that engine, with the specpolicy library's own ``write_control`` (what ``specpolicy
control set`` writes):

- ``hinted``: ``C`` requests, ``OFF_REQUESTS`` of them ``custom_params={"specpolicy": "off"}`` and one
  ``max_depth=1``, the rest without a hint; the hinted ones ask for fewer tokens than the rest (the off ones
  half, the capped one a quarter), so the neighbours run their first tokens beside them, then alone;
- ``before``: the same shape without hints, under static;
- a swap to static-0 (``write_control``), a short untimed batch so that the engine's next check of the file
  falls in it, then ``swapped``: every step must be off (no draft accepted);
- a swap back to static, a short batch, then ``reverted``: speculating again.

Per request it records what SGLang's ``meta_info`` says (completion tokens, ``spec_verify_ct``,
``spec_num_correct_drafts``; the tool's accept length is completion tokens over verifies) and whether its
tokens equal the bigram oracle. ``checks`` turns that into the report's met / not met:

- ``lossless``: every request of every batch equals the oracle;
- ``hinted_rule``: an opted-out request accepted no draft (each of its steps was off); a request capped at N
  accepted at most N per step; a neighbour's first ``max hinted tokens - 1 - SLACK`` steps were off (its
  accepted drafts fit in its other steps at depth ``D``) and it accepted drafts after them;
- ``swap_took_effect``: the swapped batch accepted no draft (accept length 1);
- ``swap_reverted``: the reverted batch's accept length is above ``ON_MIN``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "C",
    "CONTROL_EVERY",
    "OFF_RULE",
    "checks",
    "control_env",
    "control_file",
    "eligible",
    "hints_for",
    "run",
]

#: requests per batch, output tokens of a request without a hint, and the opted-out requests among them
C = 16
TOKENS = 200
OFF_REQUESTS = 3
#: the engine's checks of the control file: one ``os.stat`` every this many decode steps
CONTROL_EVERY = 4
#: the batch rule of the control engine: off while any request of the batch opts out
OFF_RULE = "any"
#: output tokens of the untimed batch after a swap: more steps than ``CONTROL_EVERY`` at any depth
SETTLE_TOKENS = 32
#: decode steps a neighbour may have run beside the hinted requests fewer than their tokens say (the
#: overlap scheduler keeps a finished request one step longer, never fewer)
SLACK = 2
#: a batch's accept length above which it speculated (an all-off batch of TOKENS-token requests has
#: TOKENS / (TOKENS - 1) = 1.005)
ON_MIN = 1.05


def control_file(out: Path, variant: str) -> Path:
    return out / f"specpolicy-control-{variant}.json"


def control_env(out: Path, variant: str) -> dict[str, str]:
    """The control engine's extra settings (``specpolicy.runtime.settings.ENV_VARS``)."""
    from specpolicy.runtime.settings import ENV_VARS

    return {
        ENV_VARS["control_path"]: str(control_file(out, variant)),
        ENV_VARS["control_every"]: str(CONTROL_EVERY),
        ENV_VARS["hint_off_rule"]: OFF_RULE,
    }


def eligible(env: dict[str, str] | None, static: dict[str, Any]) -> bool:
    """Whether a variant's settings run specpolicy's ``static`` (the policy the phase swaps from)."""
    return (
        env is not None
        and set(env) == {"SPECPOLICY_POLICY"}
        and json.loads(env["SPECPOLICY_POLICY"]) == static
    )


def hints_for(c: int, tokens: int) -> list[tuple[str | None, int]]:
    """(hint, output tokens) per request of the hinted batch: ``OFF_REQUESTS`` off for half the tokens,
    one ``max_depth=1`` for a quarter, the rest no hint for all of them."""
    plan: list[tuple[str | None, int]] = [("off", tokens // 2)] * OFF_REQUESTS
    plan.append(("max_depth=1", tokens // 4))
    return (plan + [(None, tokens)] * c)[:c]


def _serve(
    eng: Any, prompts: list[list[int]], plan: Sequence[tuple[str | None, int]], pi: Any
) -> dict[str, Any]:
    """One batch, each request with its own hint and length; per request what meta_info and the oracle say."""
    from specpolicy_livecheck.bigram_model import lossless_count

    sps = []
    for hint, n in plan:
        sp: dict[str, Any] = {"temperature": 0.0, "max_new_tokens": n, "ignore_eos": True}
        if hint is not None:
            sp["custom_params"] = {"specpolicy": hint}
        sps.append(sp)
    t0 = time.perf_counter()
    outs = eng.generate(input_ids=prompts, sampling_params=sps)
    wall = time.perf_counter() - t0
    reqs = []
    tokens = verifies = 0
    for (hint, n), p, o in zip(plan, prompts, outs, strict=True):
        meta = o.get("meta_info", {})
        done = int(meta.get("completion_tokens") or 0)
        ver = int(meta.get("spec_verify_ct") or 0)
        tokens, verifies = tokens + done, verifies + ver
        _, ok = lossless_count([o.get("output_ids") or []], [p], [n], pi)
        reqs.append(
            {
                "hint": hint,
                "max_new_tokens": n,
                "completion_tokens": done,
                "verify_ct": ver,
                "correct_drafts": meta.get("spec_num_correct_drafts"),
                "accept_len": round(done / ver, 3) if ver else None,
                "lossless": bool(ok),
            }
        )
    return {
        "wall_s": round(wall, 3),
        "accept_len": round(tokens / verifies, 3) if verifies else None,
        "requests": reqs,
    }


def _trace_notes(trace: Path | None, expected: int, wait_s: float = 5.0) -> list[dict[str, Any]]:
    """The policy-change lines of the engine's step trace (``kind`` policy_swap / policy_swap_refused),
    waiting up to ``wait_s`` for ``expected`` of them (the trace's writer thread writes them a moment
    after the change)."""
    if trace is None:
        return []
    deadline = time.monotonic() + wait_s
    while True:
        notes = []
        lines = trace.read_text().splitlines() if trace.exists() else []
        for line in lines:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and str(rec.get("kind", "")).startswith("policy_swap"):
                notes.append(rec)
        if len(notes) >= expected or time.monotonic() >= deadline:
            return notes
        time.sleep(0.2)


def run(
    eng: Any,
    control: Path,
    vocab: int,
    pi: Any,
    static: dict[str, Any],
    off: dict[str, Any],
    trace: Path | None = None,
    c: int = C,
    tokens: int = TOKENS,
) -> dict[str, Any]:
    """The phase on the control engine (started with ``control_env``); its record for ab-paired.json."""
    from specpolicy.registry import parse_config
    from specpolicy.runtime.control_file import write_control
    from specpolicy_livecheck.ab_static import _prompts

    t0 = time.perf_counter()
    plain = [(None, tokens)] * c
    res: dict[str, Any] = {
        "c": c,
        "tokens": tokens,
        "depth": int(static["num_steps"]),
        "off_rule": OFF_RULE,
        "control_every": CONTROL_EVERY,
        "slack_steps": SLACK,
        "control_file": str(control),
    }
    res["hinted"] = _serve(eng, _prompts(c, vocab, 901), hints_for(c, tokens), pi)
    res["before"] = _serve(eng, _prompts(c, vocab, 902), plain, pi)
    swaps = []
    for name, policy, seed in (("swapped", off, 903), ("reverted", static, 905)):
        doc = write_control(control, parse_config(policy))
        swaps.append({"to": doc["policy"], "written_at": round(doc["written_at"], 4), "before": name})
        res[f"settle_{name}"] = _serve(eng, _prompts(c, vocab, seed + 50), [(None, SETTLE_TOKENS)] * c, pi)
        res[name] = _serve(eng, _prompts(c, vocab, seed), plain, pi)
    res["swaps"] = swaps
    res["trace_notes"] = _trace_notes(trace, len(swaps))
    res["wall_s"] = round(time.perf_counter() - t0, 2)
    return res


# ------------------------------------------------------------------------------------------ the checks


def _rule_problems(hinted: dict[str, Any], depth: int, slack: int) -> list[str]:
    """What in the hinted batch breaks the rule (every request: hinted ones and their neighbours)."""
    reqs = hinted["requests"]
    problems = []
    window = max((r["max_new_tokens"] for r in reqs if r["hint"] is not None), default=0) - 1 - slack
    for i, r in enumerate(reqs):
        got, ver = r.get("correct_drafts"), r["verify_ct"]
        if got is None or not ver:
            problems.append(f"request {i}: no speculative counters in its meta_info")
            continue
        hint = r["hint"]
        if hint == "off" and got != 0:
            problems.append(f"request {i} (off): {got} drafts accepted")
        elif hint is not None and hint.startswith("max_depth="):
            cap = int(hint.partition("=")[2])
            if got > cap * ver:
                problems.append(f"request {i} ({hint}): {got} drafts accepted in {ver} steps")
        elif hint is None:
            if got > depth * max(ver - window, 0):
                problems.append(
                    f"request {i} (no hint): {got} drafts accepted in {ver} steps, more than depth {depth} "
                    f"allows after the {window} steps beside the hinted requests"
                )
            elif got == 0:
                problems.append(f"request {i} (no hint): no draft accepted after the hinted requests left")
    return problems


def checks(ctl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The phase's checks (``lossless``, ``hinted_rule``, ``swap_took_effect``, ``swap_reverted``), each
    ``{"met": bool, "detail": str}``; a phase that failed or did not run meets none."""
    names = ("lossless", "hinted_rule", "swap_took_effect", "swap_reverted")
    batches = ("hinted", "before", "settle_swapped", "swapped", "settle_reverted", "reverted")
    if "error" in ctl or any(b not in ctl for b in batches):
        why = ctl.get("error") or ctl.get("skipped") or "the phase did not finish"
        return {n: {"met": False, "detail": str(why)} for n in names}
    reqs = [r for b in batches for r in ctl[b]["requests"]]
    ok = sum(r["lossless"] for r in reqs)
    out = {"lossless": {"met": bool(reqs) and ok == len(reqs), "detail": f"{ok} of {len(reqs)} requests"}}
    problems = _rule_problems(ctl["hinted"], int(ctl["depth"]), int(ctl.get("slack_steps", SLACK)))
    out["hinted_rule"] = {
        "met": not problems,
        "detail": "; ".join(problems[:4]) or _rule_summary(ctl["hinted"]),
    }
    sw = ctl["swapped"]
    accepted = [r.get("correct_drafts") for r in sw["requests"]]
    out["swap_took_effect"] = {
        "met": bool(accepted) and all(a == 0 for a in accepted),
        "detail": f"accept length {sw['accept_len']}, drafts accepted {sum(a or 0 for a in accepted)}"
        + "".join(f"; trace: {n.get('kind')} at step {n.get('step')}" for n in ctl.get("trace_notes", [])),
    }
    before, after = ctl["before"]["accept_len"], ctl["reverted"]["accept_len"]
    out["swap_reverted"] = {
        "met": after is not None and after > ON_MIN,
        "detail": f"accept length {after} (before the swap {before}; above {ON_MIN} required)",
    }
    return out


def _rule_summary(hinted: dict[str, Any]) -> str:
    """Accept length per kind of request of the hinted batch (min-max)."""
    kinds: dict[str, list[float]] = {}
    for r in hinted["requests"]:
        if r["accept_len"] is not None:
            kinds.setdefault(r["hint"] or "no hint", []).append(r["accept_len"])
    return ", ".join(f"{k}: {min(v):.3f}-{max(v):.3f}" for k, v in kinds.items())
