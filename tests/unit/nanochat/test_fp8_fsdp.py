"""--fp8 under FSDP2 (and its activation checkpointing): two gloo ranks on the CPU shard an FP8 model and
give the loss and gradients of the unsharded FP8 model (every rank sees the same batch, so the averaged
gradient is the single process's). The FP8 matmuls are the real torch._scaled_mm, which runs on the CPU."""

import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench.nanochat import fp8
from bench.nanochat.gpt import GPTConfig, build_model
from bench.nanochat.parallel import Strategy, parallelize

pytestmark = pytest.mark.skipif(not hasattr(torch, "_scaled_mm") or sys.platform != "linux",
                                reason="needs torch._scaled_mm and gloo on Linux")


def fp8_model():
    torch.manual_seed(0)
    model = build_model(GPTConfig(sequence_len=32, vocab_size=256, n_layer=2, n_head=2, n_kv_head=2, n_embd=64),
                        "cpu")
    for p in model.parameters():  # no zero-initialised projections: every matrix gets a gradient at once
        if p.abs().max() == 0:
            torch.nn.init.normal_(p, std=0.02)
    fp8.convert_to_fp8(model, blocks=True, lm_head=True)
    return model


def batch():
    x = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    return x, torch.roll(x, -1, 1)


def grads(model) -> dict[str, torch.Tensor]:
    return {n.replace("._checkpoint_wrapped_module", ""): (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach().clone()
            for n, p in model.named_parameters() if p.grad is not None}


def worker(rank: int, world: int, port: int, strategy: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        model = fp8_model()
        sharded = parallelize(model, Strategy.parse(strategy), torch.device("cpu"))
        x, y = batch()
        loss = sharded(x, y)
        loss.backward()
        result = {"loss": loss.item(), "grads": grads(model)}
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("strategy", ["fsdp", "fsdp+ac"])
def test_fsdp_sharded_fp8_model_matches_the_unsharded_one(strategy, tmp_path):
    out = str(tmp_path / "rank0.pt")
    mp.spawn(worker, args=(2, free_port(), strategy, out), nprocs=2, join=True)
    sharded = torch.load(out)
    ref = fp8_model()
    x, y = batch()
    loss = ref(x, y)
    loss.backward()
    expected = grads(ref)
    assert sharded["loss"] == pytest.approx(loss.item(), rel=1e-6)
    assert sharded["grads"].keys() == expected.keys()
    for name, g in expected.items():
        assert g.abs().max() > 0, name
        assert torch.allclose(sharded["grads"][name].float(), g.float(), rtol=1e-4, atol=1e-6), name
