"""The batch script's own entries in run.json: Slurm facts before srun, the outcome after it.

This file is pasted into every rendered script (a `python3 -` here-document) and runs with the host's
python3, outside any container, where the package may not be installed: so it uses the standard
library only. It merges like bench.schema.update_run_json (nested dicts one level deep, atomic rename).
If the trainer never started (a runtime or image failure) or died before writing a final status,
`finish` marks the run failed with the exit code and the last line of its log, so no run directory is
left "pending" forever. FINAL_STATUSES must equal bench.schema.FINAL_STATUSES (a test checks it).

    python3 jobrecord.py start  RUN_DIR [RUNTIME_VERSION]
    python3 jobrecord.py finish RUN_DIR EXIT_CODE
"""

import json
import os
import sys
import tempfile
import time

FINAL_STATUSES = ("ok", "failed", "timeout", "oom", "nccl_timeout", "no_data", "cancelled")
SLURM_ENV = {"job_id": "SLURM_JOB_ID", "nodelist": "SLURM_JOB_NODELIST", "partition": "SLURM_JOB_PARTITION",
             "num_nodes": "SLURM_JOB_NUM_NODES", "job_name": "SLURM_JOB_NAME", "cluster": "SLURM_CLUSTER_NAME"}
LOG_NAME = "train.log"


def merge(run_dir, fields):
    path = os.path.join(run_dir, "run.json")
    data = {}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    data.setdefault("schema_version", 1)
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    data["updated_at"] = time.time()
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=".run.json.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
    os.replace(tmp, path)
    return data


def last_line(path, limit=300):
    """The last non-empty line of a log, shortened: usually the error that ended the run."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:limit] if lines else ""


def slurm_facts():
    return {key: os.environ[var] for key, var in SLURM_ENV.items() if var in os.environ}


def start(run_dir, runtime_version=""):
    fields = {"slurm": slurm_facts(), "launcher": {"started_at": time.time()}}
    if runtime_version:
        fields["runtime_version"] = runtime_version
    return merge(run_dir, fields)


def finish(run_dir, exit_code):
    code = int(exit_code)
    launcher = {"exit_code": code, "finished_at": time.time()}
    if os.environ.get("NANOCHAT_BENCH_T0"):
        launcher["t0"] = float(os.environ["NANOCHAT_BENCH_T0"])
    # Slurm facts again: a trainer inside a container may not see them and record none.
    fields = {"launcher": launcher, "slurm": slurm_facts()}
    status = merge(run_dir, {}).get("status")
    if status not in FINAL_STATUSES:
        what = "never started" if status in (None, "pending") else "ended without a final status"
        tail = last_line(os.path.join(run_dir, LOG_NAME))
        fields["status"] = "failed"
        fields["message"] = f"the trainer {what} (srun exit code {code})" + (f": {tail}" if tail else "")
    return merge(run_dir, fields)


def main(argv):
    if len(argv) < 2 or argv[0] not in ("start", "finish"):
        print(__doc__, file=sys.stderr)
        return 2
    {"start": start, "finish": finish}[argv[0]](*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
