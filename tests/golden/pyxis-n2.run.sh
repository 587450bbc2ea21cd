# == run n2-pyxis-r1: pyxis on 2 node(s) x 4 rank(s) ==========
run_dir=/scratch/nb/sweeps/golden/n2-pyxis-r1
export NANOCHAT_BENCH_RUN_DIR=/scratch/nb/sweeps/golden/n2-pyxis-r1
export NANOCHAT_BASE_DIR=/scratch/nb/cache
export NANOCHAT_BENCH_RUNTIME=pyxis
export NANOCHAT_BENCH_IMAGE=/scratch/nb/images/nanochat-bench+latest.sqsh
rdzv_endpoint="${rdzv_addr}:$(( 20000 + SLURM_JOB_ID % 1000 * 10 + 0 ))"
runtime_version=$(enroot version 2>/dev/null | head -n 1 || true)
runjson start "$run_dir" "$runtime_version"
NANOCHAT_BENCH_T0=$(date +%s.%N)  # launch time: the trainer's start event minus this is the start-up cost
export NANOCHAT_BENCH_T0
rc=0
srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --cpus-per-task="${cpus_per_node}" --container-image=/scratch/nb/images/nanochat-bench+latest.sqsh --container-mounts=/scratch/nb/sweeps/golden:/scratch/nb/sweeps/golden,/scratch/nb/cache:/scratch/nb/cache --container-workdir=/workspace/nanochat-bench --container-env=NANOCHAT_BASE_DIR,NANOCHAT_BENCH_IMAGE,NANOCHAT_BENCH_RUNTIME,NANOCHAT_BENCH_RUN_DIR,NANOCHAT_BENCH_T0 --no-container-mount-home \
    python -m torch.distributed.run --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint="${rdzv_endpoint}" --rdzv_id="${SLURM_JOB_ID}" -m bench.nanochat.train -- --core_metric_every=-1 --device_batch_size=32 --num_iterations=200 --sample_every=-1 \
    2>&1 | tee "$run_dir/train.log" || rc=$?
runjson finish "$run_dir" "$rc"
