"""Real Slurm: rendered scripts run on a two-node cluster (2 nodes x 2 CPU ranks, gloo, tiny model).

    python -m pytest tests/integration/slurm -x -q

The cluster (conftest.py) is started once for these tests; the trainer is the real one, on the
session's tiny data (tests/conftest.py: tiny_base_dir).
"""

import json
import time
from pathlib import Path

import pytest

from bench import cli
from bench.analysis.rundir import read_run_dir
from bench.contract import read_run_json
from tests.support.contract import assert_follows_contract

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SEQ, DBS = 64, 2
TINY = ["--gpus-per-node=2", "--depth=2", f"--max_seq_len={SEQ}", f"--device_batch_size={DBS}",
        f"--total_batch_size={DBS * SEQ * 4}", "--num_iterations=6", "--eval_every=3",
        f"--eval_tokens={DBS * SEQ * 4 * 2}", "--device_type=cpu", "--scaling=strong"]


def wait_job(cluster, job_id: str, timeout: float = 120) -> str:
    """Poll scontrol until the job ends; its final state."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = cluster.run(["scontrol", "show", "job", "-o", job_id]).stdout
        state = out.split("JobState=")[1].split()[0]
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state
        time.sleep(1)
    raise AssertionError(f"job {job_id} still running after {timeout}s")


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_two_node_training_from_rendered_sbatch(slurm_cluster, tiny_base_dir, tmp_path):
    """`render sbatch` then a plain `sbatch`, as a user would: 4 ranks over 2 nodes train and record."""
    out = tmp_path / "render"
    assert cli.main(["render", "sbatch", "--nodes=2", "--runtimes=bare", *TINY, f"--base-dir={tiny_base_dir}",
                     f"--out={out}"]) == 0
    run_dir = out / "n2-bare-r1"
    assert read_run_json(run_dir)["status"] == "pending"  # the launcher's manifest comes first
    job_id = slurm_cluster.run(["sbatch", "--parsable", "job.sbatch"], cwd=run_dir).stdout.strip()
    state = wait_job(slurm_cluster, job_id)
    log = (run_dir / "train.log").read_text() if (run_dir / "train.log").exists() else "(no train.log)"
    assert state == "COMPLETED", log[-3000:]

    manifest = assert_follows_contract(run_dir)  # written by submit, the batch script and the trainer
    assert manifest["status"] == "ok", manifest.get("message")
    assert manifest["slurm"]["job_id"] == job_id
    assert manifest["slurm"]["nodelist"] == "n[1-2]"
    assert manifest["world_size"] == 4 and manifest["nodes"] == 2 and manifest["runtime"] == "bare"
    assert manifest["launch"]["exit_code"] == 0
    kinds = [e["event"] for e in events(run_dir)]
    assert kinds[0] == "start" and "end" in kinds
    assert sum(k == "step" for k in kinds) >= 5 and "val" in kinds
    dist = next(e for e in events(run_dir) if e["event"] == "dist_init")
    assert dist["world_size"] == 4
    # The launch time was taken before srun, the trainer's start after it.
    assert manifest["launch"]["t0"] <= events(run_dir)[0]["t"]
    assert list(run_dir.glob("slurm-*.log")), "the Slurm log lands beside the script"
    # why runtimes differ: the path the collectives took, their bandwidth before training, where time went
    assert manifest["network"]["backend"] == "gloo"
    assert manifest["preflight"]["world_size"] == 4 and manifest["preflight"]["busbw_gbps"]["all_reduce"] > 0
    row = read_run_dir(run_dir)  # the phases are the reader's, from the events
    assert {f"phase_{m}_s" for m in ("runtime_start", "imports_done", "preflight", "first_step")} <= set(row)
    assert len(manifest["breakdown"]["ranks"]) == 4 and manifest["breakdown"]["slowest_host"]


def test_sweep_submit_and_status_to_completion(slurm_cluster, tiny_base_dir, tmp_path, capsys):
    """A 1-node and a 2-node point with the same total batch size, submitted and followed to the end.
    --no-exclusive lets both jobs share the two nodes at once (one CPU each), halving the test's time."""
    sweep_dir = tmp_path / "sweep"
    assert cli.main(["submit", "--nodes=1,2", "--runtimes=bare", *TINY, f"--base-dir={tiny_base_dir}",
                     f"--out={sweep_dir}", "--no-exclusive"]) == 0
    assert cli.main(["status", str(sweep_dir), "--wait", "--poll=2", "--timeout=240"]) == 0
    printed = capsys.readouterr().out
    assert "2 ok" in printed, printed
    for run_id, world, accum in (("n1-bare-r1", 2, 2), ("n2-bare-r1", 4, 1)):
        manifest = read_run_json(sweep_dir / run_id)
        assert manifest["status"] == "ok", manifest.get("message")
        assert manifest["world_size"] == world and manifest["grad_accum"] == accum
        assert manifest["config"]["total_batch_size"] == DBS * SEQ * 4
        assert any(e["event"] == "step" for e in events(sweep_dir / run_id))
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert [len(j["runs"]) for j in record["jobs"]] == [1, 1] and all(j["job_id"] for j in record["jobs"])


def test_runtime_failure_leaves_failed_run_and_resubmits(slurm_cluster, tiny_base_dir, tmp_path, capsys):
    """A runtime that cannot start (a missing interpreter): run.json says failed, with the reason; the
    failed run can be submitted again and keeps the first attempt."""
    sweep_dir = tmp_path / "broken"
    assert cli.main(["submit", "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tiny_base_dir}",
                     f"--out={sweep_dir}", "--python=/nonexistent/python3"]) == 0
    assert cli.main(["status", str(sweep_dir), "--wait", "--poll=1", "--timeout=60"]) == 1
    manifest = read_run_json(sweep_dir / "n1-bare-r1")
    assert manifest["status"] == "failed"
    assert "never started" in manifest["message"] and manifest["launch"]["exit_code"] != 0
    first_job = manifest["slurm"]["job_id"]

    assert cli.main(["status", str(sweep_dir), "--resubmit-failed"]) == 0
    assert cli.main(["status", str(sweep_dir), "--wait", "--poll=1", "--timeout=60"]) == 1
    again = read_run_json(sweep_dir / "n1-bare-r1")
    assert again["slurm"]["job_id"] != first_job
    assert [a["job_id"] for a in again["attempts"]] == [first_job]
    assert (sweep_dir / "n1-bare-r1" / "attempts" / first_job / "run.json").exists()
    capsys.readouterr()


def test_squeue_json_and_scontrol_parse_on_this_slurm(slurm_cluster):
    """The status parsers read this Slurm's real answers (a held job, then cancelled)."""
    from bench.launch.slurm import SlurmCLI

    job_id = slurm_cluster.run(["sbatch", "--parsable", "--hold", "--output=/dev/null", "--wrap", "true"]).stdout.strip()
    backend = SlurmCLI()
    assert backend.states([job_id])[job_id].state == "PENDING"
    slurm_cluster.run(["scancel", job_id])
    deadline = time.time() + 20
    while backend.states([job_id])[job_id].state != "CANCELLED":
        assert time.time() < deadline
        time.sleep(0.5)
    assert backend.states(["999999"])["999999"].state == "UNKNOWN"
