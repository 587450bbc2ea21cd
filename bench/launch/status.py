"""Where a sweep stands: each run's run.json status next to its Slurm job's state.

run.json is the truth once it holds a final status (settled from what the trainer, torchrun and the
batch script recorded). A job that Slurm ended before the script could finish (cancelled, over its time
limit, node failure) leaves run.json pending or running: Slurm's state is then recorded as evidence and
the status settled from it (bench/contract/outcome.py), so every finished run directory says how it ended.
"""

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tabulate import tabulate

from bench import contract, workloads
from bench.errors import run_dir_error
from bench.launch.slurm import JobState, SlurmDidNotAnswer
from bench.launch.submit import read_sweep

# What Slurm's end of a job is evidence of, when run.json has no final status (a state not here: a plain exit).
# BOOT_FAIL: a node of the job could not be started; PREEMPTED: Slurm stopped the job for another one.
FROM_SLURM = {"CANCELLED": "stopped", "PREEMPTED": "stopped", "TIMEOUT": "time_limit", "DEADLINE": "time_limit",
              "OUT_OF_MEMORY": "oom", "NODE_FAIL": "node_lost", "BOOT_FAIL": "node_lost"}
# What a run stopped by a signal (scancel, the job's time limit) records: the batch script's or a launcher's stop,
# a rank's SIGTERM (an older release's run.json: its status cancelled, without evidence)
STOPPED = {"stopped", "cancelled"}
# no_data too: data staged after the failure (a flow's eval bundle, its chat data) is a reason to run it again
PROGRESS_TAIL_BYTES = 64 * 1024  # of metrics.jsonl, read for a running run's last step
# a tail holding no whole step line (a last event longer than it) is read again four times as long, up to this
PROGRESS_SCAN_BYTES = 4 * 1024 * 1024
# --wait repeats an unchanged line this often, with the running runs' steps, and recalls a Slurm that still does not
# answer (a note at every poll was hundreds of lines at --poll 1 before it gave up)
PROGRESS_EVERY_S = 300.0
MIN_POLL_S = 1.0  # --wait's shortest --poll: each poll queries slurmctld, which every user of the machine shares
# --wait outlasts a slurmctld that restarts or fails over (SlurmctldTimeout, 120 s by default): it gives up only after
# this many polls in a row that Slurm did not answer, over at least this many seconds since its last answer
MISSED_POLLS_MAX = 5
SILENCE_MAX_S = 600.0
QUEUED = "held by Slurm: "  # a pending job's message, followed by its reason
# Pending reasons Slurm never clears by itself (squeue(1), JOB REASON CODES): a job held for one never starts, so
# `status --wait` stops when every run it waits for is held so, instead of waiting for ever
NEVER_STARTS = frozenset({"AssocMaxWallDurationPerJobLimit", "BadConstraints", "DependencyNeverSatisfied",
                          "InvalidAccount", "InvalidQOS", "PartitionTimeLimit", "QOSMaxWallDurationPerJobLimit"})
AT_STEP = "at step "  # a running run's message, followed by its last step
RESUBMITTABLE = ("failed", "timeout", "nccl_timeout", "hung", "cancelled", "oom", "no_data")
NOT_SUBMITTED = "not submitted: sweep.json holds no Slurm job for it (submit stopped before sbatch took it)"
# A run whose run.json cannot be read: shown, never rewritten or resubmitted (its plan is in that file)
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class RunState:
    run_id: str
    job_id: str | None
    slurm_state: str
    status: str
    message: str = ""
    job_active: bool = False  # its Slurm job is still pending or running (its script may still be writing)

    @property
    def done(self) -> bool:
        return self.status in contract.FINAL_STATUSES or self.status == UNREADABLE

    @property
    def unsubmitted(self) -> bool:
        """No job id and no final status: submit stopped before sbatch took its job, so no job will ever end it."""
        return not self.job_id and not self.done

    @property
    def settled(self) -> bool:
        """Final and its job ended, or never submitted: nothing will write its run directory (safe to resubmit)."""
        return (self.done and not self.job_active) or self.unsubmitted

    @property
    def resubmittable(self) -> bool:
        return self.status in RESUBMITTABLE or self.unsubmitted


