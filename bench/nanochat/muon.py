"""Muon (MomentUm Orthogonalized by Newton-Schulz) and its sharded form, as nanochat uses them.

Mirrors karpathy/nanochat nanochat/muon.py (after Keller Jordan's Muon and modded-nanogpt):
SGD momentum with Nesterov, the update orthogonalised by five quintic Newton-Schulz steps in bf16,
scaled by sqrt(max(1, rows/cols)). For the 2-D matrices of the transformer blocks only.

The matrices of one shape are stacked and go through momentum and Newton-Schulz as one batch (as
upstream's later Muon does): the same maths matrix by matrix, in a few large kernels. Done one matrix at
a time, a d20 step spent about 118 ms in the optimizer on one H200, most of it launching ~5,000 small
kernels (benchmarks/step_floor.py; results/h200-d20/README.md).

DistMuon shards the work: each group of same-shaped matrices is split into one contiguous block per
rank (the last padded with zeros); a reduce_scatter(AVG) hands each rank the averaged gradients of its
block, the rank alone keeps their momentum and computes their update, and an all_gather replicates
the new weights. All communication happens in `step()` (none overlaps the backward pass), as upstream.

ShardedMuon is Muon for parameters that FSDP2 has sharded by rows (DTensors, Shard(0)), after the
Distributed Muon of Liu et al. 2025, "Muon is Scalable for LLM Training" (Moonlight): each rank keeps
the momentum of its own rows only; momentum and Nesterov are elementwise, so they run on the shard;
the blended rows are all-gathered into the full matrix for Newton-Schulz, which needs it whole, and
each rank keeps only its rows of the result. One matrix at a time, so the step's extra memory is one
full matrix, not a stack of them; every rank orthogonalises every matrix (W-fold redundant work, no
extra communication). Shards held in host memory (CPU offload) are orthogonalised on `compute_device`.
"""

import functools
from typing import Callable, Iterable

import torch
import torch.distributed as dist
from torch import Tensor

from bench.nanochat import steptimer

NS_COEFFS = (3.4445, -4.7750, 2.0315)  # quintic coefficients maximising the slope at zero


def zeropower_via_newtonschulz5(G: Tensor, steps: int, dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """Approximately orthogonalise G (U S' V^T with S' ~ U(0.5, 1.5) rather than U V^T), in bf16."""
    assert G.ndim >= 2
    a, b, c = NS_COEFFS
    X = G.to(dtype)
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)  # spectral norm at most 1
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


@functools.cache
def _ns5_compiled():
    """torch.compile'd Newton-Schulz, made at the first CUDA call (importing the compiler costs seconds)."""
    return torch.compile(zeropower_via_newtonschulz5, dynamic=False)  # one graph per group shape


def orthogonalize(G: Tensor, steps: int) -> Tensor:
    """Newton-Schulz: compiled and in bf16 on CUDA, as upstream. Elsewhere eager and in fp32: CPUs
    without bf16 matrix units emulate bf16 matmuls ~100x slower, and the CPU path only serves tests
    and smoke runs, not measurements."""
    if G.is_cuda:
        return _ns5_compiled()(G, steps)
    return zeropower_via_newtonschulz5(G, steps, dtype=torch.float32)


def _momentum(grads: Tensor, state: dict, group: dict) -> Tensor:
    """What Newton-Schulz orthogonalises: the gradients blended with their momentum (Nesterov). Updates
    the momentum buffer in `state` in place (made like grads at the first step); overwrites grads."""
    if "momentum_buffer" not in state:
        state["momentum_buffer"] = torch.zeros_like(grads)
    buf, momentum = state["momentum_buffer"], group["momentum"]
    buf.lerp_(grads, 1 - momentum)
    return grads.lerp_(buf, momentum) if group["nesterov"] else buf


def step_size(group: dict, shape: torch.Size) -> float:
    """The learning rate, scaled by sqrt(max(1, rows/cols)) for the matrices' aspect ratio."""
    return group["lr"] * max(1, shape[-2] / shape[-1]) ** 0.5


def _quiet(*args, **kwargs) -> None:
    pass


def _group_by_shape(params: list[Tensor], log: Callable) -> list[dict]:
    """One param group per matrix shape, in sorted shape order (the same on every rank)."""
    assert all(p.ndim == 2 for p in params), "Muon expects 2-D parameters only"
    groups = []
    for shape in sorted({tuple(p.shape) for p in params}):
        group_params = [p for p in params if tuple(p.shape) == shape]
        device, dtype = group_params[0].device, group_params[0].dtype
        assert all(p.device == device and p.dtype == dtype for p in group_params)
        log(f"Muon: Grouping {len(group_params)} params of shape {torch.Size(shape)}, device {device}, dtype {dtype}")
        groups.append(dict(params=group_params))
    return groups


