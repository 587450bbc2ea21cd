"""Resubmission excludes the nodes an attempt lost (sbatch --exclude), and records them in the sweep.

The job is not run here (tests/integration/slurm/test_slurm_resubmit.py resubmits for real); the backend
below only records what sbatch would have been asked."""

from bench import contract
from bench.launch import submit


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
