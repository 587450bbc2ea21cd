"""Sweeps on the real two-node cluster: weak and strong scaling to completion, a time limit that ends a
run as `timeout` with a checkpoint, and a runtime comparison (bare + the project's image under podman,
two repeats) that alternates runtimes, survives a run that fails, and passes its values into an image
that sets others.

    python -m pytest tests/integration/slurm/test_slurm_sweeps.py -q
"""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from bench import cli, paths
from bench.analysis.collect import collect
from bench.analysis.report import write_report
from bench.contract import read_run_json
from tests.support.containers import podman

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TINY = ["--gpus-per-node=2", "--depth=2", "--max_seq_len=64", "--device_batch_size=2", "--num_iterations=6",
        "--eval_every=-1", "--device_type=cpu", "--no-exclusive"]


def submit_and_wait(sweep_dir: Path, tiny_base_dir, *argv: str, timeout: int = 300) -> int:
    assert cli.main(["submit", *argv, f"--base-dir={tiny_base_dir}", f"--out={sweep_dir}"]) == 0
    return cli.main(["status", str(sweep_dir), "--wait", "--poll=2", f"--timeout={timeout}"])


def test_weak_sweep_grows_the_total_batch_and_strong_keeps_it(slurm_cluster, tiny_base_dir, tmp_path, capsys):
    assert submit_and_wait(tmp_path / "weak", tiny_base_dir, "--nodes=1,2", "--runtimes=bare", *TINY) == 0
    assert submit_and_wait(tmp_path / "strong", tiny_base_dir, "--nodes=1,2", "--runtimes=bare", *TINY,
                           "--scaling=strong", "--total_batch_size=512") == 0
    capsys.readouterr()
    table = collect([tmp_path]).table
    assert set(table["status"]) == {"ok"}, table[["source", "status", "message"]]
    by = {(r.sweep_id, int(r.world_size)): (int(r.total_batch_size), int(r.device_batch_size))
          for r in table.itertuples()}
    assert by == {("weak", 2): (2 * 64 * 2, 2), ("weak", 4): (2 * 64 * 4, 2),  # device batch x seq x ranks
                  ("strong", 2): (512, 2), ("strong", 4): (512, 2)}
    for run_id in ("n1-bare-r1", "n2-bare-r1"):
        weak, strong = read_run_json(tmp_path / "weak" / run_id), read_run_json(tmp_path / "strong" / run_id)
        assert (weak["scaling"], strong["scaling"]) == ("weak", "strong")
        assert weak["val_files_k"] == 1  # planned from the shards of the base dir: 16 validation row groups
        assert weak["grad_accum"] == 1 and strong["grad_accum"] == (2 if run_id == "n1-bare-r1" else 1)
    # the report draws each sweep as one curve of its own kind: weak per rank, strong as speedup
    write_report(table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    figures = {p.name.rsplit("-", 1)[1] for p in (tmp_path / "report" / "figures").glob("*.png")}
    assert "weak scaling, 2 x 64 tokens per rank" in md and "strong scaling, batch 512" in md
    assert {"per_gpu.png", "speedup.png", "startup.png"} <= figures
    assert "| bare | 4 | 2 |" in re.sub(r" {2,}", " ", md)  # 4 ranks on 2 nodes, counted as ranks (CPU)


def test_a_run_longer_than_its_time_limit_ends_as_timeout_with_a_checkpoint(slurm_cluster, tiny_base_dir, tmp_path,
                                                                             capsys):
    """--time 1: srun would stop the step at 60 s; the trainer's deadline (30 s before) saves and stops."""
    sweep = tmp_path / "limited"
    code = submit_and_wait(sweep, tiny_base_dir, "--nodes=1", "--runtimes=bare", *TINY, "--num_iterations=1000000",
                           "--time=1", timeout=150)
    capsys.readouterr()
    assert code == 1  # a timeout is a run to resubmit
    run = read_run_json(sweep / "n1-bare-r1")
    assert run["status"] == "timeout", run["message"]
    step = int(run["message"].split("stopped at step ")[1].split()[0])
    assert 0 < step < 1_000_000 and f"--resume_from_step={step}" in run["message"]
    # the run's own tag, <sweep>-<hash of the sweep's path>/<run>, named for resuming
    tag = f"{paths.folder_tag('limited', os.path.abspath(sweep))}/n1-bare-r1"
    assert f"--model_tag={tag}" in run["message"], run["message"]
    checkpoint = tiny_base_dir / "base_checkpoints" / tag
    assert (checkpoint / f"model_{step:06d}.pt").is_file() and (checkpoint / f"meta_{step:06d}.json").is_file()


def _pids_of(run_dir: Path) -> list[int]:
    """Processes whose environment names this run directory: its ranks (and torchrun), inside podman too."""
    needle = f"NANOCHAT_BENCH_RUN_DIR={run_dir}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and needle in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def _trainer_pid(run_dir: Path, timeout: float = 120) -> int:
    """A rank of the run, once it has taken a step."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        metrics = run_dir / "metrics.jsonl"
        if metrics.exists() and '"event": "step"' in metrics.read_text():
            ranks = [p for p in _pids_of(run_dir) if b"bench.nanochat.train" in Path(f"/proc/{p}/cmdline").read_bytes()
                     and b"bench.launch.elastic" not in Path(f"/proc/{p}/cmdline").read_bytes()]
            if ranks:
                return ranks[-1]
        time.sleep(0.5)
    raise AssertionError(f"{run_dir} never took a step")


def test_runtime_comparison_alternates_survives_a_failure_and_beats_the_images_env(
        slurm_cluster, tiny_base_dir, podman_image, tmp_path, monkeypatch):
    """bare and podman, 2 repeats, one allocation. The podman image sets NANOCHAT_BASE_DIR, the run directory
    and K to wrong values: the job's literal values must win, or its runs cannot find their data. The first
    bare run is killed mid-run (a crashed rank): the job must go on with the other three."""
    hostile = "localhost/nanochat-bench:wrong-env"
    (tmp_path / "Containerfile").write_text(
        f"FROM {podman_image}\nENV NANOCHAT_BASE_DIR=/nowhere NANOCHAT_VAL_FILES_K=7 NANOCHAT_BENCH_RUN_DIR=/tmp/x\n")
    subprocess.run(podman("build", "-q", "-t", hostile, str(tmp_path)), check=True, capture_output=True)
    conf = tmp_path / "containers.conf"  # as containers/podman-local.sh: runc, no default ulimits
    conf.write_text('[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n')
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))  # sbatch passes the environment on to the job
    out = tmp_path / "cmp"
    assert cli.main(["render", "compare", "--nodes=1", "--runtimes=bare,podman", "--repeats=2", *TINY,
                     "--num_iterations=40", f"--image=podman={hostile}", f"--base-dir={tiny_base_dir}",
                     f"--out={out}"]) == 0
    job_id = slurm_cluster.run(["sbatch", "--parsable", "job.sbatch"], cwd=out / "jobs" / "compare-n1").stdout.strip()
    os.kill(_trainer_pid(out / "n1-bare-r1"), signal.SIGKILL)
    deadline = time.time() + 400
    while time.time() < deadline and "JobState=COMPLETED" not in (state := slurm_cluster.run(
            ["scontrol", "show", "job", "-o", job_id]).stdout) and "JobState=FAILED" not in state:
        time.sleep(2)
    runs = {r: read_run_json(out / r) for r in ("n1-bare-r1", "n1-podman-r1", "n1-bare-r2", "n1-podman-r2")}
    assert runs["n1-bare-r1"]["status"] == "failed", runs["n1-bare-r1"]
    for name in ("n1-podman-r1", "n1-bare-r2", "n1-podman-r2"):
        assert runs[name]["status"] == "ok", (name, runs[name]["message"])
        assert runs[name]["slurm"]["job_id"] == job_id
    starts = sorted(runs, key=lambda r: runs[r]["launch"]["t0"])
    assert starts == ["n1-bare-r1", "n1-podman-r1", "n1-bare-r2", "n1-podman-r2"]  # A B A B, not A A B B
    assert runs["n1-podman-r2"]["image"]["reference"] == hostile and runs["n1-podman-r2"]["runtime"] == "podman"
    assert json.loads((out / "n1-podman-r2" / "metrics.jsonl").read_text().splitlines()[-1])["event"] == "end"
