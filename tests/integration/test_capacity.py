"""`capacity` end to end on CPU: the one-command benchmark (benchmarks/capacity_bench.py --tiny) under an
address-space cap of 1050 MiB per rank, so the search ends at a known size (widths 32 x depth, random
tokens over 65,536 ids: a rank grows by ~0.85 GiB at zero2 d4 and ~1.2 GiB at d6; fsdp+ac+offload by
~0.94 GiB at d6 and ~1.17 GiB at d8), then the same command again, which reads every probe back.
Probes are real trainer processes; on CPU there is no CUDA peak to compare, so the memory check is empty.

    python -m pytest tests/integration/test_capacity.py -q
"""

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.capacity import data as capdata
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
