"""Muon stacks same-shaped matrices; the result must equal Muon's definition applied matrix by matrix."""

import torch

from bench.nanochat.muon import Muon, zeropower_via_newtonschulz5

SHAPES = [(8, 8), (16, 8), (8, 8), (8, 16), (8, 8)]  # shapes interleaved: grouping must not reorder params


def reference_step(params, grads, buffers, lr, momentum):
    """Muon for one matrix, written out: Nesterov momentum, Newton-Schulz (fp32 on CPU), aspect scale."""
    for p, g, buf in zip(params, grads, buffers):
        buf.lerp_(g, 1 - momentum)
        direction = zeropower_via_newtonschulz5(g.lerp(buf, momentum), steps=5, dtype=torch.float32)
        p.add_(direction, alpha=-lr * max(1, p.size(0) / p.size(1)) ** 0.5)


def test_stacked_muon_equals_matrix_by_matrix():
    torch.manual_seed(0)
    params = [torch.randn(s) for s in SHAPES]
    ref = [p.clone() for p in params]
    buffers = [torch.zeros_like(p) for p in params]
    muon = Muon(params, lr=0.02, momentum=0.9)
    for step in range(3):
        grads = [torch.randn(s, generator=torch.Generator().manual_seed(10 * step + i)) for i, s in enumerate(SHAPES)]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        muon.step()
        reference_step(ref, grads, buffers, lr=0.02, momentum=0.9)
    for i, (a, b) in enumerate(zip(params, ref)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"param {i} {SHAPES[i]}: max diff {(a - b).abs().max()}"
        assert not torch.equal(a, b.new_zeros(b.shape))


def test_groups_are_by_shape_in_sorted_order():
    params = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
    logged = []
    muon = Muon(params, log=logged.append)
    assert [tuple(g["params"][0].shape) for g in muon.param_groups] == [(8, 8), (8, 16), (16, 8)]
    assert [len(g["params"]) for g in muon.param_groups] == [3, 1, 1]
    assert len(logged) == 3 and "3 params of shape" in logged[0]
