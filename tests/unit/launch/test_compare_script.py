"""The runtime-comparison script: every runtime in turn in one allocation, each with its own run
directory, launch time and rendezvous port; a failing runtime does not stop the next one, and the
job's exit code reports it. Run by real bash with stand-ins for srun and scontrol (the real Slurm
runs are in tests/integration/slurm; CE, pyxis and apptainer cannot run here).

    python -m pytest tests/unit/launch/test_compare_script.py -q
"""

import json
import os
import subprocess
from pathlib import Path

from bench.launch.job import IMAGE_STEP_MINUTES, LaunchOptions, assemble, write_job
from bench.launch.plan import Sweep
from bench.launch.render import render_sbatch
from tests.support.stubs import write_stubs

SCONTROL = """#!/bin/bash
if [ "$2" = hostnames ]; then printf 'n1\\nn2\\n'; else echo "   NodeAddr=10.0.0.1 NodeHostName=h1"; fi
"""
# Records each call's arguments; the call that wraps the command in apptainer fails like a missing image.
SRUN = """#!/bin/bash
n=$(cat "$STUB_DIR/count" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$STUB_DIR/count"
printf '%s\\0' "$@" > "$STUB_DIR/srun.$n"
for a in "$@"; do if [ "$a" = apptainer ]; then echo "FATAL: image not found" >&2; exit 255; fi; done
"""


def test_compare_runs_every_runtime_in_turn(tmp_path):
    stubs = write_stubs(tmp_path / "stubs", (("scontrol", SCONTROL), ("srun", SRUN)))
    sweep = Sweep([2], 2, ["bare", "podman", "apptainer"], repeats=2, train={"device_type": "cpu"})
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), python="/usr/bin/python3",
                         images={"apptainer": "/img/nb.sif"}, check_images=False)
    [job] = assemble(sweep, opts, tmp_path / "sweep", compare=True, note=lambda _: None)
    write_job(job, render_sbatch(job))
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_CPUS_ON_NODE": "4", "STUB_DIR": str(tmp_path),
           "SLURMD_NODENAME": "n1"}  # the batch host, as slurmd sets it: the first node
    r = subprocess.run(["bash", str(job.script)], cwd=job.job_dir, env=env, capture_output=True, text=True)
    assert r.returncode == 255, r.stderr  # the apptainer run failed; the job says so

    every = [(tmp_path / f"srun.{i}").read_text().split("\0")[:-1] for i in range(1, 9)]
    # podman's image step before each podman run: one task on every node of the run (image-podman.sh)
    steps = [c for c in every if any(a.endswith("/.lib/image-podman.sh") for a in c)]
    # with the job's allowance for it as its limit: a node whose podman hangs must not eat the allocation
    assert [c[:4] for c in steps] == [["--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                                       f"--time={IMAGE_STEP_MINUTES}"]] * 2
    assert steps[0][-3:-1] == ["podman", "localhost/nanochat-bench:latest"]
    calls = [c for c in every if c not in steps]
    # runtimes alternate within each repeat (A B C A B C), so slow drift hits each of them alike
    programs = ("/usr/bin/python3", "podman", "apptainer")
    assert [next(a for a in c[7:] if a in programs) for c in calls] == list(programs) * 2
    assert all("--time=30" in c for c in calls)  # each run has its own limit
    ports = [next(a for a in c if a.startswith("--rdzv_endpoint=")) for c in calls]
    assert ports == [f"--rdzv_endpoint=10.0.0.1:{20000 + 7700 + k}" for k in range(6)]  # none repeats
    for run_id, status in (("n2-bare-r1", "failed"), ("n2-podman-r2", "failed"), ("n2-apptainer-r1", "failed")):
        manifest = json.loads((tmp_path / "sweep" / run_id / "run.json").read_text())
        assert manifest["status"] == status and manifest["slurm"]["job_id"] == "77"
        assert manifest["launch"]["t0"] > 0 and manifest["launch"]["kind"] == "slurm"
    podman = json.loads((tmp_path / "sweep" / "n2-podman-r1" / "run.json").read_text())["launch"]
    assert podman["t0"] <= podman["image_ready_at"] and "podman storage" in podman["image_step"]
    apptainer = json.loads((tmp_path / "sweep" / "n2-apptainer-r1" / "run.json").read_text())
    assert apptainer["message"] == "the trainer never started (srun exit code 255): FATAL: image not found"
    assert apptainer["launch"]["exit_code"] == 255
    assert Path(tmp_path / "sweep" / "n2-apptainer-r1" / "train.log").read_text().strip() == "FATAL: image not found"


# Records each call's environment (the run's variables as its runtime receives them from the batch shell).
SRUN_ENV = """#!/bin/bash
n=$(cat "$STUB_DIR/count" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$STUB_DIR/count"
printf '%s\\0' "$@" > "$STUB_DIR/srun.$n"
env -0 > "$STUB_DIR/env.$n"
"""


def test_each_run_of_a_comparison_gets_only_its_own_network_variables(tmp_path):
    """Runs share the batch shell: CE after bare and pyxis must not inherit their Slingshot variables (CE's hook
    sets its own, and the EDF says so) nor pyxis's plugin path, which CE does not mount."""
    from bench import sites

    stubs = write_stubs(tmp_path / "stubs", (("scontrol", SCONTROL), ("srun", SRUN_ENV)))
    image = tmp_path / "nb.sqsh"
    image.write_text("x")
    alps = sites.load("alps")
    sweep = Sweep([2], 4, ["bare", "pyxis", "ce"], time="00:10:00", site=alps, train={"device_batch_size": 8})
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), python="/usr/bin/python3", site=alps, check_images=False,
                         images={"pyxis": str(image), "ce": str(image)}, env={"NANOCHAT_VAL_FILES_K": "1"})
    [job] = assemble(sweep, opts, tmp_path / "sweep", compare=True, note=lambda _: None)
    write_job(job, render_sbatch(job))
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_CPUS_ON_NODE": "4", "STUB_DIR": str(tmp_path), "SLURMD_NODENAME": "n1"}
    r = subprocess.run(["bash", str(job.script)], cwd=job.job_dir, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

    calls = {}
    for i in range(1, int((tmp_path / "count").read_text()) + 1):
        argv = (tmp_path / f"srun.{i}").read_text().split("\0")
        if any(a.startswith("--rdzv_endpoint=") for a in argv):
            runtime = "ce" if any(a.startswith("--environment=") for a in argv) else \
                "pyxis" if any(a.startswith("--container-image=") for a in argv) else "bare"
            calls[runtime] = dict(v.split("=", 1) for v in (tmp_path / f"env.{i}").read_text().split("\0") if v)
    assert sorted(calls) == ["bare", "ce", "pyxis"]
    slingshot = ("NCCL_PROTO", "NCCL_CROSS_NIC", "NCCL_NET_GDR_LEVEL", "FI_CXI_DEFAULT_CQ_SIZE", "FI_MR_CACHE_MONITOR")
    assert all(name in calls["bare"] and name in calls["pyxis"] for name in slingshot)
    assert "NCCL_NET_PLUGIN" in calls["pyxis"]
    assert [name for name in (*slingshot, "NCCL_NET_PLUGIN") if name in calls["ce"]] == []
    assert calls["ce"]["NCCL_NET"] == "AWS Libfabric" and calls["ce"]["NANOCHAT_BENCH_RUNTIME"] == "ce"
