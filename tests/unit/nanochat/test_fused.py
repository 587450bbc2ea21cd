"""--fused_kernels: the Triton kernels of bench/nanochat/fused.py against the model's own code, forward and
backward. Triton's interpreter (TRITON_INTERPRET=1) runs the same kernels on CPU tensors, so these exercise
the kernels' real indexing, masking and arithmetic; their speed is measured on a GPU
(benchmarks/step_floor.py --fused, benchmarks/gpu_bench.py). tests/conftest.py sets TRITON_INTERPRET=1
before Triton is first imported, which is when Triton reads it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.errors import ConfigError
from bench.nanochat import fused
from bench.nanochat.config import FUSED_KERNELS, parse_args
from bench.nanochat.gpt import SOFTCAP, GPTConfig, build_model, rotary_then_norm, softcap_cross_entropy

pytest.importorskip("triton", reason="Triton is a test dependency (pyproject's test extra)")


ALL = ",".join(FUSED_KERNELS)


@pytest.fixture
def interpreted(monkeypatch):
    import triton.language as tl

    if type(tl.standard.sum).__name__ != "InterpretedFunction":
        pytest.fail("Triton was imported before tests/conftest.py set TRITON_INTERPRET=1")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def grads(fn, inputs, grad_out):
    """fn's output and the gradient of <output, grad_out> with respect to the first input."""
    x = inputs[0].detach().clone().requires_grad_(True)
    out = fn(x, *inputs[1:])
    (out.float() * grad_out).sum().backward()
    return out.float(), x.grad.float()


def nonzero_model():
    torch.manual_seed(0)
    model = build_model(GPTConfig(sequence_len=16, vocab_size=64, n_layer=2, n_head=2, n_kv_head=2, n_embd=32), "cpu")
    for p in model.parameters():  # no zero-initialised projections: every matrix gets a gradient at once
        torch.nn.init.normal_(p, std=0.1)
    return model


def fixed_batch():
    x = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    return x, torch.roll(x, -1, 1)


@pytest.mark.parametrize("B, T, H, D, offset",
                         [(2, 37, 3, 16, 5), (1, 1, 1, 8, 0), (3, 8, 2, 64, 11), (2, 5, 2, 12, 1)])
