"""`status`: what Slurm says of an ended job becomes evidence, once, and the contract settles the status
(bench/launch/status.py). Slurm's answers are given as JobState values: no cluster is needed for this.

    python -m pytest tests/unit/launch/test_sweep_status.py -q
"""

import json

import pytest

from bench import contract
from bench.launch import status
from bench.launch.slurm import JobState
from bench.launch.status import RunState, _derive, wait
from bench.launch.submit import write_sweep


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


def test_a_job_slurm_holds_says_why_in_status_and_in_the_wait(tmp_path):
    """A 3-node job on a 2-node partition stays PENDING (PartitionNodeLimit) for ever: status once showed a bare
    `pending`, and `status --wait` printed nothing more until its --timeout."""
    run = tmp_path / "n3-bare-r1"
    contract.update_run_json(run, status="pending")
    assert _derive(run, JobState("10", "PENDING", reason="PartitionNodeLimit")) == (
        "pending", "held by Slurm: PartitionNodeLimit")
    assert _derive(run, JobState("10", "PENDING", reason="None")) == ("pending", "")
    assert contract.read_run_json(run)["status"] == "pending" and not contract.load_manifest(run).evidence

    class Backend:
        def states(self, job_ids):
            return {j: JobState(j, "PENDING", reason="PartitionNodeLimit") for j in job_ids}

    write_sweep(tmp_path, {"jobs": [{"name": "j", "job_id": "10", "runs": ["n3-bare-r1"]}]})
    lines = []
    rows = wait(tmp_path, Backend(), poll_s=0.01, timeout_s=0, out=lines.append)
    assert rows[0].message == "held by Slurm: PartitionNodeLimit"
    assert lines[0].endswith("1 pending; held by Slurm: 1 PartitionNodeLimit")


def test_a_running_run_shows_its_step_and_a_long_wait_repeats_it(tmp_path, monkeypatch):
    """A run that trains for hours changes no count: status said `running` alone and --wait printed one line,
    so a long wait looked the same whether training advanced or not."""
    run = tmp_path / "n1-bare-r1"
    contract.update_run_json(run, status="running", num_iterations=20000)
    steps = [{"event": "step", "step": s, "loss": 3.0} for s in (0, 1, 2568)]
    (run / contract.METRICS_JSONL).write_text("".join(json.dumps(e) + "\n" for e in steps) + '{"event": "st')
    assert _derive(run, JobState("17", "RUNNING")) == ("running", "at step 2568 of 20000")

    class Backend:
        def states(self, job_ids):
            return {j: JobState(j, "RUNNING") for j in job_ids}

    write_sweep(tmp_path, {"jobs": [{"name": "j", "job_id": "17", "runs": ["n1-bare-r1"]}]})
    clock = iter(range(0, 10_000, 100))  # each poll 100 s later
    monkeypatch.setattr(status.time, "time", lambda: float(next(clock)))
    monkeypatch.setattr(status.time, "sleep", lambda s: None)
    lines = []
    wait(tmp_path, Backend(), timeout_s=1000, out=lines.append)
    assert len(lines) >= 2 and all(ln.endswith("1 running (n1-bare-r1 at step 2568 of 20000)") for ln in lines)


def test_a_run_never_submitted_ends_the_wait_and_is_resubmittable(tmp_path, monkeypatch):
    """A submit stopped before sbatch (Ctrl-C, a hung slurmctld) leaves a job without an id in sweep.json and its
    run pending: no Slurm job will ever end it, so `status --wait` without --timeout polled for ever, and
    --resubmit-failed did not take it."""
    contract.record_evidence(tmp_path / "a", contract.Evidence(source="trainer", kind="completed", rank=0))
    contract.update_run_json(tmp_path / "b", status="pending")
    write_sweep(tmp_path, {"jobs": [{"name": "a", "job_id": "10", "runs": ["a"]},
                                    {"name": "b", "job_id": None, "runs": ["b"]}]})

    class Backend:
        def states(self, job_ids):
            return {j: JobState(j, "COMPLETED") for j in job_ids}

    polls = iter(range(3))
    monkeypatch.setattr(status.time, "sleep", lambda s: next(polls))  # StopIteration: it would wait for ever
    rows = wait(tmp_path, Backend(), poll_s=1)
    assert [(r.run_id, r.status) for r in rows] == [("a", "ok"), ("b", "pending")]
    assert rows[1].message.startswith("not submitted") and rows[1].resubmittable and not rows[0].resubmittable


