"""``specpolicy simulate`` end to end (short durations), the progress bar, and the sglang-adaptive loader."""

from __future__ import annotations

import builtins
import io
import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specpolicy.cli import build_parser, main
from specpolicy.sim import sglang_adaptive
from specpolicy.sim.commands_sim import sweep_levels
from specpolicy.sim.progress import ProgressBar
from specpolicy.sim.run import DEFAULT_PROFILE, DEFAULT_WORKLOAD
from specpolicy.sim.verdict import unwrap
from specpolicy.stats import StepStats

FAST = [
    "--profile",
    "h200-llama8b",
    "--duration",
    "3",
    "--decide-cost-us",
    "0.5",
    "--jobs",
    "1",
    "--no-progress",
]


def test_simulate_sweep_prints_the_table_and_writes_the_json(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "r.json"
    rc = main(["simulate", "--workload", "sweep", "--concurrency", "1,64", "--json", str(out), *FAST])
    assert rc == 0
    text = capsys.readouterr().out
    assert "concurrency 1:" in text and "concurrency 64:" in text
    header = next(line for line in text.splitlines() if line.startswith("policy"))
    for col in ("tok/s", "TPOT p50", "TPOT p99", "TTFT p50", "switch", "spec", "x never", "x static-"):
        assert col in header
    assert "x oracle" not in header  # the wide layout's
    last = unwrap(text.rstrip().splitlines())[-3:]
    assert [line.split(" ")[0] for line in last] == ["speculation", "policies:", "deploy:"]
    doc = json.loads(out.read_text())
    assert set(doc) >= {"profile", "workload", "seed", "runs"}
    assert {r["concurrency"] for r in doc["runs"]} == {1, 64}


def test_same_seed_same_json_through_the_cli(tmp_path: Path) -> None:
    docs = []
    for i in range(2):
        out = tmp_path / f"{i}.json"
        assert (
            main(
                ["simulate", "--workload", "transition", "--policy", "acceptance", "--json", str(out), *FAST]
            )
            == 0
        )
        docs.append(json.loads(out.read_text())["runs"])
    assert docs[0] == docs[1]


def test_parallel_jobs_give_the_same_numbers(tmp_path: Path) -> None:
    docs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"{jobs}.json"
        args = [
            "simulate",
            "--workload",
            "sweep",
            "--concurrency",
            "4,32",
            "--policy",
            "threshold",
            "--json",
            str(out),
            *FAST,
            "--jobs",
            jobs,
        ]
        assert main(args) == 0
        docs.append(json.loads(out.read_text())["runs"])
    assert docs[0] == docs[1]


def test_policy_configs_get_labels_that_show_their_parameters(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "r.json"
    rc = main(
        [
            "simulate",
            "--workload",
            "ramp",
            "--policy",
            "threshold",
            '{"name": "threshold", "max_batch_size": 8}',
            "--json",
            str(out),
            *FAST,
        ]
    )
    assert rc == 0
    labels = [r["policy"] for r in json.loads(out.read_text())["runs"]]
    assert "threshold" in labels and 'threshold{"max_batch_size":8}' in labels
    assert "hysteresis" not in labels  # only the given policies, plus the references
    assert {"never", "static-0", "oracle", "schedule-vllm"} <= set(labels)


def test_defaults_are_the_documented_scenario() -> None:
    args = build_parser().parse_args(["simulate"])
    assert (args.profile, args.workload) == (DEFAULT_PROFILE, DEFAULT_WORKLOAD)
    assert (DEFAULT_PROFILE, DEFAULT_WORKLOAD) == ("seed-k25-tp8-pcie", "sweep")
    assert args.seed == 0 and args.duration is None
    # a fixed decide() charge (the same report on every run), the adapter's off step
    assert (args.decide_cost_us, args.measure_decide_cost, args.off_cost) == (1.0, False, "lazy")
    assert sweep_levels(args) == (1, 10, 70, 250)  # the field report's concurrencies
    assert sweep_levels(build_parser().parse_args(["simulate", "--profile", "h200-llama8b"])) is None


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--profile", "nosuch"], "--profile: unknown profile 'nosuch'"),
        (["--workload", "nosuch"], "neither a built-in workload"),
        (["--workload", "sweep", "--concurrency", "0"], "--concurrency"),
        (["--policy", "nosuch"], "unknown policy 'nosuch'"),
        (["--policy", '{"name": "threshold", "max_batch_size": -3}'], "threshold.max_batch_size"),
        (["--decide-cost-us", "-1"], "--decide-cost-us"),
    ],
)
def test_bad_input_is_a_clear_error(argv: list[str], needle: str, capsys: Any) -> None:
    assert main(["simulate", "--no-progress", "--duration", "1", *argv]) == 1
    assert needle in capsys.readouterr().err


