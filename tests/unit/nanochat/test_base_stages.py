"""base_loss and base_eval as real 2-rank CPU runs on a tiny checkpoint, through the local launcher; a missing
and a damaged eval bundle each end the run with one line naming the file and the staging command.
python -m pytest tests/unit/nanochat/test_base_stages.py -q"""

import json
import os
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from bench.launch.local import run_local
from bench.nanochat import evalgen
from bench.nanochat.checkpoint import save_checkpoint
from bench.nanochat.gpt import GPTConfig, build_model
from bench.workloads import get
from bench.workloads.base import Estimate, PointContext

SEQ = 128


@pytest.fixture(scope="module")
def stage_base(tiny_base_dir, tmp_path_factory):
    """The tiny shards and tokenizer, a depth-1 checkpoint (random weights: the stages need no trained model) and
    a generated bundle of 12 examples a task."""
    base = tmp_path_factory.mktemp("stage_base")
    for name in ("base_data", "tokenizer"):
        (base / name).symlink_to(tiny_base_dir / name)
    torch.manual_seed(0)
    config = GPTConfig.from_depth(1, 512, SEQ)
    model = build_model(config, "cpu")
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 0.02)  # the zero init would make every logit equal
    save_checkpoint(base / "base_checkpoints" / "d1", 5, model.state_dict(), [],
                    {"step": 5, "model_config": asdict(config)})
    evalgen.generate(base / "eval_bundle", rows=12)
    return base


def run_stage(workload: str, args: list[str], run_dir: Path, base: Path) -> tuple[dict, list[dict], str]:
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=os.getcwd())
    env.pop("NANOCHAT_VAL_FILES_K", None)
    run_local(args, 2, run_dir, env=env, workload=workload)
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return json.loads((run_dir / "run.json").read_text()), events, (run_dir / "train.log").read_text()


def test_base_loss_two_ranks(stage_base, tmp_path):
    manifest, events, log = run_stage("base_loss", ["--device_batch_size=2", f"--split_tokens={2 * SEQ * 2 * 3}"],
                                      tmp_path / "loss", stage_base)
    assert manifest["status"] == "ok", log[-2000:]
    assert manifest["workload"] == "nanochat-base-loss" and manifest["world_size"] == 2
    assert manifest["config"]["model_tag"] == "d1" and manifest["config"]["model_step"] == 5
    scores = {e["name"]: e for e in events if e["event"] == "score"}
    assert set(scores) == {"train_bpb", "val_bpb"} and scores["val_bpb"]["problems"] == 2 * 2 * 3
    assert all(s["tokens"] == 2 * SEQ * 2 * 3 and s["seconds"] > 0 for s in scores.values())  # each split's tokens
    assert manifest["scores"]["val_bpb"] == scores["val_bpb"]["value"] > 0
    assert [e["val_bpb"] for e in events if e["event"] == "val"] == [manifest["scores"]["val_bpb"]]
    assert f"val bpb: {manifest['scores']['val_bpb']:.4f}" in log
    assert log.count("<|bos|>The capital of France is") == 1  # rank 0 alone samples
    # an evaluation ends as nanochat's base_loss does: no training time or minimum bpb a log reader would misread
    assert "Peak memory usage: not measured on cpu" in log
    assert "Total training time" not in log and "Minimum validation bpb" not in log


def test_base_eval_two_ranks_and_its_csv(stage_base, tmp_path):
    manifest, events, log = run_stage("base_eval", ["--max_per_task=12"], tmp_path / "eval", stage_base)
    assert manifest["status"] == "ok", log[-2000:]
    assert manifest["workload"] == "nanochat-base-eval"
    assert manifest["config"]["eval_bundle"]["origin"] == "generated"
    tasks = [e for e in events if e["event"] == "score" and e["name"] != "CORE"]
    assert len(tasks) == 22 and all(e["problems"] == 12 for e in tasks)
    core = [e["value"] for e in events if e["event"] == "score" and e["name"] == "CORE"]
    assert core == [pytest.approx(sum(e["centered"] for e in tasks) / 22)] and manifest["scores"]["CORE"] == core[0]
    csv = (tmp_path / "eval" / "base_eval.csv").read_text()
    assert csv == (stage_base / "base_eval" / "base_model_000005.csv").read_text()
    assert csv.splitlines()[-1].startswith("CORE") and csv in log and "Model: base_model (step 5)" in log
    assert "Evaluating: jeopardy (10-shot, type: language_modeling)... accuracy: " in log
    assert "Total training time" not in log and "Minimum validation bpb" not in log


def _error_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "error (" in line]


