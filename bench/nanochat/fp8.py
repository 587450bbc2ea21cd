"""`--fp8` and `--fp8_lm_head`: FP8 matmuls for the model's Linears, tensorwise dynamic scaling.

Each matmul of a converted Linear runs through `torch._scaled_mm` on FP8 operands, forward and
backward, as the tensorwise recipe does (and as upstream nanochat's later `--fp8`):
  - forward  y  = x @ W^T        x, W in e4m3
  - backward dx = dy @ W         dy in e5m2 (gradients need range more than precision), W in e4m3
             dW = dy^T @ x       dy in e5m2, x in e4m3
Every operand gets one scale per tensor from its current absolute maximum ("dynamic": no history),
so that amax lands on the format's largest finite value; the products come out in bf16 (or the
input's dtype outside autocast) and the master weights stay in fp32 for the optimizers. The forward
product accumulates in the tensor cores' fast (lower-precision) mode, the two gradient products in
full precision: torchao's tensorwise defaults, and upstream nanochat's later `--fp8`.

Our own small autograd Function rather than torchao's float8 training: torchao is not in every CUDA
image (NGC's or a site's), this needs no new dependency, it is one function torch.compile traces
whole (no tensor subclass), and the parameters stay plain tensors, so zero2's sharded optimizers and
FSDP2's sharding see exactly the bf16 model's parameters.
"""

import torch
import torch.nn as nn

from bench.errors import ConfigError

E4M3 = torch.float8_e4m3fn  # weights and activations
E5M2 = torch.float8_e5m2  # gradients
AMAX_EPS = 1e-12  # an all-zero tensor (lm_head and the c_proj's start at zero) gets a finite scale
MIN_CAPABILITY = (8, 9)  # FP8 tensor cores: Ada and Hopper onwards


def fp8_scale(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The float32 factor that maps t's absolute maximum onto dtype's largest finite value."""
    amax = t.detach().abs().max().float().clamp(min=AMAX_EPS)
    return torch.finfo(dtype).max / amax


def to_fp8(t: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(t scaled and cast to dtype, the inverse scale that turns products back into t's units)."""
    scale = fp8_scale(t, dtype)
    limit = torch.finfo(dtype).max
    t8 = (t.float() * scale).clamp(-limit, limit).to(dtype)
    return t8, scale.reciprocal()


def _column_major(t: torch.Tensor) -> torch.Tensor:
    """The same matrix laid out column by column: _scaled_mm's second operand must be."""
    return t.t().contiguous().t()


def _mm(a: torch.Tensor, a_inv: torch.Tensor, b: torch.Tensor, b_inv: torch.Tensor, out_dtype,
        fast_accum: bool = False) -> torch.Tensor:
    return torch._scaled_mm(a, b, scale_a=a_inv, scale_b=b_inv, out_dtype=out_dtype, use_fast_accum=fast_accum)


class _FP8Matmul(torch.autograd.Function):
    """x (M, K) @ weight (N, K)^T with FP8 operands in both passes; gradients in x's and weight's dtypes."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        x8, x_inv = to_fp8(x, E4M3)
        w8, w_inv = to_fp8(weight, E4M3)
        ctx.save_for_backward(x8, x_inv, w8, w_inv)
        ctx.dtypes = (x.dtype, weight.dtype)
        # w8.t() of a row-major w8 is column-major; fast accumulation in the forward product only
        return _mm(x8, x_inv, w8.t(), w_inv, out_dtype, fast_accum=True)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x8, x_inv, w8, w_inv = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        g8, g_inv = to_fp8(grad_out.contiguous(), E5M2)  # row-major: _scaled_mm's first operand
        grad_x = _mm(g8, g_inv, _column_major(w8), w_inv, x_dtype)
        grad_w = _mm(g8.t().contiguous(), g_inv, _column_major(x8), x_inv, torch.float32).to(w_dtype)
        return grad_x, grad_w, None


class FP8Linear(nn.Linear):
    """An nn.Linear without bias whose matmuls run in FP8 (same parameter, same state dict)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        autocast = torch.is_autocast_enabled(x.device.type)
        out_dtype = torch.get_autocast_dtype(x.device.type) if autocast else x.dtype
        with torch.autocast(x.device.type, enabled=False):
            y = _FP8Matmul.apply(x.reshape(-1, x.size(-1)), self.weight, out_dtype)
        return y.view(*x.shape[:-1], y.size(-1))


def fp8_supported(device: torch.device) -> str | None:
    """None where FP8 matmuls run on `device`, else why not (in words)."""
    if device.type != "cuda":
        return f"the device is {device.type}"
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        return (f"{torch.cuda.get_device_name(device)} has compute capability {capability[0]}.{capability[1]}, "
                f"below {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}")
    return None


def convertible(linear: nn.Module) -> bool:
    """_scaled_mm wants both matrix dimensions divisible by 16, and there is no bias path."""
    return type(linear) is nn.Linear and linear.bias is None and \
        linear.in_features % 16 == 0 and linear.out_features % 16 == 0


def convert_to_fp8(model: nn.Module, blocks: bool, lm_head: bool) -> int:
    """Turn the blocks' Linears and/or lm_head into FP8Linear in place, keeping each parameter
    object (so optimizers, checkpoints and sharding see the same model); returns how many."""
    targets = [m for m in model.transformer.h.modules() if convertible(m)] if blocks else []
    if lm_head and convertible(model.lm_head):
        targets.append(model.lm_head)
    for linear in targets:
        linear.__class__ = FP8Linear  # same attributes and parameters; only forward differs
    return len(targets)


def apply_fp8(model: nn.Module, fp8: bool, fp8_lm_head: bool, device: torch.device, log=print) -> int:
    """--fp8 / --fp8_lm_head on a built model, before it is compiled or sharded; a device without FP8
    matmuls is refused naming the flag."""
    if not (fp8 or fp8_lm_head):
        return 0
    flag = "--fp8" if fp8 else "--fp8_lm_head"
    why = fp8_supported(device)
    if why:
        raise ConfigError(f"{flag}: FP8 matmuls need an NVIDIA GPU of compute capability 8.9 or newer "
                          f"(Ada, Hopper, Blackwell), but {why}; leave out {flag} to train in bf16")
    converted = convert_to_fp8(model, blocks=fp8, lm_head=fp8_lm_head)
    log(f"FP8 matmuls (tensorwise, e4m3 forward, e5m2 gradients): {converted} Linear(s)"
        f"{', lm_head included' if fp8_lm_head else ''}")
    return converted
