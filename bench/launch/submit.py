"""Submit a sweep: every job's script rendered into the sweep directory, then `sbatch --parsable`.

    <sweep_dir>/sweep.json                 the plan and, per job, its script, runs and Slurm job ids
    <sweep_dir>/dry-run.json               instead, after --dry-run: that record, nothing submitted, and the command
                                           that submits it
    <sweep_dir>/<run_id>/job.sbatch        one job per point (its Slurm log beside it)
    <sweep_dir>/jobs/compare-n<N>/job.sbatch   with --compare: every runtime in turn in one allocation

Everything is built and checked before anything is written or submitted, so a bad image or flag
leaves no half-submitted sweep. sweep.json is rewritten (atomically) after each submission.
"""

import contextlib
import json
import shlex
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench import contract
from bench.errors import ConfigError, SubmitError
from bench.launch.job import LIB_DIR, Job, LaunchOptions, assemble, write_job
from bench.launch.plan import Sweep
from bench.launch.render import render_sbatch

SWEEP_JSON = "sweep.json"
NCCL_DIR = "nccl"  # a run's NCCL lines, nccl/rank<N>.log (bench/nanochat/stagerun.py): a new attempt's overwrite them
DRY_RUN_JSON = "dry-run.json"  # what a dry run wrote, so `status` can say so and how to submit it
# run.json fields that submit writes (the plan's decisions), kept when a run is submitted again.
PLANNED_FIELDS = ("run_id", "sweep_id", "workload", "runtime", "image", "nodes", "gpus_per_node", "world_size",
                  "repeat", "config", "grad_accum", "scaling", "val_files_k", "ofi_hook", "site", "stage")


def read_sweep(sweep_dir: Path) -> dict:
    path = Path(sweep_dir) / SWEEP_JSON
    if Path(sweep_dir).is_file():  # the sweep's record itself, or another file: else named as "<it>/sweep.json"
        held = f" ({Path(sweep_dir).parent} holds this one)" if Path(sweep_dir).name == SWEEP_JSON else ""
        raise ConfigError(f"{sweep_dir}: a file, not a sweep directory; give the directory that holds {SWEEP_JSON}"
                          + held)
    if not path.is_file() and (dry := dry_run_command(sweep_dir)):
        raise ConfigError(f"{path} does not exist: {sweep_dir} holds the jobs of `submit --dry-run`, and nothing was "
                          f"submitted; submit them with: {dry}")
    if not path.is_file() and (Path(sweep_dir) / LIB_DIR).is_dir():  # the jobs written, the sweep never recorded
        raise ConfigError(f"{path} does not exist: {sweep_dir} holds job scripts that `submit --dry-run` or `render` "
                          "wrote, which submit nothing; `nanochat-bench submit` (no --dry-run) makes a sweep to follow")
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: not a sweep directory made by `nanochat-bench submit`")
    not_ours = f"{path} is not a sweep record written by `nanochat-bench submit`"
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{not_ours}: {e}") from None
    jobs = record.get("jobs") if isinstance(record, dict) else None
    if not isinstance(jobs, list) or not all(isinstance(j, dict) and isinstance(j.get("runs"), list) for j in jobs):
        raise ConfigError(f"{not_ours}: it lacks its list of jobs and their runs")
    for run_id in (r for j in jobs for r in j["runs"]):
        # status writes into each run's directory: one outside the sweep is never a run of it
        if not isinstance(run_id, str) or not run_id or Path(run_id).is_absolute() or ".." in Path(run_id).parts:
            raise ConfigError(f"{not_ours}: run {run_id!r} is not a directory inside the sweep")
    return record


def dry_run_command(sweep_dir: Path) -> str | None:
    """How to submit a dry run's directory: the command it records (its own without --dry-run), else in words;
    None where no dry run wrote the directory."""
    try:
        command = json.loads((Path(sweep_dir) / DRY_RUN_JSON).read_text()).get("command")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    if isinstance(command, str) and command:
        return command
    return f"the same `nanochat-bench submit` without --dry-run, with --out {shlex.quote(str(sweep_dir))}"


def write_sweep(sweep_dir: Path, record: dict) -> None:
    contract.write_json_atomic(Path(sweep_dir) / SWEEP_JSON, record)


