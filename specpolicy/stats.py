"""StepStats: what an engine adapter knows when it asks a policy for the next step's mode.

Built on every decode step, so it is a tuple subclass: construction is one ``tuple.__new__``. The public
constructor validates the scalar fields and raises a ``ValueError`` naming the field; ``StepStats.fast`` skips
validation for adapters that already hold well-formed values (policies never trust either: decide() reads
each field through an inline type check with the readers of ``clean`` behind it, so numpy numbers are
understood and anything malformed is missing data for that field only).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Concatenate, NamedTuple, ParamSpec

from .clean import MAX_COUNT, clean_count, clean_float, sample_sequence
from .errors import short_repr

__all__ = ["StepStats", "mean_accepted_drafts"]


class _Fields(NamedTuple):
    """The one list of StepStats fields; ``StepStats.fast``, ``TraceRecord`` and the trace follow it."""

    batch_size: int
    num_waiting: int = 0
    mean_seq_len: float | None = None
    last_num_steps: int = 0
    accepted_draft_tokens: Sequence[int] | None = None
    drafted_tokens: Sequence[int] | None = None
    last_step_time_s: float | None = None
    mean_accepted: float | None = None
    last_batch_size: int | None = None
    last_decided_steps: int | None = None
    last_mean_seq_len: float | None = None
    last_request_ids: Sequence[Hashable] | None = None
    request_ids: Sequence[Hashable] | None = None
    hints: Sequence[int] | None = None


_new = tuple.__new__
_fields_new = _Fields.__new__
_P = ParamSpec("_P")


def _unchecked(new: Callable[Concatenate[Any, _P], Any]) -> classmethod[StepStats, _P, StepStats]:
    """The field list's own constructor (positional or by name, defaults filled in) as a classmethod."""
    return classmethod(new)


class StepStats(_Fields):
    """Inputs to one ``Policy.decide`` call.

    Attributes:
        batch_size: requests in decode in the upcoming step (prefills joining it are not counted).
        num_waiting: requests queued, not yet admitted.
        mean_seq_len: mean context length of the decode batch, or None.
        last_num_steps: draft depth actually executed by the most recent step whose result is known
            (0 = that step did not speculate). With overlap scheduling that step can be one older than the
            previous decision; the fields below always describe that same step.
        accepted_draft_tokens: per request, accepted draft tokens of that step, NOT counting the bonus
            token, each in [0, drafted]. None when last_num_steps is 0 or nothing is known: a step without
            speculation is never "zero acceptance".
        drafted_tokens: per request, drafts actually proposed when the engine trims them; None means
            ``last_num_steps`` for every request.
        last_step_time_s: that step's measured wall time in seconds, or None.
        mean_accepted: optional precomputed mean of ``accepted_draft_tokens`` (accepted drafts per request,
            bonus not counted) for adapters that already hold the aggregate (an engine counter, a tensor
            reduction, the simulator). When set, policies use it and never sum the per-request list, so the
            O(batch) work is done once, where it is cheapest. None when last_num_steps is 0.
        last_batch_size: the batch size of that step (the step the ``last_*`` fields describe), so a policy
            that learns per batch size never has to infer which decision the outcome belongs to. None when
            no outcome is known.
        last_decided_steps: the depth decided for that step (the policy's, or the engine default when the
            policy failed), as distinct from ``last_num_steps``, the depth it ran: an engine that cannot run
            a depth runs a shallower one. None when no outcome is known.
        last_mean_seq_len: that step's ``mean_seq_len`` (the context length its time was measured at), or
            None.
        last_request_ids: the id of each request of that step, in the order of ``accepted_draft_tokens``
            (any hashable the engine uses: SGLang's and vLLM's request ids), so a policy can learn
            acceptance per request. None when unknown.
        request_ids: the id of each request in the upcoming batch (the load fields' batch; order free), so
            a policy can choose for the requests it is about to run. None when unknown. The outcome
            fields are those between the load and this one: ``_fields[3:12]``.
        hints: the upcoming batch's per-request hints (``specpolicy.hints.BatchHints``: requests opting
            out, requests with a ``max_depth``, the smallest and largest of those caps), or None when no
            request of the batch has a hint. The controller applies the batch rule after decide(), so a
            policy may read them but need not.

    "Acceptance length" everywhere in specpolicy means 1 + accepted drafts (the bonus token counted).
    """

    __slots__ = ()

    #: Build without validation (the adapters' per-step path). Policies stay robust to bad values.
    fast = _unchecked(_fields_new)

    # ``__new__`` (the validating constructor, the field list's signature) is set below the helpers.

    @property
    def has_acceptance(self) -> bool:
        """True when the fields describe a step that speculated and reported its acceptance."""
        if self.last_num_steps <= 0:
            return False
        return self.mean_accepted is not None or bool(self.accepted_draft_tokens)

    def mean_acceptance_length(self) -> float | None:
        """1 + mean accepted drafts of the described step (see ``mean_accepted_drafts``), or None."""
        m = mean_accepted_drafts(self)
        return None if m is None else 1.0 + m


