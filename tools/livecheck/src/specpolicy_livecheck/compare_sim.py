#!/usr/bin/env python3
"""Compare the simulator's prediction with the live measurement, per policy and concurrency.

For every live perf phase (``concurrency`` requests submitted together, fixed prompt and output lengths) it
writes the same requests as a simulator workload file, runs ``specpolicy simulate`` with a step-cost profile
(normally the one fitted from the live trace) and the same policy configurations, and reports the relative
error of the predicted output tokens/s against the measured one.

    specpolicy-livecheck compare-sim --report REPORT.json --profile PROFILE.json --path v1/triton \
        --acceptance 0.7 --feedback-lag 0 [--json OUT.json]

REPORT.json is what ``specpolicy-livecheck analyze --json`` writes (``--path v1`` reads ``v1/triton`` of a
report keyed by backend, or ``v1`` of one written before backends were a dimension). ``--output 0`` (the
default) gives each level the output length the plan sized it with.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from specpolicy_livecheck import plan as planmod

__all__ = ["sim_label", "workload_lines", "relative_errors", "perf_table", "main"]


def sim_label(live_label: str, spec: dict[str, Any] | None) -> str:
    """The simulator's name for a live policy label (comparators for never/static-k, configs otherwise)."""
    if live_label == "never":
        return "never"
    if live_label == "sglang-static":  # SGLang's own static speculation at the launch depth
        return f"static-{planmod.LAUNCH_DEPTH}"
    if spec is not None and spec.get("name") == "static":
        return f"static-{spec['num_steps']}"
    return live_label


def workload_lines(concurrency: int, prompt: int, output: int, acceptance: float) -> list[str]:
    """``concurrency`` requests arriving together: the live phase as a simulator requests file."""
    rec = {"arrival_s": 0.0, "prompt_tokens": prompt, "output_tokens": output, "acceptance": acceptance}
    return [json.dumps(rec)] * concurrency


def _match(runs: list[dict[str, Any]], label: str) -> float | None:
    for r in runs:
        if r["policy"] == label or r["policy"].startswith(label + "{"):
            return float(r["output_tok_s"])
    return None


def perf_table(report: dict[str, Any], path: str) -> dict[str, dict[int, float]]:
    """The report's median table for ``path`` (``v2/flashinfer``; a bare ``v2`` means triton, or the key of
    a report from before backends were keyed)."""
    perf = report["perf"]
    key = path if path in perf else f"{path}/triton"
    return {pol: {int(c): float(v) for c, v in row.items()} for pol, row in perf[key].items()}


def relative_errors(
    live: dict[str, dict[int, float]], predicted: dict[str, dict[int, float]]
) -> dict[str, Any]:
    """Per policy: (predicted - live) / live at every concurrency both have, and the mean absolute error."""
    out: dict[str, Any] = {}
    for pol, row in live.items():
        errs = {c: (predicted[pol][c] - v) / v for c, v in row.items() if v and c in predicted.get(pol, {})}
        if errs:
            out[pol] = {
                "by_concurrency": {c: round(e, 4) for c, e in sorted(errs.items())},
                "mean_abs": round(sum(abs(e) for e in errs.values()) / len(errs), 4),
                "max_abs": round(max(abs(e) for e in errs.values()), 4),
            }
    return out


def simulate_level(
    profile: str,
    concurrency: int,
    prompt: int,
    output: int,
    acceptance: float,
    policies: list[dict[str, Any]],
    feedback_lag: int,
    decide_cost_us: float,
) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        wl = Path(tmp) / f"c{concurrency}.jsonl"
        wl.write_text("\n".join(workload_lines(concurrency, prompt, output, acceptance)) + "\n")
        out = Path(tmp) / "sim.json"
        cmd = [
            "specpolicy",
            "simulate",
            "--profile",
            profile,
            "--workload",
            str(wl),
            "--json",
            str(out),
            "--decide-cost-us",
            str(decide_cost_us),
            "--no-progress",
            "--feedback-lag",
            str(feedback_lag),
            "--max-running",
            str(max(concurrency, 1)),
            "--jobs",
            "1",
            "--policy",
            *[json.dumps(p) for p in policies],
        ]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        runs: list[dict[str, Any]] = json.loads(out.read_text())["runs"]
        return runs


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", required=True)
    ap.add_argument("--profile", required=True)
    ap.add_argument("--path", required=True, help="v1, v2, or <path>/<backend> such as v2/flashinfer")
    ap.add_argument("--acceptance", type=float, required=True, help="per-token acceptance of the workload")
    ap.add_argument("--feedback-lag", type=int, choices=(0, 1), default=0)
    ap.add_argument("--decide-cost-us", type=float, default=2.0)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--output", type=int, default=0, help="output tokens per request; 0: as planned")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    report = json.loads(Path(args.report).read_text())
    live = perf_table(report, args.path)
    side = args.path.split("/", 1)[0]
    specs = planmod.perf_policies()
    policies = [specs[p] for p in live if p in specs and specs[p]["name"] != "static"]
    predicted: dict[str, dict[int, float]] = {}
    levels = sorted({c for row in live.values() for c in row})
    for c in levels:
        runs = simulate_level(
            args.profile,
            c,
            args.prompt,
            args.output or planmod.perf_tokens_for(c, side),
            args.acceptance,
            policies,
            args.feedback_lag,
            args.decide_cost_us,
        )
        for pol in live:
            got = _match(runs, sim_label(pol, specs.get(pol)))
            if got is not None:
                predicted.setdefault(pol, {})[c] = got
    errors = relative_errors(live, predicted)
    result = {
        "path": args.path,
        "profile": args.profile,
        "acceptance": args.acceptance,
        "feedback_lag": args.feedback_lag,
        "live": live,
        "predicted": predicted,
        "errors": errors,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"| policy | {' | '.join(str(c) for c in levels)} | mean abs error |")
    print("|---|" + "---:|" * (len(levels) + 1))
    for pol, row in live.items():
        cells = []
        for c in levels:
            p, v = predicted.get(pol, {}).get(c), row.get(c)
            cells.append("-" if p is None or v is None else f"{v:,.0f} / {p:,.0f}")
        err = errors.get(pol, {}).get("mean_abs")
        print(f"| {pol} | {' | '.join(cells)} | {'-' if err is None else f'{100 * err:.1f}%'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
