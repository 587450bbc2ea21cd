"""Resubmission excludes the nodes an attempt lost (sbatch --exclude), and records them in the sweep.

The job is not run here (tests/integration/slurm/test_slurm_resubmit.py resubmits for real); the backend
below only records what sbatch would have been asked."""

import json
import shutil
from unittest import mock

import pytest

from bench import cli, contract
from bench.errors import ConfigError, SubmitError
from bench.launch import slurm, status, submit


class Backend:
    def __init__(self):
        self.calls = []

    def submit(self, script, exclude=()):
        self.calls.append((script.name, list(exclude)))
        return str(100 + len(self.calls))


def test_a_lost_node_is_excluded_from_the_next_attempt(tmp_path):
    run = tmp_path / "n2-bare-r1"
    run.mkdir()
    (run / "job.sbatch").write_text("#!/bin/bash\n")
    contract.update_run_json(run, run_id="n2-bare-r1", status="pending", nodes=2)
    contract.record_evidence(run, contract.Evidence(source="batch_script", kind="node_lost", node="n2",
                                                    message="a node of the job was lost: srun: error: Node failure on n2"))
    assert contract.read_run_json(run)["status"] == "failed"
    submit.write_sweep(tmp_path, {"jobs": [{"name": "j", "job_id": "7", "runs": ["n2-bare-r1"],
                                            "script": str(run / "job.sbatch")}]})
    backend = Backend()
    assert submit.resubmit(tmp_path, {"n2-bare-r1"}, backend, out=lambda _: None) == ["101"]
    assert backend.calls == [("job.sbatch", ["n2"])]
    entry = submit.read_sweep(tmp_path)["jobs"][0]
    assert entry["excluded_nodes"] == ["n2"] and entry["previous_job_ids"] == ["7"]
    manifest = contract.read_run_json(run)
    assert manifest["status"] == "pending" and manifest["attempts"][0]["status"] == "failed"


class Refusing(Backend):
    def submit(self, script, exclude=()):
        raise SubmitError("sbatch: error: invalid partition specified: nosuch")


