"""Where a sweep stands: each run's run.json status next to its Slurm job's state.

run.json is the truth once it holds a final status (the trainer or the batch script's last step
wrote it). A job that Slurm ended before the script could finish (cancelled, over its time limit,
node failure) leaves run.json pending or running: the status is then derived from Slurm's state and
written back, so every finished run directory says how it ended.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from bench import schema
from bench.launch.slurm import JobState
from bench.launch.submit import read_sweep

# What a run's status becomes when Slurm ended its job and run.json has no final status.
FROM_SLURM = {"CANCELLED": "cancelled", "TIMEOUT": "timeout", "OUT_OF_MEMORY": "oom", "DEADLINE": "timeout"}
RESUBMITTABLE = ("failed", "timeout", "nccl_timeout", "hung", "cancelled", "oom")


@dataclass(frozen=True)
class RunState:
    run_id: str
    job_id: str | None
    slurm_state: str
    status: str
    message: str = ""

    @property
    def done(self) -> bool:
        return self.status in schema.FINAL_STATUSES


def _derive(run_dir: Path, job: JobState | None) -> tuple[str, str]:
    manifest = schema.read_run_json(run_dir)
    status, message = manifest.get("status", "pending"), manifest.get("message") or ""
    if job is None:
        return status, message
    if job.state in ("TIMEOUT", "DEADLINE") and status == "cancelled":
        # Slurm's time limit sent the SIGTERM the trainer recorded as a cancel: the cause is the limit
        message = f"Slurm job {job.job_id} reached its time limit ({job.state}); {message}"
        schema.update_run_json(run_dir, status="timeout", message=message)
        return "timeout", message
    if status in schema.FINAL_STATUSES:
        return status, message
    if job.terminal or job.state == "UNKNOWN":  # UNKNOWN: a responsive slurmctld forgot it, so it ended
        status = FROM_SLURM.get(job.state, "failed")
        message = (f"Slurm job {job.job_id} ended {job.state} (exit {job.exit_code or '?'}) before the run "
                   f"recorded a final status")
        schema.update_run_json(run_dir, status=status, message=message)
    return status, message


def sweep_status(sweep_dir: Path, backend) -> list[RunState]:
    """One RunState per run of the sweep, from one round of Slurm queries."""
    sweep_dir = Path(sweep_dir).absolute()
    record = read_sweep(sweep_dir)
    job_ids = [j["job_id"] for j in record["jobs"] if j.get("job_id")]
    states = backend.states(job_ids)
    rows = []
    for entry in record["jobs"]:
        job = states.get(entry.get("job_id"))
        for run_id in entry["runs"]:
            status, message = _derive(sweep_dir / run_id, job)
            rows.append(RunState(run_id, entry.get("job_id"), job.state if job else "-", status, message))
    return rows


def format_status(rows: list[RunState]) -> str:
    table = [(r.run_id, r.job_id or "-", r.slurm_state, r.status, r.message) for r in rows]
    lines = tabulate(table, headers=("run", "job", "slurm", "status", "message"), tablefmt="plain").splitlines()
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines.append("")
    lines.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def wait(sweep_dir: Path, backend, poll_s: float = 10.0, timeout_s: float | None = None,
         out: Callable[[str], None] = print) -> list[RunState]:
    """Poll until every run has a final status (or the timeout passes); return the last states."""
    deadline = None if timeout_s is None else time.time() + timeout_s
    last = ""
    while True:
        rows = sweep_status(sweep_dir, backend)
        summary = format_status(rows).splitlines()[-1]
        if summary != last:
            out(f"[{time.strftime('%H:%M:%S')}] {summary}")
            last = summary
        if all(r.done for r in rows) or (deadline is not None and time.time() > deadline):
            return rows
        time.sleep(poll_s)
