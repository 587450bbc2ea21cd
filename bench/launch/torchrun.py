"""The one torchrun command line of the project: standalone on one machine, c10d rendezvous under Slurm.

Local runs (bench/launch/local.py) and batch jobs (bench/launch/job.py) both start the trainer through
`torchrun_command`, so the flags the trainer sees are the same however it was launched.
"""

from bench.runtimes import Token, Var

TRAIN_MODULE = "bench.nanochat.train"


def torchrun_command(python: str, nproc_per_node: int, train_argv: list[str],
                     nnodes: int | None = None) -> tuple[Token, ...]:
    """`python -m torch.distributed.run ... -m bench.nanochat.train -- <train_argv>`.

    Without `nnodes`: `--standalone` (a local rendezvous on a free port). With it: c10d rendezvous on
    the batch script's `$rdzv_endpoint` (the first node's address), job id as the rendezvous id."""
    procs = f"--nproc_per_node={nproc_per_node}"
    if nnodes is None:
        where: list[Token] = ["--standalone", procs]
    else:
        where = [f"--nnodes={nnodes}", procs, "--rdzv_backend=c10d", Var("rdzv_endpoint", "--rdzv_endpoint="),
                 Var("SLURM_JOB_ID", "--rdzv_id=")]
    return (python, "-m", "torch.distributed.run", *where, "-m", TRAIN_MODULE, "--", *train_argv)
