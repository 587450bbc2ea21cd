"""What one training step of the model costs, part by part, each timed alone on the GPU.

    python benchmarks/step_floor.py                 # d20, device batch 32, sequence 2048
    python benchmarks/step_floor.py --depth 12 --device_batch_size 64
    python benchmarks/step_floor.py --fused           # only: the --fused_kernels against compile's kernels
    python benchmarks/step_floor.py --loss_blocks     # only: softcap_loss's kernels at each block and warp count

The step's floor, from the shapes of the real model (bench.nanochat.gpt):
  - every nn.Linear of the model, forward and backward, in bf16 (rows = device batch x sequence);
  - causal attention forward and backward through each SDPA kernel that runs these shapes;
  - the loss: lm_head + soft-capped cross-entropy, forward and backward, compiled as the trainer
    compiles it;
  - the optimizers' step (Muon over the block matrices, fused AdamW over embedding and lm_head);
  - each elementwise piece of a block (norm, rotary + QK norm, relu^2, residual add), forward and
    backward, compiled alone, beside its memory floor: the bytes it must move at least (each input read
    once, each output written once) over the GPU's measured copy bandwidth. The same for the loss's
    elementwise part (lm_head + loss less the lm_head matmul).
A micro-step's matmuls, attention and loss add to the time a perfect fusion of everything else would
take; the elementwise rows say how far a faster kernel for each piece could go without fusing it into a
matmul. `--fused` times the hand-written kernels of `--fused_kernels` (bench/nanochat/fused.py) the same
way beside compile's, and checks both against an fp32 reference. Times are medians of CUDA-event timings
after warm-up; the elementwise pieces', the profiler's sum of their kernels' time (a piece this small, timed
between events, would count the host's launch gaps too).
"""

import argparse
import itertools
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from bench.nanochat import fused  # noqa: E402
from bench.nanochat.gpt import GPTConfig, build_model, norm, rotary_then_norm, softcap_cross_entropy  # noqa: E402


BF16_BYTES = 2


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
    return softcap_cross_entropy(F.linear(x, w), targets)


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


