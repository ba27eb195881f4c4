"""A stand-in for ``sglang`` with just the surface scripts/gpu_check.py uses (``Engine``): it lets the CPU
tests run the driver's whole device flow (engine processes, phases, packing). It answers every request with
the bigram chain of the test model and speculative counters of a depth-3 draft, and checks that the driver
handed the adapter a valid policy configuration. It proves nothing about SGLang or the adapter."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__version__ = "0.0.0-fake"


class Engine:
    def __init__(self, **kw: Any) -> None:
        self.kw = kw
        self.meta = json.loads((Path(kw["model_path"]).parent / "meta.json").read_text())
        self.spec = "speculative_algorithm" in kw
        if self.spec:
            from specpolicy_gpucheck import DispatchConfig

            cfg = DispatchConfig.model_validate(json.loads(os.environ["SPECPOLICY_POLICY"]))
            print(f"FAKE specpolicy config ok, candidate steps {cfg.candidate_steps()}", flush=True)

    def generate(
        self, input_ids: list[list[int]], sampling_params: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        pi, pd = self.meta["pi"], self.meta["pi_draft"]
        outs = []
        for ids, sp in zip(input_ids, sampling_params, strict=True):
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
            outs.append({"output_ids": out[:n], "meta_info": meta, "text": ""})
        return outs

    def get_server_info(self) -> dict[str, Any]:
        return {"internal_states": [{"fake": True}]}

    def shutdown(self) -> None:
        pass
