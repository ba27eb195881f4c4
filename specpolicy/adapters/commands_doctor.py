"""The ``doctor`` subcommand (argument parsing only; the work is in ``specpolicy.adapters.doctor``)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: Any) -> None:
    d = sub.add_parser(
        "doctor",
        help="check the installed engines (and, on a GPU, run a short smoke test)",
        description="Report which engines and versions are installed, whether specpolicy supports them, "
        "which worker paths and hook targets it finds. With --smoke on a GPU machine: run short offline "
        "engines (speculation-free reference, always on, always off, switching every step) and report greedy "
        "token agreement and tokens/s per mode. Exit status 1 when something stands in the way.",
    )
    d.add_argument("--engine", choices=("all", "sglang", "vllm"), default="all", help="which engine to check")
    d.add_argument("--smoke", action="store_true", help="run the GPU smoke test (needs --model)")
    d.add_argument("--model", metavar="PATH", help="target model for the smoke test")
    d.add_argument("--draft", metavar="PATH", help="draft model for the smoke test (EAGLE/EAGLE-3 head)")
    d.add_argument("--algorithm", help="speculative algorithm for the smoke test (default: EAGLE3 / eagle3)")
    d.add_argument("--num-steps", type=int, default=3, help="launch depth for the smoke test (default 3)")
    d.add_argument(
        "--engine-args",
        metavar="JSON",
        type=json.loads,
        default=None,
        help="extra sglang.Engine arguments for the SGLang smoke runs, as a JSON object, "
        'e.g. {"attention_backend": "triton"}',
    )
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import report

    if args.smoke and not args.model:
        raise SystemExit("specpolicy doctor: --smoke needs --model PATH (and --draft PATH for EAGLE)")
    return report(
        engine=args.engine,
        smoke=args.smoke,
        model=args.model,
        draft=args.draft,
        algorithm=args.algorithm,
        num_steps=args.num_steps,
        engine_kw=args.engine_args,
        as_json=args.json,
    )
