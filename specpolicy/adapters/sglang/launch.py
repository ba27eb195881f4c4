"""``specpolicy-sglang``: a drop-in for ``python -m sglang.launch_server`` that runs a specpolicy policy.

Our options (``--spec-policy`` and the ``--spec-policy-*`` family) are taken out of the command line;
everything else goes to SGLang untouched. The policy is validated FIRST, before SGLang is imported, so a bad
one exits non-zero naming the field whether or not SGLang is installed. The validated settings travel to
SGLang's spawned scheduler processes in the environment (``SPECPOLICY_CONFIG``), where the plugin entry point
picks them up.

On 0.5.13+ (the v2 route) a policy with more than one speculative depth on an EAGLE / EAGLE-3 chain
(topk 1) drives SGLang's AdaptiveController for those depths, so the launcher adds ``--speculative-adaptive``
and, when the user gave no ``--speculative-adaptive-config``, writes one whose candidate steps are the
policy's positive depths plus the launch depth (depth 0 is the decode step, never a controller state). A
user-given config is checked now: the policy's positive depths must be among its candidate steps. Any other
setup (a draft model, an EAGLE-3 tree, a policy with one speculative depth) passes through unchanged and the
policy runs on/off at the launch depth.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import runpy
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import ConfigError
from ...runtime.runtime import AdapterInstallError, check_candidate_steps
from ...runtime.settings import ENV_POLICY, AdapterSettings, bounds
from .versions import check_version, installed_version, route_for

__all__ = ["main", "prepare", "PreparedLaunch", "build_parser", "EXIT_CONFIG", "EXIT_REFUSED"]

PROG = "specpolicy-sglang"
EXIT_CONFIG = 2  # invalid specpolicy configuration (same status argparse uses for usage errors)
EXIT_REFUSED = 3  # valid configuration, but this engine/version/setup cannot run it


def add_options(parser: argparse.ArgumentParser) -> None:
    """specpolicy's options, as one group that sits beside SGLang's in ``--help``."""
    g = parser.add_argument_group("specpolicy", "per-step speculative decoding policy (specpolicy)")
    g.add_argument(
        "--spec-policy",
        metavar="NAME|JSON|FILE",
        help="the policy: a registered name (see `specpolicy policies`), a JSON object, or a "
        f".json/.yaml/.toml file. Default: the {ENV_POLICY} environment variable.",
    )
    g.add_argument(
        "--spec-policy-trace", metavar="FILE", help="write a JSONL step trace to FILE ({rank} allowed)"
    )
    g.add_argument(
        "--spec-policy-trace-max-mb",
        type=float,
        metavar="MB",
        help="rotate the trace file past MB (default 64)",
    )
    g.add_argument(
        "--spec-policy-trace-backups", type=int, metavar="N", help="rotated trace files kept (default 3)"
    )
    g.add_argument(
        "--spec-policy-metrics",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="export specpolicy_* Prometheus metrics with SGLang's (when --enable-metrics); default on",
    )
    g.add_argument(
        "--spec-policy-on-install-failure",
        choices=("refuse", "warn"),
        help="when the policy cannot be installed: refuse to start (default) or warn and serve without it",
    )
    g.add_argument(
        "--spec-policy-allow-untested",
        action="store_true",
        default=None,
        help="run on an SGLang release specpolicy was not tested with (a loud warning instead of a refusal)",
    )
    g.add_argument(
        "--spec-policy-tp-agreement",
        choices=("auto", "local", "broadcast"),
        help="how tensor-parallel ranks agree on each step's depth "
        "(default auto; see docs/getting-started/sglang.md)",
    )
    g.add_argument(
        "--spec-policy-off-step",
        choices=("decode", "verify"),
        help="legacy releases: an off step runs the target's plain decode (default) or a one-token verify",
    )
    g.add_argument(
        "--spec-policy-draft-catch-up",
        choices=("auto", "lazy", "per_step"),
        help="legacy releases: skip the drafter while off and catch it up on resume (lazy), or "
        "run a one-token draft extend every off step (per_step); default auto: lazy, with the EAGLE "
        "hidden-state window fitted to the free GPU memory",
    )
    g.add_argument(
        "--spec-policy-draft-catch-up-window",
        type=int,
        metavar="W",
        help="legacy releases, EAGLE drafters caught up lazily: hidden states kept per request (1-4096, "
        "default 32; auto shortens it to 10%% of the free GPU memory)",
    )
    g.add_argument(
        "--spec-policy-step-clock",
        choices=("auto", "host"),
        help="legacy releases: time the overlap worker's steps with CUDA events (auto, default) or the host "
        "clock everywhere (host)",
    )


def build_parser(with_sglang: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,
        add_help=False,
        description="Launch an SGLang server whose speculative depth is chosen every step by a specpolicy "
        "policy. Takes every option of `python -m sglang.launch_server`, plus the specpolicy options.",
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this help message and exit")
    add_options(parser)
    if with_sglang:
        from sglang.srt.server_args import ServerArgs

        ServerArgs.add_cli_args(parser)
    return parser


@dataclass
class PreparedLaunch:
    """What ``main`` will run: validated settings, SGLang's argv, and the environment for its processes."""

    settings: AdapterSettings
    version: str
    route: str
    sglang_argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _settings_from(ns: argparse.Namespace) -> AdapterSettings:
    spec = ns.spec_policy or os.environ.get(ENV_POLICY, "").strip()
    if not spec:
        raise ConfigError(
            "policy: missing; pass --spec-policy NAME|JSON|FILE (or set SPECPOLICY_POLICY). To run SGLang "
            "without a policy, use python -m sglang.launch_server"
        )
    fields: dict[str, object] = {}
    if ns.spec_policy_trace is not None:
        fields["trace_path"] = ns.spec_policy_trace
    if ns.spec_policy_trace_max_mb is not None:
        fields["trace_max_bytes"] = _trace_bytes(ns.spec_policy_trace_max_mb)
    if ns.spec_policy_trace_backups is not None:
        fields["trace_backups"] = ns.spec_policy_trace_backups
    if ns.spec_policy_metrics is not None:
        fields["metrics"] = ns.spec_policy_metrics
    if ns.spec_policy_on_install_failure is not None:
        fields["on_install_failure"] = ns.spec_policy_on_install_failure
    if ns.spec_policy_allow_untested:
        fields["allow_untested"] = True
    if ns.spec_policy_tp_agreement is not None:
        fields["tp_agreement"] = ns.spec_policy_tp_agreement
    if ns.spec_policy_off_step is not None:
        fields["off_step"] = ns.spec_policy_off_step
    if ns.spec_policy_draft_catch_up is not None:
        fields["draft_catch_up"] = ns.spec_policy_draft_catch_up
    if ns.spec_policy_draft_catch_up_window is not None:
        fields["draft_catch_up_window"] = ns.spec_policy_draft_catch_up_window
    if ns.spec_policy_step_clock is not None:
        fields["step_clock"] = ns.spec_policy_step_clock
    return AdapterSettings.build(spec, **fields)