def test_rotary_norm_matches_rotary_then_norm(interpreted, B, T, H, D, offset):
    """Rows not a multiple of the kernel's block, a cos/sin window past position 0 (a KV cache's), a head dim
    whose half is no power of two (d3's 96)."""
    torch.manual_seed(0)
    x = torch.randn(B, T, H, D)
    cos, sin = (torch.randn(1, T + offset + 3, 1, D // 2)[:, offset:offset + T] for _ in range(2))
    g = torch.randn(B, T, H, D)
    out, dx = grads(fused.rotary_qk_norm, (x, cos, sin), g)
    ref_out, ref_dx = grads(rotary_then_norm, (x, cos, sin), g)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dx, ref_dx, rtol=1e-4, atol=1e-4)


def test_rotary_norm_in_bf16_rounds_once(interpreted):
    """bf16 in and out, fp32 inside: as close to the fp32 result as one rounding allows (the interpreter's
    cast to bf16 may truncate: one unit in the last place, 2^-7, not half of one)."""
    torch.manual_seed(1)
    x, cos, sin = torch.randn(2, 9, 2, 32), torch.randn(1, 9, 1, 16), torch.randn(1, 9, 1, 16)
    out = fused.rotary_qk_norm(x.bfloat16(), cos.bfloat16(), sin.bfloat16())
    assert out.dtype == torch.bfloat16
    exact = rotary_then_norm(x.bfloat16().float(), cos.bfloat16().float(), sin.bfloat16().float())
    torch.testing.assert_close(out.float(), exact, rtol=2 ** -7, atol=1e-6)


@pytest.mark.parametrize("rows, vocab", [(7, 64), (5, 1000), (3, 5000)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_softcap_loss_matches_the_models_loss(interpreted, rows, vocab, reduction):
    """Logits past the soft cap, an ignored (-1) target, a vocabulary that is no power of two and one longer
    than the kernels' block (5000: two passes of the loop); each of F.cross_entropy's reductions."""
    torch.manual_seed(0)
    logits = torch.randn(rows, vocab) * 20
    targets = torch.randint(0, vocab, (rows,))
    targets[1] = -1
    g = torch.randn(rows) if reduction == "none" else torch.randn(())
    out, dl = grads(lambda x, t: fused.softcap_cross_entropy(x, t, reduction), (logits, targets), g)
    ref_out, ref_dl = grads(lambda x, t: softcap_cross_entropy(x, t, reduction), (logits, targets), g)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dl, ref_dl, rtol=1e-4, atol=1e-6)
    assert dl[1].abs().max() == 0  # the ignored row gets no gradient


def test_softcap_loss_with_every_target_ignored_is_nan_as_cross_entropy():
    """mean over no targets: 0/0, as F.cross_entropy gives."""
    logits, targets = torch.randn(3, 16), torch.full((3,), -1)
    assert softcap_cross_entropy(logits, targets).isnan()
    assert fused.softcap_cross_entropy(logits, targets).isnan()


def test_softcap_loss_in_bf16_computes_in_fp32(interpreted):
    """bf16 logits: soft cap and cross-entropy in fp32 with no rounding in between (as the compiled model;
    eager bf16 would round the soft-capped logits); the gradient written in bf16."""
    torch.manual_seed(2)
    logits, targets = (torch.randn(4, 300) * 30).bfloat16(), torch.randint(0, 300, (4,))
    g = torch.randn(4)
    loss, dl = grads(lambda x, t: fused.softcap_cross_entropy(x, t, "none"), (logits, targets), g)
    exact, exact_dl = grads(lambda x, t: softcap_cross_entropy(x, t, "none"), (logits.float(), targets), g)
    torch.testing.assert_close(loss, exact, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dl, exact_dl, rtol=2 ** -7, atol=1e-6)  # one rounding to bf16, at the end
    x = logits.clone().requires_grad_(True)
    fused.softcap_cross_entropy(x, targets).backward()
    assert x.grad.dtype == torch.bfloat16


def test_a_model_with_fused_kernels_trains_as_without(interpreted):
    """The same weights and batch: the same loss and gradients with every kernel swapped in."""
    plain, swapped = nonzero_model(), nonzero_model()
    messages = []
    fused.apply_fused_kernels(swapped, ALL, torch.device("cpu"), log=messages.append)
    assert messages == [f"Fused kernels: {', '.join(FUSED_KERNELS)} as Triton kernels (bench/nanochat/fused.py)"]
    loss_plain, loss_swapped = plain(*fixed_batch()), swapped(*fixed_batch())
    loss_plain.backward()
    loss_swapped.backward()
    torch.testing.assert_close(loss_swapped, loss_plain, rtol=1e-5, atol=1e-6)
    for (name, a), b in zip(plain.named_parameters(), swapped.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_refused_on_cpu_naming_the_flag(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    model = build_model(GPTConfig(sequence_len=8, vocab_size=32, n_layer=1, n_head=1, n_kv_head=1, n_embd=8), "cpu")
    with pytest.raises(ConfigError, match=r"--fused_kernels=softcap_loss: it needs a CUDA GPU \(this run is on cpu"):
        fused.apply_fused_kernels(model, "softcap_loss", torch.device("cpu"))
    fused.apply_fused_kernels(model, "", torch.device("cpu"))  # off: nothing asked, nothing checked


def test_every_kernel_name_has_its_swap():
    assert list(fused.SWAPS) == list(FUSED_KERNELS)
    assert parse_args([]).fused_kernels == ""
    assert parse_args(["--fused_kernels=True"]).fused_kernels == ALL


def test_the_model_compiles_whole_with_the_kernel(interpreted):
    """The ops are built before compile and are opaque to it: no graph break (a traced op built on its first
    call, inside the trace, broke the graph there)."""
    import torch._dynamo

    config = GPTConfig(sequence_len=16, vocab_size=64, n_layer=2, n_head=2, n_kv_head=2, n_embd=32)
    model = build_model(config, "cpu")
    fused.apply_fused_kernels(model, ALL, torch.device("cpu"), log=lambda *_: None)
    idx = torch.randint(0, 64, (2, 16))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(idx, idx)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


def train_on_cpu(tmp_path, name: str, flags: list[str], interpret: bool) -> tuple[subprocess.CompletedProcess, Path]:
    """The real trainer, two steps of a depth-2 model on the CPU, in a run directory of its own."""
    from bench.capacity import data

    bin_dir = data.prepare(tmp_path / "data", 512, tokens=1 << 14)
    run_dir = tmp_path / name
    env = {**os.environ, "NANOCHAT_BASE_DIR": str(tmp_path / "data"), "NANOCHAT_BENCH_RUN_DIR": str(run_dir),
           "OMP_NUM_THREADS": "1"}
    env.pop("TRITON_INTERPRET", None)
    env.update({"TRITON_INTERPRET": "1"} if interpret else {})
    proc = subprocess.run([sys.executable, "-m", "bench.nanochat.train", "--depth=2", "--max_seq_len=64",
                           "--device_batch_size=2", "--total_batch_size=128", "--num_iterations=2",
                           "--eval_every=-1", "--sample_every=-1", "--device_type=cpu",
                           f"--data_bin_dir={bin_dir}", f"--model_tag={name}", *flags],
                          env=env, capture_output=True, text=True, timeout=300)
    return proc, run_dir


def step_losses(run_dir: Path) -> list[float]:
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [e["loss"] for e in events if e.get("event") == "step"]


def test_trainer_with_the_flag_trains_as_without(tmp_path):
    """--fused_kernels=all end to end through the trainer (the kernels interpreted on CPU): the names
    recorded in run.json's config, announced, and the same losses as the run without them."""
    plain, plain_dir = train_on_cpu(tmp_path, "plain", [], interpret=True)
    swapped, swapped_dir = train_on_cpu(tmp_path, "fused", ["--fused_kernels=all"], interpret=True)
    assert plain.returncode == 0 and swapped.returncode == 0, (plain.stderr + swapped.stderr)[-3000:]
    assert f"Fused kernels: {', '.join(FUSED_KERNELS)} as Triton kernels" in swapped.stdout
    assert json.loads((swapped_dir / "run.json").read_text())["config"]["fused_kernels"] == ALL
    assert json.loads((plain_dir / "run.json").read_text())["config"]["fused_kernels"] == ""
    assert len(step_losses(swapped_dir)) == 2
    assert step_losses(swapped_dir) == pytest.approx(step_losses(plain_dir), abs=1e-4)


def test_trainer_refuses_the_flag_on_cpu_with_one_line(tmp_path):
    proc, run_dir = train_on_cpu(tmp_path, "refused", ["--fused_kernels=rotary_norm"], interpret=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "--fused_kernels=rotary_norm: it needs a CUDA GPU (this run is on cpu" in text and "Traceback" not in text
    assert json.loads((run_dir / "run.json").read_text())["config"]["fused_kernels"] == "rotary_norm"


def fsdp_worker(rank: int, world: int, port: int, out: str) -> None:
    """One of two gloo ranks: the model with the kernel, sharded by FSDP2 with activation checkpointing."""
    import torch.distributed as dist

    from bench.nanochat.parallel import Strategy, parallelize

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        model = nonzero_model()
        fused.apply_fused_kernels(model, ALL, torch.device("cpu"), log=lambda *_: None)
        sharded = parallelize(model, Strategy.parse("fsdp+ac"), torch.device("cpu"))
        loss = sharded(*fixed_batch())
        loss.backward()
        grads = {n.replace("._checkpoint_wrapped_module", ""): p.grad.full_tensor().detach().clone()
                 for n, p in model.named_parameters()}
        if rank == 0:
            torch.save({"loss": loss.item(), "grads": grads}, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(sys.platform != "linux", reason="gloo ranks on Linux")
def test_under_fsdp_with_checkpointing_it_trains_as_the_plain_model(interpreted, tmp_path):
    """Two ranks (the same batch on each, so the averaged gradient is one process's), blocks re-run in
    backward (+ac): the sharded model with the kernel gives the plain unsharded model's loss and gradients."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(tmp_path / "rank0.pt")
    mp.spawn(fsdp_worker, args=(2, port, out), nprocs=2, join=True)
    sharded = torch.load(out)
    plain = nonzero_model()
    loss = plain(*fixed_batch())
    loss.backward()
    assert sharded["loss"] == pytest.approx(loss.item(), rel=1e-5)
    for name, p in plain.named_parameters():
        torch.testing.assert_close(sharded["grads"][name], p.grad, rtol=1e-4, atol=1e-6, msg=name)