def _progress(run_dir: Path, manifest: dict) -> str:
    """`at step N of M`: the steps done by the last step line of a running run's metrics.jsonl (its tail, up to
    PROGRESS_SCAN_BYTES) of the steps it takes, else ''. A workload given no --num_iterations that trains until its
    data ends (mid_train) learns the count only there: `at step N (until data ends)`."""
    steps, config = manifest.get("num_iterations"), manifest.get("config")
    flag = config.get("num_iterations") if isinstance(config, dict) else None
    workload = workloads.by_run_workload(manifest.get("workload"))
    # steps done of the steps to take; a workload this release does not know is shown as its events number them
    first, idle = (workload.first_step_event, workload.passes_without_step) if workload else (1, 0)
    if type(steps) is int and steps > idle:
        of = f" of {steps - idle}"
    elif getattr(workload, "until_data_ends", False) and type(flag) is int and flag <= 0:
        of = " (until data ends)"
    else:
        of = ""
    path, size = run_dir / contract.METRICS_JSONL, PROGRESS_TAIL_BYTES
    while True:
        for line in reversed(contract.log_tail(path, size).splitlines()):
            try:
                event = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: a line nested too deep for json's parser
                continue  # the first line of the tail is usually cut, the last may be half written
            if isinstance(event, dict) and event.get("event") == "step" and isinstance(event.get("step"), int):
                return f"{AT_STEP}{event['step'] + 1 - first}{of}"
        try:
            whole = path.stat().st_size <= size
        except OSError:
            whole = True
        if whole or size >= PROGRESS_SCAN_BYTES:
            return ""
        size *= 4


def _read(run_dir: Path) -> tuple[dict, str]:
    """run.json as plain data, or {} and why it cannot be read (empty, cut, not JSON, not a file)."""
    try:
        return contract.read_run_json(run_dir), ""
    except contract.RunJsonError as e:
        return {}, f"run.json {e.reason}; it is left as it is"
    except OSError as e:
        return {}, f"run.json cannot be read: {e.strerror or e}; it is left as it is"


def _evidence(manifest: dict) -> list[dict]:
    """run.json's evidence entries (a list, as read_run_json lets through), those that are objects."""
    return [e for e in manifest.get("evidence") or [] if isinstance(e, dict)]


def _cut_by_the_job(manifest: dict, status: str) -> bool:
    """A run that ended other than ok while the job's end (a time limit, a lost node) could have cut it: the batch
    script never recorded its end (bench/launch/jobrecord.py finish; gone with its node), or received Slurm's SIGTERM
    while it went on. An earlier run of the job that the batch script saw end on its own was not cut."""
    if status not in contract.FINAL_STATUSES or status == "ok":
        return False
    launch = manifest.get("launch")
    finished = isinstance(launch, dict) and launch.get("finished_at") is not None
    return not finished or any(e.get("source") == "batch_script" and e.get("kind") == "stopped"
                               for e in _evidence(manifest))


def _sigkill(manifest: dict) -> dict | None:
    """torchrun's word on the first rank killed by SIGKILL that it did not stop itself, if any."""
    return next((e for e in _evidence(manifest) if e.get("kind") == "rank_killed" and e.get("signal") == "SIGKILL"),
                None)