class Muon(torch.optim.Optimizer):
    """Single-process Muon, the matrices of one shape stacked into one batch (see the module docstring)."""

    def __init__(self, params: Iterable[Tensor], lr: float = 0.02, momentum: float = 0.95,
                 nesterov: bool = True, ns_steps: int = 5, log: Callable = _quiet):
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps)
        super().__init__(_group_by_shape(list(params), log), defaults)

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            params = group["params"]
            assert all(p.grad is not None for p in params)
            grads = torch.stack([p.grad for p in params])
            blended = _momentum(grads, self.state[params[0]], group)  # the group's stacked state, on its first param
            update = orthogonalize(blended, steps=group["ns_steps"]).to(params[0].dtype)
            torch._foreach_add_(params, list(update.unbind(0)), alpha=-step_size(group, params[0].shape))


class DistMuon(Muon):
    """Muon with gradient averaging and work split across ranks (see the module docstring)."""

    @torch.no_grad()
    def step(self) -> None:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        assert all(p.grad is not None for group in self.param_groups for p in group["params"])
        # Phase 1: start every group's reduce_scatter; rank r receives the averaged gradients of its block.
        pending = []
        for group in self.param_groups:
            params = group["params"]
            block = -(-len(params) // world_size)  # matrices per rank, the last block padded with zeros
            pad = [torch.zeros_like(params[0])] * (block * world_size - len(params))
            grads = torch.stack([p.grad for p in params] + pad)
            own_grads = torch.empty_like(grads[:block])
            work = dist.reduce_scatter_tensor(own_grads, grads, op=dist.ReduceOp.AVG, async_op=True)
            pending.append((group, block, own_grads, work))
        # Phase 2: as each group's gradients arrive, update the own block, then all_gather the new weights.
        gathers = []
        for group, block, own_grads, work in pending:
            params = group["params"]
            steptimer.wait(work)
            own = params[rank * block:(rank + 1) * block]  # fewer than `block` (or none) at the end
            blended = _momentum(own_grads, self.state[params[0]], group)
            update = orthogonalize(blended, steps=group["ns_steps"]).to(params[0].dtype)
            weights = torch.stack(own + [torch.zeros_like(params[0])] * (block - len(own)))
            weights.add_(update, alpha=-step_size(group, params[0].shape))
            gathered = torch.empty((block * world_size, *params[0].shape), dtype=weights.dtype, device=weights.device)
            gathers.append((params, gathered, dist.all_gather_into_tensor(gathered, weights, async_op=True)))
        for params, gathered, work in gathers:
            steptimer.wait(work)
            torch._foreach_copy_(params, list(gathered[:len(params)].unbind(0)))


class ShardedMuon(Muon):
    """Muon on FSDP2-sharded matrices (see the module docstring); gradients arrive averaged by FSDP."""

    def __init__(self, params: Iterable[Tensor], compute_device: torch.device | str | None = None, **kwargs):
        super().__init__(params, **kwargs)
        if compute_device is None:
            compute_device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
        self.compute_device = torch.device(compute_device)

    @torch.no_grad()
    def step(self) -> None:
        from torch.distributed.tensor import DTensor, Shard

        for group in self.param_groups:
            for p in group["params"]:
                assert isinstance(p, DTensor) and p.placements == (Shard(0),), "ShardedMuon: FSDP2 row shards only"
                local = p.grad.to_local()  # this rank's rows of the averaged gradient
                blended = _momentum(local, self.state[p], group)  # state on the shard's device (host under offload)
                blended = blended.to(self.compute_device)
                rows = DTensor.from_local(blended, p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
                update = orthogonalize(rows.full_tensor(), steps=group["ns_steps"])
                mine = own_rows(update, p.shape[0], local.shape[0], p.device_mesh)
                p.to_local().add_(mine.to(device=local.device, dtype=p.dtype), alpha=-step_size(group, p.shape))


def own_rows(full: Tensor, rows: int, local_rows: int, mesh) -> Tensor:
    """This rank's rows of a full matrix, as FSDP2 splits dim 0: torch.chunk's blocks of ceil(rows/W)."""
    world, rank = mesh.size(), mesh.get_local_rank()
    start = min(rows, rank * -(-rows // world))
    assert local_rows == min(rows - start, -(-rows // world)), "shard rows differ from FSDP2's torch.chunk split"
    return full[start:start + local_rows]
