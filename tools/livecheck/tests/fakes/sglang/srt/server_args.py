"""The stand-in's ServerArgs: the fields the driver writes, as SGLang 0.5.12.post1 names them (held to the
real ServerArgs of 0.5.12.post1 and 0.5.17 by tests/engines/sglang/test_harness_engine_args.py)."""

from __future__ import annotations

import dataclasses

FIELDS = (
    "model_path tokenizer_path dtype attention_backend sampling_backend grammar_backend disable_cuda_graph"
    " cuda_graph_max_bs cuda_graph_bs max_running_requests mem_fraction_static max_total_tokens"
    " chunked_prefill_size log_level random_seed skip_server_warmup disable_overlap_schedule tp_size"
    " speculative_algorithm speculative_num_steps speculative_eagle_topk speculative_num_draft_tokens"
    " speculative_draft_model_path speculative_adaptive sleep_on_idle max_prefill_tokens"
    " piecewise_cuda_graph_max_tokens"
).split()

ServerArgs = dataclasses.make_dataclass(
    "ServerArgs", [(f, object, dataclasses.field(default=None)) for f in FIELDS]
)