def _derive(run_dir: Path, job: JobState | None) -> tuple[str, str]:
    """The run's status and message; what Slurm says of an ended job is recorded as evidence first, once.
    A run.json that cannot be read is left as it is, for its owner to look at."""
    manifest, unread = _read(run_dir)
    if unread:
        return UNREADABLE, unread
    status, message = manifest.get("status", "pending"), manifest.get("message") or ""
    if status == "running" and not message:
        message = _progress(run_dir, manifest)
    if job is None:
        return status, message
    seen = {e.get("kind") for e in _evidence(manifest)}
    cut = _cut_by_the_job(manifest, status)
    if job.state in ("TIMEOUT", "DEADLINE") and cut and (seen & STOPPED or not seen and status == "cancelled") \
            and not seen & {"time_limit", "not_run"}:
        # Slurm's time limit sent the SIGTERM the ranks may have recorded as a cancel: the cause is the limit (a
        # flow's stage that never started was not cut by it: it stays not run; nor was a run of the job that ended
        # before it, diverged or failed on its own, with no stop seen, or with the cancels of the ranks torchrun
        # stopped after one failed, which the batch script saw end without a stop)
        evidence = contract.Evidence(source="status", kind="time_limit",
                                   message=f"Slurm job {job.job_id} reached its time limit ({job.state}); {message}")
    elif FROM_SLURM.get(job.state) == "node_lost" and cut and not seen & {"node_lost", "not_run"}:
        # the ranks that survived the node recorded its echo (peer_lost, an error); the cause outranks them. A run
        # the batch script saw end on its own (an earlier one of the job), with no stop, was not cut by the loss.
        evidence = contract.Evidence(source="status", kind="node_lost",
                                   message=f"Slurm job {job.job_id} lost a node ({job.state}); {message}")
    elif job.state == "OUT_OF_MEMORY" and "oom" not in seen and (kill := _sigkill(manifest)):
        # the cgroup's OOM kill Slurm counted is the SIGKILL torchrun saw, which the rank could not say itself; its
        # echoes (the peers that lost it, timed out) settled the run below it
        evidence = contract.Evidence(source="status", kind="oom", rank=kill.get("rank"), node=kill.get("node"),
                                   signal="SIGKILL", message=f"Slurm job {job.job_id} ran out of memory ({job.state}): "
                                                             f"{kill.get('message') or message}")
    elif status not in contract.FINAL_STATUSES and (job.terminal or job.state == "UNKNOWN"):
        # UNKNOWN: a responsive slurmctld forgot the job, so it ended
        evidence = contract.Evidence(source="status", kind=FROM_SLURM.get(job.state, "exit"),
                                   message=f"Slurm job {job.job_id} ended {job.state} (exit {job.exit_code or '?'}) "
                                           f"before the run recorded a final status")
    else:
        if job.state == "PENDING" and status == "pending" and not message and job.reason not in ("", "None"):
            # why Slurm holds it: a job it can never start (PartitionNodeLimit, ...) would otherwise look queued
            message = f"{QUEUED}{job.reason}"
        return status, message
    try:
        settled = contract.record_evidence(run_dir, evidence)
    except (contract.SchemaError, OSError) as e:
        # a newer major's run.json (not this release's to rewrite), a sweep this user may read but not write: shown as
        # it would be settled, or a wait never ends
        why = run_dir_error(run_dir, e) if isinstance(e, OSError) else e
        settled_status, settled_message = contract.settle([*_evidence(manifest), evidence])
        # the entry that wins may be an earlier one that has no message
        return settled_status, f"{settled_message} (not recorded: {why})" if settled_message else f"not recorded: {why}"
    return settled.status, settled.message or ""


def sweep_status(sweep_dir: Path, backend) -> list[RunState]:
    """One RunState per run of the sweep, from one round of Slurm queries."""
    return _poll(sweep_dir, backend, {})[0]


def _poll(sweep_dir: Path, backend, known: dict[str, JobState]) -> tuple[list[RunState], dict[str, JobState]]:
    """sweep_status's rows and the states of the sweep's jobs they were derived from; `known`: the last states of
    jobs whose runs have all settled (settled_jobs), taken as they are instead of asking Slurm again."""
    sweep_dir = Path(sweep_dir).absolute()
    record = read_sweep(sweep_dir)
    job_ids = [j["job_id"] for j in record["jobs"] if j.get("job_id")]
    ask = [j for j in job_ids if j not in known]
    states = {**{j: known[j] for j in job_ids if j in known}, **(backend.states(ask) if ask else {})}
    rows = []
    for entry in record["jobs"]:
        job = states.get(entry.get("job_id"))
        for run_id in entry["runs"]:
            status, message = _derive(sweep_dir / run_id, job)
            active = job is not None and not job.terminal and job.state != "UNKNOWN"
            state = RunState(run_id, entry.get("job_id"), job.state if job else "-", status, message, active)
            rows.append(replace(state, message=NOT_SUBMITTED) if state.unsubmitted and not message else state)
    return rows, states


def settled_jobs(rows: list[RunState], states: dict[str, JobState]) -> dict[str, JobState]:
    """The states of the jobs every run of which has settled: nothing will change them, so a wait asks no more."""
    open_jobs = {r.job_id for r in rows if not r.settled}
    return {j: state for j, state in states.items() if j not in open_jobs}


