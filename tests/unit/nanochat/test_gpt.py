"""The GPT of spec §4: sizes, FLOPs, init, RoPE-then-QK-norm, softcap, causal attention.

    python -m pytest tests/unit/nanochat/test_gpt.py -q
"""

import math

import pytest
import torch
import torch.nn.functional as F

from bench.nanochat import gpt
from bench.nanochat.gpt import GPT, GPTConfig, apply_rotary_emb, build_model, norm


def meta_model(depth: int, vocab: int = 65536, seq: int = 2048) -> GPT:
    with torch.device("meta"):
        return GPT(GPTConfig.from_depth(depth, vocab, seq))


def tiny(depth=2, vocab=256, seq=32, **kw) -> GPT:
    torch.manual_seed(0)
    return build_model(GPTConfig.from_depth(depth, vocab, seq, **kw), "cpu")


def test_d20_counts_on_meta_device():
    model = meta_model(20)
    assert model.transformer.wte.weight.is_meta
    assert model.num_params() == 560_988_160
    assert model.estimate_flops() == 3_491_758_080
    c = model.config
    assert (c.n_layer, c.n_embd, c.n_head, c.n_kv_head) == (20, 1280, 10, 10)


def test_d32_counts_and_odd_depth_heads():
    assert meta_model(32).num_params() == 1_879_048_192
    assert GPTConfig.from_depth(3, 512).n_head == 2  # ceil(192 / 128)


def test_init_zeroes_projections_and_lm_head():
    model = tiny(depth=2, vocab=512, seq=64)
    assert torch.count_nonzero(model.lm_head.weight) == 0
    for block in model.transformer.h:
        assert torch.count_nonzero(block.attn.c_proj.weight) == 0
        assert torch.count_nonzero(block.mlp.c_proj.weight) == 0
    fan_in = model.config.n_embd
    std = model.transformer.h[0].attn.c_q.weight.std().item()
    assert abs(std - 1 / math.sqrt(fan_in)) < 0.1 / math.sqrt(fan_in)
    # c_fc (fan_out 4d > fan_in): same std; wte ~ N(0, 1)
    assert abs(model.transformer.h[0].mlp.c_fc.weight.std().item() - 1 / math.sqrt(fan_in)) < 0.1 / math.sqrt(fan_in)
    assert abs(model.transformer.wte.weight.std().item() - 1.0) < 0.05
    assert model.transformer.wte.weight.dtype == torch.float32  # bf16 only on CUDA


def test_step0_loss_is_ln_vocab():
    vocab = 300
    model = tiny(vocab=vocab)
    x = torch.randint(0, vocab, (2, 32))
    loss = model(x, x)
    assert loss.item() == pytest.approx(math.log(vocab), rel=1e-6)


def test_rotary_is_split_half_and_keeps_norms():
    torch.manual_seed(0)
    x = torch.randn(1, 5, 2, 8)
    model = tiny(depth=1, vocab=64, seq=16)
    cos, sin = model._precompute_rotary_embeddings(5, 8)
    y = apply_rotary_emb(x, cos.float(), sin.float())
    assert torch.allclose(y[:, 0], x[:, 0])  # position 0: angle 0
    d = 4
    pos, i = 3, 1  # pair (i, i + d) rotates by angle pos * 10000^(-2i/8)
    theta = pos * 10000 ** (-2 * i / 8)
    x1, x2 = x[0, pos, :, i], x[0, pos, :, i + d]
    # the tables are bf16 (as upstream): about 3 significant digits
    assert torch.allclose(y[0, pos, :, i], x1 * math.cos(theta) + x2 * math.sin(theta), atol=2e-2)
    assert torch.allclose(y[0, pos, :, i + d], -x1 * math.sin(theta) + x2 * math.cos(theta), atol=2e-2)
    pair_norm = lambda t: t[..., :d] ** 2 + t[..., d:] ** 2  # noqa: E731
    assert torch.allclose(pair_norm(y), pair_norm(x), rtol=2e-2, atol=1e-3)


