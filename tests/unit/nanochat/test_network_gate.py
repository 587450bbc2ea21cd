"""The ranks agree on the network gate: a real NCCL INFO log of TCP sockets replayed into rank 1 alone (gloo
writes no NCCL log, so the log is staged through NCCL_DEBUG_FILE) stops both ranks, each with a reason."""

import json
from pathlib import Path

from tests.support.two_ranks import run_two_ranks

SOCKET_LOG = Path(__file__).resolve().parents[2] / "assets" / "nccl" / "h200-1gpu-Socket.log"

WORKER = f'''
import json, os, sys
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
os.environ["NANOCHAT_BENCH_EXPECT_NET"] = "AWS Libfabric"
if rank == 1:
    os.environ["NCCL_DEBUG_FILE"] = {str(SOCKET_LOG)!r}
from bench import nccl_log
from bench.nanochat.network_gate import wrong_network
why = wrong_network(nodes=2, ddp=True, device="cpu", facts=nccl_log.own_facts())
with open(sys.argv[1] + f".{{rank}}", "w") as f:
    json.dump(why, f)
dist.destroy_process_group()
'''


def test_both_ranks_stop_when_one_saw_sockets(tmp_path):
    out = run_two_ranks(tmp_path, WORKER)
    reasons = [json.loads(Path(f"{out}.{r}").read_text()) for r in (0, 1)]
    assert "'Socket'" in reasons[1] and "Using network Socket" in reasons[1]
    assert reasons[0] and "rank 1 saw" in reasons[0] and "nccl/rank1.log" in reasons[0]  # the rank to look at


def test_a_stopped_run_keeps_the_network_it_was_stopped_for(tmp_path, monkeypatch):
    """run.json's `network` was written only at the end of training, so a wrong_network run had none."""
    import pytest

    from bench.contract import read_run_json
    from bench.nanochat.network_gate import stop_on_wrong_network
    from bench.runside.runrecord import RunRecord
    from bench.netgate import WrongNetwork

    monkeypatch.setenv("NCCL_DEBUG_FILE", str(SOCKET_LOG))
    monkeypatch.setenv("NANOCHAT_BENCH_EXPECT_NET", "AWS Libfabric")
    record = RunRecord(0, str(tmp_path))
    with pytest.raises(WrongNetwork):
        stop_on_wrong_network(2, False, "cpu", record, "nccl")
    network = read_run_json(tmp_path)["network"]
    assert network["backend"] == "nccl" and network["net"] == "Socket"
    assert any("Using network Socket" in line for line in network["evidence"])
    record.close()


STAGE = '''
import json, os, sys
from bench.nanochat import stagerun

def parse(argv):  # the stage's settings are read after the NCCL variables are set: report them as --help would
    with open(sys.argv[1], "w") as f:
        json.dump({k: v for k, v in os.environ.items() if k.startswith("NCCL_DEBUG")}, f)
    raise SystemExit(0)

stagerun.main(None, parse, [])
'''


def test_a_stage_expecting_a_network_makes_nccl_write_the_lines_the_gate_reads(tmp_path):
    """--env NCCL_DEBUG=WARN NCCL_DEBUG_SUBSYS=COLL on a job with a gate: NCCL wrote no "Using network" line and a
    multi-node run on the wrong network trained unverified."""
    import os
    import subprocess
    import sys

    run_dir, out = tmp_path / "run", tmp_path / "env.json"
    env = {**os.environ, "NANOCHAT_BENCH_RUN_DIR": str(run_dir), "NANOCHAT_BENCH_EXPECT_NET": "AWS Libfabric",
           "NCCL_DEBUG": "WARN", "NCCL_DEBUG_SUBSYS": "COLL"}
    env.pop("NCCL_DEBUG_FILE", None)
    subprocess.run([sys.executable, "-c", STAGE, str(out)], env=env, check=True, timeout=120)
    assert json.loads(out.read_text()) == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
                                           "NCCL_DEBUG_FILE": str(run_dir / "nccl" / "rank0.log")}
    assert (run_dir / "nccl").is_dir()


def test_run_json_says_when_a_multi_node_runs_network_was_not_verified(monkeypatch):
    from bench import netgate
    from bench.contract import SCHEMA_VERSION, RunManifest
    from bench.nanochat.network_gate import network_facts

    monkeypatch.setenv(netgate.ENV_EXPECT, "IB")
    facts = {"nccl_version": "2.28.9", "net": None, "transports": {}, "evidence": []}
    network = network_facts("nccl", facts, nodes=2)
    assert network["unverified"].startswith("the network between nodes was not checked against the site's 'IB'")
    manifest = RunManifest.from_dict({"schema_version": SCHEMA_VERSION, "status": "ok", "network": network})
    assert manifest.notes == [] and manifest.network.unverified == network["unverified"]  # a field of the contract
    assert "unverified" not in network_facts("nccl", facts, nodes=1)
    assert "unverified" not in network_facts("nccl", {**facts, "net": "IB"}, nodes=2)
