"""Batch-size scaling: keep total_batch_size fixed as ranks grow (DESIGN.md, "Scaling rules").

Every point of a sweep trains the same model the same way: the tokens per optimizer step stay at
`total_batch_size`, and gradient accumulation makes up the difference,
    grad_accum = total_batch_size / (device_batch_size x max_seq_len x ranks).
When that is not a whole number the device batch size is lowered until it is; when no device batch
size works the point is impossible, and the reason names the totals that would work.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchFit:
    """How one point reaches total_batch_size, or why it cannot (`reason` set, the rest 0)."""

    device_batch_size: int
    grad_accum: int
    note: str = ""
    reason: str = ""

    @property
    def possible(self) -> bool:
        return not self.reason


def fit_batch(total_batch_size: int, device_batch_size: int, max_seq_len: int, ranks: int) -> BatchFit:
    """The largest device batch size <= the asked one that divides total_batch_size evenly."""
    per_rank_seq = max_seq_len * ranks  # tokens of one sequence on every rank
    if total_batch_size % per_rank_seq:
        lo = total_batch_size // per_rank_seq * per_rank_seq
        options = [t for t in (lo, lo + per_rank_seq) if t > 0]
        return BatchFit(0, 0, reason=(
            f"total_batch_size {total_batch_size:,} is not a multiple of max_seq_len x ranks = "
            f"{max_seq_len} x {ranks} = {per_rank_seq:,}; totals that work: "
            + " or ".join(f"{t:,}" for t in options)))
    sequences = total_batch_size // per_rank_seq  # sequences per rank per optimizer step
    for dbs in range(min(device_batch_size, sequences), 0, -1):
        if sequences % dbs == 0:
            note = "" if dbs == device_batch_size else f"device batch lowered from {device_batch_size} to {dbs}"
            return BatchFit(dbs, sequences // dbs, note)
    raise AssertionError("unreachable: a device batch size of 1 always divides")


def flops_per_token(depth: int, max_seq_len: int, vocab_size: int = 65536) -> float:
    """nanochat's FLOPs per token for a depth-`depth` GPT (GPT.estimate_flops: 6 x non-embedding
    parameters + attention 12 x layers x width x seq), from the shape rules alone: width 64 x depth,
    untied embedding and lm_head, 4x MLP. Used only to estimate node-hours before anything runs."""
    width = 64 * depth
    block_params = 12 * width * width * depth  # attention 4 w^2 + MLP 8 w^2, per layer
    lm_head = vocab_size * width
    return 6 * (block_params + lm_head) + 12 * depth * width * max_seq_len
