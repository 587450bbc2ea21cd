"""--fp8: the scaling logic, the FP8 autograd matmul against a float reference, the model conversion and
the refusal on a device without FP8 matmuls. torch._scaled_mm runs on the CPU (torch 2.13), so these
exercise the real FP8 path, not an emulation."""

import copy
import gc
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from bench.errors import ConfigError
from bench.nanochat import fp8, gcfreeze
from bench.nanochat.config import parse_args
from bench.nanochat.gpt import GPTConfig, build_model

pytestmark = pytest.mark.skipif(not hasattr(torch, "_scaled_mm"), reason="this torch has no _scaled_mm")

E4M3_MAX, E5M2_MAX = 448.0, 57344.0
E4M3_REL, E5M2_REL = 2.0 ** -4, 2.0 ** -3  # half a unit in the last place of 3 and 2 mantissa bits, as a bound


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("dtype, fmax", [(fp8.E4M3, E4M3_MAX), (fp8.E5M2, E5M2_MAX)])
def test_scale_maps_amax_onto_the_formats_largest_value(dtype, fmax):
    t = torch.randn(64, 32) * 7.0
    t[3, 5] = -123.0  # the absolute maximum is negative
    scale = fp8.fp8_scale(t, dtype)
    assert scale.dtype == torch.float32 and scale.ndim == 0
    assert scale.item() == pytest.approx(fmax / 123.0, rel=1e-6)
    t8, inv = fp8.to_fp8(t, dtype)
    assert t8.dtype == dtype and t8.shape == t.shape
    assert t8.float()[3, 5].item() == -fmax  # amax lands exactly on the largest finite value, not inf
    assert torch.isfinite(t8.float()).all()
    assert inv.item() == pytest.approx(123.0 / fmax, rel=1e-6)


@pytest.mark.parametrize("dtype, bound", [(fp8.E4M3, E4M3_REL), (fp8.E5M2, E5M2_REL)])
def test_cast_round_trip_error_is_within_the_formats_precision(dtype, bound):
    for _ in range(5):  # fresh data each time
        t = torch.randn(256, 128) * torch.rand(1).item() * 100
        t8, inv = fp8.to_fp8(t, dtype)
        back = t8.float() * inv
        big = t.abs() > t.abs().max() / 100  # away from the subnormal range, the relative error per element
        assert ((back - t).abs()[big] <= bound * t.abs()[big]).all()
        assert rel_err(back, t) < bound / 2


def test_all_zero_tensor_gets_a_finite_scale_and_stays_zero():
    """lm_head and the c_proj's start at zero: the first step must not produce NaN."""
    z = torch.zeros(32, 16)
    t8, inv = fp8.to_fp8(z, fp8.E4M3)
    assert torch.isfinite(inv) and (t8.float() == 0).all()


def test_fp8_matmul_forward_and_backward_match_float_reference():
    torch.manual_seed(0)
    for m, k, n in [(64, 32, 48), (128, 64, 16)]:
        x = torch.randn(m, k, requires_grad=True)
        w = torch.randn(n, k, requires_grad=True)
        grad = torch.randn(m, n)
        y = fp8._FP8Matmul.apply(x, w, torch.float32)
        y.backward(grad)
        xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        yr = xr @ wr.t()
        yr.backward(grad.double())
        assert y.shape == (m, n) and x.grad.shape == x.shape and w.grad.shape == w.shape
        assert x.grad.dtype == x.dtype and w.grad.dtype == w.dtype
        assert rel_err(y, yr) < 0.06  # two e4m3 operands
        assert rel_err(x.grad, xr.grad) < 0.1  # e5m2 gradient x e4m3 weight
        assert rel_err(w.grad, wr.grad) < 0.1
        assert rel_err(y, yr) > 1e-4  # it really ran in FP8, not in float


def test_forward_product_accumulates_fast_and_gradient_products_in_full(monkeypatch):
    """The tensorwise recipe's split: fast accumulation for y = x W^T, full precision for dx and dW."""
    seen, real = [], torch._scaled_mm
    def spy(*args, **kwargs):
        seen.append(kwargs.get("use_fast_accum", False))
        return real(*args, **kwargs)
    monkeypatch.setattr(torch, "_scaled_mm", spy)
    x, w = torch.randn(64, 32, requires_grad=True), torch.randn(48, 32, requires_grad=True)
    y = fp8._FP8Matmul.apply(x, w, torch.float32)
    assert seen == [True]
    y.sum().backward()
    assert seen == [True, False, False]


def test_fp8_linear_keeps_shapes_parameters_and_autocast_dtype():
    lin = nn.Linear(32, 64, bias=False)
    weight = lin.weight
    lin.__class__ = fp8.FP8Linear
    x = torch.randn(2, 5, 32)
    assert lin(x).shape == (2, 5, 64) and lin(x).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert lin(x).dtype == torch.bfloat16
    assert lin.weight is weight and list(lin.state_dict()) == ["weight"]


