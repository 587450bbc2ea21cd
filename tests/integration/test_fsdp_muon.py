"""ShardedMuon on FSDP2-sharded matrices equals single-process Muon on the full ones, on 2 real gloo ranks
that see different gradients (the reference sees their mean, as FSDP averages them). The shapes include
row counts that do not split evenly (5 rows: 3 + 2) and a matrix with fewer rows than ranks (1 row: rank 1
holds nothing), so the row bookkeeping of own_rows is exercised where it can go wrong. The gradient norm that
parallel.clip_grad_norm_ reports must be the full averaged gradient's.

    python -m pytest tests/integration/test_fsdp_muon.py -q
"""

import textwrap

import pytest
import torch

from tests.support.two_ranks import run_two_ranks

STEPS = 3
SHAPES = [(8, 8), (5, 8), (1, 8), (16, 8), (8, 16), (8, 8)]

COMMON = textwrap.dedent(f"""
    import torch
    STEPS, SHAPES = {STEPS}, {SHAPES}

    def initial_params():
        torch.manual_seed(0)
        return [torch.randn(s) for s in SHAPES]

    def grad(step, i, rank, shape):
        return torch.randn(shape, generator=torch.Generator().manual_seed(1000 * step + 10 * i + rank))

    def momentum(step):
        return 0.85 + 0.02 * step
""")

WORKER = COMMON + textwrap.dedent("""
    import sys
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    from bench.nanochat.muon import ShardedMuon
    from bench.nanochat.parallel import clip_grad_norm_

    class Matrices(nn.Module):
        def __init__(self, tensors):
            super().__init__()
            self.w = nn.ParameterList([nn.Parameter(t.clone()) for t in tensors])

        def forward(self, xs):  # d loss / d w_i = x_i: each rank's own gradient, averaged by FSDP
            return sum((w * x).sum() for w, x in zip(self.w, xs))

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = Matrices(initial_params())
    fully_shard(model)
    assert all(isinstance(p, DTensor) for p in model.parameters())
    muon = ShardedMuon(list(model.parameters()), lr=0.02, momentum=0.95, compute_device="cpu")
    norms = []
    for step in range(STEPS):
        model([grad(step, i, rank, s) for i, s in enumerate(SHAPES)]).backward()
        norms.append(clip_grad_norm_(model.parameters(), 1e9))  # the norm of the averaged gradient
        for group in muon.param_groups:
            group["momentum"] = momentum(step)
        muon.step()
        model.zero_grad(set_to_none=True)
    full = [p.full_tensor() for p in model.parameters()]
    if rank == 0:
        torch.save((full, norms), sys.argv[1])
    dist.destroy_process_group()
""")


def reference(world_size: int):
    from bench.nanochat.muon import Muon

    scope = {}
    exec(COMMON, scope)
    params = scope["initial_params"]()
    muon = Muon(params, lr=0.02, momentum=0.95)
    norms = []
    for step in range(STEPS):
        for i, p in enumerate(params):
            p.grad = sum(scope["grad"](step, i, r, p.shape) for r in range(world_size)) / world_size
        norms.append(torch.sqrt(sum((p.grad ** 2).sum() for p in params)).item())
        for group in muon.param_groups:
            group["momentum"] = scope["momentum"](step)
        muon.step()
    return params, scope["initial_params"](), norms


@pytest.mark.slow
def test_sharded_muon_equals_unsharded_muon(tmp_path):
    out = run_two_ranks(tmp_path, WORKER)
    sharded, norms = torch.load(out)
    single, initial, ref_norms = reference(world_size=2)
    assert norms == pytest.approx(ref_norms, rel=1e-5)  # clip_grad_norm_ sums the shards over the ranks
    for i, (a, b, p0) in enumerate(zip(sharded, single, initial)):
        assert a.shape == b.shape == SHAPES[i]
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"param {i} {SHAPES[i]}: max diff {(a - b).abs().max()}"
        assert (a - p0).abs().max() > 1e-3, f"param {i} did not move"