def test_a_resubmission_sbatch_refuses_fails_the_command(tmp_path, capsys):
    """`status --resubmit-failed` once printed `not submitted ...` and exited 0, as if it had resubmitted."""
    run = tmp_path / "n1-bare-r1"
    run.mkdir()
    (run / "job.sbatch").write_text("#!/bin/bash\n")
    contract.update_run_json(run, run_id="n1-bare-r1", status="pending", nodes=1)
    contract.record_evidence(run, contract.Evidence(source="submit", kind="not_submitted", message="not submitted"))
    submit.write_sweep(tmp_path, {"jobs": [{"name": "j", "job_id": None, "runs": ["n1-bare-r1"],
                                            "script": str(run / "job.sbatch")}]})
    states = [status.RunState("n1-bare-r1", None, "-", contract.read_run_json(run)["status"])]
    with mock.patch.object(status, "sweep_status", return_value=states), \
            mock.patch.object(slurm, "SlurmCLI", Refusing):
        assert cli.main(["status", str(tmp_path), "--resubmit-failed"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: sbatch refused 1 of 1 job(s)") and "--resubmit-failed" in err
    assert contract.read_run_json(run)["status"] == "failed"


@pytest.mark.parametrize("final", ["diverged", "wrong_network", "failed"])
def test_status_wait_fails_for_any_run_that_did_not_end_ok(final, tmp_path, capsys):
    """`status --wait` exited 0 for a sweep whose runs diverged or trained on the wrong network."""
    states = [status.RunState("n1-bare-r1", "5", "COMPLETED", "ok"),
              status.RunState("n2-bare-r1", "6", "FAILED", final, "why")]
    with mock.patch.object(status, "wait", return_value=states), mock.patch.object(slurm, "SlurmCLI", Backend):
        assert cli.main(["status", str(tmp_path), "--wait"]) == 1
    with mock.patch.object(status, "wait", return_value=states[:1]), mock.patch.object(slurm, "SlurmCLI", Backend):
        assert cli.main(["status", str(tmp_path), "--wait"]) == 0


def test_a_run_json_outside_the_contract_is_left_and_named_not_a_traceback(tmp_path, capsys):
    """`status --resubmit-failed` read a failed run whose run.json did not fit the contract (here its evidence a
    string) and ended in a SchemaError traceback; the other failed runs of the sweep were not resubmitted."""
    entries = []
    for run_id in ("n1-bare-r1", "n1-bare-r2"):
        run = tmp_path / run_id
        run.mkdir()
        (run / "job.sbatch").write_text("#!/bin/bash\n")
        contract.update_run_json(run, run_id=run_id, status="pending", nodes=1)
        contract.record_evidence(run, contract.Evidence(source="trainer", kind="exit", message="exit 1"))
        entries.append({"name": run_id, "job_id": "7", "runs": [run_id], "script": str(run / "job.sbatch")})
    submit.write_sweep(tmp_path, {"jobs": entries})
    damaged = contract.read_run_json(tmp_path / "n1-bare-r1")
    (tmp_path / "n1-bare-r1" / contract.RUN_JSON).write_text(json.dumps({**damaged, "evidence": "oops"}))
    before = (tmp_path / "n1-bare-r1" / contract.RUN_JSON).read_text()
    states = [status.RunState(r, "7", "FAILED", "failed") for r in ("n1-bare-r1", "n1-bare-r2")]
    backend = Backend()
    with mock.patch.object(status, "sweep_status", return_value=states), \
            mock.patch.object(slurm, "SlurmCLI", lambda: backend):
        assert cli.main(["status", str(tmp_path), "--resubmit-failed"]) == 1
    captured = capsys.readouterr()
    assert "n1-bare-r1: run.json cannot be read as a run's record" in captured.out
    assert captured.err.startswith("error: not resubmitted: n1-bare-r1, whose run.json")
    assert backend.calls == [("job.sbatch", [])]  # the readable run was resubmitted all the same
    assert contract.read_run_json(tmp_path / "n1-bare-r2")["status"] == "pending"
    assert (tmp_path / "n1-bare-r1" / contract.RUN_JSON).read_text() == before
    assert not (tmp_path / "n1-bare-r1" / "attempts").exists()


@pytest.mark.parametrize("workload,resumes", [("nanochat-base", True), ("nanochat-mid", False)])
def test_only_a_workload_that_can_resume_is_said_to_resume(workload, resumes, tmp_path):
    """A flow point's mid_train stopped by its deadline was resubmitted with `resumes from its checkpoint of step 30`
    and launch.resume_from_step 30 in run.json, yet its job has no resume step for it: it started over."""
    run = tmp_path / "n1-bare-r1" / "stage"
    run.mkdir(parents=True)
    (run.parent / "job.sbatch").write_text("#!/bin/bash\n")
    contract.update_run_json(run, run_id="n1-bare-r1", workload=workload, status="timeout", nodes=1,
                             checkpoint={"step": 30, "dir": "/base/mid_checkpoints/sw-n1"})
    submit.write_sweep(tmp_path, {"jobs": [{"name": "j", "job_id": "7", "runs": ["n1-bare-r1/stage"],
                                            "script": str(run.parent / "job.sbatch")}]})
    lines = []
    submit.resubmit(tmp_path, {"n1-bare-r1/stage"}, Backend(), out=lines.append)
    launch = contract.read_run_json(run)["launch"]
    assert (launch["resume_from_step"] == 30) is resumes
    said = "resumes from its checkpoint of step 30" if resumes else "starts over"
    assert any(line.startswith(f"n1-bare-r1: {said}") for line in lines), lines


def test_a_run_that_diverged_is_not_run_again_by_resubmitting_its_job_mate(tmp_path):
    """A runtime comparison's job holds several runs and its script skips only those that ended ok: resubmitting the
    failed one ran the diverged one again as well, its train.log and metrics overwritten, while resubmission said
    `kept ... (ok already)` of it."""
    runs = {"n1-bare-r1": "completed", "n1-bare-r2": "diverged", "n1-bare-r3": "error"}
    job = tmp_path / "jobs" / "compare-n1" / "job.sbatch"
    job.parent.mkdir(parents=True)
    job.write_text("#!/bin/bash\n")
    for run_id, kind in runs.items():
        contract.update_run_json(tmp_path / run_id, run_id=run_id, status="pending", nodes=1)
        (tmp_path / run_id / contract.TRAIN_LOG).write_text(f"log of {run_id}\n")
        contract.record_evidence(tmp_path / run_id, contract.Evidence(source="trainer", kind=kind, rank=0))
    submit.write_sweep(tmp_path, {"jobs": [{"name": "compare-n1", "job_id": "7", "runs": list(runs),
                                            "script": str(job)}]})
    backend = Backend()
    with pytest.raises(ConfigError, match=r"not resubmitted: n1-bare-r3: job compare-n1 would also run again "
                                          r"n1-bare-r2 \(diverged\)"):
        submit.resubmit(tmp_path, {"n1-bare-r3"}, backend, out=lambda _: None)
    assert backend.calls == [] and submit.read_sweep(tmp_path)["jobs"][0]["job_id"] == "7"
    assert contract.read_run_json(tmp_path / "n1-bare-r3")["status"] == "failed"
    assert (tmp_path / "n1-bare-r3" / contract.TRAIN_LOG).exists()
    # what `status` then says instead of suggesting --resubmit-failed for it
    assert submit.held_back(tmp_path, {"n1-bare-r3"}) == {"n1-bare-r3": "n1-bare-r2 (diverged)"}
    # with the diverged run's job-mates ok, the failed run is resubmitted as before
    contract.record_evidence(tmp_path / "n1-bare-r2", contract.Evidence(source="trainer", kind="completed", rank=0))
    assert submit.resubmit(tmp_path, {"n1-bare-r3"}, backend, out=lambda _: None) == ["101"]


def test_a_resubmitted_run_keeps_its_earlier_attempts_nccl_logs(tmp_path):
    """Resubmission moved train.log and metrics.jsonl into attempts/<job>/ but left nccl/rank<N>.log, which NCCL
    rewrites on the next attempt: the NCCL lines of the attempt that failed (why a collective timed out) were lost."""
    run = tmp_path / "n2-bare-r1"
    (run / "nccl").mkdir(parents=True)
    (run / "job.sbatch").write_text("#!/bin/bash\n")
    (run / "nccl" / "rank0.log").write_text("n1:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0\n")
    (run / contract.TRAIN_LOG).write_text("the first attempt\n")
    contract.update_run_json(run, run_id="n2-bare-r1", status="pending", nodes=2)
    contract.record_evidence(run, contract.Evidence(source="trainer", kind="nccl_timeout", rank=0))
    submit.write_sweep(tmp_path, {"jobs": [{"name": "j", "job_id": "7", "runs": ["n2-bare-r1"],
                                            "script": str(run / "job.sbatch")}]})
    submit.resubmit(tmp_path, {"n2-bare-r1"}, Backend(), out=lambda _: None)
    kept = run / "attempts" / "7"
    assert (kept / "nccl" / "rank0.log").read_text().startswith("n1:1:1 [0] NCCL INFO")
    assert (kept / contract.TRAIN_LOG).exists() and not (run / "nccl").exists()


def test_ctrl_c_while_sbatch_submits_stops_the_command_after_the_job_is_recorded(tmp_path):
    """Regression: a Ctrl-C that came while sbatch was handing a job to Slurm (or before sweep.json was rewritten)
    left the job running with `job_id: null` in sweep.json: status read it as never submitted and --resubmit-failed
    submitted it a second time into the same run directory. The interrupt now lands once the job id is recorded."""
    import os
    import signal

    run = tmp_path / "n1-bare-r1"
    run.mkdir()
    (run / "job.sbatch").write_text("#!/bin/bash\n")
    contract.record_evidence(run, contract.Evidence(source="batch_script", kind="node_lost", node="n1",
                                                    message="a node of the job was lost"))
    submit.write_sweep(tmp_path, {"jobs": [{"name": "j", "job_id": "7", "runs": ["n1-bare-r1"],
                                            "script": str(run / "job.sbatch")}]})

    class CtrlCWhileSubmitting(Backend):
        def submit(self, script, exclude=()):
            os.kill(os.getpid(), signal.SIGINT)  # the terminal's Ctrl-C, while sbatch is at work
            return super().submit(script, exclude)

    # Python's own Ctrl-C handler, as in a terminal: a suite started in the background inherits SIGINT ignored
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            submit.resubmit(tmp_path, {"n1-bare-r1"}, CtrlCWhileSubmitting(), out=lambda _: None)
    finally:
        signal.signal(signal.SIGINT, before)
    assert submit.read_sweep(tmp_path)["jobs"][0]["job_id"] == "101"
    assert contract.read_run_json(run)["slurm"]["job_id"] == "101"


@pytest.mark.parametrize("how", ["copied", "moved"])
def test_a_moved_or_copied_sweep_is_not_resubmitted_as_the_original(how, tmp_path):
    """A copied sweep's `status --resubmit-failed` sbatch'ed the original's job script (its paths are absolute), so
    the job wrote into the original sweep while the copy's run stayed pending; a moved one's failed as 'sbatch not
    found', the job's directory being gone."""
    first, second = tmp_path / "sweep", tmp_path / "elsewhere"
    run = first / "n1-bare-r1"
    run.mkdir(parents=True)
    (run / "job.sbatch").write_text("#!/bin/bash\n")
    contract.update_run_json(run, run_id="n1-bare-r1", status="pending", nodes=1)
    contract.record_evidence(run, contract.Evidence(source="trainer", kind="exit", message="exit 1"))
    submit.write_sweep(first, {"jobs": [{"name": "j", "job_id": "7", "runs": ["n1-bare-r1"],
                                         "script": str(run / "job.sbatch")}]})
    shutil.copytree(first, second) if how == "copied" else first.rename(second)
    backend = Backend()
    with pytest.raises(ConfigError) as refused:
        submit.resubmit(second, {"n1-bare-r1"}, backend, out=lambda _: None)
    assert str(refused.value).startswith(f"{second / 'sweep.json'}: job j's script is {run / 'job.sbatch'}, outside")
    assert "moved or copied" in str(refused.value) and backend.calls == []
    assert contract.read_run_json(second / "n1-bare-r1")["status"] == "failed"  # nothing reset for a resubmission
    assert not (second / "n1-bare-r1" / "attempts").exists()


def test_a_job_directory_that_is_gone_is_named_not_a_missing_sbatch(tmp_path):
    """sbatch runs in the job's directory; subprocess's FileNotFoundError for a missing one read 'sbatch not found'."""
    with pytest.raises(SubmitError, match=f"^{tmp_path / 'gone'}: no such directory, so sbatch cannot run in it$"):
        slurm.SlurmCLI().submit(tmp_path / "gone" / "job.sbatch")
