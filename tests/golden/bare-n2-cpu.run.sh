# == run n2-bare-r1: bare on 2 node(s) x 2 rank(s), 30 min ==========
run_dir=/scratch/nb/sweeps/golden/n2-bare-r1
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-bare-r1
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=bare
export NANOCHAT_BENCH_IMAGE=''
export NANOCHAT_VAL_FILES_K=1
rdzv_endpoint="${rdzv_addr}:$(( 20000 + SLURM_JOB_ID % 100 * 100 + 0 ))"
runtime_version=""
# the trainer stops, checkpoints and ends as `timeout` this long before srun's limit would kill it
run_deadline=$(( $(date +%s) + 1620 ))
runjson start "$run_dir" "$runtime_version"  # also the launch time (T0) the start-up is measured from
rc=0
srun -l -u --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --time=30 --cpus-per-task="${cpus_per_node}" \
    /opt/nanochat-bench/venv/bin/python -m bench.launch.elastic --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_conf=join_timeout=900 -m bench.nanochat.train -- --core_metric_every=-1 --depth=2 --device_batch_size=2 --device_type=cpu --max_seq_len=64 --num_iterations=200 --sample_every=-1 --total_batch_size=512 --deadline="${run_deadline}" \
    2>&1 | tee "$run_dir/train.log" || rc=$?
runjson finish "$run_dir" "$rc"