def test_plot_without_matplotlib_says_how_to_get_it(monkeypatch: Any, tmp_path: Path, capsys: Any) -> None:
    real_import = builtins.__import__

    def no_mpl(name: str, *a: Any, **k: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("no matplotlib")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    assert main(["simulate", "--plot", str(tmp_path / "x.png"), *FAST]) == 1
    err = capsys.readouterr().err
    assert "invalid configuration" not in err
    # the advice keeps an editable install editable: never a bare pip install '.[plot]'
    assert "pip install matplotlib" in err and "pip install -e '.[plot]'" in err
    assert "pip install '.[plot]'" not in err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("workload", ["sweep", "transition"])
def test_plot_writes_a_png(workload: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "p.png"
    extra = ["--concurrency", "1,16"] if workload == "sweep" else []
    assert (
        main(["simulate", "--workload", workload, *extra, "--policy", "threshold", "--plot", str(png), *FAST])
        == 0
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_progress_bar_appears_only_after_a_second() -> None:
    now = [0.0]
    buf = io.StringIO()
    bar = ProgressBar(10.0, stream=buf, enabled=True, clock=lambda: now[0])
    bar.update(3.0)
    now[0] = 0.5
    bar.update(5.0)
    assert buf.getvalue() == ""
    now[0] = 1.5
    bar.update(5.0)
    assert "50%" in buf.getvalue() and "\r" in buf.getvalue()
    now[0] = 2.0
    bar.close()
    assert buf.getvalue().endswith("100%   2.0s\n")


def test_progress_bar_stays_silent_when_disabled_or_fast() -> None:
    buf = io.StringIO()
    bar = ProgressBar(1.0, stream=buf, enabled=False, clock=lambda: 100.0)
    bar.update(1.0)
    bar.close()
    fast = ProgressBar(1.0, stream=buf, enabled=True)
    fast.update(1.0)
    fast.close()
    assert buf.getvalue() == ""


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_progress_bar_draws_only_on_a_terminal_by_default(tty: bool) -> None:
    now = [0.0]
    stream = _Stream(tty)
    bar = ProgressBar(10.0, stream=stream, clock=lambda: now[0])  # enabled=None: decided by the stream
    for t in (0.5, 1.5, 3.0, 6.0):
        now[0] = t
        bar.update(t)
    bar.close()
    if tty:
        assert stream.getvalue().startswith("\rsimulating [") and stream.getvalue().endswith("100%   6.0s\n")
        assert "  30%   3.0s" in stream.getvalue()
    else:
        assert stream.getvalue() == ""


# -- sglang-adaptive -----------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _fresh_sglang_lookup() -> Any:
    """The loader caches its answer per process; every test here starts and ends without that cache."""
    sglang_adaptive.load_sglang_adaptive.cache_clear()
    yield
    sglang_adaptive.load_sglang_adaptive.cache_clear()


_FAKE_PARAMS = '''
from sglang.srt.arg_groups.overrides import resolved_view, resolving_view
from sglang.srt.runtime_context import attn_dp_enabled_of
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.utils import log_info_on_rank0
import logging
logger = logging.getLogger(__name__)

class AdaptiveSpeculativeParams:
    """Steps = 7 while every request accepts everything, else 1; off (0) at batch >= 64."""
    def __init__(self, initial_steps, cfg_path=None):
        self.steps = initial_steps
        log_info_on_rank0(logger, "init")
    def get_steps_for_batch(self, batch_size):
        return 0 if batch_size >= 64 else self.steps
    def on_verify_complete(self, num_correct_drafts_per_req, batch_size):
        self.steps = 7 if min(num_correct_drafts_per_req) >= self.steps > 0 else 1
        return self.steps
'''


@pytest.fixture()
def fake_sglang(tmp_path: Path, monkeypatch: Any) -> Iterator[Path]:
    pkg = tmp_path / "sglang"
    spec_dir = pkg / "srt" / "speculative"
    spec_dir.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('importing sglang itself must not be needed')\n")
    (spec_dir / "adaptive_spec_params.py").write_text(textwrap.dedent(_FAKE_PARAMS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(sglang_adaptive.ENV_DIR, raising=False)
    sglang_adaptive.load_sglang_adaptive.cache_clear()
    yield pkg
    sglang_adaptive.load_sglang_adaptive.cache_clear()


def test_sglang_class_is_loaded_from_its_file_with_helpers_stubbed(fake_sglang: Path) -> None:
    before = set(sys.modules)
    cls, note = sglang_adaptive.load_sglang_adaptive()
    assert cls is not None and "AdaptiveSpeculativeParams" in note and str(fake_sglang) in note
    assert not {m for m in set(sys.modules) - before if m.startswith("sglang")}, "stubs leaked"
    pol = sglang_adaptive.SGLangAdaptivePolicy()
    assert pol.decide(StepStats(4)).num_steps == 3  # SGLang's median default candidate
    # The previous step's accepted drafts reach on_verify_complete before the next decision.
    assert pol.decide(StepStats(4, last_num_steps=3, accepted_draft_tokens=[3, 3, 3, 3])).num_steps == 7
    assert pol.decide(StepStats(4, last_num_steps=7, accepted_draft_tokens=[7, 0, 7, 7])).num_steps == 1
    assert pol.decide(StepStats(64, last_num_steps=1, accepted_draft_tokens=[1] * 4)).num_steps == 0
    pol.reset()
    assert pol.decide(StepStats(4)).num_steps == 3


def test_sglang_adaptive_appears_in_reports_when_importable(fake_sglang: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "simulate",
                "--workload",
                "sweep",
                "--concurrency",
                "8",
                "--policy",
                "threshold",
                "--json",
                str(out),
                *FAST,
            ]
        )
        == 0
    )
    doc = json.loads(out.read_text())
    assert "sglang-adaptive" in [r["policy"] for r in doc["runs"]]
    assert any("own AdaptiveSpeculativeParams" in n for n in doc["notes"])


def test_sglang_adaptive_is_skipped_with_a_note_when_absent(monkeypatch: Any) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.delenv(sglang_adaptive.ENV_DIR, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "sglang" else real(n, *a))
    sglang_adaptive.load_sglang_adaptive.cache_clear()
    try:
        cls, note = sglang_adaptive.load_sglang_adaptive()
    finally:
        sglang_adaptive.load_sglang_adaptive.cache_clear()
    assert cls is None and "sglang-adaptive skipped" in note and "pip install" in note


def _engine_venv_sglang() -> Path | None:
    """The sglang package of the SGLang 0.5.23 engine venv (scripts/engine-envs.sh, in $SPECPOLICY_ENV_DIR or
    the repo's .venvs), if built."""
    envs = os.environ.get("SPECPOLICY_ENV_DIR") or Path(__file__).resolve().parents[2] / ".venvs"
    venv = Path(envs) / "sglang-0.5.23"
    if not (venv / ".complete").exists():
        return None
    return next(iter(venv.glob("lib/python*/site-packages/sglang")), None)


def test_env_dir_pointing_elsewhere_is_reported(monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.setenv(sglang_adaptive.ENV_DIR, str(tmp_path))
    sglang_adaptive.load_sglang_adaptive.cache_clear()
    try:
        cls, note = sglang_adaptive.load_sglang_adaptive()
    finally:
        sglang_adaptive.load_sglang_adaptive.cache_clear()
    assert cls is None and "is not an sglang package directory" in note


def test_real_sglang_default_rule_when_installed(monkeypatch: Any) -> None:
    """SGLang 0.5.23's own class, from an installed sglang or the engine venv."""
    venv_pkg = _engine_venv_sglang()
    if venv_pkg is not None:
        monkeypatch.setenv(sglang_adaptive.ENV_DIR, str(venv_pkg))
    sglang_adaptive.load_sglang_adaptive.cache_clear()
    before = set(sys.modules)
    cls, note = sglang_adaptive.load_sglang_adaptive()
    if cls is None:
        pytest.skip(note)
    assert "0.5.23" in note or venv_pkg is None
    assert not any(m.startswith(("sglang", "torch")) for m in set(sys.modules) - before)
    pol = sglang_adaptive.SGLangAdaptivePolicy()
    # DEFAULT_ADAPTIVE_CONFIG: batch 64+ routes to the slot whose only candidate is 0; batch 1 starts at 3.
    assert pol.decide(StepStats(1)).num_steps == 3
    assert pol.decide(StepStats(64)).num_steps == 0
    # Batch 62 pads to the CUDA-graph size 64, whose slot only allows 0 (unpadded it would route to slot 32).
    assert pol.decide(StepStats(62)).num_steps == 0
    assert pol.decide(StepStats(40)).num_steps == 1  # slot 32: candidates [0, 1], starts at the median, 1
    pol.reset()
    # Long runs of full acceptance at batch 1 climb to 7, the slot's deepest candidate.
    k = 3
    for _ in range(200):
        k = pol.decide(StepStats(1, last_num_steps=k, accepted_draft_tokens=[k])).num_steps
    assert k == 7
    sglang_adaptive.load_sglang_adaptive.cache_clear()


def test_off_cost_and_feedback_lag_options_reach_the_engine(tmp_path: Path) -> None:
    docs = {}
    for name, extra in (
        ("base", ["--off-cost", "catch_up"]),
        ("lazy", []),
        ("lag", ["--off-cost", "catch_up", "--feedback-lag", "1"]),
    ):
        out = tmp_path / f"{name}.json"
        argv = ["simulate", "--workload", "sweep", "--concurrency", "16", "--policy", "acceptance"]
        assert main([*argv, "--json", str(out), *extra, *FAST]) == 0
        docs[name] = json.loads(out.read_text())
    assert (docs["lazy"]["off_cost"], docs["lag"]["feedback_lag"]) == ("lazy", 1)

    def tok(name: str, policy: str) -> float:
        return float(next(r["output_tok_s"] for r in docs[name]["runs"] if r["policy"] == policy))

    # Lazy off steps skip the draft catch-up: speculation off inside the engine gets faster, `never` does not.
    assert tok("lazy", "static-0") > tok("base", "static-0")
    assert tok("lazy", "never") == tok("base", "never")
    # Feedback one step later changes what an acceptance-driven policy sees, not what a static one does.
    assert tok("lag", "static-3") == tok("base", "static-3")
