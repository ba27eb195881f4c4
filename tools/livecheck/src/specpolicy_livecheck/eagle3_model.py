"""An EAGLE-3 draft head for the bigram target with a greedy proposal known in advance (live GPU check).

Why: SGLang's EAGLE-3 drafter (``LlamaForCausalLMEagle3``, one decoder layer over the concatenation of the
token's embedding and ``fc`` of the target's auxiliary hidden states) needs the target's hidden states for
every token, and an engine that skips the hidden-state catch-up after an off step still produces lossless
output: only the draft's proposals, and so the acceptance counts, change. A trained head would make those
counts unpredictable; this head is built so that they are computed without the engine, and so that a
missing or stale hidden state changes them.

Construction (``h`` hidden, ``D`` = kv_heads * head_dim, ``Q`` an ``h x D`` matrix of orthonormal columns
spanning the subspace ``T`` the attention can write to; ``u_x`` the RMS-normalised target embedding of
token x, shared with the target as SGLang does for EAGLE-3):

- attention attends to its own position: q and k read only the embedding half of the layer's input, with
  the same matrix, scaled so that the self score (invariant under RoPE) exceeds any other position's by
  tens of logits; the value of the embedding half is written through ``o_proj`` as ``t_x = Q R u_x`` (RMS
  1), so the token enters the residual stream, and the draft KV cache contents do not matter;
- the hidden-state input ``r0`` is ``fc(aux)`` for the target's states (``fc = (1 + eta) Q R_f``, RMS about
  ``1 + eta``, inside ``T``), or the draft's own previous pre-norm output in later draft steps (SGLang skips
  ``fc`` when the width is already ``h``); the value of the hidden half writes ``-Q Q^T hidden_norm(r0)``,
  which cancels ``r0`` up to ``r0 (1 - 1/rms(r0))``: after ``fc`` that leaves ``eta f_p`` (a small term, the
  direction of the previous token p), after a draft step a few percent of the previous write, so the
  residual stream does not pile up the tokens of earlier steps;
- ``lm_head`` (over a shuffled draft vocabulary, mapped back by ``d2t``) gives token x's proposal
  ``pi_draft(x)`` a logit of ``alpha``; on a set S of tokens whose draft agrees with the target, a decoy
  gets ``alpha + eta * bonus / 2`` and the hidden term gives ``pi_draft(x)`` about ``eta * bonus`` more when
  the hidden state is the target's for x's chain predecessor. The MLP writes only a tiny residual, as in the
  bigram model.

So with the target's hidden state the first proposal of a verify is ``pi_draft`` (later draft steps see the
head's own state, and propose the decoy on S), and on S it is the decoy, which the target rejects, when the
hidden state is missing (zero) or belongs to a different position. Random directions in ``D`` dimensions
overlap by about ``1/sqrt(D)``, so a few per cent of tokens deviate from the design: the maps are computed,
not assumed. ``predict`` is the closed form of this construction (attention exactly on itself, the
MLP left out) in numpy; the maps it gives for every token are what the live check compares against.

``param_shapes``, ``hf_config`` and the numpy parts need no torch; ``write_checkpoint`` needs torch and
safetensors, and reads the target's embedding from the target checkpoint written by bigram_model.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from specpolicy_livecheck.bigram_model import FIRST_TOKEN, LLAMA_COMMON, ModelShape

__all__ = [
    "Eagle3Head",
    "aux_layer_ids",
    "hf_config",
    "param_shapes",
    "write_checkpoint",
    "load_head",
    "predict",
    "ideal_aux",
    "proposal_maps",
    "draft_step",
    "root_accepts",
    "MAX_ACCEPT_DEPTH",
    "expected_accept_length",
]

EPS = 1e-5  # rms_norm_eps of the head's config (and the bigram target's)


def aux_layer_ids(target_layers: int) -> list[int]:
    """``eagle_aux_hidden_state_layer_ids`` for a target depth: SGLang's default capture points written out.

    SGLang captures, for id i, the residual stream entering layer i + 1 (the output of layer i), in the
    model's dtype, and concatenates the three along the last axis; without ids it captures before layers
    2, L // 2 and L - 3. Ids must be distinct and at most L - 2 (the last layer's output is never captured),
    so a target needs 4 layers at least.
    """
    if target_layers < 4:
        raise ValueError(
            f"an EAGLE-3 target needs >= 4 layers for 3 distinct capture points, got {target_layers}"
        )
    ids = [1, target_layers // 2 - 1, target_layers - 4]
    return ids if len(set(ids)) == 3 else [0, 1, 2]


def _check_shape(shape: ModelShape) -> None:
    if shape.kv_heads * shape.head_dim > shape.hidden:
        raise ValueError(
            "the construction needs kv_heads * head_dim <= hidden (the attention's write subspace)"
        )


def param_shapes(shape: ModelShape, draft_vocab: int, n_aux: int = 3) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of the checkpoint, in the layout of published EAGLE-3 heads (``midlayer.``
    prefix, no ``model.``), which SGLang's ``load_weights`` maps onto ``model.layers.0`` and ``model.*``."""
    h, q, kv, f = (
        shape.hidden,
        shape.heads * shape.head_dim,
        shape.kv_heads * shape.head_dim,
        shape.intermediate,
    )
    p = "midlayer."
    return {
        "embed_tokens.weight": (shape.vocab, h),
        "fc.weight": (h, n_aux * h),
        p + "hidden_norm.weight": (h,),
        p + "input_layernorm.weight": (h,),
        p + "self_attn.q_proj.weight": (q, 2 * h),
        p + "self_attn.k_proj.weight": (kv, 2 * h),
        p + "self_attn.v_proj.weight": (kv, 2 * h),
        p + "self_attn.o_proj.weight": (h, q),
        p + "post_attention_layernorm.weight": (h,),
        p + "mlp.gate_proj.weight": (f, h),
        p + "mlp.up_proj.weight": (f, h),
        p + "mlp.down_proj.weight": (h, f),
        "norm.weight": (h,),
        "lm_head.weight": (draft_vocab, h),
        "d2t": (draft_vocab,),
        "t2d": (shape.vocab,),
    }


