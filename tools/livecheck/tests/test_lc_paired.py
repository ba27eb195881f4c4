"""specpolicy_livecheck.paired: engines served over pipes, batches rotated across them, ratios batch by batch;
and ab_static.serve, the engine's side of the protocol."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from specpolicy_gpucheck import DispatchConfig, DispatchPolicy
from specpolicy_livecheck import ab_static, paired, plan

# A child that speaks the protocol: ready, then per batch its tok_s = c * speed (argv[1]); "hang" sleeps,
# "die" exits, "junk" answers garbage.
CHILD = r"""
import argparse, json, os, sys, time
ap = argparse.ArgumentParser()
ap.add_argument("speed", type=float)
ap.add_argument("--cmd-fd", type=int)
ap.add_argument("--reply-fd", type=int)
a = ap.parse_args()
cmds, out = os.fdopen(a.cmd_fd), os.fdopen(a.reply_fd, "w")
out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n"); out.flush()
for line in cmds:
    cmd = json.loads(line)
    if cmd["op"] == "quit":
        out.write('{"bye": true}\n'); out.flush(); break
    if cmd.get("mode") == "hang":
        time.sleep(30)
    if cmd.get("mode") == "die":
        sys.exit(3)
    if cmd.get("mode") == "junk":
        out.write("not json\n"); out.flush(); continue
    out.write(json.dumps({"tok_s": cmd["c"] * a.speed, "got": cmd}) + "\n"); out.flush()
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    f = tmp_path / "child.py"
    f.write_text(CHILD)
    return f


def _child(name: str, script: Path, speed: float) -> paired.Child:
    child = paired.Child(name, [sys.executable, str(script), str(speed)])
    assert child.recv(20.0)["ready"] is True
    return child


def test_a_child_answers_each_command_and_quits(script: Path) -> None:
    child = _child("a", script, 2.0)
    reply = child.request({"op": "batch", "c": 16}, 10.0)
    assert reply["tok_s"] == 32.0 and reply["got"] == {"op": "batch", "c": 16}
    assert child.close(10.0) == 0


@pytest.mark.parametrize(
    ("mode", "says"), [("hang", "no reply within"), ("die", "exited"), ("junk", "not JSON")]
)
def test_a_child_that_hangs_dies_or_babbles_raises_a_clear_error(script: Path, mode: str, says: str) -> None:
    child = _child("b", script, 1.0)
    t0 = time.monotonic()
    with pytest.raises(paired.ChildError, match=says):
        child.request({"op": "batch", "c": 1, "mode": mode}, 1.5)
    assert time.monotonic() - t0 < 10
    child.close(2.0)  # a hanging child is killed


def test_batches_rotate_across_children_and_a_dead_one_is_dropped(script: Path) -> None:
    kids = {
        "base": _child("base", script, 10.0),
        "off": _child("off", script, 9.0),
        "bad": _child("bad", script, 1.0),
    }
    order = plan.interleave(["base", "off", "bad"], 3, [1, 16])
    logged: list[str] = []

    def command(r: int, c: int, v: str) -> dict[str, object]:
        return {"op": "batch", "c": c, "mode": "die" if v == "bad" and r == 1 else None}

    try:
        got = paired.paired_batches(kids, order, command, timeout_s=10.0, log=logged.append)
    finally:
        for k in kids.values():
            k.close(5.0)
    assert [b["repeat"] for b in got["base"]["1"]] == [0, 1, 2]
    assert len(got["bad"]["1"]) == 1 and "16" in got["bad"]  # repeat 0 only: it died in repeat 1
    assert sum("dropping bad" in line for line in logged) == 1
    seqs = sorted(b["seq"] for v in got.values() for rows in v.values() for b in rows)
    assert seqs == sorted(set(seqs))  # one batch at a time, each in its place of the run order
    r = paired.ratios(got, "off", "base")
    assert r["1"] == {"median": 0.9, "min": 0.9, "max": 0.9, "n": 3}
    assert r["16"]["median"] == pytest.approx(0.9)


