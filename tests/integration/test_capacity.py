"""`capacity` end to end on CPU: the one-command benchmark (benchmarks/capacity_bench.py --tiny) under an
address-space cap of 875 MiB per rank, so the search ends at a known size (widths 32 x depth, random
tokens over 65,536 ids; with the probes' pinned allocator a rank grows by 718 MiB at zero2 d4 and 968 MiB at
d6, fsdp+ac+offload by 779 MiB at d6 and 983 MiB at d8, each within 2 MiB over five runs), then the same
command again, which reads every probe back.
Probes are real trainer processes; on CPU there is no CUDA peak to compare, so the memory check is empty.

    python -m pytest tests/integration/test_capacity.py -q
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.capacity import data as capdata
from bench.capacity.cpuhost import TINY_MEMORY_LIMIT_MIB
from bench.capacity.probe import ProbeSpec, run_probe

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "capacity_bench.py"


def bench(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(out), "--tiny", "--strategies", "zero2,fsdp+ac+offload",
                           "--max-batch", "1"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)


@pytest.mark.slow
def test_search_ends_at_the_known_size_and_resumes(tmp_path):
    out = tmp_path / "cap"
    proc = bench(out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    found = {s["strategy"]: (s["capacity"]["name"], s["first_failure"]["name"]) for s in summary["searches"]}
    assert found == {"zero2": ("d4-a32", "d6-a32"), "fsdp+ac+offload": ("d6-a32", "d8-a32")}, proc.stdout
    ooms = [p for p in summary["probes"] if p["outcome"] == "oom"]
    assert ooms and all(p["oom_bytes"] and p["message"] for p in ooms)
    assert all(p["probe"]["steps"] == 3 and p["tok_per_sec"] > 0 for p in summary["probes"] if p["outcome"] == "ok")
    for p in summary["probes"]:  # every probe has its own run directory under the run contract
        run = json.loads((Path(p["run_dir"]) / "run.json").read_text())
        assert run["status"] == p["outcome"] and run["capacity"]["outcome"] == p["outcome"]
    rows = list(csv.DictReader(open(out / "probes.csv")))
    assert len(rows) == len(summary["probes"])
    assert (out / "report" / "figures" / "capacity-capacity.png").is_file()
    assert "d4-a32" in (out / "report" / "capacity.md").read_text()

    t = time.time()
    again = bench(out)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    back = json.loads((out / "summary.json").read_text())
    assert back["probes"] and all(p["reused"] for p in back["probes"])
    assert [p["run_dir"] for p in back["probes"]] == [p["run_dir"] for p in summary["probes"]]
    assert "(read back)" in again.stdout and time.time() - t < 60


@pytest.mark.slow
def test_a_probe_past_its_time_limit_is_a_timeout(tmp_path):
    base = tmp_path / "data"
    data = {"base_dir": base, "bin_dir": capdata.prepare(base, 512, 1 << 14), "memory_limit": None}
    r = run_probe(ProbeSpec("zero2", 2, max_seq_len=32, device_type="cpu", vocab_size=512), tmp_path / "p", data, 1.0)
    assert r.outcome == "timeout" and "no end after 1 s" in r.message and r.wall_s < 30
    assert json.loads((tmp_path / "p" / "run.json").read_text())["status"] == "timeout"


# ------------------------------------------------------------------------------------------------
# a sweep that is stopped: its probes end with it, and what finished is reported

TINY_CLI = ["--device-type", "cpu", "--memory-limit", f"{TINY_MEMORY_LIMIT_MIB}M", "--seq", "64",
            "--aspect-ratios", "32", "--max-depth", "8", "--no-batch-search", "--strategies", "zero2", "--depths", "2,4"]


def _descendants(root: int) -> set[int]:
    from bench.processes import tree_of

    return tree_of(root) - {root}


def _alive(pids: set[int]) -> set[int]:
    from bench.capacity.probe import _zombie

    return {p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)}


def _start_sweep(out: Path) -> subprocess.Popen:
    """The CLI in a session of its own, as a terminal's foreground job is; it returns once the first probe
    has finished and the second is training (a trainer process under the sweep)."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.cli", "capacity", *TINY_CLI, "--out", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        second = out / "runs" / "zero2" / "d4-a32-b1" / "run.json"
        if second.is_file() and any("bench.capacity.capped" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")
                                    for p in _alive(_descendants(proc.pid))):
            return proc
        time.sleep(0.5)
    proc.kill()
    pytest.fail(f"the second probe never started: {proc.communicate()[0][-3000:]}")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_a_stopped_sweep_ends_its_probe_and_reports_the_finished_ones(tmp_path, how):
    """Regression: Ctrl-C or SIGTERM printed "interrupted" while the probe trained on with parent 1 (3-7 GB,
    or the GPU), and `--report` then said "no capacity summary" although probes had finished."""
    out = tmp_path / "cap"
    proc = _start_sweep(out)
    probe = _alive(_descendants(proc.pid))
    assert probe
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends: the probe's own session does not get it
    else:
        proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130 and "interrupted" in output, output[-3000:]
    deadline = time.time() + 10
    while _alive(probe) and time.time() < deadline:
        time.sleep(0.2)
    assert not _alive(probe), [_cmdline(p) for p in _alive(probe)]
    stopped = json.loads((out / "runs" / "zero2" / "d4-a32-b1" / "run.json").read_text())
    assert stopped["status"] == "cancelled" and not stopped.get("capacity")  # so a resumed sweep runs it again
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] == {"ctrl-c": "SIGINT", "sigterm": "SIGTERM"}[how]
    assert [p["probe"]["depth"] for p in summary["probes"]] == [2] and summary["probes"][0]["outcome"] == "ok"
    report = subprocess.run([sys.executable, "-m", "bench.cli", "capacity", "--report", "--out", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and "the sweep did not finish" in report.stdout, report.stdout + report.stderr
    assert "d2-a32" in (out / "report" / "capacity.md").read_text()


@pytest.mark.slow
def test_a_killed_sweep_takes_its_probe_and_the_report_reads_the_finished_ones(tmp_path):
    """SIGKILL leaves the sweep no clean-up: the probe ends by itself (the kernel's parent-death signal),
    and `--report` rebuilds the summary from the probes that finished."""
    out = tmp_path / "cap"
    proc = _start_sweep(out)
    probe = _alive(_descendants(proc.pid))
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.time() + 30
    while _alive(probe) and time.time() < deadline:
        time.sleep(0.2)
    assert not _alive(probe), [_cmdline(p) for p in _alive(probe)]
    assert not (out / "summary.json").exists()
    report = subprocess.run([sys.executable, "-m", "bench.cli", "capacity", "--report", "--out", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and "rebuilt from the finished probes" in report.stdout, report.stdout + report.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert [(p["probe"]["depth"], p["outcome"]) for p in summary["probes"]] == [(2, "ok")]
    assert summary["searches"][0]["capacity"]["name"] == "d2-a32"


def test_capacity_on_cpu_without_a_cap_is_refused_naming_settings_that_fit(tmp_path):
    """Regression: the README's GPU command on a 24 GB CPU host printed nothing for 192 s, then drove the host
    to 2 GiB free before the guard stopped the probe. Now: one line at once, naming the CPU settings."""
    t = time.time()
    p = subprocess.run([sys.executable, "-m", "bench.cli", "capacity", "--device-type", "cpu", "--out",
                        str(tmp_path / "cap")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert "--memory-limit" in p.stderr and "--device-type cpu" in p.stderr and "capacity_bench.py --tiny" in p.stderr
    assert time.time() - t < 60 and not (tmp_path / "cap").exists()  # nothing made, no probe started
    huge = subprocess.run([sys.executable, "-m", "bench.cli", "capacity", "--device-type", "cpu", "--memory-limit",
                           "100T", "--out", str(tmp_path / "cap")], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert huge.returncode == 1 and "more than half" in huge.stderr and "allows --memory-limit up to" in huge.stderr


def test_the_gpu_benchmark_on_a_cpu_host_is_refused_pointing_at_tiny(tmp_path):
    """benchmarks/capacity_bench.py without --tiny on a CPU host: one line naming --tiny, no probe."""
    if shutil.which("nvidia-smi"):
        pytest.skip("a GPU is visible: the benchmark would run")
    p = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "cap")], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert p.returncode == 1 and p.stderr.startswith("error: capacity on CPU") and "--tiny" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "cap" / "runs").exists()