def hf_config(shape: ModelShape, draft_vocab: int, layer_ids: list[int]) -> dict[str, Any]:
    """The config SGLang reads: the architecture picks ``LlamaForCausalLMEagle3``; ``draft_vocab_size`` set
    keeps the head's own ``lm_head`` (unset, SGLang would take the target's); ``eagle_config`` sets the
    target's capture layers and, through their count, the width of ``fc``."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": 1,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "vocab_size": shape.vocab,
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": shape.hidden,
        **LLAMA_COMMON,
        "rms_norm_eps": EPS,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(layer_ids), "use_aux_hidden_state": True},
    }


@dataclass(frozen=True)
class Eagle3Head:
    """The arrays ``predict`` needs, in float32 (from the bf16 weights as stored)."""

    embed: np.ndarray  # (vocab, h): the target's embedding
    fc: np.ndarray  # (h, n_aux * h)
    v_proj: np.ndarray  # (D, 2h)
    o_proj: np.ndarray  # (h, heads * head_dim)
    lm_head: np.ndarray  # (draft_vocab, h)
    hot: np.ndarray  # (draft_vocab,) int64: target id of each draft id (d2t + arange)
    group: int  # query heads per kv head
    head_dim: int


def _rms_norm(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    out: np.ndarray = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS)
    return out


def _attn_self(head: Eagle3Head, v: np.ndarray) -> np.ndarray:
    """``o_proj`` of an attention that looks only at its own position: every query head gets its kv head's
    value."""
    d = head.head_dim
    vh = v.reshape(*v.shape[:-1], -1, d)
    out: np.ndarray = np.repeat(vh, head.group, axis=-2).reshape(*v.shape[:-1], -1) @ head.o_proj.T
    return out


def draft_step(head: Eagle3Head, tokens: np.ndarray, hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One draft forward over rows of (token, hidden-state input): logits over the draft vocabulary and the
    pre-norm state each row passes to the next draft step. The input is the target's concatenated
    auxiliary states (width n_aux * h, through ``fc``) or the head's own (width h), as SGLang dispatches on
    the width. Closed form of the construction: attention on its own position, MLP left out."""
    h = head.embed.shape[1]
    hidden = np.asarray(hidden, dtype=np.float32)
    r0 = hidden @ head.fc.T if hidden.shape[-1] != h else hidden
    u = _rms_norm(head.embed[np.asarray(tokens, dtype=np.int64)])
    v = np.concatenate([u, _rms_norm(r0)], axis=-1) @ head.v_proj.T
    r2 = r0 + _attn_self(head, v)
    return _rms_norm(r2) @ head.lm_head.T, r2


def predict(head: Eagle3Head, token: int, hidden: np.ndarray) -> tuple[int, float, np.ndarray]:
    """The head's greedy proposal (a target token id), its logit margin over the runner-up, and the pre-norm
    hidden state it passes to the next draft step, for ``token`` and one hidden-state input
    (``draft_step``)."""
    logits, r2 = draft_step(head, np.asarray([int(token)]), np.asarray(hidden, dtype=np.float32)[None])
    top2 = np.argsort(logits[0])[-2:]
    return int(head.hot[top2[1]]), float(logits[0, top2[1]] - logits[0, top2[0]]), r2[0]


