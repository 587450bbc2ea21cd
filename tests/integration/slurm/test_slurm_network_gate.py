"""The network gate on the two-node test cluster: a 2-node run whose NCCL log says TCP sockets, on a site
that expects Slingshot's "AWS Libfabric", stops as `wrong_network` before its pre-flight, in seconds.

The ranks here are CPU ranks over gloo, which writes no NCCL log; so a real NCCL INFO log of an H200
host whose NCCL chose sockets (tests/assets/nccl/h200-1gpu-Socket.log) is replayed into the gate through
NCCL_DEBUG_FILE, and the site's expectation is passed as the job renders it for a GPU run on Alps.

    python -m pytest tests/integration/slurm/test_slurm_network_gate.py -q
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from bench import netgate

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SOCKET_LOG = Path(__file__).resolve().parents[2] / "assets" / "nccl" / "h200-1gpu-Socket.log"
TINY = ["--depth=2", "--max_seq_len=64", "--device_batch_size=2", "--num_iterations=200", "--eval_tokens=512",
        "--device_type=cpu"]


def test_a_run_across_nodes_on_sockets_stops_as_wrong_network(slurm_cluster, tiny_base_dir, tmp_path):
    log = tmp_path / "nccl-socket.log"  # on the shared filesystem of both "nodes"
    log.write_text(SOCKET_LOG.read_text())
    env = {**os.environ, "NANOCHAT_BASE_DIR": str(tiny_base_dir), "OMP_NUM_THREADS": "1"}
    env.pop("NANOCHAT_VAL_FILES_K", None)
    command = ["nanochat-bench", "submit", "--nodes=2", "--gpus-per-node=2", "--runtimes=bare", *TINY,
               f"--env={netgate.ENV_EXPECT}=AWS Libfabric", f"--env={netgate.ENV_SETUP}=alps/bare: test",
               f"--env=NCCL_DEBUG_FILE={log}", "--name=gate"]
    p = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run(["nanochat-bench", "status", "runs/gate", "--wait", "--poll=1", "--timeout=300"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=360)
    run = json.loads((tmp_path / "runs" / "gate" / "n2-bare-r1" / "run.json").read_text())
    assert run["status"] == "wrong_network", (run["status"], run.get("message"), p.stdout[-2000:])
    assert "'Socket'" in run["message"] and "Using network Socket" in run["message"]
    events = [json.loads(line) for line in (tmp_path / "runs" / "gate" / "n2-bare-r1" / "metrics.jsonl")
              .read_text().splitlines()]
    names = [e["event"] for e in events]
    assert "dist_init" in names and "preflight" not in names and "step" not in names  # before any collective
    t_init = next(e["t"] for e in events if e["event"] == "dist_init")
    assert run["finished_at"] - t_init < 30, "the gate stops the run within seconds of the process group"
    assert time.time() - t_init < 600
