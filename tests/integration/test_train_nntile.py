"""The nntile workload for real: NNTile's GPT-2 trained on StarPU's CPU workers through
`nanochat-bench train --workload nntile`, then collected and reported beside a nanochat run.

    python -m pytest tests/integration/test_train_nntile.py -q      (~1-2 min once the environment exists)

The NNTile environment (Python 3.12, torch 2.9.1, torch-nntile 0.1.0) is built by
bench/workloads/nntile/env.sh when missing: a few minutes and ~7 GB the first time, cached after
(tests/support/nntile.py). Skipped only where no Python 3.12 exists, never in CI.
"""

import json
import os
import statistics
import subprocess

import pandas as pd
import pytest

from bench.analysis import summarize_runs
from bench.analysis.collect import load_table
from bench.cli import main
from bench.errors import DataError
from bench.launch.local import run_local
from bench.logline import parse_step_line
from bench.nanochat import tokbin
from bench.contract import EVENTS, METRICS_JSONL, TRAIN_LOG, read_run_json
from bench.workloads import nntile
from bench.workloads.nntile.config import flops_per_token, gpt2_shape
from tests.support import nntile as support_nntile
from tests.support.contract import assert_follows_contract

STEPS = 24
SHAPE = {"n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 32, "vocab_size": 512}  # conftest's vocab
BATCH, MINIBATCH = 8, 4  # two minibatches a step: gradients accumulate through NNTile's add
TILES = ["--minibatch-tile=2", "--seq-tile=16", "--head-tile=2"]  # tiled: the fan-in workaround is exercised


@pytest.fixture(scope="session")
def nntile_python():
    return support_nntile.interpreter()


@pytest.fixture(scope="module")
def workspace(tiny_base_dir, tmp_path_factory):
    """Token files of the tiny shards and a GPT-2 config of the tiny shape."""
    root = tmp_path_factory.mktemp("nntile")
    mp = pytest.MonkeyPatch()
    mp.setenv("NANOCHAT_BASE_DIR", str(tiny_base_dir))
    try:
        bins = tokbin.write_bins(root / "bins")
    finally:
        mp.undo()
    config = root / "gpt2_tiny.json"
    config.write_text(json.dumps(SHAPE))
    return root, bins, config


def nntile_flags(config, bins, *extra):
    return [f"--config-path={config}", f"--dataset-path={bins}", f"--batch={BATCH}", f"--minibatch={MINIBATCH}",
            f"--num-batches={STEPS}", "--lr=3e-3", "--start-lr=1e-3", "--full-lr-iter=4", *extra]


@pytest.fixture(scope="module")
def runs(workspace, nntile_python, tiny_base_dir):
    """One NNTile run through the CLI and one nanochat run of a comparable shape on the same tokens."""
    root, bins, config = workspace
    mp = pytest.MonkeyPatch()
    mp.setenv("NANOCHAT_BASE_DIR", str(tiny_base_dir))
    mp.setenv(nntile.ENV_PYTHON, nntile_python)
    mp.setenv("STARPU_NCPU", "2")
    try:
        nn_dir = root / "runs" / "local" / "nntile"
        rc = main(["train", "--workload", "nntile", "--run-dir", str(nn_dir), "--",
                   *nntile_flags(config, bins, *TILES)])
        nc_dir = root / "runs" / "local" / "nanochat"
        nc_rc = run_local(["--depth=1", f"--max_seq_len={SHAPE['n_positions']}", f"--device_batch_size={BATCH}",
                           f"--total_batch_size={BATCH * SHAPE['n_positions']}", f"--num_iterations={STEPS}",
                           "--eval_every=-1", "--sample_every=-1", f"--data_bin_dir={bins}",
                           "--model_tag=test_nntile"], 1, nc_dir, env=dict(os.environ, OMP_NUM_THREADS="1"))
    finally:
        mp.undo()
    return rc, nn_dir, nc_rc, nc_dir


def events_of(run_dir):
    return [json.loads(line) for line in (run_dir / METRICS_JSONL).read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(support_nntile.BUILD_TIMEOUT_S + 900)  # the first NNTile test may build its environment
def test_nntile_run_succeeds_with_the_contracts_run_json(runs, nntile_python):
    rc, run_dir, _, _ = runs
    assert rc == 0, (run_dir / TRAIN_LOG).read_text()[-3000:]
    run = assert_follows_contract(run_dir)  # the launcher and the NNTile runner wrote it through bench/contract/
    assert run["status"] == "ok" and run["message"] is None and run["workload"] == "nntile-gpt2"
    assert (run["world_size"], run["nodes"], run["gpus_per_node"]) == (1, 1, 0)
    assert run["peak_flops_per_gpu"] is None  # CPU: no peak, no MFU
    assert run["flops_per_token"] == flops_per_token(gpt2_shape(run["config"]["config_path"]))
    assert run["num_params"] > 0 and run["num_iterations"] == STEPS and run["grad_accum"] == BATCH // MINIBATCH
    assert run["config"]["seq_tile"] == 16 and run["config"]["max_seq_len"] == SHAPE["n_positions"]
    assert run["software"]["nntile"] == "0.1.0" and run["software"]["starpu"].startswith("1.")
    assert run["software"]["python"].startswith("3.12") and run["software"]["torch"].startswith("2.9.1")
    assert run["nntile"]["starpu"]["ncpu"] == 2 and run["nntile"]["starpu"]["ncuda"] == 0
    assert run["nntile"]["tiling"]["tiled_axis_groups"] >= 3  # batch, seq and each layer's heads
    assert run["launch"]["command"][0] == nntile_python
    assert run["launch"]["cpu_time_s"] > 0 and run["launch"]["wall_time_s"] > 0


@pytest.mark.slow
def test_a_runaway_loss_ends_the_run_as_diverged(workspace, nntile_python, tmp_path, monkeypatch):
    """Regression: with --lr=50 the loss climbed from ln(512) to ~10^5 and the run still ended `ok`;
    a loss that became infinite failed as a schema error. Now nanochat's guard ends it `diverged`."""
    root, bins, config = workspace
    monkeypatch.setenv(nntile.ENV_PYTHON, nntile_python)
    monkeypatch.setenv("STARPU_NCPU", "2")
    run_dir = tmp_path / "run"
    flags = [f"--config-path={config}", f"--dataset-path={bins}", f"--batch={BATCH}", f"--num-batches={STEPS}",
             "--lr=50"]
    main(["train", "--workload", "nntile", "--run-dir", str(run_dir), "--", *flags])
    run = read_run_json(run_dir)
    assert run["status"] == "diverged" and "lower --lr (now 50.0)" in run["message"], run["message"]


@pytest.mark.slow
def test_nntile_events_and_log_lines_are_nanochats(runs):
    _, run_dir, _, _ = runs
    events = events_of(run_dir)
    names = [e["event"] for e in events]
    # imports_done: without it the report counted the imports (7-16 s on 2 cores) as StarPU's start-up
    assert names[:5] == ["start", "imports_done", "dist_init", "model_ready", "first_step"] and names[-1] == "end"
    assert events[2]["backend"] == "starpu"
    for e in events:
        assert set(EVENTS[e["event"]]) <= set(e), e
    steps = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in steps] == list(range(STEPS))
    assert all(e["cpu_s"] > 0 and e["dt_ms"] > 0 and e["mfu"] is None for e in steps)
    assert [round(e["lrm"], 4) for e in steps[:5]] == [round(x / 3, 4) for x in (1, 5 / 3, 7 / 3, 3, 3)]
    lines = [p for p in map(parse_step_line, (run_dir / TRAIN_LOG).read_text().splitlines()) if p]
    assert [p["step"] for p in lines] == list(range(STEPS))
    assert lines[-1]["loss"] == pytest.approx(steps[-1]["loss"], abs=1e-6)


@pytest.mark.slow
def test_nntile_loss_falls(runs):
    _, run_dir, _, _ = runs
    steps = [e for e in events_of(run_dir) if e["event"] == "step"]
    first, last = steps[0]["train_loss"], sum(e["train_loss"] for e in steps[-4:]) / 4
    assert first == pytest.approx(6.24, abs=0.3)  # ln(512) = 6.24: a fresh model knows nothing
    assert last < first - 0.5


@pytest.mark.slow
def test_collect_and_report_put_nntile_beside_nanochat(runs, tmp_path):
    _, nn_dir, nc_rc, nc_dir = runs
    assert nc_rc == 0, (nc_dir / TRAIN_LOG).read_text()[-3000:]
    html = summarize_runs(nn_dir.parent, tmp_path / "report")
    table = load_table(tmp_path / "report").set_index("workload")
    assert set(table.index) == {"nntile-gpt2", "nanochat-base"}
    for workload in table.index:
        row = table.loc[workload]
        assert pd.isna(row["skip_reason"]) and row["tok_per_sec"] > 0 and row["steps_recorded"] == STEPS
        assert row["max_seq_len"] == SHAPE["n_positions"] and row["total_batch_size"] == BATCH * SHAPE["n_positions"]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "nntile-gpt2 d2" in md and "nanochat-base d1" in md and "2 run(s), 2 in the figures" in md
    assert html.exists()


@pytest.mark.slow
def test_collect_leaves_warm_up_epochs_out_as_the_runner_does(workspace, nntile_python, tmp_path, monkeypatch):
    """Regression: the steps of --nepochs-warmup epochs beyond step 10 counted in collect's steady tok/s, though
    the runner leaves them out of its own timed figure; now collect takes the timed epoch's steps alone."""
    _, bins, config = workspace
    monkeypatch.setenv(nntile.ENV_PYTHON, nntile_python)
    monkeypatch.setenv("STARPU_NCPU", "2")
    run_dir = tmp_path / "runs" / "warm"
    batches = 16  # the warm-up epoch is steps 0..15: 5 of them beyond step 10
    assert main(["train", "--workload", "nntile", "--run-dir", str(run_dir), "--", f"--config-path={config}",
                 f"--dataset-path={bins}", f"--batch={BATCH}", f"--num-batches={batches}", "--nepochs-warmup=1"]) == 0
    timed = [e for e in events_of(run_dir) if e["event"] == "step" and not e["warmup_epoch"]]
    assert [e["step"] for e in timed] == list(range(batches, 2 * batches))
    training = read_run_json(run_dir)["nntile"]["training"]
    assert training["tokens"] == len(timed) * BATCH * SHAPE["n_positions"]
    summarize_runs(run_dir.parent, tmp_path / "report")
    row = load_table(tmp_path / "report").iloc[0]
    assert row["steady_steps"] == len(timed)  # the runner's timed steps, and only those
    assert row["tok_per_sec"] == pytest.approx(statistics.median(e["tok_per_sec"] for e in timed))


@pytest.mark.slow
def test_a_bad_tile_fails_in_the_runner_before_starpu_starts(workspace, nntile_python, tmp_path):
    """The main process checks first (tests/unit/workloads); the runner checks again for Slurm jobs."""
    _, bins, config = workspace
    run_dir = tmp_path / "run"
    env = dict(os.environ, NANOCHAT_BENCH_RUN_DIR=str(run_dir), STARPU_SILENT="0")
    proc = subprocess.run([nntile_python, str(nntile.RUNNER), *nntile_flags(config, bins, "--seq-tile=12")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "error (failed): --seq-tile=12 does not divide n_positions=32" in proc.stderr
    assert "Traceback" not in proc.stderr and "starpu" not in (proc.stdout + proc.stderr).lower()
    run = read_run_json(run_dir)
    assert run["status"] == "failed" and "--seq-tile=12" in run["message"]
    assert [e["event"] for e in events_of(run_dir)] == ["start", "error"]


def test_a_bad_tile_is_refused_by_the_cli_before_anything_starts(workspace, tmp_path, capsys):
    _, bins, config = workspace
    rc = main(["train", "--workload", "nntile", "--run-dir", str(tmp_path / "never"), "--",
               *nntile_flags(config, bins, "--head-tile=3")])
    assert rc == 1 and not (tmp_path / "never").exists()
    err = capsys.readouterr().err
    assert err.strip() == "error: --head-tile=3 does not divide n_head=4 (tiles must cut the axis evenly); valid: 1, 2, 4"


# ------------------------------------------------------------------------------------------------
# the README's NNTile path by hand: the checks before any process starts (no NNTile interpreter needed)

README_GPT2_SMALL = ["--batch=8", "--minibatch=4", "--seq-tile=64"]  # README: "GPT-2 small, the data's vocabulary"


def _bins_of_vocab(directory, vocab: int, tokens: int = 20_000):
    directory.mkdir(parents=True)
    (directory / "train.bin").write_bytes(bytes(2 * tokens))
    (directory / "meta.json").write_text(json.dumps({"tokenizer": "nanochat", "vocab_size": vocab}))
    return directory


def test_the_default_gpt2_takes_the_vocabulary_of_the_readmes_data(tmp_path, monkeypatch):
    """Regression: GPT-2 small (50,257 tokens) refused the `data bin` output of the README's 65,536-token
    tokenizer. The default config now takes the vocabulary from the token file's meta.json."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    _bins_of_vocab(tmp_path / "base_data_bin", 65536)
    nntile.WORKLOAD.check(README_GPT2_SMALL, 1)
    record = nntile.WORKLOAD.manifest_config(README_GPT2_SMALL)
    assert record["gpt2"]["vocab_size"] == 65536 and record["gpt2"]["n_layer"] == 12


def test_an_own_config_keeps_its_vocabulary_and_a_smaller_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    _bins_of_vocab(tmp_path / "base_data_bin", 65536)
    config = tmp_path / "small.json"
    config.write_text(json.dumps({**SHAPE, "n_positions": 32}))
    with pytest.raises(DataError, match="65,536 tokens .* more than the model's vocab_size=512"):
        nntile.WORKLOAD.check([f"--config-path={config}", "--batch=2"], 1)


def test_the_base_directory_defaults_to_the_clis(tmp_path, monkeypatch):
    """Without $NANOCHAT_BASE_DIR the token file is looked for where `data bin` writes it by default."""
    monkeypatch.delenv("NANOCHAT_BASE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    _bins_of_vocab(tmp_path / ".cache" / "nanochat" / "base_data_bin", 65536)
    nntile.WORKLOAD.check(README_GPT2_SMALL, 1)


def test_a_missing_data_bin_dir_fails_before_torchrun(tmp_path, capsys):
    """Regression: `--data_bin_dir=$NANOCHAT_BASE_DIR/base_data_bin` with the variable unset became
    /base_data_bin and failed as `no_data` only after torchrun and the model build. Now: one line, no run."""
    missing = tmp_path / "base_data_bin"
    rc = main(["train", "--nproc", "1", "--run-dir", str(tmp_path / "run"), "--", "--depth=2",
               "--max_seq_len=128", "--device_batch_size=8", "--total_batch_size=1024", f"--data_bin_dir={missing}"])
    err = capsys.readouterr().err
    assert rc == 1 and f"--data_bin_dir={missing}: no train.bin there" in err and "data bin" in err, err
    assert not (tmp_path / "run").exists()
