#!/bin/bash
# nanochat-bench, interactive: sweep golden, point n2-bare-r1: flow speedrun
# Rendered by `nanochat-bench render interactive --flow`. The flow speedrun step by step:
#
#   1. allocate nodes for 267 minutes: the data and tokenizer steps below, as the plan
#      estimates them, then the stages (the shell salloc opens runs on the login node unless the site says
#      otherwise; only srun lands on the compute nodes):
#        salloc --account=a-bench --exclusive --gpus-per-node=4 --nodes=2 --ntasks-per-node=1 --partition=debug --time=04:27:00
#   2. in that shell, paste the blocks below one at a time: nothing here exits your shell, and a step
#      that fails only prints its error. Or run them all, stopping at the first error:  bash interactive.sh
#      Data, tokenizer and checkpoints live in NANOCHAT_BASE_DIR; the stages chain through the model
#      tag golden-n2-bare-r1-40f36587 (base_train -> base_loss -> base_eval -> mid_train -> chat_eval_mid -> chat_sft -> chat_eval_sft).
# strict only when run as a script; pasted, pipefail alone (it exits nothing): a step's status is srun's,
# not its tee's, which would hide a failed tokenizer or training step
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then set -euo pipefail; else set -o pipefail; fi
export NANOCHAT_BASE_DIR=/scratch/nb/cache
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
srun --nodes=1 --ntasks=1 --cpus-per-task="${cpus_per_node}" /opt/nanochat-bench/venv/bin/python -m bench.cli data download -n 8

# -- the eval bundle for CORE (base_eval)
srun --nodes=1 --ntasks=1 --cpus-per-task="${cpus_per_node}" /opt/nanochat-bench/venv/bin/python -m bench.cli data download --eval-bundle

# -- the chat data for mid-training, SFT and chat evaluation
srun --nodes=1 --ntasks=1 --cpus-per-task="${cpus_per_node}" /opt/nanochat-bench/venv/bin/python -m bench.cli data download --chat

# -- a shell on one of the nodes, to look around (exit to come back):
#   srun --nodes=1 --ntasks=1 --pty --overlap --cpus-per-task="${cpus_per_node}" bash

# -- the tokenizer once, then each stage: the same blocks the batch script runs
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
#    contract (/scratch/nb/sweeps/golden/n2-bare-r1/.lib/jobrecord.py and contract/, standard library only), outside any container
runjson() { "$bench_python" /scratch/nb/sweeps/golden/n2-bare-r1/.lib/jobrecord.py "$@"; }
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

# -- tokenizer: trained once per sweep, outside the measured runs; the sweep's other jobs keep it
flow_failed=""  # the stage this point's flow stopped at: the stages after it are recorded as not run
# RUN_DIR RUN_ID: a stage the flow does not start, recorded as not run (cancelled), naming the stage it stopped at
# and the signal when scancel or the time limit stopped it there (the stage would stay pending, and `status` take
# the job's end for this stage's own)
not_run() {
    runjson not-run "$1" "$flow_failed" "$stopping"
    if [ -n "$stopping" ]; then echo "run $2: not run (the job received $stopping at stage $flow_failed)"
    else echo "run $2: not run (stage $flow_failed did not end ok)"; fi
}
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=bare
export NANOCHAT_BENCH_IMAGE=''
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=INIT,NET
export CUDA_CACHE_DISABLE=1
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export MPICH_GPU_SUPPORT_ENABLED=0
export NANOCHAT_VAL_FILES_K=1
tokenizer_pkl="$NANOCHAT_BASE_DIR/tokenizer/tokenizer.pkl"
mkdir -p "$NANOCHAT_BASE_DIR"
exec 9>>"$NANOCHAT_BASE_DIR/.tokenizer.lock"
# another job of the sweep training it: wait, then keep what it wrote (a filesystem without flock: said, not fatal)
flock 9 || echo "nanochat-bench: no lock on $NANOCHAT_BASE_DIR/.tokenizer.lock (flock unsupported there):" \
    "another job of the sweep may train the tokenizer at once" >&2
if [ -f "$tokenizer_pkl" ]; then
    echo "tokenizer: $tokenizer_pkl exists, kept"
