"""The CPUs every one-task srun asks for (slurm/_cpus.sh.j2), read from what Slurm writes, by real bash.

    python -m pytest tests/unit/launch/test_node_cpus.py -q
"""

import subprocess

import pytest

from bench.launch.render import environment


def cpus_per_node(env: dict[str, str]) -> str:
    """$cpus_per_node as the snippet sets it under `set -euo pipefail`, as a batch script runs it."""
    snippet = environment().get_template("_cpus.sh.j2").render()
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", snippet + 'printf %s "$cpus_per_node"'],
                       env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("listed, fewest", [
    ("288", "288"), ("288(x32)", "288"), ("72(x2),64", "64"), ("64,72(x3)", "64"),
    ("256,288(x30),128(x2)", "128"), ("4(x2)", "4"),
])
def test_the_fewest_cpus_of_any_node_of_the_job(listed, fewest):
    """The batch host's SLURM_CPUS_ON_NODE (the first node's count) was asked of every node, and an salloc shell
    took the list's first count: a step on a node of 64 CPUs in a job over nodes of 72 and 64 asked for 72 and
    failed. The list is as Slurm writes it: counts in node order, `(xN)` for N nodes alike in a row."""
    batch_host = listed.split(",")[0].split("(")[0]
    assert cpus_per_node({"SLURM_JOB_CPUS_PER_NODE": listed, "SLURM_CPUS_ON_NODE": batch_host}) == fewest


def test_this_nodes_count_where_slurm_gives_no_list():
    assert cpus_per_node({"SLURM_CPUS_ON_NODE": "8"}) == "8"


def test_an_salloc_shell_without_this_nodes_count_takes_the_fewest_too():
    assert cpus_per_node({"SLURM_JOB_CPUS_PER_NODE": "72(x2),64"}) == "64"
