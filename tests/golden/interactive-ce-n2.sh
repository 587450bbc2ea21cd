#!/bin/bash
# nanochat-bench, interactive: golden n2-ce-r1
# Rendered by `nanochat-bench render interactive`. Step by step:
#
#   1. allocate nodes for 71 minutes: the data and tokenizer steps below, as the plan
#      estimates them, then the runs (the shell salloc opens runs on the login node unless the site says
#      otherwise; only srun lands on the compute nodes):
#        salloc --account=a-bench --exclusive --gpus-per-node=4 --nodes=2 --ntasks-per-node=1 --partition=normal --time=01:11:00
#   2. in that shell, paste the blocks below one at a time: nothing here exits your shell, and a step
#      that fails only prints its error. Or run them all, stopping at the first error:  bash interactive.sh
#      Data and tokenizer live in NANOCHAT_BASE_DIR and are made once; later runs reuse them.
# strict only when run as a script; pasted, pipefail alone (it exits nothing): a step's status is srun's,
# not its tee's, which would hide a failed tokenizer or training step
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then set -euo pipefail; else set -o pipefail; fi
export NANOCHAT_BASE_DIR=/scratch/nb/cache
# the plan's validation files K for the steps below that read the shards, not only the runs: a larger one the
# salloc shell takes from the user's shell leaves training no shard of the download, and the tokenizer would stop
export NANOCHAT_VAL_FILES_K=1
# a container runtime refuses to bind a host folder that does not exist, as on a first use
mkdir -p "$NANOCHAT_BASE_DIR"
# CPUs of a node for the one task there (torchrun and its workers, a tokenizer's threads), which every srun
# asks for: Slurm 22.05 to 23.02 gives a step's task one CPU unless srun says -c. The fewest any node of the job
# has, so that no step asks a smaller node for more than it has (the batch host's own SLURM_CPUS_ON_NODE could):
# SLURM_JOB_CPUS_PER_NODE, which batch jobs and salloc shells have, lists them per node (e.g. "72(x2),64": 64)
fewest_node_cpus() {
    local counts count fewest=""
    IFS=, read -ra counts <<< "$1"
    for count in "${counts[@]}"; do
        count=${count%%(*}  # "72(x2)": 72 CPUs on each of 2 nodes
        if [ -z "$fewest" ] || [ "$count" -lt "$fewest" ]; then fewest=$count; fi
    done
    echo "$fewest"
}
cpus_per_node=$(fewest_node_cpus "${SLURM_JOB_CPUS_PER_NODE:-${SLURM_CPUS_ON_NODE:-}}")

# -- data: 8 FineWeb-Edu shards, what the plan needs (offline: data generate --shards N --docs-per-shard M)
env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV srun --nodes=1 --ntasks=1 --cpus-per-task="${cpus_per_node}" --environment=/scratch/nb/sweeps/golden/n2-ce-r1/environment.toml python -m bench.cli data download -n 8

# -- tokenizer: byte-level BPE trained on the shards; one already there is kept (checkpoints were trained with it)
if [ -f "$NANOCHAT_BASE_DIR/tokenizer/tokenizer.pkl" ]; then
    echo "tokenizer: $NANOCHAT_BASE_DIR/tokenizer/tokenizer.pkl exists, kept"
else
    env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV srun --nodes=1 --ntasks=1 --cpus-per-task="${cpus_per_node}" --environment=/scratch/nb/sweeps/golden/n2-ce-r1/environment.toml python -m bench.cli tokenizer train
fi

# -- a shell inside the ce container on one node, to look around (exit to come back):
#   env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV srun --nodes=1 --ntasks=1 --pty --overlap --cpus-per-task="${cpus_per_node}" --environment=/scratch/nb/sweeps/golden/n2-ce-r1/environment.toml bash

# -- train: the same block the batch script runs
# -- the host's Python for this script's bookkeeping (run.json, the rendezvous port): checked first, so a
#    node without a usable one fails the job in its first second, saying what it needs
bench_python=/opt/nanochat-bench/venv/bin/python
command -v "$bench_python" >/dev/null || bench_python=python3
if ! "$bench_python" -c 'import sys; sys.exit(sys.version_info < (3, 8))' 2>/dev/null; then
    echo "nanochat-bench: the job's bookkeeping needs Python >= 3.8 on this node; found $("$bench_python" --version 2>&1) ($bench_python); load a Python module before sbatch, or render with --python PATH" >&2
    if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then exit 1; fi  # pasted, the salloc shell stays
fi

# -- rendezvous: torchrun's c10d store listens on the first node, reached by its address ---------------
# (NodeAddr, not the node name: names need not resolve, e.g. several slurmd on one host)
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
first_node=${nodes%%$'\n'*}  # no `| head`: an early-closed pipe is an error under pipefail
# a slurmctld too busy to answer (a timeout at scale) must not end the job: the node's name is the fallback
rdzv_addr=$(scontrol show node "$first_node" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p') || rdzv_addr=""
rdzv_addr=${rdzv_addr:-$first_node}
# a batch script runs on the first node (sbatch(1)); an salloc shell may be on a login node
on_first_node() {
    if [ "${SLURMD_NODENAME:-}" = "$first_node" ]; then "$@"; else srun --nodes=1 --ntasks=1 --nodelist="$first_node" "$@"; fi
}
ulimit -c 0  # a crashing rank must not fill the filesystem with core files

# -- run.json: Slurm facts before srun, the outcome after it, by the sweep's own copy of the run
#    contract (/scratch/nb/sweeps/golden/.lib/jobrecord.py and contract/, standard library only), outside any container
runjson() { "$bench_python" /scratch/nb/sweeps/golden/.lib/jobrecord.py "$@"; }
# A run's log, by a tee that outlives the SIGTERM Slurm sends every process of the batch step, and a guide's
# Ctrl-C (SIGINT, to the step's processes): srun's last lines (slurmstepd's `CANCELLED ... DUE TO TIME LIMIT`,
# `Node failure on`), which say how the run ended, reach it. It ends when srun's output closes.
run_log() { (trap '' TERM INT; exec tee "$@"); }
# Ctrl-C ends a guide's step, not the block around it, which records the step as stopped (`stopping`): run as a
# script, by the trap ctrl_c_trap sets before the step; pasted, the salloc shell's job control sends Ctrl-C to the
# step alone and runs no trap, and the step's status, 130, says it (stopped_by_ctrl_c STATUS, after the step). A
# Ctrl-C that stopped an earlier step of a pasted guide is that step's; one srun took as a request for its status
# (the step went on and ended 0) stopped nothing.
ctrl_c_trap() { if [ "$stopping" = SIGINT ]; then stopping=""; fi; trap 'stopping=SIGINT' INT; }
stopped_by_ctrl_c() {
    if [ "$1" -eq 0 ] && [ "$stopping" = SIGINT ]; then stopping=""; fi
    if [ "$1" -eq 130 ] && [ -z "$stopping" ]; then stopping=SIGINT; fi
}
job_rc=0
# scancel, a lost node or the job's time limit send this script SIGTERM as well (SIGKILL follows after
# Slurm's KillWait): the running step ends, its outcome is recorded (cancelled, unless the run said more), and no
# further run starts
stopping=""
trap 'stopping=SIGTERM' TERM


# == run n2-ce-r1: ce on 2 node(s) x 4 rank(s), 20 min ==========
run_dir=/scratch/nb/sweeps/golden/n2-ce-r1
if runjson kept "$run_dir"; then  # a resubmitted job: a run that ended ok in an earlier attempt is kept
    echo "run n2-ce-r1: ok in an earlier attempt of this job, kept"
else
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-ce-r1
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=ce
export NANOCHAT_BENCH_IMAGE=/scratch/nb/images/nanochat-bench+latest.sqsh
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=INIT,NET
export CUDA_CACHE_DISABLE=1
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export MPICH_GPU_SUPPORT_ENABLED=0
export NANOCHAT_VAL_FILES_K=1
rc=0
# the job's port for this run, or the next free one: a port taken on the first node would leave every
# rank waiting for the store until the join timeout
rdzv_port=$(on_first_node "$bench_python" /scratch/nb/sweeps/golden/.lib/rdzvport.py "$(( 20000 + SLURM_JOB_ID % 100 * 100 + 0 ))" "$first_node") || rc=$?
rdzv_endpoint="${rdzv_addr}:${rdzv_port}"
runtime_version=$(sh -c $'v=$(enroot version) && echo "enroot $v"' 2>/dev/null | head -n 1 || true)
runjson start "$run_dir" "$runtime_version"  # also the launch time (T0) the start-up is measured from
if [ "$rc" -ne 0 ]; then echo "$rdzv_port" | tee "$run_dir/train.log"; fi  # the checker's one line: the run's message
if [ "$rc" -eq 0 ]; then runjson image "$run_dir" --file /scratch/nb/images/nanochat-bench+latest.sqsh; fi  # the image's digest or id
# the trainer stops, checkpoints and ends as `timeout` this long before srun's limit would kill it
run_deadline=$(( $(date +%s) + 1080 ))
resume_step=$(runjson resume-step "$run_dir")  # a resubmitted timeout continues from its checkpoint
ctrl_c_trap  # Ctrl-C ends the step; run.json is still finished, as stopped
if [ "$rc" -eq 0 ]; then
env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV srun -l -u --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --time=20 --cpus-per-task="${cpus_per_node}" --environment=/scratch/nb/sweeps/golden/n2-ce-r1/environment.toml \
    python -m bench.launch.elastic --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_conf=join_timeout=900 --numa-binding=node -m bench.nanochat.train -- --core_metric_every=-1 --device_batch_size=32 --num_iterations=200 --sample_every=-1 --total_batch_size=524288 --deadline="${run_deadline}" ${resume_step:+--resume_from_step="${resume_step}"} \
    2>&1 | run_log "$run_dir/train.log" || rc=$?
fi
stopped_by_ctrl_c "$rc"
runjson finish "$run_dir" "$rc" "$stopping"
trap - INT  # the salloc shell's own Ctrl-C again
if [ "$rc" -ne 0 ]; then job_rc=$rc; fi
if [ -n "$stopping" ] && [[ "${BASH_SOURCE[0]}" == "$0" ]]; then exit $((128 + $(kill -l "$stopping"))); fi
fi

echo "training ended with status $job_rc; run.json in each run directory says how"
echo 'then: nanochat-bench collect /scratch/nb/sweeps/golden --out /scratch/nb/sweeps/golden/table && nanochat-bench report /scratch/nb/sweeps/golden/table --out /scratch/nb/sweeps/golden/report'
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then exit "$job_rc"; fi  # run as a script, its status; pasted, the shell stays
