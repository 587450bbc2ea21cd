"""The batch script's record of a flow stage that does not start: `jobrecord.py not-run RUN_DIR STAGE`, as the
sweep's shipped copy runs it on the host's Python.

    python -m pytest tests/unit/launch/test_flow_jobrecord.py -q
"""

import subprocess
import sys

from bench import contract
from bench.launch import jobrecord
from bench.launch.job import ship_bookkeeping
from tests.support.stubs import write_stubs


def test_a_stage_not_run_is_cancelled_naming_the_stage_that_failed(tmp_path):
    lib, run_dir = tmp_path / ".lib", tmp_path / "n1-bare-r1" / "mid_train"
    ship_bookkeeping(lib)
    run_dir.mkdir(parents=True)
    contract.update_run_json(run_dir, run_id="n1-bare-r1", stage="mid_train", status="pending")
    r = subprocess.run([sys.executable, str(lib / "jobrecord.py"), "not-run", str(run_dir), "base_eval"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run = contract.read_run_json(run_dir)
    assert run["status"] == "cancelled" and "stage base_eval" in run["message"]
    assert [(e["source"], e["kind"]) for e in run["evidence"]] == [("batch_script", "not_run")]
    assert jobrecord.kept(str(run_dir)) == 1  # a resubmission runs it again


SCONTROL = """#!/bin/bash
if [ "$2" = hostnames ]; then printf 'n1\\n'; else echo "   NodeAddr=10.0.0.1 NodeHostName=h1"; fi
"""
# The image step fails on the node, as a podman load of a missing archive does; any other srun works.
SRUN = """#!/bin/bash
for a in "$@"; do case "$a" in */image-podman.sh) echo "nanochat-bench: no image on n1" >&2; exit 3;; esac; done
"""


def run_flow_job(tmp_path, srun: str, stages: str, runtime: str, *more_stubs):
    """A one-node speedrun flow of `stages` rendered for `runtime` and its batch script run with stand-ins for
    scontrol and srun (`srun`: the stand-in's script) and `more_stubs` ((name, script)...); (the flow job, the
    finished script)."""
    from bench.launch import flow
    from bench.launch.flowrender import render_flow
    from bench.launch.job import LaunchOptions
    from bench.launch.plan import DataShape

    stubs = write_stubs(tmp_path / "stubs", (("scontrol", SCONTROL), ("srun", srun), *more_stubs))
    base = tmp_path / "base"
    fs = flow.FlowSweep.build("speedrun", stages, {"device_type": "cpu", "depth": 2}, [], nodes=[1],
                              gpus_per_node=2, runtimes=[runtime], data=DataShape.from_counts(4, 4),
                              base_dir=str(base))
    opts = LaunchOptions(base_dir=str(base), python=sys.executable, check_images=False)
    [fj] = flow.assemble(fs, opts, tmp_path / "sweep", note=lambda _: None)
    flow.write_flow_job(fj, render_flow(fj))
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n1",
           "SLURM_CPUS_ON_NODE": "4", "SLURMD_NODENAME": "n1"}
    return fj, subprocess.run(["bash", str(fj.job.script)], cwd=fj.job.job_dir, env=env, capture_output=True,
                              text=True, timeout=60, start_new_session=True)  # its own process group, as a batch step


def test_a_flow_whose_image_step_fails_before_the_tokenizer_records_every_stage(tmp_path):
    """The image step before the tokenizer ran bare under `set -e`: its failure ended the batch script at once,
    every stage left pending and no line saying why."""
    fj, r = run_flow_job(tmp_path, SRUN, "base_train,base_loss", "podman")
    assert r.returncode == 1, r.stderr
    assert "the tokenizer could not be trained" in r.stderr and "flow speedrun stopped at tokenizer" in r.stdout
    for stage in ("base_train", "base_loss"):
        assert contract.read_run_json(fj.point_dir / stage)["status"] == "cancelled"


def test_a_flow_on_a_filesystem_without_flock_runs_its_stages(tmp_path):
    """The tokenizer's lock is a flock on the base directory: where the filesystem has none (Lustre mounted noflock)
    `flock` failed under `set -e` and ended the job at once, every stage left pending and no line saying why."""
    no_flock = ("flock", "#!/bin/bash\necho 'flock: 9: Function not implemented' >&2\nexit 1\n")
    fj, r = run_flow_job(tmp_path, SRUN, "base_train", "bare", no_flock)
    assert "no lock on" in r.stderr and "flock unsupported there" in r.stderr, r.stderr
    assert contract.read_run_json(fj.point_dir / "base_train")["status"] != "pending", r.stdout + r.stderr


# The first stage's step reaches the job's time limit: Slurm's line in its log, SIGTERM to the batch script.
SRUN_TIME_LIMIT = """#!/bin/bash
case "${NANOCHAT_BENCH_RUN_DIR:-}" in */base_train)
    echo "slurmstepd: error: *** STEP 77.1 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO TIME LIMIT ***"
    kill -TERM "$PPID"; exit 143;;
esac
"""


def test_a_flow_stopped_by_the_time_limit_records_the_stages_after_it_as_not_run(tmp_path):
    """The stopped stage's `exit 143` ended the script before the stages after it were recorded: they stayed
    pending, and `status` then called each a timeout of its own, as if it had run out of time."""
    from bench.launch.slurm import JobState
    from bench.launch.status import _derive

    fj, r = run_flow_job(tmp_path, SRUN_TIME_LIMIT, "base_train,base_loss,base_eval", "bare")
    assert r.returncode == 143, r.stderr
    assert "run n1-bare-r1/base_loss: not run (the job received SIGTERM at stage base_train)" in r.stdout
    assert contract.read_run_json(fj.point_dir / "base_train")["status"] == "timeout"
    for stage in ("base_loss", "base_eval"):
        run = contract.read_run_json(fj.point_dir / stage)
        assert run["status"] == "cancelled" and "SIGTERM" in run["message"] and "stage base_train" in run["message"]
        assert [e["kind"] for e in run["evidence"]] == ["not_run"]
        # Slurm's TIMEOUT is the stopped stage's cause, not theirs: they stay not run, and are resubmitted
        assert _derive(fj.point_dir / stage, JobState("77", "TIMEOUT"))[0] == "cancelled"
        assert jobrecord.kept(str(fj.point_dir / stage)) == 1


# The tokenizer's task fails (a node without the image, a full disk); any other srun works.
SRUN_TOKENIZER_FAILS = """#!/bin/bash
for a in "$@"; do case "$a" in tokenizer) echo "tokenizer: no shards" >&2; exit 5;; esac; done
"""


def flow_guide(tmp_path, srun):
    """The interactive guide of a two-stage flow, written, and the environment of an salloc shell with stand-ins."""
    from bench.launch import flow
    from bench.launch.flowrender import render_flow_interactive
    from bench.launch.job import LaunchOptions
    from bench.launch.plan import DataShape

    stubs = write_stubs(tmp_path / "stubs", (("scontrol", SCONTROL), ("srun", srun)))
    base = tmp_path / "base"
    fs = flow.FlowSweep.build("speedrun", "base_train,base_loss", {"device_type": "cpu", "depth": 2}, [],
                              nodes=[1], gpus_per_node=2, runtimes=["bare"], data=DataShape.from_counts(4, 4),
                              base_dir=str(base))
    opts = LaunchOptions(base_dir=str(base), python=sys.executable, check_images=False)
    [fj] = flow.assemble(fs, opts, tmp_path / "sweep", note=lambda _: None)
    fj.job.script_name = "interactive.sh"
    flow.write_flow_job(fj, render_flow_interactive(fj, str(base), 4))
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n1",
           "SLURM_JOB_CPUS_PER_NODE": "4", "SLURMD_NODENAME": "n1"}
    return fj, env


