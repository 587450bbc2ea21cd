"""The kernel's out-of-memory kills counted in this process's cgroup (bench/processes.py), read from a cgroup tree
written under tmp_path as the kernel shows it; and how a rank or a wrapper ends (exit_now).

    python -m pytest tests/unit/test_processes.py -q
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.processes import oom_kills, oom_killed_since
from tests.support.cgroups import tree

def test_a_kill_counts_in_the_process_s_own_cgroup_not_in_a_sibling_s(tmp_path):
    """Regression: the counts of the ancestors were summed, so another user's OOM kill under the same user.slice made
    a `kill -9` of a rank read as `oom`; the process's own memory.events counts its processes' kills wherever the
    limit was hit (the kernel counts a kill in the victim's cgroup and each above it)."""
    own, parent = "user.slice/user-1000.slice/session-3.scope", "user.slice/user-1000.slice"
    tree(tmp_path, counts={own: 0, parent: 2})
    before = oom_kills(tmp_path)
    assert before == 0 and oom_killed_since(before, tmp_path) is False
    tree(tmp_path, counts={own: 0, parent: 3})  # a kill in a sibling cgroup: not this run's
    assert oom_killed_since(before, tmp_path) is False
    tree(tmp_path, counts={own: 1, parent: 4})
    assert oom_killed_since(before, tmp_path) is True


def test_unreadable_cgroups_are_skipped_and_a_container_s_own_root_counts(tmp_path):
    tree(tmp_path, own="/", counts={".": 5})  # a cgroup namespace: its root is the container's cgroup
    assert oom_kills(tmp_path) == 5
    tree(tmp_path / "deep", own="/a/b/c", counts={"a": 1})  # a/b/c and a/b not readable: the nearest, a, counts
    assert oom_kills(tmp_path / "deep") == 1


@pytest.mark.parametrize("proc", [
    "4:memory:/user.slice\n1:name=systemd:/user.slice\n",  # cgroup v1: no `0::` line
    "0::{}\n",  # v2 without memory.events (the memory controller not enabled, a container without it)
    None,  # no /proc
])
def test_no_readable_count_cannot_tell(tmp_path, proc):
    if proc is not None:
        tree(tmp_path, proc=proc)
    assert oom_kills(tmp_path) is None
    assert oom_killed_since(None, tmp_path) is None and oom_killed_since(0, tmp_path) is None


def test_exit_now_ends_as_a_normal_exit_would_its_handlers_run_and_its_output_written(tmp_path):
    """A rank's or a wrapper's end skips Python's teardown of its modules, and nothing else: atexit's handlers run,
    Python's buffered output and C's (NCCL writes its debug file through C's stdio) reach their files, and the
    status is the code given."""
    program = textwrap.dedent(f"""
        import atexit, ctypes
        from bench.processes import exit_now
        atexit.register(lambda: open({str(tmp_path / "handler")!r}, "w").write("ran"))
        libc = ctypes.CDLL(None)
        libc.fopen.restype = ctypes.c_void_p
        c_file = libc.fopen({str(tmp_path / "c.log").encode()!r}, b"w")  # block-buffered, as a file is
        libc.fputs(b"a line C holds in its buffer", ctypes.c_void_p(c_file))
        print("a line Python holds in its buffer", end="")
        exit_now(3)
        """)
    with open(tmp_path / "stdout", "w") as out:  # a file, not a terminal: Python buffers it
        code = subprocess.run([sys.executable, "-c", program], stdout=out, cwd=Path(__file__).parents[2],
                              timeout=60).returncode
    assert code == 3
    assert (tmp_path / "handler").read_text() == "ran"
    assert (tmp_path / "stdout").read_text() == "a line Python holds in its buffer"
    assert (tmp_path / "c.log").read_text() == "a line C holds in its buffer"