else
    tokenizer_rc=0
    ctrl_c_trap  # Ctrl-C ends the step; the stages are recorded as not run, stopped
    { srun --nodes=1 --ntasks=1 --cpus-per-task="${cpus_per_node}" /opt/nanochat-bench/venv/bin/python -m bench.cli tokenizer train --vocab_size=65536 && srun --nodes=1 --ntasks=1 --cpus-per-task="${cpus_per_node}" /opt/nanochat-bench/venv/bin/python -m bench.cli tokenizer eval; } 2>&1 | run_log -a /scratch/nb/sweeps/golden/n2-bare-r1/tokenizer.log || tokenizer_rc=$?
    stopped_by_ctrl_c "$tokenizer_rc"
    trap - INT  # the salloc shell's own Ctrl-C again
    if [ "$tokenizer_rc" -ne 0 ]; then
        flow_failed=tokenizer
        job_rc=1
        if [ -z "$stopping" ]; then
            echo "nanochat-bench: the tokenizer could not be trained (see /scratch/nb/sweeps/golden/n2-bare-r1/tokenizer.log); no stage runs" >&2
        else  # not a failure of its own: scancel, the time limit or Ctrl-C ended its step
            echo "nanochat-bench: the tokenizer was stopped by $stopping (see /scratch/nb/sweeps/golden/n2-bare-r1/tokenizer.log); no stage runs" >&2
            # the status the guide prints is the stop's, as a stopped stage's is and as the script exits
            job_rc=$((128 + $(kill -l "$stopping")))
        fi
    fi
fi
flock -u 9 || true
exec 9>&-

# == stage 1/7: base_train (nanochat) ==========
if [ -z "$flow_failed" ]; then

# == run n2-bare-r1/base_train: bare on 2 node(s) x 4 rank(s), 20 min ==========
run_dir=/scratch/nb/sweeps/golden/n2-bare-r1/base_train
if runjson kept "$run_dir"; then  # a resubmitted job: a run that ended ok in an earlier attempt is kept
    echo "run n2-bare-r1/base_train: ok in an earlier attempt of this job, kept"
else
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-bare-r1/base_train
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=bare
export NANOCHAT_BENCH_IMAGE=''
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=INIT,NET
export CUDA_CACHE_DISABLE=1
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export MPICH_GPU_SUPPORT_ENABLED=0
export NANOCHAT_VAL_FILES_K=1
rc=0
# the job's port for this run, or the next free one: a port taken on the first node would leave every
# rank waiting for the store until the join timeout
rdzv_port=$(on_first_node "$bench_python" /scratch/nb/sweeps/golden/n2-bare-r1/.lib/rdzvport.py "$(( 20000 + SLURM_JOB_ID % 100 * 100 + 0 ))" "$first_node") || rc=$?
rdzv_endpoint="${rdzv_addr}:${rdzv_port}"
runtime_version=""
runjson start "$run_dir" "$runtime_version"  # also the launch time (T0) the start-up is measured from
if [ "$rc" -ne 0 ]; then echo "$rdzv_port" | tee "$run_dir/train.log"; fi  # the checker's one line: the run's message
# the trainer stops, checkpoints and ends as `timeout` this long before srun's limit would kill it
run_deadline=$(( $(date +%s) + 1080 ))
resume_step=$(runjson resume-step "$run_dir")  # a resubmitted timeout continues from its checkpoint
ctrl_c_trap  # Ctrl-C ends the step; run.json is still finished, as stopped
if [ "$rc" -eq 0 ]; then
srun -l -u --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --time=20 --cpus-per-task="${cpus_per_node}" \
    /opt/nanochat-bench/venv/bin/python -m bench.launch.elastic --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_conf=join_timeout=900 --numa-binding=node -m bench.nanochat.train -- --core_metric_every=-1 --device_batch_size=32 --model_tag=golden-n2-bare-r1-40f36587 --num_iterations=100 --sample_every=-1 --save_every=100 --total_batch_size=524288 --deadline="${run_deadline}" ${resume_step:+--resume_from_step="${resume_step}"} \
    2>&1 | run_log "$run_dir/train.log" || rc=$?
fi
stopped_by_ctrl_c "$rc"
runjson finish "$run_dir" "$rc" "$stopping"
trap - INT  # the salloc shell's own Ctrl-C again
if [ "$rc" -ne 0 ]; then job_rc=$rc; fi
fi
if [ -n "$stopping" ] || ! runjson kept "$run_dir"; then flow_failed=base_train; fi
else
    not_run /scratch/nb/sweeps/golden/n2-bare-r1/base_train "n2-bare-r1/base_train"