_INF = math.inf


def _validated(cls: type[StepStats], values: tuple[Any, ...]) -> StepStats:
    """The StepStats of ``values`` (the fields in order) with its scalar fields checked and numpy numbers
    converted; ValueError naming a bad field."""
    (
        batch_size,
        num_waiting,
        mean_seq_len,
        last_num_steps,
        accepted_draft_tokens,
        drafted_tokens,
        last_step_time_s,
        mean_accepted,
        last_batch_size,
        last_decided_steps,
        last_mean_seq_len,
        last_request_ids,
        request_ids,
        hints,
    ) = values
    changed = False
    # Inline checks for the common well-formed types; the helpers convert numpy numbers or raise.
    if (
        type(batch_size) is not int
        or type(num_waiting) is not int
        or type(last_num_steps) is not int
        or (batch_size | num_waiting | last_num_steps) >> 53  # any negative or > MAX_COUNT: nonzero
    ):
        batch_size = _valid_count("batch_size", batch_size)
        num_waiting = _valid_count("num_waiting", num_waiting)
        last_num_steps = _valid_count("last_num_steps", last_num_steps)
        changed = True
    if last_batch_size is not None and (type(last_batch_size) is not int or last_batch_size >> 53):
        last_batch_size = _valid_count("last_batch_size", last_batch_size)
        changed = True
    if last_decided_steps is not None and (type(last_decided_steps) is not int or last_decided_steps >> 53):
        last_decided_steps = _valid_count("last_decided_steps", last_decided_steps)
        changed = True
    if last_mean_seq_len is not None and (
        last_mean_seq_len.__class__ is not float or not 0.0 <= last_mean_seq_len < _INF
    ):
        last_mean_seq_len = _valid_float("last_mean_seq_len", last_mean_seq_len)
        changed = True
    if mean_seq_len is not None and (mean_seq_len.__class__ is not float or not 0.0 <= mean_seq_len < _INF):
        mean_seq_len = _valid_float("mean_seq_len", mean_seq_len)
        changed = True
    if last_step_time_s is not None and (
        last_step_time_s.__class__ is not float or not 0.0 <= last_step_time_s < _INF
    ):
        last_step_time_s = _valid_float("last_step_time_s", last_step_time_s)
        changed = True
    if accepted_draft_tokens is not None and last_num_steps == 0:
        raise ValueError(
            "StepStats.accepted_draft_tokens must be None when last_num_steps is 0 (a step without "
            "speculation has no acceptance data)"
        )
    if mean_accepted is not None:
        if last_num_steps == 0:
            raise ValueError("StepStats.mean_accepted must be None when last_num_steps is 0")
        m = clean_float(mean_accepted)
        if m is None or m > last_num_steps:
            raise ValueError(
                f"StepStats.mean_accepted must be a finite float in [0, last_num_steps={last_num_steps}] "
                f"or None, got {short_repr(mean_accepted)}"
            )
        if m is not mean_accepted:
            mean_accepted = m
            changed = True
    if drafted_tokens is not None or accepted_draft_tokens.__class__ is not list:
        n_acc = _valid_len("accepted_draft_tokens", accepted_draft_tokens)
        n_drafted = _valid_len("drafted_tokens", drafted_tokens)
        if n_drafted >= 0 and n_acc >= 0 and n_drafted != n_acc:
            raise ValueError(
                "StepStats.drafted_tokens must have one entry per request of accepted_draft_tokens "
                f"({n_drafted} != {n_acc})"
            )
    if last_request_ids is not None or request_ids is not None:
        for name, ids in (("last_request_ids", last_request_ids), ("request_ids", request_ids)):
            if _valid_len(name, ids, "request ids") >= 0:
                try:
                    set(ids)  # hashes every id, in C
                except TypeError:
                    raise ValueError(
                        f"StepStats.{name} must hold hashable request ids, got {short_repr(ids)}"
                    ) from None
        n_ids = len(last_request_ids) if last_request_ids is not None else -1
        n_acc = _valid_len("accepted_draft_tokens", accepted_draft_tokens)
        if n_ids >= 0 and n_acc >= 0 and n_ids != n_acc:
            raise ValueError(
                "StepStats.last_request_ids must have one entry per request of accepted_draft_tokens "
                f"({n_ids} != {n_acc})"
            )
    if hints is not None and (
        _valid_len("hints", hints) != 4 or any(type(h) is not int or not 0 <= h <= MAX_COUNT for h in hints)
    ):
        raise ValueError(
            "StepStats.hints must be None or (off, capped, min_cap, max_cap), four ints >= 0, got "
            f"{short_repr(hints)}"
        )
    if changed:
        values = (
            batch_size,
            num_waiting,
            mean_seq_len,
            last_num_steps,
            accepted_draft_tokens,
            drafted_tokens,
            last_step_time_s,
            mean_accepted,
            last_batch_size,
            last_decided_steps,
            last_mean_seq_len,
            last_request_ids,
            request_ids,
            hints,
        )
    stats: StepStats = _new(cls, values)
    return stats


