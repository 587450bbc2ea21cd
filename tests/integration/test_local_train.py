"""`nanochat-bench train` on this machine, as a user runs it (real 2-rank runs of a tiny model):
- its output keeps its streams apart: the ranks' step lines on stdout, a failure's cause (the rank's
  `error (...)` line, torchrun's line) on stderr, as the README says; train.log has both;
- a `--run-dir` that holds a finished run is refused naming --overwrite and --resume_from_step, and
  `--overwrite` trains afresh there with nothing of the old run left.

    python -m pytest tests/integration/test_local_train.py -q
"""

import json
import os
import subprocess
import sys

import pytest

from bench.contract import read_run_json

TINY = ["--depth=1", "--max_seq_len=32", "--device_batch_size=2", "--total_batch_size=128",
        "--eval_every=-1", "--sample_every=-1", "--model_tag=test_local_train"]
DIVERGING = ["--matrix_lr=1e4", "--embedding_lr=1e4", "--unembedding_lr=1e4", "--num_iterations=200"]


def train(base_dir, run_dir, *train_args: str, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base_dir), OMP_NUM_THREADS="1")
    for key in ("NANOCHAT_VAL_FILES_K", "NANOCHAT_BENCH_RUN_DIR"):
        env.pop(key, None)
    return subprocess.run([sys.executable, "-m", "bench.cli", "train", "--nproc", "2", "--run-dir", str(run_dir),
                           *flags, "--", *train_args], env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_a_failing_two_rank_run_names_its_cause_on_stderr_only(tiny_base_dir, tmp_path):
    run_dir = tmp_path / "run"
    proc = train(tiny_base_dir, run_dir, *TINY, *DIVERGING)
    assert proc.returncode != 0
    assert read_run_json(run_dir)["status"] == "diverged"
    assert "error (diverged)" in proc.stderr and "torchrun: rank" in proc.stderr
    assert "error (" not in proc.stdout and "torchrun:" not in proc.stdout, proc.stdout[-2000:]
    assert "step 00001/" in proc.stdout and "step 00001/" not in proc.stderr
    log = (run_dir / "train.log").read_text()
    assert "step 00001/" in log and "error (diverged)" in log


def step_events(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == "step"]


@pytest.mark.slow
def test_a_finished_run_dir_is_refused_then_overwritten_with_nothing_of_the_old_run_left(tiny_base_dir, tmp_path):
    run_dir = tmp_path / "run"
    first = train(tiny_base_dir, run_dir, *TINY, "--num_iterations=3")
    assert first.returncode == 0, first.stderr[-2000:]
    (run_dir / "report").mkdir()  # what a later step left in the run directory (smoke writes its report there)
    (run_dir / "report" / "report.md").write_text("the old run's report\n")
    before = (run_dir / "run.json").read_text(), (run_dir / "metrics.jsonl").read_text()

    again = train(tiny_base_dir, run_dir, *TINY, "--num_iterations=5")
    assert again.returncode == 1
    refusal = [ln for ln in again.stderr.splitlines() if ln.startswith("error:")]
    assert len(refusal) == 1 and "already holds a run" in refusal[0], again.stderr
    assert "--overwrite" in refusal[0] and "--resume_from_step" in refusal[0]
    assert ((run_dir / "run.json").read_text(), (run_dir / "metrics.jsonl").read_text()) == before

    fresh = train(tiny_base_dir, run_dir, *TINY, "--num_iterations=5", flags=("--overwrite",))
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "ok" and run["config"]["num_iterations"] == 5
    assert run["launch"]["t0"] > json.loads(before[0])["launch"]["t0"]
    assert [e["step"] for e in step_events(run_dir)] == sorted({e["step"] for e in step_events(run_dir)})
    assert len(step_events(run_dir)) == 5 and not (run_dir / "report").exists()
    log = (run_dir / "train.log").read_text()
    assert "/00005" in log and "/00003 " not in log  # train.log is the new run's alone


def test_overwrite_with_resume_is_refused(tmp_path, capsys):
    from bench.cli import main

    assert main(["train", "--nproc", "1", "--run-dir", str(tmp_path / "r"), "--overwrite", "--",
                 "--resume_from_step=2"]) == 1
    assert "--overwrite with --resume_from_step" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_overwrite_deletes_nothing_where_no_run_is(tmp_path):
    from bench.runside import runclaim

    keep = tmp_path / "notes.txt"
    keep.write_text("not a run's file")
    runclaim.claim(tmp_path, refuse_finished=True, overwrite=True)
    runclaim.release(tmp_path)
    assert keep.read_text() == "not a run's file"