def copy_gb_s() -> float:
    """Device-to-device copy bandwidth (bytes read + written per second, in GB/s) over 1 GiB."""
    x = torch.empty(2 ** 29, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    return 2 * x.numel() * x.element_size() / cuda_ms(lambda: y.copy_(x)) / 1e6


def kernel_ms(fn, warmup: int = 3, reps: int = 10) -> float:
    """GPU kernel time of fn() per call, summed by the profiler. Pieces this small, timed between CUDA
    events, would also count the host's launch gaps, which the trainer's queue of work hides."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    kernels_us = sum(e.self_device_time_total for e in prof.key_averages()
                     if e.device_type == torch.autograd.DeviceType.CUDA)
    if kernels_us <= 0:
        raise RuntimeError("the profiler recorded no kernel time")
    return kernels_us / 1e3 / reps


def compiled_fwd_bwd_ms(fn, *shapes) -> float:
    """Kernel time of fn over random bf16 inputs of these shapes, compiled as the trainer compiles,
    forward and backward."""
    return compiled_kernel_ms(fn, [torch.randn(s, device="cuda", dtype=torch.bfloat16) for s in shapes])


def compiled_kernel_ms(fn, inputs: list[torch.Tensor]) -> float:
    """Kernel time of fn over these inputs (the floating-point ones differentiated), compiled as the trainer
    compiles, forward and backward. The input gradients are returned, not added into .grad: that sum is
    no part of the piece (the trainer's are activations' gradients, used once)."""
    inputs = [x.detach().requires_grad_(x.is_floating_point()) for x in inputs]
    differentiated = [x for x in inputs if x.requires_grad]
    compiled = torch.compile(fn, dynamic=False)

    def forward() -> tuple:
        out = compiled(*inputs)
        return out if isinstance(out, tuple) else (out,)
    grads = [torch.randn_like(o) for o in forward()]
    return kernel_ms(lambda: torch.autograd.grad(forward(), differentiated, grads))


def rotary_tables(seq: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random cos and sin tables of the model's rotary shape (1, seq, 1, head_dim / 2), in bf16."""
    cos = torch.rand(1, seq, 1, head_dim // 2, device="cuda", dtype=torch.bfloat16)
    return cos, torch.rand_like(cos)


def elementwise_parts(cfg: GPTConfig, batch: int, seq: int) -> list[tuple[str, int, float, int]]:
    """(piece, times per layer, compiled ms, least bytes moved) for each elementwise piece of a block.
    Least bytes, forward + backward: a unary piece reads x and writes y, then reads dy and x and writes
    dx (5 tensors); the residual add reads two and writes one, and its backward passes dy through."""
    rows, d, heads = batch * seq, cfg.n_embd, cfg.n_head
    head_dim = d // heads
    cos, sin = rotary_tables(seq, head_dim)

    def rotary_qk_norm(q, k):
        return rotary_then_norm(q, cos, sin), rotary_then_norm(k, cos, sin)
    qk = (batch, seq, heads, head_dim)
    return [
        ("norm", 2, compiled_fwd_bwd_ms(norm, (rows, d)), 5 * rows * d * BF16_BYTES),
        ("rotary + QK norm (q and k)", 1, compiled_fwd_bwd_ms(rotary_qk_norm, qk, qk), 2 * 5 * rows * d * BF16_BYTES),
        ("relu^2", 1, compiled_fwd_bwd_ms(lambda h: F.relu(h).square(), (rows, 4 * d)), 5 * rows * 4 * d * BF16_BYTES),
        ("residual add", 2, compiled_fwd_bwd_ms(torch.add, (rows, d), (rows, d)), 3 * rows * d * BF16_BYTES),
    ]


def print_elementwise(cfg: GPTConfig, batch: int, seq: int, loss_only_ms: float) -> float:
    """The elementwise table; returns how many ms per micro-step the pieces alone spend above their floors."""
    gb_s = copy_gb_s()
    rows = batch * seq
    print(f"\ncopy bandwidth {gb_s:,.0f} GB/s (read + written)")
    print(f"{'elementwise piece (fwd + bwd)':<32}{'times':>6}{'kern ms':>9}{'floor ms':>10}{'x floor':>9}"
          f"{'ms per micro-step':>19}{'at floor':>10}")
    pieces = [(name, per_layer * cfg.n_layer, ms, moved)
              for name, per_layer, ms, moved in elementwise_parts(cfg, batch, seq)]
    # the loss's elementwise part reads the bf16 logits, then reads them again and writes their gradient
    pieces.append(("loss (softcap + cross-entropy)", 1, loss_only_ms, 3 * rows * cfg.vocab_size * BF16_BYTES))
    total = at_floor = 0.0
    for name, times, ms, moved in pieces:
        floor = moved / gb_s / 1e6
        print(f"{name:<32}{times:>6}{ms:>9.3f}{floor:>10.3f}{ms / floor:>8.1f}x"
              f"{ms * times:>19.2f}{floor * times:>10.2f}")
        total, at_floor = total + ms * times, at_floor + floor * times
    print(f"{'all elementwise pieces':<56}{'':>9}{total:>19.2f}{at_floor:>10.2f}")
    return total - at_floor


def fp32_error(fn, reference, inputs: list[torch.Tensor]) -> tuple[float, float]:
    """Largest distance of fn's output and input gradients from reference's in fp32, over the same inputs
    and the same output gradient."""
    def run(f, xs):
        xs = [x.detach().clone().requires_grad_(x.dtype.is_floating_point) for x in xs]
        out = f(*xs)
        out.backward(grad.to(out.dtype))
        return out.float(), xs[0].grad.float()
    grad = torch.randn(reference(*inputs).shape, device="cuda")
    out, dx = run(fn, inputs)
    ref_out, ref_dx = run(reference, [x.float() if x.is_floating_point() else x for x in inputs])
    return (out - ref_out).abs().max().item(), (dx - ref_dx).abs().max().item()


# The fused kernel may be no further from the fp32 reference than compile's kernels, by this factor
# (both round to bf16 once at the end; the sums inside may differ in order).
FUSED_TOLERANCE = 1.25


def fused_within_tolerance(fused_errors: tuple[float, ...], compile_errors: tuple[float, ...]) -> bool:
    """Each of the fused kernel's distances (output, gradient) at most FUSED_TOLERANCE x compile's."""
    return all(f <= FUSED_TOLERANCE * c for f, c in zip(fused_errors, compile_errors, strict=True))


def fused_pieces(cfg: GPTConfig, batch: int, seq: int) -> list[tuple[str, object, object, list, int]]:
    """Per kernel of --fused_kernels: (name, the model's code, the kernel, its inputs, least bytes moved
    forward + backward). Rotary + QK norm, of one of q and k: reads x, writes y; reads dy and y, writes dx.
    The loss, of lm_head's bf16 output: reads the logits; reads them again and writes their gradient."""
    head_dim = cfg.n_embd // cfg.n_head
    cos, sin = rotary_tables(seq, head_dim)
    q = torch.randn(batch, seq, cfg.n_head, head_dim, device="cuda", dtype=torch.bfloat16)
    logits = 4 * torch.randn(batch * seq, cfg.vocab_size, device="cuda", dtype=torch.bfloat16)
    targets = torch.randint(0, cfg.vocab_size, (batch * seq,), device="cuda")
    return [
        ("rotary_norm", lambda x: rotary_then_norm(x, cos, sin), lambda x: fused.rotary_qk_norm(x, cos, sin),
         [q], 5 * q.numel() * BF16_BYTES),
        ("softcap_loss", softcap_cross_entropy, fused.softcap_cross_entropy, [logits, targets],
         3 * logits.numel() * BF16_BYTES),
    ]


# The distance from fp32 is taken over the inputs' first rows: fp32 copies of all the loss's logits and their
# gradient would be 32 GiB.
ERROR_ROWS = 4096


def print_fused(cfg: GPTConfig, batch: int, seq: int) -> bool:
    """Each kernel of --fused_kernels (bench/nanochat/fused.py) beside compile's kernels for the model's code:
    kernel time forward and backward, beside the memory floor, and each one's largest distance from an fp32
    reference (output and input gradient). False when a fused kernel is further off than FUSED_TOLERANCE allows."""
    gb_s = copy_gb_s()
    all_within = True
    for name, reference, hand, inputs, moved in fused_pieces(cfg, batch, seq):
        hand(*inputs)  # builds the ops before torch.compile traces them
        print(f"\n{name}, fwd + bwd: floor {moved / gb_s / 1e6:.3f} ms")
        print(f"{'kernels':<10}{'kern ms':>9}{'out err':>10}{'grad err':>10}")
        sample = [x[:ERROR_ROWS] for x in inputs]  # q's first dim is its batch, far fewer: all of q
        errors = {}
        for label, fn in (("compile", reference), ("fused", hand)):
            ms = compiled_kernel_ms(fn, inputs)
            errors[label] = fp32_error(torch.compile(fn, dynamic=False), reference, sample)
            print(f"{label:<10}{ms:>9.3f}{errors[label][0]:>10.4f}{errors[label][1]:>10.4f}")
        within = fused_within_tolerance(errors["fused"], errors["compile"])
        print(f"fused kernel {'within' if within else 'OUTSIDE'} {FUSED_TOLERANCE}x compile's distance from fp32")
        all_within &= within
    return all_within


def print_loss_blocks(cfg: GPTConfig, batch: int, seq: int) -> None:
    """softcap_loss's forward and backward kernels (bench/nanochat/fused.py) at each logits block and warp
    count, beside their memory floors: how VOCAB_BLOCK and LOSS_WARPS were chosen."""
    logits = 4 * torch.randn(batch * seq, cfg.vocab_size, device="cuda", dtype=torch.bfloat16)
    targets = torch.randint(0, cfg.vocab_size, (batch * seq,), device="cuda")
    g = torch.full(targets.shape, 1.0 / targets.numel(), device="cuda")
    floor_ms = logits.numel() * BF16_BYTES / copy_gb_s() / 1e6
    print(f"\nsoftcap_loss kernels: floors forward {floor_ms:.3f} ms (read), backward {2 * floor_ms:.3f} ms")
    loss_op, backward_op = torch.ops.nanochat_bench.softcap_loss, torch.ops.nanochat_bench.softcap_loss_backward
    chosen = fused.VOCAB_BLOCK, fused.LOSS_WARPS
    for block, warps in itertools.product((1024, 2048, 4096, 8192), (4, 8, 16)):
        fused.VOCAB_BLOCK, fused.LOSS_WARPS = block, warps  # read at each launch
        _, lse = loss_op(logits, targets)
        fwd = kernel_ms(lambda: loss_op(logits, targets))
        bwd = kernel_ms(lambda: backward_op(logits, targets, lse, g))
        print(f"block {block:5d} warps {warps:2d}: forward {fwd:.3f} backward {bwd:.3f} ms")
    fused.VOCAB_BLOCK, fused.LOSS_WARPS = chosen


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
    ap.add_argument("--fused", action="store_true", help="only the --fused_kernels kernels against compile's")
    ap.add_argument("--loss_blocks", action="store_true", help="only softcap_loss's kernels at each block size")
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
    if args.fused:
        return 0 if print_fused(cfg, args.device_batch_size, args.max_seq_len) else 1
    if args.loss_blocks:
        fused.softcap_cross_entropy(torch.zeros(1, 8, device="cuda"), torch.zeros(1, dtype=torch.long, device="cuda"))
        print_loss_blocks(cfg, args.device_batch_size, args.max_seq_len)
        return 0

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
    loss_only = parts["lm_head + loss, plain"] - parts["lm_head matmul"]
    saved = print_elementwise(cfg, args.device_batch_size, args.max_seq_len, loss_only)
    # inside the model compile fuses neighbouring pieces, so their time there is the step profile's, not this sum
    print(f"the pieces at their memory floors instead of alone: {saved:.1f} ms less per micro-step")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    sys.exit(main())
