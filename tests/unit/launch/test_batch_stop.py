"""A batch job stopped by Slurm (scancel, the job's time limit, a lost node): Slurm sends SIGTERM to every
process of the batch step, the script's own bookkeeping and pipes included, while srun takes its step down.
The run in progress must be recorded as what stopped it, with Slurm's last lines in its log. Real bash, with a
stand-in srun that signals the script's process group as slurmstepd does (the real Slurm runs are in
tests/integration/slurm).

    python -m pytest tests/unit/launch/test_batch_stop.py -q
"""

import json
import os
import subprocess
import sys

from bench.launch.job import LaunchOptions, assemble, write_job
from bench.launch.plan import Sweep
from bench.launch.render import render_sbatch
from tests.support.stubs import write_stubs

SCONTROL = """#!/bin/bash
if [ "$2" = hostnames ]; then printf 'n1\\nn2\\n'; else echo "   NodeAddr=127.0.0.1 NodeHostName=h1"; fi
"""
# The training step: its ranks start, then scancel reaches the batch step (SIGTERM to the whole process group)
# before the trainer records anything; srun forwards it, prints slurmstepd's line and ends as the step did.
SRUN = """#!/bin/bash
trap '' TERM  # srun forwards it to the tasks and goes on until they end
for a in "$@"; do case $a in bench.launch.elastic)
    echo "0: starting"
    kill -TERM -- "-$(ps -o pgid= $$ | tr -d ' ')"
    sleep 0.5
    echo "slurmstepd: error: *** STEP 77.0 ON n1 CANCELLED AT 2026-12-01T10:00:00 ${REASON:-}***" >&2
    exit 143 ;;
esac; done
"""


def stopped_job(tmp_path, runtimes, reason=""):
    stubs = write_stubs(tmp_path / "stubs", (("scontrol", SCONTROL), ("srun", SRUN)))
    sweep = Sweep([2], 2, runtimes, train={"device_type": "cpu"})
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), python=sys.executable, check_images=False)
    [job] = assemble(sweep, opts, tmp_path / "sweep", compare=len(runtimes) > 1, note=lambda _: None)
    write_job(job, render_sbatch(job))
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_CPUS_ON_NODE": "4", "SLURMD_NODENAME": "n1", "REASON": reason}
    r = subprocess.run(["bash", str(job.script)], cwd=job.job_dir, env=env, capture_output=True, text=True,
                       timeout=60, start_new_session=True)  # its own process group, as the batch step has
    return r, [json.loads((run.run_dir / "run.json").read_text()) for run in job.runs], job


def test_a_run_stopped_before_the_trainer_spoke_is_cancelled_not_failed(tmp_path):
    r, [bare, podman], _ = stopped_job(tmp_path, ["bare", "podman"])
    assert r.returncode == 143, r.stderr
    assert bare["status"] == "cancelled" and "received SIGTERM" in bare["message"]
    assert bare["launch"]["exit_code"] == 143
    assert podman["status"] == "pending"  # not started: `status` settles it from Slurm's end of the job


def test_the_jobs_time_limit_line_reaches_the_runs_log_after_the_sigterm(tmp_path):
    """The time limit's and a lost node's lines come after the SIGTERM: they decide timeout or failed."""
    _, [bare], job = stopped_job(tmp_path, ["bare"], reason="DUE TO TIME LIMIT ")
    log = (job.runs[0].run_dir / "train.log").read_text()
    assert "0: starting" in log and "CANCELLED AT 2026-12-01T10:00:00 DUE TO TIME LIMIT ***" in log
    assert bare["status"] == "timeout"


# Every step works but training, which fails as a trainer that crashed before it could write its status
SRUN_TRAIN_FAILS = """#!/bin/bash
for a in "$@"; do case $a in bench.launch.elastic) echo "0: crashed"; exit 7;; esac; done
"""


