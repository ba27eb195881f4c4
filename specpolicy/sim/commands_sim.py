"""``specpolicy simulate`` and ``specpolicy tune``: argument parsing; the work is in run.py and tune.py."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .hint_mix import parse_hint_mix
from .run import (
    DEFAULT_CONCURRENCY,
    DEFAULT_DECIDE_COST_US,
    DEFAULT_PROFILE,
    DEFAULT_WORKLOAD,
    SimulationSpec,
    run_simulation,
)
from .scenario_options import add_arguments, from_args
from .swap import PolicySwap
from .warm import read_state
from .workloads import WORKLOADS, parse_concurrency

__all__ = ["register", "cmd_simulate", "cmd_tune"]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        metavar="NAME|FILE",
        help=f"step-cost profile: a shipped name or a profile JSON file (default {DEFAULT_PROFILE})",
    )
    p.add_argument(
        "--workload",
        default=DEFAULT_WORKLOAD,
        metavar="NAME|FILE",
        help=f"{', '.join(WORKLOADS)}, a requests JSONL file or a step trace (default {DEFAULT_WORKLOAD})",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the workload and acceptance draws (default 0)"
    )
    p.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="simulated seconds (per level for a sweep); default: the workload's own",
    )
    default_levels = ",".join(map(str, DEFAULT_CONCURRENCY))
    p.add_argument(
        "--concurrency",
        metavar="C1,C2,...",
        help=f"sweep levels (default: {default_levels} in the default scenario, else 1,2,4,...,256)",
    )
    p.add_argument(
        "--decide-cost-us",
        type=float,
        default=DEFAULT_DECIDE_COST_US,
        metavar="X",
        help=f"charge X microseconds per decide() of every policy (default {DEFAULT_DECIDE_COST_US:g}: the "
        "same numbers on every run and host)",
    )
    p.add_argument(
        "--measure-decide-cost",
        action="store_true",
        help="charge each policy its decide() time measured on this host instead (varies run to run)",
    )
    p.add_argument(
        "--off-cost",
        choices=("lazy", "catch_up", "profile"),
        default="lazy",
        help="what a step with speculation off costs inside the speculative engine: lazy (default: the "
        "specpolicy adapter's off step, a plain decode whose drafter catches up when speculation resumes), "
        "catch_up (a draft pass on every off step, as SGLang's own rule runs it) or the profile's own",
    )
    p.add_argument("--jobs", type=int, metavar="N", help="worker processes (default: one per CPU)")
    add_arguments(p)


def register(sub: Any) -> None:
    s = sub.add_parser(
        "simulate",
        help="compare policies on a simulated engine with measured step costs",
        description="Simulate a continuous-batching speculative engine step by step and compare every "
        "registered policy with never, static-0..K, schedule-vllm, sglang-adaptive and the oracle. With no "
        f"arguments: a sweep at concurrency {', '.join(map(str, DEFAULT_CONCURRENCY))} on {DEFAULT_PROFILE}, "
        "the deployment of the field report (speculation pays at 1 and loses under load).",
    )
    _common(s)
    s.add_argument(
        "--policy",
        action="extend",
        nargs="+",
        metavar="NAME|CONFIG",
        help="policies to compare (names, JSON objects or config files) instead of every registered "
        "one with its defaults; may repeat",
    )
    s.add_argument("--json", metavar="OUT.json", help="also write the results as JSON")
    s.add_argument("--plot", metavar="OUT.png", help="also draw a figure (needs the 'plot' extra)")
    s.add_argument(
        "--wide",
        action="store_true",
        help="the wide table: adds the oracle and decide() columns, no wrapping",
    )
    s.add_argument(
        "--feedback-lag",
        type=int,
        choices=(0, 1),
        default=0,
        help="0: a step's outcome is known before the next decision (non-overlap, default); "
        "1: one step later (overlap / async scheduling)",
    )
    s.add_argument("--max-running", type=int, default=256, help="max requests decoding at once (default 256)")
    s.add_argument(
        "--hints",
        metavar="SPEC",
        help="per-request hints: off=F[,capped=F,max_depth=N][,per_request=true][,rule=any|majority|all] "
        "(fractions of the requests; per_request: verify per request as vLLM, else one depth per batch "
        "as SGLang, off under the rule, default majority)",
    )
    s.add_argument(
        "--jitter", type=float, default=0.01, help="log-normal step-time noise, sigma (default 0.01)"
    )
    s.add_argument(
        "--switch-cost-ms",
        type=float,
        default=0.0,
        help="extra milliseconds of the first step after the depth changes (default 0; SGLang's overlap "
        "worker measured 0.5-1.3)",
    )
    s.add_argument(
        "--slo-tpot-ms",
        type=float,
        metavar="X",
        help="add a goodput column: tokens/s of requests whose TPOT <= X ms",
    )
    s.add_argument(
        "--swap-to",
        metavar="NAME|CONFIG",
        help="replace every policy under test by this one mid-run, as a live policy change "
        "(specpolicy control set) does; with --swap-at or --swap-at-step",
    )
    s.add_argument("--swap-at", type=float, metavar="S", help="the change's simulated time in seconds")
    s.add_argument("--swap-at-step", type=int, metavar="N", help="the change's decision number instead")
    s.add_argument(
        "--warm-start",
        metavar="FILE",
        help="start the policies a saved state belongs to (same policy and config) from it: a state written "
        "by --save-state or an adapter's warm-start file; the others start cold",
    )
    s.add_argument(
        "--save-state",
        metavar="FILE",
        help="write the state the first policy compared (in --policy order) ends its last run with",
    )
    s.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    s.set_defaults(func=cmd_simulate)

    t = sub.add_parser(
        "tune",
        help="search a policy's parameters in the simulator; print the best config as JSON",
        description="Random search over a policy's numeric parameters (ranges from its config model) on "
        "one profile and workload. Prints the best config as JSON that make_policy, check-config and the "
        "engine adapters accept; progress and the score of each trial go to stderr.",
    )
    t.add_argument(
        "--policy",
        required=True,
        metavar="NAME|CONFIG",
        help="policy name, or a config whose unsearched fields are kept",
    )
    _common(t)
    t.add_argument(
        "--objective",
        choices=("throughput", "tpot_p99", "goodput"),
        default="throughput",
        help="maximise output tokens/s, minimise TPOT p99, or maximise goodput (needs --slo-tpot-ms)",
    )
    t.add_argument("--slo-tpot-ms", type=float, metavar="X", help="TPOT target for goodput")
    t.add_argument("--budget", type=int, default=24, help="number of configs to simulate (default 24)")
    t.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="FIELD=LO:HI",
        help="override the search range of one field; may repeat",
    )
    t.set_defaults(func=cmd_tune)


def _spec(args: argparse.Namespace) -> dict[str, Any]:
    acceptance, shape = from_args(args)
    return {
        "profile": args.profile,
        "workload": args.workload,
        "seed": args.seed,
        "duration_s": args.duration,
        "concurrency": sweep_levels(args),
        "decide_cost_us": None if args.measure_decide_cost else args.decide_cost_us,
        "off_cost": None if args.off_cost == "profile" else args.off_cost,
        "jobs": args.jobs,
        "acceptance": acceptance,
        "shape": shape,
    }


def sweep_levels(args: argparse.Namespace) -> tuple[int, ...] | None:
    """``--concurrency``, or the default scenario's levels, or None for the workload's own."""
    if args.concurrency:
        return parse_concurrency(args.concurrency)
    if (args.profile, args.workload) == (DEFAULT_PROFILE, DEFAULT_WORKLOAD):
        return DEFAULT_CONCURRENCY
    return None  # the workload's own levels


def cmd_simulate(args: argparse.Namespace) -> int:
    if args.plot:
        from .plot import require_matplotlib

        require_matplotlib()
    swap = None
    if args.swap_to is not None:
        swap = PolicySwap.build(args.swap_to, args.swap_at, args.swap_at_step)
    elif args.swap_at is not None or args.swap_at_step is not None:
        raise ConfigError("--swap-at / --swap-at-step: need --swap-to (the policy to change to)")
    spec = SimulationSpec(
        **_spec(args),
        swap=swap,
        policies=tuple(args.policy) if args.policy else None,
        feedback_lag=args.feedback_lag,
        max_running=args.max_running,
        jitter=args.jitter,
        switch_cost_ms=args.switch_cost_ms,
        timeline_bin_s=5.0 if args.plot else None,
        hints=parse_hint_mix(args.hints),
        warm_start=read_state(args.warm_start) if args.warm_start else None,
        save_state=bool(args.save_state),
    )
    sim = run_simulation(spec, progress=False if args.no_progress else None)
    if args.save_state:
        kept = [o for o in sim.outcomes if o.result.policy_state is not None]  # the policies under test
        if not kept:
            raise ConfigError("--save-state: no simulated policy keeps a state")
        first = kept[0].comparator.label
        last = [o.result.policy_state for o in kept if o.comparator.label == first][-1]
        Path(args.save_state).write_text(json.dumps(last, allow_nan=False) + "\n")
        print(f"wrote {args.save_state} ({first}'s state)", file=sys.stderr)
    from .report import format_table, to_json

    print(format_table(sim, args.slo_tpot_ms, wide=args.wide))
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(sim, args.slo_tpot_ms), indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.plot:
        from .plot import plot

        plot(sim, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from .tune import Trial, compare, parse_param_ranges, tune

    spec = _spec(args)
    jobs = spec["jobs"] or os.cpu_count() or 1

    def on_trial(i: int, n: int, trial: Trial) -> None:
        params = {k: v for k, v in trial.config.items() if k != "name"}
        print(f"[{i}/{n}] {args.objective} {trial.metric:.4g}  {json.dumps(params)}", file=sys.stderr)

    res = tune(
        args.policy,
        profile=spec["profile"],
        workload=spec["workload"],
        objective=args.objective,
        slo_tpot_ms=args.slo_tpot_ms,
        budget=args.budget,
        seed=spec["seed"],
        duration_s=spec["duration_s"],
        concurrency=spec["concurrency"],
        decide_cost_us=spec["decide_cost_us"],
        param_ranges=parse_param_ranges(args.param),
        acceptance=spec["acceptance"],
        shape=spec["shape"],
        off_cost=spec["off_cost"],
        jobs=jobs,
        on_trial=on_trial,
    )
    print(
        f"{len(res.trials)} configs simulated, {res.rejected} invalid draws redrawn; the best against the "
        "alternatives:",
        file=sys.stderr,
    )
    for line in compare(res, jobs=jobs)[1]:
        print(line, file=sys.stderr)
    print(json.dumps(res.best.config, indent=2))
    return 0
