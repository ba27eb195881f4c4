"""The generated results pages (scripts/results_summary.py): current with the reports, every figure read
from a report, and a bad runs.json refused with the run and the field named."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import results_summary as rs  # noqa: E402


def test_the_checked_in_pages_are_what_the_reports_give() -> None:
    assert rs.main(["--check"]) == 0, "run python3 scripts/results_summary.py --write"


def _paired_entry(off: list[float], cm: list[float], *, cm_met: bool) -> dict[str, Any]:
    def ratio(goal: float, medians: list[float], met: bool) -> dict[str, Any]:
        by_c = {
            str(c): {"median": m, "min": m, "max": m, "n": 3}
            for c, m in zip((1, 16, 64), medians, strict=True)
        }
        return {"goal": goal, "by_c": by_c, "met": met}

    return {
        "device": "GPU-X",
        "specpolicy": "abc1234",
        "ratios": {
            "static-0 / never": ratio(0.95, off, True),
            "cost_model / max(never, static)": ratio(0.95, cm, cm_met),
        },
        "lossless": {"never": {"requests": 10, "lossless": 10}, "static-0": {"requests": 12, "lossless": 11}},
    }


def _root(tmp_path: Path, runs: list[dict[str, Any]], reports: dict[str, Any]) -> Path:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "runs.json").write_text(json.dumps(runs))
    for name, body in reports.items():
        (tmp_path / name).write_text(json.dumps(body))
    (tmp_path / "README.md").write_text(f"# x\n\n{rs.BEGIN}\nold table\n{rs.END}\n\nafter\n")
    return tmp_path


def _run(**over: Any) -> dict[str, Any]:
    run = {
        "id": "r1",
        "date": "2026-01-02",
        "engine": "sglang",
        "release": "0.5.12.post1",
        "report": "rep.json",
        "format": "paired-report",
    }
    return {**run, **over}


def test_a_paired_report_gives_one_row_per_key_and_goal(tmp_path: Path) -> None:
    report = {
        "paired": {
            "v1/triton": _paired_entry([0.96, 0.99, 0.97], [0.80, 1.01, 0.98], cm_met=False),
            "v2/triton": _paired_entry([0.93, 1.04, 0.98], [0.96, 0.97, 0.99], cm_met=True),
        }
    }
    root = _root(tmp_path, [_run()], {"rep.json": report})
    assert rs.main(["--write", "--root", str(root)]) == 0
    summary = (root / rs.SUMMARY).read_text()
    rows = [line for line in summary.splitlines() if line.startswith("| [r1](../.././notes.md) ")]
    assert len(rows) == 4
    assert (
        "| `v1/triton` | GPU-X | sglang 0.5.12.post1 | 2026-01-02 "
        "| cost_model / max(never, static) | 0.80 - 1.01 | 0.95 | no | 21 / 22 |" in summary
    )
    assert "abc1234" not in summary  # the commit stays in the report; docs/ carries no hashes
    support = (root / rs.SUPPORT).read_text()
    row = next(line for line in support.splitlines() if "| 0.5.12.post1 |" in line)
    # the off step over both keys: lowest median 0.93, highest 1.04; three of the four goals met
    assert "off step 0.93-1.04x a speculation-free engine; goals met in 3 of 4 rows" in row
    assert "yes (2026-01-02, GPU-X)" in row
    other = next(line for line in support.splitlines() if "| 0.5.23 |" in line)
    assert "not run on a GPU" in other
    readme = (root / "README.md").read_text()
    assert "old table" not in readme and readme.endswith("\n\nafter\n") and row in readme
    assert rs.main(["--check", "--root", str(root)]) == 0
    (root / rs.SUMMARY).write_text(summary.replace("0.80", "0.81"))
    assert rs.main(["--check", "--root", str(root)]) == 1


def test_a_run_where_only_the_first_engine_started_is_a_bring_up(tmp_path: Path) -> None:
    report = {
        "engines": {"never_ov": {"ready": True}, "static_draft_ov": {"ready": False, "error": "x"}},
        "ratio_to_first": {},
        "lossless": {"never_ov": {"requests": 5, "lossless": 5}},
    }
    run = _run(release="0.5.17", format="ab-paired", device="GPU-Y", note="only never started")
    root = _root(tmp_path, [run], {"rep.json": report})
    assert rs.main(["--write", "--root", str(root)]) == 0
    row = next(line for line in (root / rs.SUPPORT).read_text().splitlines() if "| 0.5.17 |" in line)
    assert "bring-up only (2026-01-02, GPU-Y)" in row and "only never started" in row


def test_vllm_ratios_are_held_to_the_vllm_goals(tmp_path: Path) -> None:
    by_c = {"1": {"median": 0.5}, "16": {"median": 0.97}}
    report = {
        "device": "GPU-Z",
        "sitting": {"specpolicy": "f00baa1, with extras"},
        "ratios": {"mrv2/triton": {"static/vllm-static": by_c, "vllm-table/max(never,vllm-static)": by_c}},
        "lossless": {"never": {"requests": 3, "lossless": 3}},
    }
    root = _root(tmp_path, [_run(engine="vllm", release="0.34.0", format="vllm-check")], {"rep.json": report})
    assert rs.main(["--write", "--root", str(root)]) == 0
    summary = (root / rs.SUMMARY).read_text()
    assert "| vllm 0.34.0 | 2026-01-02 | static/vllm-static | 0.50 - 0.97 | 0.97 | no |" in summary
    assert "| vllm-table/max(never,vllm-static) | 0.50 - 0.97 | - | - |" in summary  # no goal: not judged


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"engine": "trt"}, ["engine must be one of sglang, vllm", "'trt'"]),
        ({"format": "csv"}, ["format must be one of", "'csv'"]),
        ({"date": "6 Dec"}, ["date must be YYYY-MM-DD"]),
        ({"colour": "red"}, ["unknown field(s) colour"]),
        ({"release": ""}, ["'release' must be a non-empty string"]),
        ({"report": "missing.json"}, ["report missing.json does not exist"]),
    ],
)
def test_a_bad_run_is_refused_naming_the_run_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], over: dict[str, Any], words: list[str]
) -> None:
    root = _root(tmp_path, [_run(**over)], {"rep.json": {"paired": {}}})
    assert rs.main(["--check", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "r1" in err and all(w in err for w in words), err


def test_a_run_listed_twice_and_a_readme_without_markers_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _root(tmp_path, [_run(), _run()], {"rep.json": {"paired": {}}})
    assert rs.main(["--check", "--root", str(root)]) == 2
    assert "listed twice: r1" in capsys.readouterr().err
    (root / "results" / "runs.json").write_text(json.dumps([_run()]))
    (root / "README.md").write_text("# no markers\n")
    assert rs.main(["--write", "--root", str(root)]) == 2
    assert "README.md: generated block(s) missing: status" in capsys.readouterr().err
