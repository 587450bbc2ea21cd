"""Bits per byte (bench/nanochat/loss_eval.py) against a hand computation.

    python -m pytest tests/unit/nanochat/test_loss_eval.py -q
"""

import math

import torch
import torch.nn.functional as F

from bench.nanochat.loss_eval import evaluate_bpb


class FixedLogits(torch.nn.Module):
    """A 'model' with fixed logits per position, so the per-token losses are known."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, x, y, loss_reduction="mean"):
        return F.cross_entropy(self.logits.view(-1, self.logits.size(-1)), y.view(-1), ignore_index=-1,
                               reduction=loss_reduction)


def test_bpb_excludes_special_tokens_and_ignored_targets():
    torch.manual_seed(0)
    V = 6
    token_bytes = torch.tensor([1, 2, 3, 4, 0, 0], dtype=torch.int32)  # ids 4, 5 are special
    logits = torch.randn(2, 4, V)
    y = torch.tensor([[0, 4, 3, -1], [5, 1, 2, 2]])
    losses = F.cross_entropy(logits.view(-1, V), y.view(-1), ignore_index=-1, reduction="none")
    keep = [i for i, t in enumerate(y.view(-1).tolist()) if t >= 0 and token_bytes[t] > 0]
    expected = losses[keep].sum().item() / (math.log(2) * sum(token_bytes[y.view(-1)[i]].item() for i in keep))
    bpb = evaluate_bpb(FixedLogits(logits), [(y, y)], steps=1, token_bytes=token_bytes)
    assert abs(bpb - expected) < 1e-6


def test_bpb_is_infinite_without_bytes():
    token_bytes = torch.zeros(4, dtype=torch.int32)
    y = torch.zeros(1, 3, dtype=torch.long)
    assert evaluate_bpb(FixedLogits(torch.zeros(1, 3, 4)), [(y, y)], 1, token_bytes) == float("inf")


def test_uniform_model_bpb():
    V = 8
    token_bytes = torch.full((V,), 2, dtype=torch.int32)
    y = torch.randint(0, V, (3, 5))
    bpb = evaluate_bpb(FixedLogits(torch.zeros(3, 5, V)), [(y, y)] * 2, steps=2, token_bytes=token_bytes)
    assert abs(bpb - math.log(V) / (math.log(2) * 2)) < 1e-6  # 3 bits per token over 2 bytes
