"""The chunked lm_head + soft-capped cross-entropy (bench/nanochat/fused_ce.py) against the plain path.

    python -m pytest tests/unit/nanochat/test_fused_ce.py -q
"""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from bench.nanochat import fused_ce
from bench.nanochat.config import parse_args
from bench.nanochat.fused_ce import compute_dtype, default_chunk_rows, fused_linear_softcap_ce
from bench.nanochat.gpt import SOFTCAP, GPTConfig, build_model
from bench.schema import METRICS_JSONL

N, D, V = 50, 24, 40
IGNORED = [3, 17, 18, 49]


def reference_loss(x, w, targets):
    """GPT.forward's plain path: lm_head, soft-cap, fp32, mean cross-entropy ignoring -1."""
    logits = F.linear(x, w)
    logits = SOFTCAP * torch.tanh(logits / SOFTCAP)
    logits = logits.float()
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def fused(chunk_rows=None):
    return lambda x, w, targets: fused_linear_softcap_ce(x, w, targets, SOFTCAP, chunk_rows)


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D, generator=g) * 3.0  # logits of tens: the soft-cap bends them
    w = torch.randn(V, D, generator=g)
    targets = torch.randint(0, V, (N,), generator=g)
    targets[IGNORED] = -1
    return x, w, targets


def loss_and_grads(fn, x, w, targets):
    x, w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    loss = fn(x, w, targets)
    (2.5 * loss).backward()  # an incoming gradient other than 1: backward must scale the saved ones
    return loss.detach(), x.grad, w.grad


def assert_close(actual, expected, rtol=1e-5):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=rtol * expected.abs().max().item())


@pytest.mark.parametrize("chunk_rows", [1, 7, 16, N, 1000])  # 7 and 16 leave a short last chunk
def test_loss_and_grads_equal_the_plain_path(chunk_rows):
    x, w, targets = inputs()
    ref = loss_and_grads(reference_loss, x, w, targets)
    got = loss_and_grads(fused(chunk_rows), x, w, targets)
    assert ref[0] > 0 and ref[1].abs().sum() > 0 and ref[2].abs().sum() > 0
    assert (x @ w.T).abs().max() > 2 * SOFTCAP  # the soft-cap is far from the identity here
    for actual, expected in zip(got, ref):
        assert_close(actual, expected)
    assert torch.all(got[1][IGNORED] == 0)  # ignored rows contribute nothing


def test_default_chunk_size_and_bad_chunk_size():
    assert default_chunk_rows(65536) == 1024  # 1024 x 65536 fp32 logits = 256 MiB
    assert default_chunk_rows(2 ** 40) == 1
    x, w, targets = inputs()
    assert_close(fused()(x, w, targets), reference_loss(x, w, targets))
    with pytest.raises(ValueError, match="chunk_rows=0"):
        fused_linear_softcap_ce(x, w, targets, SOFTCAP, chunk_rows=0)


def test_all_rows_ignored_gives_nan_loss_and_zero_grads_like_torch():
    x, w, targets = inputs()
    targets[:] = -1
    ref = loss_and_grads(reference_loss, x, w, targets)
    got = loss_and_grads(fused(8), x, w, targets)
    assert torch.isnan(ref[0]) and torch.isnan(got[0])
    for actual, expected in zip(got[1:], ref[1:]):
        assert torch.equal(actual, expected) and torch.all(actual == 0)


def test_without_grad_mode_only_the_loss_is_computed():
    x, w, targets = inputs()
    with torch.no_grad():
        loss = fused(9)(x.requires_grad_(), w, targets)
    assert loss.grad_fn is None
    assert_close(loss, reference_loss(x, w, targets).detach())


def test_autocast_runs_the_matmul_in_bf16_and_grads_keep_their_dtypes():
    """Under autocast the plain path's lm_head runs in bf16; so does the fused one (x and W fp32)."""
    x, w, targets = inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compute_dtype(x) == torch.bfloat16
        ref = loss_and_grads(reference_loss, x, w, targets)
        got = loss_and_grads(fused(7), x, w, targets)
    fp32 = loss_and_grads(reference_loss, x, w, targets)
    assert compute_dtype(x) == torch.float32
    for actual, expected, exact in zip(got, ref, fp32):
        assert actual.dtype == torch.float32
        assert_close(actual, expected, rtol=2e-2)  # bf16 rounding, in a different order
        assert not torch.equal(actual, exact)  # bf16 was really used


