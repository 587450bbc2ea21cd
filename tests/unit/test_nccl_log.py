"""NCCL's INFO lines read into run.json's network facts, on real logs of one H200 (tests/assets/nccl/: the
pre-flight of `python -m torch.distributed.run --standalone --nproc_per_node=1 -m bench.nanochat.preflight`
with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET, as is, NCCL_NET=Socket, and NCCL_P2P_DISABLE=1
NCCL_SHM_DISABLE=1; and rank 0's NCCL_DEBUG_FILE of a d20 training run, torch 2.11, NCCL 2.28.9).

    python -m pytest tests/unit/test_nccl_log.py -q
"""

from pathlib import Path

import pytest

from bench import nccl_log

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "nccl"


@pytest.mark.parametrize("name", ["default", "Socket", "nop2p", "d20-rank0"])
def test_real_one_gpu_logs(name):
    facts = nccl_log.parse_file(str(ASSETS / f"h200-1gpu-{name}.log"))
    assert facts["nccl_version"] == "2.28.9+cuda13.0"
    assert facts["net"] == "Socket"  # the machine has no InfiniBand or Slingshot: NCCL's socket transport
    assert facts["net_plugin"] == "Could not find: libnccl-net.so"  # no external plugin in the image
    assert facts["net_provider"] is None and facts["channels"] == 64
    assert facts["transports"] == {}  # one rank: no connection to another GPU
    assert any("Using network Socket" in line for line in facts["evidence"])
    # every fact has the line it came from
    assert any("NCCL version 2.28.9" in line for line in facts["evidence"])


def test_sockets_are_named_with_the_line_that_proves_it():
    facts = nccl_log.parse_file(str(ASSETS / "h200-1gpu-Socket.log"))
    assert "Using network Socket" in nccl_log.over_sockets(facts)
    assert nccl_log.over_sockets({"net": "AWS Libfabric", "transports": {"NET/AWS Libfabric": 4}}) is None


def test_no_file_no_facts(tmp_path):
    assert nccl_log.parse_file(str(tmp_path / "none.log")) is None
    assert nccl_log.parse(["a line without the library's name"])["nccl_version"] is None


def test_the_ofi_plugin_and_libfabric_versions_are_read():
    """aws-ofi-nccl's own banner lines (no Slingshot host here: the lines are written as the plugin prints them)."""
    from bench import nccl_log

    facts = nccl_log.parse([
        "nid001:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.14.0",
        "nid001:1:1 [0] NCCL INFO NET/OFI Using Libfabric version 1.22",
        "nid001:1:1 [0] NCCL INFO NET/OFI Selected provider is cxi, fabric is cxi (found 4 nics)",
        "nid001:1:1 [0] NCCL INFO Using network AWS Libfabric",
    ])
    assert (facts["ofi_plugin_version"], facts["libfabric_version"]) == ("1.14.0", "1.22")
    assert facts["net"] == "AWS Libfabric" and facts["net_provider"] == "cxi"


def test_a_network_name_with_a_space_is_kept_whole_in_the_transports():
    """NCCL names a NET connection's network as the plugin spells it, "AWS Libfabric" with its space: read as
    "NET/AWS", a log cut before "Using network" had the gate stop a run on the site's own network."""
    facts = nccl_log.parse([
        "nid001:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [receive] via NET/AWS Libfabric/0/GDRDMA",
        "nid001:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 4[0] [send] via NET/IB/1(3)/GDRDMA",
        "nid001:1:1 [0] NCCL INFO Channel 02/0 : 0[0] -> 4[0] [send] via NET/Socket/0",
        "nid001:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "nid001:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
    ])
    assert facts["transports"] == {"NET/AWS Libfabric": 1, "NET/IB": 1, "NET/Socket": 1, "P2P": 1, "SHM": 1}


def test_the_debug_file_is_found_where_nccl_wrote_it(tmp_path, monkeypatch):
    """NCCL_DEBUG_FILE=.../nccl.%h.%p (the usual per-process form) was opened as written: no such file, so the
    network gate and run.json's network section silently had nothing."""
    assert nccl_log.debug_file("/r/nccl.%h.%p.log", host="nid001", pid=42) == "/r/nccl.nid001.42.log"
    assert nccl_log.debug_file("/r/100%%-%x", host="h", pid=1) == "/r/100%-%x"  # others as NCCL leaves them
    import os
    import socket

    log = tmp_path / f"nccl.{socket.gethostname().split('.')[0]}.{os.getpid()}.log"
    log.write_text("nid001:1:1 [0] NCCL INFO Using network Socket\n")
    monkeypatch.setenv("NCCL_DEBUG_FILE", str(tmp_path / "nccl.%h.%p.log"))
    assert nccl_log.own_facts()["net"] == "Socket"
    monkeypatch.delenv("NCCL_DEBUG_FILE")
    assert nccl_log.own_facts() is None
