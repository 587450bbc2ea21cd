"""chat_sft for real: a base checkpoint fine-tuned by 2 CPU ranks through `nanochat-bench train --workload chat_sft`
on generated chat data, run.json ok and the sft checkpoint readable by load_model; bad input ends with one line.
mid_train on the same base checkpoint and data, for what its run directory records of its horizon.
python -m pytest tests/unit/nanochat/test_chat_sft_run.py -q"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from bench.nanochat.checkpoint import load_model, save_checkpoint
from bench.nanochat.gpt import GPTConfig, build_model

SFT_FLAGS = ["--device_type=cpu", "--source=base", "--device_batch_size=2", "--target_examples_per_step=4",
             "--eval_steps=1", "--eval_metrics_every=-1", "--preflight=0"]


@pytest.fixture(scope="module")
def sft_base(tiny_base_dir, tmp_path_factory):
    """A base directory with the tiny tokenizer, `data generate --chat` stand-ins and a base checkpoint (d1)."""
    from bench.nanochat import chatgen

    base = tmp_path_factory.mktemp("sft-base")
    shutil.copytree(tiny_base_dir / "tokenizer", base / "tokenizer")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NANOCHAT_BASE_DIR", str(base))
        chatgen.generate()
        config = GPTConfig.from_depth(1, 512, 256, 64)
        save_checkpoint(base / "base_checkpoints" / "d1", 7, build_model(config, "cpu").state_dict(), [],
                        {"step": 7, "model_config": asdict(config)})
    return base


def train(base: Path, run_dir: Path, nproc: int, *flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "bench.cli", "train", "--workload", "chat_sft", "--nproc", str(nproc),
                           "--run-dir", str(run_dir), "--", *SFT_FLAGS, *flags], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_two_ranks_fine_tune_the_base_checkpoint_into_an_sft_one(sft_base, tmp_path, monkeypatch):
    out = train(sft_base, tmp_path / "run", 2, "--num_iterations=4", "--eval_every=2", "--eval_metrics_every=100",
                "--eval_metrics_max_problems=8")  # the accuracies at the last step only
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "=> Setting grad accum steps: 1" in out.stdout
    assert "Step 00002/00004 | Training loss:" in out.stdout and "Step 00003 | Validation loss:" in out.stdout
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "ok" and record["workload"] == "nanochat-sft" and record["world_size"] == 2
    assert record["checkpoint"]["step"] == 3 and record["checkpoint"]["dir"].endswith("chatsft_checkpoints/d1")
    assert "Step 00003 | mmlu_acc: " in out.stdout and ", arc_easy_acc: " in out.stdout
    assert set(record["scores"]) == {"val_loss", "train_loss", "mmlu_acc", "arc_easy_acc"}
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    scored = {e["name"]: e for e in steps if e["event"] == "score"}
    assert scored["mmlu_acc"]["problems"] == 8 and scored["arc_easy_acc"]["value"] == record["scores"]["arc_easy_acc"]
    steps = [e for e in steps if e["event"] == "step"]
    assert [e["step"] for e in steps] == [0, 1, 2] and all(e["tok_per_sec"] > 0 for e in steps)
    assert all(e["fwd_bwd_ms"] > 0 and e["optim_ms"] is not None for e in steps)  # the step split
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(sft_base))
    model, meta = load_model("sft", "cpu")
    assert meta["step"] == 3 and model.config.n_layer == 1 and meta["val_loss"] == record["scores"]["val_loss"]
    assert meta["mmlu_acc"] == record["scores"]["mmlu_acc"]
    assert not list(Path(meta["checkpoint_dir"]).glob("optim_*"))  # SFT keeps no optimizer state


def error_line(out: subprocess.CompletedProcess) -> str:
    """The one line saying why (the CLI's `error:`, or the failing rank's `[rank 0] error (<status>):`); the
    output holds no traceback."""
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "Traceback" not in text, text[-3000:]
    lines = [line for line in text.splitlines() if line.startswith(("error:", "[rank 0] error"))]
    assert len(lines) == 1, text[-3000:]
    return lines[0]


def test_bad_input_ends_with_one_clear_line(sft_base, tmp_path):
    # the batch arithmetic: refused before any process starts
    out = train(sft_base, tmp_path / "a", 2, "--num_iterations=3", "--target_examples_per_step=6")
    assert "--target_examples_per_step=6 is not a multiple of device_batch_size x world_size = 2 x 2" in error_line(out)
    # a missing staged file names the download command
    arc = next((sft_base / "chat_data" / "allenai" / "ai2_arc" / "ARC-Easy").glob("train-*.parquet"))
    arc.rename(arc.with_suffix(".away"))
    try:
        out = train(sft_base, tmp_path / "b", 1, "--num_iterations=3")
    finally:
        arc.with_suffix(".away").rename(arc)
    line = error_line(out)
    assert "ai2_arc" in line and "missing staged chat data" in line and "nanochat-bench data download --chat" in line
    record = json.loads((tmp_path / "b" / "run.json").read_text())
    assert record["status"] in ("no_data", "failed") and "data download --chat" in record["message"]
    # a corrupt line of the identity conversations, and one out of role order, name the file and line
    identity = sft_base / "identity_conversations.jsonl"
    good = identity.read_text()
    bad_lines = {"not valid JSON": '[{"role": "user", "content": "hi"}, {"role": "assistant"',
                 "message 1 must be {\"role\": \"assistant\"": '[{"role": "user", "content": "hi"}, '
                                                               '{"role": "user", "content": "again"}]'}
    for i, (why, bad) in enumerate(bad_lines.items()):
        identity.write_text(good + bad + "\n")
        try:
            out = train(sft_base, tmp_path / f"c{i}", 1, "--num_iterations=3")
        finally:
            identity.write_text(good)
        assert f"{identity}:{good.count(chr(10)) + 1}: {why}" in error_line(out)
    # a model whose rotary embeddings are shorter than SFT's longest rows
    short = GPTConfig.from_depth(1, 512, 128, 64)
    save_checkpoint(sft_base / "base_checkpoints" / "short", 1, build_model(short, "cpu").state_dict(), [],
                    {"step": 1, "model_config": asdict(short)})
    out = train(sft_base, tmp_path / "d", 1, "--num_iterations=3", "--model_tag=short")
    assert "rotary embeddings cover 1280 positions, SFT's rows up to 2047; train it with --max_seq_len >= 205" \
        in error_line(out)


def test_a_deadline_saves_the_model_and_ends_as_timeout(sft_base, tmp_path):
    """A deadline already passed: after the first step (the first that gives a step time) the run stops."""
    out = train(sft_base, tmp_path / "run", 1, "--num_iterations=10", "--eval_every=-1", "--deadline=1")
    assert out.returncode != 0 or "status: timeout" in out.stdout, out.stdout[-2000:]
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "timeout" and "stopped at step 1 of 10" in record["message"]
    assert record["checkpoint"] == {"step": 1, "dir": str(sft_base / "chatsft_checkpoints" / "d1")}
    assert (sft_base / "chatsft_checkpoints" / "d1" / "model_000001.pt").is_file()


@pytest.mark.parametrize("workload, folder, flags, advice", [
    ("chat_sft", "chatsft_checkpoints", SFT_FLAGS, "give a NANOCHAT_BASE_DIR that can be"),
    ("mid_train", "mid_checkpoints", ["--device_type=cpu", "--device_batch_size=2", "--max_seq_len=64",
                                      "--total_batch_size=128", "--eval_every=-1", "--preflight=0"],
     "give a NANOCHAT_BASE_DIR that can be, or pass --dry_run=1 to save nothing")])
def test_a_checkpoint_directory_that_cannot_be_written_stops_the_stage_before_its_first_step(
        sft_base, tmp_path, workload, folder, flags, advice):
    """SFT found out at its very end, after every step, and mid-training at its one save, after all its steps, that
    its checkpoint directory could not be written (tests run as root: a file in the way stands for a read-only one)."""
    base = tmp_path / "base"
    shutil.copytree(sft_base, base)
    shutil.rmtree(base / folder, ignore_errors=True)  # what the tests before saved there
    (base / folder).write_text("in the way")
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "bench.cli", "train", "--workload", workload, "--nproc", "1",
                          "--run-dir", str(tmp_path / "run"), "--", *flags, "--num_iterations=3"], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert (f"the checkpoint directory {base / folder / 'd1'} cannot be written: {base / folder} is a file in the "
            f"way, not a directory; {advice}") in error_line(out)
    assert '"event": "step"' not in (tmp_path / "run" / "metrics.jsonl").read_text()


MID_FLAGS = ["--device_type=cpu", "--device_batch_size=2", "--max_seq_len=64", "--total_batch_size=128",
             "--eval_every=-1", "--preflight=0", "--dry_run=1"]


def mid_train(base: Path, run_dir: Path, *flags: str) -> dict:
    """run.json of a 1-rank mid_train run."""
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "bench.cli", "train", "--workload", "mid_train", "--nproc", "1",
                          "--run-dir", str(run_dir), "--", *MID_FLAGS, *flags], env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert (run_dir / "run.json").is_file(), out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads((run_dir / "run.json").read_text())


def test_a_mid_train_its_deadline_stopped_records_no_horizon_of_the_steps_it_took(sft_base, tmp_path):
    """Given no --num_iterations, mid_train trains until its data ends; stopped by --deadline after its first step, it
    recorded that step as its num_iterations, and collect's num_iterations column read 1 as the horizon it was set to
    train (an epoch of the mixture, which it never reached)."""
    from bench.analysis.rundir import horizon

    record = mid_train(sft_base, tmp_path / "run", "--deadline=1")  # already passed: stops after the first step
    assert record["status"] == "timeout" and "stopped at step 1 " in record["message"]
    assert record.get("num_iterations") is None and horizon(record["config"], record) == -1


def test_status_shows_a_running_mid_train_its_step_of_the_steps_it_takes(sft_base, tmp_path):
    """mid_train recorded its horizon only as it ended, so `status` showed a running one `at step 1` with no total, even
    given --num_iterations; given none, nothing said that it runs until its data ends."""
    from bench.analysis.rundir import horizon
    from bench.launch.status import _derive

    shown, records = {}, {}
    for name, flags in (("given", ["--num_iterations=4"]), ("epoch", [])):
        run = tmp_path / name
        records[name] = mid_train(sft_base, run, "--deadline=1", *flags)  # stops after its first step
        # the run directory as status read it during that step: running, no end recorded
        (run / "run.json").write_text(json.dumps({**records[name], "status": "running", "message": None,
                                                  "evidence": []}))
        shown[name] = _derive(run, None)
    assert shown == {"given": ("running", "at step 1 of 3"), "epoch": ("running", "at step 1 (until data ends)")}
    given = records["given"]  # 4 batches, the first the prefetch: 3 steps; collect's column keeps the flag
    assert given["num_iterations"] == 3 and horizon(given["config"], given) == 4


def test_status_shows_a_running_chat_sft_its_updates_done_of_the_updates_it_makes(sft_base, tmp_path):
    """chat_sft numbers its steps from 0 and its last pass of --num_iterations only evaluates, so `status` showed a
    run given --num_iterations=4 (3 updates) `at step 2 of 4` at its last update, never reaching its end."""
    from bench.launch.status import _derive

    out = train(sft_base, tmp_path / "run", 1, "--num_iterations=4", "--eval_every=-1")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = tmp_path / "run"
    record = json.loads((run / "run.json").read_text())
    # the run directory as status read it during its last update: running, no end recorded
    (run / "run.json").write_text(json.dumps({**record, "status": "running", "message": None, "evidence": []}))
    assert _derive(run, None) == ("running", "at step 3 of 3")
