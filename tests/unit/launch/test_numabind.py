"""--numa-binding without numactl: dropped with one warning, never a failed start; kept where numactl is."""

from bench.launch import numabind

ARGV = ["--nnodes=2", "--nproc_per_node=4", "--numa-binding=node", "-m", "bench.nanochat.train", "--", "--depth=20"]


def test_kept_where_numactl_exists():
    assert numabind.usable(ARGV, which=lambda _: "/usr/bin/numactl") == (ARGV, None)


def test_dropped_with_one_warning_where_it_is_missing():
    argv, warning = numabind.usable(ARGV, which=lambda _: None)
    assert "--numa-binding=node" not in argv and argv[-1] == "--depth=20"
    assert "numactl" in warning and "\n" not in warning
    argv, _ = numabind.usable(["--numa-binding", "socket", "-m", "x"], which=lambda _: None)
    assert argv == ["-m", "x"]


def test_no_flag_no_warning():
    argv = ["--standalone", "-m", "x"]
    assert numabind.usable(argv, which=lambda _: None) == (argv, None)


def test_torchrun_starts_without_numactl(tmp_path):
    """The wrapper itself (bench/launch/elastic.py) with --numa-binding on a host without numactl: one
    warning line, and the worker runs."""
    import os
    import shutil
    import subprocess
    import sys

    import pytest

    if shutil.which("numactl"):
        pytest.skip("numactl is installed here: the fallback is not reached")
    script = tmp_path / "worker.py"
    script.write_text("import os\nprint('worker ran, bind', os.environ.get('NANOCHAT_BENCH_NUMA_BIND'))\n")
    r = subprocess.run([sys.executable, "-m", "bench.launch.elastic", "--standalone", "--nproc_per_node=1",
                        "--numa-binding=node", str(script)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "worker ran, bind 1" in r.stdout and r.stderr.count("needs numactl") == 1  # it binds itself
