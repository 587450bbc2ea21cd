"""Causal scaled-dot-product attention, optionally forced onto the flash / memory-efficient kernels.

Upstream nanochat calls `F.scaled_dot_product_attention(..., is_causal=True)` and lets PyTorch pick a
kernel; in bf16 on an H100 that is its flash kernel. On another GPU, dtype or head size PyTorch may
quietly fall back to the math kernel, which materialises the T x T score matrix: a benchmark would
then measure a different program. With forcing on (`--force_flash_sdpa` or NANOCHAT_FORCE_FLASH_SDPA=1)
only the flash-style kernels are allowed (cuDNN's flash attention, PyTorch's flash and memory-efficient
kernels), and inputs none of them can take end the run with an error naming dtype, head dim and device
instead of a silent fallback.

cuDNN belongs in that set: it is PyTorch's own first choice on Hopper (torch 2.11 on an H200 runs cuDNN's
`sdpa_sm90_flash` kernels when left alone), and at d20 it took 60 ms per micro-step against 109 ms for
PyTorch's flash kernel (benchmarks/step_floor.py). Forcing flash and memory-efficient alone made the whole
d20 step 7% slower on one H200 (3,684 ms against 3,421; results/h200-d20/README.md).
"""

import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench.errors import ConfigError
from bench.contract import ENV_FORCE_FLASH_SDPA
from bench.nanochat.config import SDPA_BACKEND_NAMES

# The kernels a forced run may use, as --sdpa_backends names them; the math kernel is deliberately absent.
FORCED = "cudnn,flash,efficient"


# How SDPA says no allowed kernel takes the inputs: on CPU; in older CUDA builds; on CUDA in torch 2.11 (an H200
# with --sdpa_backends=flash and fp32 inputs, or forced kernels and fp64, raised a bare "Invalid backend").
NO_KERNEL = ("No available kernel", "No viable backend", "Invalid backend")


class FlashAttentionUnavailable(ConfigError):
    """Forced flash SDPA was asked for, but no allowed kernel runs these inputs."""


# Names for --sdpa_backends: each kernel's SDPBackend and its process-wide switch (torch.backends.cuda's
# enable_<switch>(on) and <switch>_enabled()).
SDPA_BACKENDS = {
    "flash": (SDPBackend.FLASH_ATTENTION, "flash_sdp"),
    "efficient": (SDPBackend.EFFICIENT_ATTENTION, "mem_efficient_sdp"),
    "cudnn": (SDPBackend.CUDNN_ATTENTION, "cudnn_sdp"),
    "math": (SDPBackend.MATH, "math_sdp"),
}
assert tuple(SDPA_BACKENDS) == SDPA_BACKEND_NAMES, "config.py names the same kernels"


def allowed_kernels() -> list[str]:
    """The --sdpa_backends names of the kernels this process allows now (the global switches)."""
    return [name for name, (_, switch) in SDPA_BACKENDS.items() if getattr(torch.backends.cuda, f"{switch}_enabled")()]


def allow_kernels(names) -> None:
    """Turn each kernel's global switch on when it is named, off otherwise."""
    for name, (_, switch) in SDPA_BACKENDS.items():
        getattr(torch.backends.cuda, f"enable_{switch}")(name in names)


def restrict_sdpa_backends(names: str) -> list[str]:
    """Allow only the named SDPA kernels in this process (e.g. "cudnn" to measure cuDNN attention).

    Global switches, set once before torch.compile traces the model, so the compiled graph uses
    them too. An empty string leaves PyTorch's choice alone. Returns the names in effect.
    """
    chosen = [n.strip() for n in names.split(",") if n.strip()]  # names checked by TrainConfig.validate
    if chosen:
        allow_kernels(chosen)
        # The kernel is picked when the graph is traced, and torch.compile's on-disk caches do not key on
        # these switches: a cached graph of another kernel would be measured instead. Compile afresh.
        import torch._inductor.config as inductor_config

        inductor_config.force_disable_caches = True
    return chosen


def force_flash_attention() -> list[str]:
    """Forced flash SDPA for this process: the math kernel off, so an input no flash-style kernel takes
    fails (causal_attention says why) instead of falling back. A switch of the process, like
    --sdpa_backends, not of the model: the model's code and config are the same either way."""
    return restrict_sdpa_backends(FORCED)


def _describe(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str:
    return (f"dtype {q.dtype}, head dim {q.size(-1)} (value head dim {v.size(-1)}), device {q.device}, "
            f"q shape {tuple(q.shape)}, k/v heads {k.size(-3) if k.dim() >= 3 else '?'}")


def _torch_reasons(q, k, v, enable_gqa: bool) -> str:
    """PyTorch's own reasons for refusing each kernel (it gives them as warnings): the call is repeated
    once, on the failure path only, to collect them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([SDPA_BACKENDS[name][0] for name in allowed_kernels()]):
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=enable_gqa)
        except RuntimeError:
            pass
    reasons = [str(w.message).split(" (Triggered internally")[0] for w in caught]
    # a kernel switched off says only that; the same reason from two kernels is said once
    reasons = dict.fromkeys(r for r in reasons if r and not r.endswith("because:") and "runtime disabled" not in r)
    return f"; PyTorch says: {' / '.join(reasons)}" if reasons else ""


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, enable_gqa: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + causal mask) v for (B, H, T, D) inputs, as upstream nanochat does."""
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=enable_gqa)
    except RuntimeError as e:
        if not any(words in str(e) for words in NO_KERNEL) or torch.backends.cuda.math_sdp_enabled():
            raise
        allowed = allowed_kernels()
        # --force_flash_sdpa allows exactly FORCED; anything else is --sdpa_backends (which is applied after it)
        forced = sorted(allowed) == sorted(FORCED.split(","))
        setting = (f"--force_flash_sdpa / {ENV_FORCE_FLASH_SDPA}=1" if forced
                   else f"--sdpa_backends={','.join(allowed)}")
        raise FlashAttentionUnavailable(
            f"{'forced flash SDPA' if forced else 'restricted SDPA'}: none of the allowed attention kernels "
            f"supports these inputs ({_describe(q, k, v)}){_torch_reasons(q, k, v, enable_gqa)}; allowed kernels: "
            f"{', '.join(SDPA_BACKENDS[name][0].name for name in allowed) or 'none'}. Use bf16/fp16 on a GPU with a "
            f"supported head dim, or run without {setting} to allow the math kernel."
        ) from None


def check_forced_attention(n_head: int, n_kv_head: int, head_dim: int, seq_len: int,
                           dtype: torch.dtype, device: torch.device | str) -> None:
    """Run one tiny forward and backward, as training will, after force_flash_attention and before any
    compile: a problem then surfaces as FlashAttentionUnavailable and not deep in a compiled graph."""
    q = torch.randn((1, n_head, seq_len, head_dim), dtype=dtype, device=device, requires_grad=True)
    k = torch.randn((1, n_kv_head, seq_len, head_dim), dtype=dtype, device=device, requires_grad=True)
    v = torch.randn((1, n_kv_head, seq_len, head_dim), dtype=dtype, device=device, requires_grad=True)
    y = causal_attention(q, k, v, enable_gqa=n_head != n_kv_head)
    try:
        y.sum().backward()
    except RuntimeError as e:
        raise FlashAttentionUnavailable(
            f"forced flash SDPA: the backward pass has no allowed kernel ({_describe(q, k, v)}): {e}"
        ) from None
