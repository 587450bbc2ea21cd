"""Forced flash SDPA (bench/nanochat/attention.py): works on CPU, fails clearly when no allowed kernel fits.

    python -m pytest tests/unit/nanochat/test_attention.py -q
"""

import pytest
import torch

from bench.errors import ConfigError
from bench.nanochat.attention import (FlashAttentionUnavailable, causal_attention, check_forced_attention,
                                      force_flash_from_env)
from bench.nanochat.gpt import GPTConfig, build_model


def test_forced_flash_runs_on_cpu_and_equals_default():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 32) for _ in range(3))
    assert torch.allclose(causal_attention(q, k, v, force_flash=True), causal_attention(q, k, v), atol=1e-5)
    check_forced_attention(n_head=2, n_kv_head=2, head_dim=32, seq_len=64, dtype=torch.float32, device="cpu")


def test_no_allowed_kernel_fails_clearly():
    # The flash and memory-efficient kernels need equal q/k and v head dims: only the math kernel takes this.
    q, k = torch.randn(1, 2, 16, 32), torch.randn(1, 2, 16, 32)
    v = torch.randn(1, 2, 16, 48)
    assert causal_attention(q, k, v).shape == (1, 2, 16, 48)  # unforced: the math kernel runs it
    with pytest.raises(FlashAttentionUnavailable) as e:
        causal_attention(q, k, v, force_flash=True)
    msg = str(e.value)
    assert "torch.float32" in msg and "head dim 32" in msg and "device cpu" in msg
    assert "FLASH_ATTENTION" in msg and "NANOCHAT_FORCE_FLASH_SDPA" in msg
    assert isinstance(e.value, ConfigError)  # the CLI prints it as one line


def test_forced_model_trains_on_cpu():
    torch.manual_seed(0)
    model = build_model(GPTConfig.from_depth(1, 64, 32, force_flash_sdpa=True), "cpu")
    x = torch.randint(0, 64, (2, 32))
    model(x, x).backward()
    assert model.transformer.h[0].attn.c_q.weight.grad is not None


@pytest.mark.parametrize("value,expected", [("1", True), ("true", True), ("0", False), ("", False), ("no", False)])
def test_env_switch(value, expected):
    assert force_flash_from_env({"NANOCHAT_FORCE_FLASH_SDPA": value}) is expected
    assert force_flash_from_env({}) is False
