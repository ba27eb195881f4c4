"""The bigram test model: its maps, its oracle, and (where torch is installed) the checkpoint it writes."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from specpolicy_livecheck import bigram_model as bm


@given(n=st.integers(6, 400), seed=st.integers(0, 2**31))
@settings(max_examples=60, deadline=None)
def test_bigram_map_is_one_cycle_over_the_chain_range(n: int, seed: int) -> None:
    pi = bm.bigram_map(n, seed)
    assert pi.shape == (n,)
    assert set(pi[bm.FIRST_TOKEN :].tolist()) == set(range(bm.FIRST_TOKEN, n))  # a permutation of the range
    start = bm.FIRST_TOKEN
    seen = [start]
    t = int(pi[start])
    while t != start:
        seen.append(t)
        t = int(pi[t])
        assert len(seen) <= n
    assert len(seen) == n - bm.FIRST_TOKEN  # one cycle: no prompt lands in a short loop
    for special in range(bm.FIRST_TOKEN):
        assert bm.FIRST_TOKEN <= pi[special] < n  # special ids lead into the chain, never to themselves


@given(seed=st.integers(0, 2**31), agree=st.floats(0.0, 1.0))
@settings(max_examples=40, deadline=None)
def test_draft_map_agrees_on_about_the_requested_fraction(seed: int, agree: float) -> None:
    n = 2000
    pi = bm.bigram_map(n, 5)
    d = bm.draft_map(pi, agree, seed)
    body = slice(bm.FIRST_TOKEN, n)
    frac = float(np.mean(d[body] == pi[body]))
    sd = (agree * (1 - agree) / (n - bm.FIRST_TOKEN)) ** 0.5
    assert abs(frac - agree) <= 5 * sd + 2 / (
        n - bm.FIRST_TOKEN
    )  # binomial spread, plus one flip at the extremes
    assert d[body].min() >= bm.FIRST_TOKEN and d[body].max() < n


def test_draft_map_rejects_out_of_range_agreement() -> None:
    with pytest.raises(ValueError, match="agree"):
        bm.draft_map(bm.bigram_map(10, 0), 1.5, 0)


def test_greedy_chain_follows_the_map_by_hand() -> None:
    pi = np.array([4, 4, 4, 4, 6, 7, 5, 4])  # 4 -> 6 -> 5 -> 7 -> 4
    assert bm.greedy_chain(pi, 4, 5) == [6, 5, 7, 4, 6]
    assert bm.greedy_chain(pi, 1, 2) == [4, 6]


def test_expected_accept_length_at_the_extremes() -> None:
    pi = bm.bigram_map(300, 3)
    # a draft identical to the target: every verify of depth k emits k+1 tokens (the last one may be cut)
    assert bm.expected_accept_length(pi, pi, 10, 400, 3) == pytest.approx(4.0)
    never = pi.copy()
    never[bm.FIRST_TOKEN :] = np.where(pi[bm.FIRST_TOKEN :] == 10, 11, 10)
    assert bm.expected_accept_length(pi, never, 10, 400, 3) == pytest.approx(1.0)


@given(agree=st.floats(0.0, 1.0), depth=st.integers(1, 6))
@settings(max_examples=30, deadline=None)
def test_expected_accept_length_bounds(agree: float, depth: int) -> None:
    pi = bm.bigram_map(500, 1)
    acc = bm.expected_accept_length(pi, bm.draft_map(pi, agree, 2), 7, 300, depth)
    assert 1.0 <= acc <= depth + 1


def test_param_count_matches_the_published_llama2_7b_size() -> None:
    llama2_7b = bm.ModelShape(
        hidden=4096, layers=32, intermediate=11008, heads=32, kv_heads=32, head_dim=128, vocab=32000
    )
    assert bm.param_count(llama2_7b) == 6_738_415_616


def test_target_is_gigabytes_and_draft_a_few_layers() -> None:
    gb = 2 * bm.param_count(bm.TARGET) / 1e9
    assert 1.0 < gb < 8.0
    assert bm.DRAFT.layers <= 4 and bm.DRAFT.vocab == bm.TARGET.vocab


def test_model_shape_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="ModelShape.layers"):
        bm.ModelShape(hidden=8, layers=0, intermediate=8, heads=2, kv_heads=1, head_dim=4, vocab=10)
    with pytest.raises(ValueError, match="kv_heads"):
        bm.ModelShape(hidden=8, layers=1, intermediate=8, heads=3, kv_heads=2, head_dim=4, vocab=10)


_HAVE_TORCH = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "safetensors", "tokenizers"))


@pytest.mark.skipif(
    not _HAVE_TORCH, reason="needs torch, transformers, safetensors and tokenizers (CPU is enough)"
)
def test_checkpoint_greedy_output_is_the_chain_in_fp32_and_bf16(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import LlamaForCausalLM

    n_tok = bm.train_tokenizer(str(tmp_path / "tok"))
    pi = bm.bigram_map(min(n_tok, bm.TINY.vocab), seed=1)
    bm.write_checkpoint(str(tmp_path / "m"), bm.TINY, pi, seed=0, tokenizer_from=str(tmp_path / "tok"))
    ref_shapes = bm.param_shapes(bm.TINY)
    for dtype in (torch.float32, torch.bfloat16):
        model = LlamaForCausalLM.from_pretrained(str(tmp_path / "m"), dtype=dtype).eval()
        assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == ref_shapes
        prompt = [1, 50, 77, 123, 9]
        out = model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)
        assert out[0, len(prompt) :].tolist() == bm.greedy_chain(pi, prompt[-1], 24)
        with torch.no_grad():
            logits = model(torch.tensor([prompt])).logits[0].float()
        top2 = logits.topk(2, dim=-1).values
        assert float((top2[:, 0] - top2[:, 1]).min()) > 8.0  # far above bf16 rounding of the logits


def test_lossless_count_compares_each_request_with_its_own_chain_and_length() -> None:
    pi = bm.bigram_map(64, seed=1)
    prompts = [[5, 9], [7, 11], [6, 12]]
    lengths = [4, 2, 3]
    outputs = [bm.greedy_chain(pi, p[-1], n) for p, n in zip(prompts, lengths, strict=True)]
    assert bm.lossless_count(outputs, prompts, lengths, pi) == (3, 3)
    outputs[1] = outputs[1][:1]  # one token short
    outputs[2][0] += 1  # one token wrong
    assert bm.lossless_count(outputs, prompts, lengths, pi) == (3, 1)
