"""The documented examples are run and compared with what the docs print, figures included.

Every console block marked ``<!-- checked -->`` in docs/ is one command and its output: the command runs here
and each line must match (numbers within 0.2%, everything else exactly; the wall time is not compared). The
prose figures that summarise those outputs, and the run count and time of the default scenario, are checked
against the same runs.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest

from specpolicy.cli import main
from specpolicy.sim.verdict import unwrap

DOCS = Path(__file__).resolve().parents[1] / "docs"
_NUMBER = re.compile(r"^[-+x]?[\d,]*\.?\d+(e[-+]?\d+)?[x%]?$")


def checked_examples() -> list[tuple[str, str, list[str]]]:
    """(doc name, command, expected output lines) of every checked console block."""
    out = []
    for path in sorted(DOCS.rglob("*.md")):
        for block in re.findall(r"<!-- checked -->\n```console\n(.*?)```", path.read_text(), flags=re.S):
            first, *rest = block.rstrip("\n").split("\n")
            assert first.startswith("$ specpolicy "), f"{path}: a checked block starts with its command"
            out.append((str(path.relative_to(DOCS)), first[2:], rest))
    return out


EXAMPLES = checked_examples()


def _number(token: str) -> float | None:
    if not _NUMBER.match(token):
        return None
    return float(token.strip("x%+").replace(",", ""))


def assert_same_output(expected: list[str], actual: list[str]) -> None:
    assert len(actual) == len(expected), "\n".join(actual)
    for want, got in zip(expected, actual, strict=True):
        if want.startswith("simulated ") and " s wall " in want:
            want, got = want.split(" in ")[0], got.split(" in ")[0]  # wall time differs between machines
        wt, gt = want.split(), got.split()
        assert len(wt) == len(gt), f"\n  doc: {want}\n  now: {got}"
        for a, b in zip(wt, gt, strict=True):
            x, y = _number(a.strip('",{}:()[];')), _number(b.strip('",{}:()[];'))
            if x is not None and y is not None:
                assert y == pytest.approx(x, rel=2e-3, abs=1.5e-3), f"\n  doc: {want}\n  now: {got}"
            else:
                assert a == b, f"\n  doc: {want}\n  now: {got}"


@pytest.fixture(autouse=True)
def _without_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples are printed without SGLang's class (their note says so)."""
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("the documented examples were run without sglang installed")
    monkeypatch.delenv("SPECPOLICY_SGLANG_DIR", raising=False)


def _run(
    command: str, capsys: pytest.CaptureFixture[str], shared: tuple[str, str] | None = None
) -> list[str]:
    """The command's output lines (stderr first). ``shared``: the suite's run of ``specpolicy simulate``
    (the ``default_simulate`` fixture), read instead of running it again."""
    if shared is not None and command == "specpolicy simulate":
        out, err = shared
        return (err + out).rstrip("\n").split("\n")
    argv = shlex.split(command)[1:]
    assert main([*argv, "--no-progress"] if argv[0] == "simulate" else argv) == 0
    captured = capsys.readouterr()
    return (captured.err + captured.out).rstrip("\n").split("\n")


def test_there_are_checked_examples() -> None:
    assert {doc for doc, _, _ in EXAMPLES} >= {"getting-started/simulator.md"} and len(EXAMPLES) >= 3


