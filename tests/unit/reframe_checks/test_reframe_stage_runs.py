"""The check's sanity and performance reading on real stage runs: chat_sft (a training stage) and base_loss (an
evaluation), each run by 2 CPU ranks through the local launcher from a tiny base checkpoint, their run
directories read as the check reads them after its job.

    python -m pytest tests/unit/reframe_checks/test_reframe_stage_runs.py -q
"""

import json
import math
import os
from pathlib import Path

import pytest

from bench import workloads
from bench.analysis.rundir import read_run_dir
from bench.launch.local import run_local
from bench.reframe_checks.checks import performance, run_problem
from bench.workloads.base import EVALUATION, TRAINING
from tests.support.stages import STAGE_SEQ as SEQ, make_stage_base


@pytest.fixture(scope="module")
def stage_base(tiny_base_dir, tmp_path_factory):
    return make_stage_base(tmp_path_factory.mktemp("reframe-stage-base"), tiny_base_dir)


def run_stage(workload: str, flags: list[str], run_dir: Path, base: Path) -> dict:
    """The stage run by 2 CPU ranks; its row as the check reads it (bench.analysis.rundir, as collect)."""
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1")
    env.pop("NANOCHAT_VAL_FILES_K", None)
    run_local(["--device_type=cpu", "--preflight=0", *flags], 2, run_dir, env=env, workload=workload)
    row = read_run_dir(run_dir)
    assert row["status"] == "ok", (run_dir / "train.log").read_text()[-3000:]
    return row


def test_a_training_stage_is_judged_by_its_steps(stage_base, tmp_path):
    row = run_stage("chat_sft", ["--source=base", "--device_batch_size=2", "--target_examples_per_step=4",
                                 "--num_iterations=6", "--eval_every=-1", "--eval_metrics_every=-1"],
                    tmp_path / "sft", stage_base)
    kind = workloads.get("chat_sft").kind
    assert kind == TRAINING and run_problem(row, kind) is None
    figures = performance(row, kind, {})
    assert figures["tok_per_sec"] == (pytest.approx(row["tok_per_sec"]), "tok/s") and row["tok_per_sec"] > 0
    assert figures["step_time_ms"][0] > 0 and figures["time_to_first_step_s"][0] >= 0
    assert figures["startup_overhead_s"][0] == pytest.approx(row["startup_overhead_s"])
    assert "mfu" not in figures and "peak_mem_mib" not in figures  # on CPU: no peak FLOPs, no CUDA memory
    assert "problems_per_sec" not in figures and "stage_time_s" not in figures  # an evaluation's figures
    # a figure a reference bounds but the run cannot have is NaN, which ReFrame's own check then fails
    value, unit = performance(row, kind, {"mfu": (40.0, -0.1, None, "%")})["mfu"]
    assert math.isnan(value) and unit == "%"


def test_an_evaluation_stage_is_judged_by_its_scores_and_time(stage_base, tmp_path):
    row = run_stage("base_loss", ["--device_batch_size=2", f"--split_tokens={2 * SEQ * 2 * 2}"],
                    tmp_path / "loss", stage_base)
    kind = workloads.get("base_loss").kind
    assert kind == EVALUATION and not row.get("steps_recorded")
    assert run_problem(row, kind) is None
    assert run_problem(row, TRAINING).startswith(f"run {row['run_id']} recorded no step events (")
    figures = performance(row, kind, {})
    assert set(figures) == {"problems_per_sec", "stage_time_s", "startup_overhead_s"}  # on CPU, no pre-flight
    assert figures["problems_per_sec"] == (pytest.approx(row["problems_per_sec"]), "problems/s")
    assert row["problems"] == 2 * (2 * 2 * 2)  # train and val split: 2 steps of 2 sequences on 2 ranks each
    assert 0 < figures["startup_overhead_s"][0] < figures["stage_time_s"][0]

    # the same run without its scores in run.json: nothing shows the evaluation produced its result
    manifest = json.loads((tmp_path / "loss" / "run.json").read_text())
    del manifest["scores"]
    (tmp_path / "loss" / "run.json").write_text(json.dumps(manifest))
    assert run_problem(read_run_dir(tmp_path / "loss"), kind) == \
        f"run {row['run_id']} recorded no scores (run.json scores)"
