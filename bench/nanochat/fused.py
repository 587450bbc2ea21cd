"""`--fused_kernels`: hand-written Triton kernels, forward and backward, each chosen by name.

torch.compile fuses a block's elementwise pieces into Triton kernels of its own; alone, those ran 1.5-2.9x
above their memory floors on an H200 (`results/h200-d20/README.md`). The kernels here (names as in
bench/nanochat/config.py FUSED_KERNELS):
- rotary_norm: rotary + QK norm in one pass over q (or k): (x1, x2) -> (x1 cos + x2 sin, x2 cos - x1 sin),
  then RMSNorm over the head dim. Inputs upcast to fp32, no rounding between rotary and norm, one rounding to
  the input's dtype at the end; eps is F.rms_norm's default (fp32 epsilon). Backward needs only the output,
  which attention saves anyway, and one fp32 factor a row.
- softcap_loss: the soft-capped logits and the cross-entropy in one pass over lm_head's output, which is
  all it saves, with one fp32 log-sum-exp a row; backward recomputes the soft cap and writes the gradient in
  one more pass. All in fp32 with no rounding in between, as the compiled model computes it (eager bf16
  would round the soft-capped logits); the logits never exist in fp32 in memory. Its gradient is a buffer
  beside the saved logits (8 GiB more at d20's batch 32, where compile's backward reuses their buffer; the
  memory model counts it): a faster step for more memory (`results/h200-d20/fused/`).

Each op is an opaque `torch.library.custom_op` with a shape-only fake, built before torch.compile traces the
model: compile keeps it in the graph without tracing into it. (A traced `triton_op` built on its first call,
inside the trace, broke the graph there, and that version made the d20 step slower: `results/h200-d20/fused/`.)
Off by default: they change which kernels run, not the model. `benchmarks/step_floor.py --fused` and
`benchmarks/gpu_bench.py` measure them; Triton's interpreter (TRITON_INTERPRET=1) runs the same kernels on CPU
tensors, which the tests use.
"""

import os

import torch

from bench.errors import ConfigError
from bench.nanochat.config import fused_kernel_names
from bench.nanochat.gpt import SOFTCAP

RMS_EPS = torch.finfo(torch.float32).eps  # what F.rms_norm uses for fp32 and bf16 inputs alike
ROWS = 16  # rows of one head each per program of the rotary + norm kernels
# Logits per iteration of the loss kernels' loop over one row, and warps per program (one row): on an H200, d20's
# 65,536 x 65,536 logits, forward and backward took within 5% of their best (from 1,024-8,192 and 4-16 warps).
VOCAB_BLOCK = 2048
LOSS_WARPS = 8