@pytest.mark.parametrize(("doc", "command", "expected"), EXAMPLES, ids=[c for _, c, _ in EXAMPLES])
def test_documented_output(
    doc: str,
    command: str,
    expected: list[str],
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    shared = request.getfixturevalue("default_simulate") if command == "specpolicy simulate" else None
    assert_same_output(expected, _run(command, capsys, shared))


def test_the_default_scenarios_run_count_and_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (DOCS / "getting-started" / "simulator.md").read_text()
    runs = int(re.search(r"It is (\d+) runs \(", text).group(1))  # type: ignore[union-attr]
    out = tmp_path / "default.json"
    assert main(["simulate", "--no-progress", "--json", str(out)]) == 0
    capsys.readouterr()
    doc = json.loads(out.read_text())
    assert len(doc["runs"]) == runs
    assert f"one of its {runs} runs" in text
    assert "takes a few seconds on a 2-core machine" in text and doc["wall_s"] < 30


def test_policies_md_acceptance_figures_are_the_simulators(capsys: pytest.CaptureFixture[str]) -> None:
    text = (DOCS / "guides" / "choosing-a-policy.md").read_text()
    claim = re.search(
        r"`acceptance` gets ([\d.]+)x, ([\d.]+)x, ([\d.]+)x and ([\d.]+)x the best fixed depth at "
        r"concurrency (\d+), (\d+), (\d+) and (\d+)",
        text.replace("\n", " "),
    )
    assert claim, "policies.md no longer states acceptance's figures; update this test"
    figures, levels = claim.groups()[:4], claim.groups()[4:]
    (_, command, _) = next(e for e in EXAMPLES if "--policy acceptance" in e[1])
    assert f"--concurrency {','.join(levels)} " in command  # the claim is about that example
    lines = _run(command, capsys)
    got = [float(ln.split("<-")[0].split()[-1]) for ln in lines if ln.startswith("acceptance ")]  # x static-k
    assert got == pytest.approx([float(f) for f in figures], abs=0.0051)


def test_readme_figure_is_the_default_scenarios(
    capsys: pytest.CaptureFixture[str], default_simulate: tuple[str, str]
) -> None:
    readme = (DOCS.parent / "README.md").read_text().replace("\n", " ")
    claim = re.search(r"launch depth \((\d+)\) gives ([\d.]+)x a speculation-free engine at (\d+)", readme)
    assert claim, "README.md no longer quotes the default scenario; update this test"
    depth, ratio, level = claim.groups()
    (_, command, _) = next(e for e in EXAMPLES if e[1] == "specpolicy simulate")
    lines = _run(command, capsys, default_simulate)
    table = lines[lines.index(f"concurrency {level}:") :]
    row = next(ln for ln in table if ln.startswith(f"static-{depth} "))
    assert float(row.split("<-")[0].split()[-2]) == pytest.approx(float(ratio), abs=0.0051)  # "x never"


def test_the_python_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = (DOCS / "getting-started" / "simulator.md").read_text()
    code = re.search(r"```python\n(from specpolicy\.sim\.run import .*?)```", text, flags=re.S)
    assert code, "simulator.md's Python example moved; update this test"
    ns: dict[str, object] = {}
    exec(compile(code.group(1), "simulator.md", "exec", dont_inherit=True), ns)
    doc = ns["doc"]
    assert isinstance(doc, dict) and {r["concurrency"] for r in doc["runs"]} == {8, 64}
    assert "\ndeploy: " in capsys.readouterr().out


def test_policies_md_gate_figures_are_the_simulators(capsys: pytest.CaptureFixture[str]) -> None:
    text = (DOCS / "guides" / "choosing-a-policy.md").read_text().replace("\n", " ")
    claim = re.search(
        r"keeps acceptance's choice where the batch is small \(x([\d.]+) the best fixed depth at concurrency "
        r"(\d+), as `acceptance` alone\) and is off at (\d+), where acceptance alone speculates at x([\d.]+) "
        r"the best fixed depth \(x([\d.]+) a speculation-free engine\)",
        text,
    )
    assert claim, "policies.md no longer states the gate example's figures; update this test"
    small, low, high, loses, vs_never = claim.groups()
    doc = "guides/choosing-a-policy.md"
    (_, command, _) = next(e for e in EXAMPLES if e[0] == doc and '"name": "gate"' in e[1])
    assert f"--concurrency {low},{high} " in command
    lines = _run(command, capsys)

    def row(level: str, policy: str) -> list[str]:
        table = lines[lines.index(f"concurrency {level}:") :]
        line = next(ln for ln in table if ln.split()[0].startswith(policy))
        return line.split("<-")[0].split()

    # columns: ... spec, x never, x static-k
    assert float(row(low, "acceptance")[-1]) == pytest.approx(float(small), abs=0.0005)
    assert row(low, "gate")[1:] == row(low, "acceptance")[1:]  # the gate changes nothing at low load
    assert float(row(high, "acceptance")[-1]) == pytest.approx(float(loses), abs=0.0005)
    assert float(row(high, "acceptance")[-2]) == pytest.approx(float(vs_never), abs=0.0005)
    assert row(high, "gate")[-3] == "0%"  # off: never speculates there


def test_readme_deploy_claim_is_the_default_scenarios_verdict(
    capsys: pytest.CaptureFixture[str], default_simulate: tuple[str, str]
) -> None:
    readme = (DOCS.parent / "README.md").read_text().replace("\n", " ")
    pattern = r"\(there: `(\w+)` at (\d+), a speculation-free engine at (\d+) and (\d+), either at (\d+)\)"
    claim = re.search(pattern, readme)
    assert claim, "README.md no longer states the default scenario's verdict; update this test"
    policy, solo, never_a, never_b, tie = claim.groups()
    deploy = unwrap(_run("specpolicy simulate", capsys, default_simulate))[-1]
    picks = {}
    for part in deploy.removeprefix("deploy: ").split("; "):
        levels, _, what = part.removeprefix("at ").partition(": ")
        for lv in levels.split(", "):
            picks[lv] = what.split(" (")[0].split(" or ")
    assert picks[solo] == [policy]
    assert picks[never_a] == picks[never_b] == ["never"]
    assert sorted(picks[tie]) == sorted(["never", policy])
