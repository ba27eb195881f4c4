"""Every live figure in the docs comes from a report: it sits in a generated block, and the blocks are
current.

A live figure, for this test: a ratio (``0.96x``, ``0.28-0.56x``), a throughput (``5,223 tok/s``), a
series of ratios (``0.70 / 0.71``) or a percentage, in a paragraph, list item or table row that speaks of
a live run (says "live", "on a GPU" or "measured:", or names a GPU run of results/). Simulator figures
in a paragraph of their own are not live figures; step times and durations are not matched. Outside the
generated blocks (``scripts/generated_pages.py``) such a figure is either history, which belongs in the
run's notes.md, or a figure that should be generated (``scripts/live_figures.py``).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import generated_pages as gp  # noqa: E402
import live_figures as lf  # noqa: E402
import results_summary as rs  # noqa: E402

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
IDS = [str(p.relative_to(ROOT)) for p in PAGES]

FIGURE = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?(?:\s*-\s*\d+(?:\.\d+)?)?x\b"  # a ratio: 0.96x, 0.28-0.56x
    r"|\d[\d,.]*\s*(?:output\s+)?tok(?:ens)?/s"  # a throughput
    r"|\d\.\d\d(?: / \d\.\d\d)+"  # a series of ratios
    r"|\d+(?:\.\d+)?%"  # a percentage
)
LIVE = re.compile(
    r"(?i:(?<![\w-])live(?![\w-])|(?<!not )\bmeasured:|on a GPU)|\d{4}-\d\d-\d\d-(?:sglang|vllm)-[\w.]+"
)
#: (page, figure, why it is not a live figure)
ALLOWED = {
    ("docs/getting-started/sglang.md", "10%"): "a setting: the share of free GPU memory the buffer may take",
}


def units(text: str) -> list[tuple[int, str]]:
    """The page's paragraphs, list items and table rows, with their first line, code and generated blocks
    left out (a code block keeps its lines, blank, so the numbers stay those of the file)."""
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    text = gp.strip_blocks(text)
    out: list[tuple[int, str]] = []
    cur: list[str] = []
    start = 1
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or re.match(r"\s*(?:[*-]|\d+\.)\s|\|", line):
            if cur:
                out.append((start, "\n".join(cur)))
            cur = []
        if line.strip():
            if not cur:
                start = n
            cur.append(line)
    if cur:
        out.append((start, "\n".join(cur)))
    return out


def live_figures(text: str) -> list[tuple[int, str]]:
    """Every live figure outside a generated block, as (line, figure)."""
    return [(n, m.group(0)) for n, u in units(text) if LIVE.search(u) for m in FIGURE.finditer(u)]


def test_the_pattern_finds_a_live_figure_and_only_there() -> None:
    live = "Measured live on vLLM (1-128 requests): depth 0 gave 0.28-0.56x, 5,223 tok/s.\n"
    assert [f for _, f in live_figures(live)] == ["0.28-0.56x", "5,223 tok/s"]
    run = "- off 0.70 / 0.71 (`2026-12-02-sglang-0.5.12.post1-run5`), 12% slower\n"
    assert [f for _, f in live_figures(run)] == ["0.70 / 0.71", "12%"]
    assert live_figures("In the simulator cost_model is 1.048x the best fixed depth.\n") == []
    assert live_figures("Measured live (run X):\n\nthe simulator gives 0.97x.\n") == []  # another paragraph
    begin, end = gp.markers("b", "scripts/live_figures.py")
    assert live_figures(f"Measured live: {begin}0.28-0.56x{end}.\n") == []
    assert live_figures("A 4x4 tree, W x rows, not measured: 3 requests.\n") == []


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_a_page_quotes_live_figures_only_from_generated_blocks(page: Path) -> None:
    rel = str(page.relative_to(ROOT))
    if rel in (str(rs.SUMMARY), str(rs.SUPPORT)):
        return  # generated whole
    found = [f"line {n}: {f!r}" for n, f in live_figures(page.read_text()) if (rel, f) not in ALLOWED]
    assert not found, (
        f"{rel}: live figures outside a generated block: {found}; generate them (scripts/live_figures.py) "
        "or move them to the run's notes.md"
    )


def test_every_allowed_figure_is_still_there() -> None:
    for (rel, figure), why in ALLOWED.items():
        found = [f for _, f in live_figures((ROOT / rel).read_text())]
        assert figure in found, f"{rel}: {figure} ({why}) is gone: drop it from ALLOWED"


def test_the_blocks_are_what_the_reports_give() -> None:
    assert lf.main(["--check"]) == 0, "run python3 scripts/live_figures.py --write"


# ------------------------------------------------------------------------------------------------ a copy


def _copy(tmp_path: Path) -> Path:
    reports = [r.report for r in rs.load_runs(ROOT)]
    for rel in ["results/runs.json", *reports, *(str(b.page) for b in lf.BLOCKS)]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def _ratio(medians: list[float], goal: float) -> dict[str, Any]:
    levels = zip((1, 16), medians, strict=True)
    by_c = {str(c): {"median": m, "min": m * 0.9, "max": m * 1.1, "n": 3} for c, m in levels}
    return {"goal": goal, "by_c": by_c, "met": min(medians) >= goal}


def test_a_new_run_in_runs_json_is_quoted_without_a_code_change(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    gaps = root / lf.GAPS
    assert "0.5.17: bring-up only" in gaps.read_text()
    ratios = {"static-0 / never": _ratio([1.0, 0.5], 0.95)}
    entry = {"device": "GPU-N", "specpolicy": "?", "lossless": {}, "ratios": ratios}
    keys = ("sglang-0.5.17/overlap/draft/triton", "sglang-0.5.17/overlap/eagle3/triton")
    (root / "results/new").mkdir()
    (root / "results/new/report.json").write_text(json.dumps({"paired": {k: entry for k in keys}}))
    runs = json.loads((root / "results/runs.json").read_text())
    runs.append(
        {
            "id": "sglang-0.5.17-new",
            "date": "2027-01-01",
            "engine": "sglang",
            "release": "0.5.17",
            "report": "results/new/report.json",
            "format": "paired-report",
        }
    )
    (root / "results/runs.json").write_text(json.dumps(runs))
    assert lf.main(["--check", "--root", str(root)]) == 1  # the known gaps now differ from the reports
    assert lf.main(["--write", "--root", str(root)]) == 0
    text = gaps.read_text()
    assert "0.5.17" not in text.split("sglang-not-live:begin")[1].split("sglang-not-live:end")[0]
    # the new report's levels enter the spread: 2 keys x 2 levels with a 20 % spread each
    before = lf.repeat_spread(ROOT)
    assert lf.repeat_spread(root) != before and "levels the side-by-side reports hold" in before


def test_a_report_that_changes_makes_its_block_stale(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    run = next(r for r in rs.load_runs(root) if r.format == "vllm-check")
    report = json.loads((root / run.report).read_text())
    key = next(k for k in report["ratios"] if k.startswith(lf.V1_RUNNER))
    report["ratios"][key]["static-0/never"]["1"]["median"] = 0.11
    (root / run.report).write_text(json.dumps(report))
    assert lf.main(["--check", "--root", str(root)]) == 1
    assert lf.main(["--write", "--root", str(root)]) == 0
    assert "depth 0 gave 0.11-0.56x a speculation-free engine" in (root / lf.VLLM_PAGE).read_text()


def test_a_block_the_table_does_not_know_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(tmp_path)
    page = root / lf.GAPS
    begin, end = gp.markers("no-such-block", lf.SCRIPT)
    page.write_text(page.read_text() + f"\n{begin}x{end}\n")
    assert lf.main(["--check", "--root", str(root)]) == 2
    assert "no-such-block" in capsys.readouterr().err


def test_a_block_holds_whole_lines_or_stays_inline() -> None:
    begin, end = gp.markers("b", "scripts/x.py")
    page = Path("p.md")
    inline = f"a {begin}old{end} b\n"
    assert gp.splice_blocks(inline, page, "scripts/x.py", {"b": "new"}) == f"a {begin}new{end} b\n"
    lines = f"a\n{begin}\nold\nrows\n{end}\nb\n"
    assert gp.splice_blocks(lines, page, "scripts/x.py", {"b": "n1\nn2"}) == f"a\n{begin}\nn1\nn2\n{end}\nb\n"
    other = gp.markers("b", "scripts/y.py")
    mixed = f"{other[0]}keep{other[1]} {begin}old{end}"
    want = f"{other[0]}keep{other[1]} {begin}new{end}"
    assert gp.splice_blocks(mixed, page, "scripts/x.py", {"b": "new"}) == want
    assert gp.strip_blocks(mixed) == f"{other[0]}{other[1]} {begin}{end}"
    with pytest.raises(gp.BlockError, match="missing: c"):
        gp.splice_blocks(inline, page, "scripts/x.py", {"b": "new", "c": "x"})
    with pytest.raises(gp.BlockError, match="listed twice: b"):
        gp.splice_blocks(inline + inline, page, "scripts/x.py", {"b": "new"})
