"""How a training run ends when something goes wrong: one failing rank stops every rank within seconds,
SIGTERM leaves run.json `cancelled`, missing data is `no_data`, a bad batch size is refused up front.

    python -m pytest tests/integration/test_train_failures.py -q
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from bench.contract import METRICS_JSONL, read_run_json

TINY = ["--depth=1", "--max_seq_len=32", "--device_batch_size=2", "--total_batch_size=128",
        "--eval_every=-1", "--sample_every=-1", "--model_tag=test_failures"]

# A rank-1 failure in the middle of the optimizer step: rank 0 then waits inside a collective that will
# never complete (gloo's own timeout is 30 minutes), the worst case for stopping promptly.
FAILING_RANK = textwrap.dedent("""
    import os, sys
    from bench.nanochat import muon, train

    original_step = muon.DistMuon.step
    calls = []

    def step(self):
        calls.append(1)
        if int(os.environ["RANK"]) == 1 and len(calls) == 3:
            raise RuntimeError("injected failure on rank 1")
        return original_step(self)

    muon.DistMuon.step = step
    sys.exit(train.main(sys.argv[1:]))
""")


def env_for(base_dir, run_dir):
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base_dir), NANOCHAT_BENCH_RUN_DIR=str(run_dir), OMP_NUM_THREADS="1")
    env.pop("NANOCHAT_VAL_FILES_K", None)
    return env


def events(run_dir):
    path = run_dir / METRICS_JSONL
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_one_failing_rank_ends_all_ranks_promptly(tiny_base_dir, tmp_path):
    script = tmp_path / "failing_rank.py"
    script.write_text(FAILING_RANK)
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), "--", *TINY, "--num_iterations=50"],
                          env=env_for(tiny_base_dir, run_dir), capture_output=True, text=True, timeout=180)
    ended = time.time()
    assert proc.returncode != 0
    run = read_run_json(run_dir)
    assert run["status"] == "failed"
    assert "rank 1" in run["message"] and "injected failure on rank 1" in run["message"]
    errors = [e for e in events(run_dir) if e["event"] == "error"]
    assert len(errors) == 1 and errors[0]["kind"] == "failed" and errors[0]["rank"] == 1
    assert ended - errors[0]["t"] < 20, "the other rank waited for a collective timeout"
    assert "injected failure on rank 1" in proc.stderr


@pytest.mark.slow
def test_sigterm_marks_the_run_cancelled(tiny_base_dir, tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "bench.nanochat.train", *TINY, "--num_iterations=100000"],
                            env=env_for(tiny_base_dir, run_dir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while not any(e["event"] == "step" for e in events(run_dir)):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.time() < deadline, "no training step within 120 s"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 128 + signal.SIGTERM
    run = read_run_json(run_dir)  # valid JSON, final status
    assert run["status"] == "cancelled" and "signal 15" in run["message"]
    assert events(run_dir)[-1]["event"] == "error" and events(run_dir)[-1]["kind"] == "cancelled"


@pytest.mark.slow
def test_missing_data_is_no_data(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "bench.nanochat.train", *TINY, "--num_iterations=5"],
                          env=env_for(tmp_path / "empty_base", run_dir), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    run = read_run_json(run_dir)
    assert run["status"] == "no_data" and "tokenizer" in run["message"]
    assert "Traceback" not in proc.stderr  # an expected failure: one clear line
    assert "error (no_data)" in proc.stderr


def test_bad_total_batch_size_is_refused_before_launch(tmp_path, capsys):
    from bench.cli import main

    run_dir = tmp_path / "run"
    rc = main(["train", "--nproc", "2", "--run-dir", str(run_dir), "--", "--max_seq_len=64",
               "--device_batch_size=3", "--total_batch_size=1000"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "--total_batch_size=1,000 is not a multiple of" in err and "3 x 64 x 2 = 384" in err
    assert not run_dir.exists()


def test_unknown_trainer_flag_is_refused_before_launch(tmp_path, capsys):
    from bench.cli import main

    assert main(["train", "--nproc", "1", "--run-dir", str(tmp_path / "r"), "--", "--detph=4"]) == 1
    assert "did you mean --depth" in capsys.readouterr().err


@pytest.mark.slow
def test_a_diverged_run_is_diverged_and_its_records_stay_json(tiny_base_dir, tmp_path):
    """Issue 23: LRs of 1e4 once ended `ok` with bare NaN in run.json and metrics.jsonl."""
    run_dir = tmp_path / "run"
    lrs = ["--matrix_lr=1e4", "--embedding_lr=1e4", "--unembedding_lr=1e4"]
    proc = subprocess.run([sys.executable, "-m", "bench.nanochat.train", *TINY, "--num_iterations=200", *lrs],
                          env=env_for(tiny_base_dir, run_dir), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1
    run = read_run_json(run_dir)  # valid JSON
    assert run["status"] == "diverged" and "diverged at step" in run["message"]
    assert events(run_dir)[-1]["kind"] == "diverged"  # every line parses
    assert "NaN" not in (run_dir / "run.json").read_text() + (run_dir / METRICS_JSONL).read_text()
    assert "error (diverged): diverged at step" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_cpu_run_prints_no_figures_it_did_not_measure(tiny_base_dir, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.nanochat.train", *TINY, "--num_iterations=3"],
                          env=env_for(tiny_base_dir, tmp_path / "run"), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Peak memory usage: not measured on cpu" in proc.stdout
    assert "0.00MiB" not in proc.stdout and "Minimum validation bpb: inf" not in proc.stdout
    assert "| mfu: - |" in proc.stdout and "mfu: 0.00" not in proc.stdout  # not measured, not a measured zero


def test_a_finished_run_directory_is_refused_and_kept(tmp_path, capsys):
    from bench.cli import main

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / METRICS_JSONL).write_text('{"event": "start", "t": 1.0}\n')
    (run_dir / "run.json").write_text(json.dumps({"status": "ok", "run_id": "run"}))
    assert main(["train", "--nproc", "1", "--run-dir", str(run_dir), "--", "--num_iterations=2"]) == 1
    assert "already holds a run" in capsys.readouterr().err
    assert read_run_json(run_dir) == {"status": "ok", "run_id": "run"}


def test_a_learning_rate_of_nan_is_refused_before_launch(tmp_path, capsys):
    from bench.cli import main

    assert main(["train", "--nproc", "1", "--run-dir", str(tmp_path / "r"), "--", "--matrix_lr=nan"]) == 1
    assert "--matrix_lr=nan: a learning rate must be a finite number > 0" in capsys.readouterr().err
