"""Resubmission excludes the nodes an attempt lost (sbatch --exclude), and records them in the sweep.

The job is not run here (tests/integration/slurm/test_slurm_resubmit.py resubmits for real); the backend
below only records what sbatch would have been asked."""

from unittest import mock

import pytest

from bench import cli, contract
from bench.errors import SubmitError
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
