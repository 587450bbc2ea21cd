"""The batch script's run.json step: Slurm facts before srun, a final status after it even when the
trainer never ran, by the copy of bench/contract/ + jobrecord.py shipped beside the jobs, run with
the standard library alone (`python -S`: no site-packages) and, where one is installed, Python 3.8.

    python -m pytest tests/unit/launch/test_jobrecord.py -q
"""

import glob
import subprocess
import sys
from pathlib import Path

import pytest

from bench import contract
from bench.launch import jobrecord
from bench.launch.job import ship_bookkeeping

OLD_PYTHONS = sorted(glob.glob("/root/.pyenv/versions/3.8*/bin/python3")) + sorted(glob.glob("/usr/bin/python3.8"))
PYTHONS = [sys.executable] + OLD_PYTHONS[:1]


@pytest.fixture
def lib(tmp_path):
    ship_bookkeeping(tmp_path / ".lib")
    return tmp_path / ".lib"


def run(python, lib, args, cwd, **env):
    return subprocess.run([python, "-S", str(lib / "jobrecord.py"), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **env}, cwd=cwd)


def test_the_shipped_copy_is_the_packages_own(lib):
    package = Path(contract.__file__).parent
    assert sorted(p.name for p in (lib / "contract").iterdir()) == sorted(f"{m}.py" for m in contract.MODULES)
    for name in contract.MODULES:
        assert (lib / "contract" / f"{name}.py").read_text() == (package / f"{name}.py").read_text()
    assert (lib / "jobrecord.py").read_text() == Path(jobrecord.__file__).read_text()


@pytest.mark.parametrize("python", PYTHONS)
def test_start_then_finish_without_trainer_marks_failed_with_log_tail(python, lib, tmp_path):
    run_dir = tmp_path / "r"
    contract.update_run_json(run_dir, run_id="r", status="pending", slurm={"job_id": "7"})
    r = run(python, lib, ["start", str(run_dir), "enroot 3.5"], tmp_path, SLURM_JOB_ID="7",
            SLURM_JOB_NODELIST="n[1-2]")
    assert r.returncode == 0, r.stderr
    (run_dir / "train.log").write_text("pyxis: importing\nslurmstepd: error: pyxis: failed to import image\n\n")
    r = run(python, lib, ["finish", str(run_dir), "1"], tmp_path)
    assert r.returncode == 0, r.stderr
    data = contract.load_manifest(run_dir)  # what the host's python wrote follows the contract
    assert data.status == "failed"
    assert data.message == "the trainer never started (srun exit code 1): slurmstepd: error: pyxis: failed to import image"
    assert (data.slurm.job_id, data.slurm.nodelist) == ("7", "n[1-2]")
    assert data.launch.runtime_version == "enroot 3.5" and data.launch.kind == "slurm"
    assert data.launch.exit_code == 1 and data.launch.t0 == data.launch.started_at  # T0: just before srun
    assert data.launch.t0 <= data.launch.finished_at


def test_finish_keeps_the_trainers_final_status(tmp_path):
    contract.update_run_json(tmp_path, status="oom", message="CUDA out of memory; try --device_batch_size=16")
    jobrecord.finish(str(tmp_path), "1")
    data = contract.read_run_json(tmp_path)
    assert data["status"] == "oom" and data["message"].startswith("CUDA out of memory")


def test_finish_after_a_crash_mid_run(tmp_path):
    contract.update_run_json(tmp_path, status="running")
    jobrecord.finish(str(tmp_path), "137")
    data = contract.read_run_json(tmp_path)
    assert data["status"] == "failed"
    assert "ended without recording a final status (srun exit code 137)" in data["message"]


def test_a_step_killed_at_its_time_limit_is_a_timeout_not_a_cancel(tmp_path):
    contract.update_run_json(tmp_path, status="cancelled", message="rank 0: received signal 15")
    (tmp_path / "train.log").write_text("0: step 00007/00100 ...\n"
                                        "slurmstepd: error: *** STEP 42.0 ON n1 CANCELLED AT 2026-12-01T10:00:00 "
                                        "DUE TO TIME LIMIT ***\n0: [rank 0] received signal 15: cancelling\n")
    jobrecord.finish(str(tmp_path), "143")
    data = contract.read_run_json(tmp_path)
    assert data["status"] == "timeout" and "DUE TO TIME LIMIT" in data["message"]


def test_a_lost_node_is_a_failure_naming_it_not_the_survivors_cancel(tmp_path):
    contract.update_run_json(tmp_path, status="cancelled", message="rank 0: received SIGTERM (signal 15)")
    (tmp_path / "train.log").write_text("0: step 00007/00100 ...\nsrun: error: Node failure on n2\n"
                                        "0: [rank 0] received SIGTERM: cancelling\n")
    jobrecord.finish(str(tmp_path), "143")
    data = contract.read_run_json(tmp_path)
    assert data["status"] == "failed" and data["message"] == "a node of the job was lost: srun: error: Node failure on n2"