def _trace_bytes(mb: float) -> int:
    """``--spec-policy-trace-max-mb`` in bytes; out of range (or NaN), a ConfigError in the option's unit."""
    lo, hi = (float(b or 0) / 2**20 for b in bounds("trace_max_bytes"))
    if not lo <= mb <= hi:
        raise ConfigError(f"--spec-policy-trace-max-mb: must be from {lo:g} to {hi:,.0f} MB, got {mb:g}")
    return int(mb * 2**20)


def _opt(argv: Sequence[str], name: str) -> str | None:
    """The value of ``--name V`` / ``--name=V`` in SGLang's argv (last one wins, as in argparse)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def _config_steps(path: str) -> list[int]:
    """Union of the candidate steps of an adaptive config (integer keys), as SGLang computes it.

    SGLang's own reader (``resolve_candidate_steps_from_config``) would import SGLang, which the launcher
    must not do before the policy is validated, so the rule is repeated here; the bridge checks the policy
    against SGLang's reading again once the worker exists.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise AdapterInstallError(f"--speculative-adaptive-config {path}: cannot read it: {exc}") from None
    steps: set[int] = set()
    for key, entry in data.items() if isinstance(data, dict) else ():
        if key.isdigit() and isinstance(entry, dict):
            steps.update(s for s in entry.get("candidate_steps", []) if isinstance(s, int))
    return sorted(steps)


