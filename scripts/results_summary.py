"""Generate the results pages from the measurement reports and the release tables.

``results/runs.json`` lists every measurement run whose figures the docs may quote: its date, engine,
release, report file and the report's format. From those reports and from the adapters' release tables
this script writes

* ``docs/results/summary.md``: one row per run, report key and goal ratio (device, release, date, the ratio's
  medians over the concurrency levels, the goal, met or not, lossless counts);
* ``docs/results/support.md``: one row per supported engine release (route, tested in CI, live where and
  when, and what the live runs met);
* the status table of README.md, its generated block ``status`` (``generated_pages.splice_blocks``).

Nothing in these pages is typed by hand: a figure there comes from a report. ``--check`` exits 1 when a
page differs from what the reports give (the test suite runs it), ``--write`` rewrites them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generated_pages import Block, BlockError, block_pages, markers, parse_mode, write_or_check

ROOT = Path(__file__).resolve().parents[1]
RUNS = Path("results/runs.json")
SUMMARY = Path("docs/results/summary.md")
SUPPORT = Path("docs/results/support.md")
README = Path("README.md")
SCRIPT = "scripts/results_summary.py"
BEGIN, END = markers("status", SCRIPT)

FORMATS = ("paired-report", "vllm-check", "ab-paired")
ENGINES = ("sglang", "vllm")
#: the vLLM goals (a vllm-check report names its ratios but not their goals)
VLLM_GOALS: Mapping[str, float] = {
    "static-0/never": 0.95,
    "cost_model/max(never,vllm-static)": 0.95,
    "static/vllm-static": 0.97,
}
#: the ratio a support row quotes as the off step's figure, per report format
OFF_RATIOS = ("static-0 / never", "static-0/never")


class RunsError(ValueError):
    """A bad entry in runs.json, naming the run and the field."""


@dataclass(frozen=True)
class Run:
    """One measurement run (an entry of runs.json)."""

    id: str
    date: str
    engine: str
    release: str
    report: str
    format: str
    note: str = ""
    device: str = ""  # for a report that does not name its device
    scope: str = ""  # what the run covered, in a few words (the support table quotes it)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], index: int) -> Run:
        where = f"runs.json entry {index} ({raw.get('id', '?')!r})"
        fields = {}
        for name in ("id", "date", "engine", "release", "report", "format"):
            value = raw.get(name)
            if not isinstance(value, str) or not value:
                raise RunsError(f"{where}: {name!r} must be a non-empty string, got {value!r}")
            fields[name] = value
        if fields["engine"] not in ENGINES:
            raise RunsError(f"{where}: engine must be one of {', '.join(ENGINES)}, got {fields['engine']!r}")
        if fields["format"] not in FORMATS:
            raise RunsError(f"{where}: format must be one of {', '.join(FORMATS)}, got {fields['format']!r}")
        date = fields["date"]
        if len(date) != 10 or date[4] != "-" or date[7] != "-" or not date.replace("-", "").isdigit():
            raise RunsError(f"{where}: date must be YYYY-MM-DD, got {date!r}")
        unknown = sorted(set(raw) - {*fields, "note", "device", "scope"})
        if unknown:
            raise RunsError(f"{where}: unknown field(s) {', '.join(unknown)}")
        return cls(
            **fields,
            note=str(raw.get("note", "")),
            device=str(raw.get("device", "")),
            scope=str(raw.get("scope", "")),
        )


@dataclass(frozen=True)
class Row:
    """One goal ratio of one report key: its medians over the levels measured."""

    run: Run
    key: str
    device: str
    commit: str
    ratio: str
    medians: tuple[float, ...]
    goal: float | None
    met: bool | None
    lossless: tuple[int, int]  # (equal to the oracle, requests)

    @property
    def low(self) -> float | None:
        return min(self.medians) if self.medians else None

    @property
    def high(self) -> float | None:
        return max(self.medians) if self.medians else None


def load_runs(root: Path) -> list[Run]:
    raw = json.loads((root / RUNS).read_text())
    if not isinstance(raw, list):
        raise RunsError("runs.json must hold a list of runs")
    runs = [Run.parse(r, i) for i, r in enumerate(raw)]
    ids = [r.id for r in runs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise RunsError(f"runs.json: run id(s) listed twice: {', '.join(dup)}")
    for r in runs:
        if not (root / r.report).is_file():
            raise RunsError(f"runs.json run {r.id!r}: report {r.report} does not exist")
    return runs


def lossless_counts(entries: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    equal = total = 0
    for e in entries:
        equal += int(e.get("lossless", 0))
        total += int(e.get("requests", 0))
    return equal, total


def _medians(by_c: Mapping[str, Mapping[str, Any]]) -> tuple[float, ...]:
    return tuple(float(v["median"]) for _, v in sorted(by_c.items(), key=lambda kv: int(kv[0])))


def _paired_report(run: Run, report: Mapping[str, Any]) -> list[Row]:
    rows = []
    for key, entry in report.get("paired", {}).items():
        lossless = lossless_counts(entry.get("lossless", {}).values())
        for name, r in entry.get("ratios", {}).items():
            rows.append(
                Row(
                    run,
                    key,
                    str(entry.get("device", "?")),
                    str(entry.get("specpolicy") or "?"),
                    name,
                    _medians(r["by_c"]),
                    float(r["goal"]),
                    bool(r["met"]),
                    lossless,
                )
            )
    return rows


def _vllm_check(run: Run, report: Mapping[str, Any]) -> list[Row]:
    sitting = report.get("sitting", {})
    commit = str(sitting.get("specpolicy", "?")).split(",")[0].split()[0]
    lossless = lossless_counts(report.get("lossless", {}).values())
    rows = []
    for key, ratios in report.get("ratios", {}).items():
        for name, by_c in ratios.items():
            medians = _medians(by_c)
            goal = VLLM_GOALS.get(name)
            met = None if goal is None else min(medians) >= goal
            rows.append(
                Row(run, key, str(report.get("device", "?")), commit, name, medians, goal, met, lossless)
            )
    return rows


def _ab_paired(run: Run, report: Mapping[str, Any]) -> list[Row]:
    """A side-by-side run's ratios to its first variant; a run where only the first engine started has
    none, and gives one row without a ratio (the note says why)."""
    lossless = lossless_counts(report.get("lossless", {}).values())
    ready = [v for v, e in report.get("engines", {}).items() if e.get("ready")]
    device = str(report.get("device") or run.device or "?")
    rows = []
    for variant, by_c in (report.get("ratio_to_first") or {}).items():
        medians = tuple(float(v["median"]) for _, v in sorted(by_c.items(), key=lambda kv: int(kv[0])))
        rows.append(Row(run, variant, device, "?", f"{variant} / {ready[0]}", medians, None, None, lossless))
    if not rows:
        rows.append(Row(run, ",".join(ready) or "-", device, "?", "-", (), None, None, lossless))
    return rows


READERS = {"paired-report": _paired_report, "vllm-check": _vllm_check, "ab-paired": _ab_paired}


def all_rows(root: Path, runs: Sequence[Run]) -> list[Row]:
    rows: list[Row] = []
    for run in runs:
        report = json.loads((root / run.report).read_text())
        rows.extend(READERS[run.format](run, report))
    return rows


# ------------------------------------------------------------------------------------------------ support


@dataclass(frozen=True)
class Supported:
    engine: str
    release: str
    route: str


def supported() -> list[Supported]:
    """Every release the adapters' tables list (each has a test environment: tested in CI)."""
    from specpolicy.adapters.sglang.releases import RELEASES as SGLANG
    from specpolicy.adapters.vllm.versions import RELEASES as VLLM

    out = [Supported("sglang", r.version, f"{r.route} workers") for r in reversed(SGLANG)]
    for v in reversed(VLLM):
        out.append(
            Supported("vllm", v.version, "V1 and V2 model runners" if v.v1_runner else "V2 model runner")
        )
    return out


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _range(rows: Sequence[Row]) -> str:
    lows = [r.low for r in rows if r.low is not None]
    highs = [r.high for r in rows if r.high is not None]
    if not lows:
        return "-"
    lo, hi = min(lows), max(highs)
    return _fmt(lo) if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"


