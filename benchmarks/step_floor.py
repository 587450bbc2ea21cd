"""What one training step of the model costs, part by part, each timed alone on the GPU.

    python benchmarks/step_floor.py                 # d20, device batch 32, sequence 2048
    python benchmarks/step_floor.py --depth 12 --device_batch_size 64

The step's floor, from the shapes of the real model (bench.nanochat.gpt):
  - every nn.Linear of the model, forward and backward, in bf16 (rows = device batch x sequence);
  - causal attention forward and backward through each SDPA kernel that runs these shapes;
  - the loss: lm_head + soft-capped cross-entropy, forward and backward, compiled as the trainer
    compiles it;
  - the optimizers' step (Muon over the block matrices, fused AdamW over embedding and lm_head).
A micro-step's parts add to the time a perfect fusion of everything else would take; the gap to the
trainer's measured step is the elementwise work (norms, rotary, relu^2, residuals) and overheads.
Times are medians of CUDA-event timings after warm-up.
"""

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from bench.nanochat.gpt import GPTConfig, build_model, softcap_logits  # noqa: E402


def cuda_ms(fn, warmup: int = 3, reps: int = 10) -> float:
    """Median milliseconds of fn() between CUDA events."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def linear_ms(rows: int, fan_in: int, fan_out: int) -> float:
    """Forward and backward of one bias-free linear layer in bf16: 3 matmuls."""
    x = torch.randn(rows, fan_in, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(fan_out, fan_in, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    gy = torch.randn(rows, fan_out, device="cuda", dtype=torch.bfloat16)
    return cuda_ms(lambda: F.linear(x, w).backward(gy))


def attention_ms(batch: int, heads: int, seq: int, head_dim: int, backend: SDPBackend) -> float | None:
    """Causal SDPA forward and backward through one kernel; None if it does not run these shapes."""
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    gy = torch.randn_like(q)

    def fwd_bwd():
        with sdpa_kernel([backend]):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(gy)
    try:
        return cuda_ms(fwd_bwd)
    except RuntimeError:
        return None


def plain_loss(x, w, targets):
    """The model's own loss path (GPT.forward after the last norm)."""
    logits = softcap_logits(F.linear(x, w))
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def loss_ms(rows: int, dim: int, vocab: int, fn) -> float:
    """lm_head + loss forward and backward, compiled, under bf16 autocast as the trainer runs it."""
    x = torch.randn(rows, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(vocab, dim, device="cuda") / dim ** 0.5).requires_grad_()
    targets = torch.randint(0, vocab, (rows,), device="cuda")
    compiled = torch.compile(fn, dynamic=False)

    def fwd_bwd():
        with torch.amp.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(x, w, targets)
        loss.backward()
    return cuda_ms(fwd_bwd)


def optimizer_ms(depth: int, vocab: int) -> dict[str, float]:
    """The single-GPU optimizers' step over the model's own parameters, with random gradients."""
    model = build_model(GPTConfig.from_depth(depth, vocab), "cuda")
    adamw, muon = model.setup_optimizers(log=lambda *_: None)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    return {"muon step": cuda_ms(muon.step), "adamw step": cuda_ms(adamw.step)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--device_batch_size", type=int, default=32)
    ap.add_argument("--max_seq_len", type=int, default=2048)
    ap.add_argument("--vocab_size", type=int, default=65536)
    ap.add_argument("--step_ms", type=float, default=None, help="a measured micro-step (ms) to compare with")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("step_floor needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = GPTConfig.from_depth(args.depth, args.vocab_size, args.max_seq_len)
    rows = args.device_batch_size * args.max_seq_len
    head_dim = cfg.n_embd // cfg.n_head
    print(f"d{args.depth}: width {cfg.n_embd}, {cfg.n_head} heads of {head_dim}, rows per micro-step {rows:,}, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}")

    parts: dict[str, float] = {}
    block_shapes = [(cfg.n_embd, cfg.n_embd)] * 4 + [(cfg.n_embd, 4 * cfg.n_embd), (4 * cfg.n_embd, cfg.n_embd)]
    per_layer = sum(linear_ms(rows, fi, fo) for fi, fo in block_shapes)
    flops = 6 * rows * sum(fi * fo for fi, fo in block_shapes)
    parts["block matmuls"] = per_layer * cfg.n_layer
    print(f"block matmuls: {per_layer:.2f} ms per layer, {flops / per_layer / 1e9:.0f} TFLOP/s")
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        ms = attention_ms(args.device_batch_size, cfg.n_head, args.max_seq_len, head_dim, backend)
        print(f"attention {backend.name}: " + (f"{ms:.2f} ms per layer" if ms is not None else "does not run"))
        if ms is not None:
            parts[f"attention ({backend.name})"] = ms * cfg.n_layer
    parts["lm_head matmul"] = linear_ms(rows, cfg.n_embd, args.vocab_size)
    parts["lm_head + loss, plain"] = loss_ms(rows, cfg.n_embd, args.vocab_size, plain_loss)
    step_parts = optimizer_ms(args.depth, args.vocab_size)

    print(f"\n{'part (per micro-step)':<34}{'ms':>9}")
    for name, ms in parts.items():
        print(f"{name:<34}{ms:>9.2f}")
    print(f"\n{'part (per optimizer step)':<34}{'ms':>9}")
    for name, ms in step_parts.items():
        print(f"{name:<34}{ms:>9.2f}")
    floor = parts["block matmuls"] + min(v for k, v in parts.items() if k.startswith("attention")) \
        + min(v for k, v in parts.items() if k.startswith("lm_head + loss"))
    print(f"\nfloor per micro-step (matmuls + fastest attention + fastest loss): {floor:.1f} ms "
          f"= {rows / floor * 1e3:,.0f} tok/s before optimizer and elementwise work")
    if args.step_ms:
        print(f"measured micro-step {args.step_ms:.1f} ms: {args.step_ms - floor:.1f} ms above the floor")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    sys.exit(main())