def format_status(rows: list[RunState]) -> str:
    table = [(r.run_id, r.job_id or "-", r.slurm_state, r.status, r.message) for r in rows]
    lines = tabulate(table, headers=("run", "job", "slurm", "status", "message"), tablefmt="plain").splitlines()
    counts = Counter(r.status for r in rows)
    lines += ["", ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
    return "\n".join(lines)


def never_start(rows: list[RunState]) -> list[RunState]:
    """The runs not settled, where Slurm holds every one of them for a reason it never clears (NEVER_STARTS);
    else none."""
    waiting = [r for r in rows if not r.settled]
    stuck = [r for r in waiting if r.message.startswith(QUEUED) and r.message.removeprefix(QUEUED) in NEVER_STARTS]
    return stuck if waiting and len(stuck) == len(waiting) else []


def wait(sweep_dir: Path, backend, poll_s: float = 10.0, timeout_s: float | None = None,
         out: Callable[[str], None] = print) -> list[RunState]:
    """Poll until every run has a final status, or every other one's job can never start (never_start), or the
    timeout passes; return the last states. Polls Slurm does not answer are asked again at the next: the outage is
    said when it starts, every PROGRESS_EVERY_S while it lasts and when it ends; after MISSED_POLLS_MAX such polls in a
    row over SILENCE_MAX_S, or past the timeout, SlurmDidNotAnswer."""
    deadline = None if timeout_s is None else time.time() + timeout_s
    last, printed = "", 0.0
    known: dict[str, JobState] = {}
    missed, answered, said = 0, time.time(), 0.0
    while True:
        try:
            # a sweep of hundreds of ended runs and one running asks slurmctld, which every user shares, of that one
            rows, states = _poll(sweep_dir, backend, known)
        except SlurmDidNotAnswer as e:
            missed, now, why = missed + 1, time.time(), str(e).removeprefix("Slurm did not answer: ")
            timed_out = deadline is not None and now > deadline
            if timed_out or (missed >= MISSED_POLLS_MAX and now - answered >= SILENCE_MAX_S):
                raise SlurmDidNotAnswer(
                    f"stopped waiting: Slurm did not answer {missed} poll(s) in a row over {now - answered:.0f} s"
                    f"{' (--timeout passed)' if timed_out else ''}: {why}; run nanochat-bench status {sweep_dir} "
                    f"--wait again once slurmctld answers") from None
            if missed == 1:
                out(f"[{time.strftime('%H:%M:%S')}] Slurm did not answer ({why}); asking again every {poll_s:g} s")
                said = now
            elif now - said >= PROGRESS_EVERY_S:
                out(f"[{time.strftime('%H:%M:%S')}] Slurm has not answered for {now - answered:.0f} s ({missed} polls "
                    f"in a row): {why}")
                said = now
            time.sleep(poll_s)
            continue
        if missed:
            out(f"[{time.strftime('%H:%M:%S')}] Slurm answers again, after {time.time() - answered:.0f} s and "
                f"{missed} unanswered poll(s)")
        missed, answered = 0, time.time()
        known = settled_jobs(rows, states)
        summary = format_status(rows).splitlines()[-1]
        held = Counter(r.message.removeprefix(QUEUED) for r in rows if r.message.startswith(QUEUED))
        if held:  # a wait on a job Slurm never starts says why, instead of printing nothing until --timeout
            summary += "; held by Slurm: " + ", ".join(f"{n} {why}" for why, n in sorted(held.items()))
        if summary != last or time.time() - printed >= PROGRESS_EVERY_S:
            # a long run changes no count for hours: its steps say that the wait is alive and how far it is
            steps = [f"{r.run_id} {r.message}" for r in rows
                     if r.status == "running" and r.message.startswith(AT_STEP)]
            out(f"[{time.strftime('%H:%M:%S')}] {summary}" + (f" ({', '.join(steps)})" if steps else ""))
            last, printed = summary, time.time()
        if all(r.settled for r in rows) or never_start(rows) or (deadline is not None and time.time() > deadline):
            return rows
        time.sleep(poll_s)
