"""The plugin loads through SGLang's REAL ``load_plugins()`` via the installed ``sglang.srt.plugins`` entry
point.

Each case runs in a fresh interpreter: ``load_plugins`` runs once per process and patches SGLang's classes,
just as in a spawned scheduler process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import requires_version

HERE = Path(__file__).parent


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys; sys.path.insert(0, {str(HERE)!r}); import _stubs; _stubs.install()\n"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPECPOLICY_")}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_entry_point_is_installed_for_sglang() -> None:
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    assert eps.get("specpolicy") == "specpolicy.adapters.sglang.plugin:register"


@requires_version("0.5.17", "0.5.23")
@pytest.mark.parametrize("env", [{"SPECPOLICY_POLICY": "static"}, {}], ids=["configured", "not-configured"])
def test_load_plugins_installs_the_v2_hooks(env: dict[str, str]) -> None:
    """Installed with or without a policy in the environment (the adaptive config may carry one, read when
    the worker is built); nothing goes through SGLang's HookRegistry."""
    proc = _run(
        """
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
        from sglang.srt.managers.scheduler import Scheduler
        for name in ("forward_batch_generation", "activate_step_by_batch", "on_verify_complete_cpu",
                     "init_cuda_graphs"):
            assert hasattr(getattr(EAGLEWorkerV2, name), "__specpolicy_wrapped__"), name
        assert hasattr(Scheduler.run_batch, "__specpolicy_wrapped__")
        try:
            from sglang.srt.plugins.hook_registry import HookRegistry
        except ImportError:
            pass
        else:
            assert not any("specpolicy" in repr(v) for v in vars(HookRegistry).values()), vars(HookRegistry)
        install = sys.modules["specpolicy.adapters.sglang.v2.install"]
        print("HOOKED", install._STATE.settings is not None)
        """,
        env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"HOOKED {bool(env)}" in proc.stdout


@requires_version("0.5.23", "0.5.17", "0.5.12.post1")
def test_bad_policy_in_the_environment_stops_the_process_naming_the_field() -> None:
    proc = _run(
        "from sglang.srt.plugins import load_plugins\nload_plugins()\nprint('SERVED ANYWAY')\n",
        {"SPECPOLICY_POLICY": '{"name": "static", "num_steps": -1}'},
    )
    assert proc.returncode != 0
    assert "SERVED ANYWAY" not in proc.stdout
    assert "static.num_steps" in proc.stderr and "greater than or equal to 0" in proc.stderr


@requires_version("0.5.17", "0.5.23")
def test_run_batch_hook_feeds_waiting_queue_and_context_lengths(tmp_path: Path) -> None:
    """The v2 route's wrapper of Scheduler.run_batch, given SGLang's own ForwardMode values."""
    from types import SimpleNamespace

    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from specpolicy import SpecMode, StepStats
    from specpolicy.adapters.sglang.adaptive import SpecPolicyParams
    from specpolicy.adapters.sglang.v2 import step
    from specpolicy.runtime.runtime import AdapterRuntime
    from specpolicy.runtime.settings import AdapterSettings

    seen: list[StepStats] = []

    class Seeing:
        def decide(self, stats: StepStats) -> SpecMode:
            seen.append(stats)
            return SpecMode.on(3)

        def reset(self) -> None:
            pass

    rt = AdapterRuntime(
        AdapterSettings.build("static", metrics=False),
        engine="sglang",
        engine_version="0.5.23",
        path="test",
        allowed_steps=[3],
        default_steps=3,
        policy=Seeing(),
    )
    params = SpecPolicyParams(rt, 3)
    reqs = [SimpleNamespace(seqlen=n) for n in (10, 20, 60)]
    worker = SimpleNamespace(**{step.ATTR: SimpleNamespace(params=params)})
    sched = SimpleNamespace(waiting_queue=[object()] * 5, model_worker=worker)
    ran: list[object] = []
    run_batch = step.run_batch_wrapper(lambda self, batch: ran.append(batch))
    run_batch(sched, SimpleNamespace(forward_mode=ForwardMode.DECODE, reqs=reqs))
    assert params.num_waiting == 5 and params.mean_seq_len == pytest.approx(30.0)
    for _ in range(2):  # two consecutive decode rounds with their results
        params.get_steps_for_batch(3)
        params.on_verify_complete([1, 1, 1], 3)
    assert rt.policy is not None
    # a prefill between two decode rounds: the next round's interval holds it, so it has no step time
    run_batch(sched, SimpleNamespace(forward_mode=ForwardMode.EXTEND, reqs=reqs))
    params.get_steps_for_batch(3)  # reports the second round, which followed the first directly
    assert seen[-1].last_step_time_s is not None and seen[-1].num_waiting == 5
    params.on_verify_complete([1, 1, 1], 3)
    params.get_steps_for_batch(3)  # reports the round after the prefill
    assert seen[-1].last_step_time_s is None and seen[-1].last_num_steps == 3
    params.on_verify_complete([1, 1, 1], 3)
    params.get_steps_for_batch(3)
    assert seen[-1].last_step_time_s is not None
    assert len(ran) == 2  # SGLang's own run_batch ran for both batches


@requires_version("0.5.12.post1")
def test_load_plugins_installs_the_legacy_hooks_on_0512() -> None:
    proc = _run(
        """
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from sglang.srt.speculative.eagle_worker import EAGLEWorker
        from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
        assert hasattr(EAGLEWorker.forward_batch_generation, "__specpolicy_wrapped__")
        assert hasattr(EAGLEWorkerV2.forward_batch_generation, "__specpolicy_wrapped__")
        print("HOOKED")
        """,
        {"SPECPOLICY_POLICY": "static"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "HOOKED" in proc.stdout
