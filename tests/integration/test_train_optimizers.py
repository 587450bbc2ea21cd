"""The sharded optimizers equal the single-process ones: DistAdamW vs torch AdamW, DistMuon vs Muon,
on 2 real gloo ranks that see different gradients (the single-process reference sees their mean).

    python -m pytest tests/integration/test_train_optimizers.py -q
"""

import textwrap

import pytest
import torch

from tests.support.two_ranks import run_two_ranks

STEPS = 4
SHAPES_MUON = [(8, 8), (8, 8), (8, 8), (16, 8), (8, 16)]  # three of one shape: an uneven last chunk for W=2
SHAPES_ADAM = [(6, 8), (6, 4)]
ADAM_LRS = [0.01, 0.02]

COMMON = textwrap.dedent(f"""
    import torch
    STEPS, SHAPES_MUON, SHAPES_ADAM, ADAM_LRS = {STEPS}, {SHAPES_MUON}, {SHAPES_ADAM}, {ADAM_LRS}

    def initial_params():
        torch.manual_seed(0)
        return [torch.randn(s) for s in SHAPES_MUON], [torch.randn(s) for s in SHAPES_ADAM]

    def grad(step, i, rank, shape):
        return torch.randn(shape, generator=torch.Generator().manual_seed(1000 * step + 10 * i + rank))

    def momentum(step):
        return 0.85 + 0.02 * step  # changes every step, as the trainer's schedule does
""")

WORKER = COMMON + textwrap.dedent("""
    import sys
    import torch.distributed as dist
    from bench.nanochat.adamw import DistAdamW
    from bench.nanochat.muon import DistMuon

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mats, embs = initial_params()
    adam = DistAdamW([dict(params=[p], lr=lr) for p, lr in zip(embs, ADAM_LRS)], betas=(0.8, 0.95), eps=1e-10,
                     weight_decay=0.1)
    muon = DistMuon(mats, lr=0.02, momentum=0.95)
    params = mats + embs
    for step in range(STEPS):
        for i, p in enumerate(params):
            p.grad = grad(step, i, rank, p.shape)
        for group in muon.param_groups:
            group["momentum"] = momentum(step)
        adam.step()
        muon.step()
    if rank == 0:
        torch.save([p.detach() for p in params], sys.argv[1])
    dist.destroy_process_group()
""")


def reference(world_size: int):
    from bench.nanochat.muon import Muon

    scope = {}
    exec(COMMON, scope)
    mats, embs = scope["initial_params"]()
    adam = torch.optim.AdamW([dict(params=[p], lr=lr) for p, lr in zip(embs, ADAM_LRS)], betas=(0.8, 0.95),
                             eps=1e-10, weight_decay=0.1)
    muon = Muon(mats, lr=0.02, momentum=0.95)
    params = mats + embs
    for step in range(STEPS):
        for i, p in enumerate(params):
            p.grad = sum(scope["grad"](step, i, r, p.shape) for r in range(world_size)) / world_size
        for group in muon.param_groups:
            group["momentum"] = scope["momentum"](step)
        adam.step()
        muon.step()
    return [p.detach() for p in params]


@pytest.mark.slow
def test_sharded_optimizers_equal_single_process(tmp_path):
    out = run_two_ranks(tmp_path, WORKER)
    sharded = torch.load(out)
    single = reference(world_size=2)
    for i, (a, b) in enumerate(zip(sharded, single)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"param {i}: max diff {(a - b).abs().max()}"
    # and the updates were real: every param moved away from its initial value
    scope = {}
    exec(COMMON, scope)
    mats, embs = scope["initial_params"]()
    for i, (a, p0) in enumerate(zip(sharded, mats + embs)):
        assert (a - p0).abs().max() > 1e-3, f"param {i} did not move"