fi

# == stage 2/7: base_loss (base_loss) ==========
if [ -z "$flow_failed" ]; then

# == run n2-bare-r1/base_loss: bare on 2 node(s) x 4 rank(s), 20 min ==========
run_dir=/scratch/nb/sweeps/golden/n2-bare-r1/base_loss
if runjson kept "$run_dir"; then  # a resubmitted job: a run that ended ok in an earlier attempt is kept
    echo "run n2-bare-r1/base_loss: ok in an earlier attempt of this job, kept"
else
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-bare-r1/base_loss
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=bare
export NANOCHAT_BENCH_IMAGE=''
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=INIT,NET
export CUDA_CACHE_DISABLE=1
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export MPICH_GPU_SUPPORT_ENABLED=0
export NANOCHAT_VAL_FILES_K=1
rc=0
# the job's port for this run, or the next free one: a port taken on the first node would leave every
# rank waiting for the store until the join timeout
rdzv_port=$(on_first_node "$bench_python" /scratch/nb/sweeps/golden/n2-bare-r1/.lib/rdzvport.py "$(( 20000 + SLURM_JOB_ID % 100 * 100 + 1 ))" "$first_node") || rc=$?
rdzv_endpoint="${rdzv_addr}:${rdzv_port}"
runtime_version=""
runjson start "$run_dir" "$runtime_version"  # also the launch time (T0) the start-up is measured from
if [ "$rc" -ne 0 ]; then echo "$rdzv_port" | tee "$run_dir/train.log"; fi  # the checker's one line: the run's message
ctrl_c_trap  # Ctrl-C ends the step; run.json is still finished, as stopped
if [ "$rc" -eq 0 ]; then
srun -l -u --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --time=20 --cpus-per-task="${cpus_per_node}" \
    /opt/nanochat-bench/venv/bin/python -m bench.launch.elastic --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_conf=join_timeout=900 --numa-binding=node -m bench.nanochat.base_loss -- --model_tag=golden-n2-bare-r1-40f36587 --split_tokens=10485760 \
    2>&1 | run_log "$run_dir/train.log" || rc=$?
fi
stopped_by_ctrl_c "$rc"
runjson finish "$run_dir" "$rc" "$stopping"
trap - INT  # the salloc shell's own Ctrl-C again
if [ "$rc" -ne 0 ]; then job_rc=$rc; fi
fi
if [ -n "$stopping" ] || ! runjson kept "$run_dir"; then flow_failed=base_loss; fi
else
    not_run /scratch/nb/sweeps/golden/n2-bare-r1/base_loss "n2-bare-r1/base_loss"
fi

# == stage 3/7: base_eval (base_eval) ==========
if [ -z "$flow_failed" ]; then

# == run n2-bare-r1/base_eval: bare on 2 node(s) x 4 rank(s), 30 min ==========
run_dir=/scratch/nb/sweeps/golden/n2-bare-r1/base_eval
if runjson kept "$run_dir"; then  # a resubmitted job: a run that ended ok in an earlier attempt is kept
    echo "run n2-bare-r1/base_eval: ok in an earlier attempt of this job, kept"
else
unset NANOCHAT_VAL_FILES_K  # an earlier run's variables this run does not set
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-bare-r1/base_eval
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=bare
export NANOCHAT_BENCH_IMAGE=''
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=INIT,NET
export CUDA_CACHE_DISABLE=1
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export MPICH_GPU_SUPPORT_ENABLED=0
rc=0
# the job's port for this run, or the next free one: a port taken on the first node would leave every
# rank waiting for the store until the join timeout
rdzv_port=$(on_first_node "$bench_python" /scratch/nb/sweeps/golden/n2-bare-r1/.lib/rdzvport.py "$(( 20000 + SLURM_JOB_ID % 100 * 100 + 2 ))" "$first_node") || rc=$?
rdzv_endpoint="${rdzv_addr}:${rdzv_port}"
runtime_version=""
runjson start "$run_dir" "$runtime_version"  # also the launch time (T0) the start-up is measured from
if [ "$rc" -ne 0 ]; then echo "$rdzv_port" | tee "$run_dir/train.log"; fi  # the checker's one line: the run's message
ctrl_c_trap  # Ctrl-C ends the step; run.json is still finished, as stopped
if [ "$rc" -eq 0 ]; then
srun -l -u --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --time=30 --cpus-per-task="${cpus_per_node}" \
    /opt/nanochat-bench/venv/bin/python -m bench.launch.elastic --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_conf=join_timeout=900 --numa-binding=node -m bench.nanochat.base_eval -- --model_tag=golden-n2-bare-r1-40f36587 \
    2>&1 | run_log "$run_dir/train.log" || rc=$?