@contextlib.contextmanager
def recorded_before_stop():
    """Ctrl-C and SIGTERM held back (sbatch inherits the block, so it ends its submission) until the block ends: a
    job Slurm took is in sweep.json before the command stops, never left for a resubmission to submit twice. The
    wait is sbatch's, at most slurm._run's timeout."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = (signal.SIGINT, signal.SIGTERM)
    caught: list[int] = []
    # the handlers catch what another thread of this process took; the mask is what sbatch inherits
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum)) for sig in stopping}
    held = signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # one that came meanwhile reaches the handlers now
        for sig, handler in previous.items():  # None: one set outside Python, which Python cannot set back
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if caught:
            signal.raise_signal(caught[0])  # as it would have been handled: KeyboardInterrupt, or the end


def submit_sweep(sweep: Sweep, opts: LaunchOptions, sweep_dir: Path, backend, *, compare: bool = False,
                 dry_run: bool = False, command: str | None = None, out: Callable[[str], None] = print) -> dict:
    """Render, write and submit every job; return the sweep record (also in sweep.json). `command`: the one
    that submits it, which a dry run records."""
    sweep_dir = Path(sweep_dir).absolute()
    refuse_existing(sweep_dir, "runs")
    jobs = assemble(sweep, opts, sweep_dir, compare=compare, note=out)
    texts = [render_sbatch(job) for job in jobs]
    for job, text in zip(jobs, texts):
        write_job(job, text, manifests=not dry_run)
    return submit_written(sweep_dir, jobs, backend, dry_run, out, "runs", command, plan=sweep.describe(),
                          compare=compare)


def refuse_existing(sweep_dir: Path, what: str) -> None:
    """A sweep directory is submitted once; its failed `what` are resubmitted. A dry run (which writes no sweep.json,
    so may render its own directory again) is refused too: it would rewrite the scripts that resubmission sends."""
    if (sweep_dir / SWEEP_JSON).exists():
        raise ConfigError(f"{sweep_dir} already holds a sweep; choose another --out or --name, "
                          f"or resubmit its failed {what} with `nanochat-bench status {sweep_dir} --resubmit-failed`")


def submit_written(sweep_dir: Path, jobs: list[Job], backend, dry_run: bool, out: Callable[[str], None], what: str,
                   command: str | None = None, **fields) -> dict:
    """The sweep's record (`fields`: its plan, how it runs) with the written jobs, submitted in turn, sweep.json
    rewritten after each (a dry run only says what would run, and records in dry-run.json the `command` that
    submits it); `what` names their runs in a refusal (runs, stages)."""
    record = {"schema_version": contract.SCHEMA_VERSION, "sweep_id": sweep_dir.name, "created_at": time.time(),
              **fields, "dry_run": dry_run,
              "jobs": [{"name": job.name, "script": str(job.script), "runs": [r.run_id for r in job.runs],
                        "job_id": None, "previous_job_ids": []} for job in jobs]}
    if dry_run:
        for job in jobs:
            out(f"would run: cd {shlex.quote(str(job.job_dir))} && sbatch --parsable {job.script.name}")
        out(f"dry run: {len(jobs)} script(s) rendered under {sweep_dir}, nothing submitted")
        contract.write_json_atomic(sweep_dir / DRY_RUN_JSON, {**record, "command": command})
        return record
    write_sweep(sweep_dir, record)
    (sweep_dir / DRY_RUN_JSON).unlink(missing_ok=True)  # a dry run's record no longer says what the directory is
    refused = 0
    for job, entry in zip(jobs, record["jobs"]):
        with recorded_before_stop():
            refused += not submit_job(backend, job.script, [run.run_dir for run in job.runs], entry, out)
            write_sweep(sweep_dir, record)
    if refused:
        raise SubmitError(f"sbatch refused {refused} of {len(jobs)} job(s) (their {what} are marked failed); fix the "
                          f"cause and submit them with `nanochat-bench status {sweep_dir} --resubmit-failed`")
    return record


def submit_job(backend, script: Path, run_dirs: list[Path], entry: dict, out: Callable[[str], None],
               exclude: list[str] = ()) -> bool:
    """sbatch one job and record its id in each run; a refusal marks the runs failed (so `status
    --resubmit-failed` takes them) instead of leaving them pending for ever. True when submitted."""
    try:
        entry["job_id"] = backend.submit(script, exclude=list(exclude)) if exclude else backend.submit(script)
    except SubmitError as e:
        entry["job_id"] = None
        for run_dir in run_dirs:
            contract.record_evidence(run_dir, contract.Evidence(source="submit", kind="not_submitted",
                                                            message=f"not submitted: {e}"))
        out(f"not submitted {entry['name']}: {e}")
        return False
    for run_dir in run_dirs:
        contract.update_run_json(run_dir, slurm={"job_id": entry["job_id"]})
    out(f"submitted {entry['name']}: job {entry['job_id']}")
    return True


def resubmit(sweep_dir: Path, run_ids: set[str], backend, out: Callable[[str], None] = print) -> list[str]:
    """Submit again the jobs holding these runs. Only these runs start over (their old attempt's files move
    to attempts/<job id>/); a run of the same job that ended ok is kept, and the script skips it. A run that
    ended `timeout` with a checkpoint continues from it (--resume_from_step). Nodes that the old attempt
    lost are excluded (sbatch --exclude). Each is recorded in the sweep's record. A job sbatch refuses
    raises SubmitError once every job was tried."""
    sweep_dir = Path(sweep_dir).absolute()
    record = read_sweep(sweep_dir)
    refuse_moved(sweep_dir, record)
    new_ids, unread, rerun = [], [], []
    asked = 0
    for entry in record["jobs"]:
        again = [r for r in entry["runs"] if r in run_ids]
        unread += [r for r in again if not planned_record(sweep_dir / r, out)]
        again = [r for r in again if r not in unread]
        if again and (others := rerun_unasked(sweep_dir, entry, again)):
            rerun.append(f"{', '.join(again)}: job {entry['name']} would also run again {others}")
            continue
        if not again:
            continue
        asked += 1
        old = entry.get("job_id")
        lost: set[str] = set()
        for run_id in again:
            lost |= reset_for_resubmission(sweep_dir / run_id, old, out)
        kept = [r for r in entry["runs"] if r not in run_ids]
        if kept:
            out(f"{entry['name']}: kept {', '.join(kept)} (ok already); running again {', '.join(again)}")
        entry["previous_job_ids"] = entry.get("previous_job_ids", []) + ([old] if old else [])
        entry["excluded_nodes"] = sorted(set(entry.get("excluded_nodes", [])) | lost)
        with recorded_before_stop():
            if submit_job(backend, Path(entry["script"]), [sweep_dir / r for r in again], entry, out,
                          exclude=entry["excluded_nodes"]):
                new_ids.append(entry["job_id"])
            write_sweep(sweep_dir, record)
    if len(new_ids) < asked:  # as submit: a refusal must fail the command, not end it with exit 0
        raise SubmitError(f"sbatch refused {asked - len(new_ids)} of {asked} job(s) (their runs are marked failed); "
                          f"fix the cause and run `nanochat-bench status {sweep_dir} --resubmit-failed` again")
    if rerun:
        raise ConfigError(f"not resubmitted: {'; '.join(rerun)}, which its script keeps only when it ended ok (a run "
                          f"that diverged or trained on the wrong network is not resubmitted blindly); submit the "
                          f"failed runs' points as a new sweep")
    if unread:
        raise ConfigError(f"not resubmitted: {', '.join(unread)}, whose run.json is not a run's record this release "
                          f"can start over from (above); it is left as it is: restore it, or move the run directory "
                          f"away and submit its point as a new sweep")
    return new_ids


def refuse_moved(sweep_dir: Path, record: dict) -> None:
    """A job script names the paths of the sweep it was written for (its run directories, the sweep's .lib/): a
    sweep moved or copied since would be resubmitted as the original's jobs, writing there, or not found at all."""
    for entry in record["jobs"]:
        script = Path(entry.get("script") or "")
        if not script.resolve().is_relative_to(sweep_dir.resolve()):
            raise ConfigError(f"{sweep_dir / SWEEP_JSON}: job {entry.get('name')}'s script is {script}, outside "
                              f"{sweep_dir}: the sweep was moved or copied after submit wrote it, and its scripts "
                              "name the paths they were written for; resubmit it where it was written, or submit "
                              "its points again as a new sweep")


def rerun_unasked(sweep_dir: Path, entry: dict, again: list[str]) -> str:
    """The runs of a job, besides `again`, that its script would run again unasked, as "RUN (status)": it skips only
    the runs that ended ok, so any other would start over, its record overwritten; "" when there is none."""
    return ", ".join(f"{r} ({how})" for r in entry["runs"] if r not in again and (how := ended(sweep_dir / r)) != "ok")


def held_back(sweep_dir: Path, run_ids: set[str]) -> dict[str, str]:
    """The runs of `run_ids` that resubmit refuses, each with the job mates their job would run again unasked."""
    sweep_dir = Path(sweep_dir).absolute()
    held = {}
    for entry in read_sweep(sweep_dir)["jobs"]:
        again = [r for r in entry["runs"] if r in run_ids]
        if again and (others := rerun_unasked(sweep_dir, entry, again)):
            held.update({r: others for r in again})
    return held


def ended(run_dir: Path) -> str:
    """A run's status as its job's script reads it to keep the run (`jobrecord kept`), or why it cannot be read."""
    try:
        return str(contract.read_run_json(run_dir).get("status", "pending"))
    except (OSError, ValueError, RecursionError, AttributeError):
        return "run.json unreadable"


def planned_record(run_dir: Path, out: Callable[[str], None]) -> bool:
    """Whether run.json holds a plan to start the run over from (reset_for_resubmission); else says why. A record
    whose fields do not fit the contract (damaged by hand, or a newer major's) is read by status as plain data."""
    try:
        contract.load_manifest(run_dir)
    except (OSError, ValueError, RecursionError) as e:  # ValueError: not JSON, not UTF-8, or a SchemaError
        out(f"{run_dir.name}: run.json cannot be read as a run's record ({e}); it is left as it is")
        return False
    return True


def can_resume(run_workload: str | None) -> bool:
    """Whether the job continues a run of this run.json workload from its checkpoint: only a workload with a resume
    flag has the resume step in its job (bench/launch/job.py); the others start over whatever run.json says. A
    workload this installation does not know is taken at its word, as before."""
    from bench import workloads

    found = workloads.by_run_workload(run_workload)
    return found is None or bool(found.resume_flag)


def reset_for_resubmission(run_dir: Path, old_job: str | None, out: Callable[[str], None]) -> set[str]:
    """Move the attempt's files to attempts/<job>/ and start the run over from what was planned (from its
    checkpoint after a timeout); the nodes the attempt lost, for sbatch --exclude."""
    previous = contract.load_manifest(run_dir)
    keep = run_dir / "attempts" / str(old_job or "unsubmitted")
    keep.mkdir(parents=True, exist_ok=True)
    for name in (contract.METRICS_JSONL, contract.TRAIN_LOG, NCCL_DIR):
        if (run_dir / name).exists():
            (run_dir / name).replace(keep / name)
    contract.write_manifest(keep, previous)
    attempts = [*previous.attempts, contract.Attempt(job_id=old_job, status=previous.status, message=previous.message)]
    # What the plan decided stays; what the attempt observed goes with it into attempts/.
    planned = {k: getattr(previous, k) for k in PLANNED_FIELDS}
    resume = previous.checkpoint.step if previous.status == "timeout" and can_resume(previous.workload) else None
    planned["launch"] = contract.Launch(kind=previous.launch.kind, script=previous.launch.script,
                                        rendered_at=previous.launch.rendered_at, resume_from_step=resume)
    if resume is not None:
        planned["checkpoint"] = previous.checkpoint
        out(f"{previous.run_id}: resumes from its checkpoint of step {resume}")
    elif previous.status == "timeout" and previous.checkpoint.step is not None:
        out(f"{previous.run_id}: starts over (its workload does not resume from a checkpoint; its step "
            f"{previous.checkpoint.step} is passed over)")
    contract.write_manifest(run_dir, contract.RunManifest(**planned, status="pending", attempts=attempts))
    return {e.node for e in previous.evidence if e.kind == "node_lost" and e.node}