def live_cell(rows: Sequence[Row]) -> str:
    if not rows:
        return "not run on a GPU"
    dates = sorted({r.run.date for r in rows})
    devices = sorted({r.device for r in rows})
    with_goal = [r for r in rows if r.goal is not None]
    what = f"{dates[-1]}, {', '.join(devices)}"
    if not with_goal:
        return f"bring-up only ({what})"
    return f"yes ({what})"


def figure_cell(rows: Sequence[Row]) -> str:
    goals = [r for r in rows if r.met is not None]
    if not goals:
        notes = sorted({r.run.note for r in rows if r.run.note})
        return notes[0] if notes else "-"
    off = [r for r in rows if r.ratio in OFF_RATIOS]
    met = sum(1 for r in goals if r.met)
    parts = [f"off step {_range(off)}x a speculation-free engine"] if off else []
    parts.append(f"goals met in {met} of {len(goals)} rows")
    scopes = sorted({r.run.scope for r in rows if r.run.scope})
    return "; ".join(parts) + (f" ({'; '.join(scopes)})" if scopes else "")


def support_table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "| engine | release | route | CI | live | headline (from the reports) |",
        "|---|---|---|---|---|---|",
    ]
    for s in supported():
        mine = [r for r in rows if r.run.engine == s.engine and r.run.release == s.release]
        lines.append(
            f"| {'SGLang' if s.engine == 'sglang' else 'vLLM'} | {s.release} | {s.route} | yes | "
            f"{live_cell(mine)} | {figure_cell(mine)} |"
        )
    return lines


