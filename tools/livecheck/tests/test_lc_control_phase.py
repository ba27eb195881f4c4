"""``paired --control-variant``: per-request hints and a control-file policy swap on one serving engine.

On CPU the engines are the stand-in SGLang (tests/fakes), whose batch steps get their depth from
specpolicy's own runtime and SGLang bridge: the hints are read from ``custom_params`` by the adapter's code,
the batch rule is the controller's, the swap is the control file's watch. The checks are then held against
hand-made records where the data shows a missed rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lc_env import FAKES, POLICIES_PROJECT, child_env
from specpolicy_livecheck import ab_static, control_phase
from specpolicy_livecheck import bigram_model as bm
from specpolicy_livecheck import paired_report as PR

VARIANT = "static_draft_ov"


def _work(tmp_path: Path) -> tuple[Path, Any]:
    models = tmp_path / "w" / "models"
    models.mkdir(parents=True)
    pi = bm.bigram_map(60, 1)
    meta = {"chain_vocab": 60, "pi": pi.tolist(), "pi_draft": bm.draft_map(pi, 0.7, 2).tolist()}
    (models / "meta.json").write_text(json.dumps(meta))
    return tmp_path / "w", pi


def _paired(tmp_path: Path, *more: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    work, _ = _work(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "specpolicy_livecheck.ab_static", "--paired", "--work", str(work)]
    cmd += ["--out", str(out), "--variants", f"never_ov,{VARIANT}", "--concurrency", "4", "--repeats", "1"]
    cmd += ["--min-s", "0", "--budget-s", "300", *more]
    env = child_env(FAKES, POLICIES_PROJECT)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=280)
    return proc, out


def test_a_paired_run_with_the_flag_serves_hints_and_a_swap_on_that_engine_only(tmp_path: Path) -> None:
    proc, out = _paired(tmp_path, "--control-variant", VARIANT, "--trace-dir", str(tmp_path / "t"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((out / "ab-paired.json").read_text())
    env = {v: res["engines"][v]["env"] for v in ("never_ov", VARIANT)}
    assert env["never_ov"] is None  # the speculation-free engine has no specpolicy settings at all
    assert env[VARIANT]["SPECPOLICY_CONTROL"] == str(control_phase.control_file(out, VARIANT))
    assert env[VARIANT]["SPECPOLICY_HINT_OFF_RULE"] == "any"
    ctl = res["control"]
    assert ctl["variant"] == VARIANT and ctl["depth"] == 3
    hinted = ctl["hinted"]["requests"]
    assert [r["hint"] for r in hinted[:5]] == ["off", "off", "off", "max_depth=1", None]
    # the opted-out requests accepted nothing; their neighbours speculated once the hinted ones had left
    assert all(r["correct_drafts"] == 0 for r in hinted if r["hint"] == "off")
    assert all(r["correct_drafts"] > 0 and r["accept_len"] > 1.2 for r in hinted if r["hint"] is None)
    assert ctl["swapped"]["accept_len"] == round(200 / 199, 3) and ctl["reverted"]["accept_len"] > 2
    # the engine's trace holds both swaps, static-0 first
    assert [n["policy"]["num_steps"] for n in ctl["trace_notes"]] == [0, 3]
    checks = control_phase.checks(ctl)
    assert all(c["met"] for c in checks.values()), checks
    sec = PR.section(res, goals=PR.GOALS_V2)
    assert sec["control"]["met"] is True and sec["control"]["label"] == "static"
    md = PR.markdown("sglang-0.5.17/overlap/draft/triton", sec)
    assert "| the hinted batch follows the batch rule | yes |" in md


def test_without_the_flag_the_run_has_no_control_phase_and_no_control_file(tmp_path: Path) -> None:
    proc, out = _paired(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((out / "ab-paired.json").read_text())
    assert "control" not in res
    assert set(res["engines"][VARIANT]["env"]) == {"SPECPOLICY_POLICY"}
    assert not control_phase.control_file(out, VARIANT).exists()
    assert "control" not in PR.section(res)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--variants", "never_ov,static0_draft_ov", "--control-variant", "static0_draft_ov"], "static"),
        (["--variants", "never_ov,cm_draft_ov", "--control-variant", VARIANT], "one of --variants"),
    ],
)
def test_a_control_variant_that_is_not_a_listed_static_engine_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    base = ["--work", str(tmp_path), "--out", str(tmp_path / "o"), "--paired"]
    assert ab_static.main([*base, *args]) == 2
    assert says in capsys.readouterr().err


def test_the_flag_without_paired_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--work", str(tmp_path), "--out", str(tmp_path / "o"), "--variants", VARIANT]
    assert ab_static.main([*base, "--control-variant", VARIANT]) == 2
    assert "needs --paired" in capsys.readouterr().err


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The stand-in SGLang's engine class (tests/fakes), imported in this process."""
    monkeypatch.syspath_prepend(str(FAKES))
    for k in [k for k in os.environ if k.startswith("SPECPOLICY_")]:
        monkeypatch.delenv(k)
    sys.modules.pop("sglang", None)
    import sglang

    yield sglang.Engine
    sys.modules.pop("sglang", None)