def test_a_finished_run_keeps_ok_whatever_the_log_says(tmp_path):
    contract.update_run_json(tmp_path, status="ok")
    (tmp_path / "train.log").write_text("srun: error: Node failure on n2\n")
    jobrecord.finish(str(tmp_path), "0")
    assert contract.read_run_json(tmp_path)["status"] == "ok"


def test_usage_on_bad_arguments(lib, tmp_path):
    r = run(sys.executable, lib, ["explode"], tmp_path)
    assert r.returncode == 2 and "start" in r.stderr


def test_a_run_stopped_by_slurm_before_the_trainer_spoke_is_cancelled(tmp_path):
    contract.update_run_json(tmp_path, status="pending")
    jobrecord.finish(str(tmp_path), "143", "SIGTERM")  # scancel during the container's start-up
    data = contract.read_run_json(tmp_path)
    assert data["status"] == "cancelled" and "received SIGTERM" in data["message"]


def test_a_stop_after_the_trainers_own_end_keeps_it(tmp_path):
    contract.update_run_json(tmp_path, status="oom", message="CUDA out of memory")
    jobrecord.finish(str(tmp_path), "143", "SIGTERM")
    assert contract.read_run_json(tmp_path)["status"] == "oom"


@pytest.mark.parametrize("damage", ['{"status": "o', '"ok"', '{"launch": [1]}', None])
@pytest.mark.parametrize("step, rc", [("kept", 1), ("resume-step", 0)])
def test_a_damaged_run_json_is_one_line_naming_it_not_a_traceback_in_the_jobs_log(lib, tmp_path, damage, step, rc):
    """`kept` exits as for a run not kept, `resume-step` prints no step, as where run.json says nothing."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    if damage is None:  # as a read that fails (EACCES, EIO)
        (run_dir / "run.json").mkdir()
    else:
        (run_dir / "run.json").write_text(damage)
    r = run(sys.executable, lib, [step, str(run_dir)], tmp_path)
    assert (r.returncode, r.stdout) == (rc, "")
    assert r.stderr.startswith(f"{run_dir / 'run.json'} ") and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("damage", ['{"status": "o', '"ok"', '{"schema_version": "2.0", "launch": [1]}',
                                    '{"schema_version": "99.0"}', None])
@pytest.mark.parametrize("step", [["start", "enroot 3.5"], ["finish", "1"], ["image", "--ready", "--step", "pull"],
                                  ["not-run", "base_train"]])
def test_a_damaged_run_json_is_one_line_and_exit_0_for_the_steps_that_write_it(lib, tmp_path, damage, step):
    """start, finish, image and not-run wrote a traceback into the job's log and exited 1, which ended the batch
    script (set -e) before its other runs or stages; they print one line naming the file and exit 0, the file left
    as it is."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    if damage is None:  # as a read that fails (EACCES, EIO)
        (run_dir / "run.json").mkdir()
    else:
        (run_dir / "run.json").write_text(damage)
    r = run(sys.executable, lib, [step[0], str(run_dir), *step[1:]], tmp_path)
    assert (r.returncode, r.stdout) == (0, "")
    assert r.stderr.startswith(f"{run_dir / 'run.json'}") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr
    if damage is not None:
        assert (run_dir / "run.json").read_text() == damage


@pytest.mark.parametrize("damage", ['{"launch": {"resume_from_step": "x"}}', '{"launch": {"resume_from_step": true}}'])
def test_resume_step_of_a_step_of_the_wrong_type_is_one_line_and_no_step(lib, tmp_path, damage):
    """resume-step took run.json's resume_from_step for an integer: a string wrote a ValueError traceback into the
    job's log and ended the batch script (set -e), and true resumed from step 1. (A launch section of another shape
    is refused as run.json is read: the damaged-run.json test above.)"""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(damage)
    r = run(sys.executable, lib, ["resume-step", str(run_dir)], tmp_path)
    assert (r.returncode, r.stdout) == (0, "")
    assert r.stderr.startswith(f"{run_dir / 'run.json'}: launch.resume_from_step is ") and r.stderr.count("\n") == 1
    assert r.stderr.rstrip().endswith("the run is not resumed from a checkpoint")
    (run_dir / "run.json").write_text('{"launch": {"resume_from_step": 40}}')
    assert run(sys.executable, lib, ["resume-step", str(run_dir)], tmp_path).stdout == "40\n"