def test_a_pasted_flow_guide_whose_tokenizer_fails_starts_no_stage(tmp_path):
    """Pasted into the salloc shell (here: sourced, which takes the same branch), the guide left pipefail off:
    a step's status was its tee's, so a tokenizer that failed went unnoticed and every stage was started, and a
    stage's srun exit code was recorded as 0."""
    fj, env = flow_guide(tmp_path, SRUN_TOKENIZER_FAILS)
    r = subprocess.run(["bash", "-c", 'source "$1"; echo "job_rc=$job_rc flow_failed=$flow_failed"', "bash",
                        str(fj.job.script)], cwd=fj.job.job_dir, env=env, capture_output=True, text=True, timeout=60)
    assert "the tokenizer could not be trained" in r.stderr, r.stdout + r.stderr
    assert "job_rc=1 flow_failed=tokenizer" in r.stdout
    for stage in ("base_train", "base_loss"):
        run = contract.read_run_json(fj.point_dir / stage)
        assert run["status"] == "cancelled" and "stage tokenizer" in run["message"]


def test_a_flow_guide_run_as_a_script_exits_with_the_flows_status(tmp_path):
    """`bash interactive.sh` printed the failed flow's status, then exited 0 as its last line did."""
    fj, env = flow_guide(tmp_path, SRUN_TOKENIZER_FAILS)
    r = subprocess.run(["bash", str(fj.job.script)], cwd=fj.job.job_dir, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "ended with status 1" in r.stdout, r.stdout + r.stderr


# Ctrl-C in the first stage's training step: the terminal's SIGINT reaches the script's process group
SRUN_CTRL_C = """#!/bin/bash
case "${NANOCHAT_BENCH_RUN_DIR:-}" in */base_train)
    for a in "$@"; do case "$a" in bench.launch.elastic)
        trap '' INT; kill -INT -- "-$(ps -o pgid= $$ | tr -d ' ')"; exit 130;;
    esac; done;;
esac
"""


def test_a_flow_guide_run_as_a_script_and_stopped_by_ctrl_c_exits_130(tmp_path):
    """Stopped by Ctrl-C, `bash interactive.sh` exited 143, SIGTERM's status, not SIGINT's."""
    fj, env = flow_guide(tmp_path, SRUN_CTRL_C)
    r = subprocess.run(["bash", str(fj.job.script)], cwd=fj.job.job_dir, env=env, capture_output=True, text=True,
                       timeout=60, start_new_session=True)  # its own process group, as a terminal's foreground job
    assert "not run (the job received SIGINT at stage base_train)" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 130


# Ctrl-C in the tokenizer's training step: the terminal's SIGINT reaches the step's process group (the log's tee
# included), and srun takes the step down, says so, and ends by it
SRUN_TOKENIZER_CTRL_C = """#!/bin/bash
for a in "$@"; do case "$a" in tokenizer)
    echo "tokenizer: training"
    trap '' INT; kill -INT -- "-$(ps -o pgid= $$ | tr -d ' ')"
    sleep 0.5
    echo "srun: forcing job termination" >&2
    exit 130;;
esac; done
"""


def test_a_flow_guide_stopped_by_ctrl_c_in_its_tokenizer_records_the_stages_as_stopped(tmp_path):
    """Run as a script, Ctrl-C in the tokenizer ended the guide at once: every stage stayed pending, and the
    tokenizer's log lost srun's last lines with its tee."""
    fj, env = flow_guide(tmp_path, SRUN_TOKENIZER_CTRL_C)
    r = subprocess.run(["bash", str(fj.job.script)], cwd=fj.job.job_dir, env=env, capture_output=True, text=True,
                       timeout=60, start_new_session=True)  # its own process group, as a terminal's foreground job
    assert "not run (the job received SIGINT at stage tokenizer)" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 130
    log = (fj.point_dir / "tokenizer.log").read_text()
    assert "tokenizer: training" in log and "srun: forcing job termination" in log


def test_ctrl_c_in_a_pasted_flow_guides_tokenizer_records_the_stages_as_stopped(tmp_path):
    """Pasted, the shell runs no SIGINT trap for the step: the stages were recorded as not run because the
    tokenizer 'did not end ok', not as stopped by Ctrl-C."""
    from tests.unit.launch.test_batch_stop import pasted

    fj, env = flow_guide(tmp_path, SRUN_TOKENIZER_CTRL_C)
    out = pasted(fj.job, env)
    assert "not run (the job received SIGINT at stage tokenizer)" in out, out
    for stage in ("base_train", "base_loss"):
        run = contract.read_run_json(fj.point_dir / stage)
        assert run["status"] == "cancelled" and "SIGINT" in run["message"]


def test_ctrl_c_in_a_pasted_flow_guides_tokenizer_prints_status_130(tmp_path):
    """Pasted, a guide stopped by Ctrl-C in its tokenizer printed `ended with status 1`, a failed tokenizer's, where
    the guide run as a script exits 130 and a stage stopped the same way prints 130."""
    from tests.unit.launch.test_batch_stop import pasted

    fj, env = flow_guide(tmp_path, SRUN_TOKENIZER_CTRL_C)
    out = pasted(fj.job, env)
    assert "ended with status 130" in out and "job_rc=130" in out, out


# The job's time limit during the tokenizer's step: Slurm's SIGTERM to the batch step, then slurmstepd's line
SRUN_TOKENIZER_TIME_LIMIT = """#!/bin/bash
for a in "$@"; do case "$a" in tokenizer)
    trap '' TERM; kill -TERM -- "-$(ps -o pgid= $$ | tr -d ' ')"
    sleep 0.5
    echo "slurmstepd: error: *** STEP 77.0 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO TIME LIMIT ***" >&2
    exit 143;;
esac; done
"""


def test_the_time_limits_line_reaches_the_tokenizers_log_after_the_sigterm(tmp_path):
    """The tokenizer's log was a plain tee, which Slurm's SIGTERM ended before srun's last line."""
    fj, r = run_flow_job(tmp_path, SRUN_TOKENIZER_TIME_LIMIT, "base_train", "bare")
    assert r.returncode == 143, r.stdout + r.stderr
    assert "DUE TO TIME LIMIT" in (fj.point_dir / "tokenizer.log").read_text()


def test_a_tokenizer_stopped_says_it_was_stopped_not_that_it_could_not_be_trained(tmp_path):
    """A tokenizer step ended by the time limit, scancel or Ctrl-C printed "the tokenizer could not be trained",
    a failure's words, beside the stages recorded as stopped."""
    from tests.unit.launch.test_batch_stop import pasted

    for where in ("batch", "guide", "pasted"):
        (tmp_path / where).mkdir()
    _, batch = run_flow_job(tmp_path / "batch", SRUN_TOKENIZER_TIME_LIMIT, "base_train", "bare")
    fj, env = flow_guide(tmp_path / "guide", SRUN_TOKENIZER_CTRL_C)
    script = subprocess.run(["bash", str(fj.job.script)], cwd=fj.job.job_dir, env=env, capture_output=True,
                            text=True, timeout=60, start_new_session=True)
    fj, env = flow_guide(tmp_path / "pasted", SRUN_TOKENIZER_CTRL_C)
    for signal, out in (("SIGTERM", batch.stderr), ("SIGINT", script.stderr), ("SIGINT", pasted(fj.job, env))):
        assert f"nanochat-bench: the tokenizer was stopped by {signal} (see " in out, out
        assert "could not be trained" not in out, out
