# ReFrame site configuration of the tests' two-node Slurm cluster (tests/integration/slurm/slurm_cluster.py:
# ClusterName=nbtest, partition debug, nodes n1 and n2 with 2 CPUs each, no accounting).
#
#   SLURM_CONF=<cluster>/slurm.conf NANOCHAT_BASE_DIR=<data> \
#   reframe -C bench/reframe_checks/config/test_cluster.py -c bench/reframe_checks/checks.py --system nbtest \
#       -n %scaling=strong -P num_nodes=1,2 -S depth=2 \
#       -S train_args=max_seq_len=64,device_batch_size=2,num_iterations=13,total_batch_size=512,eval_every=-1 -r
#
# Scheduler `squeue`: ReFrame's `slurm` backend polls sacct, which a Slurm without accounting lacks;
# `squeue` polls squeue instead (and takes a job gone from the queue as completed: the sanity stage
# then reads the run's own run.json). Launcher `local`: the job runs nanochat-bench's batch script once,
# and that script's srun starts one task per node. A case runs on the partition whose `features` name its
# runtime's feature: the runtime's name with `_` for `-` (checks.py runtime_feature: podman_hpc, sarus_suite).

site_configuration = {
    "systems": [
        {
            "name": "nbtest",
            "descr": "nanochat-bench's two-node test cluster (CPU, gloo)",
            "hostnames": [".*"],
            "modules_system": "nomod",
            "partitions": [
                {
                    "name": "cpu",
                    "descr": "2 nodes x 2 CPU ranks",
                    "scheduler": "squeue",
                    "launcher": "local",
                    "access": ["--partition=debug"],
                    "environs": ["nanochat-bench"],
                    "features": ["bare"],  # podman runs here only with the image built (tests/support/containers.py)
                    "max_jobs": 2,
                    "extras": {
                        "nanochat_bench": {
                            "gpus_per_node": 2,  # CPU ranks per node
                            "train": ["device_type=cpu"],
                            "exclusive": False,  # two cases share the two nodes at once
                            "numa_binding": "none",
                        }
                    },
                }
            ],
        }
    ],
    "environments": [
        {"name": "nanochat-bench", "features": ["nanochat_bench"]},
    ],
}
