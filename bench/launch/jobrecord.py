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
    schema.update_run_json(run_dir, slurm=schema.slurm_facts(),
                           launch={"kind": "slurm", "started_at": time.time(),
                                   "runtime_version": runtime_version or None})


def finish(run_dir: str, exit_code: str) -> None:
    code = int(exit_code)
    t0 = os.environ.get(schema.ENV_T0)
    # Slurm facts again: a trainer inside a container may not see them and record none.
    schema.update_run_json(run_dir, slurm=schema.slurm_facts(),
                           launch={"exit_code": code, "finished_at": time.time(), "t0": float(t0) if t0 else None})
    schema.close_unfinished(run_dir, code, "srun")


def main(argv) -> int:
    if len(argv) < 2 or argv[0] not in ("start", "finish"):
        print(__doc__, file=sys.stderr)
        return 2
    {"start": start, "finish": finish}[argv[0]](*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
