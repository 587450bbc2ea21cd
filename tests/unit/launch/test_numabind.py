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