def _adaptive_argv(argv: list[str], settings: AdapterSettings, notes: list[str]) -> list[str]:
    """Make SGLang run its AdaptiveController with candidate steps that cover the policy's positive depths,
    where the policy has several and SGLang's controller can run them; else ``argv`` unchanged."""
    out = list(argv)
    policy_steps = {s for s in settings.policy.candidate_steps() if s > 0}
    algo = (_opt(argv, "--speculative-algorithm") or "").upper()
    topk = _opt(argv, "--speculative-eagle-topk")
    if len(policy_steps) < 2 or algo not in ("EAGLE", "EAGLE3", "NEXTN") or topk not in (None, "1"):
        if len(policy_steps) > 1:
            notes.append(
                f"the policy's depths {sorted(policy_steps)} run on/off at the launch depth: SGLang's "
                "adaptive controller serves EAGLE / EAGLE3 chains (topk 1) only"
            )
        return out
    if "--speculative-adaptive" not in out:
        out.append("--speculative-adaptive")
        notes.append("added --speculative-adaptive")
    cfg = _opt(out, "--speculative-adaptive-config")
    launch = _opt(out, "--speculative-num-steps")
    if cfg is not None:
        check_candidate_steps(
            sorted(policy_steps), _config_steps(cfg), where=f"--speculative-adaptive-config {cfg}"
        )
        return out
    if launch is None:
        launch = str(max(policy_steps))
        out += ["--speculative-num-steps", launch]
        notes.append(f"added --speculative-num-steps {launch} (the launch depth, also the fallback)")
    steps = sorted(policy_steps | {int(launch)})
    fd, path = tempfile.mkstemp(prefix="specpolicy-adaptive-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump({"1": {"candidate_steps": steps}}, fh)
    atexit.register(lambda: Path(path).unlink(missing_ok=True))
    out += ["--speculative-adaptive-config", path]
    notes.append(f"wrote --speculative-adaptive-config {path} with candidate_steps {steps}")
    return out


def prepare(argv: Sequence[str]) -> PreparedLaunch:
    """Validate our options and decide what to run. Raises ConfigError / AdapterInstallError with the reason.

    Imports nothing from SGLang (the version comes from package metadata).
    """
    ns, rest = build_parser().parse_known_args(list(argv))
    settings = _settings_from(ns)
    notes: list[str] = []
    try:
        if _opt(rest, "--speculative-algorithm") is None:
            raise AdapterInstallError(
                "no --speculative-algorithm: the policy chooses the depth of speculative decoding, so the "
                "server must speculate (e.g. --speculative-algorithm EAGLE3 --speculative-draft-model-path P)"
            )
        version = check_version(installed_version(), settings.allow_untested)
        route = route_for(version)
        sglang_argv = _adaptive_argv(rest, settings, notes) if route == "v2" else list(rest)
    except AdapterInstallError as exc:
        if settings.on_install_failure == "refuse":
            raise
        # warn: SGLang runs exactly as without specpolicy, and says so loudly
        notes = [f"NOT ACTIVE: {exc}"]
        return PreparedLaunch(settings, installed_version() or "", "none", list(rest), {}, notes)
    env = settings.to_env()
    allow = os.environ.get("SGLANG_PLUGINS", "").strip()
    if allow and "specpolicy" not in {x.strip() for x in allow.split(",")}:
        # SGLang's plugin allow-list would keep specpolicy out of the scheduler processes
        env["SGLANG_PLUGINS"] = allow + ",specpolicy"
        notes.append("added specpolicy to SGLANG_PLUGINS")
    return PreparedLaunch(settings, version, route, sglang_argv, env, notes)


def _print_help() -> None:
    try:
        parser = build_parser(with_sglang=True)
    except Exception as exc:  # SGLang missing or broken: still document our own options
        parser = build_parser()
        parser.epilog = f"(SGLang's own options are not listed: cannot import SGLang: {exc})"
    parser.print_help()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        _print_help()
        return 0
    try:
        plan = prepare(args)
    except ConfigError as exc:
        print(f"{PROG}: invalid specpolicy configuration:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    except AdapterInstallError as exc:
        print(f"{PROG}: refusing to start: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    os.environ.update(plan.env)
    print(
        f"{PROG}: SGLang {plan.version} ({plan.route} route); {plan.settings.summary()}"
        + "".join(f"; {n}" for n in plan.notes),
        file=sys.stderr,
    )
    if plan.route == "legacy":
        return _run_legacy(plan)
    sys.argv = ["sglang.launch_server", *plan.sglang_argv]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
    return 0


def _run_legacy(plan: PreparedLaunch) -> int:
    """Legacy releases: the scheduler processes need specpolicy's ``run_scheduler_process_func`` (0.5.10.post1
    has no plugin framework), which ``http_server.launch_server`` takes as a keyword; the HTTP server mode is
    the one supported here (not gRPC, encoder-only or Ray)."""
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    from . import legacy

    try:
        from sglang.srt.plugins import load_plugins
    except ImportError:  # 0.5.10.post1
        pass
    else:
        load_plugins()
    server_args = prepare_server_args(plan.sglang_argv)
    try:
        lplan = legacy.prepare_launch(plan.settings, server_args)
    except legacy.InstallError as exc:
        print(f"{PROG}: refusing to start: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    for w in lplan.warnings:
        print(f"{PROG}: WARNING: {w}", file=sys.stderr)
    os.environ.update(lplan.env)
    try:
        launch_server(server_args, run_scheduler_process_func=lplan.run_scheduler_process_func)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
