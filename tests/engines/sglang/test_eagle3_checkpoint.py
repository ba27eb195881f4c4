"""The EAGLE-3 test head (livecheck's ``eagle3_model``) against SGLang 0.5.12.post1's own draft model class.

SGLang's ``load_weights`` skips names it does not know without a word, so a wrongly named tensor would leave
a parameter at its random initial value and the live check would fail for an unclear reason. Here the class
is built on CPU from the head's config.json, every parameter is filled with NaN, the real ``load_weights``
reads the file, and each parameter must then equal what the file holds (stacked q/k/v and gate/up as SGLang
stacks them), with ``hot_token_id`` equal to the draft vocabulary's target ids.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import requires_version

ROOT = Path(__file__).resolve().parents[3]
SHAPE_KW = dict(hidden=64, layers=4, intermediate=128, heads=4, kv_heads=2, head_dim=16, vocab=300)


@pytest.fixture(scope="module")
def sglang_cpu() -> types.ModuleType:
    """SGLang's llama_eagle3 module, importable and constructible on a CPU-only machine (a one-rank gloo
    group, default server args without their GPU probe, no vLLM rotary kernel)."""
    import torch  # noqa: F401
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel, parallel_state
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    sa = ServerArgs.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None
        setattr(sa, f.name, value)
    sa.device = "cpu"
    set_global_server_args_for_scheduler(sa)
    if not parallel_state.model_parallel_is_initialized():
        init_file = tempfile.mktemp()
        init_distributed_environment(
            world_size=1, rank=0, distributed_init_method=f"file://{init_file}", local_rank=0, backend="gloo"
        )
        initialize_model_parallel(1)
    import sglang.srt.models.llama_eagle3 as e3

    return e3


@requires_version("0.5.12.post1")
def test_sglang_loads_every_parameter_of_the_head(tmp_path: Path, sglang_cpu: types.ModuleType) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig

    sys.path.insert(0, str(ROOT / "tools" / "livecheck" / "src"))  # not installed in the engine venvs
    from specpolicy_livecheck import bigram_model as bm
    from specpolicy_livecheck import eagle3_model as em

    shape = bm.ModelShape(**SHAPE_KW)
    bm.train_tokenizer(str(tmp_path / "tok"))
    pi = bm.bigram_map(shape.vocab, seed=1)
    bm.write_checkpoint(str(tmp_path / "target"), shape, pi, seed=0, tokenizer_from=str(tmp_path / "tok"))
    em.write_checkpoint(str(tmp_path / "e3"), str(tmp_path / "target"), pi, bm.draft_map(pi, 0.7, 2), seed=4)

    cfg = LlamaConfig.from_pretrained(str(tmp_path / "e3"))
    stub = types.ModuleType("vllm._custom_ops")
    stub.rotary_embedding = None  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as mp:  # the rotary layer imports a vLLM kernel off CUDA; unused here
        mp.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
        mp.setitem(sys.modules, "vllm._custom_ops", stub)
        model = sglang_cpu.LlamaForCausalLMEagle3(cfg)
    assert model.model.num_aux_hidden_states == 3 and not model.load_lm_head_from_target
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    sd = load_file(str(tmp_path / "e3" / "model.safetensors"))
    model.load_weights(iter(sd.items()))

    params = dict(model.named_parameters())
    m = "midlayer."
    want = {
        "model.embed_tokens.weight": sd["embed_tokens.weight"],
        "model.fc.weight": sd["fc.weight"],
        "model.layers.0.self_attn.qkv_proj.weight": torch.cat(
            [sd[m + f"self_attn.{x}_proj.weight"] for x in "qkv"]
        ),
        "model.layers.0.self_attn.o_proj.weight": sd[m + "self_attn.o_proj.weight"],
        "model.layers.0.mlp.gate_up_proj.weight": torch.cat(
            [sd[m + "mlp.gate_proj.weight"], sd[m + "mlp.up_proj.weight"]]
        ),
        "model.layers.0.mlp.down_proj.weight": sd[m + "mlp.down_proj.weight"],
        "model.layers.0.input_layernorm.weight": sd[m + "input_layernorm.weight"],
        "model.layers.0.post_attention_layernorm.weight": sd[m + "post_attention_layernorm.weight"],
        "model.layers.0.hidden_norm.weight": sd[m + "hidden_norm.weight"],
        "model.norm.weight": sd["norm.weight"],
        "lm_head.weight": sd["lm_head.weight"],
    }
    assert set(params) == set(want)  # every parameter of SGLang's class has a source in the file
    for name, tensor in want.items():
        got = params[name].detach()[: tensor.shape[0]]  # embeddings are padded to a multiple of 64 rows
        assert torch.equal(got.to(tensor.dtype), tensor), name
    hot = sd["d2t"].numpy() + np.arange(len(sd["d2t"]))
    assert model.get_hot_token_id().tolist() == hot.tolist()
