"""mid_train for real on CPU: a base checkpoint -> 2 ranks of mid-training through the local launcher, and
bad input ending with one clear line.

    python -m pytest tests/integration/test_mid_train.py -q
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict

import pytest

from bench import cli
from bench.contract import METRICS_JSONL, TRAIN_LOG, read_run_json
from bench.logline import parse_step_line
from tests.support.contract import assert_follows_contract

B, T, W = 2, 64, 2
BATCHES = 6  # num_iterations: batches made, so 5 optimizer steps
FLAGS = ["--device_type=cpu", f"--max_seq_len={T}", f"--device_batch_size={B}", f"--total_batch_size={B * T * W}",
         f"--num_iterations={BATCHES}", "--eval_every=3", f"--eval_tokens={B * T * W * 2}", "--preflight=0"]


@pytest.fixture(scope="module")
def mid_base(tiny_base_dir, tmp_path_factory):
    """A base directory: the tiny tokenizer, `data generate --chat` stand-ins and a d2 base checkpoint."""
    from bench.nanochat import chatgen
    from bench.nanochat.checkpoint import save_checkpoint
    from bench.nanochat.gpt import GPTConfig, build_model

    base = tmp_path_factory.mktemp("mid-base")
    shutil.copytree(tiny_base_dir / "tokenizer", base / "tokenizer")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NANOCHAT_BASE_DIR", str(base))
        chatgen.generate()
    config = GPTConfig.from_depth(2, 512, T)
    save_checkpoint(base / "base_checkpoints" / "d2", 0, build_model(config, "cpu").state_dict(), [],
                    {"step": 0, "model_config": asdict(config), "device_batch_size": B})
    return base


@pytest.fixture(scope="module")
def finished_run(mid_base, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "local" / "mid-1"
    env = {"NANOCHAT_BASE_DIR": str(mid_base), "OMP_NUM_THREADS": "1"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        rc = cli.main(["train", "--workload", "mid_train", "--nproc", str(W), "--run-dir", str(run_dir), "--",
                       *FLAGS])
    return rc, run_dir


@pytest.mark.slow
def test_two_ranks_train_and_leave_a_mid_checkpoint(finished_run, mid_base, monkeypatch):
    rc, run_dir = finished_run
    assert rc == 0, (run_dir / TRAIN_LOG).read_text()[-3000:]
    run = assert_follows_contract(run_dir)
    assert run["status"] == "ok" and run["workload"] == "nanochat-mid" and run["world_size"] == W
    assert run["num_iterations"] == BATCHES - 1 and run["grad_accum"] == 1
    assert run["checkpoint"] == {"step": BATCHES - 1, "dir": str(mid_base / "mid_checkpoints" / "d2")}
    assert run["scores"]["val_bpb"] > 0 and run["data"]["origin"] == "generated"
    events = [json.loads(line) for line in (run_dir / METRICS_JSONL).read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "step"] == list(range(1, BATCHES))
    assert [e["step"] for e in events if e["event"] == "val"] == [0, 3, BATCHES - 1]
    steps = [parse_step_line(line) for line in (run_dir / TRAIN_LOG).read_text().splitlines()]
    assert [s["step"] for s in steps if s] == list(range(1, BATCHES))  # upstream's line, without a total
    from bench.nanochat.checkpoint import load_model

    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(mid_base))
    model, meta = load_model("mid", "cpu")
    assert meta["step"] == BATCHES - 1 and model.config.n_layer == 2 and meta["world_size"] == W
    assert sorted(p.name for p in (mid_base / "mid_checkpoints" / "d2").glob("optim_*")) == \
        [f"optim_{BATCHES - 1:06d}_rank{r}.pt" for r in range(W)]  # every rank's shard, in a folder made first


def run_stage(base, run_dir, *flags):
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), NANOCHAT_BENCH_RUN_DIR=str(run_dir), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "bench.nanochat.mid_train", *FLAGS, *flags], env=env,
                         capture_output=True, text=True, timeout=300)
    return out.returncode, out.stderr.strip().splitlines(), read_run_json(run_dir)


@pytest.mark.slow
@pytest.mark.parametrize("damage, says", [
    ("missing", r"smol-smoltalk/data/train-\*.parquet: missing staged chat data .* run `nanochat-bench data download "
                r"--chat`"),
    ("corrupt", r"identity_conversations.jsonl:2: not valid JSON"),
    ("roles", r"identity_conversations.jsonl:1: message 0 must be \{\"role\": \"user\""),
])
def test_bad_chat_data_ends_with_one_line(mid_base, tmp_path, damage, says):
    import re

    base = tmp_path / "base"
    shutil.copytree(mid_base, base, ignore=shutil.ignore_patterns("mid_checkpoints"))
    identity = base / "identity_conversations.jsonl"
    lines = identity.read_text().splitlines()
    if damage == "missing":
        for f in (base / "chat_data" / "HuggingFaceTB").rglob("train-*.parquet"):
            f.unlink()
    elif damage == "corrupt":
        identity.write_text("\n".join([lines[0], lines[1][:-5], *lines[2:]]) + "\n")
    else:
        messages = json.loads(lines[0])
        identity.write_text("\n".join([json.dumps(messages[::-1]), *lines[1:]]) + "\n")
    rc, stderr, run = run_stage(base, tmp_path / "run", "--dry_run=1")
    assert rc != 0 and run["status"] == "no_data" and re.search(says, run["message"]), (stderr, run["message"])
    errors = [line for line in stderr if "error" in line]
    assert len(errors) == 1 and re.search(says, errors[0]) and "Traceback" not in "\n".join(stderr)


def test_impossible_batch_arithmetic_is_refused_before_any_process(mid_base, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(mid_base))
    rc = cli.main(["train", "--workload", "mid_train", "--nproc", "2", "--run-dir", str(tmp_path / "run"), "--",
                   "--max_seq_len=64", "--device_batch_size=3", "--total_batch_size=256"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and not (tmp_path / "run").exists()
    assert "--total_batch_size=256 is not a multiple of device_batch_size x max_seq_len x world_size = 3 x 64 x 2" \
        in err[0] and "--device_batch_size=2 | 1" in err[0]


@pytest.mark.slow
def test_the_deadline_ends_it_as_timeout_with_a_checkpoint(mid_base, tmp_path):
    import time

    base = tmp_path / "base"
    shutil.copytree(mid_base, base, ignore=shutil.ignore_patterns("mid_checkpoints"))
    # the first step ends after this deadline (start-up alone takes longer), so the stage stops after it
    rc, stderr, run = run_stage(base, tmp_path / "run", f"--deadline={time.time() + 1:.0f}")
    assert rc == 0 and run["status"] == "timeout", (stderr, run.get("message"))
    assert "stopped at step 1 to end before the time limit (--deadline)" in run["message"]
    assert run["checkpoint"]["step"] == 1 and (base / "mid_checkpoints" / "d2" / "model_000001.pt").is_file()