def test_bf16_x_without_autocast_casts_w_and_returns_grads_in_each_dtype():
    x, w, targets = inputs()
    x = x.bfloat16()
    loss, dx, dw = loss_and_grads(fused(7), x, w, targets)
    assert (loss.dtype, dx.dtype, dw.dtype) == (torch.float32, torch.bfloat16, torch.float32)
    ref = loss_and_grads(reference_loss, x, w.bfloat16(), targets)
    assert_close(loss, ref[0], rtol=2e-2)
    assert_close(dx, ref[1], rtol=2e-2)
    assert_close(dw, ref[2].float(), rtol=2e-2)


def test_compiles_into_one_graph_with_the_same_results():
    """torch.compile (fullgraph: no graph break) on aot_eager, which needs no C++ compiler."""
    x, w, targets = inputs()
    compiled = torch.compile(fused(16), backend="aot_eager", fullgraph=True)
    for actual, expected in zip(loss_and_grads(compiled, x, w, targets), loss_and_grads(fused(16), x, w, targets)):
        assert_close(actual, expected)


def gpt_loss_and_grads(fused_flag: bool, idx, targets):
    torch.manual_seed(0)
    model = build_model(GPTConfig.from_depth(2, 96, 16, fused_ce=fused_flag), "cpu")
    with torch.no_grad():  # upstream zero-inits these; random values make every gradient non-zero
        model.lm_head.weight.normal_(0, 0.5)
        for block in model.transformer.h:
            block.attn.c_proj.weight.normal_(0, 0.05)
            block.mlp.c_proj.weight.normal_(0, 0.05)
    loss = model(idx, targets)
    loss.backward()
    return model, loss.detach(), {name: p.grad for name, p in model.named_parameters()}


def test_whole_gpt_forward_backward_is_the_same_with_fused_ce(monkeypatch):
    monkeypatch.setattr(fused_ce, "CHUNK_BYTES", 5 * 96 * 4)  # 5 rows per chunk: 32 rows do not divide
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 96, (2, 16), generator=g)
    targets = torch.randint(0, 96, (2, 16), generator=g)
    targets[0, :3] = -1
    targets[1, -1] = -1
    plain_model, plain_loss, plain_grads = gpt_loss_and_grads(False, idx, targets)
    fused_model, fused_loss, fused_grads = gpt_loss_and_grads(True, idx, targets)
    assert fused_model.config.fused_ce and not plain_model.config.fused_ce
    assert plain_loss > 0.5
    assert_close(fused_loss, plain_loss)
    assert fused_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        assert grad.abs().sum() > 0, name
        assert_close(fused_grads[name], grad)
    with torch.no_grad():  # evaluation (per-token losses) and logits stay on the plain path
        for args in ((idx, targets, "none"), (idx,)):
            assert torch.equal(fused_model(*args), plain_model(*args))


def test_flag_parses_and_defaults_off():
    assert parse_args([]).fused_ce is False
    assert parse_args(["--fused_ce"]).fused_ce is True
    assert parse_args(["--fused_ce=True"]).fused_ce is True
    assert parse_args(["--fused_ce=0"]).fused_ce is False
    assert GPTConfig().fused_ce is False


@pytest.mark.slow
def test_tiny_training_run_with_fused_ce(tiny_base_dir, tmp_path):
    """One CPU process, a few steps: the flag reaches the model config and the loss starts at ln(vocab)."""
    run_dir = tmp_path / "run"
    args = ["--fused_ce=True", "--depth=1", "--max_seq_len=32", "--device_batch_size=2", "--total_batch_size=128",
            "--num_iterations=6", "--eval_every=-1", "--sample_every=-1", "--model_tag=test_fused_ce"]
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(tiny_base_dir), NANOCHAT_BENCH_RUN_DIR=str(run_dir),
               OMP_NUM_THREADS="1")
    env.pop("NANOCHAT_VAL_FILES_K", None)
    proc = subprocess.run([sys.executable, "-m", "bench.nanochat.train", *args], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    meta = json.loads((tiny_base_dir / "base_checkpoints" / "test_fused_ce" / "meta_000006.json").read_text())
    assert meta["model_config"]["fused_ce"] is True and meta["user_config"]["fused_ce"] is True
    events = [json.loads(line) for line in (run_dir / METRICS_JSONL).read_text().splitlines()]
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 6
    assert losses[0] == pytest.approx(math.log(meta["model_config"]["vocab_size"]), rel=1e-3)
    assert losses[-1] < losses[0]
