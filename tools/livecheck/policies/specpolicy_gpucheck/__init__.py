"""Test-only policies for the live GPU check, registered through the ``specpolicy.policies`` entry points.

They load inside SGLang's spawned scheduler processes exactly like a user's third-party policy would, so the
check also proves that route. None of them is meant for serving:

- ``gpucheck_cycle`` walks through a list of depths, ``period`` steps each (on/off and depth switching).
- ``gpucheck_raise`` fails on purpose on a window of decide() calls (the adapter must contain it), on every
  rank or, under tensor parallelism, on one rank only (``only_rank``).
- ``gpucheck_slow`` takes ``delay_s`` in every decide() call, on one rank only under tensor parallelism: over
  the decide() budget there, not elsewhere (the ranks must still run one depth per step).
- ``gpucheck_resume`` holds speculation off for ``off_steps`` steps, then on for ``on_steps``, repeating: the
  first on step after each off stretch shows what resuming costs (the draft catches up on the missed tokens).
- ``gpucheck_skip_catch_up`` is ``gpucheck_resume`` that, while it is the active policy, hands the drafter
  a zero hidden state in every off step instead of the target's (EAGLE drafters read the target's hidden
  state of every token; the off step's draft extend is their catch-up). Output stays lossless, only the
  acceptance after each resume changes: the phase that proves the live check's acceptance pairs can fail.
- ``gpucheck_dispatch`` delegates to one of several named policies, chosen by the label written in a control
  file. An engine takes about a minute to start on the GPU, so the check starts one per worker path and
  switches policies between request batches instead of restarting it. The file is memory-mapped: reading
  it costs a slice of shared memory per step, not a system call (an ``os.stat`` per step cost about 25
  microseconds on the GPU machine, more than the policies themselves).
  With ``host_timers`` it also times the scheduler process's engine methods (``host_timers``).
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import time
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from specpolicy import MAX_NUM_STEPS, Policy, PolicyConfig, PolicyEntry, SpecMode, StepStats, make_policy
from specpolicy.errors import ConfigError, format_validation_error
from specpolicy.policies.alternate import AlternateConfig, AlternatePolicy
from specpolicy.registry import parse_config

__all__ = [
    "CONTROL_SIZE",
    "CYCLE",
    "DISPATCH",
    "RAISE",
    "RESUME",
    "SLOW",
    "SKIP_CATCH_UP",
    "CatchUpSkip",
    "CycleConfig",
    "DispatchConfig",
    "RaiseConfig",
    "ResumeConfig",
    "SlowConfig",
    "SkipCatchUpConfig",
    "SkipCatchUpPolicy",
    "write_control",
]

log = logging.getLogger("specpolicy_gpucheck")

#: The control file: a 12-character generation number, a space, the label; space-padded to this size.
CONTROL_SIZE = 64


def write_control(path: str | os.PathLike[str], generation: int, label: str) -> None:
    """Activate ``label`` in every dispatcher mapping ``path`` (rewritten in place: the mapping stays valid).
    Each new generation number resets the named policy, so every request batch starts it fresh."""
    data = f"{generation:12d} {label}".encode()
    if len(data) > CONTROL_SIZE or not 0 <= generation < 10**12:
        raise ValueError(f"control record too long or generation out of range: {generation} {label!r}")
    with open(path, "r+b" if os.path.exists(path) else "wb") as fh:
        fh.write(data.ljust(CONTROL_SIZE))
        fh.flush()


class CycleConfig(AlternateConfig):
    """Cycle through ``depths``, holding each for ``period`` steps (test only): ``alternate`` under its own
    name and defaults, so the dispatcher can name it per phase."""

    name: Literal["gpucheck_cycle"] = "gpucheck_cycle"  # type: ignore[assignment]
    depths: tuple[int, ...] = Field(
        (3, 0), min_length=1, max_length=16, description="depths visited in order"
    )
    period: int = Field(4, ge=1, le=1_000_000, description="steps each depth is held")


#: Depth ``depths[(n // period) % len(depths)]`` on the n-th decide() call: the built-in ``alternate``.
CyclePolicy = AlternatePolicy


def tp_rank() -> int:
    """This process's rank in torch.distributed's default group (SGLang's TP rank on one node), else 0."""
    try:
        import torch.distributed as dist

        return int(dist.get_rank()) if dist.is_available() and dist.is_initialized() else 0
    except Exception:
        return 0


class RaiseConfig(PolicyConfig):
    """Return ``num_steps`` but raise on decide() calls raise_from .. raise_from+raise_count-1 (test only)."""

    name: Literal["gpucheck_raise"] = "gpucheck_raise"
    num_steps: int = Field(0, ge=0, le=MAX_NUM_STEPS, description="depth returned when not failing")
    raise_from: int = Field(8, ge=0, description="index (from 0) of the first decide() call that raises")
    raise_count: int = Field(16, ge=0, description="number of consecutive calls that raise")
    only_rank: int | None = Field(None, ge=0, description="raise on this rank only (None: every rank)")

    def candidate_steps(self) -> tuple[int, ...]:
        return (self.num_steps,)


class GpuCheckFailure(RuntimeError):
    """The deliberate failure of ``gpucheck_raise``."""


class RaisePolicy:
    def __init__(self, config: RaiseConfig) -> None:
        self.config = config
        self._mode = SpecMode.of(config.num_steps)
        self._lo = config.raise_from
        self._hi = config.raise_from + config.raise_count
        if config.only_rank is not None and tp_rank() != config.only_rank:
            self._hi = self._lo  # not this rank: never raises
        self._n = 0
        self.raised = 0

    def decide(self, stats: StepStats) -> SpecMode:
        n = self._n
        self._n = n + 1
        if self._lo <= n < self._hi:
            self.raised += 1
            raise GpuCheckFailure("gpucheck_raise: deliberate failure inside decide()")
        return self._mode

    def reset(self) -> None:
        self._n = 0


class SlowConfig(PolicyConfig):
    """Return ``num_steps``, taking ``delay_s`` in each decide() call (on ``only_rank`` only) (test only)."""

    name: Literal["gpucheck_slow"] = "gpucheck_slow"
    num_steps: int = Field(0, ge=0, le=MAX_NUM_STEPS, description="depth returned")
    delay_s: float = Field(0.003, ge=0.0, le=1.0, description="seconds each decide() call takes")
    only_rank: int | None = Field(None, ge=0, description="slow on this rank only (None: every rank)")

    def candidate_steps(self) -> tuple[int, ...]:
        return (self.num_steps,)


class SlowPolicy:
    def __init__(self, config: SlowConfig) -> None:
        self._mode = SpecMode.of(config.num_steps)
        mine = config.only_rank is None or tp_rank() == config.only_rank
        self._delay = config.delay_s if mine else 0.0

    def decide(self, stats: StepStats) -> SpecMode:
        if self._delay:
            time.sleep(self._delay)
        return self._mode

    def reset(self) -> None:
        pass


class ResumeConfig(PolicyConfig):
    """Off for ``off_steps`` decide() calls, then ``depth`` for ``on_steps``, repeating (test only)."""

    name: Literal["gpucheck_resume"] = "gpucheck_resume"
    off_steps: int = Field(8, ge=1, le=1_000_000, description="decisions off before each on stretch")
    depth: int = Field(3, ge=1, le=MAX_NUM_STEPS, description="draft depth of the on stretch")
    on_steps: int = Field(16, ge=1, le=1_000_000, description="decisions on after each off stretch")

    def candidate_steps(self) -> tuple[int, ...]:
        return (0, self.depth)


class ResumePolicy:
    """Off first, so a batch's first decisions already measure a resume after ``off_steps`` off steps."""

    def __init__(self, config: ResumeConfig) -> None:
        self.config = config
        self._on = SpecMode.of(config.depth)
        self._off = SpecMode.off()
        self._k = config.off_steps
        self._period = config.off_steps + config.on_steps
        self._n = 0

    def decide(self, stats: StepStats) -> SpecMode:
        n = self._n
        self._n = n + 1
        return self._off if n % self._period < self._k else self._on

    def reset(self) -> None:
        self._n = 0


class CatchUpSkip:
    """Whether off steps hide the target's hidden states from the drafter, and the wrapper that does it.

    The off step's target forward (``DecodeTarget.forward`` of the legacy SGLang adapter) returns the
    hidden states the off step then hands to SGLang's draft extend, on both workers; the wrapper zeroes
    them in place while ``armed`` and logs the first time it does. One per process, like the class method
    it wraps: ``SkipCatchUpPolicy`` arms it on each decision, the dispatcher disarms it whenever it switches
    policies. ``target``: the class to wrap (tests pass a stand-in; default the adapter's).
    """

    def __init__(self, target: type | None = None) -> None:
        self.armed = False
        self.zeroed = 0  # off steps whose hidden states were zeroed
        self._target = target
        self.installed = False

    def install(self) -> bool:
        """Wrap the forward once; False (logged) where the legacy adapter cannot be imported."""
        if self.installed:
            return True
        target = self._target
        if target is None:
            try:
                from specpolicy.adapters.sglang.legacy.decode_target import DecodeTarget
            except Exception as exc:  # no SGLang adapter here: the phase then shows no skipped catch-up
                log.warning("gpucheck_skip_catch_up: cannot wrap the off step's forward: %r", exc)
                return False
            target = DecodeTarget
        original = target.forward
        skip = self

        def forward(self: Any, forward_fn: Any, model_runner: Any, decode_mwb: Any) -> Any:
            out = original(self, forward_fn, model_runner, decode_mwb)
            if skip.armed:
                hidden = getattr(getattr(out, "logits_output", None), "hidden_states", None)
                if hidden is not None:
                    hidden.zero_()
                    skip.zeroed += 1
                    if skip.zeroed == 1:
                        log.warning("gpucheck_skip_catch_up: zeroing the off steps' hidden states")
            return out

        target.forward = forward
        self.installed = True
        return True


CATCH_UP_SKIP = CatchUpSkip()


class SkipCatchUpConfig(ResumeConfig):
    """``gpucheck_resume`` whose off steps hide the target's hidden states from the drafter (test only)."""

    name: Literal["gpucheck_skip_catch_up"] = "gpucheck_skip_catch_up"  # type: ignore[assignment]


class SkipCatchUpPolicy(ResumePolicy):
    """Arms ``CATCH_UP_SKIP`` on every decision: the off step that follows hands the drafter zeros."""

    def __init__(self, config: SkipCatchUpConfig, skip: CatchUpSkip | None = None) -> None:
        super().__init__(config)
        self.skip = CATCH_UP_SKIP if skip is None else skip
        self.skip.install()

    def decide(self, stats: StepStats) -> SpecMode:
        self.skip.armed = True
        return super().decide(stats)


class DispatchConfig(PolicyConfig):
    """Delegate to the policy whose label is written in ``control_file`` (test only)."""

    name: Literal["gpucheck_dispatch"] = "gpucheck_dispatch"
    control_file: str = Field(description="file written by write_control: generation and active label")
    policies: dict[str, Any] = Field(min_length=1, description="label -> policy spec (name, mapping or JSON)")
    initial: str = Field(description="label active until the control file names another")
    log_file: str | None = Field(None, description="JSONL file where each switch is recorded")
    keep: list[str] = Field(
        default_factory=list,
        description="labels whose policy is not reset when activated: it keeps what it learned across phases",
    )
    host_timers: str | None = Field(
        None, description="JSONL file for the scheduler process's host time per engine method (host_timers)"
    )

    @field_validator("policies")
    @classmethod
    def _valid_children(cls, v: dict[str, Any]) -> dict[str, Any]:
        for label, spec in v.items():
            if isinstance(spec, dict) and spec.get("name") == "gpucheck_dispatch":
                raise ValueError(f"policies.{label}: a dispatcher cannot nest another dispatcher")
            _child_config(spec)  # raises ConfigError (a ValueError) naming the child's field
        return v

    @model_validator(mode="after")
    def _initial_known(self) -> DispatchConfig:
        if self.initial not in self.policies:
            raise ValueError(f"initial: {self.initial!r} is not one of the labels {sorted(self.policies)}")
        unknown = sorted(set(self.keep) - set(self.policies))
        if unknown:
            raise ValueError(f"keep: {unknown} are not among the labels {sorted(self.policies)}")
        return self

    def candidate_steps(self) -> tuple[int, ...]:
        steps: set[int] = set()
        for spec in self.policies.values():
            steps.update(_child_config(spec).candidate_steps())
        return tuple(sorted(steps))

    def needs_step_time(self) -> bool:
        return any(_child_config(spec).needs_step_time() for spec in self.policies.values())

    def needs_request_ids(self) -> bool:
        return any(_child_config(spec).needs_request_ids() for spec in self.policies.values())


class DispatchPolicy:
    """Runs the active child; a new generation in the mapped control file activates the named child and
    resets it, so each request batch (phase) of the check starts its policy fresh, as a simulated run does.
    A child in ``keep`` is not reset: like a policy serving one engine for its life, it carries what it
    learned in its earlier phases (at other loads) into the next."""

    def __init__(self, config: DispatchConfig) -> None:
        self.config = config
        self._children: dict[str, Policy] = {k: _child(v) for k, v in config.policies.items()}
        self._path = config.control_file
        self._mm: mmap.mmap | None = None
        self._gen = b""
        self._n = 0
        self.label = config.initial
        self._active = self._children[self.label]
        self._keep = frozenset(config.keep)
        if config.host_timers:
            from .host_timers import install

            install(config.host_timers)

    def decide(self, stats: StepStats) -> SpecMode:
        self._n += 1
        mm = self._mm
        if mm is None:
            mm = self._mm = self._map()  # retried every step only while the file is missing
        if mm is not None:
            gen = mm[:12]
            if gen != self._gen:
                self._gen = gen
                self._switch(mm[13:].rstrip().decode(errors="replace"))
        return self._active.decide(stats)

    def _map(self) -> mmap.mmap | None:
        try:
            with open(self._path, "rb") as fh:
                return mmap.mmap(fh.fileno(), CONTROL_SIZE, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None

    def _switch(self, label: str) -> None:
        child = self._children.get(label)
        if child is None:
            return
        CATCH_UP_SKIP.armed = False  # a skipping child re-arms it on its first decision
        if label not in self._keep:
            child.reset()
        self.label, self._active = label, child
        if self.config.log_file:
            rec = {"ts": time.time(), "label": label, "decide_index": self._n, "pid": os.getpid()}
            with open(self.config.log_file, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec) + "\n")

    def reset(self) -> None:
        for child in self._children.values():
            child.reset()


def _child_config(spec: Any) -> PolicyConfig:
    """This package's own policies resolve here (so the dispatcher works before its entry points are
    installed, as in unit tests); every other name goes through specpolicy's registry."""
    if isinstance(spec, dict) and spec.get("name") in _LOCAL:
        try:
            return _LOCAL[spec["name"]].config.model_validate(spec)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, prefix=f"{spec['name']}.")) from None
    return parse_config(spec)


def _child(spec: Any) -> Policy:
    config = _child_config(spec)
    entry = _LOCAL.get(config.name)
    return entry.factory(config) if entry is not None else make_policy(config)


CYCLE = PolicyEntry("gpucheck_cycle", CycleConfig, CyclePolicy)
RAISE = PolicyEntry("gpucheck_raise", RaiseConfig, RaisePolicy)
RESUME = PolicyEntry("gpucheck_resume", ResumeConfig, ResumePolicy)
SLOW = PolicyEntry("gpucheck_slow", SlowConfig, SlowPolicy)
SKIP_CATCH_UP = PolicyEntry("gpucheck_skip_catch_up", SkipCatchUpConfig, SkipCatchUpPolicy)
DISPATCH = PolicyEntry("gpucheck_dispatch", DispatchConfig, DispatchPolicy)
_LOCAL = {e.name: e for e in (CYCLE, RAISE, RESUME, SLOW, SKIP_CATCH_UP)}
