"""Fixtures of the fault-injection suite: a fresh case directory on the session's tiny data, and the
two-node Slurm cluster of its own (the node-loss case kills a slurmd; other tests keep theirs)."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import Ctx  # noqa: E402
from cluster import FaultCluster, missing_programs  # noqa: E402
from harness import in_ci  # noqa: E402


@pytest.fixture
def fault_ctx(tiny_base_dir, tmp_path):
    return Ctx(work=tmp_path, base_dir=tiny_base_dir)


@pytest.fixture(scope="session")
def fault_cluster(tmp_path_factory):
    missing = missing_programs()
    if missing or os.geteuid() != 0:
        why = f"Slurm not installed (missing {', '.join(missing)})" if missing else "slurmd must run as root"
        (pytest.fail if in_ci() else pytest.skip)(why)  # under CI=true a missing cluster is an error
    cluster = FaultCluster(tmp_path_factory.mktemp("fault-slurm")).start()
    try:
        yield cluster
    finally:
        cluster.stop()