def test_a_damaged_run_json_is_one_unreadable_row_and_left_as_it_is(tmp_path):
    """status read each run.json with json.load: one empty, cut or non-object file ended the whole command in a
    traceback, and a newer major's pending run.json of an ended job in a SchemaError."""
    for name, text in (("empty", ""), ("cut", '{"status": "ok", "me'), ("list", "[1]"),
                       ("evidence", '{"status": "failed", "evidence": 3}')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(text)
        status, message = _derive(tmp_path / name, JobState("3", "COMPLETED"))
        assert status == "unreadable" and message.startswith("run.json ") and message.endswith("left as it is")
        assert (tmp_path / name / "run.json").read_text() == text  # left for its owner to look at
        row = RunState(name, "3", "COMPLETED", status, message)
        assert row.done and row.settled and not row.resubmittable  # a wait ends; its plan is not rewritten
    (tmp_path / "dir" / "run.json").mkdir(parents=True)  # as a read that fails (EACCES, EIO)
    assert _derive(tmp_path / "dir", JobState("3", "COMPLETED")) == (
        "unreadable", "run.json cannot be read: Is a directory; it is left as it is")
    (tmp_path / "future").mkdir()
    (tmp_path / "future" / "run.json").write_text(json.dumps({"schema_version": "3.0", "status": "pending"}))
    status, message = _derive(tmp_path / "future", JobState("4", "CANCELLED"))
    assert status == "cancelled" and "Slurm job 4 ended CANCELLED" in message and "major 3" in message


def test_a_time_limit_is_not_the_cause_of_a_run_that_ended_before_it_on_its_own(tmp_path):
    """A runtime comparison's job runs its runs in turn: a run that diverged or failed early, followed by one that
    reached the job's time limit, was called a timeout by status (and --resubmit-failed resumed it), as if the limit
    had cut it."""
    for name, kind in (("diverged", "diverged"), ("failed", "error"), ("wrong_network", "wrong_network")):
        contract.record_evidence(tmp_path / name, contract.Evidence(source="trainer", kind=kind, rank=0, message="m"))
        assert _derive(tmp_path / name, JobState("42", "TIMEOUT")) == (name, "m")
        assert [e.kind for e in contract.load_manifest(tmp_path / name).evidence] == [kind]
    # the run the limit stopped: the batch script received SIGTERM while it went on
    stopped = tmp_path / "stopped"
    contract.record_evidence(stopped, contract.Evidence(source="trainer", kind="error", rank=1, message="peer gone"))
    contract.record_evidence(stopped, contract.Evidence(source="batch_script", kind="stopped", signal="SIGTERM"))
    assert _derive(stopped, JobState("42", "TIMEOUT"))[0] == "timeout"


def test_a_node_lost_or_a_preemption_before_any_record_is_said_so(tmp_path):
    """NODE_FAIL and BOOT_FAIL once gave a plain `exit` (a launcher's exit code, nothing known), and a preempted job
    a failure instead of a stop that is run again."""
    for state, kind, want in (("NODE_FAIL", "node_lost", "failed"), ("BOOT_FAIL", "node_lost", "failed"),
                              ("PREEMPTED", "stopped", "cancelled"), ("DEADLINE", "time_limit", "timeout")):
        contract.update_run_json(tmp_path / state, status="running")
        status, message = _derive(tmp_path / state, JobState("9", state, exit_code="0:0"))
        assert status == want and message.startswith(f"Slurm job 9 ended {state}")
        assert [e.kind for e in contract.load_manifest(tmp_path / state).evidence] == [kind]



def test_a_lost_node_is_the_cause_of_the_run_it_cut_not_the_peers_the_survivors_lost(tmp_path):
    """The ranks on the nodes that survived recorded peer_lost or an error before Slurm ended the job NODE_FAIL, so
    status added nothing and the run read as failed through a peer, not the lost node that outranks them."""
    def run(name: str, *kinds: str, finished: bool = False):
        run_dir = tmp_path / name
        contract.update_run_json(run_dir, status="running", launch={"kind": "slurm", "started_at": 1.0})
        for rank, kind in enumerate(kinds):
            source = "batch_script" if kind == "stopped" else "trainer"
            contract.record_evidence(run_dir, contract.Evidence(source=source, kind=kind, rank=rank, message=kind))
        if finished:  # the batch script saw the run end (jobrecord.finish)
            contract.update_run_json(run_dir, launch={"exit_code": 1, "finished_at": 2.0})
        return run_dir

    job = JobState("9", "NODE_FAIL", exit_code="0:0")
    # the batch script lost with its node (it never finished the run), or stopped by Slurm while the run went on
    for run_dir, echo in ((run("peer", "peer_lost"), "peer_lost"), (run("error", "peer_lost", "error"), "error"),
                          (run("stopped", "peer_lost", "stopped", finished=True), "peer_lost")):
        assert _derive(run_dir, job) == ("failed", f"Slurm job 9 lost a node (NODE_FAIL); {echo}")
        assert _derive(run_dir, job) == ("failed", f"Slurm job 9 lost a node (NODE_FAIL); {echo}")
        assert [e.kind for e in contract.load_manifest(run_dir).evidence].count("node_lost") == 1
    # an earlier run of the job that the batch script saw end on its own; a flow's stage that never started
    for run_dir in (run("own", "diverged", "peer_lost", finished=True), run("later", "not_run")):
        before = contract.load_manifest(run_dir)
        assert _derive(run_dir, job) == (before.status, before.message)
        assert "node_lost" not in [e.kind for e in contract.load_manifest(run_dir).evidence]


def test_a_time_limit_is_not_the_cause_of_an_earlier_run_whose_ranks_torchrun_stopped(tmp_path):
    """A run of a runtime comparison's job failed on its own: torchrun stopped its other ranks, which recorded a
    cancel. A later run of the job reached the time limit, and status called the failed run a timeout too."""
    def run(name: str, *evidence: tuple[str, str], finished: bool = False):
        run_dir = tmp_path / name
        contract.update_run_json(run_dir, status="running", launch={"kind": "slurm", "started_at": 1.0})
        for rank, (source, kind) in enumerate(evidence):
            contract.record_evidence(run_dir, contract.Evidence(source=source, kind=kind, rank=rank, message=kind))
        if finished:  # the batch script saw the run end (jobrecord.finish)
            contract.update_run_json(run_dir, launch={"exit_code": 1, "finished_at": 2.0})
        return run_dir

    job = JobState("42", "TIMEOUT")
    own = run("own", ("trainer", "error"), ("trainer", "cancelled"), ("trainer", "cancelled"), finished=True)
    before = contract.load_manifest(own)
    assert before.status == "failed" and _derive(own, job) == ("failed", before.message)
    assert "time_limit" not in [e.kind for e in contract.load_manifest(own).evidence]
    # the run the limit cut: the batch script died with the job, or received SIGTERM while the run went on
    for cut in (run("cut", ("trainer", "cancelled"), ("trainer", "cancelled")),
                run("stopped", ("trainer", "cancelled"), ("batch_script", "stopped"), finished=True)):
        assert _derive(cut, job)[0] == "timeout"
        assert [e.kind for e in contract.load_manifest(cut).evidence].count("time_limit") == 1


def test_an_ended_job_of_a_run_directory_that_cannot_be_written_is_shown_not_a_traceback(tmp_path, monkeypatch):
    """status on a sweep it may read but not write (another user's, a read-only mount) ended in a PermissionError
    traceback where it would record what Slurm said of an ended job; it is shown as it would be settled, so that
    `status --wait` ends."""
    import errno

    contract.update_run_json(tmp_path, status="running")

    def read_only(run_dir, evidence, **fields):
        raise PermissionError(errno.EACCES, "Permission denied", str(run_dir / "run.json"))

    monkeypatch.setattr(contract, "record_evidence", read_only)
    status, message = _derive(tmp_path, JobState("4", "CANCELLED", exit_code="0:15"))
    assert status == "cancelled"
    assert message.startswith("Slurm job 4 ended CANCELLED (exit 0:15) before the run recorded a final status")
    assert message.endswith(f"(not recorded: the run directory {tmp_path} cannot be written: Permission denied "
                            f"({tmp_path / 'run.json'}))")


def test_an_ended_job_of_a_newer_majors_run_json_is_shown_as_settled_so_a_wait_ends(tmp_path):
    """A newer major's run.json that still said pending or running when Slurm ended its job was shown pending or
    running (record_evidence will not rewrite it): the run never counted as done, and `status --wait` without
    --timeout polled for ever. It is shown as Slurm's word settles it, the file left as it is."""
    text = json.dumps({"schema_version": "3.0", "status": "running"})
    (tmp_path / "run.json").write_text(text)
    status, message = _derive(tmp_path, JobState("4", "CANCELLED", exit_code="0:15"))
    assert status == "cancelled" and message.startswith("Slurm job 4 ended CANCELLED (exit 0:15) before the run")
    assert "(not recorded: " in message and "major 3" in message
    assert (tmp_path / "run.json").read_text() == text
    assert RunState("r", "4", "CANCELLED", status, message).settled


def test_a_settled_entry_without_a_message_is_not_shown_as_none_where_it_cannot_be_recorded(tmp_path):
    """Where run.json cannot be rewritten, the row's message was the winning entry's followed by why it was not
    recorded; an entry without a message (the contract lets it have none) showed 'None (not recorded: ...)'."""
    text = json.dumps({"schema_version": "3.0", "status": "running",  # resumed: its earlier attempt's evidence kept
                       "evidence": [{"source": "trainer", "kind": "hung", "rank": 1}]})
    (tmp_path / "run.json").write_text(text)
    status, message = _derive(tmp_path, JobState("4", "CANCELLED", exit_code="0:15"))
    assert status == "hung" and message.startswith("not recorded: ") and "major 3" in message, message
    assert "None" not in message and (tmp_path / "run.json").read_text() == text


def test_a_run_json_whose_evidence_is_not_a_list_is_an_unreadable_row_not_a_traceback(tmp_path):
    """A damaged run.json whose evidence section is a number, an object or a string ended `status` in a TypeError
    (the section was iterated as it stood): it is one unreadable row, the file left as it is."""
    for name, evidence in (("number", 5), ("object", {"kind": "stopped"}), ("text", "stopped")):
        run_dir = tmp_path / name
        run_dir.mkdir()
        text = json.dumps({"status": "running", "evidence": evidence})
        (run_dir / "run.json").write_text(text)
        status, message = _derive(run_dir, JobState("4", "CANCELLED", exit_code="0:15"))
        assert status == "unreadable" and "'evidence'" in message and message.endswith("left as it is"), message
        assert (run_dir / "run.json").read_text() == text


def test_a_wait_on_jobs_slurm_never_starts_ends_with_what_to_do(tmp_path, monkeypatch, capsys):
    """Regression: `status --wait` (no --timeout: wait for ever) on a job pending for PartitionTimeLimit, which Slurm
    never clears, polled until Ctrl-C; it stops once every run it waits for is held so, naming them, exit 1. A
    reason that clears (Resources, or a mix) is still waited for."""
    from bench import cli
    from bench.launch import slurm

    for run in ("n1-bare-r1", "n2-bare-r1"):
        contract.update_run_json(tmp_path / run, status="pending")
    write_sweep(tmp_path, {"jobs": [{"name": "a", "job_id": "10", "runs": ["n1-bare-r1"]},
                                    {"name": "b", "job_id": "11", "runs": ["n2-bare-r1"]}]})
    reasons = {"10": "PartitionTimeLimit", "11": "Resources"}

    class Backend:
        def states(self, job_ids):
            return {j: JobState(j, "PENDING", reason=reasons[j]) for j in job_ids}

    assert len(wait(tmp_path, Backend(), poll_s=0.01, timeout_s=0.2, out=lambda line: None)) == 2  # to the timeout
    reasons["11"] = "BadConstraints"
    rows = wait(tmp_path, Backend(), poll_s=0.01, timeout_s=None, out=lambda line: None)
    assert [r.run_id for r in status.never_start(rows)] == ["n1-bare-r1", "n2-bare-r1"]
    monkeypatch.setattr(slurm, "SlurmCLI", Backend)
    assert cli.main(["status", str(tmp_path), "--wait", "--poll=1"]) == 1  # no poll after the first
    out = capsys.readouterr().out
    assert ("stopped waiting: Slurm will never start the job(s) of n1-bare-r1, n2-bare-r1 (BadConstraints, "
            "PartitionTimeLimit)") in out and "gave up" not in out


def test_a_rank_the_oom_killer_killed_is_the_run_s_oom_once_slurm_says_so(tmp_path):
    """The kernel's OOM killer SIGKILLed rank 1 on nid2; torchrun's word on it (killed by SIGKILL) and rank 0's lost
    peer settled the run `failed`, and Slurm's OUT_OF_MEMORY, the one witness that the kill was for memory, was read
    only for a run without a final status."""
    killed = "rank 1 on nid2 died: killed by SIGKILL"
    for entry in (contract.Evidence(source="wrapper", kind="rank_killed", rank=1, node="nid2", signal="SIGKILL",
                                    exit_code=-9, message=killed),
                  contract.Evidence(source="trainer", kind="peer_lost", rank=0, node="nid1",
                                    message=f"rank 0: lost contact with another rank, which ended first ({killed})")):
        contract.record_evidence(tmp_path, entry)
    contract.update_run_json(tmp_path, launch={"finished_at": 1000.0})  # the batch script saw srun end
    assert _derive(tmp_path, JobState("42", "FAILED")) == ("failed", killed)
    expected = ("oom", f"Slurm job 42 ran out of memory (OUT_OF_MEMORY): {killed}")
    assert _derive(tmp_path, JobState("42", "OUT_OF_MEMORY")) == expected
    assert _derive(tmp_path, JobState("42", "OUT_OF_MEMORY")) == expected
    assert [e.kind for e in contract.load_manifest(tmp_path).evidence] == ["rank_killed", "peer_lost", "oom"]  # once
    stopped = tmp_path / "stopped"  # torchrun stopped the rank itself: no kill of the OOM killer's
    contract.record_evidence(stopped, contract.Evidence(source="trainer", kind="error", rank=0, message="rank 0: boom"))
    assert _derive(stopped, JobState("43", "OUT_OF_MEMORY")) == ("failed", "rank 0: boom")


def test_a_wait_asks_slurm_only_of_the_jobs_whose_runs_have_not_settled(tmp_path, monkeypatch):
    """`status --wait` queried squeue for every job of the sweep on every poll, those whose runs had long ended too,
    so a sweep of hundreds of finished runs and one running asked slurmctld about them all for hours."""
    contract.record_evidence(tmp_path / "a", contract.Evidence(source="trainer", kind="completed", rank=0))
    contract.update_run_json(tmp_path / "a", launch={"finished_at": 1000.0})
    contract.update_run_json(tmp_path / "b", status="running")
    write_sweep(tmp_path, {"jobs": [{"name": "a", "job_id": "10", "runs": ["a"]},
                                    {"name": "b", "job_id": "11", "runs": ["b"]}]})
    asked = []

    class Backend:
        def states(self, job_ids):
            asked.append(sorted(job_ids))
            if len(asked) == 3:  # b's job ends at the third poll
                contract.record_evidence(tmp_path / "b", contract.Evidence(source="trainer", kind="completed", rank=0))
            return {j: JobState(j, "COMPLETED" if j == "10" or len(asked) == 3 else "RUNNING") for j in job_ids}

    monkeypatch.setattr(status.time, "sleep", lambda s: None)
    rows = wait(tmp_path, Backend(), poll_s=1, out=lambda line: None)
    assert asked == [["10", "11"], ["11"], ["11"]]
    assert [(r.run_id, r.slurm_state, r.status) for r in rows] == [("a", "COMPLETED", "ok"), ("b", "COMPLETED", "ok")]


def test_a_wait_outlasts_a_poll_slurm_does_not_answer_and_gives_up_only_after_several(tmp_path, monkeypatch, capsys):
    """One poll that squeue and scontrol did not answer (slurmctld restarting, failing over) ended `status --wait`
    with an error, though the next poll would have been answered; it says so in one line and asks again at the next
    poll, and gives up, saying so, only once Slurm has not answered several polls in a row over some minutes."""
    from bench import cli
    from bench.launch import slurm

    contract.update_run_json(tmp_path / "a", status="running")
    write_sweep(tmp_path, {"jobs": [{"name": "a", "job_id": "10", "runs": ["a"]}]})
    answers = iter(["RUNNING", None, "COMPLETED"])  # None: slurmctld does not answer

    class Backend:
        def states(self, job_ids):
            state = next(answers)
            if state is None:
                raise slurm.SlurmDidNotAnswer("squeue: 'Unable to contact slurm controller (connect failure)'")
            if state == "COMPLETED":
                contract.record_evidence(tmp_path / "a", contract.Evidence(source="trainer", kind="completed", rank=0))
            return {j: JobState(j, state) for j in job_ids}

    clock = iter(range(0, 100_000, 60))  # each look at the clock a minute later
    monkeypatch.setattr(status.time, "time", lambda: float(next(clock)))
    monkeypatch.setattr(status.time, "sleep", lambda s: None)
    lines = []
    rows = wait(tmp_path, Backend(), poll_s=10, out=lines.append)
    assert [(r.run_id, r.status) for r in rows] == [("a", "ok")]
    missed = [ln for ln in lines if "did not answer" in ln]
    assert len(missed) == 1 and "asking again every 10 s" in missed[0], lines

    answers = iter([None] * 1000)
    monkeypatch.setattr(slurm, "SlurmCLI", Backend)
    assert cli.main(["status", str(tmp_path), "--wait"]) == 1
    out, err = capsys.readouterr()
    assert out.count("did not answer") == 1 and "Slurm has not answered for" in out  # the outage, then a reminder
    assert err.startswith("error: stopped waiting: Slurm did not answer") and err.count("\n") == 1, err


def test_a_running_run_s_step_counts_the_steps_done_of_the_steps_it_takes_in_every_stage(tmp_path):
    """base_train and chat_sft number their step events from 0, and chat_sft's last pass of num_iterations only
    evaluates, while mid_train counts its steps done: at its last step status showed base_train `at step 19 of 20`,
    chat_sft `at step 18 of 20` (19 updates) and mid_train `at step 19 of 19`, so only mid_train reached its end."""
    shown = {}
    for workload, last_event, num_iterations in (("nanochat-base", 19, 20), ("nanochat-sft", 18, 20),
                                                 ("nanochat-mid", 19, 19)):
        run = tmp_path / workload
        contract.update_run_json(run, status="running", workload=workload, num_iterations=num_iterations)
        events = [{"event": "step", "step": s} for s in range(last_event + 1)]
        (run / contract.METRICS_JSONL).write_text("".join(json.dumps(e) + "\n" for e in events))
        shown[workload] = _derive(run, JobState("3", "RUNNING"))[1]
    assert shown == {"nanochat-base": "at step 20 of 20", "nanochat-sft": "at step 19 of 19",
                     "nanochat-mid": "at step 19 of 19"}


def test_a_running_runs_half_written_last_line_leaves_its_last_whole_step(tmp_path):
    """status reads a running run's metrics.jsonl while the trainer appends to it: a last line cut mid-JSON is
    skipped for the step before it, but one cut inside deep nesting ('[[[...' from a damaged or foreign writer) made
    json's parser recurse too deep, and the whole command ended in a RecursionError traceback."""
    contract.update_run_json(tmp_path, status="running", num_iterations=10)
    whole = json.dumps({"event": "step", "step": 4}) + "\n"
    for half in (json.dumps({"event": "step", "step": 5})[:-3], "[" * 50_000):
        (tmp_path / contract.METRICS_JSONL).write_text(whole + half)
        assert _derive(tmp_path, JobState("6", "RUNNING")) == ("running", f"{status.AT_STEP}4 of 10")


def test_a_slurm_outage_is_said_once_with_a_reminder_every_few_minutes_not_at_every_poll(tmp_path, monkeypatch):
    """With --poll 1 and a slurmctld that refuses at once, `status --wait` printed one 'did not answer' line a poll,
    hundreds of them over the ten minutes before it gave up; the outage is said when it starts, recalled every few
    minutes, and its end is said in one line."""
    from bench.launch import slurm

    contract.update_run_json(tmp_path / "a", status="running")
    write_sweep(tmp_path, {"jobs": [{"name": "a", "job_id": "10", "runs": ["a"]}]})
    clock = [0.0]
    monkeypatch.setattr(status.time, "time", lambda: clock[0])
    monkeypatch.setattr(status.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    back_at = [450.0]  # slurmctld answers again from this second on

    class Backend:
        def states(self, job_ids):
            if clock[0] < back_at[0]:
                raise slurm.SlurmDidNotAnswer("squeue: 'Unable to contact slurm controller (connect failure)'")
            contract.record_evidence(tmp_path / "a", contract.Evidence(source="trainer", kind="completed", rank=0))
            return {j: JobState(j, "COMPLETED") for j in job_ids}

    lines = []
    assert [r.status for r in wait(tmp_path, Backend(), poll_s=1, out=lines.append)] == ["ok"]
    assert len(lines) == 4, lines
    assert "Slurm did not answer (squeue: 'Unable to contact" in lines[0] and "asking again every 1 s" in lines[0]
    assert "Slurm has not answered for 300 s (301 polls in a row)" in lines[1]
    assert "Slurm answers again, after 450 s" in lines[2] and lines[3].endswith("1 ok")

    clock[0], back_at[0], lines = 0.0, float("inf"), []
    with pytest.raises(slurm.SlurmDidNotAnswer, match=r"^stopped waiting: Slurm did not answer 601 poll\(s\) in a "
                                                       r"row over 600 s"):
        wait(tmp_path, Backend(), poll_s=1, out=lines.append)
    assert len(lines) == 2 and "has not answered for 300 s" in lines[1], lines


def test_a_running_runs_last_line_longer_than_the_tail_read_leaves_its_last_whole_step(tmp_path):
    """status read the last PROGRESS_TAIL_BYTES of a running run's metrics.jsonl: a last line longer than that (an
    event with a long message) left no whole step line in the tail, and the row's progress was blank."""
    contract.update_run_json(tmp_path, status="running", num_iterations=10)
    steps = "".join(json.dumps({"event": "step", "step": s}) + "\n" for s in range(5))
    long = json.dumps({"event": "error", "rank": 0, "message": "x" * (3 * status.PROGRESS_TAIL_BYTES)}) + "\n"
    (tmp_path / contract.METRICS_JSONL).write_text(steps + long)
    assert _derive(tmp_path, JobState("6", "RUNNING")) == ("running", f"{status.AT_STEP}4 of 10")