def test_rope_is_applied_before_qk_norm(monkeypatch):
    model = tiny(depth=1, vocab=64, seq=16)
    attn = model.transformer.h[0].attn
    seen = {}

    def capture(q, k, v, enable_gqa=False):
        seen["q"], seen["k"] = q, k
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    monkeypatch.setattr(gpt, "causal_attention", capture)
    torch.manual_seed(1)
    x = torch.randn(2, 16, model.config.n_embd)
    cos, sin = model.cos[:, :16], model.sin[:, :16]
    attn(x, (cos, sin))
    B, T, H, D = 2, 16, attn.n_head, attn.head_dim
    q_raw = attn.c_q(x).view(B, T, H, D)
    rope_then_norm = norm(apply_rotary_emb(q_raw, cos, sin)).transpose(1, 2)
    norm_then_rope = apply_rotary_emb(norm(q_raw), cos, sin).transpose(1, 2)
    assert torch.allclose(seen["q"], rope_then_norm, atol=1e-6)
    assert not torch.allclose(seen["q"], norm_then_rope, atol=1e-3)  # the order is observable
    assert torch.allclose(seen["q"].pow(2).mean(-1), torch.ones(B, H, T), atol=1e-3)  # RMS-normed last


def test_logits_are_softcapped_at_15():
    model = tiny(depth=1, vocab=64, seq=16)
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 10.0)  # raw logits in the hundreds
    x = torch.randint(0, 64, (1, 16))
    logits = model(x)
    assert logits.dtype == torch.float32
    assert logits.abs().max().item() <= 15.0
    assert logits.abs().max().item() > 14.0
    with torch.no_grad():
        h = model.transformer.wte(x)
        h = norm(h)
        for block in model.transformer.h:
            h = block(h, (model.cos[:, :16], model.sin[:, :16]))
        raw = model.lm_head(norm(h))
    assert torch.allclose(logits, 15 * torch.tanh(raw / 15), atol=1e-5)


@pytest.mark.parametrize("force_flash", [False, True])
def test_causal_attention_matches_reference(force_flash, restore_sdpa_switches):
    from bench.nanochat.attention import causal_attention, force_flash_attention

    if force_flash:
        force_flash_attention()
    torch.manual_seed(0)
    B, H, T, D = 2, 3, 17, 16
    q, k, v = (torch.randn(B, H, T, D) for _ in range(3))
    out = causal_attention(q, k, v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    ref = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v
    assert torch.allclose(out, ref, atol=1e-5)


def test_future_tokens_do_not_change_past_logits():
    model = tiny(depth=2, vocab=128, seq=32)
    with torch.no_grad():
        for block in model.transformer.h:  # non-zero projections so attention matters
            block.attn.c_proj.weight.normal_(0, 0.05)
        model.lm_head.weight.normal_(0, 0.05)
    x = torch.randint(0, 128, (1, 32))
    y = x.clone()
    y[0, 20:] = (y[0, 20:] + 1) % 128
    a, b = model(x), model(y)
    assert torch.allclose(a[0, :20], b[0, :20], atol=1e-5)
    assert not torch.allclose(a[0, 20:], b[0, 20:], atol=1e-5)


def test_setup_optimizers_split_and_lr_scaling():
    model = tiny(depth=2, vocab=256, seq=32)
    adamw, muon = model.setup_optimizers(log=lambda *a: None)
    s = (model.config.n_embd / 768) ** -0.5
    assert [g["lr"] for g in adamw.param_groups] == pytest.approx([0.004 * s, 0.2 * s])
    assert adamw.param_groups[0]["betas"] == (0.8, 0.95) and adamw.param_groups[0]["eps"] == 1e-10
    muon_params = {id(p) for g in muon.param_groups for p in g["params"]}
    assert muon_params == {id(p) for p in model.transformer.h.parameters()}
    assert all(g["initial_lr"] == g["lr"] for opt in (adamw, muon) for g in opt.param_groups)