fi
stopped_by_ctrl_c "$rc"
runjson finish "$run_dir" "$rc" "$stopping"
trap - INT  # the salloc shell's own Ctrl-C again
if [ "$rc" -ne 0 ]; then job_rc=$rc; fi
fi
if [ -n "$stopping" ] || ! runjson kept "$run_dir"; then flow_failed=base_eval; fi
else
    not_run /scratch/nb/sweeps/golden/n2-bare-r1/base_eval "n2-bare-r1/base_eval"
fi

# == stage 4/7: mid_train (mid_train) ==========
if [ -z "$flow_failed" ]; then

# == run n2-bare-r1/mid_train: bare on 2 node(s) x 4 rank(s), 20 min ==========
run_dir=/scratch/nb/sweeps/golden/n2-bare-r1/mid_train
if runjson kept "$run_dir"; then  # a resubmitted job: a run that ended ok in an earlier attempt is kept
    echo "run n2-bare-r1/mid_train: ok in an earlier attempt of this job, kept"
else
unset NANOCHAT_VAL_FILES_K  # an earlier run's variables this run does not set
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-bare-r1/mid_train
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=bare
export NANOCHAT_BENCH_IMAGE=''
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=INIT,NET
export CUDA_CACHE_DISABLE=1
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export MPICH_GPU_SUPPORT_ENABLED=0
rc=0
# the job's port for this run, or the next free one: a port taken on the first node would leave every
# rank waiting for the store until the join timeout
rdzv_port=$(on_first_node "$bench_python" /scratch/nb/sweeps/golden/n2-bare-r1/.lib/rdzvport.py "$(( 20000 + SLURM_JOB_ID % 100 * 100 + 3 ))" "$first_node") || rc=$?
rdzv_endpoint="${rdzv_addr}:${rdzv_port}"
runtime_version=""
runjson start "$run_dir" "$runtime_version"  # also the launch time (T0) the start-up is measured from
if [ "$rc" -ne 0 ]; then echo "$rdzv_port" | tee "$run_dir/train.log"; fi  # the checker's one line: the run's message
# the trainer stops, checkpoints and ends as `timeout` this long before srun's limit would kill it
run_deadline=$(( $(date +%s) + 1080 ))
ctrl_c_trap  # Ctrl-C ends the step; run.json is still finished, as stopped
if [ "$rc" -eq 0 ]; then
srun -l -u --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --time=20 --cpus-per-task="${cpus_per_node}" \
    /opt/nanochat-bench/venv/bin/python -m bench.launch.elastic --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_conf=join_timeout=900 --numa-binding=node -m bench.nanochat.mid_train -- --device_batch_size=32 --model_tag=golden-n2-bare-r1-40f36587 --num_iterations=200 --total_batch_size=524288 --deadline="${run_deadline}" \
    2>&1 | run_log "$run_dir/train.log" || rc=$?
fi
stopped_by_ctrl_c "$rc"
runjson finish "$run_dir" "$rc" "$stopping"
trap - INT  # the salloc shell's own Ctrl-C again
if [ "$rc" -ne 0 ]; then job_rc=$rc; fi
fi
if [ -n "$stopping" ] || ! runjson kept "$run_dir"; then flow_failed=mid_train; fi
else
    not_run /scratch/nb/sweeps/golden/n2-bare-r1/mid_train "n2-bare-r1/mid_train"
fi

# == stage 5/7: chat_eval_mid (chat_eval) ==========
if [ -z "$flow_failed" ]; then

