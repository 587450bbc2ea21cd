#!/bin/bash
# nanochat-bench, interactive: golden n2-ce-r1
# Rendered by `nanochat-bench render interactive`. Step by step:
#
#   1. allocate nodes (the shell salloc opens runs on the login node unless the site says otherwise;
#      only srun lands on the compute nodes):
#        salloc --account=a-bench --exclusive --gpus-per-node=4 --nodes=2 --ntasks-per-node=1 --partition=normal --time=00:30:00
#   2. in that shell, paste the blocks below one by one, or run them all:  bash interactive.sh
#      Data and tokenizer live in NANOCHAT_BASE_DIR and are made once; later runs reuse them.
set -euo pipefail
export NANOCHAT_BASE_DIR=/scratch/nb/cache

# -- data: 8 FineWeb-Edu shards (offline alternative: data generate --shards N --docs-per-shard M)
srun --nodes=1 --ntasks=1 --environment=/scratch/nb/sweeps/golden/n2-ce-r1/environment.toml python -m bench.cli data download -n 8

# -- tokenizer: byte-level BPE trained on the shards
srun --nodes=1 --ntasks=1 --environment=/scratch/nb/sweeps/golden/n2-ce-r1/environment.toml python -m bench.cli tokenizer train

# -- train: the same block the batch script runs
# -- rendezvous: torchrun's c10d store listens on the first node, reached by its address ---------------
# (NodeAddr, not the node name: names need not resolve, e.g. several slurmd on one host)
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
first_node=${nodes%%$'\n'*}  # no `| head`: an early-closed pipe is an error under pipefail
rdzv_addr=$(scontrol show node "$first_node" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p')
rdzv_addr=${rdzv_addr:-$first_node}
# CPUs of a node for the one task there (torchrun and its workers): batch jobs and steps set
# SLURM_CPUS_ON_NODE, an salloc shell only SLURM_JOB_CPUS_PER_NODE (e.g. "72(x2)")
cpus_per_node=${SLURM_CPUS_ON_NODE:-${SLURM_JOB_CPUS_PER_NODE%%[(,]*}}

# -- run.json: Slurm facts before srun, the outcome after it (host python3, standard library only) -----
runjson() {
    python3 - "$@" <<'PY'
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
PY
}
job_rc=0


# == run n2-ce-r1: ce on 2 node(s) x 4 rank(s) ==========
run_dir=/scratch/nb/sweeps/golden/n2-ce-r1
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-ce-r1
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=ce
export NANOCHAT_BENCH_IMAGE=/scratch/nb/images/nanochat-bench+latest.sqsh
rdzv_endpoint="${rdzv_addr}:$(( 20000 + SLURM_JOB_ID % 1000 * 10 + 0 ))"
runtime_version=""
runjson start "$run_dir" "$runtime_version"
NANOCHAT_BENCH_T0=$(date +%s.%N)  # launch time: the trainer's start event minus this is the start-up cost
export NANOCHAT_BENCH_T0
rc=0
srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --cpus-per-task="${cpus_per_node}" --environment=/scratch/nb/sweeps/golden/n2-ce-r1/environment.toml \
    python -m torch.distributed.run --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" -m bench.nanochat.train -- --core_metric_every=-1 --device_batch_size=32 --num_iterations=200 --sample_every=-1 \
    2>&1 | tee "$run_dir/train.log" || rc=$?
runjson finish "$run_dir" "$rc"
if [ "$rc" -ne 0 ]; then job_rc=$rc; fi

exit "$job_rc"
