#!/usr/bin/env python3
"""The report's tables from a side-by-side run (``specpolicy-livecheck paired --paired``).

The live check measures its speculative and speculation-free engines minutes apart, and the host's speed
drifts by up to 1.65x over that time (results/2026-12-02-sglang-0.5.12.post1-run8/notes.md), so its goal
ratios compare two moments of the host. A paired run keeps one engine per policy alive and rotates the same
batches across them: each goal ratio here is taken batch next to batch, repeat by repeat, and summarised as
median and min-max. Every policy in such a run is its engine's one policy for its whole life, as in serving
(``policy_life: engine``), where the live check starts a fresh policy in every phase. A run with
``--control-variant`` gets a ``control`` entry too: that phase's checks (``control_phase.checks``), met or
not.

Usage (the section goes to stdout as Markdown; ``--report`` merges it into report.json under
``paired["<path>/<backend>"]``):

    specpolicy-livecheck report OUT/ab-paired.json --key v1/triton --device "NVIDIA H200" \\
        --report results/<run>/report.json --md paired-v1-triton.md

On a release with v2 workers only the key names the release, the scheduling, the drafter and the backend,
and the goals are ``GOALS_V2`` (SGLang's ``--speculative-adaptive`` the anchor)::

    V=never_ov,sglang_eagle3_ov,adaptive_eagle3_ov,static_eagle3_ov,static0_eagle3_ov,cm_eagle3_ov
    specpolicy-livecheck report OUT/ab-paired.json --key sglang-0.5.17/overlap/eagle3/triton \\
        --variants $V --device "NVIDIA H100" --report results/<run>/report.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from specpolicy_livecheck import ab_static, control_phase, paired

#: ab_static variant -> the report's policy label (the live check's labels; the v2-only releases'
#: variants, ``<policy>_<drafter>_<ov|nov>``, from ab_static.V2_LABELS)
LABELS: dict[str, str] = {
    **ab_static.V2_LABELS,
    "base_v1": "never",
    "base_v2": "never",
    "off_v1": "static-0",
    "off_v2": "static-0",
    "off_eagle3_v1": "static-0",  # an EAGLE-3 run: report it with --variants base_v1,off_eagle3_v1
    "off_eagle3_v2": "static-0",
    "off_eagle3tree_v1": "static-0",  # the draft tree: --variants base_v1,off_eagle3tree_v1,... (its own key)
    "on_eagle3_v1": "static",
    "on_eagle3_v2": "static",
    "on_eagle3tree_v1": "static",
    "cm_eagle3_v1": "cost_model",
    "cm_eagle3_v2": "cost_model",
    "cm_eagle3tree_v1": "cost_model",
    "on_v1": "static",
    "on": "static",
    "plain_v1": "sglang-static",
    "plain": "sglang-static",
    "cm_v1": "cost_model",
    "cm_v2": "cost_model",
    "hyst_v1": "hysteresis",
    "hyst_v2": "hysteresis",
}

#: (policy, the policies it is held against (the best of them, repeat by repeat), the goal) as issue-level
#: goals state them: off as fast as a speculation-free engine, a policy as good as the better fixed engine,
#: the adapter's static as fast as SGLang's own
GOALS: tuple[tuple[str, tuple[str, ...], float], ...] = (
    ("static-0", ("never",), 0.95),
    ("cost_model", ("never", "static"), 0.95),
    ("hysteresis", ("never", "static"), 0.95),
    ("static", ("sglang-static",), 0.97),
)
#: The goals on a release with v2 workers only (SGLang 0.5.13 and later; keys ``sglang-<release>/...``),
#: where SGLang's own adaptive mode is the anchor the policy must not lose to.
GOALS_V2: tuple[tuple[str, tuple[str, ...], float], ...] = (
    ("static-0", ("never",), 0.97),
    ("cost_model", ("never", "static"), 0.97),
    ("cost_model", ("sglang-adaptive",), 1.0),
    ("static", ("sglang-static",), 0.98),
)
#: the first release whose speculative workers are v2 only
V2_ONLY_SINCE = Version("0.5.13")


def goals_for(key: str) -> tuple[tuple[str, tuple[str, ...], float], ...]:
    """The goals of a report key: ``GOALS_V2`` for ``sglang-<release>/...`` keys of a v2-only release,
    else ``GOALS`` (the keys of the earlier runs, ``<path>/<backend>``, keep theirs)."""
    head, sep, _ = key.partition("/")
    if sep and head.startswith("sglang-"):
        try:
            release = Version(head.removeprefix("sglang-"))
        except InvalidVersion:
            raise ValueError(f"--key {key!r}: {head!r} does not name an SGLang release") from None
        if release >= V2_ONLY_SINCE:
            return GOALS_V2
    return GOALS


def ratio_name(num: str, dens: tuple[str, ...]) -> str:
    return f"{num} / {dens[0]}" if len(dens) == 1 else f"{num} / max({', '.join(dens)})"


def section(
    res: dict[str, Any],
    device: str | None = None,
    only: list[str] | None = None,
    leave_out: dict[str, str] | None = None,
    goals: tuple[tuple[str, tuple[str, ...], float], ...] = GOALS,
) -> dict[str, Any]:
    """One ``paired["<path>/<backend>"]`` entry from ab-paired.json's contents; ``only``: the variants to
    take (a run that paired both worker paths reports each path's under its own key); ``leave_out``: levels
    (concurrency) not to report, each with the reason, which the entry keeps (``left_out``); their requests
    still count in ``lossless``."""
    batches: dict[str, dict[str, list[dict[str, Any]]]] = res["batches"]
    if only is not None:
        missing = [v for v in only if v not in batches]
        if missing:
            raise ValueError(f"variants {missing} are not in the run (it has {sorted(batches)})")
        batches = {v: batches[v] for v in only}
    checked = batches  # every batch's tokens were checked, a level left out included
    if leave_out:
        levels = {c for rows in batches.values() for c in rows}
        unknown = sorted(set(leave_out) - levels, key=int)
        if unknown:
            have = sorted(levels, key=int)
            raise ValueError(f"levels {unknown} to leave out are not in the run (it has {have})")
        batches = {v: {c: r for c, r in rows.items() if c not in leave_out} for v, rows in batches.items()}
    variant_of: dict[str, str] = {}
    for v in batches:
        label = LABELS.get(v, v)
        if label in variant_of:
            raise ValueError(f"variants {variant_of[label]!r} and {v!r} both measure {label!r}")
        variant_of[label] = v
    perf: dict[str, dict[str, float | None]] = {}
    spread: dict[str, dict[str, list[float]]] = {}
    accept: dict[str, dict[str, list[float]]] = {}
    for label, v in variant_of.items():
        perf[label] = {c: paired.median(rows) for c, rows in sorted(batches[v].items(), key=_level)}
        spread[label] = _min_max(batches[v], "tok_s")
        if row := _min_max(batches[v], "accept_len"):
            accept[label] = row
    ratios: dict[str, Any] = {}
    for num, dens, goal in goals:
        if num not in variant_of or any(d not in variant_of for d in dens):
            continue
        by_c = paired.ratios(batches, variant_of[num], [variant_of[d] for d in dens])
        ratios[ratio_name(num, dens)] = {
            "goal": goal,
            "by_c": dict(sorted(by_c.items(), key=_level)),
            "met": bool(by_c) and all(r["median"] is not None and r["median"] >= goal for r in by_c.values()),
        }
    lossless = {label: paired.lossless_total(checked[v]) for label, v in variant_of.items()}
    engines = res.get("engines", {})
    host = {label: h for label, v in variant_of.items() if (h := host_per_step(batches[v]))}
    return {
        "policy_life": "engine",
        "device": device,
        "variants": variant_of,
        "perf": perf,
        "perf_spread": spread,
        "accept_len_spread": accept,
        "ratios": ratios,
        "lossless": lossless,
        "lossless_all": all(x["requests"] > 0 and x["lossless"] == x["requests"] for x in lossless.values()),
        "engine_up_s": {
            label: engines.get(v, {}).get("engine_up_s") for label, v in variant_of.items() if v in engines
        },
        "host_us_per_step": host,
        **({"left_out": dict(leave_out)} if leave_out else {}),
        **({"control": ctl} if (ctl := control_section(res, batches)) else {}),
    }


def control_section(res: dict[str, Any], batches: dict[str, Any]) -> dict[str, Any] | None:
    """The ``--control-variant`` phase of the run, when its variant is among those reported: its checks
    (``control_phase.checks``), each batch's accept length and lossless count, the hinted batch's requests
    by kind, the swaps written and the trace's lines of them."""
    ctl = res.get("control")
    if not ctl or ctl.get("variant") not in batches:
        return None
    checks = control_phase.checks(ctl)
    out: dict[str, Any] = {
        "variant": ctl["variant"],
        "label": LABELS.get(ctl["variant"], ctl["variant"]),
        "checks": checks,
        "met": all(c["met"] for c in checks.values()),
    }
    for key in ("error", "skipped", "off_rule", "depth", "c", "tokens", "control_every", "swaps"):
        if key in ctl:
            out[key] = ctl[key]
    out["batches"] = {
        name: {
            "accept_len": b.get("accept_len"),
            "requests": len(b["requests"]),
            "lossless": sum(r["lossless"] for r in b["requests"]),
        }
        for name, b in ctl.items()
        if isinstance(b, dict) and "requests" in b
    }
    if "hinted" in ctl:
        out["hinted_requests"] = ctl["hinted"]["requests"]
    out["trace_notes"] = ctl.get("trace_notes", [])
    return out


#: the scheduler loop's call that counts steps in the host timers (one per batch the engine runs)
STEP = "Scheduler.run_batch"


def host_per_step(by_c: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per level, the median over the batches timed by ``paired --host-timers-dir`` of each engine
    method's host time per scheduler step, in microseconds: where two engines' steps differ on the host."""
    out: dict[str, dict[str, float]] = {}
    for c, rows in sorted(by_c.items(), key=_level):
        per: dict[str, list[float]] = {}
        for b in rows:
            t = (b.get("host") or {}).get("t", {})
            steps = t.get(STEP, [0, 0.0])[0]
            if steps <= 0:
                continue
            for name, (_, secs) in t.items():
                per.setdefault(name, []).append(secs / steps * 1e6)
        if per:
            out[c] = {name: round(sorted(v)[len(v) // 2], 1) for name, v in sorted(per.items())}
    return out


def _level(item: tuple[str, Any]) -> int:
    return int(item[0])


def _min_max(by_c: dict[str, list[dict[str, Any]]], key: str) -> dict[str, list[float]]:
    """Per level, ``[min, max]`` of ``key`` over the batches that report it (levels without: absent)."""
    return {
        c: [min(vals), max(vals)]
        for c, rows in sorted(by_c.items(), key=_level)
        if (vals := [b[key] for b in rows if b.get(key) is not None])
    }


def _ratio_cell(x: dict[str, Any] | None) -> str:
    """A ratio's median (min-max), and how many repeats were left out for unequal passes."""
    if x is None:
        return "-"
    cell = "-" if x["median"] is None else f"{x['median']:.3f} ({x['min']:.3f}-{x['max']:.3f})"
    return cell + (f", {x['unequal_passes']} left out: unequal passes" if x.get("unequal_passes") else "")


def markdown(key: str, sec: dict[str, Any]) -> str:
    """The section as tables: tokens/s per policy and level, the speculative engines' acceptance, and the
    goal ratios."""
    levels = sorted({c for row in sec["perf"].values() for c in row}, key=int)
    head = "| policy | " + " | ".join(levels) + " |"
    rule = "|---|" + "---:|" * len(levels)
    lines = [
        f"**{key}**, output tokens/s, median (min-max) of the repeats, engines side by side:",
        "",
        head,
        rule,
    ]
    for label, row in sec["perf"].items():
        cells = []
        for c in levels:
            med, mm = row.get(c), sec["perf_spread"][label].get(c)
            cells.append(
                "-" if med is None else f"{med:,.0f} ({mm[0]:,.0f}-{mm[1]:,.0f})" if mm else f"{med:,.0f}"
            )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    accept = sec.get("accept_len_spread") or {}
    if accept:
        # engines doing the same thing show the same acceptance: their ratio then measures the host
        lines += ["", "Acceptance length per batch, min-max (1.00: every step off):", "", head, rule]
        for label, row in accept.items():
            cells = [f"{row[c][0]:.2f}-{row[c][1]:.2f}" if c in row else "-" for c in levels]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| ratio, batch next to batch | goal | " + " | ".join(levels) + " | met |",
        "|---|---:|" + "---:|" * (len(levels) + 1),
    ]
    for name, r in sec["ratios"].items():
        cells = []
        for c in levels:
            x = r["by_c"].get(c)
            cells.append(_ratio_cell(x))
        lines.append(f"| {name} | {r['goal']} | " + " | ".join(cells) + f" | {'yes' if r['met'] else 'no'} |")
    total = sum(x["requests"] for x in sec["lossless"].values())
    ok = sum(x["lossless"] for x in sec["lossless"].values())
    errors = sum(x["errors"] for x in sec["lossless"].values())
    lines += ["", f"Lossless: {ok:,} of {total:,} requests equal the oracle; {errors} batches failed."]
    if "control" in sec:
        lines += control_markdown(sec["control"])
    host = sec.get("host_us_per_step") or {}
    for c in levels:
        labels = [label for label in host if c in host[label]]
        if not labels:
            continue
        stages = sorted({name for label in labels for name in host[label][c]})
        lines += ["", f"Host time per scheduler step at {c} requests, us (median of the batches):", ""]
        lines += ["| method | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
        for name in stages:
            vals = [host[label][c].get(name) for label in labels]
            lines.append(f"| {name} | " + " | ".join("-" if x is None else f"{x:,.1f}" for x in vals) + " |")
    return "\n".join(lines) + "\n"


#: the control phase's checks as the report names them
CHECK_NAMES = {
    "lossless": "every request equals the oracle (100%)",
    "hinted_rule": "the hinted batch follows the batch rule",
    "swap_took_effect": "the swap to static-0 took effect (accept length 1)",
    "swap_reverted": "the swap back to static took effect (accept length above 1)",
}


def control_markdown(ctl: dict[str, Any]) -> list[str]:
    """The control phase's lines: what ran, each batch's accept length, the checks met or not."""
    rule = ctl.get("off_rule", "?")
    lines = [
        "",
        f"Control while serving, on the {ctl['label']} engine ({ctl['variant']}): per-request hints"
        f" (batch rule {rule!r}: off while any request opts out) and a policy swap through the control file:",
        "",
    ]
    if ctl.get("batches"):
        lines += ["| batch | accept length | lossless |", "|---|---:|---:|"]
        for name, b in ctl["batches"].items():
            acc = "-" if b["accept_len"] is None else f"{b['accept_len']:.3f}"
            lines.append(f"| {name} | {acc} | {b['lossless']} of {b['requests']} |")
        lines.append("")
    lines += ["| check | met | detail |", "|---|---|---|"]
    for name, c in ctl["checks"].items():
        lines.append(f"| {CHECK_NAMES.get(name, name)} | {'yes' if c['met'] else 'no'} | {c['detail']} |")
    notes = ctl.get("trace_notes") or []
    if notes:
        steps = ", ".join(
            f"step {n.get('step')}: {n.get('kind')} {json.dumps(n.get('policy'))}" for n in notes
        )
        lines += ["", f"The engine's trace: {steps}."]
    return lines


def merge(report_path: Path, key: str, sec: dict[str, Any]) -> None:
    """Put ``sec`` under ``paired[key]`` of report.json, keeping every other key."""
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    report.setdefault("paired", {})[key] = sec
    report_path.write_text(json.dumps(report, indent=1) + "\n")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("paired_json", type=Path, help="ab-paired.json written by paired --paired")
    ap.add_argument(
        "--key",
        required=True,
        help='"<path>/<attention backend>", e.g. v1/triton, or on a v2-only release'
        ' "sglang-<release>/<overlap|no-overlap>/<draft|eagle3>/<backend>" (its own goals)',
    )
    ap.add_argument("--device", help="the GPU the run used, recorded with the section")
    ap.add_argument("--commit", help="the specpolicy commit the run used, recorded with the section")
    ap.add_argument("--variants", help="comma-separated: report only these variants of the run")
    ap.add_argument(
        "--leave-out",
        action="append",
        default=[],
        metavar="LEVEL=REASON",
        help="a concurrency level not to report, and why (recorded with the section); repeatable",
    )
    ap.add_argument("--report", type=Path, help="report.json to merge the section into")
    ap.add_argument("--md", type=Path, help="also write the Markdown here")
    args = ap.parse_args(argv)
    try:
        only = args.variants.split(",") if args.variants else None
        leave_out = {}
        for item in args.leave_out:
            level, sep, why = item.partition("=")
            if not sep or not level.strip().isdigit() or not why.strip():
                raise ValueError(f"--leave-out {item!r}: expected LEVEL=REASON, e.g. 128='the batch queued'")
            leave_out[level.strip()] = why.strip()
        goals = goals_for(args.key)
        sec = section(json.loads(args.paired_json.read_text()), args.device, only, leave_out, goals)
        if args.commit:
            sec["specpolicy"] = args.commit
    except (OSError, ValueError, KeyError) as exc:
        print(f"paired_report: {args.paired_json}: {exc}", file=sys.stderr)
        return 2
    md = markdown(args.key, sec)
    print(md, end="")
    if args.md:
        args.md.write_text(md)
    if args.report:
        merge(args.report, args.key, sec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
