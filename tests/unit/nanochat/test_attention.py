"""Forced flash SDPA (bench/nanochat/attention.py): works on CPU, fails clearly when no allowed kernel fits.

    python -m pytest tests/unit/nanochat/test_attention.py -q
"""

import pytest
import torch
import torch.nn.functional as F

from bench.errors import ConfigError
from bench.nanochat.attention import (FlashAttentionUnavailable, causal_attention, check_forced_attention,
                                      force_flash_attention, restrict_sdpa_backends)
from bench.nanochat.config import force_flash_from_env, parse_args
from bench.nanochat.gpt import GPTConfig, build_model


def test_forced_flash_runs_on_cpu_and_equals_default(restore_sdpa_switches):
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 32) for _ in range(3))
    default = causal_attention(q, k, v)
    assert force_flash_attention() == ["cudnn", "flash", "efficient"] and not torch.backends.cuda.math_sdp_enabled()
    assert torch.allclose(causal_attention(q, k, v), default, atol=1e-5)
    check_forced_attention(n_head=2, n_kv_head=2, head_dim=32, seq_len=64, dtype=torch.float32, device="cpu")


def test_no_allowed_kernel_fails_clearly(restore_sdpa_switches):
    # The flash and memory-efficient kernels need equal q/k and v head dims: only the math kernel takes this.
    q, k = torch.randn(1, 2, 16, 32), torch.randn(1, 2, 16, 32)
    v = torch.randn(1, 2, 16, 48)
    assert causal_attention(q, k, v).shape == (1, 2, 16, 48)  # unforced: the math kernel runs it
    force_flash_attention()
    with pytest.raises(FlashAttentionUnavailable) as e:
        causal_attention(q, k, v)
    msg = str(e.value)
    assert "torch.float32" in msg and "head dim 32" in msg and "device cpu" in msg
    assert "FLASH_ATTENTION" in msg and "NANOCHAT_FORCE_FLASH_SDPA" in msg
    assert isinstance(e.value, ConfigError)  # the CLI prints it as one line


def test_sdpa_backends_without_a_kernel_name_that_flag(restore_sdpa_switches):
    restrict_sdpa_backends("cudnn")  # no cuDNN kernel on a CPU
    q = torch.randn(1, 2, 16, 32)
    with pytest.raises(FlashAttentionUnavailable) as e:
        causal_attention(q, q, q)
    msg = str(e.value)
    assert "allowed kernels: CUDNN_ATTENTION." in msg and "without --sdpa_backends=cudnn" in msg
    assert "force_flash_sdpa" not in msg and "FLASH_ATTENTION" not in msg


def test_cudas_invalid_backend_is_the_clear_error_too(restore_sdpa_switches, monkeypatch):
    """On CUDA (torch 2.11, H200) SDPA with no allowed kernel for its inputs raises a bare RuntimeError("Invalid
    backend"). No CUDA here: the call is replaced by one raising that error, as the GPU did."""
    def raising(message):
        def sdpa(*args, **kwargs):
            raise RuntimeError(message)
        return sdpa

    force_flash_attention()
    q = torch.randn(1, 2, 16, 32, dtype=torch.float64)
    monkeypatch.setattr(F, "scaled_dot_product_attention", raising("Invalid backend"))
    with pytest.raises(FlashAttentionUnavailable, match=r"^forced flash SDPA: none of the allowed attention kernels"):
        causal_attention(q, q, q)
    monkeypatch.setattr(F, "scaled_dot_product_attention", raising("CUDA error: an illegal memory access"))
    with pytest.raises(RuntimeError, match="illegal memory access"):  # any other error stays itself
        causal_attention(q, q, q)


def test_forced_model_trains_on_cpu(restore_sdpa_switches):
    torch.manual_seed(0)
    force_flash_attention()
    model = build_model(GPTConfig.from_depth(1, 64, 32), "cpu")
    x = torch.randint(0, 64, (2, 32))
    model(x, x).backward()
    assert model.transformer.h[0].attn.c_q.weight.grad is not None


@pytest.mark.parametrize("value,expected", [("1", True), ("true", True), ("0", False), ("", False), ("no", False),
                                            (" ON ", True)])
def test_env_switch(value, expected):
    assert force_flash_from_env({"NANOCHAT_FORCE_FLASH_SDPA": value}) is expected
    assert force_flash_from_env({}) is False


@pytest.mark.parametrize("value", ["ture", "2", "enabled"])
def test_an_env_switch_of_another_word_is_refused_not_read_as_off(value):
    # read as off, a misspelt NANOCHAT_FORCE_FLASH_SDPA=ture let attention fall back to the math kernel unsaid
    with pytest.raises(ConfigError, match=rf"^NANOCHAT_FORCE_FLASH_SDPA='{value}': give 1/true/yes/on to force"):
        force_flash_from_env({"NANOCHAT_FORCE_FLASH_SDPA": value})


def test_sdpa_backends_restrict_the_kernels_and_compile_afresh(restore_sdpa_switches):
    import torch._inductor.config as inductor_config

    assert restrict_sdpa_backends("") == [] and torch.backends.cuda.math_sdp_enabled()
    assert restrict_sdpa_backends("flash, efficient") == ["flash", "efficient"]
    assert not torch.backends.cuda.math_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()
    assert inductor_config.force_disable_caches  # a cached graph of another kernel must not be reused
    q = torch.randn(1, 2, 16, 64)
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)  # CPU's flash kernel still serves
    assert torch.isfinite(out).all()
    restrict_sdpa_backends("math")
    assert torch.backends.cuda.math_sdp_enabled() and not torch.backends.cuda.flash_sdp_enabled()


def test_unknown_sdpa_backend_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"--sdpa_backends='flash,warp'.*unknown kernel\(s\) warp.*valid: flash"):
        parse_args(["--sdpa_backends=flash,warp"])