# ------------------------------------------------------------------------------------------------ render


def render_summary(rows: Sequence[Row]) -> str:
    lines = [
        "# Live results: summary",
        "",
        "Generated by `python3 scripts/results_summary.py --write` from the reports listed in",
        "`results/runs.json`; do not edit by hand. One row per report key and goal ratio: the ratio's",
        "medians over the concurrency levels measured (lowest and highest), the goal it is held to, and",
        "whether every level met it. Lossless: requests whose tokens equal the oracle's, of all the key's",
        "requests. Each run links to its notes (its commands, and the specpolicy commit its report records).",
        "",
        "| run | key | device | release | date | ratio | medians | goal | met | lossless |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = "-" if r.met is None else ("yes" if r.met else "no")
        medians = "-" if r.low is None else f"{_fmt(r.low)} - {_fmt(r.high)}"
        lines.append(
            f"| [{r.run.id}](../../{Path(r.run.report).parent}/notes.md) | `{r.key}` | {r.device} | "
            f"{r.run.engine} {r.run.release} | "
            f"{r.run.date} | {r.ratio} | {medians} | {_fmt(r.goal)} | {met} | "
            f"{r.lossless[0]:,} / {r.lossless[1]:,} |"
        )
    notes = [(r.id, r.note) for r in dict.fromkeys(row.run for row in rows) if r.note]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {i}: {n}" for i, n in notes]
    return "\n".join(lines) + "\n"


def render_support(rows: Sequence[Row]) -> str:
    lines = [
        "# Support matrix",
        "",
        "Generated by `python3 scripts/results_summary.py --write` from the adapters' release tables",
        "(`specpolicy/adapters/sglang/releases.py`, `specpolicy/adapters/vllm/versions.py`) and the",
        "reports in `results/runs.json`; do not edit by hand. Every release listed is tested in CI on CPU",
        'against the real engine package; "live" says whether and when it ran on a GPU (the latest run).',
        "The rows behind each headline are in [summary.md](summary.md).",
        "",
        *support_table(rows),
    ]
    return "\n".join(lines) + "\n"


def readme_status(root: Path) -> str:
    return "\n".join(support_table(all_rows(root, load_runs(root))))


#: the generated blocks of hand-written pages that this script fills
BLOCKS = (Block(README, "status", readme_status),)


def pages(root: Path) -> dict[Path, str]:
    rows = all_rows(root, load_runs(root))
    return {SUMMARY: render_summary(rows), SUPPORT: render_support(rows), **block_pages(root, BLOCKS, SCRIPT)}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_mode(__doc__.splitlines()[0], ROOT, argv)
    try:
        want = pages(args.root)
    except (RunsError, BlockError, OSError, KeyError, json.JSONDecodeError) as exc:
        print(f"results_summary: {exc}", file=sys.stderr)
        return 2
    command = "python3 scripts/results_summary.py --write"
    return write_or_check(want, args.root, write=args.write, command=command)


if __name__ == "__main__":
    raise SystemExit(main())
