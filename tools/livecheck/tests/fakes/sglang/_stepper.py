"""The stand-in's decode loop for an engine configured with a plain specpolicy policy (``SPECPOLICY_POLICY``
without the test dispatcher): a batch steps together, one depth per step, as SGLang's v2 worker runs it.

The depth of each step comes from specpolicy's own code, as the 0.5.13+ adapter drives it: an
``AdapterRuntime`` built from the environment's settings (``AdapterSettings.from_env``: the policy, the
control file, the batch rule, the trace) with the v2 route's depths (0 and the launch depth, the policy run
on/off at that depth), and the adapter's bridge ``SpecPolicyParams``, fed per step through ``note_batch``
(the prefill reads each request's ``custom_params`` hint, a decode batch gathers them), asked through
``get_steps_for_batch`` and told the accepted drafts through ``on_verify_complete``. What the stand-in adds
is the model: a request accepts the drafts of the bigram draft chain that agree with the target's, up to
the step's depth, and its tokens are always the target's chain. The per-request counters are SGLang's
(``spec_verify_ct`` one per decode step, ``spec_num_correct_drafts``). It proves nothing about SGLang.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

_RIDS = itertools.count()


class _Mode:
    def __init__(self, decode: bool) -> None:
        self.decode = decode

    def is_decode(self) -> bool:
        return self.decode


class _Params:
    def __init__(self, custom_params: dict[str, Any] | None) -> None:
        self.custom_params = custom_params


class Req:
    """What the adapter reads of SGLang's ``Req``: ``rid``, ``sampling_params.custom_params``, ``seqlen``,
    ``finished()``."""

    def __init__(self, prompt: Sequence[int], sp: dict[str, Any], first: int) -> None:
        self.rid = f"fake-{next(_RIDS)}"
        self.sampling_params = _Params(sp.get("custom_params"))
        self.prompt_len = len(prompt)
        self.n = int(sp["max_new_tokens"])
        self.out = [first]
        self.verify_ct = 0
        self.correct = 0

    @property
    def seqlen(self) -> int:
        return self.prompt_len + len(self.out)

    def finished(self) -> bool:
        return len(self.out) >= self.n


class _Batch:
    def __init__(self, reqs: list[Req], decode: bool) -> None:
        self.reqs = reqs
        self.forward_mode = _Mode(decode)


class _Scheduler:
    waiting_queue: list[Any] = []


class Stepper:
    """One engine's policy bridge and decode loop."""

    def __init__(self, launch: int, pi: Sequence[int], pi_draft: Sequence[int]) -> None:
        from specpolicy.adapters.sglang.adaptive import SpecPolicyParams
        from specpolicy.policies.compose import OnOffAtDepth
        from specpolicy.runtime.runtime import AdapterRuntime
        from specpolicy.runtime.settings import AdapterSettings

        settings = AdapterSettings.from_env()
        assert settings is not None, "SPECPOLICY_POLICY is set"
        self.runtime = AdapterRuntime(
            settings.model_copy(update={"metrics": False}),  # the stand-in exports no metrics
            engine="sglang",
            engine_version="0.0.0-fake",
            path="StandaloneWorkerV2 (stand-in)",
            allowed_steps=[0, launch],
            default_steps=launch,
            wrap=lambda p: OnOffAtDepth(p, launch),
        )
        self.params = SpecPolicyParams(self.runtime, launch, engine_candidates=[launch])
        self.pi, self.pd = pi, pi_draft
        self.sched = _Scheduler()
        print(f"FAKE {self.runtime.startup_line()}", flush=True)

    def generate(self, prompts: Sequence[Sequence[int]], sps: Sequence[dict[str, Any]]) -> list[Req]:
        pi, pd, params = self.pi, self.pd, self.params
        reqs = [Req(p, sp, pi[p[-1]]) for p, sp in zip(prompts, sps, strict=True)]
        params.note_batch(self.sched, _Batch(reqs, decode=False))  # the prefill: hints are read here
        live = [r for r in reqs if not r.finished()]
        while live:
            params.note_batch(self.sched, _Batch(live, decode=True))
            k = params.get_steps_for_batch(len(live))
            accepted = []
            for r in live:
                acc, d = 0, r.out[-1]
                while acc < k and pd[d] == pi[d]:
                    acc, d = acc + 1, pd[d]
                for _ in range(acc + 1):
                    if len(r.out) < r.n:
                        r.out.append(pi[r.out[-1]])
                r.verify_ct += 1
                r.correct += acc
                accepted.append(acc)
            params.on_verify_complete(accepted, len(live))
            still = [r for r in live if not r.finished()]
            if len(still) != len(live):  # SGLang filters a batch into a new list
                live = still
        return reqs

    def shutdown(self) -> None:
        self.params.close()