def _with_field_signature(target: Callable[[type[StepStats], tuple[Any, ...]], StepStats]) -> Any:
    """A ``__new__`` with the field list's own signature (names and defaults) that hands ``target`` the
    fields as one tuple, generated as ``namedtuple`` generates its own: no argument forwarding per call, and
    no second copy of the field list to keep in step."""
    names = ", ".join(_Fields._fields)
    namespace: dict[str, Any] = {"_target": target}
    exec(f"def __new__(cls, {names}):\n    return _target(cls, ({names},))\n", namespace)  # noqa: S102
    new = namespace["__new__"]
    new.__defaults__ = _fields_new.__defaults__
    new.__qualname__ = "StepStats.__new__"
    return new


StepStats.__new__ = _with_field_signature(_validated)  # type: ignore[method-assign]


def _valid_count(name: str, value: object) -> int:
    """An int or an integer type (numpy) in [0, MAX_COUNT]; floats are refused here, as a type error."""
    try:
        n = None if isinstance(value, bool) else operator.index(value)  # type: ignore[arg-type]
    except Exception:
        n = None
    if n is None or not 0 <= n <= MAX_COUNT:
        raise ValueError(f"StepStats.{name} must be an int in [0, 2**53), got {short_repr(value)}")
    return n


def _valid_float(name: str, value: object) -> float | None:
    if value is None:
        return None
    f = clean_float(value)
    if f is None:
        raise ValueError(f"StepStats.{name} must be a finite float >= 0 or None, got {short_repr(value)}")
    return f


