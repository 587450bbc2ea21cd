"""The speedrun flow as one job per point on the real two-node cluster. Under bare: the tokenizer trained in
the job (there is none), then the registered stages in turn on 2 nodes. The eval bundle is missing (submitted
with --no-data-check, as from a login node that does not see the nodes' data), so
base_eval fails, the flow ends there naming it, and the later stages are recorded as not run; staged, the
resubmission keeps the stages already ok (untouched) and runs the rest, every stage ending ok. Under podman
(the project's image): every stage ok in containers on both nodes. Each flow's report has a section per stage.

    flock /tmp/slurm-tests.lock python -m pytest tests/integration/slurm/test_slurm_flow.py -q
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from bench import cli, workloads
from bench.analysis.collect import collect
from bench.analysis.report import write_report
from bench.contract import read_run_json
from bench.launch.flow import FLOW_JSON, FLOWS

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STAGES = [s.name for s in FLOWS["speedrun"] if s.workload in workloads.names()]
TINY = ["--gpus-per-node=1", "--depth=2", "--max_seq_len=256", "--device_batch_size=2", "--num_iterations=4",
        "--eval_every=-1", "--device_type=cpu", "--no-exclusive", "--site=test-cluster", "--tokenizer-arg=vocab_size=512"]
STAGE_ARGS = {
    "base_loss": ["device_batch_size=2", "split_tokens=1024"],
    "base_eval": ["max_per_task=11"],
    "mid_train": ["num_iterations=3", "max_seq_len=256", "device_batch_size=2", "eval_every=-1"],
    "chat_eval_mid": ["max_problems=2", "batch_size=2", "max_new_tokens=8", "task_name=ARC-Easy|GSM8K"],
    "chat_sft": ["num_iterations=3", "device_batch_size=2", "eval_every=-1", "eval_metrics_every=-1"],
    "chat_eval_sft": ["max_problems=2", "batch_size=2", "max_new_tokens=8", "task_name=ARC-Easy|GSM8K"],
}


def wait(sweep, timeout: int = 900) -> int:
    return cli.main(["status", str(sweep), "--wait", "--poll=3", f"--timeout={timeout}"])


def stage_args() -> list[str]:
    return [f"--stage-arg={s}:{a}" for s in STAGES for a in STAGE_ARGS.get(s, [])]


def assert_a_section_per_stage(point, out) -> None:
    """collect and report over the point: one row per stage, a report section per stage, the time to a chat model."""
    table = collect([point]).table
    assert set(table["stage"].dropna()) == set(STAGES)
    write_report(table, out)
    report = (out / "report.md").read_text()
    assert all(f"### Stage {stage} (" in report for stage in STAGES), report
    assert "### Time to a chat model" in report


@pytest.mark.skipif(not {"base_eval", "mid_train"} <= set(STAGES), reason="needs base_eval and a stage after it")
def test_a_flow_job_stops_at_its_failed_stage_and_its_resubmission_resumes_there(slurm_cluster, tiny_base_dir,
                                                                               tmp_path, capsys):
    base = tmp_path / "base"
    shutil.copytree(tiny_base_dir, base, ignore=shutil.ignore_patterns("tokenizer"))  # the job trains it
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base))
    subprocess.run([sys.executable, "-m", "bench.cli", "data", "generate", "--chat"], env=env, check=True,
                   capture_output=True)
    sweep = tmp_path / "speedrun"
    assert cli.main(["submit", "--flow=speedrun", "--nodes=2", "--runtimes=bare", *TINY, *stage_args(),
                     f"--base-dir={base}", f"--out={sweep}"]) == 1  # refused: this host sees the missing bundle
    assert not sweep.exists()
    assert cli.main(["submit", "--flow=speedrun", "--nodes=2", "--runtimes=bare", *TINY, *stage_args(),
                     f"--base-dir={base}", f"--out={sweep}", "--no-data-check"]) == 0
    assert wait(sweep) == 1
    point = sweep / "n2-bare-r1"
    runs = {s: read_run_json(point / s) for s in STAGES}
    at = STAGES.index("base_eval")
    assert all(runs[s]["status"] == "ok" for s in STAGES[:at]), {s: runs[s]["message"] for s in STAGES[:at]}
    assert runs["base_eval"]["status"] != "ok" and "eval_bundle" in runs["base_eval"]["message"]
    for later in STAGES[at + 1:]:
        assert runs[later]["status"] == "cancelled" and "stage base_eval" in runs[later]["message"]
    log = next(point.glob("slurm-*.log")).read_text()
    assert "flow speedrun stopped at base_eval" in log
    assert (base / "tokenizer" / "tokenizer.pkl").is_file() and (point / "tokenizer.log").is_file()
    record = json.loads((point / FLOW_JSON).read_text())
    assert record["model_tag"].startswith("speedrun-n2-bare-r1-") and [s["name"] for s in record["stages"]] == STAGES
    kept = {s: (point / s / "metrics.jsonl").read_bytes() for s in STAGES[:at]}

    subprocess.run([sys.executable, "-m", "bench.cli", "data", "generate", "--eval-bundle"], env=env, check=True,
                   capture_output=True)
    capsys.readouterr()
    assert cli.main(["status", str(sweep), "--resubmit-failed"]) == 0
    out = capsys.readouterr().out
    assert "kept " + ", ".join(f"n2-bare-r1/{s}" for s in STAGES[:at]) in out
    assert wait(sweep) == 0
    again = {s: read_run_json(point / s) for s in STAGES}
    assert all(again[s]["status"] == "ok" for s in STAGES), {s: again[s]["message"] for s in STAGES}
    assert all(again[s] == runs[s] and (point / s / "metrics.jsonl").read_bytes() == kept[s] for s in STAGES[:at])
    assert [a["status"] for a in again["base_eval"]["attempts"]] == [runs["base_eval"]["status"]]
    assert all(again[s]["nodes"] == 2 and again[s]["stage"] == s for s in STAGES)
    if "chat_eval_sft" in STAGES:
        assert again["chat_eval_sft"]["config"]["source"] == "sft" and "ARC-Easy" in again["chat_eval_sft"]["scores"]
    assert_a_section_per_stage(point, tmp_path / "report")


def test_the_flow_under_podman_runs_every_stage_in_containers_on_both_nodes(slurm_cluster, tiny_base_dir,
                                                                           podman_image, tmp_path, monkeypatch):
    base = tmp_path / "base"
    shutil.copytree(tiny_base_dir, base)
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base))
    for what in ("--chat", "--eval-bundle"):
        subprocess.run([sys.executable, "-m", "bench.cli", "data", "generate", what], env=env, check=True,
                       capture_output=True)
    # as containers/podman-local.sh (runc, no default ulimits), and the host's PID namespace: the two "nodes"
    # are one host, where both torchrun agents would otherwise be PID 1 on one host name (one rendezvous member)
    conf = tmp_path / "containers.conf"
    conf.write_text('[containers]\ndefault_ulimits = []\npidns = "host"\n\n[engine]\nruntime = "runc"\n')
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))  # sbatch passes the environment on to the job
    sweep = tmp_path / "speedrun"
    assert cli.main(["submit", "--flow=speedrun", "--nodes=2", "--runtimes=podman", *TINY, *stage_args(),
                     f"--image=podman={podman_image}", f"--base-dir={base}", f"--out={sweep}"]) == 0
    assert wait(sweep) == 0
    point = sweep / "n2-podman-r1"
    runs = {s: read_run_json(point / s) for s in STAGES}
    assert all(runs[s]["status"] == "ok" for s in STAGES), {s: runs[s]["message"] for s in STAGES}
    assert all(runs[s]["runtime"] == "podman" and runs[s]["nodes"] == 2 for s in STAGES)
    assert all(runs[s]["image"]["reference"] == podman_image for s in STAGES)
    assert_a_section_per_stage(point, tmp_path / "report")