def _engine(engine_cls: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rule: str) -> tuple[Any, Any]:
    work, pi = _work(tmp_path)
    monkeypatch.setenv("SPECPOLICY_POLICY", json.dumps(ab_static.STATIC))
    for k, v in control_phase.control_env(tmp_path, VARIANT).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SPECPOLICY_HINT_OFF_RULE", rule)
    eng = engine_cls(
        model_path=str(work / "models" / "target"),
        speculative_algorithm="STANDALONE",
        speculative_num_steps=3,
    )
    return eng, pi


def _phase(eng: Any, pi: Any, tmp_path: Path) -> dict[str, Any]:
    try:
        return control_phase.run(
            eng, control_phase.control_file(tmp_path, VARIANT), 60, pi, ab_static.STATIC, ab_static.OFF
        )
    finally:
        eng.shutdown()


def test_under_the_majority_rule_the_opted_out_requests_speculate_and_the_check_says_so(
    fake_engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3 of 16 opt out: a majority rule leaves their batch speculating once the max_depth=1 request (whose
    cap is below the engine's one depth, so off) has left; the phase's record shows it, the check fails."""
    eng, pi = _engine(fake_engine, tmp_path, monkeypatch, "majority")
    ctl = _phase(eng, pi, tmp_path)
    off = [r for r in ctl["hinted"]["requests"] if r["hint"] == "off"]
    assert off and all(r["correct_drafts"] > 0 for r in off)
    checks = control_phase.checks(ctl)
    assert checks["hinted_rule"]["met"] is False and "(off):" in checks["hinted_rule"]["detail"]
    assert checks["lossless"]["met"] and checks["swap_took_effect"]["met"] and checks["swap_reverted"]["met"]


def test_a_swap_to_a_policy_that_still_speculates_fails_the_swap_check(
    fake_engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A swap to static at depth 5 where static-0 was meant: the engine prepared depths 0 and 3 only, so the
    watch installs it on/off at 3 (as the v2 route does without SGLang's adaptive controller); the batch
    after it speculates, and swap_took_effect is not met."""
    eng, pi = _engine(fake_engine, tmp_path, monkeypatch, "any")
    try:
        ctl = control_phase.run(
            eng,
            control_phase.control_file(tmp_path, VARIANT),
            60,
            pi,
            ab_static.STATIC,
            {"name": "static", "num_steps": 5},
        )
    finally:
        eng.shutdown()
    assert ctl["swapped"]["accept_len"] > 2
    checks = control_phase.checks(ctl)
    assert checks["swap_took_effect"]["met"] is False and checks["hinted_rule"]["met"] is True


# -------------------------------------------------------------------- the checks on hand-made records


def _req(hint: str | None, n: int, verify: int, correct: int, ok: bool = True) -> dict[str, Any]:
    return {
        "hint": hint,
        "max_new_tokens": n,
        "completion_tokens": n,
        "verify_ct": verify,
        "correct_drafts": correct,
        "accept_len": round(n / verify, 3),
        "lossless": ok,
    }


def _batch(*reqs: dict[str, Any]) -> dict[str, Any]:
    tokens = sum(r["completion_tokens"] for r in reqs)
    return {"accept_len": round(tokens / sum(r["verify_ct"] for r in reqs), 3), "requests": list(reqs)}


def _record(neighbour: dict[str, Any]) -> dict[str, Any]:
    """A phase record at depth 3: an off request (100 tokens), a capped one (50), a neighbour (200)."""
    on = _req(None, 200, 80, 119)
    off = _req(None, 200, 199, 0)
    return {
        "variant": VARIANT,
        "depth": 3,
        "slack_steps": 2,
        "off_rule": "any",
        "hinted": _batch(_req("off", 100, 99, 0), _req("max_depth=1", 50, 49, 0), neighbour),
        "before": _batch(on),
        "settle_swapped": _batch(_req(None, 32, 13, 18)),
        "swapped": _batch(off),
        "settle_reverted": _batch(_req(None, 32, 31, 0)),
        "reverted": _batch(on),
    }


def _run_with(ctl: dict[str, Any]) -> dict[str, Any]:
    rows = [{"repeat": 0, "tok_s": 100.0, "requests": 4, "lossless": 4}]
    return {"batches": {"never_ov": {"1": rows}, VARIANT: {"1": rows}}, "control": ctl}


def test_a_neighbour_that_speculated_beside_an_opted_out_request_fails_the_rule() -> None:
    # 99 steps off beside the hinted requests, then 101 tokens in 40 steps: the rule held
    held = PR.section(_run_with(_record(_req(None, 200, 139, 60))))["control"]
    assert held["checks"]["hinted_rule"]["met"] is True and held["met"] is True
    # 200 tokens in 80 steps: at depth 3 its 119 accepted drafts need more than the 80 - 97 steps left after
    # the off window, so it speculated while the opted-out request was in the batch
    missed = PR.section(_run_with(_record(_req(None, 200, 80, 119))))["control"]
    assert missed["checks"]["hinted_rule"]["met"] is False and missed["met"] is False
    assert "request 2 (no hint)" in missed["checks"]["hinted_rule"]["detail"]
    md = "\n".join(PR.control_markdown(missed))
    assert "| the hinted batch follows the batch rule | no |" in md
    assert "| the swap to static-0 took effect (accept length 1) | yes |" in md


def test_a_lossy_request_a_swap_that_did_not_take_and_one_that_did_not_revert_are_not_met() -> None:
    ctl = _record(_req(None, 200, 139, 60))
    ctl["swapped"] = _batch(_req(None, 200, 80, 119))  # still speculating after the swap to static-0
    ctl["reverted"] = _batch(_req(None, 200, 199, 0, ok=False))  # still off, and one token wrong
    checks = control_phase.checks(ctl)
    assert {k: c["met"] for k, c in checks.items()} == {
        "lossless": False,
        "hinted_rule": True,
        "swap_took_effect": False,
        "swap_reverted": False,
    }
    assert checks["lossless"]["detail"] == "7 of 8 requests"


def test_a_phase_that_failed_or_was_skipped_meets_nothing() -> None:
    for ctl in (
        {"variant": VARIANT, "error": "no reply within 480 s"},
        {"variant": VARIANT, "skipped": "budget"},
    ):
        sec = PR.section(_run_with(ctl))["control"]
        assert sec["met"] is False and all(not c["met"] for c in sec["checks"].values())
    # a phase of a variant the report leaves out is not reported
    assert "control" not in PR.section(_run_with(_record(_req(None, 200, 139, 60))), only=["never_ov"])
