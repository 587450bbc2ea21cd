"""The one torchrun command line of the project: standalone on one machine, c10d rendezvous under Slurm.

Local runs (bench/launch/local.py) and batch jobs (bench/workloads/nanochat.py) both start the trainer through
`torchrun_command`, so the flags the trainer sees are the same however it was launched.
"""

from bench.runtimes import Token, Var

TRAIN_MODULE = "bench.nanochat.train"
LAUNCHER_MODULE = "bench.launch.elastic"  # torchrun itself, ending in one line (bench/launch/elastic.py)


# How long the nodes of a job wait for each other at the rendezvous. Not torchrun's 600 s default by
# accident: a container engine importing a 20 GB image on its first use can take minutes, and longer than
# a quarter of an hour means a node is stuck (a hung mount, a dead NIC), which should fail the run.
JOIN_TIMEOUT_S = 900


def torchrun_command(python: str, nproc_per_node: int, train_argv: list, nnodes: int | None = None,
                     numa_binding: str | None = None, module: str | None = None,
                     join_timeout_s: int | None = None) -> tuple[Token, ...]:
    """`python -m bench.launch.elastic ... -m bench.nanochat.train -- <train_argv>`: torchrun's flags.

    Without `nnodes`: `--standalone` (a local rendezvous on a free port). With it: c10d rendezvous on
    the batch script's `$rdzv_endpoint` (the first node's address), job id as the rendezvous id, the nodes
    waiting for each other `join_timeout_s` at most (None: JOIN_TIMEOUT_S).
    `numa_binding` (node, socket, ...) binds each worker to the CPUs near its GPU (torch >= 2.8)."""
    procs = f"--nproc_per_node={nproc_per_node}"
    if nnodes is None:
        where: list[Token] = ["--standalone", procs]
    else:
        where = [f"--nnodes={nnodes}", procs, "--rdzv_backend=c10d", Var("rdzv_endpoint", "--rdzv_endpoint="),
                 Var("SLURM_JOB_ID", "--rdzv_id="), f"--rdzv_conf=join_timeout={join_timeout_s or JOIN_TIMEOUT_S}"]
    if numa_binding:
        where.append(f"--numa-binding={numa_binding}")
    return (python, "-m", LAUNCHER_MODULE, *where, "-m", module or TRAIN_MODULE, "--", *train_argv)
