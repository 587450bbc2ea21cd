"""nanochat-bench's ReFrame test library: the checks and site configurations, shipped with the package.

    checks.py            the checks (runtime x scaling, variables workload, num_nodes, depth, train_args, references)
    case.py              a test case -> the nanochat-bench job it runs (plan, render, write)
    references.py        ReFrame references from a nanochat-bench references file
    config/test_cluster.py   the tests' two-node Slurm cluster (squeue backend, launcher local)
    config/alps_example.py   an Alps-like system: CE partition with EDF, Pyxis partition, host runtimes

Only checks.py imports ReFrame, so the rest of the package works without it installed.
"""

from pathlib import Path

CHECKS = Path(__file__).with_name("checks.py")
CONFIG_DIR = Path(__file__).with_name("config")
