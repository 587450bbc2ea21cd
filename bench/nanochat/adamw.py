"""Sharded AdamW in the style of ZeRO-2 (mirrors karpathy/nanochat nanochat/adamw.py, from modded-nanogpt).

Each param's gradient is reduce-scattered (AVG) along dim 0, so rank r receives the averaged rows
[r*n/W, (r+1)*n/W); it updates only that slice, keeping Adam state for it alone, and an all_gather
puts the full param back on every rank. Not a general optimizer: every param's first dim must divide
by the world size (the embedding and lm_head have vocab-size rows). The single-process path is torch's
own AdamW (fused on CUDA), as upstream.

The maths differs from torch.optim.AdamW only in where eps sits: upstream computes
lr * sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps), torch m / (sqrt(v)/sqrt(1-b2^t) + eps); with
eps = 1e-10 the two agree to rounding.
"""

import warnings

import torch
import torch.distributed as dist
from torch import Tensor

from bench.errors import ConfigError
from bench.nanochat import steptimer

# Newer torch renames reduce_scatter_tensor (same collective); the old name works on every version we support.
warnings.filterwarnings("ignore", message=r".*reduce_scatter_tensor.* is deprecated")


class DistAdamW(torch.optim.Optimizer):
    def __init__(self, param_groups, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(param_groups, defaults)
        world_size = dist.get_world_size()
        for group in self.param_groups:
            for p in group["params"]:
                if p.shape[0] % world_size:
                    raise ConfigError(
                        f"sharded AdamW needs a first dimension divisible by the world size: a parameter of "
                        f"shape {tuple(p.shape)} cannot be split over {world_size} ranks (the vocabulary size "
                        f"must be a multiple of the number of ranks)")
        devices = {p.device.type for g in self.param_groups for p in g["params"]}
        # Upstream compiles the whole step; only on CUDA here (no C++ compiler needed on CPU).
        self._step = torch.compile(self._step_impl) if devices == {"cuda"} else self._step_impl

    def step(self) -> None:
        self._step()

    @torch.no_grad()
    def _step_impl(self) -> None:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        reduce_works = []
        grad_slices: list[Tensor] = []
        for group in self.param_groups:
            for p in group["params"]:
                grad = p.grad
                rank_size = grad.shape[0] // world_size
                grad_slice = torch.empty_like(grad[:rank_size])
                reduce_works.append(dist.reduce_scatter_tensor(grad_slice, grad, op=dist.ReduceOp.AVG, async_op=True))
                grad_slices.append(grad_slice)

        gather_works = []
        idx = 0
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            eps, wd = group["eps"], group["weight_decay"]
            for p in group["params"]:
                steptimer.wait(reduce_works[idx])
                rank_size = p.shape[0] // world_size
                p_slice = p[rank * rank_size:(rank + 1) * rank_size]
                lr = group["lr"] * getattr(p, "lr_mul", 1.0)
                state = self.state[p]
                g_slice = grad_slices[idx]
                if not state:
                    state["step"] = torch.tensor(0, dtype=torch.int64, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p_slice)
                    state["exp_avg_sq"] = torch.zeros_like(p_slice)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                t = state["step"]
                if wd != 0:  # decoupled weight decay
                    p_slice.mul_(1 - lr * wd * getattr(p, "wd_mul", 1.0))
                exp_avg.mul_(beta1).add_(g_slice, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(g_slice, g_slice, value=1 - beta2)
                bias1, bias2 = 1 - beta1 ** t, 1 - beta2 ** t
                denom = exp_avg_sq.sqrt().add_(eps)
                step_size = lr * (torch.sqrt(bias2) / bias1)
                p_slice.add_(exp_avg.div(denom).mul_(step_size), alpha=-1.0)
                idx += 1
                gather_works.append(dist.all_gather_into_tensor(p, p_slice, async_op=True))
        for work in gather_works:
            steptimer.wait(work)
