"""The results/ tree stays small and self-describing: a measurement run adds at most a few MB to a clone.

Every run folder holds its notes (notes.md), and a live run's at least one report; no folder exceeds 3 MB and
no file 2 MB; every report runs.json names lies inside a run folder; results/README.md lists every run folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
MAX_FOLDER = 3 * 1024 * 1024
MAX_FILE = 2 * 1024 * 1024

RUNS = sorted(p for p in RESULTS.iterdir() if p.is_dir())


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def test_there_are_run_folders() -> None:
    assert len(RUNS) >= 3, RUNS


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_a_run_folder_is_bounded(run: Path) -> None:
    sizes = {p.relative_to(run): p.stat().st_size for p in _files(run)}
    big = {str(p): s for p, s in sizes.items() if s > MAX_FILE}
    assert not big, f"{run.name}: files over 2 MB (trim them and say so in notes.md): {big}"
    assert sum(sizes.values()) <= MAX_FOLDER, f"{run.name}: {sum(sizes.values()):,} bytes, over 3 MB"


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_a_run_folder_has_notes_and_a_report(run: Path) -> None:
    notes = run / "notes.md"
    assert notes.is_file(), f"{run.name}: no notes.md"
    assert notes.read_text().startswith(f"# {run.name}\n"), f"{run.name}: notes.md names another run"
    if "-sglang-" in run.name or "-vllm-" in run.name:  # a live run; a CPU one may be notes only
        assert any(p.suffix == ".json" for p in _files(run)), f"{run.name}: no report JSON"
    assert run.name[:10].replace("-", "").isdigit(), f"{run.name}: a run folder starts with its date"


def test_runs_json_reports_lie_in_run_folders() -> None:
    for entry in json.loads((RESULTS / "runs.json").read_text()):
        report = Path(entry["report"])
        assert report.parts[0] == "results" and len(report.parts) == 3, entry["report"]
        assert (ROOT / report).is_file(), entry["report"]


def test_the_index_lists_every_run() -> None:
    index = (RESULTS / "README.md").read_text()
    missing = [p.name for p in RUNS if f"]({p.name}/notes.md)" not in index]
    assert not missing, f"results/README.md does not list {missing}"


def test_no_results_are_left_in_docs() -> None:
    data = [p for p in (ROOT / "docs").rglob("*") if p.is_file() and p.suffix != ".md"]
    assert not data, f"report or raw data under docs/ (it belongs in results/<run>/): {data}"