# == run n2-bare-r1/chat_eval_mid: bare on 2 node(s) x 4 rank(s), 50 min ==========
run_dir=/scratch/nb/sweeps/golden/n2-bare-r1/chat_eval_mid
if runjson kept "$run_dir"; then  # a resubmitted job: a run that ended ok in an earlier attempt is kept
    echo "run n2-bare-r1/chat_eval_mid: ok in an earlier attempt of this job, kept"
else
unset NANOCHAT_VAL_FILES_K  # an earlier run's variables this run does not set
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-bare-r1/chat_eval_mid
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=bare
export NANOCHAT_BENCH_IMAGE=''
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=INIT,NET
export CUDA_CACHE_DISABLE=1
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export MPICH_GPU_SUPPORT_ENABLED=0
rc=0
# the job's port for this run, or the next free one: a port taken on the first node would leave every
# rank waiting for the store until the join timeout
rdzv_port=$(on_first_node "$bench_python" /scratch/nb/sweeps/golden/n2-bare-r1/.lib/rdzvport.py "$(( 20000 + SLURM_JOB_ID % 100 * 100 + 4 ))" "$first_node") || rc=$?
rdzv_endpoint="${rdzv_addr}:${rdzv_port}"
runtime_version=""
runjson start "$run_dir" "$runtime_version"  # also the launch time (T0) the start-up is measured from
if [ "$rc" -ne 0 ]; then echo "$rdzv_port" | tee "$run_dir/train.log"; fi  # the checker's one line: the run's message
ctrl_c_trap  # Ctrl-C ends the step; run.json is still finished, as stopped
if [ "$rc" -eq 0 ]; then
srun -l -u --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --time=50 --cpus-per-task="${cpus_per_node}" \
    /opt/nanochat-bench/venv/bin/python -m bench.launch.elastic --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_conf=join_timeout=900 --numa-binding=node -m bench.nanochat.chat_eval -- --model_tag=golden-n2-bare-r1-40f36587 --source=mid \
    2>&1 | run_log "$run_dir/train.log" || rc=$?
fi
stopped_by_ctrl_c "$rc"
runjson finish "$run_dir" "$rc" "$stopping"
trap - INT  # the salloc shell's own Ctrl-C again
if [ "$rc" -ne 0 ]; then job_rc=$rc; fi
fi
if [ -n "$stopping" ] || ! runjson kept "$run_dir"; then flow_failed=chat_eval_mid; fi
else
    not_run /scratch/nb/sweeps/golden/n2-bare-r1/chat_eval_mid "n2-bare-r1/chat_eval_mid"
fi

# == stage 6/7: chat_sft (chat_sft) ==========
if [ -z "$flow_failed" ]; then

# == run n2-bare-r1/chat_sft: bare on 2 node(s) x 4 rank(s), 20 min ==========
run_dir=/scratch/nb/sweeps/golden/n2-bare-r1/chat_sft
if runjson kept "$run_dir"; then  # a resubmitted job: a run that ended ok in an earlier attempt is kept
    echo "run n2-bare-r1/chat_sft: ok in an earlier attempt of this job, kept"
else
unset NANOCHAT_VAL_FILES_K  # an earlier run's variables this run does not set
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-bare-r1/chat_sft
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=bare
export NANOCHAT_BENCH_IMAGE=''
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=INIT,NET
export CUDA_CACHE_DISABLE=1
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export MPICH_GPU_SUPPORT_ENABLED=0
rc=0
# the job's port for this run, or the next free one: a port taken on the first node would leave every
# rank waiting for the store until the join timeout
rdzv_port=$(on_first_node "$bench_python" /scratch/nb/sweeps/golden/n2-bare-r1/.lib/rdzvport.py "$(( 20000 + SLURM_JOB_ID % 100 * 100 + 5 ))" "$first_node") || rc=$?
rdzv_endpoint="${rdzv_addr}:${rdzv_port}"
runtime_version=""
runjson start "$run_dir" "$runtime_version"  # also the launch time (T0) the start-up is measured from
if [ "$rc" -ne 0 ]; then echo "$rdzv_port" | tee "$run_dir/train.log"; fi  # the checker's one line: the run's message
# the trainer stops, checkpoints and ends as `timeout` this long before srun's limit would kill it
run_deadline=$(( $(date +%s) + 1080 ))
ctrl_c_trap  # Ctrl-C ends the step; run.json is still finished, as stopped
if [ "$rc" -eq 0 ]; then
srun -l -u --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --time=20 --cpus-per-task="${cpus_per_node}" \
    /opt/nanochat-bench/venv/bin/python -m bench.launch.elastic --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_conf=join_timeout=900 --numa-binding=node -m bench.nanochat.chat_sft -- --device_batch_size=4 --model_tag=golden-n2-bare-r1-40f36587 --target_examples_per_step=32 --deadline="${run_deadline}" \
    2>&1 | run_log "$run_dir/train.log" || rc=$?
