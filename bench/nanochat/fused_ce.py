"""lm_head + soft-capped cross-entropy in row chunks, with the gradients taken in the same pass.

The model's loss is `cross_entropy(float(c * tanh((x @ W.T) / c)), targets, ignore_index=-1)` with mean
reduction; N = B*T rows, vocab V. Written out in eager PyTorch it materialises (N, V) tensors several
times: at N = V = 65,536 each bf16 one is 8 GiB and each fp32 one 16 GiB; backward keeps the bf16 tanh
output and the fp32 log-softmax (24 GiB), and forward also passes through the 16 GiB fp32 logits, with
the memory traffic of writing and reading them all.

This form (after Liger-Kernel's fused linear cross-entropy) walks the rows in chunks. For each chunk it
computes the logits, the soft-cap, the fp32 log-sum-exp and loss, and at once d loss / d logits
(softmax minus one-hot, over the kept rows), times the soft-cap's derivative 1 - tanh^2, and from that
d loss / d x for the chunk and the chunk's share of d loss / d W (summed in fp32). Backward only
scales these saved gradients by the incoming one. What stays alive is one chunk's working set
(`chunk_rows` x V; the default 1,024 rows at V = 65,536 make 256 MiB of fp32 logits, about 1 GiB with
temporaries), d loss / d x (N x D, x's dtype), d loss / d W (V x D, fp32) and W in the compute dtype:
at N = V = 65,536 and D = 1,280 about 2 GiB in all. Evaluation (reduction "none") and logits keep the
plain path. Under torch.compile inductor fuses part of the plain path, so it holds less than the eager
figures above: on one H200 at d20 (B=32, T=2048) the compiled plain path peaked at 73,889 MiB and this
one at 76,508 MiB, and a step took 3.5 s instead of 3.4 s (results/h200-d20/README.md). Off by default.

The numbers are the plain path's: the matmul runs in the autocast dtype when autocast is on (else in
x's dtype), the soft-cap in that dtype, the loss in fp32. In fp32 both agree to rounding; in bf16 d W is
rounded per chunk rather than once, so it differs in the last bits. The
chunk loop is plain PyTorch (no `.item()`, shapes fixed by N and `chunk_rows`): torch.compile traces it
into one graph, the loop unrolled.
"""

import torch

IGNORE_INDEX = -1
CHUNK_BYTES = 2 ** 28  # default chunk size: rows whose fp32 logits take about this many bytes


def default_chunk_rows(vocab_size: int) -> int:
    """Rows per chunk such that a chunk's fp32 logits take about CHUNK_BYTES."""
    return max(1, CHUNK_BYTES // (vocab_size * 4))


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the plain path's lm_head matmul would run in: autocast's when it is on, else x's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def _chunk(x_c, w, t_c, grad_scale, softcap: float, with_grads: bool):
    """Loss sum of one chunk of rows and, with_grads, d loss / d x_c and d loss / d W (compute dtype)."""
    z = x_c @ w.T
    th = torch.tanh(z / softcap)  # in the compute dtype, as the plain path
    logits = (softcap * th).float()
    lse = torch.logsumexp(logits, dim=-1)
    valid = t_c != IGNORE_INDEX
    safe_t = torch.where(valid, t_c, 0).unsqueeze(1)  # ignored rows pick column 0, then are masked out
    picked = logits.gather(1, safe_t).squeeze(1)
    loss_sum = torch.where(valid, lse - picked, 0.0).sum()
    if not with_grads:
        return loss_sum, None, None
    # d loss / d logits = (softmax - one_hot) / n_valid on kept rows, 0 on ignored ones (in place: no copy)
    grad = logits.sub_(lse.unsqueeze(1)).exp_()
    grad.scatter_add_(1, safe_t, torch.full_like(picked, -1.0).unsqueeze(1))
    grad.mul_(torch.where(valid, grad_scale, 0.0).unsqueeze(1))
    grad.mul_(1.0 - th.float().square())  # d (c tanh(z / c)) / dz = 1 - tanh^2
    dz = grad.to(w.dtype)
    return loss_sum, dz @ w, dz.T @ x_c


def _loop(x, weight, targets, softcap: float, chunk_rows: int, with_grads: bool):
    """(mean loss, d loss / d x in x's dtype, d loss / d W in fp32) over all rows, chunk by chunk."""
    n = x.size(0)
    dtype = compute_dtype(x)
    w = weight.to(dtype)
    n_valid = (targets != IGNORE_INDEX).sum().float()
    grad_scale = 1.0 / n_valid  # a tensor: no host sync; all rows ignored gives nan loss, zero grads (as torch)
    loss_sum = torch.zeros((), dtype=torch.float32, device=x.device)
    dx = torch.empty_like(x) if with_grads else None
    dw = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if with_grads else None
    for start in range(0, n, chunk_rows):
        end = min(start + chunk_rows, n)
        part, dx_c, dw_c = _chunk(x[start:end].to(dtype), w, targets[start:end], grad_scale, softcap, with_grads)
        loss_sum = loss_sum + part
        if with_grads:
            dx[start:end] = dx_c
            dw.add_(dw_c)
    return loss_sum / n_valid, dx, dw


class FusedLinearSoftcapCE(torch.autograd.Function):
    """Mean soft-capped cross-entropy of x @ W.T; gradients computed in forward, scaled in backward."""

    @staticmethod
    def forward(ctx, x, weight, targets, softcap: float, chunk_rows: int):
        loss, dx, dw = _loop(x, weight, targets, softcap, chunk_rows, with_grads=True)
        ctx.save_for_backward(dx, dw.to(weight.dtype))
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        dx, dw = ctx.saved_tensors
        return dx * grad_output, dw * grad_output, None, None, None


def fused_linear_softcap_ce(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, softcap: float,
                            chunk_rows: int | None = None) -> torch.Tensor:
    """cross_entropy(float(softcap * tanh((x @ weight.T) / softcap)), targets, ignore_index=-1), mean.

    x: (..., D), weight: (V, D), targets: x's leading shape. Returns a 0-dim fp32 loss; its gradient
    reaches x (in x's dtype) and weight (in weight's dtype). Without grad mode or inputs needing a
    gradient, only the loss is computed.
    """
    x2 = x.reshape(-1, x.size(-1))
    t = targets.reshape(-1)
    assert x2.size(0) == t.size(0), f"{x2.size(0)} rows of x but {t.size(0)} targets"
    rows = chunk_rows if chunk_rows is not None else default_chunk_rows(weight.size(0))
    if rows < 1:
        raise ValueError(f"chunk_rows={rows}: must be >= 1")
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return FusedLinearSoftcapCE.apply(x2, weight, t, softcap, rows)
    return _loop(x2, weight, t, softcap, rows, with_grads=False)[0]
