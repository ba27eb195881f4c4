"""The CPU path to a fitted profile: ``profile synth`` writes a trace (gzip or not), ``profile fit`` reads it
and stores the traced range, and a simulation outside that range says so per level."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from specpolicy.cli import main
from specpolicy.sim.verdict import unwrap
from specpolicy.trace import read_trace


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("synth")
    trace = d / "t.jsonl.gz"
    argv = ["profile", "synth", "-o", str(trace), "--max-batch", "16", "--steps", "1500", "--depths", "0,1,2"]
    assert main(argv) == 0
    prof = d / "f.json"
    assert main(["profile", "fit", str(trace), "-o", str(prof)]) == 0
    return trace, prof


def test_synth_writes_a_gzip_trace_that_fit_reads(fitted: tuple[Path, Path]) -> None:
    trace, prof = fitted
    with gzip.open(trace, "rt", encoding="utf-8") as fh:
        assert json.loads(fh.readline())["kind"] == "header"
    records = list(read_trace(trace))
    assert len(records) == 1500 and {r.num_steps for r in records} == {0, 1, 2}
    doc = json.loads(prof.read_text())
    batches = [r.batch_size for r in records]
    ctx = [r.mean_seq_len for r in records if r.mean_seq_len is not None]
    # the traced range is stored, from the trace's own steps (outliers are rejected later, not here)
    assert doc["measured"]["batch_size"] == [min(batches), max(batches)]
    assert doc["measured"]["seq_len"] == pytest.approx([min(ctx), max(ctx)], abs=0.1)


def test_a_plain_jsonl_trace_is_read_too(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    assert main(["profile", "synth", "-o", str(trace), "--steps", "50", "--depths", "0,3"]) == 0
    assert trace.read_text().count("\n") == 51
    assert {r.num_steps for r in read_trace(trace)} == {0, 3}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [(["--depths", "0,9"], "--depths"), (["--steps", "0"], "--steps"), (["--max-batch", "0"], "--max-batch")],
)
def test_synth_bad_input_is_a_one_line_error(
    argv: list[str], needle: str, tmp_path: Path, capsys: Any
) -> None:
    assert main(["profile", "synth", "-o", str(tmp_path / "x.jsonl"), *argv]) == 1
    err = capsys.readouterr().err
    assert needle in err and not (tmp_path / "x.jsonl").exists()


def test_levels_outside_the_fitted_range_are_flagged_and_clamps_name_their_levels(
    fitted: tuple[Path, Path], capsys: Any
) -> None:
    _, prof = fitted
    argv = ["simulate", "--no-progress", "--profile", str(prof), "--concurrency", "4,64", "--duration", "4",
            "--jobs", "1", "--policy", "cost_model", '{"name": "static", "num_steps": 5}']  # 5 > the 2 fitted
    assert main(argv) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    flag = "concurrency 64 (OUTSIDE profile fitted's measured range, batch "
    assert any(line.startswith(flag) for line in lines)
    assert "concurrency 4:" in lines
    spec, _, deploy = unwrap(lines)[-3:]
    assert "[at 64 OUTSIDE the profile's measured range" in spec
    at4, at64 = deploy.removeprefix("deploy: ").split("; ")
    assert at4.startswith("at 4: ") and "OUTSIDE" not in at4
    assert at64.startswith("at 64: ") and at64.endswith("[OUTSIDE the profile's measured range]")
    notes = text.replace("\n  ", " ").splitlines()
    note = next(line for line in notes if line.startswith('note: static{"num_steps":5}: '))
    assert "were clamped to 2" in note and note.endswith("(at concurrency 4, 64)")


def test_the_repositorys_own_gzip_trace_fits(tmp_path: Path) -> None:
    trace = Path(__file__).resolve().parents[2] / "results/2026-12-06-sglang-0.5.12.post1-run13"
    trace = trace / "trace-2026-12-06-thirteenth-cm-eagle3tree-v1.jsonl.gz"
    out = tmp_path / "p.json"
    assert main(["profile", "fit", str(trace), "-o", str(out)]) == 0
    batches = [r.batch_size for r in read_trace(trace) if r.step_time_s]
    assert json.loads(out.read_text())["measured"]["batch_size"][1] <= max(batches)
