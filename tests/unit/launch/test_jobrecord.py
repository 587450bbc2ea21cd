"""The batch script's run.json step (stdlib only): Slurm facts before srun, a final status after it
even when the trainer never ran.

    python -m pytest tests/unit/launch -q
"""

import json
import subprocess
import sys
from pathlib import Path

from bench import schema
from bench.launch import jobrecord


def test_final_statuses_are_the_schema_ones():
    assert jobrecord.FINAL_STATUSES == schema.FINAL_STATUSES


def test_standard_library_only():
    source = Path(jobrecord.__file__).read_text()
    assert "import bench" not in source and "from bench" not in source


def run(args, tmp_path, **env):
    return subprocess.run([sys.executable, jobrecord.__file__, *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **env}, cwd=tmp_path)


def test_start_then_finish_without_trainer_marks_failed_with_log_tail(tmp_path):
    schema.update_run_json(tmp_path, run_id="r", status="pending", slurm={"job_id": "7"})
    assert run(["start", str(tmp_path), "enroot 3.5"], tmp_path, SLURM_JOB_ID="7",
               SLURM_JOB_NODELIST="n[1-2]").returncode == 0
    (tmp_path / "train.log").write_text("pyxis: importing\nslurmstepd: error: pyxis: failed to import image\n\n")
    assert run(["finish", str(tmp_path), "1"], tmp_path, NANOCHAT_BENCH_T0="12.5").returncode == 0
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["status"] == "failed"
    assert data["message"] == ("the trainer never started (srun exit code 1): "
                               "slurmstepd: error: pyxis: failed to import image")
    assert data["slurm"] == {"job_id": "7", "nodelist": "n[1-2]"}
    assert data["runtime_version"] == "enroot 3.5"
    assert data["launcher"]["exit_code"] == 1 and data["launcher"]["t0"] == 12.5


def test_finish_keeps_the_trainers_final_status(tmp_path):
    schema.update_run_json(tmp_path, status="oom", message="CUDA out of memory; try --device_batch_size=16")
    jobrecord.finish(str(tmp_path), "1")
    data = schema.read_run_json(tmp_path)
    assert data["status"] == "oom" and data["message"].startswith("CUDA out of memory")


def test_finish_after_a_crash_mid_run(tmp_path):
    schema.update_run_json(tmp_path, status="running")
    jobrecord.finish(str(tmp_path), "137")
    data = schema.read_run_json(tmp_path)
    assert data["status"] == "failed" and "ended without a final status (srun exit code 137)" in data["message"]


def test_usage_on_bad_arguments(tmp_path):
    r = run(["explode"], tmp_path)
    assert r.returncode == 2 and "start" in r.stderr
