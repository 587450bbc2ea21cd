"""chat_eval as a stage: 2 ranks on CPU (torchrun, gloo) over a tiny checkpoint and the generated chat data, its
run record (a `score` event per task, ChatCORE, scores in run.json), and bad input as one line each.

    python -m pytest tests/integration/test_chat_eval_stage.py -q
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict

import pytest

from bench.contract import METRICS_JSONL, read_run_json
from bench.launch.local import run_local

TASKS = ["ARC-Easy", "ARC-Challenge", "MMLU", "GSM8K", "HumanEval", "SpellingBee"]


@pytest.fixture(scope="module")
def eval_base(tiny_base_dir, tmp_path_factory):
    """A base directory with the tiny tokenizer, the chat stand-ins and a depth-2 mid checkpoint."""
    import torch

    from bench.nanochat import chatgen
    from bench.nanochat.checkpoint import save_checkpoint
    from bench.nanochat.gpt import GPTConfig, build_model

    base = tmp_path_factory.mktemp("chat-eval-base")
    shutil.copytree(tiny_base_dir / "tokenizer", base / "tokenizer")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NANOCHAT_BASE_DIR", str(base))
        chatgen.generate()
    torch.manual_seed(0)
    config = GPTConfig.from_depth(2, 512, 256, aspect_ratio=32)
    model = build_model(config, "cpu")
    with torch.no_grad():  # every weight random: the init's zero projections would make every answer the same
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    save_checkpoint(base / "mid_checkpoints" / "d2", 5, model.state_dict(), [],
                    {"step": 5, "model_config": asdict(config)})
    return base


def env_for(base):
    return dict(os.environ, NANOCHAT_BASE_DIR=str(base), OMP_NUM_THREADS="1")


def test_two_ranks_evaluate_every_task_and_record_the_scores(eval_base, tmp_path):
    args = ["-i", "mid", "-x", "4", "-m", "8", "-b", "3", "--device-type=cpu", "--preflight=0"]
    rc = run_local(args, nproc=2, run_dir=tmp_path, env=env_for(eval_base), workload="chat_eval")
    log = (tmp_path / "train.log").read_text()
    assert rc == 0, log[-3000:]
    run = read_run_json(tmp_path)
    assert (run["status"], run["workload"], run["world_size"]) == ("ok", "nanochat-chat-eval", 2), run["message"]
    accuracy = run["scores"]
    assert set(accuracy) == {*TASKS, "ChatCORE"}
    events = [json.loads(line) for line in (tmp_path / METRICS_JSONL).read_text().splitlines()]
    scores = {e["name"]: e for e in events if e["event"] == "score"}
    for name in TASKS:
        assert scores[name]["problems"] == 4 and scores[name]["seconds"] > 0
        assert scores[name]["value"] == accuracy[name]
        assert f"{name} accuracy: {100 * accuracy[name]:.2f}%" in log
    for name in ("GSM8K", "HumanEval", "SpellingBee"):  # generative: tokens generated, both ranks' work
        assert 4 <= scores[name]["tokens"] <= 4 * 8
    expected = sum((accuracy[n] - b) / (1 - b) for n, b in zip(TASKS, [0.25] * 3 + [0.0] * 3)) / 6
    assert accuracy["ChatCORE"] == pytest.approx(expected)
    assert "Rank 1 | 0/2 (0.00%)" in log and log.count("Final: ") == 6  # every rank's tally; one Final per task


def one_line_error(base, *args):
    out = subprocess.run([sys.executable, "-m", "bench.nanochat.chat_eval", *args, "--device-type=cpu"],
                         env=env_for(base), capture_output=True, text=True, timeout=120)
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    return [line for line in lines if "error" in line]  # `[rank 0] error (failed): ...`


def test_an_unknown_task_is_one_line_naming_the_valid_ones(eval_base):
    errors = one_line_error(eval_base, "-i", "mid", "-a", "ARC-Easy|HumanEvil")
    assert len(errors) == 1 and "'HumanEvil'" in errors[0] and "|".join(TASKS) in errors[0], errors


def test_a_missing_checkpoint_is_one_line_naming_the_folder(eval_base):
    errors = one_line_error(eval_base, "-i", "sft")
    assert len(errors) == 1 and str(eval_base / "chatsft_checkpoints") in errors[0], errors
