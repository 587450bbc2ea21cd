"""Muon (MomentUm Orthogonalized by Newton-Schulz) and its sharded form, as nanochat uses them.

Mirrors karpathy/nanochat nanochat/muon.py (after Keller Jordan's Muon and modded-nanogpt):
SGD momentum with Nesterov, the update orthogonalised by five quintic Newton-Schulz steps in bf16,
scaled by sqrt(max(1, rows/cols)). For the 2-D matrices of the transformer blocks only.

DistMuon shards the work: within each group of same-shaped params, param base+r is owned by rank r;
a reduce_scatter(AVG) hands each owner its averaged gradient, the owner alone keeps the momentum and
computes the update, and an all_gather replicates the new weights. All communication happens in
`step()` (none overlaps the backward pass), as upstream.
"""

import functools
from typing import Callable, Iterable

import torch
import torch.distributed as dist
from torch import Tensor

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
    return torch.compile(zeropower_via_newtonschulz5)


def orthogonalize(G: Tensor, steps: int) -> Tensor:
    """Newton-Schulz: compiled and in bf16 on CUDA, as upstream. Elsewhere eager and in fp32: CPUs
    without bf16 matrix units emulate bf16 matmuls ~100x slower, and the CPU path only serves tests
    and smoke runs, not measurements."""
    if G.is_cuda:
        return _ns5_compiled()(G, steps)
    return zeropower_via_newtonschulz5(G, steps, dtype=torch.float32)


def muon_update(p: Tensor, g: Tensor, state: dict, group: dict) -> None:
    """One Muon step of p in place: momentum (Nesterov), orthogonalise, aspect-ratio scaled step."""
    if "momentum_buffer" not in state:
        state["momentum_buffer"] = torch.zeros_like(g)
    buf: Tensor = state["momentum_buffer"]
    buf.lerp_(g, 1 - group["momentum"])
    g = g.lerp_(buf, group["momentum"]) if group["nesterov"] else buf
    g = orthogonalize(g, steps=group["ns_steps"])
    p.add_(g, alpha=-group["lr"] * max(1, p.size(-2) / p.size(-1)) ** 0.5)


def _quiet(*args, **kwargs) -> None:
    pass


class Muon(torch.optim.Optimizer):
    """Single-process Muon. Params are grouped by size (upstream's grouping; it does not change the maths)."""

    def __init__(self, params: Iterable[Tensor], lr: float = 0.02, momentum: float = 0.95,
                 nesterov: bool = True, ns_steps: int = 5, log: Callable = _quiet):
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps)
        params = list(params)
        sizes = sorted({p.numel() for p in params})
        super().__init__([dict(params=[p for p in params if p.numel() == s]) for s in sizes], defaults)

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                assert p.grad is not None
                muon_update(p, p.grad, self.state[p], group)


class DistMuon(torch.optim.Optimizer):
    """Muon with gradient averaging and work split across ranks (see the module docstring)."""

    def __init__(self, params: Iterable[Tensor], lr: float = 0.02, momentum: float = 0.95,
                 nesterov: bool = True, ns_steps: int = 5, log: Callable = _quiet):
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps)
        params = list(params)
        assert all(p.ndim == 2 for p in params), "Muon expects 2-D parameters only"
        shapes = sorted({tuple(p.shape) for p in params})  # sorted: the same order on every rank
        param_groups = []
        for shape in shapes:
            group_params = [p for p in params if tuple(p.shape) == shape]
            device, dtype = group_params[0].device, group_params[0].dtype
            assert all(p.device == device and p.dtype == dtype for p in group_params)
            log(f"Muon: Grouping {len(group_params)} params of shape {torch.Size(shape)}, "
                f"device {device}, dtype {dtype}")
            param_groups.append(dict(params=group_params, zero_buffer=torch.zeros_like(group_params[0])))
        super().__init__(param_groups, defaults)

    @torch.no_grad()
    def step(self) -> None:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        assert all(p.grad is not None for group in self.param_groups for p in group["params"])
        # Phase 1: start every reduce_scatter; each owner receives its param's gradient averaged.
        reduce_works = []
        for group in self.param_groups:
            params, zero_buffer = group["params"], group["zero_buffer"]
            for base in range(0, len(params), world_size):
                owner = base + rank
                rs_input = [p.grad for p in params[base:base + world_size]]
                rs_input.extend([zero_buffer] * (world_size - len(rs_input)))  # pad the last chunk
                rs_output = params[owner].grad if owner < len(params) else torch.empty_like(zero_buffer)
                reduce_works.append(dist.reduce_scatter(rs_output, rs_input, op=dist.ReduceOp.AVG, async_op=True))
        # Phase 2: as each chunk arrives, the owner updates its param; then all_gather the chunk.
        gather_works = []
        i = 0
        for group in self.param_groups:
            params, zero_buffer = group["params"], group["zero_buffer"]
            for base in range(0, len(params), world_size):
                owner = base + rank
                reduce_works[i].wait()
                i += 1
                if owner < len(params):
                    p = params[owner]
                    muon_update(p, p.grad, self.state[p], group)
                ag_input = params[owner] if owner < len(params) else zero_buffer
                ag_output = params[base:base + world_size]
                ag_output.extend(torch.empty_like(zero_buffer) for _ in range(world_size - len(ag_output)))
                gather_works.append(dist.all_gather(ag_output, ag_input, async_op=True))
        for work in gather_works:
            work.wait()