def guide(tmp_path, srun, repeats=1):
    """An interactive guide of `repeats` bare runs, written, and the environment of an salloc shell with stand-ins."""
    from bench.launch.render import render_interactive

    stubs = write_stubs(tmp_path / "stubs", (("scontrol", SCONTROL), ("srun", srun)))
    sweep = Sweep([2], 2, ["bare"], repeats=repeats, train={"device_type": "cpu"})
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), python=sys.executable, check_images=False)
    [job] = assemble(sweep, opts, tmp_path / "sweep", compare=repeats > 1, note=lambda _: None)  # one job
    job.script_name = "interactive.sh"
    write_job(job, render_interactive(job, str(tmp_path / "base"), 4))
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_JOB_CPUS_PER_NODE": "4(x2)", "SLURMD_NODENAME": "n1"}
    return job, env


def test_a_pasted_guide_records_the_training_steps_exit_code(tmp_path):
    """Pasted into the salloc shell (here: sourced, which takes the same branch), the guide left pipefail off: the
    training pipeline's status was its tee's, and run.json recorded srun's exit code as 0."""
    job, env = guide(tmp_path, SRUN_TRAIN_FAILS)
    r = subprocess.run(["bash", "-c", 'source "$1"; echo "job_rc=$job_rc"', "bash", str(job.script)],
                       cwd=job.job_dir, env=env, capture_output=True, text=True, timeout=60)
    assert "job_rc=7" in r.stdout, r.stdout + r.stderr
    run = json.loads((job.runs[0].run_dir / "run.json").read_text())
    assert run["launch"]["exit_code"] == 7 and run["status"] == "failed"


def test_a_guide_run_as_a_script_exits_with_the_failed_runs_status(tmp_path):
    """`bash interactive.sh` printed the failed run's status, then exited 0 as its last line, an echo, did."""
    job, env = guide(tmp_path, SRUN_TRAIN_FAILS)
    r = subprocess.run(["bash", str(job.script)], cwd=job.job_dir, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 7 and "training ended with status 7" in r.stdout, r.stdout + r.stderr


# Ctrl-C in the salloc shell during training: the terminal sends SIGINT to the step's process group, and srun
# (a second Ctrl-C within a second) takes the step down, says so, and ends by it
SRUN_CTRL_C = """#!/bin/bash
for a in "$@"; do case $a in bench.launch.elastic)
    echo "0: starting"
    trap '' INT
    kill -INT -- "-$(ps -o pgid= $$ | tr -d ' ')"
    sleep 0.5
    echo "srun: forcing job termination" >&2
    exit 130 ;;
esac; done
"""


def test_ctrl_c_during_a_guides_training_step_still_finishes_its_run_record(tmp_path):
    """SIGINT ended the guide's block before `runjson finish`: run.json stayed pending, with no exit code."""
    job, env = guide(tmp_path, SRUN_CTRL_C)
    r = subprocess.run(["bash", str(job.script)], cwd=job.job_dir, env=env, capture_output=True, text=True,
                       timeout=60, start_new_session=True)  # its own process group, as a terminal's foreground job
    run = json.loads((job.runs[0].run_dir / "run.json").read_text())
    assert run["status"] == "cancelled" and "Ctrl-C" in run["message"], r.stdout + r.stderr
    assert run["launch"]["exit_code"] == 130
    assert r.returncode == 130  # SIGINT's status, as a program Ctrl-C ends; it exited 143, SIGTERM's


def test_ctrl_c_during_a_guides_training_step_keeps_sruns_last_lines_in_the_runs_log(tmp_path):
    """The log's tee ignored SIGTERM but not SIGINT: Ctrl-C ended it first, srun's last lines were lost (and srun
    wrote into a closed pipe)."""
    job, env = guide(tmp_path, SRUN_CTRL_C)
    subprocess.run(["bash", str(job.script)], cwd=job.job_dir, env=env, capture_output=True, text=True,
                   timeout=60, start_new_session=True)
    log = (job.runs[0].run_dir / "train.log").read_text()
    assert "0: starting" in log and "srun: forcing job termination" in log


def pasted(job, env, timeout=60) -> str:
    """The guide pasted into an interactive salloc shell (here: sourced by `bash -i` on a terminal): with job
    control on, Ctrl-C reaches only the foreground step, and the shell runs no SIGINT trap for it."""
    import pty
    import select
    import time

    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(job.job_dir)
        os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], env)
    os.write(fd, f'source {job.script}; echo "job_rc=$job_rc"; exit\n'.encode())
    out, end = b"", time.monotonic() + timeout
    while time.monotonic() < end and select.select([fd], [], [], end - time.monotonic())[0]:
        try:
            data = os.read(fd, 4096)
        except OSError:  # the shell exited
            break
        if not data:
            break
        out += data
    else:  # still running past the timeout (Ctrl-C ended the pasted line, its `exit` with it): ended here
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    return out.decode(errors="replace")


