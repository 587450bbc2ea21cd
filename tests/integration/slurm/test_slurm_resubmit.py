"""Resubmission on the real two-node cluster: a comparison with one failed run re-runs only that run (the
ok one is kept, untouched), and a run that ended `timeout` continues from its checkpoint.

    python -m pytest tests/integration/slurm/test_slurm_resubmit.py -q
"""

import json
import os
import signal
from pathlib import Path

import pytest

from bench import cli
from bench.contract import read_run_json
from tests.integration.slurm.test_slurm_sweeps import TINY, _trainer_pid, submit_and_wait

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def wait(sweep: Path, timeout: int = 400) -> int:
    return cli.main(["status", str(sweep), "--wait", "--poll=2", f"--timeout={timeout}"])


def test_a_resubmitted_comparison_re_runs_only_its_failed_run(slurm_cluster, tiny_base_dir, tmp_path, capsys):
    sweep = tmp_path / "cmp"
    assert cli.main(["submit", "--nodes=1", "--runtimes=bare", "--repeats=2", "--compare", *TINY,
                     "--num_iterations=60", f"--base-dir={tiny_base_dir}", f"--out={sweep}"]) == 0
    os.kill(_trainer_pid(sweep / "n1-bare-r1"), signal.SIGKILL)  # a crashed rank in the first run
    assert wait(sweep) == 1
    first, second = read_run_json(sweep / "n1-bare-r1"), read_run_json(sweep / "n1-bare-r2")
    assert (first["status"], second["status"]) == ("failed", "ok"), (first["message"], second["message"])
    kept_log = (sweep / "n1-bare-r2" / "metrics.jsonl").read_bytes()

    capsys.readouterr()
    assert cli.main(["status", str(sweep), "--resubmit-failed"]) == 0
    assert "kept n1-bare-r2" in capsys.readouterr().out
    assert wait(sweep) == 0
    first, again = read_run_json(sweep / "n1-bare-r1"), read_run_json(sweep / "n1-bare-r2")
    assert first["status"] == "ok" and [a["status"] for a in first["attempts"]] == ["failed"]
    assert again == second  # the ok run was neither reset nor run again
    assert (sweep / "n1-bare-r2" / "metrics.jsonl").read_bytes() == kept_log
    assert not (sweep / "n1-bare-r2" / "attempts").exists()


def test_a_resubmitted_timeout_continues_from_its_checkpoint(slurm_cluster, tiny_base_dir, tmp_path, capsys):
    sweep = tmp_path / "limited"
    code = submit_and_wait(sweep, tiny_base_dir, "--nodes=1", "--runtimes=bare", *TINY, "--num_iterations=1000000",
                           "--time=1", timeout=150)
    assert code == 1
    run = read_run_json(sweep / "n1-bare-r1")
    assert run["status"] == "timeout" and run["checkpoint"]["step"] > 0, run["message"]
    step = run["checkpoint"]["step"]

    capsys.readouterr()
    assert cli.main(["status", str(sweep), "--resubmit-failed"]) == 0
    assert f"resumes from its checkpoint of step {step}" in capsys.readouterr().out
    wait(sweep, timeout=150)  # the resumed run meets the same limit again; what matters is where it started
    resumed = read_run_json(sweep / "n1-bare-r1")
    assert resumed["launch"]["resume_from_step"] == step
    assert [a["status"] for a in resumed["attempts"]] == ["timeout"]
    steps = [e["step"] for e in events(sweep / "n1-bare-r1") if e["event"] == "step"]
    assert steps and min(steps) >= step, (step, steps[:3])  # not from step 0
