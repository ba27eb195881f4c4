"""The installed release's row in ``releases.RELEASES`` says what the real package has."""

from __future__ import annotations

import importlib.util

from specpolicy.adapters._support import check_targets
from specpolicy.adapters.sglang import releases


def _row(version: str) -> releases.Release:
    row = releases.release(version)
    assert row is not None, f"SGLang {version} has a test environment but no row in releases.RELEASES"
    return row


def test_the_row_matches_the_installed_package(sglang_version: str) -> None:
    row = _row(sglang_version)
    assert row.plugins == (importlib.util.find_spec("sglang.srt.plugins") is not None)
    # 0.5.13 removed the v1 worker (the v2 route); the adaptive route needs the AdaptiveSpecPolicy
    # Protocol, which arrived in 0.5.20
    import sglang.srt.speculative.adaptive_runtime_state as ars
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    v1 = importlib.util.find_spec("sglang.srt.speculative.eagle_worker") is not None
    protocol = hasattr(ars, "AdaptiveSpecPolicy")
    assert hasattr(EAGLEWorkerV2, "forward_batch_generation")
    assert row.route == ("legacy" if v1 else "adaptive" if protocol else "v2")
    assert all(why is None for why in check_targets(row.hooks).values()), check_targets(row.hooks)
    if row.route == "legacy":
        from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin

        assert row.overlap_resolve is not None
        assert callable(getattr(SchedulerOutputProcessorMixin, row.overlap_resolve))


def test_every_other_rows_hook_table_finds_a_difference(sglang_version: str) -> None:
    """The rows differ where the releases do: the installed package fails every other row's hook table."""
    for other in releases.RELEASES:
        if other.version != sglang_version:
            problems = [why for why in check_targets(other.hooks).values() if why]
            assert problems, f"{other.version}'s hook table matches SGLang {sglang_version} too"
