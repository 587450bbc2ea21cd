"""The batch script's own entries in run.json: Slurm facts before srun, the outcome after it.

It runs on the cluster's python3 outside any container, where the package may not be installed, so
`submit`/`render` write this file and bench/schema.py (standard library only) into `<sweep>/.lib/`
once per sweep, and every batch script of the sweep calls that copy:

    python3 <sweep>/.lib/jobrecord.py start  RUN_DIR [RUNTIME_VERSION]
    python3 <sweep>/.lib/jobrecord.py finish RUN_DIR EXIT_CODE

`finish` ends with bench.schema.close_unfinished, the same last word the local launcher has: a run whose
trainer never started or died without a final status is marked failed, so none stays pending.
"""

import os
import sys
import time

if __package__:
    from bench import schema
else:  # the copy beside the jobs: import the schema written next to it, never another installed one
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import schema  # noqa: E402


def start(run_dir: str, runtime_version: str = "") -> None:
    """Called right before srun: its time is the launch time (T0) that start-up is measured from."""
    now = time.time()
    schema.update_run_json(run_dir, slurm=schema.slurm_facts(),
                           launch={"kind": "slurm", "started_at": now, "t0": now,
                                   "runtime_version": runtime_version or None})


def finish(run_dir: str, exit_code: str) -> None:
    code = int(exit_code)
    # Slurm facts again: a trainer inside a container may not see them and record none.
    manifest = schema.update_run_json(run_dir, slurm=schema.slurm_facts(),
                                      launch={"exit_code": code, "finished_at": time.time()})
    tail = log_tail(os.path.join(run_dir, schema.TRAIN_LOG))
    limit = slurm_line(tail, "DUE TO TIME LIMIT")
    lost = slurm_line(tail, "Node failure on") or slurm_line(tail, "DUE TO NODE FAILURE")
    if lost and manifest.status != "ok":
        # a node went away: the ranks elsewhere saw a lost peer or srun's SIGTERM ("cancelled"), its echo
        schema.update_run_json(run_dir, status="failed", finished_at=time.time(),
                               message=f"a node of the job was lost: {lost}")
    elif limit and manifest.status not in ("ok", "timeout"):
        # srun's --time ended the step: the trainer saw only a SIGTERM and may have said "cancelled"
        schema.update_run_json(run_dir, status="timeout", finished_at=time.time(),
                               message=f"the run reached its time limit before finishing: {limit}")
    schema.close_unfinished(run_dir, code, "srun")


def log_tail(log_path: str, size: int = 65536) -> str:
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def slurm_line(tail: str, marker: str) -> str:
    """Slurm's line holding `marker` in the run's log, e.g. `*** STEP … CANCELLED AT … DUE TO TIME LIMIT ***`
    or srun's `error: Node failure on nid001234`; empty if none."""
    return next((line.strip() for line in tail.splitlines() if marker in line), "")


def main(argv) -> int:
    if len(argv) < 2 or argv[0] not in ("start", "finish"):
        print(__doc__, file=sys.stderr)
        return 2
    {"start": start, "finish": finish}[argv[0]](*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
