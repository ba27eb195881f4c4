"""README's first command, ``specpolicy simulate``: the same report on every run, the adapter's off step, a
narrow table, and verdict lines that say what the table's own numbers say."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from specpolicy.cli import main
from specpolicy.sim.verdict import TIE, unwrap

#: policy, tok/s, TPOT p50, TPOT p99, TTFT p50, switches, spec %, x never, x static-k, mark
_ROW = re.compile(r"^(\S+)\s+(\d+\.\d)\s+(\S+\s+){3}(\d+)\s+(\d+)%\s+(\S+)\s+(\S+)\s*(<- best)?$")


def _run(capsys: Any, *argv: str) -> str:
    assert main(["simulate", "--no-progress", *argv]) == 0
    return str(capsys.readouterr().out)


def _tables(text: str) -> dict[int, dict[str, float]]:
    """tok/s by level and row, read back from the printed table."""
    out: dict[int, dict[str, float]] = {}
    level = None
    for line in text.splitlines():
        m = re.match(r"^concurrency (\d+)", line)
        if m:
            level = int(m.group(1))
            out[level] = {}
            continue
        r = _ROW.match(line)
        if r and level is not None:
            out[level][r.group(1)] = float(r.group(2))
    return out


def _deployed(line: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for part in line.removeprefix("deploy: ").split("; "):
        levels, _, what = part.removeprefix("at ").partition(": ")
        names = what.split(" (")[0].split(" [")[0].split(" or ")
        for lv in levels.split(", "):
            out[int(lv)] = names
    return out


def _paying(spec: str, levels: list[int]) -> set[int]:
    """The levels where the speculation line says a fixed depth beats never."""
    if "pays at every level" in spec:
        return set(levels)
    m = re.search(r"pays at concurrency ([\d, ]+) \(", spec)
    return {int(x) for x in m.group(1).split(", ")} if m else set()


@pytest.fixture(scope="module")
def default_runs(default_simulate: tuple[str, str]) -> tuple[str, str]:
    """Two runs of the default report: the suite's shared one and one of this module's own."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["simulate", "--no-progress"]) == 0
    return default_simulate[0], buf.getvalue()


def _stable(text: str) -> str:
    """The report without the wall-time line (host speed)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("simulated "))


def test_the_default_report_is_the_same_on_every_run(default_runs: tuple[str, str]) -> None:
    a, b = default_runs
    assert _stable(a) == _stable(b)
    assert "decide() charge per decode step: fixed at 1 us" in a.replace("\n  ", " ")


def test_the_default_models_the_adapters_off_step_and_fits_100_columns(default_runs: tuple[str, str]) -> None:
    text = default_runs[0]
    assert text.splitlines()[0].startswith("profile seed-k25-tp8-pcie (off step: lazy")
    # every line, the verdict's too (wrapped at word boundaries)
    assert max(len(line) for line in text.rstrip().splitlines()) <= 100
    verdict = text.rstrip().splitlines()[-6:]
    assert [line.split(" ")[0] for line in unwrap(verdict)][-3:] == ["speculation", "policies:", "deploy:"]


def test_the_last_three_lines_follow_from_the_table(default_runs: tuple[str, str]) -> None:
    text = default_runs[0]
    tables = _tables(text)
    assert sorted(tables) == [1, 10, 70, 250]
    spec, pol, deploy = unwrap(text.rstrip().splitlines())[-3:]
    assert spec.startswith("speculation") and pol.startswith("policies:") and deploy.startswith("deploy:")
    picks = _deployed(deploy)
    assert sorted(picks) == sorted(tables)
    slack = 0.1  # the table prints tok/s to 0.1
    for level, tok in tables.items():
        cands = {k: v for k, v in tok.items() if k not in ("oracle", "lookahead")}
        top = max(cands.values())
        # each deployed row ties for best by the printed numbers, and every row marked best does
        for name in picks[level]:
            assert cands[name] >= top * (1 - TIE) - slack, (level, name, cands[name], top)
        # speculation pays where a depth beats never, by the numbers
        depth = max(v for k, v in tok.items() if k.startswith("static-") and k != "static-0")
        assert (level in _paying(spec, list(tables))) == (depth > tok["never"] * (1 + TIE)), (level, spec)
    # a policy is called best only if it ties for best at every level
    m = re.match(r"policies: best (\S+),", pol)
    if m:
        for tok in tables.values():
            top = max(v for k, v in tok.items() if k not in ("oracle", "lookahead"))
            assert tok[m.group(1)] >= top * (1 - TIE) - slack
    else:
        assert "best" not in pol.replace("best fixed", "").replace("best everywhere", "")


def test_measured_decide_charge_and_wide_layout_on_request(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "r.json"
    fast = ["--profile", "h200-llama8b", "--concurrency", "4", "--duration", "3", "--jobs", "1"]
    text = _run(capsys, *fast, "--measure-decide-cost", "--wide", "--json", str(out))
    doc = json.loads(out.read_text())
    assert doc["decide_cost_fixed_us"] is None
    assert "x oracle" in next(line for line in text.splitlines() if line.startswith("policy"))
    assert "measured on this host" in text.replace("\n", " ")
    fixed = [r["decide_cost_us"] for r in doc["runs"] if r["decide_cost_us"] is not None]
    assert fixed and fixed != [1.0] * len(fixed)


def test_the_json_records_a_request_files_own_shape(tmp_path: Path) -> None:
    reqs = tmp_path / "r.jsonl"
    reqs.write_text("".join(json.dumps({"arrival_s": i * 0.1, "prompt_tokens": 100 + i, "output_tokens": 20})
                            + "\n" for i in range(5)))
    out = tmp_path / "r.json"
    argv = ["simulate", "--no-progress", "--profile", "h200-llama8b", "--workload", str(reqs), "--jobs", "1",
            "--json", str(out)]
    assert main(argv) == 0
    shape = json.loads(out.read_text())["request_shape"]
    assert shape == {"source": "file", "requests": 5, "prompt_mean": 102.0, "prompt_min": 100,
                     "prompt_max": 104, "output_mean": 20.0, "output_min": 20, "output_max": 20}