def _valid_len(name: str, value: object, of: str = "ints") -> int:
    """len() of a per-request field (-1 for None); ValueError naming the field when it has none."""
    if value is None:
        return -1
    if isinstance(value, (str, bytes)):
        raise ValueError(f"StepStats.{name} must be a sequence of {of} or None, got {short_repr(value)}")
    try:
        return len(value)  # type: ignore[arg-type]
    except Exception:
        raise ValueError(
            f"StepStats.{name} must be a sequence of {of} or None, got {short_repr(value)}"
        ) from None


def mean_accepted_drafts(stats: StepStats, max_requests: int = 0) -> float | None:
    """Mean accepted drafts per request of the step ``stats`` describes, or None when there is no usable data.

    ``max_requests`` > 0 bounds the work: a larger batch is sampled with an even stride (every
    ``ceil(n / max_requests)``-th request, ``sample_sequence``), so the cost stops growing with the batch,
    whatever container holds the counts.

    Never raises. Data counts only when ``last_num_steps > 0`` and acceptance is reported (a step without
    speculation is not zero acceptance). ``mean_accepted`` wins when set (clipped to [0, last_num_steps]).
    Otherwise the per-request list is summed once in C; a numeric sum inside [0, total drafted] is used as is
    (the mean capped at last_num_steps), and only an out-of-range, NaN or non-numeric sum pays for the
    per-request repair: values clipped to [0, drafted], non-finite, negative or non-numeric entries ignored.
    (So an out-of-range entry hidden by an in-range sum is not repaired: the contract says entries are in
    [0, drafted]; checking each one with min()/max() would cost 3x the sum.) ``drafted_tokens`` that is not
    a sequence of the same length is ignored (every request drafted ``last_num_steps``).
    """
    raw_k, acc, drafted, m = stats[3], stats[4], stats[5], stats[7]
    k = raw_k if type(raw_k) is int else clean_count(raw_k)
    if k is None or k <= 0:
        return None
    if m is not None:
        f = m if m.__class__ is float else clean_float(m)
        if f is not None and 0.0 <= f < _INF:
            return f if f <= k else float(k)
        # a bad aggregate: fall back to the list, if any
    if acc.__class__ is list and drafted is None and not 0 < max_requests < len(acc):
        n = len(acc)  # the common case: a list read whole
    else:
        got = sample_sequence(acc, max_requests)
        if got is None:
            return None
        acc, n_all = got
        n = len(acc)
        if drafted is not None:
            caps = sample_sequence(drafted, max_requests)
            drafted = caps[0] if caps is not None and caps[1] == n_all and len(caps[0]) == n else None
    if n == 0:
        return None
    try:
        total = sum(acc)
        cap = k * n if drafted is None else min(sum(drafted), k * n)  # drafted entries are <= k
        if type(total) is not int and type(total) is not float:  # numpy numbers from an odd list
            total = operator.index(total)
            cap = operator.index(cap)
        if 0 <= total <= cap:  # NaN fails both comparisons
            mean = total / n
            return mean if mean <= k else float(k)
    except Exception:  # noqa: BLE001 - non-numbers, or counts beyond any float: the per-request repair
        pass
    return _repair_mean(acc, drafted, k)


def _repair_mean(acc: object, drafted: object, k: int) -> float | None:
    """Per-request slow path: clip each value to [0, drafted_i], skip non-finite / negative / non-numbers."""
    try:
        values = list(acc)  # type: ignore[call-overload]
    except Exception:
        return None
    caps: list[object]
    try:
        caps = list(drafted) if drafted is not None else []  # type: ignore[call-overload]
    except Exception:
        caps = []
    total = 0.0
    count = 0
    for i, v in enumerate(values):
        try:
            f = float(v)
        except Exception:
            continue
        if not (0 <= f < _INF):
            continue
        cap = k
        if i < len(caps):
            c = clean_count(caps[i])
            if c is not None and c < k:
                cap = c
        total += f if f <= cap else cap
        count += 1
    return total / count if count else None
