"""A real 2-rank training run on CPU (torchrun, gloo) through the local launcher, and what it leaves.

    python -m pytest tests/integration/test_train.py -q
"""

import json
import math
import os

import pytest
import torch

from bench.analysis.rundir import read_run_dir
from bench.launch.local import run_local
from bench.logline import parse_step_line, parse_val_line
from bench.contract import EVENTS, METRICS_JSONL, TRAIN_LOG, read_run_json
from tests.support.contract import assert_follows_contract

STEPS = 24
B, T, W = 4, 64, 2
VOCAB = 512  # tests/conftest.py's tiny tokenizer


@pytest.fixture(scope="module")
def finished_run(tiny_base_dir, tmp_path_factory):
    """One 2-rank run shared by the tests of this module (it is the expensive part)."""
    run_dir = tmp_path_factory.mktemp("runs") / "local" / "run-1"
    args = ["--depth=2", f"--max_seq_len={T}", f"--device_batch_size={B}", f"--total_batch_size={B * T * W}",
            f"--num_iterations={STEPS}", "--eval_every=12", f"--eval_tokens={2 * B * T * W}", "--sample_every=-1",
            "--model_tag=test_train", f"--save_every={STEPS}"]
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(tiny_base_dir), OMP_NUM_THREADS="1")
    env.pop("NANOCHAT_VAL_FILES_K", None)
    rc = run_local(args, nproc=W, run_dir=run_dir, env=env)
    return rc, run_dir


def events_of(run_dir):
    return [json.loads(line) for line in (run_dir / METRICS_JSONL).read_text().splitlines()]


@pytest.mark.slow
def test_run_succeeds_and_run_json_is_complete(finished_run):
    rc, run_dir = finished_run
    assert rc == 0, (run_dir / TRAIN_LOG).read_text()[-3000:]
    run = assert_follows_contract(run_dir)
    assert run["status"] == "ok" and run["message"] is None
    assert run["world_size"] == W and run["nodes"] == 1 and run["gpus_per_node"] == 0
    assert run["peak_flops_per_gpu"] is None  # CPU: no peak, no MFU
    assert run["config"]["depth"] == 2 and run["config"]["total_batch_size"] == B * T * W
    assert run["num_iterations"] == STEPS and run["grad_accum"] == 1
    assert run["software"]["torch"] == torch.__version__
    assert run["run_id"] == "run-1" and run["sweep_id"] == "local"
    assert run["started_at"] <= run["finished_at"]
    assert run["result"]["min_val_bpb"] > 0
    assert run["val_files_k"] == 1  # the K the trainer used (no NANOCHAT_VAL_FILES_K: the default)


@pytest.mark.slow
def test_network_preflight_and_breakdown_are_recorded(finished_run):
    _, run_dir = finished_run
    run = read_run_json(run_dir)
    assert run["network"]["backend"] == "gloo"
    pre = run["preflight"]
    assert pre["world_size"] == W and pre["backend"] == "gloo" and pre["bytes"] == 4 << 20
    assert pre["busbw_gbps"]["all_reduce"] > 0 and {r["collective"] for r in pre["records"]} >= {"all_reduce"}
    row = read_run_dir(run_dir)  # the phases and the step split are the reader's, from the events
    phases = {k[len("phase_"):-len("_s")]: v for k, v in row.items() if k.startswith("phase_") and v is not None}
    phases.pop("finished", None)  # launch.finished_at: the launcher's end, after the trainer's
    assert {"runtime_start", "start", "imports_done", "dist_init", "preflight", "model_ready", "data_ready",
            "first_step", "steady", "end"} <= set(phases)
    assert all(v >= 0 for v in phases.values())
    events = {e["event"]: e for e in events_of(run_dir)}
    assert sum(phases.values()) == pytest.approx(events["end"]["t"] - run["launch"]["t0"], abs=1e-3)
    steps = [e for e in events_of(run_dir) if e["event"] == "step"]
    for e in steps:  # the parts of every step add up to it; what they do not explain is small on CPU too
        parts = [e[k] for k in ("fwd_bwd_ms", "data_ms", "comm_ms", "optim_ms", "other_ms")]
        assert sum(parts) == pytest.approx(e["dt_ms"], rel=1e-6) and e["other_ms"] < 0.25 * e["dt_ms"]
    assert row["step_comm_ms"] > 0  # the sharded optimizers' reduce_scatter and all_gather wait on gloo
    ranks = run["breakdown"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and run["breakdown"]["slowest_rank"] in (0, 1)


@pytest.mark.slow
def test_metrics_events_follow_the_schema(finished_run):
    _, run_dir = finished_run
    events = events_of(run_dir)
    names = [e["event"] for e in events]
    assert names[:4] == ["start", "runtime_start", "imports_done", "dist_init"]  # the start-up phases, in order
    assert names.index("model_ready") < names.index("first_step")
    assert names[-1] == "end"
    assert names.count("first_step") == 1 and names.count("step") == STEPS
    assert names.count("val") == 3  # steps 0, 12 and the final one
    for e in events:
        assert e["event"] in EVENTS and isinstance(e["t"], float)
        assert all(k in e for k in EVENTS[e["event"]])
    runtime_start, start = events[1]["t"], events[0]["t"]  # back-dated: when torchrun's agent and this process began
    assert runtime_start <= start <= events[2]["t"]
    assert [e["t"] for e in events[2:]] == sorted(e["t"] for e in events[2:])
    steps = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in steps] == list(range(STEPS))
    assert all(e["mfu"] is None for e in steps)
    assert {k: events[3][k] for k in ("world_size", "backend")} == {"world_size": W, "backend": "gloo"}
    assert next(e for e in events if e["event"] == "model_ready")["num_params"] > 0


