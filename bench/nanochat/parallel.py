"""Memory strategies, applied from outside to a GPT that knows nothing of them (torchtitan's parallelize).

A strategy is a base and modifiers joined by `+` (`--strategy=fsdp+ac+offload`):
- `zero2`: nanochat's own scheme. Parameters are replicated; DistAdamW and DistMuon reduce-scatter the
  gradients and keep optimizer state for their share only (bench/nanochat/adamw.py, muon.py).
- `fsdp`: FSDP2 (`torch.distributed.fsdp.fully_shard`) on the embedding, on every block and on the
  root (which holds lm_head): parameters, gradients and optimizer state sharded by rows over the ranks.
  On CUDA the blocks compute in bf16 (MixedPrecisionPolicy, the same matmul inputs as autocast gives
  the zero2 model) and reduce gradients in fp32; the fp32 master weights stay sharded. The optimizers
  are torch's AdamW and ShardedMuon (GPT.setup_optimizers picks them for DTensor parameters).
- `+ac`: activation checkpointing of every block (torch.utils.checkpoint, non-reentrant): a block keeps
  only its input for the backward pass and recomputes the rest.
- `+offload` (fsdp only): FSDP2's CPUOffloadPolicy: sharded parameters, gradients and optimizer state
  live in pinned host memory; blocks are copied to the GPU as they compute; the optimizer steps on the
  host (Newton-Schulz on the GPU, one matrix at a time).

`parallelize` returns the module to call for training (compiled on request: the whole model for zero2,
block by block for fsdp, as torchtitan does, since FSDP's hooks sit between the blocks). The model is
materialised and initialised before sharding, so every strategy starts from the same weights; the price
is one full fp32 copy of the model per rank during start-up (FSDP then keeps its shard).
"""

import torch
import torch.distributed as dist
import torch.nn as nn

from bench.errors import ConfigError
from bench.nanochat.strategy import Strategy

def parallelize(model: nn.Module, strategy: Strategy, device: torch.device, compile: bool = False) -> nn.Module:
    """Apply the strategy to a materialised GPT in place; returns the module to call for training."""
    if strategy.ac:
        apply_ac(model)
    if not strategy.fsdp:
        return torch.compile(model, dynamic=False) if compile else model
    if not (dist.is_available() and dist.is_initialized()):
        raise ConfigError(f"--strategy={strategy.name} needs a process group: launch with torchrun "
                          f"(e.g. torchrun --standalone --nproc_per_node=1 -m bench.nanochat.train ...)")
    if compile:
        for i, block in enumerate(model.transformer.h):  # identical blocks: one compilation serves all
            model.transformer.h[i] = torch.compile(block, dynamic=False)
    apply_fsdp(model, device, strategy.offload)
    return model


def apply_ac(model: nn.Module) -> None:
    """Wrap every block in a non-reentrant activation checkpoint (torchtitan's full AC)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    blocks = model.transformer.h
    for i, block in enumerate(blocks):
        blocks[i] = checkpoint_wrapper(block, preserve_rng_state=False)  # no dropout: no RNG to replay


def apply_fsdp(model: nn.Module, device: torch.device, offload: bool) -> None:
    """fully_shard the embedding, each block, then the root (lm_head, used by the fused loss as a bare
    weight, stays in the root's unit). FSDP wants one dtype per unit: the embedding is bf16 on CUDA."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    cuda = device.type == "cuda"
    mp = MixedPrecisionPolicy(torch.bfloat16, torch.float32) if cuda else MixedPrecisionPolicy()  # param, reduce
    # pinned host memory makes the copies asynchronous; pinning needs a GPU
    policy = CPUOffloadPolicy(pin_memory=cuda) if offload else OffloadPolicy()
    kw = dict(mesh=mesh, mp_policy=mp, offload_policy=policy)
    fully_shard(model.transformer.wte, **kw)
    blocks = model.transformer.h
    for i, block in enumerate(blocks):
        # the last block is needed again first in the backward pass: keep it gathered
        fully_shard(block, reshard_after_forward=i < len(blocks) - 1, **kw)
    fully_shard(model, **kw)


@torch.no_grad()
def clip_grad_norm_(parameters, max_norm: float) -> float:
    """torch's clip_grad_norm_ for plain tensors (zero2: each rank's local gradients, as upstream);
    for FSDP's sharded gradients, the norm of the whole averaged gradient: squares summed on each
    shard's own device (host memory under offload), then over the ranks."""
    from torch.distributed.tensor import DTensor

    params = [p for p in parameters if p.grad is not None]
    if not any(isinstance(p.grad, DTensor) for p in params):
        return torch.nn.utils.clip_grad_norm_(params, max_norm).item()
    local = [p.grad.to_local() for p in params]
    device = params[0].device_mesh.device_type
    total = torch.zeros((), dtype=torch.float32, device=device)
    for g in local:
        if g.numel():  # in fp32, without a copy of the gradient
            total += torch.linalg.vector_norm(g, dtype=torch.float32).square().to(device)
    if dist.get_world_size() > 1:
        dist.all_reduce(total)
    norm = total.sqrt().item()
    scale = max_norm / (norm + 1e-6)
    if scale < 1:
        torch._foreach_mul_(local, scale)
    return norm