def test_ratios_pair_batches_of_the_same_repeat_only() -> None:
    batches = {
        "base": {
            "1": [{"repeat": 0, "tok_s": 100.0}, {"repeat": 1, "tok_s": 200.0}, {"repeat": 2, "tok_s": 150.0}]
        },
        "x": {
            "1": [{"repeat": 0, "tok_s": 95.0}, {"repeat": 1, "tok_s": 180.0}, {"repeat": 3, "tok_s": 9.0}]
        },
    }
    # a drift that doubled the host's speed between repeats 0 and 1 does not move the ratios
    assert paired.ratios(batches, "x", "base")["1"] == {"median": 0.95, "min": 0.9, "max": 0.95, "n": 2}


def test_a_deadline_stops_starting_batches(script: Path) -> None:
    kids = {"a": _child("a", script, 1.0)}
    try:
        got = paired.paired_batches(
            kids,
            [(0, 1, "a")] * 3,
            lambda r, c, v: {"op": "batch", "c": c},
            timeout_s=5.0,
            deadline=time.time() - 1,
            log=lambda s: None,
        )
    finally:
        kids["a"].close(5.0)
    assert got == {"a": {}}


class _Engine:
    def __init__(self, policy: DispatchPolicy | None) -> None:
        self.policy = policy
        self.served: list[tuple[int, int, str]] = []

    def generate(
        self, input_ids: list[list[int]], sampling_params: dict[str, object]
    ) -> list[dict[str, object]]:
        from specpolicy import StepStats

        mode = "-" if self.policy is None else ("on" if self.policy.decide(StepStats(1)).num_steps else "off")
        n = int(sampling_params["max_new_tokens"])  # type: ignore[call-overload]
        self.served.append((len(input_ids), n, mode))
        return [{"meta_info": {"completion_tokens": n, "spec_verify_ct": n}} for _ in input_ids]


def test_serve_answers_every_line_runs_the_speculative_batch_first_and_quits(tmp_path: Path) -> None:
    env = ab_static.mixed_env(tmp_path, "mixed_v1")
    eng = _Engine(DispatchPolicy(DispatchConfig.model_validate(json.loads(env["SPECPOLICY_POLICY"]))))
    select = ab_static.Switch(ab_static.control_path(tmp_path, "mixed_v1"))
    lines = [
        {
            "op": "batch",
            "c": 4,
            "tokens": 50,
            "seed": 1,
            "min_s": 0.0,
            "label": "static-0",
            "pre_label": "static",
        },
        {"op": "batch", "c": 1, "tokens": 20, "seed": 2, "min_s": 0.0, "label": "static-0"},
        {"op": "nonsense"},
        {"op": "quit"},
        {"op": "batch", "c": 1, "tokens": 20, "seed": 3, "min_s": 0.0},  # after quit: never read
    ]
    out = io.StringIO()
    served = ab_static.serve(eng, 64, io.StringIO("".join(json.dumps(x) + "\n" for x in lines)), out, select)
    replies = [json.loads(x) for x in out.getvalue().splitlines()]
    assert served == 2 and len(replies) == 4
    assert replies[0]["tok_s"] > 0 and replies[1]["tok_s"] > 0
    assert "unknown op" in replies[2]["error"] and replies[3] == {"bye": True}
    assert eng.served == [(4, 64, "on"), (4, 50, "off"), (1, 20, "off")]  # untimed on batch, then the off one


def test_serve_refuses_a_label_without_a_dispatcher_and_goes_on() -> None:
    eng = _Engine(None)
    lines = [{"op": "batch", "c": 1, "tokens": 5, "seed": 1, "min_s": 0.0, "label": "static"}, {"op": "quit"}]
    out = io.StringIO()
    ab_static.serve(eng, 64, io.StringIO("".join(json.dumps(x) + "\n" for x in lines)), out, None)
    replies = [json.loads(x) for x in out.getvalue().splitlines()]
    assert "no dispatcher" in replies[0]["error"] and replies[1] == {"bye": True} and eng.served == []


def test_a_ratio_to_several_is_to_the_best_of_them_in_the_same_repeat() -> None:
    batches = {
        "never": {
            "16": [{"repeat": 0, "tok_s": 100.0}, {"repeat": 1, "tok_s": 200.0}, {"repeat": 2, "tok_s": 90.0}]
        },
        "static": {"16": [{"repeat": 0, "tok_s": 120.0}, {"repeat": 1, "tok_s": 150.0}]},
        "cm": {
            "16": [{"repeat": 0, "tok_s": 114.0}, {"repeat": 1, "tok_s": 190.0}, {"repeat": 2, "tok_s": 90.0}]
        },
    }
    r = paired.ratios(batches, "cm", ["never", "static"])["16"]
    # repeat 0 against static (120), repeat 1 against never (200); repeat 2 lacks static and is left out
    assert r == {"median": 0.95, "min": 0.95, "max": 0.95, "n": 2}
    assert paired.ratios(batches, "cm", ("never",))["16"]["n"] == 3  # a one-element sequence: one reference


