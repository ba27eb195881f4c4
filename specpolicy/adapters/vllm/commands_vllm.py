"""``specpolicy vllm-args``: print the vLLM flags that run a policy (works without vLLM installed)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ...config_files import loads_json_object

__all__ = ["register", "cmd_vllm_args"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "vllm-args",
        help="print the vLLM flags that run a policy",
        description="Print the `vllm serve` flags (or LLM(...) keyword arguments with --json) that run a "
        "policy: --speculative-config with a num_speculative_tokens_per_batch_size schedule listing every "
        "depth the policy may choose (so vLLM captures CUDA graphs for each), --scheduler-cls and "
        "--additional-config. "
        "Exit status 1 with the offending field named when the policy configuration is invalid.",
    )
    p.add_argument("--policy", required=True, help="policy name, JSON object, or .json/.yaml/.toml file")
    p.add_argument(
        "--num-speculative-tokens",
        type=int,
        default=None,
        metavar="K",
        help="maximum draft depth vLLM prepares (default: the policy's deepest candidate)",
    )
    p.add_argument(
        "--max-num-seqs",
        type=int,
        default=256,
        help="vLLM's max_num_seqs; the schedule is laid out against it (default: %(default)s)",
    )
    p.add_argument("--method", default=None, help="speculative method (default: eagle3)")
    p.add_argument("--draft-model", default=None, help="drafter model path or name")
    p.add_argument(
        "--speculative-config",
        default=None,
        metavar="JSON",
        help="your existing --speculative-config, to extend instead of starting from scratch",
    )
    p.add_argument("--trace", default=None, metavar="FILE", help="also write the JSONL step trace to FILE")
    p.add_argument("--no-metrics", action="store_true", help="do not export specpolicy_* Prometheus metrics")
    p.add_argument("--json", action="store_true", help="print LLM(...) keyword arguments as JSON instead")
    p.set_defaults(func=cmd_vllm_args)


def cmd_vllm_args(args: argparse.Namespace) -> int:
    from .args import build_vllm_args

    base = None
    if args.speculative_config:
        base = loads_json_object(args.speculative_config, "speculative_config")
    settings: dict[str, Any] = {}
    if args.trace:
        settings["trace_path"] = args.trace
    if args.no_metrics:
        settings["metrics"] = False
    out = build_vllm_args(
        args.policy,
        args.num_speculative_tokens,
        max_num_seqs=args.max_num_seqs,
        method=args.method,
        draft_model=args.draft_model,
        speculative_config=base,
        settings=settings,
    )
    if args.json:
        print(json.dumps(out.as_kwargs(), indent=2))
    else:
        print(out.shell())
    for note in out.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
