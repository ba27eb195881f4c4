"""Generate the live figures that hand-written docs pages quote, from the reports in results/runs.json.

A page quotes a live figure only inside a generated block (``generated_pages.BLOCK``); this script fills
every such block from the table ``BLOCKS`` (page, block, function). Each function picks its run from
runs.json by what the run measured (engine, release, format, report keys), never by its name, so a run
added to runs.json is quoted without a change here. ``--check`` exits 1 when a block differs from what
the reports give (the test suite runs it), ``--write`` refills them.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from generated_pages import Block, BlockError, block_pages, parse_mode, write_or_check
from results_summary import (
    ROOT,
    Row,
    Run,
    RunsError,
    all_rows,
    live_cell,
    load_runs,
    lossless_counts,
    supported,
)

SCRIPT = "scripts/live_figures.py"
VLLM_PAGE = Path("docs/getting-started/vllm.md")
GAPS = Path("docs/results/known-gaps.md")
V1_RUNNER = "mrv1/"  # a vllm-check report's key prefix for the V1 model runner


def _report(root: Path, run: Run) -> dict[str, Any]:
    data = json.loads((root / run.report).read_text())
    if not isinstance(data, dict):
        raise RunsError(f"run {run.id!r}: report {run.report} is not a JSON object")
    return data


def _link(run: Run, page: Path) -> str:
    folder = Path(run.report).parent
    return f"[{folder}]({os.path.relpath(folder / 'notes.md', page.parent)})"


def _span(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"


def _medians(by_c: Mapping[str, Any]) -> list[float]:
    return [float(v["median"] if isinstance(v, Mapping) else v) for v in by_c.values()]


def _levels(by_c: Mapping[str, Any]) -> str:
    cs = sorted(int(c) for c in by_c)
    return f"{cs[0]}-{cs[-1]}" if len(cs) > 1 else str(cs[0])


def _v1_runner_run(root: Path) -> tuple[Run, dict[str, Any], str] | None:
    """The latest vLLM run whose report measured the V1 model runner, its report and that key."""
    for run in sorted(load_runs(root), key=lambda r: r.date, reverse=True):
        if run.format != "vllm-check":
            continue
        report = _report(root, run)
        key = next((k for k in report.get("ratios", {}) if k.startswith(V1_RUNNER)), None)
        if key is not None:
            return run, report, key
    return None


def vllm_v1_off(root: Path) -> str:
    """What depth 0 gives on the V1 model runner, and how much of it is the graph mode."""
    found = _v1_runner_run(root)
    if found is None:
        return "Not measured live yet."
    run, report, key = found
    off = report["ratios"][key]["static-0/never"]
    text = (
        f"Measured live on vLLM {run.release} (the V1 model runner, {report.get('device', run.device)}, "
        f"{_link(run, VLLM_PAGE)}): depth 0 gave {_span(_medians(off))} a speculation-free engine's "
        f"throughput at {_levels(off)} requests"
    )
    controls = report.get("controls", {}).get("median_ratios", {}).get(key, {})
    if "never-pw/never" in controls and "static-0/never-pw" in controls:
        text += (
            f"; a speculation-free engine held to piecewise graphs gave "
            f"{_span(_medians(controls['never-pw/never']))} its full-graph throughput, and depth 0 "
            f"{_span(_medians(controls['static-0/never-pw']))} that engine (equal graphs)"
        )
    return text + "."


def vllm_v1_speculative(root: Path) -> str:
    """The adapter's speculative step against vLLM's fixed K on the V1 runner, with and without equal
    graphs."""
    found = _v1_runner_run(root)
    if found is None:
        return "not measured live yet"
    run, report, key = found
    full = _span(_medians(report["ratios"][key]["static/vllm-static"]))
    text = f"the adapter's step gave {full} vLLM's fixed K"
    controls = report.get("controls", {}).get("median_ratios", {}).get(key, {})
    if "static/vllm-static-pw" in controls:
        piecewise = _span(_medians(controls["static/vllm-static-pw"]))
        text += f" with full graphs, {piecewise} with piecewise graphs on both sides"
    return f"{text}; {_link(run, VLLM_PAGE)}"


def vllm_lossless(root: Path) -> str:
    """Every live vLLM run's lossless count."""
    parts = []
    for run in load_runs(root):
        if run.engine != "vllm":
            continue
        equal, total = lossless_counts(_report(root, run).get("lossless", {}).values())
        parts.append(
            f"vLLM {run.release} ({run.scope or run.note}, {run.date}): {equal:,} of {total:,} requests of "
            f"its throughput sweep equal to the oracle, {_link(run, VLLM_PAGE)}"
        )
    return "; ".join(parts) if parts else "no vLLM release has run on a GPU yet"