def test_median_takes_the_upper_middle_and_skips_failed_batches() -> None:
    rows = [{"tok_s": 3.0}, {"error": "x"}, {"tok_s": 1.0}, {"tok_s": 2.0}, {"tok_s": 4.0}]
    assert paired.median(rows) == 3.0
    assert paired.median([{"error": "x"}]) is None


def test_lossless_total_counts_requests_matches_and_failed_batches() -> None:
    by_c = {
        "1": [{"requests": 2, "lossless": 2}, {"error": "boom"}],
        "16": [{"requests": 32, "lossless": 31}],
    }
    assert paired.lossless_total(by_c) == {"requests": 34, "lossless": 33, "errors": 1}


class _CountingEngine:
    """Answers every request with ``max_new_tokens`` tokens and counts the generate() calls (passes)."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(
        self, input_ids: list[list[int]], sampling_params: dict[str, object]
    ) -> list[dict[str, Any]]:
        self.calls += 1
        n = int(sampling_params["max_new_tokens"])  # type: ignore[call-overload]
        return [{"meta_info": {"completion_tokens": n, "spec_verify_ct": n}} for _ in input_ids]


@pytest.mark.parametrize("passes", [1, 3])
def test_a_batch_with_fixed_passes_makes_exactly_that_many_whatever_min_s_says(passes: int) -> None:
    eng = _CountingEngine()
    # min_s alone would stop after one pass (0 s) or go on to 16 (an hour): passes decides
    for min_s in (0.0, 3600.0):
        eng.calls = 0
        res = ab_static._batch(eng, [[5, 6]] * 2, 7, min_s, passes=passes)
        assert eng.calls == passes and res["passes"] == passes
    eng.calls = 0
    assert ab_static._batch(eng, [[5, 6]], 7, 0.0)["passes"] == 1 == eng.calls  # min_s: one pass of >= 0 s


def test_serve_passes_a_fixed_pass_count_to_the_batch() -> None:
    eng = _CountingEngine()
    lines = [
        {"op": "batch", "c": 2, "tokens": 5, "seed": 1, "min_s": 3600.0, "passes": 2},
        {"op": "quit"},
    ]
    out = io.StringIO()
    ab_static.serve(eng, 64, io.StringIO("".join(json.dumps(x) + "\n" for x in lines)), out, None)
    reply = json.loads(out.getvalue().splitlines()[0])
    assert reply["passes"] == 2 and eng.calls == 2


def test_fixed_passes_is_the_most_any_variant_needed_per_level() -> None:
    calibration = {
        "base": {"1": [{"passes": 3}], "128": [{"passes": 2}]},
        "off": {"1": [{"passes": 2}], "128": [{"passes": 1}]},
        "on": {"1": [{"passes": 4}], "128": [{"error": "boom"}]},
    }
    assert paired.fixed_passes(calibration) == {"1": 4, "128": 2}
    assert paired.fixed_passes({"x": {"16": [{"error": "boom"}]}}) == {}  # nothing measured: no pin


def test_a_repeat_whose_batches_made_different_passes_is_left_out_and_counted() -> None:
    # measured 2026-12-06: the reference made 2 passes (the second without prefill), the off engine 1
    batches = {
        "base": {"128": [{"repeat": r, "tok_s": 27600.0, "passes": 2} for r in range(4)]},
        "off": {
            "128": [
                {"repeat": 0, "tok_s": 25350.0, "passes": 1},
                {"repeat": 1, "tok_s": 27245.0, "passes": 2},
                {"repeat": 2, "tok_s": 25230.0, "passes": 1},
                {"repeat": 3, "tok_s": 25270.0, "passes": 1},
            ]
        },
    }
    r = paired.ratios(batches, "off", "base")["128"]
    assert r["n"] == 1 and r["unequal_passes"] == 3 and r["median"] == pytest.approx(27245 / 27600, abs=1e-4)
    for b in batches["off"]["128"]:
        b["passes"] = 1
    none = paired.ratios(batches, "off", "base")["128"]
    assert none["n"] == 0 and none["median"] is None and none["unequal_passes"] == 4
    for rows in batches.values():  # rows without a pass count (older runs) pair as before
        for b in rows["128"]:
            b.pop("passes")
    assert paired.ratios(batches, "off", "base")["128"]["n"] == 4


def test_kill_ends_a_child_that_hangs_at_once(script: Path) -> None:
    child = _child("hung", script, 1.0)
    child.send({"op": "batch", "c": 1, "mode": "hang"})  # it sleeps 30 s and would outlive its parent
    t0 = time.monotonic()
    child.kill()
    assert child.proc.wait(timeout=10) != 0 and time.monotonic() - t0 < 10
    child.kill()  # a second kill of a gone child is harmless


def test_more_passes_gives_one_at_least_then_follows_min_s_up_to_the_cap_or_the_fixed_count() -> None:
    now = time.perf_counter()
    assert paired.more_passes(0, None, now, 0.0) is True  # every batch makes one pass
    assert paired.more_passes(1, None, now, 0.0) is False  # min_s has passed
    assert paired.more_passes(3, None, now, 3600.0) is True
    assert paired.more_passes(paired.MAX_PASSES, None, now, 3600.0) is False
    assert paired.more_passes(1, 2, now - 3600.0, 0.0) is True  # a fixed count ignores min_s both ways
    assert paired.more_passes(2, 2, now, 3600.0) is False


@pytest.mark.parametrize(("engines", "n"), [(1, 2), (3, 16), (4, 16), (5, 11)])
def test_cpu_sets_cut_the_cpus_into_disjoint_contiguous_sets_that_cover_them(engines: int, n: int) -> None:
    cpus = [c * 2 + 1 for c in range(n)][::-1]  # any ids, in any order
    sets = paired.cpu_sets(engines, cpus)
    assert len(sets) == engines
    assert sorted(c for s in sets for c in s) == sorted(cpus)  # disjoint and covering
    assert max(map(len, sets)) - min(map(len, sets)) <= 1 and min(map(len, sets)) >= 2
    ordered = sorted(cpus)
    for s in sets:  # contiguous runs of the sorted ids
        i = ordered.index(s[0])
        assert s == ordered[i : i + len(s)]


def test_cpu_sets_refuse_fewer_than_two_cpus_per_engine() -> None:
    with pytest.raises(ValueError, match="4 engines need 8 CPUs or more .* may use 7"):
        paired.cpu_sets(4, range(7))


def test_a_served_engine_runs_on_its_cpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    mine = sorted(os.sched_getaffinity(0))
    seen: list[list[int]] = []

    class _Quiet:
        def shutdown(self) -> None:
            pass

    def fake_start(args: Any, variant: str) -> tuple[Any, dict[str, Any], int, Any]:
        seen.append(sorted(os.sched_getaffinity(0)))  # what the engine's processes would inherit
        return _Quiet(), {"variant": variant}, 64, None

    monkeypatch.setattr(ab_static, "start_engine", fake_start)
    cmd_r, cmd_w = os.pipe()
    rep_r, rep_w = os.pipe()
    os.write(cmd_w, b'{"op": "quit"}\n')
    os.close(cmd_w)
    args = ab_static.argparse.Namespace(cmd_fd=cmd_r, reply_fd=rep_w, cpus=str(mine[0]), out=str(tmp_path))
    try:
        assert ab_static.serve_variant(args, "base_v1") == 0
    finally:
        os.sched_setaffinity(0, mine)
    with os.fdopen(rep_r) as f:
        replies = [json.loads(x) for x in f.read().splitlines()]
    assert seen == [[mine[0]]]
    assert replies[0] == {"ready": True, "variant": "base_v1", "cpus": [mine[0]]} and replies[1] == {
        "bye": True
    }


def test_pin_cpus_without_paired_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    monkeypatch.setattr(
        sys, "argv", ["ab_static.py", "--work", str(tmp_path), "--out", str(tmp_path), "--pin-cpus"]
    )
    assert ab_static.main() == 2
    assert "--pin-cpus needs --paired" in capsys.readouterr().err