def test_a_missing_bundle_ends_in_one_line_naming_the_download(stage_base, tmp_path):
    empty = tmp_path / "base"
    empty.mkdir()
    for name in ("base_data", "tokenizer", "base_checkpoints"):
        (empty / name).symlink_to(stage_base / name)
    manifest, _, log = run_stage("base_eval", ["--max_per_task=12"], tmp_path / "run", empty)
    assert manifest["status"] == "no_data", log[-2000:]
    assert "nanochat-bench data download --eval-bundle" in manifest["message"]
    assert str(empty / "eval_bundle") in manifest["message"] and "\n" not in manifest["message"]
    assert "Traceback" not in log and len({line.split("] ", 1)[-1] for line in _error_lines(log)}) == 1


def test_a_damaged_bundle_line_ends_in_one_line_naming_file_and_line(stage_base, tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    for name in ("base_data", "tokenizer", "base_checkpoints"):
        (base / name).symlink_to(stage_base / name)
    bundle = evalgen.generate(base / "eval_bundle", rows=12)
    victim = bundle / "eval_data" / "language_understanding" / "hellaswag.jsonl"  # the first task's
    lines = victim.read_text().splitlines()
    lines[6] = lines[6][:25]  # a line cut short
    victim.write_text("\n".join(lines) + "\n")
    manifest, _, log = run_stage("base_eval", ["--max_per_task=12"], tmp_path / "run", base)
    assert manifest["status"] == "no_data", log[-2000:]
    assert f"{victim}:7: not valid JSON" in manifest["message"] and "\n" not in manifest["message"]
    assert "Traceback" not in log


def test_the_planner_rounds_split_tokens_to_the_ranks():
    stage = get("base_loss")
    settings = stage.settings({"device_batch_size": 32}, "weak")
    estimate = Estimate(None, 0.4, 60.0, 4)
    plan = lambda ranks: stage.plan(settings, PointContext(1, ranks, "weak", None, estimate))  # noqa: E731
    eight = plan(8)
    assert eight.column("split_tokens") == 20 * 524288 and eight.column("eval_steps") == 20
    assert "->" not in eight.note and eight.est_hours is None  # no rounding; no model known outside a flow
    three = plan(3)
    assert three.column("split_tokens") % (32 * 2048 * 3) == 0 and three.column("eval_steps") == 53
    assert "split_tokens 10,485,760 -> 10,420,224" in three.note
    assert f"--split_tokens={three.column('split_tokens')}" in three.train_argv
    assert plan(256).column("eval_steps") == 1  # at least one batch


@pytest.mark.parametrize("value", ["0", "-2"])
def test_base_loss_refuses_a_sequence_length_of_0_or_below_minus_1(value):
    """--max_seq_len 0 or below -1 was read as -1 (from the checkpoint), though the help names only -1."""
    from bench.errors import ConfigError
    from bench.nanochat import base_loss

    with pytest.raises(ConfigError, match=rf"^--max_seq_len={value}: give the checkpoint's sequence length, or -1"):
        base_loss.parse([f"--max_seq_len={value}"])
    assert base_loss.parse(["--max_seq_len=-1"]).max_seq_len == -1


def test_training_samples_are_upstream_engine_lines(tiny_base_dir, tmp_path):
    """base_train prints its samples as upstream's Engine.generate_batch returns them, decoded whole: <|bos|>, the
    prompt, the greedy tokens up to a sampled BOS or assistant_end (the ones base_loss prints)."""
    base = tmp_path / "base"
    for name in ("base_data", "tokenizer"):
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).symlink_to(tiny_base_dir / name)
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=os.getcwd())
    env.pop("NANOCHAT_VAL_FILES_K", None)
    run_local(["--device_type=cpu", "--depth=1", "--max_seq_len=64", "--device_batch_size=2",
               "--total_batch_size=128", "--num_iterations=2", "--eval_every=-1", "--sample_every=1"],
              1, tmp_path / "run", env=env, workload="nanochat")
    log = (tmp_path / "run" / "train.log").read_text()
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "ok", log[-2000:]
    assert log.count("<|bos|>The capital of France is") == 2  # step 1 and the last


@pytest.mark.parametrize("argv", [["--max-per-task=16"], ["--max-per-task", "16"], ["--max_per_task=16"]])
def test_base_eval_takes_upstream_argparse_spelling_of_max_per_task(argv):
    """Upstream base_eval's argparse flag is --max-per-task; it was refused as an unknown argument."""
    from bench.nanochat import base_eval_config

    assert base_eval_config.parse(argv).max_per_task == 16


def test_base_eval_max_per_task_without_its_value_is_one_line():
    from bench.errors import ConfigError
    from bench.nanochat import base_eval_config

    with pytest.raises(ConfigError, match=r"^--max-per-task: expects a value \(see --help\)$"):
        base_eval_config.parse(["--max-per-task"])