fi
stopped_by_ctrl_c "$rc"
runjson finish "$run_dir" "$rc" "$stopping"
trap - INT  # the salloc shell's own Ctrl-C again
if [ "$rc" -ne 0 ]; then job_rc=$rc; fi
fi
if [ -n "$stopping" ] || ! runjson kept "$run_dir"; then flow_failed=chat_sft; fi
else
    not_run /scratch/nb/sweeps/golden/n2-bare-r1/chat_sft "n2-bare-r1/chat_sft"
fi

# == stage 7/7: chat_eval_sft (chat_eval) ==========
if [ -z "$flow_failed" ]; then

# == run n2-bare-r1/chat_eval_sft: bare on 2 node(s) x 4 rank(s), 50 min ==========
run_dir=/scratch/nb/sweeps/golden/n2-bare-r1/chat_eval_sft
if runjson kept "$run_dir"; then  # a resubmitted job: a run that ended ok in an earlier attempt is kept
    echo "run n2-bare-r1/chat_eval_sft: ok in an earlier attempt of this job, kept"
else
unset NANOCHAT_VAL_FILES_K  # an earlier run's variables this run does not set
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-bare-r1/chat_eval_sft
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=bare
export NANOCHAT_BENCH_IMAGE=''
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=INIT,NET
export CUDA_CACHE_DISABLE=1
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export MPICH_GPU_SUPPORT_ENABLED=0
rc=0
# the job's port for this run, or the next free one: a port taken on the first node would leave every
# rank waiting for the store until the join timeout
rdzv_port=$(on_first_node "$bench_python" /scratch/nb/sweeps/golden/n2-bare-r1/.lib/rdzvport.py "$(( 20000 + SLURM_JOB_ID % 100 * 100 + 6 ))" "$first_node") || rc=$?
rdzv_endpoint="${rdzv_addr}:${rdzv_port}"
runtime_version=""
runjson start "$run_dir" "$runtime_version"  # also the launch time (T0) the start-up is measured from
if [ "$rc" -ne 0 ]; then echo "$rdzv_port" | tee "$run_dir/train.log"; fi  # the checker's one line: the run's message
ctrl_c_trap  # Ctrl-C ends the step; run.json is still finished, as stopped
if [ "$rc" -eq 0 ]; then
srun -l -u --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --time=50 --cpus-per-task="${cpus_per_node}" \
    /opt/nanochat-bench/venv/bin/python -m bench.launch.elastic --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_conf=join_timeout=900 --numa-binding=node -m bench.nanochat.chat_eval -- --model_tag=golden-n2-bare-r1-40f36587 --source=sft \
    2>&1 | run_log "$run_dir/train.log" || rc=$?
fi
stopped_by_ctrl_c "$rc"
runjson finish "$run_dir" "$rc" "$stopping"
trap - INT  # the salloc shell's own Ctrl-C again
if [ "$rc" -ne 0 ]; then job_rc=$rc; fi
fi
if [ -n "$stopping" ] || ! runjson kept "$run_dir"; then flow_failed=chat_eval_sft; fi
else
    not_run /scratch/nb/sweeps/golden/n2-bare-r1/chat_eval_sft "n2-bare-r1/chat_eval_sft"
fi


echo "flow speedrun ended with status $job_rc; run.json in each stage's directory says how"
echo 'then: nanochat-bench collect /scratch/nb/sweeps/golden --out /scratch/nb/sweeps/golden/table && nanochat-bench report /scratch/nb/sweeps/golden/table --out /scratch/nb/sweeps/golden/report'
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then  # run as a script, it ends as the batch script does; pasted, the shell stays
    if [ -n "$stopping" ]; then exit $((128 + $(kill -l "$stopping"))); fi  # stopped: 130 by Ctrl-C, 143 by SIGTERM
    exit "$job_rc"
fi
