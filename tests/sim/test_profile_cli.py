"""``specpolicy profile list|show|fit`` through the real command line parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpolicy.cli import main
from specpolicy.profiles import load_profile
from specpolicy.sim.fit import synthetic_trace


def test_profile_list_names_every_shipped_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("h200-llama8b", "h200-llama70b", "moe-verify-heavy", "seed-k25-tp8-pcie"):
        assert f"{name}: " in out


def test_profile_show_prints_step_times_and_marks_extrapolation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "show", "h200-llama8b", "--seq-len", "4096"]) == 0
    out = capsys.readouterr().out
    assert "k=7" in out and "never" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()[:1].isdigit()}
    # Batch 1 at 4096 tokens: never = measured 5.201 ms + 0.25 ms + 0.001 ms overhead
    # (docs/reference/profiles.md).
    assert rows["1"][1] == "5.452"
    assert not rows["64"][1].endswith("*")
    assert rows["256"][1].endswith("*")  # the 4096 grid stops at batch 128


def test_profile_show_json_round_trips(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["profile", "show", "moe-verify-heavy", "--json"]) == 0
    f = tmp_path / "m.json"
    f.write_text(capsys.readouterr().out)
    assert load_profile(f).step_time_s(32, 3) == load_profile("moe-verify-heavy").step_time_s(32, 3)


def test_profile_show_unknown_name_fails_with_the_known_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "show", "a100-nothing"]) == 1
    err = capsys.readouterr().err
    assert "a100-nothing" in err and "h200-llama8b" in err


def test_profile_fit_writes_a_loadable_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    truth = load_profile("h200-llama8b")
    trace = tmp_path / "steps.jsonl"
    trace.write_text(
        "\n".join(r.to_json() for r in synthetic_trace(truth, n=1500, depths=(0, 2, 4), seed=11))
    )
    out = tmp_path / "mine.json"
    assert main(["profile", "fit", str(trace), "-o", str(out), "--name", "my-gpu"]) == 0
    err = capsys.readouterr().err
    assert "depth 0:" in err and "depth 4:" in err and "rejected as outliers" in err
    p = load_profile(out)
    assert p.name == "my-gpu" and p.max_steps == 4
    assert p.step_time_s(32, 2, 2000.0) == pytest.approx(truth.step_time_s(32, 2, 2000.0), rel=0.05)
    # Without -o the profile goes to stdout.
    assert main(["profile", "fit", str(trace)]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "fitted"


def test_profile_fit_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "off.jsonl"
    trace.write_text('{"step": 0, "batch_size": 4, "num_steps": 0, "step_time_s": 0.01}\n')
    assert main(["profile", "fit", str(trace)]) == 1
    assert "depth 0" in capsys.readouterr().err
    assert main(["profile", "fit", str(tmp_path / "missing.jsonl")]) == 1
    assert "missing.jsonl" in capsys.readouterr().err
    assert main(["profile", "fit", str(trace), "--draft-share", "2"]) == 2
    assert "draft_share" in capsys.readouterr().err
