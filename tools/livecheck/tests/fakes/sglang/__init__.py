"""A stand-in for ``sglang`` with just the surface sglang_check.py and ab_static.py use (``Engine``:
``generate``, and ``async_generate`` streaming on ``Engine.loop``): it lets the CPU tests run the driver's
whole device flow (engine processes, phases, ramps, packing) and a paired run's engines. It answers every
request with the bigram chain of the test model. Under the live check's test dispatcher (and SGLang's own
speculation) its speculative counters are a depth-3 draft's, and it checks that the driver handed the
adapter a valid policy configuration; under a plain specpolicy policy each step's depth comes from
specpolicy's own runtime and SGLang adapter bridge (``_stepper``: per-request hints, the control file, the
trace). It proves nothing about SGLang or the adapter."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

__version__ = "0.0.0-fake"


class Engine:
    def __init__(self, **kw: Any) -> None:
        self.kw = kw
        self.meta = json.loads((Path(kw["model_path"]).parent / "meta.json").read_text())
        self.spec = "speculative_algorithm" in kw
        self.stepper: Any = None
        policy = json.loads(os.environ.get("SPECPOLICY_POLICY") or "null")
        if self.spec and isinstance(policy, dict) and policy.get("name") != "gpucheck_dispatch":
            from ._stepper import Stepper

            launch = int(kw["speculative_num_steps"])
            self.stepper = Stepper(launch, self.meta["pi"], self.meta["pi_draft"])
        elif self.spec and policy is not None:
            from specpolicy_gpucheck import DispatchConfig

            cfg = DispatchConfig.model_validate(policy)
            print(f"FAKE specpolicy config ok, candidate steps {cfg.candidate_steps()}", flush=True)
        self.loop = asyncio.new_event_loop()

    def generate(
        self, input_ids: list[list[int]], sampling_params: list[dict[str, Any]] | dict[str, Any]
    ) -> list[dict[str, Any]]:
        """As SGLang's: one sampling-parameter dict for every request, or one per request."""
        sps = [sampling_params] * len(input_ids) if isinstance(sampling_params, dict) else sampling_params
        if self.stepper is not None:
            return [self._answer(r) for r in self.stepper.generate(input_ids, sps)]
        return [self._one(ids, sp) for ids, sp in zip(input_ids, sps, strict=True)]

    @staticmethod
    def _answer(r: Any) -> dict[str, Any]:
        meta = {
            "completion_tokens": len(r.out),
            "e2e_latency": 0.01,
            "spec_verify_ct": r.verify_ct,
            "spec_num_correct_drafts": r.correct,
        }
        return {"output_ids": r.out, "meta_info": meta, "text": ""}

    async def async_generate(
        self, input_ids: list[int], sampling_params: dict[str, Any], stream: bool = False
    ) -> AsyncIterator[dict[str, Any]]:
        """Streams the finished output in cumulative chunks of 4 tokens, as SGLang does by default."""
        assert stream, "the check's ramp streams"
        out = self._one(input_ids, sampling_params)

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            ids = out["output_ids"]
            for end in range(4, len(ids) + 4, 4):
                await asyncio.sleep(0.001)
                meta = {**out["meta_info"], "completion_tokens": min(end, len(ids))}
                yield {"output_ids": ids[:end], "meta_info": meta, "text": ""}

        return chunks()

    def _one(self, ids: list[int], sp: dict[str, Any]) -> dict[str, Any]:
        pi, pd = self.meta["pi"], self.meta["pi_draft"]
        n = sp["max_new_tokens"]
        out = [pi[ids[-1]]]
        verifies = correct = 0
        hist = [0, 0, 0, 0]
        while len(out) < n:
            acc, d = 0, out[-1]
            while acc < 3 and pd[d] == pi[d]:
                acc, d = acc + 1, pd[d]
            for _ in range(acc + 1):
                out.append(pi[out[-1]])
            verifies, correct = verifies + 1, correct + acc
            hist[acc] += 1
        meta: dict[str, Any] = {"completion_tokens": n, "e2e_latency": 0.01}
        if self.spec:
            meta.update(
                spec_verify_ct=verifies,
                spec_num_correct_drafts=correct,
                spec_correct_drafts_histogram=hist,
            )
        return {"output_ids": out[:n], "meta_info": meta, "text": ""}

    def get_server_info(self) -> dict[str, Any]:
        return {"internal_states": [{"fake": True}]}

    def shutdown(self) -> None:
        if self.stepper is not None:
            self.stepper.shutdown()
