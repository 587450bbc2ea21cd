"""The two-node Slurm cluster the integration tests share (one per session, stopped by pid at the end).

Skipped where Slurm or root is missing, except under CI=true, where that is an error: the issue's
Slurm tests may never silently vanish from CI.
"""

import os

import pytest

from slurm_cluster import SlurmCluster, missing_programs


def _unavailable() -> str | None:
    missing = missing_programs()
    if missing:
        return f"Slurm not installed (missing {', '.join(missing)}); tests/run installs it as root"
    if os.geteuid() != 0:
        return "the test cluster's slurmd must run as root"
    return None


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    why = _unavailable()
    if why:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    mp = pytest.MonkeyPatch()
    mp.setenv("SLURM_CONF", str(cluster.conf))  # every Slurm command of the tests talks to this cluster
    mp.setenv("OMP_NUM_THREADS", "1")  # jobs inherit it: 2 cores are shared by everything here
    try:
        yield cluster
    finally:
        mp.undo()
        cluster.stop()
