"""Policy changes on a running engine: a control file that rank 0 checks every ``control_every`` steps.

An operator writes the file with ``specpolicy control set`` (a temporary file in the same directory renamed
over it, so a reader sees the old file or the new one, never half of one). Before every ``control_every``-th
decision the controller calls ``ControlWatch.poll``: one ``os.stat``, and only when the file's signature
(inode, size, modification time) has changed is it read, its policy validated with the registry's parser
and checked against what the engine runs (``PolicySwapper.prepare``). A valid policy is swapped in before
that decision, so the decision is its first; a bad file is refused, its reason logged once per distinct
content and counted, and the running policy stays. The file present at start-up is the baseline: only a
change made while the engine runs swaps the policy.

With several ranks only rank 0 reads the file. The swap travels with rank 0's depth broadcast
(``runtime.tp.AgreedDecider``): its flag rides on the step's depth and the policy follows over the same
group, so every rank installs it at the same step. Without a group to broadcast over the file is not
watched (the ranks could read it at different steps).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..config_files import loads_json_object, read_text, write_text_atomic
from ..errors import ConfigError, short_str
from ..policy import Policy, PolicyConfig
from ..registry import get_entry, parse_config

if TYPE_CHECKING:
    from .controller import StepController
    from .metrics import MetricsObserver
    from .settings import AdapterSettings
    from .tp import AgreedDecider
    from .trace_writer import TraceWriter


class SwapTarget(Protocol):
    """What a policy change updates: the adapter's runtime (``runtime.AdapterRuntime``), which owns the
    controller, the metrics and the trace, and calls ``attach_control`` when it is built."""

    settings: AdapterSettings
    policy: Policy
    candidate_steps: tuple[int, ...]
    wants_request_ids: bool
    rank: int
    world_size: int
    controller: StepController
    metrics: MetricsObserver | None
    trace: TraceWriter | None


__all__ = [
    "CONTROL_FORMAT",
    "ControlWatch",
    "PolicySwapper",
    "SwapRefused",
    "attach_control",
    "parse_control",
    "read_control",
    "write_control",
]

log = logging.getLogger("specpolicy.adapter")

CONTROL_FORMAT = "specpolicy-control/1"
#: Distinct refusal reasons logged per watch; later ones are only counted.
MAX_LOGGED = 16


class SwapRefused(Exception):
    """A policy that cannot replace the running one; the message says why."""


def parse_control(data: bytes | str, where: str = "control file") -> PolicyConfig:
    """The policy of a control file's content; ConfigError naming the problem."""
    doc = loads_json_object(data, where)
    fmt = doc.get("format", CONTROL_FORMAT)
    if fmt != CONTROL_FORMAT:
        raise ConfigError(f"{where}: format {fmt!r} is not {CONTROL_FORMAT!r}")
    unknown = sorted(set(doc) - {"format", "policy", "written_at"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} (known: format, policy, written_at)")
    if "policy" not in doc:
        raise ConfigError(f"{where}: policy: missing (a policy name or JSON object is required)")
    try:
        return parse_config(doc["policy"])
    except ConfigError as exc:
        raise ConfigError("\n".join(f"{where}: policy.{line}" for line in str(exc).splitlines())) from None


def read_control(path: str | os.PathLike[str]) -> PolicyConfig:
    """Read and validate a control file; ConfigError (also for a missing or unreadable one)."""
    return parse_control(read_text(path, "control file"), f"control file {path}")


def write_control(path: str | os.PathLike[str], config: PolicyConfig) -> dict[str, Any]:
    """Write ``config`` (already validated) to the control file atomically: a temporary file in the same
    directory, flushed to disk, renamed over the old one. Returns the document written."""
    p = Path(path)
    doc = {"format": CONTROL_FORMAT, "policy": config.model_dump(mode="json"), "written_at": time.time()}
    write_text_atomic(p, json.dumps(doc, indent=2) + "\n")
    return doc


class PolicySwapper:
    """Replaces a runtime's policy with another one, the same way on every rank.

    ``prepare`` builds and checks the new policy (its depths among those the engine runs, or mapped onto
    them by the runtime's wrapper; request ids only where the adapter collects them); ``install`` puts it
    in the controller for the coming decision, updates the runtime, the metrics and the trace.
    """

    def __init__(self, runtime: SwapTarget, wrap: Callable[[Policy], Policy] | None) -> None:
        self.runtime = runtime
        self.wrap = wrap
        #: policies installed, and files (or broadcast policies) refused
        self.swaps = 0
        self.refused = 0
        #: rank 0's watch over the file (None on the other ranks)
        self.watch: ControlWatch | None = None

    def prepare(self, config: PolicyConfig) -> tuple[Policy, Policy]:
        """(the new policy, what the controller runs: it wrapped where needed); SwapRefused says why not."""
        rt = self.runtime
        steps = set(config.candidate_steps())
        allowed = set(rt.controller.allowed_steps)
        if not steps <= allowed and self.wrap is None:
            raise SwapRefused(
                f"the policy can choose draft depth(s) {sorted(steps - allowed)}, but the engine only "
                f"prepared {sorted(allowed)}"
            )
        if config.needs_request_ids() and not rt.wants_request_ids:
            raise SwapRefused(
                "the policy reads request ids, which this engine process does not collect (the policy it "
                "started with did not need them); start the engine with it instead"
            )
        try:
            policy = get_entry(config.name).factory(config)
            guarded = policy if steps <= allowed or self.wrap is None else self.wrap(policy)
        except Exception as exc:  # noqa: BLE001 - a factory's failure is a reason to refuse, not to stop
            raise SwapRefused(f"building it failed: {type(exc).__name__}: {short_str(exc)}") from None
        return policy, guarded

    def install(self, config: PolicyConfig, built: tuple[Policy, Policy], step: int, source: str) -> None:
        """Make ``built`` (from ``prepare``) decide from decision ``step`` on."""
        rt = self.runtime
        previous = rt.settings.policy.name
        policy, guarded = built
        rt.controller.replace_policy(guarded, config.name)
        rt.policy = policy
        rt.settings = rt.settings.model_copy(update={"policy": config})
        rt.candidate_steps = tuple(sorted(set(config.candidate_steps())))
        self.swaps += 1
        spec = config.model_dump(mode="json")
        log.warning(
            "specpolicy rank %d: policy changed at step %d (%s): %s -> %s",
            rt.rank,
            step,
            source,
            previous,
            json.dumps(spec, separators=(",", ":")),
        )
        if rt.metrics is not None:
            rt.metrics.count_swap(policy, refused=False)
        if rt.trace is not None:
            rt.trace.note({"kind": "policy_swap", "step": step, "previous": previous, "policy": spec})

    def refuse(self, step: int, reason: str, source: str, log_it: bool) -> None:
        """Count a refused policy, say why (when ``log_it``), and note it in the trace."""
        rt = self.runtime
        self.refused += 1
        if log_it:
            log.error(
                "specpolicy rank %d: policy change refused at step %d (%s): %s; the running policy %s stays "
                "(logged once per distinct file)",
                rt.rank,
                step,
                source,
                reason,
                rt.settings.policy.name,
            )
        if rt.metrics is not None:
            rt.metrics.count_swap(None, refused=True)
        if rt.trace is not None:
            rt.trace.note({"kind": "policy_swap_refused", "step": step, "reason": reason})

    def receive(self, payload: bytes, step: int) -> None:
        """A policy rank 0 installed (its broadcast JSON): install it here at the same step."""
        try:
            config = parse_config(json.loads(payload))
            built = self.prepare(config)
        except (ConfigError, SwapRefused, ValueError) as exc:
            self.refuse(step, short_str(exc), "from rank 0", log_it=True)
            return
        self.install(config, built, step, "from rank 0")


class ControlWatch:
    """Rank 0's watch over the control file (``poll`` runs before every ``control_every``-th decision).

    ``announce`` (several ranks) receives the installed policy's JSON, to send with this step's depth.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        swapper: PolicySwapper,
        announce: Callable[[bytes], None] | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.swapper = swapper
        self.announce = announce
        self._sig = self._signature()
        self._logged: set[str] = set()
        #: checks made (one os.stat each) and files read
        self.checks = 0
        self.reads = 0
        if self._sig is not None:
            log.info(
                "specpolicy: control file %s exists at start; its policy applies once the file changes",
                self.path,
            )

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def poll(self, step: int) -> None:
        """Swap the policy in before decision ``step`` if the file changed to a valid one."""
        self.checks += 1
        sig = self._signature()
        if sig == self._sig:
            return
        self._sig = sig
        if sig is None:  # removed: the running policy stays, as it would for an unchanged file
            return
        self.reads += 1
        source = f"control file {self.path}"
        try:
            data = read_text(self.path, "control file")
        except ConfigError as exc:
            self._refuse(step, str(exc), str(exc))
            return
        try:
            config = parse_control(data, source)
            built = self.swapper.prepare(config)
        except (ConfigError, SwapRefused) as exc:
            self._refuse(step, str(exc).replace("\n", "; "), hashlib.sha256(data.encode()).hexdigest())
            return
        if config == self.swapper.runtime.settings.policy:
            return  # rewritten with the running policy: nothing changes
        self.swapper.install(config, built, step, source)
        if self.announce is not None:
            self.announce(json.dumps(config.model_dump(mode="json")).encode())

    def _refuse(self, step: int, reason: str, key: str) -> None:
        logged = self._logged
        log_it = key not in logged and len(logged) < MAX_LOGGED
        if log_it:
            logged.add(key)
        self.swapper.refuse(step, reason, f"control file {self.path}", log_it)


def attach_control(
    runtime: SwapTarget, wrap: Callable[[Policy], Policy] | None, agreed: AgreedDecider | None
) -> PolicySwapper | None:
    """Watch the settings' control file from ``runtime`` (rank 0), or receive rank 0's changes (the other
    ranks); None when no control file is set, or when the ranks have no group to agree over."""
    settings = runtime.settings
    if settings.control_path is None:
        return None
    swapper = PolicySwapper(runtime, wrap)
    announce = None
    if agreed is not None:
        if agreed.mode != "broadcast":
            log.warning(
                "specpolicy rank %d: the control file %s is not watched: with tp_agreement=local the %d "
                "ranks could read it at different steps and run different depths; policy changes need "
                "tp_agreement=broadcast",
                runtime.rank,
                settings.control_path,
                runtime.world_size,
            )
            return None
        if runtime.rank != 0:
            agreed.on_swap = swapper.receive
            return swapper
        announce = agreed.announce
    swapper.watch = ControlWatch(settings.control_path, swapper, announce)
    runtime.controller.watch(swapper.watch.poll, settings.control_every)
    return swapper
