"""The EAGLE-3 test head: its file layout, its closed-form proposal against a re-computation of SGLang's
forward (causal attention with RoPE, MLP, bf16 weights), and that a missing hidden state shows."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from specpolicy_livecheck import bigram_model as bm
from specpolicy_livecheck import eagle3_model as em


def test_capture_layers_follow_sglang_default_and_need_four_layers() -> None:
    assert em.aux_layer_ids(24) == [1, 11, 20]  # SGLang's default capture before layers 2, 12, 21
    assert em.aux_layer_ids(4) == [0, 1, 2]
    with pytest.raises(ValueError, match="4 layers"):
        em.aux_layer_ids(3)


def test_config_and_shapes_agree() -> None:
    cfg = em.hf_config(bm.TARGET, 2000, [1, 11, 20])
    shapes = em.param_shapes(bm.TARGET, 2000)
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert shapes["fc.weight"] == (3072, 3 * 3072)
    assert shapes["lm_head.weight"] == (cfg["draft_vocab_size"], 3072)
    assert shapes["midlayer.self_attn.q_proj.weight"][1] == 2 * cfg["hidden_size"]  # embeds + hidden


_HAVE_TORCH = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "safetensors", "tokenizers"))
needs_torch = pytest.mark.skipif(
    not _HAVE_TORCH, reason="needs torch, transformers, safetensors and tokenizers (CPU is enough)"
)
#: Small, but with a write subspace of 256 dimensions so the designed maps mostly hold.
SHAPE = bm.ModelShape(hidden=512, layers=4, intermediate=128, heads=4, kv_heads=2, head_dim=128, vocab=2048)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("e3")
    n_tok = bm.train_tokenizer(str(d / "tok"))
    pi = bm.bigram_map(min(n_tok, SHAPE.vocab), seed=1)
    pi_d = bm.draft_map(pi, 0.7, seed=2)
    bm.write_checkpoint(str(d / "target"), SHAPE, pi, seed=0, tokenizer_from=str(d / "tok"))
    info = em.write_checkpoint(str(d / "eagle3"), str(d / "target"), pi, pi_d, seed=4)
    return {"dir": d, "pi": pi, "pi_d": pi_d, "info": info, "head": em.load_head(str(d / "eagle3"))}


def _forward(model_dir: Path, tokens: list[int], hidden: Any) -> tuple[Any, Any]:
    """SGLang's LlamaForCausalLMEagle3 forward over one sequence, re-written in torch (fp32 math on the
    stored bf16 weights): logits over the draft vocabulary and the pre-norm output, per position."""
    import torch
    from safetensors.torch import load_file

    cfg = json.loads((model_dir / "config.json").read_text())
    w = {k: v.float() for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    h, d, nh, nkv = (
        cfg["hidden_size"],
        cfg["head_dim"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
    )
    eps = cfg["rms_norm_eps"]

    def rms(x: Any, weight: Any) -> Any:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def rope(x: Any) -> Any:  # neox style, as SGLang's Llama
        pos = torch.arange(x.shape[0], dtype=torch.float32)[:, None]
        inv = cfg["rope_theta"] ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
        ang = pos * inv
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    p = "midlayer."
    emb = w["embed_tokens.weight"][torch.tensor(tokens)]
    hs = torch.as_tensor(np.asarray(hidden), dtype=torch.float32)
    if hs.shape[-1] != h:
        hs = hs @ w["fc.weight"].T
    residual = hs
    x = torch.cat([rms(emb, w[p + "input_layernorm.weight"]), rms(hs, w[p + "hidden_norm.weight"])], dim=-1)
    n = x.shape[0]
    q = rope((x @ w[p + "self_attn.q_proj.weight"].T).view(n, nh, d))
    k = rope((x @ w[p + "self_attn.k_proj.weight"].T).view(n, nkv, d))
    v = (x @ w[p + "self_attn.v_proj.weight"].T).view(n, nkv, d)
    k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / d**0.5
    scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, nh * d)
    residual = residual + attn @ w[p + "self_attn.o_proj.weight"].T
    y = rms(residual, w[p + "post_attention_layernorm.weight"])
    gate, up = y @ w[p + "mlp.gate_proj.weight"].T, y @ w[p + "mlp.up_proj.weight"].T
    residual = residual + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    logits = rms(residual, w["norm.weight"]) @ w["lm_head.weight"].T
    return logits, residual


def _target_aux(target_dir: Path, tokens: list[int], layer_ids: list[int]) -> np.ndarray:
    """What SGLang captures: the residual stream entering layer id + 1, for each id, concatenated (bf16)."""
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(target_dir), dtype=torch.bfloat16).eval()
    with torch.no_grad():
        hs = model(torch.tensor([tokens]), output_hidden_states=True).hidden_states
    return torch.cat([hs[i + 1][0] for i in layer_ids], dim=-1).float().numpy()


@needs_torch
def test_file_has_the_names_shapes_and_config_of_the_layout(built: dict[str, Any]) -> None:
    from safetensors.torch import load_file

    sd = load_file(str(built["dir"] / "eagle3" / "model.safetensors"))
    n = len(built["pi"])
    assert {k: tuple(v.shape) for k, v in sd.items()} == em.param_shapes(SHAPE, n)
    cfg = json.loads((built["dir"] / "eagle3" / "config.json").read_text())
    assert cfg["draft_vocab_size"] == n
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    hot = sd["d2t"].numpy() + np.arange(n)
    assert sorted(hot.tolist()) == list(range(n)) and (hot != np.arange(n)).mean() > 0.9  # a real mapping
    assert sd["t2d"].numpy()[hot].all() and sd["t2d"].numpy().sum() == n


@needs_torch
def test_predicted_proposal_matches_the_forward_on_real_target_states(built: dict[str, Any]) -> None:
    pi, head, info, d = built["pi"], built["head"], built["info"], built["dir"]
    rng = np.random.default_rng(0)
    prompt = rng.integers(bm.FIRST_TOKEN, len(pi), 12).tolist()
    tokens = prompt + bm.greedy_chain(pi, prompt[-1], 40)
    aux = _target_aux(d / "target", tokens, info["layer_ids"])
    ideal = np.stack([em.ideal_aux(head, t) for t in tokens])
    assert np.abs(aux - ideal).max() < 0.05 * np.abs(ideal).max()  # deterministic, essentially the embedding
    # draft extend: position i gets token i + 1 with the target's state at i (EAGLE's shift)
    logits, pre = _forward(d / "eagle3", tokens[1:], aux[:-1])
    got = head.hot[logits.argmax(-1).numpy()]
    want = [em.predict(head, tokens[i + 1], em.ideal_aux(head, tokens[i]))[0] for i in range(len(tokens) - 1)]
    assert got.tolist() == want
    # on the chain, the first proposal is the map computed at build time
    chain = range(len(prompt), len(tokens) - 1)
    assert [int(got[i]) for i in chain] == [info["with_hidden"][tokens[i + 1]] for i in chain]
    # a later draft step: the head's own pre-norm state, attending over the context as well
    tok2 = int(got[-1])
    logits2, _ = _forward(d / "eagle3", tokens[1:] + [tok2], np.concatenate([pre.numpy(), pre[-1:].numpy()]))
    assert int(head.hot[int(logits2[-1].argmax())]) == em.predict(head, tok2, pre[-1].numpy())[0]


@needs_torch
def test_a_missing_hidden_state_changes_the_proposal_and_the_acceptance(built: dict[str, Any]) -> None:
    pi, head, info, d = built["pi"], built["head"], built["info"], built["dir"]
    hidden_set = info["hidden_set"]
    assert len(hidden_set) > 0.2 * (len(pi) - bm.FIRST_TOKEN)  # half of the ~70% agreeing tokens
    w, z = np.array(info["with_hidden"]), np.array(info["no_hidden"])
    changed = np.nonzero(w[bm.FIRST_TOKEN :] != z[bm.FIRST_TOKEN :])[0] + bm.FIRST_TOKEN
    assert len(changed) > 0.5 * len(hidden_set)
    assert np.mean([z[x] == info["decoy"][str(x)] for x in hidden_set]) > 0.8  # the decoy wins without it
    assert np.mean(w[hidden_set] == built["pi_d"][hidden_set]) > 0.7  # the draft's proposal wins with it
    # the forward agrees: same tokens with zero states propose the no-hidden map
    xs = changed[:8].tolist()
    logits, _ = _forward(d / "eagle3", xs, np.zeros((len(xs), 3 * SHAPE.hidden), dtype=np.float32))
    assert head.hot[logits.argmax(-1).numpy()].tolist() == z[xs].tolist()
    # and an always-on engine that never passes the states accepts measurably less
    on = em.expected_accept_length(head, pi, 10, 400, 3)
    off = em.expected_accept_length(head, pi, 10, 400, 3, hidden=False)
    assert 1.0 <= off < on - 0.2 and on <= 4.0


@needs_torch
def test_root_accepts_follow_the_forward_draft_by_draft(built: dict[str, Any]) -> None:
    """Each root's table entry against SGLang's forward re-computed step by step: the first draft from the
    root with the real target's state of the token before it (or a zero state), then from the head's own
    pre-norm state, until a proposal leaves the chain."""
    pi, head, info, d = built["pi"], built["head"], built["info"], built["dir"]
    rng = np.random.default_rng(1)
    prompt = rng.integers(bm.FIRST_TOKEN, len(pi), 12).tolist()
    tokens = prompt + bm.greedy_chain(pi, prompt[-1], 40)
    aux = _target_aux(d / "target", tokens, info["layer_ids"])
    deepest = em.MAX_ACCEPT_DEPTH
    seen: dict[bool, list[int]] = {True: [], False: []}
    for i in range(len(prompt) - 1, len(tokens) - deepest - 2):
        root, chain = tokens[i + 1], tokens[i + 2 :]
        for hidden, table in ((True, info["accept"]), (False, info["accept_no_hidden"])):
            state = aux[i : i + 1] if hidden else np.zeros_like(aux[i : i + 1])
            tok, n = root, 0
            while n < deepest:
                logits, pre = _forward(d / "eagle3", [tok], state)
                tok = int(head.hot[int(logits[-1].argmax())])
                if tok != chain[n]:
                    break
                n, state = n + 1, pre[-1:].numpy()
            assert table[root] == n, (root, hidden)
            seen[hidden].append(n)
    assert sum(seen[True]) > sum(seen[False])  # the target's state is worth accepted drafts
    assert max(seen[True]) >= 2  # chains longer than one draft occur
