# == run n2-ce-r1: ce on 2 node(s) x 4 rank(s), 20 min ==========
run_dir=/scratch/nb/sweeps/golden/n2-ce-r1
if runjson kept "$run_dir"; then  # a resubmitted job: a run that ended ok in an earlier attempt is kept
    echo "run n2-ce-r1: ok in an earlier attempt of this job, kept"
else
export NCCL_NET='AWS Libfabric'
export FI_PROVIDER=cxi
export MPICH_GPU_SUPPORT_ENABLED=0
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-ce-r1
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=ce
export NANOCHAT_BENCH_IMAGE=/scratch/nb/images/nanochat-bench+latest.sqsh
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=INIT,NET
export CUDA_CACHE_DISABLE=1
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export NANOCHAT_VAL_FILES_K=1
export NANOCHAT_BENCH_EXPECT_NET='AWS Libfabric'
export NANOCHAT_BENCH_NET_SETUP='alps/ce: CE'"'"'s aws_ofi_nccl hook (variant cuda-dl) and CXI hook'
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
if [ "$rc" -eq 0 ]; then
env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV srun -l -u --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --time=20 --cpus-per-task="${cpus_per_node}" --environment=/scratch/nb/sweeps/golden/n2-ce-r1/environment.toml \
    python -m bench.launch.elastic --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_conf=join_timeout=900 --numa-binding=node -m bench.nanochat.train -- --core_metric_every=-1 --device_batch_size=32 --num_iterations=200 --sample_every=-1 --total_batch_size=524288 --deadline="${run_deadline}" ${resume_step:+--resume_from_step="${resume_step}"} \
    2>&1 | run_log "$run_dir/train.log" || rc=$?
fi
runjson finish "$run_dir" "$rc" "$stopping"
