"""`--fused_kernels`: rotary + QK norm as one hand-written Triton kernel, forward and backward.

torch.compile fuses a block's elementwise pieces into Triton kernels of its own; alone, those ran 1.5-2.9x
above their memory floors on an H200 (`results/h200-d20/README.md`). This kernel does rotary + QK norm in
one pass over q (or k): (x1, x2) -> (x1 cos + x2 sin, x2 cos - x1 sin), then RMSNorm over the head dim.
Its arithmetic is the compiled model's: inputs upcast to fp32, no rounding between rotary and norm, one
rounding to the input's dtype at the end; eps is F.rms_norm's default (fp32 epsilon). Backward needs only
the output, which attention saves anyway, and one fp32 factor a row.

The op is an opaque `torch.library.custom_op` with a shape-only fake, built before torch.compile traces the
model: compile keeps it in the graph without tracing into it. (A traced `triton_op` built on its first call,
inside the trace, broke the graph there, and that version made the d20 step slower: `results/h200-d20/fused/`.)
Off by default: it changes which kernels run, not the model. `benchmarks/step_floor.py --fused` and
`benchmarks/gpu_bench.py` measure it; Triton's interpreter (TRITON_INTERPRET=1) runs the same kernel on CPU
tensors, which the tests use.
"""

import os

import torch

from bench.errors import ConfigError

RMS_EPS = torch.finfo(torch.float32).eps  # what F.rms_norm uses for fp32 and bf16 inputs alike
ROWS = 16  # rows of one head each per program of the rotary + norm kernels