def _not_live(root: Path, engine: str) -> str:
    rows = all_rows(root, load_runs(root))
    out = []
    for s in supported():
        if s.engine != engine:
            continue
        mine = [r for r in rows if r.run.engine == engine and r.run.release == s.release]
        if any(r.goal is not None for r in mine):
            continue
        runs = sorted({f"`{Path(r.run.report).parent.name}`" for r in mine})
        out.append(f"{s.release}: {live_cell(mine)}" + "".join(f", {r}" for r in runs))
    return "; ".join(out) if out else "none"


def sglang_not_live(root: Path) -> str:
    """SGLang releases without a speculative engine measured live (no row held to a goal)."""
    return _not_live(root, "sglang")


def vllm_not_live(root: Path) -> str:
    """vLLM releases without a live run held to a goal."""
    return _not_live(root, "vllm")


def _spreads(rows: Sequence[Row], root: Path) -> list[float]:
    out = []
    for run in dict.fromkeys(r.run for r in rows if r.run.format == "paired-report"):
        for entry in _report(root, run).get("paired", {}).values():
            for ratio in entry.get("ratios", {}).values():
                for v in ratio["by_c"].values():
                    if int(v.get("n", 0)) > 1 and float(v["median"]) > 0:
                        out.append((float(v["max"]) - float(v["min"])) / float(v["median"]))
    return sorted(out)


def repeat_spread(root: Path) -> str:
    """How far the repeats of one side-by-side ratio spread: the noise floor of a goal ratio."""
    spreads = _spreads(all_rows(root, load_runs(root)), root)
    if not spreads:
        return "no side-by-side run has measured it yet"
    p90 = spreads[min(len(spreads) - 1, round(0.9 * (len(spreads) - 1)))]
    return (
        "side by side, the repeats of a ratio at one level spread (highest minus lowest, over the median) "
        f"by {statistics.median(spreads):.0%} at the median and {p90:.0%} at the 90th percentile of the "
        f"{len(spreads)} levels the side-by-side reports hold"
    )


#: every generated block of a hand-written page that quotes a live figure
BLOCKS = (
    Block(VLLM_PAGE, "vllm-v1-off", vllm_v1_off),
    Block(VLLM_PAGE, "vllm-v1-speculative", vllm_v1_speculative),
    Block(VLLM_PAGE, "vllm-lossless", vllm_lossless),
    Block(GAPS, "sglang-not-live", sglang_not_live),
    Block(GAPS, "vllm-not-live", vllm_not_live),
    Block(GAPS, "repeat-spread", repeat_spread),
)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_mode(__doc__.splitlines()[0], ROOT, argv)
    try:
        want = block_pages(args.root, BLOCKS, SCRIPT)
    except (RunsError, BlockError, OSError, KeyError, json.JSONDecodeError) as exc:
        print(f"live_figures: {exc}", file=sys.stderr)
        return 2
    return write_or_check(want, args.root, write=args.write, command=f"python3 {SCRIPT} --write")


if __name__ == "__main__":
    raise SystemExit(main())
