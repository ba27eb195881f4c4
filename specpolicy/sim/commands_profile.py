"""``specpolicy profile``: list, show and fit step-cost profiles (argument parsing and printing only)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import ConfigError
from ..profiles import CostProfile, available_profiles, load_profile, profile_from_dict

__all__ = ["register", "cmd_list", "cmd_show", "cmd_fit", "cmd_synth"]

# Batch sizes shown by ``profile show``.
_SHOW_BATCHES = (1, 4, 16, 64, 256)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "profile",
        help="list, show and fit step-cost profiles",
        description="Step-cost profiles price each simulated engine step and seed the cost_model policy. "
        "Format and shipped profiles: docs/reference/profiles.md.",
    )
    psub = p.add_subparsers(dest="profile_command", metavar="SUBCOMMAND", required=True)

    ls = psub.add_parser("list", help="the shipped profiles with their descriptions")
    ls.set_defaults(func=cmd_list)

    show = psub.add_parser(
        "show",
        help="describe a profile: provenance, assumptions and step times",
        description="Print a profile's provenance and assumptions and a table of step times (ms) by batch "
        "size: never (speculation-free engine), off (speculation off inside the speculative engine) and each "
        "depth k. Values marked * are extrapolated beyond the measured grid.",
    )
    show.add_argument("profile", metavar="NAME|FILE", help="a shipped profile name or a profile JSON file")
    show.add_argument("--seq-len", type=float, metavar="L", help="context length (default: the profile's)")
    show.add_argument("--json", action="store_true", help="print the profile document instead")
    show.set_defaults(func=cmd_show)

    fit = psub.add_parser(
        "fit",
        help="fit a profile from a step trace of a real engine",
        description="Fit a step-cost profile from one or more specpolicy-trace/1 files (rotated parts in "
        "order): step time per traced depth, bilinear in batch size and context length, by least squares "
        "with outlier rejection. Needs steps at depth 0 and at one depth k > 0. Prints the profile JSON (or "
        "writes it with -o) and a summary of the fit on stderr.",
    )
    fit.add_argument(
        "trace", nargs="+", metavar="TRACE.jsonl[.gz]", help="step trace file(s), gzip-compressed or not"
    )
    fit.add_argument("-o", "--output", metavar="OUT.json", help="write the profile here instead of stdout")
    fit.add_argument("--name", default="fitted", help="profile name (default: fitted)")
    fit.add_argument("--description", default="", help="profile description")
    fit.add_argument(
        "--draft-share",
        type=float,
        default=0.05,
        metavar="F",
        help="a draft step as a share of an off step, since whole-step times cannot tell (default 0.05)",
    )
    fit.add_argument("--rank", type=int, help="use this rank's steps (default: the lowest rank in the trace)")
    fit.set_defaults(func=cmd_fit)

    syn = psub.add_parser(
        "synth",
        help="write a synthetic step trace priced by a known profile (the CPU path to profile fit)",
        description="Write a specpolicy-trace/1 file of steps priced by a profile (shipped name or file), "
        "with log-normal noise and a few slow outliers, as an engine adapter would trace them: try "
        "'profile fit' without a GPU, or check that a fit recovers the profile. A name ending in .gz is "
        "gzip-compressed.",
    )
    syn.add_argument("-o", "--output", required=True, metavar="OUT.jsonl[.gz]", help="the trace to write")
    syn.add_argument("--profile", default="h200-llama8b", metavar="NAME|FILE", help="the true step costs")
    syn.add_argument("--steps", type=int, default=6000, metavar="N", help="steps to write (default 6000)")
    syn.add_argument(
        "--max-batch",
        type=int,
        default=256,
        metavar="B",
        help="batch sizes log-uniform in 1..B (default 256)",
    )
    syn.add_argument(
        "--depths", default=None, metavar="K1,K2,...", help="depths drawn uniformly (default 0..the deepest)"
    )
    syn.add_argument("--seed", type=int, default=1, help="seed of the draws (default 1)")
    syn.set_defaults(func=cmd_synth)


def cmd_list(args: argparse.Namespace) -> int:
    for name in available_profiles():
        p = load_profile(name)
        print(f"{name}: {p.description}")
    return 0


def _fmt(p: CostProfile, b: float, t: float, seq: float | None) -> str:
    return f"{t * 1e3:.3f}" + ("*" if p.is_extrapolated(b, seq) else "")


def describe(p: CostProfile, seq_len: float | None = None) -> str:
    """The human-readable summary ``profile show`` prints."""
    spec = p.spec
    lines = [f"{p.name}: {p.description}"]
    if spec.source:
        lines.append(f"source: {spec.source}")
    seqs = ", ".join(f"{s:g}" for s in p.seq_lens)
    lines.append(
        f"depths 0..{p.max_steps}; context lengths {seqs} (reference {p.reference_seq_len:g}); "
        f"measured batch sizes up to {p.max_batch_size:g}"
    )
    acc = "none" if p.acceptance is None else f"{p.acceptance:g}"
    lines.append(f"off_cost: {p.off_cost}; acceptance: {acc}")
    lines.append(
        f"prefill: {p.prefill_fixed_s * 1e3:.3f} ms + {p.prefill_per_token_s * 1e6:.2f} us/token "
        f"({p.prefill_s(512) * 1e3:.1f} ms for 512 tokens)"
    )
    ovh = spec.overhead
    lines.append(
        f"overhead ({spec.time_unit}, fixed + per request): "
        f"plain {ovh.plain.fixed:g} + {ovh.plain.per_request:g}, "
        f"spec {ovh.spec.fixed:g} + {ovh.spec.per_request:g}, off {ovh.off.fixed:g} + {ovh.off.per_request:g}"
    )
    for a in spec.assumptions:
        lines.append(f"  - {a}")
    seq = seq_len if seq_len is not None else p.reference_seq_len
    lines.append("")
    lines.append(f"step time (ms) at context {seq:g}; * = extrapolated")
    header = ["batch", "never", "off"] + [f"k={k}" for k in range(1, p.max_steps + 1)]
    rows = [header]
    for b in _SHOW_BATCHES:
        row = [str(b), _fmt(p, b, p.never_step_s(b, seq), seq), _fmt(p, b, p.off_step_s(b, seq), seq)]
        row += [_fmt(p, b, p.spec_step_s(b, k, seq), seq) for k in range(1, p.max_steps + 1)]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(lines)


def cmd_show(args: argparse.Namespace) -> int:
    p = load_profile(args.profile)
    if args.json:
        print(p.to_json(), end="")
    else:
        print(describe(p, args.seq_len))
    return 0


def _depths(text: str | None, max_steps: int) -> tuple[int, ...]:
    if text is None:
        return tuple(range(max_steps + 1))
    try:
        depths = tuple(sorted({int(x) for x in text.split(",")}))
    except ValueError:
        depths = ()
    if not depths or not all(0 <= k <= max_steps for k in depths):
        raise ConfigError(f"--depths must be comma-separated integers in 0..{max_steps}, got {text!r}")
    return depths


def cmd_synth(args: argparse.Namespace) -> int:
    import gzip

    from ..trace import TRACE_FORMAT, dumps_record
    from .fit import synthetic_trace

    truth = load_profile(args.profile)
    if args.steps < 1:
        raise ConfigError(f"--steps must be an integer >= 1, got {args.steps}")
    if args.max_batch < 1:
        raise ConfigError(f"--max-batch must be an integer >= 1, got {args.max_batch}")
    depths = _depths(args.depths, truth.max_steps)
    records = synthetic_trace(truth, n=args.steps, depths=depths, max_batch=args.max_batch, seed=args.seed)
    header = {"kind": "header", "format": TRACE_FORMAT, "rank": 0, "engine": "synthetic",
              "version": f"profile {truth.name}, seed {args.seed}"}
    opener = gzip.open if str(args.output).endswith(".gz") else open
    with opener(args.output, "wt", encoding="utf-8") as fh:
        fh.write(dumps_record(header) + "\n")
        for r in records:
            fh.write(r.to_json() + "\n")
    print(
        f"wrote {args.output}: {len(records)} steps priced by profile {truth.name} "
        f"(batch 1..{args.max_batch}, depths {','.join(map(str, depths))}); "
        f"fit it with: specpolicy profile fit {args.output}",
        file=sys.stderr,
    )
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    from .fit import FitOptions, fit_trace_files

    try:
        opts = FitOptions(
            name=args.name, description=args.description, draft_share=args.draft_share, rank=args.rank
        )
    except ValueError as exc:
        print(f"specpolicy profile fit: {exc}", file=sys.stderr)
        return 2
    try:
        res = fit_trace_files(args.trace, opts)
    except (OSError, ValueError) as exc:
        print(f"specpolicy profile fit: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(res.profile, indent=1) + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    err = sys.stderr
    print(
        f"fitted {res.profile['name']!r}: batch sizes {res.batch_range[0]:g}..{res.batch_range[1]:g}"
        + (f", context {res.seq_range[0]:g}..{res.seq_range[1]:g}" if res.seq_range else ""),
        file=err,
    )
    for d in res.depths:
        print(
            f"  depth {d.num_steps}: {d.used} steps used, {d.rejected} rejected as outliers, "
            f"relative RMS residual {d.rel_rms:.1%}",
            file=err,
        )
    for k, n in sorted(res.skipped_depths.items()):
        print(f"  depth {k}: only {n} steps, not fitted", file=err)
    if res.acceptance is not None:
        print(f"  per-token acceptance (from the trace): {res.acceptance:g}", file=err)
    for note in res.notes:
        print(f"  note: {note}", file=err)
    if args.output:
        profile_from_dict(res.profile, origin=args.output)
        print(f"wrote {args.output}; use it with --profile {args.output}", file=err)
    return 0
