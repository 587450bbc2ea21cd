"""`status`: what Slurm says of an ended job becomes evidence, once, and the contract settles the status
(bench/launch/status.py). Slurm's answers are given as JobState values: no cluster is needed for this.

    python -m pytest tests/unit/launch/test_sweep_status.py -q
"""

from bench import contract
from bench.launch.slurm import JobState
from bench.launch.status import _derive


def test_a_time_limit_turns_the_ranks_cancel_into_a_timeout_once(tmp_path):
    contract.record_evidence(tmp_path, contract.Evidence(source="trainer", kind="cancelled", rank=0,
                                                         message="rank 0: received SIGTERM (signal 15)"))
    job = JobState("42", "TIMEOUT")
    status, message = _derive(tmp_path, job)
    assert status == "timeout" and message == ("Slurm job 42 reached its time limit (TIMEOUT); "
                                               "rank 0: received SIGTERM (signal 15)")
    assert _derive(tmp_path, job) == (status, message)
    assert [e.source for e in contract.load_manifest(tmp_path).evidence] == ["trainer", "status"]  # not again


def test_a_job_slurm_ended_before_any_record_is_settled_from_its_state(tmp_path):
    contract.update_run_json(tmp_path, status="running")
    assert _derive(tmp_path, JobState("7", "RUNNING")) == ("running", "")
    status, message = _derive(tmp_path, JobState("7", "CANCELLED", exit_code="0:15"))
    assert status == "cancelled" and message.startswith("Slurm job 7 ended CANCELLED (exit 0:15)")
    contract.update_run_json(tmp_path / "b", status="pending")
    assert _derive(tmp_path / "b", JobState("8", "OUT_OF_MEMORY"))[0] == "oom"
    contract.update_run_json(tmp_path / "c", status="pending")
    assert _derive(tmp_path / "c", JobState("9", "NODE_FAIL"))[0] == "failed"


def test_a_finished_run_is_left_alone(tmp_path):
    contract.record_evidence(tmp_path, contract.Evidence(source="trainer", kind="completed", rank=0))
    assert _derive(tmp_path, JobState("5", "TIMEOUT")) == ("ok", "")
    assert len(contract.load_manifest(tmp_path).evidence) == 1