def tiny_model():
    torch.manual_seed(0)
    return build_model(GPTConfig(sequence_len=32, vocab_size=256, n_layer=2, n_head=2, n_kv_head=2, n_embd=64), "cpu")


def test_convert_blocks_and_lm_head_counts_and_keeps_parameters():
    model = tiny_model()
    params = list(model.parameters())
    assert fp8.convert_to_fp8(model, blocks=True, lm_head=False) == 2 * 6  # q, k, v, proj, fc, mlp proj
    assert type(model.lm_head) is nn.Linear
    assert list(model.parameters()) == params
    other = tiny_model()
    assert fp8.convert_to_fp8(other, blocks=True, lm_head=True) == 2 * 6 + 1
    assert isinstance(other.lm_head, fp8.FP8Linear)


def test_fp8_model_trains_and_its_loss_follows_the_float_model():
    """A few optimizer steps of a tiny GPT on a fixed batch: the FP8 model's loss falls, as the float one's."""
    ref = tiny_model()
    model = copy.deepcopy(ref)
    fp8.convert_to_fp8(model, blocks=True, lm_head=True)
    x = torch.randint(0, 256, (4, 32))
    y = torch.roll(x, -1, 1)
    losses = {}
    for name, m in (("ref", ref), ("fp8", model)):
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
        curve = []
        for _ in range(8):
            loss = m(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            curve.append(loss.item())
        losses[name] = curve
    assert losses["fp8"][-1] < losses["fp8"][0] - 0.3
    assert max(abs(a - b) for a, b in zip(losses["fp8"], losses["ref"])) < 0.05


def test_flags_default_off_and_parse():
    assert not parse_args(["--depth=4"]).fp8 and not parse_args(["--depth=4"]).fp8_lm_head
    config = parse_args(["--fp8", "--fp8_lm_head=1"])
    assert config.fp8 and config.fp8_lm_head


@pytest.mark.parametrize("flags, name", [((True, False), "--fp8"), ((False, True), "--fp8_lm_head")])
def test_cpu_is_refused_naming_the_flag(flags, name):
    with pytest.raises(ConfigError, match=f"^{name}: FP8 matmuls need .* the device is cpu; leave out {name}"):
        fp8.apply_fp8(tiny_model(), *flags, torch.device("cpu"))


def test_off_changes_nothing():
    model = tiny_model()
    assert fp8.apply_fp8(model, False, False, torch.device("cpu")) == 0
    assert not any(isinstance(m, fp8.FP8Linear) for m in model.modules())


def test_trainer_refuses_fp8_on_cpu_with_one_line(tmp_path):
    """The real trainer on a CPU: --fp8 ends as a configuration error naming the flag, no traceback."""
    from bench.capacity import data

    bin_dir = data.prepare(tmp_path, 512, tokens=1 << 14)
    env = {**os.environ, "NANOCHAT_BASE_DIR": str(tmp_path), "NANOCHAT_BENCH_RUN_DIR": str(tmp_path / "run")}
    proc = subprocess.run([sys.executable, "-m", "bench.nanochat.train", "--depth=2", "--max_seq_len=64",
                           "--device_batch_size=1", "--total_batch_size=64", "--num_iterations=2",
                           "--eval_every=-1", "--sample_every=-1", "--device_type=cpu",
                           f"--data_bin_dir={bin_dir}", "--fp8"],
                          env=env, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "--fp8: FP8 matmuls need an NVIDIA GPU" in text and "the device is cpu" in text
    assert "Traceback" not in text
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["config"]["fp8"] is True and run["config"]["fp8_lm_head"] is False  # the contract records it


def test_gc_is_frozen_after_the_first_step_and_released():
    try:
        gcfreeze.after_step(0, first=True)
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        gcfreeze.after_step(gcfreeze.COLLECT_EVERY, first=False)  # collects without turning it back on
        assert not gc.isenabled()
    finally:
        gcfreeze.release()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_memory_model_predicts_the_measured_fp8_peak_at_d20():
    """results/h200-d20/fp8: d20, B=32, one H200, compiled: 73,833 MiB in bf16, 53,885 MiB with --fp8."""
    from bench.nanochat.memory import MemoryPoint, estimate

    point = dict(device_batch_size=32, compiled=True, grad_accum=8)
    bf16 = estimate(MemoryPoint(20, **point)).peak_bytes / 2 ** 20
    with_fp8 = estimate(MemoryPoint(20, fp8=True, **point)).peak_bytes / 2 ** 20
    assert with_fp8 == pytest.approx(53_885, rel=0.02)
    assert bf16 - with_fp8 == pytest.approx(73_833 - 53_885, rel=0.05)


def test_pre_ada_gpu_is_refused_naming_its_capability(monkeypatch):
    """A mocked A100 (no GPU on the test machine): compute capability 8.0 has no FP8 matmuls."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(ConfigError, match=r"^--fp8: .* NVIDIA A100-SXM4-80GB has compute capability 8\.0, below 8\.9"):
        fp8.apply_fp8(tiny_model(), True, False, torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert fp8.fp8_supported(torch.device("cuda")) is None
