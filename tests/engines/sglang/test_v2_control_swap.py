"""A control-file policy change on SGLang's v2 route (0.5.17, 0.5.23), with the REAL AdaptiveController.

The harness is ``test_v2_adaptive``'s: a real ``EAGLEWorkerV2`` on fakes of SGLang's own types, decisions
through the route's forward wrapper and SGLang's own ``activate_step_by_batch``. The control file is
checked before decisions 3, 5, 7, ... (``control_every=2``); each round is one decision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import requires_version
from test_v2_adaptive import Served, _adaptive_config, _install, _installed, rule_policy  # noqa: F401
from test_v2_off_step import _single_process  # noqa: F401 - the fixture applies here too

from specpolicy.registry import parse_config
from specpolicy.runtime.control_file import write_control
from specpolicy.runtime.settings import AdapterSettings

pytestmark = requires_version("0.5.17", "0.5.23")


def _served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Served, Any, Path]:
    ctl = tmp_path / "control.json"
    s = Served(_adaptive_config(tmp_path, [1, 3]), initial=3)
    settings = AdapterSettings.build(
        {"name": "rule_for_tests"}, metrics=False, control_path=ctl, control_every=2
    )
    monkeypatch.setattr(_install()._STATE, "settings", settings)
    st = s.start()
    assert st is not None
    return s, st, ctl


@pytest.mark.usefixtures("rule_policy")
def test_a_swap_mid_run_changes_the_depth_sglangs_controller_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, st, ctl = _served(tmp_path, monkeypatch)
    kinds = [s.round([1, 1]) for _ in range(3)]  # the rule: depth 3 while drafts are accepted
    write_control(ctl, parse_config({"name": "static", "num_steps": 1}))
    kinds += [s.round([1, 1]) for _ in range(3)]  # checked before decision 5: depth 1 from round 5
    write_control(ctl, parse_config({"name": "static", "num_steps": 0}))
    kinds += [s.round() for _ in range(2)]  # checked before decision 7: off, the target's decode
    assert kinds == ["spec"] * 6 + ["off"] * 2
    assert s.spec_rounds == [3, 3, 3, 3, 1, 1]
    assert s.applied == [3, 1]  # SGLang's controller switched its state once, to the new policy's depth
    assert st.off_steps == 2
    rt = st.params.runtime
    assert rt.control.swaps == 2 and rt.settings.policy == parse_config({"name": "static", "num_steps": 0})


@pytest.mark.usefixtures("rule_policy")
def test_a_depth_sglang_did_not_prepare_is_refused_and_the_rule_keeps_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, st, ctl = _served(tmp_path, monkeypatch)
    s.round([1, 1])
    write_control(ctl, parse_config({"name": "static", "num_steps": 5}))  # states exist for 1 and 3 only
    kinds = [s.round([1, 1]) for _ in range(4)]
    assert kinds == ["spec"] * 4 and s.spec_rounds == [3] * 5
    rt = st.params.runtime
    assert rt.control.refused == 1 and rt.control.swaps == 0 and rt.settings.policy.name == "rule_for_tests"
