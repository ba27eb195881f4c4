"""Random Llama checkpoints whose greedy output is known in advance, for the live GPU check.

Why: random models have tiny logit margins, so the bf16 rounding of the draft's decode kernels and the
target's verify kernels flips their argmax and speculative output differs from plain output even when the
engine is right. Here every layer writes only a tiny amount into the residual stream (``o_proj`` and
``down_proj`` scaled by ``resid_std``), so the last position's hidden state is essentially the embedding
of the current token, and ``lm_head`` is built so that token v's top logit is ``pi(v)`` by a margin of
about ``alpha``: a bigram chain. Greedy decoding from a prompt ending in token t must give pi(t),
pi(pi(t)), ... for every engine path, every kernel and every mode switch: an exact oracle computed without
the engine.

The draft model follows ``pi_draft``, equal to ``pi`` on a chosen fraction of tokens, so acceptance is
controlled (each draft is accepted with probability ~``agree``) and rejections really happen.

Every matrix is non-zero and full size, so the GPU does the work of a real model of that shape.

The numpy helpers (maps, chains, expected acceptance) need no torch; ``write_checkpoint`` needs torch,
safetensors and (for the tokenizer) tokenizers + transformers, as on the GPU machine.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "ModelShape",
    "TARGET",
    "DRAFT",
    "TINY",
    "FIRST_TOKEN",
    "bigram_map",
    "draft_map",
    "greedy_chain",
    "lossless_count",
    "expected_accept_length",
    "param_shapes",
    "param_count",
    "write_checkpoint",
]

#: Token ids below this are special (unk, bos, eos, pad): the chain never visits them.
FIRST_TOKEN = 4


@dataclass(frozen=True)
class ModelShape:
    """A Llama shape. ``vocab`` is the embedding size; the chain only visits ids in [4, chain_vocab)."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if type(value) is not int or value < 1:
                raise ValueError(f"ModelShape.{name} must be an int >= 1, got {value!r}")
        if self.heads % self.kv_heads:
            raise ValueError(
                f"ModelShape.heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )


#: 2.6 B parameters, 5.2 GB of bf16 weights: a model whose weight reads are a real part of an H200 step.
TARGET = ModelShape(
    hidden=3072, layers=24, intermediate=8192, heads=24, kv_heads=8, head_dim=128, vocab=32000
)
#: The same width with 2 layers (~0.6 GB, a twelfth of the target's layer work).
DRAFT = ModelShape(hidden=3072, layers=2, intermediate=8192, heads=24, kv_heads=8, head_dim=128, vocab=32000)
#: For CPU tests.
TINY = ModelShape(hidden=64, layers=2, intermediate=128, heads=4, kv_heads=2, head_dim=16, vocab=300)


def bigram_map(chain_vocab: int, seed: int) -> np.ndarray:
    """pi: a random permutation of [FIRST_TOKEN, chain_vocab) (identity-free), as an int64 array over all ids.

    Ids outside that range (special tokens, embedding padding) map into it, so any prompt starts a chain.
    """
    if chain_vocab <= FIRST_TOKEN + 1:
        raise ValueError(f"chain_vocab must be > {FIRST_TOKEN + 1}, got {chain_vocab}")
    rng = np.random.default_rng(seed)
    ids = np.arange(FIRST_TOKEN, chain_vocab)
    # A single cycle through all ids (Sattolo's algorithm): every chain visits the whole range, so no prompt
    # falls into a short loop that would make the outputs periodic.
    order = ids.copy()
    for i in range(len(order) - 1, 0, -1):
        j = int(rng.integers(0, i))
        order[i], order[j] = order[j], order[i]
    pi = np.empty(chain_vocab, dtype=np.int64)
    pi[order] = np.roll(order, -1)
    pi[:FIRST_TOKEN] = order[0]
    return pi


def draft_map(pi: np.ndarray, agree: float, seed: int) -> np.ndarray:
    """pi_draft: equal to pi on a random ``agree`` fraction of ids, a different in-range id elsewhere."""
    if not 0.0 <= agree <= 1.0:
        raise ValueError(f"agree must be in [0, 1], got {agree}")
    rng = np.random.default_rng(seed)
    n = len(pi)
    out = pi.copy()
    flip = rng.random(n) >= agree
    flip[:FIRST_TOKEN] = False
    span = n - FIRST_TOKEN
    for v in np.nonzero(flip)[0]:
        # a uniformly chosen id other than pi[v]
        w = FIRST_TOKEN + int(rng.integers(0, span - 1))
        out[v] = w if w < pi[v] else w + 1
    return out


def greedy_chain(pi: np.ndarray, last_token: int, n: int) -> list[int]:
    """The n tokens greedy decoding must produce after a prompt ending in ``last_token``."""
    out = []
    t = int(last_token)
    for _ in range(n):
        t = int(pi[t])
        out.append(t)
    return out


def lossless_count(
    outputs: Sequence[Sequence[int]], prompts: Sequence[Sequence[int]], lengths: Sequence[int], pi: Any
) -> tuple[int, int]:
    """(requests, those whose tokens equal the greedy chain of their length after their prompt's last
    token): how the live checks count lossless requests of a batch, whatever the engine."""
    ok = sum(list(o) == greedy_chain(pi, p[-1], n) for o, p, n in zip(outputs, prompts, lengths, strict=True))
    return len(outputs), ok


def expected_accept_length(pi: np.ndarray, pi_draft: np.ndarray, start: int, n: int, depth: int) -> float:
    """Mean acceptance length (1 + accepted drafts per verify) of chain speculation ``depth`` deep along the
    greedy chain from ``start`` over ``n`` tokens: what the engine must report on this model."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    t, produced, verifies = int(start), 0, 0
    while produced < n:
        verifies += 1
        d = t
        accepted = 0
        for _ in range(depth):
            d_next = int(pi_draft[d])
            if d_next != int(pi[d]):
                break
            accepted += 1
            d = d_next
        step = accepted + 1
        for _ in range(step):
            t = int(pi[t])
        produced += step
    return produced / verifies


def param_shapes(shape: ModelShape) -> dict[str, tuple[int, ...]]:
    """The Hugging Face Llama parameter names and shapes of ``shape`` (untied embeddings)."""
    h, q, kv, f, v = (
        shape.hidden,
        shape.heads * shape.head_dim,
        shape.kv_heads * shape.head_dim,
        shape.intermediate,
        shape.vocab,
    )
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        out[p + "self_attn.q_proj.weight"] = (q, h)
        out[p + "self_attn.k_proj.weight"] = (kv, h)
        out[p + "self_attn.v_proj.weight"] = (kv, h)
        out[p + "self_attn.o_proj.weight"] = (h, q)
        out[p + "mlp.gate_proj.weight"] = (f, h)
        out[p + "mlp.up_proj.weight"] = (f, h)
        out[p + "mlp.down_proj.weight"] = (h, f)
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "post_attention_layernorm.weight"] = (h,)
    out["model.norm.weight"] = (h,)
    out["lm_head.weight"] = (v, h)
    return out


def param_count(shape: ModelShape) -> int:
    return sum(int(np.prod(s)) for s in param_shapes(shape).values())


#: The Llama config entries the target and the EAGLE-3 head (eagle3_model.py) share.
LLAMA_COMMON: dict[str, Any] = {
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 3,
    "torch_dtype": "bfloat16",
}


def hf_config(shape: ModelShape) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "vocab_size": shape.vocab,
        **LLAMA_COMMON,
    }


def state_dict(
    shape: ModelShape,
    pi: np.ndarray,
    *,
    alpha: float = 30.0,
    resid_std: float = 5e-4,
    seed: int = 0,
    device: str = "cpu",
    dtype: Any = None,
) -> dict[str, Any]:
    """Weights whose greedy next token after v is pi[v] (margin ~alpha) for every v < len(pi)."""
    import torch

    dtype = dtype or torch.bfloat16
    g = torch.Generator(device=device).manual_seed(seed)
    h = shape.hidden
    out: dict[str, Any] = {}
    emb = torch.randn(shape.vocab, h, generator=g, device=device, dtype=torch.float32)
    for name, shp in param_shapes(shape).items():
        if name == "model.embed_tokens.weight":
            t = emb
        elif name == "lm_head.weight":
            # RMSNorm (weight 1) maps embedding e_v to u_v = e_v * sqrt(h) / |e_v|; row pi[v] of lm_head is
            # alpha * u_v / h, so logit(pi[v] | v) = alpha and every other logit is alpha * cos(u_w, u_v),
            # about alpha * N(0, 1/h).
            u = emb * (h**0.5) / emb.norm(dim=1, keepdim=True)
            t = torch.randn(shape.vocab, h, generator=g, device=device) * (0.1 * alpha / h)  # unused rows
            src = torch.as_tensor(np.arange(len(pi)), device=device)
            dst = torch.as_tensor(pi, device=device)
            t.index_put_((dst,), torch.zeros(len(pi), h, device=device))
            t.index_add_(0, dst, u[src] * (alpha / h))
        elif name.endswith("norm.weight"):
            t = torch.ones(shp, device=device)
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            t = torch.randn(shp, generator=g, device=device) * resid_std
        else:
            t = torch.randn(shp, generator=g, device=device) * 0.02
        out[name] = t.to(dtype).contiguous()
    return out


def train_tokenizer(out_dir: str) -> int:
    """A small byte-level BPE tokenizer trained locally (no network); returns its vocabulary size."""
    import random

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    words = (
        "the quick brown fox jumps over the lazy dog and runs into the forest where many small animals "
        "live together in peace while the sun shines on the river speculative decoding makes language "
        "models faster by drafting tokens and verifying them in parallel with the target model one two "
        "three four five six seven eight nine ten alpha beta gamma delta epsilon zeta eta theta"
    ).split()
    rnd = random.Random(0)
    corpus = [" ".join(rnd.choice(words) for _ in range(40)) for _ in range(400)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    fast.save_pretrained(out_dir)
    return int(tok.get_vocab_size())


def write_checkpoint(
    out_dir: str,
    shape: ModelShape,
    pi: np.ndarray,
    *,
    seed: int,
    device: str = "cpu",
    alpha: float = 30.0,
    resid_std: float = 5e-4,
    tokenizer_from: str | None = None,
) -> None:
    """Write config, generation config, safetensors weights and a tokenizer (trained, or copied)."""
    import shutil

    from safetensors.torch import save_file

    os.makedirs(out_dir, exist_ok=True)
    if tokenizer_from:
        for f in os.listdir(tokenizer_from):
            if f.startswith(("tokenizer", "special_tokens")):
                shutil.copy(os.path.join(tokenizer_from, f), out_dir)
    else:
        train_tokenizer(out_dir)
    sd = state_dict(shape, pi, alpha=alpha, resid_std=resid_std, seed=seed, device=device)
    save_file(
        {k: v.cpu() for k, v in sd.items()},
        os.path.join(out_dir, "model.safetensors"),
        metadata={"format": "pt"},
    )
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(hf_config(shape), fh, indent=1)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as fh:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3, "do_sample": False}, fh)
