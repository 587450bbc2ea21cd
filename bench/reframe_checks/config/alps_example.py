# An example ReFrame site configuration for an Alps-like system (GH200 nodes, 4 GPUs each, Slurm with
# accounting, Slingshot): one ReFrame partition per way of running, all on the Slurm partition `normal`.
#
#   export SCRATCH=/capstor/scratch/cscs/$USER NANOCHAT_BENCH_REFERENCES=$HOME/references-gh200.toml
#   reframe -C bench/reframe_checks/config/alps_example.py -c bench/reframe_checks/checks.py \
#       --system alps-example -P num_nodes=1,2,4,8 -S depth=20 -r
#
# The references hold figures measured on these GH200 nodes: copy results/references.example.toml and put in
# yours, with gpu_name = "NVIDIA GH200*". The shipped results/h200-d20/references.toml selects "NVIDIA H200*",
# which no GH200 run matches, so it would bound none.
#
# Copy it, set the account, images and base directory, and drop the features (runtimes) the site does
# not offer. A check case runs on the partitions whose `features` name its runtime's feature, the runtime's
# name with `_` for `-` (checks.py runtime_feature: podman_hpc, sarus_suite), as every ReFrame 4 schema but
# 4.10.4's refuses a `-` in a feature; `images` and `-n %runtime=` keep its name. The partition's
# `extras['nanochat_bench']` says how nanochat-bench runs there (bench/reframe_checks/case.py, Site):
# gpus_per_node, base_dir, python, images, mounts, env, train, time, exclusive, cpus_per_gpu, ofi_hook,
# numa_binding, nccl_net, references, site.
#
# Scheduler `slurm` (polls sacct; on a Slurm without accounting use `squeue`). Launcher `local`: the
# check's job runs nanochat-bench's batch script once, and its srun starts one task per node, each
# starting the runtime and torchrun with one process per GPU.

ACCESS = ["--partition=normal", "--account=a-example"]  # the project to charge
COMMON = {
    "gpus_per_node": 4,
    "base_dir": "$SCRATCH/nanochat",  # shards and tokenizer on the shared filesystem
    "site": "alps",  # the Slingshot set-up of every runtime (bench/sites/alps.toml), as `submit --site alps`
    # "env": {"NAME": "VALUE"},  # passed literally into every run, by each runtime's own mechanism; keep
    #                             NCCL_DEBUG at INFO: its lines say which network NCCL took (the network gate)
}
# What every partition below shares: scheduler and launcher (see above), Slurm partition and environment.
PARTITION = {"scheduler": "slurm", "launcher": "local", "access": ACCESS, "environs": ["nanochat-bench"], "max_jobs": 4}

site_configuration = {
    "systems": [
        {
            "name": "alps-example",
            "descr": "An Alps-like GH200 system (example)",
            "hostnames": [r"^alps-ln\d+$", r"^nid\d{6}$"],
            "modules_system": "nomod",
            "partitions": [
                {
                    "name": "gh200-ce",
                    "descr": "Container Engine: the image through an EDF (srun --environment)",
                    **PARTITION,
                    "features": ["ce"],
                    "extras": {"nanochat_bench": {
                        **COMMON,
                        "images": {"ce": "$SCRATCH/ce-images/nanochat-bench+latest.sqsh"},
                        "ofi_hook": "default",  # the site's aws_ofi_nccl hook as configured
                        # "nccl_net": "AWS Libfabric",  # sanity: NCCL's network between nodes (run.json network.net)
                    }},
                },
                {
                    "name": "gh200-pyxis",
                    "descr": "Pyxis/enroot: the image through srun --container-image",
                    **PARTITION,
                    "features": ["pyxis"],
                    "extras": {"nanochat_bench": {
                        **COMMON,
                        "images": {"pyxis": "$SCRATCH/ce-images/nanochat-bench+latest.sqsh"},
                    }},
                },
                {
                    "name": "gh200",
                    "descr": "Runtimes started as commands: a host Python environment, Apptainer, Podman, Sarus",
                    **PARTITION,
                    "features": ["bare", "apptainer", "podman", "sarus"],
                    "extras": {"nanochat_bench": {
                        **COMMON,
                        "python": "$SCRATCH/nanochat-bench-venv/bin/python",  # bare: where nanochat-bench is installed
                        "images": {"apptainer": "$SCRATCH/images/nanochat-bench.sif"},
                    }},
                },
            ],
        }
    ],
    "environments": [
        # Modules or environment variables every case needs go here (e.g. "modules": [...]).
        {"name": "nanochat-bench", "features": ["nanochat_bench"], "target_systems": ["alps-example"]},
    ],
}