def available(device: torch.device) -> str:
    """Why the fused kernel cannot run on `device` ("" when it can)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed (it comes with PyTorch's CUDA wheels)"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return f"it needs a CUDA GPU (this run is on {device.type}; TRITON_INTERPRET=1 runs it on CPU, slowly)"
    return ""


def _op():
    """The op over the Triton kernels, built on first use (Triton is imported only then)."""
    global _OP
    if _OP is None:
        _OP = _build()
    return _OP


_OP = None


def _build():
    import triton
    import triton.language as tl
    from torch.library import custom_op, register_fake

    @triton.jit
    def rotary_norm_fwd(X, COS, SIN, Y, RSTD, n_rows, T, H, eps, HALF, ROWS: tl.constexpr, COLS: tl.constexpr):
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
        cols = tl.arange(0, COLS)[None, :]  # COLS: HALF rounded up to a power of two, as tl.arange needs
        live = (rows < n_rows) & (cols < HALF)
        t = (rows // H) % T
        x1 = tl.load(X + rows * 2 * HALF + cols, mask=live, other=0.0).to(tl.float32)
        x2 = tl.load(X + rows * 2 * HALF + HALF + cols, mask=live, other=0.0).to(tl.float32)
        c = tl.load(COS + t * HALF + cols, mask=live, other=0.0).to(tl.float32)
        s = tl.load(SIN + t * HALF + cols, mask=live, other=0.0).to(tl.float32)
        y1 = x1 * c + x2 * s
        y2 = x2 * c - x1 * s
        rstd = 1.0 / tl.sqrt((tl.sum(y1 * y1, axis=1) + tl.sum(y2 * y2, axis=1)) / (2 * HALF) + eps)
        r = rstd[:, None]
        tl.store(Y + rows * 2 * HALF + cols, (y1 * r).to(Y.dtype.element_ty), mask=live)
        tl.store(Y + rows * 2 * HALF + HALF + cols, (y2 * r).to(Y.dtype.element_ty), mask=live)
        tl.store(RSTD + rows, r, mask=rows < n_rows)

    @triton.jit
    def rotary_norm_bwd(Y, COS, SIN, RSTD, G, DX, n_rows, T, H, HALF, ROWS: tl.constexpr, COLS: tl.constexpr):
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
        cols = tl.arange(0, COLS)[None, :]
        live = (rows < n_rows) & (cols < HALF)
        t = (rows // H) % T
        y1 = tl.load(Y + rows * 2 * HALF + cols, mask=live, other=0.0).to(tl.float32)
        y2 = tl.load(Y + rows * 2 * HALF + HALF + cols, mask=live, other=0.0).to(tl.float32)
        g1 = tl.load(G + rows * 2 * HALF + cols, mask=live, other=0.0).to(tl.float32)
        g2 = tl.load(G + rows * 2 * HALF + HALF + cols, mask=live, other=0.0).to(tl.float32)
        c = tl.load(COS + t * HALF + cols, mask=live, other=0.0).to(tl.float32)
        s = tl.load(SIN + t * HALF + cols, mask=live, other=0.0).to(tl.float32)
        r = tl.load(RSTD + rows, mask=rows < n_rows, other=0.0)
        # y = z r with z the rotated row and r = (mean(z²) + eps)^-1/2:  dL/dz = r (g - y mean(g y))
        gy = (tl.sum(g1 * y1, axis=1) + tl.sum(g2 * y2, axis=1))[:, None] / (2 * HALF)
        d1 = r * (g1 - y1 * gy)
        d2 = r * (g2 - y2 * gy)
        tl.store(DX + rows * 2 * HALF + cols, (d1 * c - d2 * s).to(DX.dtype.element_ty), mask=live)
        tl.store(DX + rows * 2 * HALF + HALF + cols, (d1 * s + d2 * c).to(DX.dtype.element_ty), mask=live)

    def rows_grid(x):
        return (triton.cdiv(x.numel() // x.shape[-1], ROWS),)

    def blocks(head_dim: int) -> dict:
        return {"ROWS": ROWS, "COLS": triton.next_power_of_2(head_dim // 2)}

    @custom_op("nanochat_bench::rotary_norm", mutates_args=())
    def rotary_norm(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, T, H, D = x.shape
        y, rstd = empty_outputs(x, cos, sin)
        rotary_norm_fwd[rows_grid(x)](x, cos, sin, y, rstd, x.numel() // D, T, H, RMS_EPS, D // 2, **blocks(D))
        return y, rstd

    @register_fake("nanochat_bench::rotary_norm")
    def empty_outputs(x, cos, sin):
        return torch.empty_like(x), x.new_empty(x.shape[:-1], dtype=torch.float32)

    @custom_op("nanochat_bench::rotary_norm_backward", mutates_args=())
    def rotary_norm_backward(y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rstd: torch.Tensor,
                             g: torch.Tensor) -> torch.Tensor:
        _, T, H, D = y.shape
        dx = torch.empty_like(y)
        rotary_norm_bwd[rows_grid(y)](y, cos, sin, rstd, g, dx, y.numel() // D, T, H, D // 2, **blocks(D))
        return dx

    @register_fake("nanochat_bench::rotary_norm_backward")
    def _(y, cos, sin, rstd, g):
        return torch.empty_like(y)

    def rotary_norm_setup(ctx, inputs, output):
        _, cos, sin = inputs
        ctx.save_for_backward(output[0], cos, sin, output[1])  # the output: attention saves it anyway

    def rotary_norm_grad(ctx, grad_y, grad_rstd):
        y, cos, sin, rstd = ctx.saved_tensors
        return rotary_norm_backward(y, cos, sin, rstd, grad_y.contiguous()), None, None

    rotary_norm.register_autograd(rotary_norm_grad, setup_context=rotary_norm_setup)
    return rotary_norm


def rotary_qk_norm(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """norm(apply_rotary_emb(x, cos, sin)) for x (B, T, H, D), cos and sin (1, T, 1, D/2), in one kernel."""
    return _op()(x.contiguous(), cos.contiguous(), sin.contiguous())[0]


def apply_fused_kernels(model, on: bool, device: torch.device, log=print) -> None:
    """Swap the fused kernel into every block of `model` (before compile and sharding)."""
    if not on:
        return
    why = available(torch.device(device))
    if why:
        raise ConfigError(f"--fused_kernels: {why}; leave it off (the default)")
    _op()  # built now: built inside torch.compile's trace, it would break the graph there
    for block in model.transformer.h:
        block.attn.rotary_norm = rotary_qk_norm
    log("Fused kernels: rotary + QK norm as one Triton kernel (bench/nanochat/fused.py)")