@pytest.mark.slow
def test_loss_falls_and_starts_at_ln_vocab(finished_run):
    _, run_dir = finished_run
    steps = [e for e in events_of(run_dir) if e["event"] == "step"]
    assert steps[0]["loss"] == pytest.approx(math.log(VOCAB), rel=1e-3)
    assert steps[-1]["loss"] < steps[0]["loss"] - 0.5
    vals = [e["val_bpb"] for e in events_of(run_dir) if e["event"] == "val"]
    assert vals[-1] < vals[0]


@pytest.mark.slow
def test_human_lines_parse_with_the_shared_regexes(finished_run):
    _, run_dir = finished_run
    lines = (run_dir / TRAIN_LOG).read_text().splitlines()
    parsed = [p for p in map(parse_step_line, lines) if p]
    vals = [p for p in map(parse_val_line, lines) if p]
    events = events_of(run_dir)
    assert [p["step"] for p in parsed] == list(range(STEPS))  # rank 0 only: each step once
    assert all(p["num_iterations"] == STEPS and p["grad_norm"] is not None for p in parsed)
    step_events = [e for e in events if e["event"] == "step"]
    for p, e in zip(parsed, step_events):
        assert p["loss"] == pytest.approx(e["loss"], abs=1e-6)
        assert p["dt_ms"] == pytest.approx(e["dt_ms"], abs=0.01)
    assert [v["step"] for v in vals] == [0, 12, STEPS]
    assert "Minimum validation bpb:" in "\n".join(lines)


@pytest.mark.slow
def test_final_checkpoint_written(finished_run, tiny_base_dir):
    from bench.nanochat.checkpoint import load_model_state

    ckpt = tiny_base_dir / "base_checkpoints" / "test_train"
    state, meta = load_model_state(ckpt, STEPS)
    assert meta["step"] == STEPS and meta["user_config"]["depth"] == 2
    assert "lm_head.weight" in state and state["lm_head.weight"].abs().sum() > 0  # trained away from zero
    assert (ckpt / f"optim_{STEPS:06d}_rank0.pt").exists() and (ckpt / f"optim_{STEPS:06d}_rank1.pt").exists()


def test_ranks_see_different_data(base_dir_env):
    from bench.nanochat.dataloader import build_loader

    first = [next(build_loader(B, T, "train", "cpu", rank, W)) for rank in range(W)]
    assert not torch.equal(first[0][0], first[1][0])
    x, y = first[0]
    assert x.shape == (B, T) and x.dtype == torch.int64 and torch.equal(x[:, 1:], y[:, :-1])


def test_profile_step_writes_a_kernel_table_and_a_trace(tiny_base_dir, tmp_path):
    """--profile_step=N: where the time of step N goes, written beside the run."""
    import subprocess
    import sys

    env = dict(os.environ, NANOCHAT_BASE_DIR=str(tiny_base_dir), NANOCHAT_BENCH_RUN_DIR=str(tmp_path),
               OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "bench.nanochat.train", "--depth=2", f"--max_seq_len={T}",
                           f"--device_batch_size={B}", f"--total_batch_size={B * T}", "--num_iterations=3",
                           "--eval_every=-1", "--sample_every=-1", "--profile_step=1", "--model_tag=test_profile"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (tiny_base_dir / "base_checkpoints" / "test_profile").exists()  # a benchmark saves nothing unasked
    table = (tmp_path / "profile_step1.txt").read_text()
    assert "aten::mm" in table and "Self CPU" in table
    assert json.loads((tmp_path / "profile_step1.json").read_text())["traceEvents"]
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "run.json").stat().st_mode & 0o777 == 0o666 & ~umask  # as any file the user writes