def ideal_aux(head: Eagle3Head, token: int, n_aux: int = 3) -> np.ndarray:
    """The target's auxiliary states at a position holding ``token``: its embedding at every capture point
    (the bigram target's layers add only ~1e-3 of it, see bigram_model.py)."""
    return np.tile(head.embed[int(token)], n_aux)


def proposal_maps(head: Eagle3Head, pi: np.ndarray) -> dict[str, list[Any]]:
    """Per token x of the chain range: the first proposal with the target's state of x's chain predecessor
    (``with_hidden``), with a zero hidden state (``no_hidden``), and the margins. Special ids keep -1."""
    n = len(pi)
    pred = np.full(n, -1, dtype=np.int64)
    pred[pi[FIRST_TOKEN:]] = np.arange(FIRST_TOKEN, n)  # pi is one cycle over the chain range
    zero = np.zeros(head.fc.shape[1], dtype=np.float32)
    out: dict[str, list[Any]] = {
        "with_hidden": [-1] * n,
        "no_hidden": [-1] * n,
        "margin": [0.0] * n,
        "margin_no_hidden": [0.0] * n,
    }
    for x in range(FIRST_TOKEN, n):
        a, ma, _ = predict(head, x, ideal_aux(head, int(pred[x])))
        b, mb, _ = predict(head, x, zero)
        out["with_hidden"][x], out["no_hidden"][x] = a, b
        out["margin"][x], out["margin_no_hidden"][x] = round(ma, 3), round(mb, 3)
    return out


#: Deepest chain ``root_accepts`` follows (the live check launches 3 and 4 steps).
MAX_ACCEPT_DEPTH = 8


def root_accepts(
    head: Eagle3Head, pi: np.ndarray, max_depth: int = MAX_ACCEPT_DEPTH, *, hidden: bool = True
) -> np.ndarray:
    """Per root token b: the drafts a topk-1 verify rooted at b accepts, drafting up to ``max_depth`` deep
    (a verify ``d`` deep accepts the minimum of that and d). The first step drafts from b with the target's
    state of b's chain predecessor, the token before b in greedy output (``hidden=False``: a zero state,
    what a drafter that never got the target's hidden states sees); later steps from the head's own state,
    and the chain stops at the first proposal the target's chain rejects. Special ids get 0."""
    if max_depth < 1:
        raise ValueError(f"max_depth must be >= 1, got {max_depth}")
    pi = np.asarray(pi, dtype=np.int64)
    n = len(pi)
    roots = np.arange(FIRST_TOKEN, n)
    pred = np.empty(n, dtype=np.int64)
    pred[pi[FIRST_TOKEN:]] = roots  # pi is one cycle over the chain range
    n_aux = head.fc.shape[1] // head.embed.shape[1]
    state = np.tile(head.embed[pred[roots]], (1, n_aux))
    if not hidden:
        state = np.zeros_like(state)
    tok, want = roots.copy(), roots.copy()
    alive = np.ones(len(roots), dtype=bool)
    accepted = np.zeros(len(roots), dtype=np.int64)
    for _ in range(max_depth):
        logits, state = draft_step(head, tok, state)
        tok = head.hot[np.argmax(logits, axis=-1)]
        want = pi[want]
        alive &= tok == want
        accepted += alive
        if not alive.any():
            break
    out = np.zeros(n, dtype=np.int64)
    out[roots] = accepted
    return out