def available(device: torch.device) -> str:
    """Why the fused kernel cannot run on `device` ("" when it can)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed (it comes with PyTorch's CUDA wheels)"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return f"it needs a CUDA GPU (this run is on {device.type}; TRITON_INTERPRET=1 runs it on CPU, slowly)"
    return ""


def _ops() -> dict:
    """The ops over the Triton kernels by name, built on first use (Triton is imported only then)."""
    global _OPS
    if _OPS is None:
        _OPS = _build()
    return _OPS


_OPS = None


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

    # Both loss kernels soft-cap a block of logits the same way: z = cap tanh(logit / cap) in fp32, with
    # tanh(u) = 1 - 2 / (e^2u + 1) (Triton's interpreter has no tanh; the division need not be IEEE-exact).
    # A helper jit function would do, but the interpreter cannot call one defined here.
    @triton.jit
    def softcap_ce_fwd(L, TARGET, LOSS, LSE, V, cap, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        target = tl.load(TARGET + row)
        sum_exp = tl.zeros([BLOCK], dtype=tl.float32)
        z_target = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, V, BLOCK):  # |z| <= cap: sum(exp(z)) cannot overflow, so no running max
            cols = start + tl.arange(0, BLOCK)
            logit = tl.load(L + row * V + cols, mask=cols < V, other=0.0).to(tl.float32)
            th = 1.0 - tl.fdiv(2.0, tl.exp(2.0 / cap * logit) + 1.0, ieee_rounding=False)
            z = cap * th
            sum_exp += tl.where(cols < V, tl.exp(z), 0.0)
            z_target += tl.where(cols == target, z, 0.0)
        lse = tl.log(tl.sum(sum_exp, axis=0))
        # target -1: ignored, as upstream's ignore_index; its loss is 0
        tl.store(LOSS + row, tl.where(target == -1, 0.0, lse - tl.sum(z_target, axis=0)))
        tl.store(LSE + row, lse)

    @triton.jit
    def softcap_ce_bwd(L, TARGET, LSE, G, DL, V, cap, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        target = tl.load(TARGET + row)
        g = tl.where(target == -1, 0.0, tl.load(G + row))  # an ignored row's loss is a constant 0
        lse = tl.load(LSE + row)
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            logit = tl.load(L + row * V + cols, mask=cols < V, other=0.0).to(tl.float32)
            th = 1.0 - tl.fdiv(2.0, tl.exp(2.0 / cap * logit) + 1.0, ieee_rounding=False)
            z = cap * th
            # d loss / d z = softmax(z) - onehot(target); d z / d logit = 1 - tanh²
            dz = tl.exp(z - lse) - tl.where(cols == target, 1.0, 0.0)
            tl.store(DL + row * V + cols, (g * dz * (1.0 - th * th)).to(DL.dtype.element_ty), mask=cols < V)

    def loss_blocks(vocab: int) -> dict:
        return {"BLOCK": min(VOCAB_BLOCK, triton.next_power_of_2(vocab)), "num_warps": LOSS_WARPS}

    @custom_op("nanochat_bench::softcap_loss", mutates_args=())
    def softcap_loss(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss, lse = loss_outputs(logits, targets)
        n, vocab = logits.shape
        softcap_ce_fwd[(n,)](logits, targets, loss, lse, vocab, SOFTCAP, **loss_blocks(vocab))
        return loss, lse

    @register_fake("nanochat_bench::softcap_loss")
    def loss_outputs(logits, targets):
        return tuple(logits.new_empty(logits.shape[:1], dtype=torch.float32) for _ in range(2))

    @custom_op("nanochat_bench::softcap_loss_backward", mutates_args=())
    def softcap_loss_backward(logits: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor,
                              g: torch.Tensor) -> torch.Tensor:
        dlogits = torch.empty_like(logits)
        n, vocab = logits.shape
        softcap_ce_bwd[(n,)](logits, targets, lse, g, dlogits, vocab, SOFTCAP, **loss_blocks(vocab))
        return dlogits

    @register_fake("nanochat_bench::softcap_loss_backward")
    def _(logits, targets, lse, g):
        return torch.empty_like(logits)

    def softcap_loss_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs, output[1])

    def softcap_loss_grad(ctx, grad_loss, grad_lse):
        logits, targets, lse = ctx.saved_tensors
        return softcap_loss_backward(logits, targets, lse, grad_loss.float().contiguous()), None

    softcap_loss.register_autograd(softcap_loss_grad, setup_context=softcap_loss_setup)
    return {"rotary_norm": rotary_norm, "softcap_loss": softcap_loss}


def rotary_qk_norm(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """norm(apply_rotary_emb(x, cos, sin)) for x (B, T, H, D), cos and sin (1, T, 1, D/2), in one kernel."""
    return _ops()["rotary_norm"](x.contiguous(), cos.contiguous(), sin.contiguous())[0]


def softcap_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """gpt.softcap_cross_entropy (soft cap, then cross-entropy ignoring -1 targets) with one kernel forward and
    one backward; the reductions are F.cross_entropy's: mean over the targets not ignored, sum, or none."""
    targets = targets.reshape(-1)
    losses = _ops()["softcap_loss"](logits.reshape(-1, logits.size(-1)).contiguous(), targets.contiguous())[0]
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / (targets != -1).sum()


def _swap_rotary_norm(model) -> None:
    for block in model.transformer.h:
        block.attn.rotary_norm = rotary_qk_norm


def _swap_softcap_loss(model) -> None:
    model.softcap_loss = softcap_cross_entropy


SWAPS = {"rotary_norm": _swap_rotary_norm, "softcap_loss": _swap_softcap_loss}  # config.FUSED_KERNELS' names


def apply_fused_kernels(model, kernels: str, device: torch.device, log=print) -> None:
    """Swap the kernels `kernels` names (a --fused_kernels value: comma-separated, "" for none) into `model`,
    before compile and sharding."""
    names = fused_kernel_names(kernels)
    if not names:
        return
    why = available(torch.device(device))
    if why:
        raise ConfigError(f"--fused_kernels={kernels}: {why}; leave it off (the default)")
    _ops()  # built now: built inside torch.compile's trace, they would break the graph there
    for name in names:
        SWAPS[name](model)
    log(f"Fused kernels: {', '.join(names)} as Triton kernels (bench/nanochat/fused.py)")
