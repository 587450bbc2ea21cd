"""Bits per byte: the validation metric (mirrors karpathy/nanochat nanochat/loss_eval.py).

Loss in nats per token depends on the tokenizer; bits per byte does not: sum the per-token losses,
divide by the UTF-8 bytes those target tokens stand for, convert nats to bits. Special tokens (BOS)
have 0 bytes in `token_bytes` and drop out of both sums; ignored targets (< 0) too.
"""

import math

import torch
import torch.distributed as dist


@torch.no_grad()
def evaluate_bpb(model, batches, steps: int, token_bytes: torch.Tensor) -> float:
    """bpb over `steps` batches of (x, y), summed over all ranks; inf when no byte was seen."""
    device = token_bytes.device
    total_nats = torch.tensor(0.0, dtype=torch.float32, device=device)
    total_bytes = torch.tensor(0, dtype=torch.int64, device=device)
    batch_iter = iter(batches)
    for _ in range(steps):
        x, y = next(batch_iter)
        loss2d = model(x, y, loss_reduction="none").view(-1)  # per-token nats
        y = y.view(-1)
        if (y < 0).any():  # ignored targets: no bytes, no loss (a rare, slower path)
            valid = y >= 0
            num_bytes = torch.where(valid, token_bytes[torch.where(valid, y, torch.zeros_like(y))],
                                    torch.zeros_like(y, dtype=token_bytes.dtype))
        else:
            num_bytes = token_bytes[y]
        total_nats += (loss2d * (num_bytes > 0)).sum()
        total_bytes += num_bytes.sum()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(total_nats, op=dist.ReduceOp.SUM)
        dist.all_reduce(total_bytes, op=dist.ReduceOp.SUM)
    total_nats, total_bytes = total_nats.item(), total_bytes.item()  # .item() syncs with the device
    if total_bytes == 0:
        return float("inf")
    return total_nats / (math.log(2) * total_bytes)