def test_ctrl_c_in_a_pasted_guides_training_step_records_the_run_as_stopped(tmp_path):
    """Pasted, the shell's `trap 'stopping=SIGINT' INT` never ran: the run was recorded as failed, srun exit 130."""
    job, env = guide(tmp_path, SRUN_CTRL_C)
    out = pasted(job, env)
    run = json.loads((job.runs[0].run_dir / "run.json").read_text())
    assert run["status"] == "cancelled" and "Ctrl-C" in run["message"], out
    assert run["launch"]["exit_code"] == 130 and "job_rc=130" in out


# srun as Ctrl-C meets it when pressed once: it prints the step's status and goes on; here the step then ends ok
SRUN_STATUS_REQUEST = """#!/bin/bash
for a in "$@"; do case $a in bench.launch.elastic)
    trap 'echo "srun: interrupt (one more within 1 sec to abort)" >&2' INT
    kill -INT -- "-$(ps -o pgid= $$ | tr -d ' ')"
    sleep 0.5
    exit 0 ;;
esac; done
"""


def test_one_ctrl_c_that_srun_took_for_a_status_request_stops_nothing(tmp_path):
    """The guide's trap took any Ctrl-C for a stop: a step that went on and ended 0 was recorded as stopped by
    Ctrl-C, and the guide exited 130 after it."""
    job, env = guide(tmp_path, SRUN_STATUS_REQUEST)
    r = subprocess.run(["bash", str(job.script)], cwd=job.job_dir, env=env, capture_output=True, text=True,
                       timeout=60, start_new_session=True)
    run = json.loads((job.runs[0].run_dir / "run.json").read_text())
    assert "Ctrl-C" not in json.dumps(run) and run["launch"]["exit_code"] == 0, r.stdout + r.stderr
    assert r.returncode != 130


# the first training step stopped by Ctrl-C in a pasted guide (srun's 130, no trap run), the next one ends ok
SRUN_FIRST_STOPPED = """#!/bin/bash
for a in "$@"; do case $a in bench.launch.elastic)
    if [ -e "$STUB_DIR/stopped-once" ]; then exit 0; fi
    touch "$STUB_DIR/stopped-once"; exit 130 ;;
esac; done
"""


def test_a_ctrl_c_that_stopped_one_run_of_a_pasted_guide_is_not_the_next_runs(tmp_path):
    """`stopping` stayed SIGINT after the first run: the next run, which ended 0, was recorded as stopped by
    Ctrl-C too."""
    job, env = guide(tmp_path, SRUN_FIRST_STOPPED, repeats=2)
    r = subprocess.run(["bash", "-c", 'source "$1"; echo "job_rc=$job_rc"', "bash", str(job.script)],
                       cwd=job.job_dir, env={**env, "STUB_DIR": str(tmp_path)}, capture_output=True, text=True,
                       timeout=60)
    first, second = (json.loads((run.run_dir / "run.json").read_text()) for run in job.runs)
    assert first["status"] == "cancelled" and "Ctrl-C" in first["message"], r.stdout + r.stderr
    assert "Ctrl-C" not in json.dumps(second) and second["launch"]["exit_code"] == 0