def expected_accept_length(
    head: Eagle3Head, pi: np.ndarray, last_prompt_token: int, n: int, depth: int, *, hidden: bool = True
) -> float:
    """Mean tokens per verify (1 + accepted drafts) of an always-on engine drafting a chain ``depth`` deep
    (topk 1) over ``n`` output tokens after a prompt ending in ``last_prompt_token``: every verify rooted at
    the last emitted token accepts what ``root_accepts`` gives it."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    table = root_accepts(head, pi, depth, hidden=hidden)
    b = int(pi[last_prompt_token])  # the prefill emits b
    produced, verifies = 1, 0
    while produced < n:
        verifies += 1
        accepted = int(table[b])
        for _ in range(accepted + 1):
            b = int(pi[b])
        produced += accepted + 1
    return (produced - 1) / verifies


def _weights(
    shape: ModelShape,
    embed: Any,
    pi: np.ndarray,
    pi_draft: np.ndarray,
    *,
    layer_ids: list[int],
    seed: int,
    alpha: float,
    bonus: float,
    eta: float,
    hidden_frac: float,
    self_score: float,
    resid_std: float,
) -> tuple[dict[str, Any], dict[str, Any]]:
    import torch

    h, d, kvh, G = shape.hidden, shape.head_dim, shape.kv_heads, shape.heads // shape.kv_heads
    D, n_aux, n = kvh * d, len(layer_ids), len(pi)
    rng = np.random.default_rng(seed)
    f32 = np.float32

    def bf16(a: np.ndarray) -> Any:
        return torch.as_tensor(np.ascontiguousarray(a, dtype=f32)).to(torch.bfloat16)

    def back(t: Any) -> np.ndarray:
        return np.asarray(t.float().numpy())

    Q = np.linalg.qr(rng.standard_normal((h, D)))[0].astype(f32)  # orthonormal columns: the write subspace T
    s = (self_score / (d**0.5 * h)) ** 0.5
    A = rng.standard_normal((D, h)).astype(f32) * s
    zeros = np.zeros((D, h), dtype=f32)
    k_proj = np.concatenate([A, zeros], axis=1)
    q_proj = np.concatenate(
        [
            np.repeat(A.reshape(kvh, d, h), G, axis=0).reshape(-1, h),
            np.zeros((shape.heads * d, h), dtype=f32),
        ],
        axis=1,
    )
    Rv = rng.standard_normal((D, h)).astype(f32) / h**0.5
    v_proj = np.concatenate([Rv * (h / D) ** 0.5, -Q.T], axis=1)
    o_proj = np.repeat(Q.reshape(h, kvh, d), G, axis=1).reshape(h, -1) / G
    Rf = rng.standard_normal((D, n_aux * h)).astype(f32) / (n_aux * D) ** 0.5
    fc = (1.0 + eta) * (Q @ Rf)

    sd: dict[str, Any] = {
        "embed_tokens.weight": embed.to(torch.bfloat16).contiguous(),
        "fc.weight": bf16(fc),
        "midlayer.self_attn.q_proj.weight": bf16(q_proj),
        "midlayer.self_attn.k_proj.weight": bf16(k_proj),
        "midlayer.self_attn.v_proj.weight": bf16(v_proj),
        "midlayer.self_attn.o_proj.weight": bf16(o_proj),
        "midlayer.mlp.gate_proj.weight": bf16(rng.standard_normal((shape.intermediate, h)) * 0.02),
        "midlayer.mlp.up_proj.weight": bf16(rng.standard_normal((shape.intermediate, h)) * 0.02),
        "midlayer.mlp.down_proj.weight": bf16(rng.standard_normal((h, shape.intermediate)) * resid_std),
    }
    for name in (
        "midlayer.hidden_norm",
        "midlayer.input_layernorm",
        "midlayer.post_attention_layernorm",
        "norm",
    ):
        sd[name + ".weight"] = torch.ones(h, dtype=torch.bfloat16)

    # The draft vocabulary: every id of the chain range and the special ids, in a shuffled order, so an engine
    # that ignored d2t would propose wrong ids.
    hot = rng.permutation(n).astype(np.int64)
    draft_id = np.empty(n, dtype=np.int64)
    draft_id[hot] = np.arange(n)
    E = back(sd["embed_tokens.weight"])
    head = Eagle3Head(
        E,
        back(sd["fc.weight"]),
        back(sd["midlayer.self_attn.v_proj.weight"]),
        back(sd["midlayer.self_attn.o_proj.weight"]),
        np.zeros((n, h), dtype=f32),
        hot,
        G,
        d,
    )
    t_hat = _rms_norm(_attn_self(head, _rms_norm(E[:n]) @ head.v_proj[:, :h].T))
    lm = np.zeros((n, h), dtype=np.float64)
    np.add.at(lm, draft_id[pi_draft[:n]], t_hat * (alpha / h))
    agree = np.nonzero(pi_draft[:n] == pi[:n])[0]
    agree = agree[agree >= FIRST_TOKEN]
    in_s = agree[rng.random(len(agree)) < hidden_frac]
    span = n - FIRST_TOKEN
    decoy = {}
    for x in in_s.tolist():
        while True:  # an id other than pi(x) (so the target rejects it)
            c = FIRST_TOKEN + int(rng.integers(0, span))
            if c != pi[x]:
                break
        decoy[x] = c
        lm[draft_id[c]] += t_hat[x] * ((alpha + bonus * eta / 2) / h)
    pred = np.empty(n, dtype=np.int64)
    pred[pi[FIRST_TOKEN:]] = np.arange(FIRST_TOKEN, n)
    for x in in_s.tolist():
        p = int(pred[x])
        f = head.fc @ ideal_aux(head, p, n_aux)
        lm[draft_id[pi_draft[x]]] += _rms_norm(f) * (bonus / h)
    sd["lm_head.weight"] = bf16(lm)
    sd["d2t"] = torch.as_tensor(hot - np.arange(n), dtype=torch.int64)
    t2d = np.zeros(shape.vocab, dtype=bool)
    t2d[hot] = True
    sd["t2d"] = torch.as_tensor(t2d)
    info = {
        "hidden_set": sorted(int(x) for x in in_s),
        "decoy": {str(k): v for k, v in sorted(decoy.items())},
    }
    return sd, info


def write_checkpoint(
    out_dir: str,
    target_dir: str,
    pi: np.ndarray,
    pi_draft: np.ndarray,
    *,
    seed: int,
    alpha: float = 30.0,
    bonus: float = 40.0,
    eta: float = 0.25,
    hidden_frac: float = 0.5,
    self_score: float = 150.0,
    resid_std: float = 5e-4,
) -> dict[str, Any]:
    """Write the head for the bigram target in ``target_dir`` (config.json, model.safetensors, tokenizer
    files); return what the live check needs (capture layers, the hidden-sensitive set, the proposal maps,
    and per root token the drafts a topk-1 verify accepts with the target's hidden state, ``accept``, and
    with none, ``accept_no_hidden``, up to MAX_ACCEPT_DEPTH deep)."""
    import shutil

    from safetensors import safe_open
    from safetensors.torch import save_file

    with open(os.path.join(target_dir, "config.json")) as fh:
        tcfg = json.load(fh)
    shape = ModelShape(
        hidden=tcfg["hidden_size"],
        layers=tcfg["num_hidden_layers"],
        intermediate=tcfg["intermediate_size"],
        heads=tcfg["num_attention_heads"],
        kv_heads=tcfg["num_key_value_heads"],
        head_dim=tcfg["head_dim"],
        vocab=tcfg["vocab_size"],
    )
    _check_shape(shape)
    layer_ids = aux_layer_ids(shape.layers)
    with safe_open(os.path.join(target_dir, "model.safetensors"), framework="pt") as f:
        embed = f.get_tensor("model.embed_tokens.weight")
    sd, info = _weights(
        shape,
        embed,
        np.asarray(pi),
        np.asarray(pi_draft),
        layer_ids=layer_ids,
        seed=seed,
        alpha=alpha,
        bonus=bonus,
        eta=eta,
        hidden_frac=hidden_frac,
        self_score=self_score,
        resid_std=resid_std,
    )
    os.makedirs(out_dir, exist_ok=True)
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(hf_config(shape, len(pi), layer_ids), fh, indent=1)
    for name in os.listdir(target_dir):
        if name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(os.path.join(target_dir, name), out_dir)
    head = load_head(out_dir)
    return {
        "layer_ids": layer_ids,
        "draft_vocab": len(pi),
        "alpha": alpha,
        "bonus": bonus,
        "eta": eta,
        **info,
        **proposal_maps(head, np.asarray(pi)),
        "accept": root_accepts(head, np.asarray(pi)).tolist(),
        "accept_no_hidden": root_accepts(head, np.asarray(pi), hidden=False).tolist(),
    }


def load_head(model_dir: str) -> Eagle3Head:
    """The arrays of a written head, for ``predict``."""
    from safetensors import safe_open

    with open(os.path.join(model_dir, "config.json")) as fh:
        cfg = json.load(fh)

    t: dict[str, np.ndarray] = {}
    with safe_open(os.path.join(model_dir, "model.safetensors"), framework="pt") as f:
        for k in (
            "embed_tokens.weight",
            "fc.weight",
            "midlayer.self_attn.v_proj.weight",
            "midlayer.self_attn.o_proj.weight",
            "lm_head.weight",
            "d2t",
        ):
            t[k] = f.get_tensor(k).float().numpy() if k != "d2t" else f.get_tensor(k).numpy()
    d2t = t["d2t"].astype(np.int64)
    return Eagle3Head(
        embed=t["embed_tokens.weight"],
        fc=t["fc.weight"],
        v_proj=t["midlayer.self_attn.v_proj.weight"],
        o_proj=t["midlayer.self_attn.o_proj.weight"],
        lm_head=t["lm_head.weight"],
        hot=d2t + np.arange(len(d2t)),
        group=cfg["num_attention_heads"] // cfg["num_key_value_heads"],
        head_dim=cfg["head_dim"],
    )
