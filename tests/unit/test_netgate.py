"""The network gate on real NCCL INFO logs of an H200 host (tests/assets/nccl): a run across nodes whose NCCL
chose TCP sockets on a Slingshot site is stopped; one node, the expected network, or an allowed one is not."""

from pathlib import Path

from bench import nccl_log, netgate

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "nccl"
SOCKET = nccl_log.parse_file(str(ASSETS / "h200-1gpu-Socket.log"))


def test_sockets_between_nodes_on_a_slingshot_site_stop_the_run():
    why = netgate.check(SOCKET, nodes=2, expected="AWS Libfabric", setup="CE's aws_ofi_nccl hook")
    assert why is not None
    assert "'Socket'" in why and "'AWS Libfabric'" in why
    assert "Using network Socket" in why  # NCCL's own line is the evidence
    assert "CE's aws_ofi_nccl hook" in why and "--allow-network" in why


def test_what_is_not_judged():
    assert netgate.check(SOCKET, nodes=1, expected="AWS Libfabric") is None  # within a node the network is unused
    assert netgate.check(SOCKET, nodes=2, expected=None) is None  # the site says nothing
    assert netgate.check(None, nodes=2, expected="AWS Libfabric") is None  # no NCCL lines (gloo)
    assert netgate.check(SOCKET, nodes=2, expected="socket") is None  # names compare without case
    assert netgate.check(SOCKET, nodes=2, expected="AWS Libfabric", allowed="Socket") is None
    assert netgate.check(SOCKET, nodes=2, expected="IB", allowed=" socket ") is None  # --allow-network as typed


def test_the_transport_counts_when_no_network_line_was_kept():
    facts = {"net": None, "transports": {"P2P": 4, "NET/Socket": 2}, "evidence": []}
    assert netgate.chosen_network(facts) == "Socket"
    assert netgate.check(facts, nodes=4, expected="IB") is not None
    libfabric = {"net": "AWS Libfabric", "transports": {"NET/AWS Libfabric": 2}, "evidence": []}
    assert netgate.check(libfabric, nodes=4, expected="AWS Libfabric") is None


def test_check_env_reads_what_the_job_rendered():
    env = {netgate.ENV_EXPECT: "AWS Libfabric", netgate.ENV_SETUP: "podman-hpc --nccl"}
    assert "podman-hpc --nccl" in netgate.check_env(SOCKET, 2, env)
    assert netgate.check_env(SOCKET, 2, {**env, netgate.ENV_ALLOW: "Socket"}) is None
    assert netgate.check_env(SOCKET, 2, {}) is None


def test_a_log_cut_before_its_network_line_is_judged_by_the_whole_network_name():
    facts = nccl_log.parse(["nid001:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/AWS Libfabric/0"])
    assert netgate.chosen_network(facts) == "AWS Libfabric"
    assert netgate.check(facts, nodes=2, expected="AWS Libfabric") is None


def test_the_ofi_plugin_is_the_same_network_under_each_of_its_names():
    """aws-ofi-nccl 1.12+ says "Libfabric" (or "OFI" with NCCL_NET=OFI): a correct Slingshot run was stopped."""
    for name in ("Libfabric", "OFI", "AWS Libfabric", "aws libfabric"):
        facts = nccl_log.parse([f"nid001:1:1 [0] NCCL INFO Using network {name}"])
        assert netgate.check(facts, nodes=2, expected="AWS Libfabric") is None, name
    assert netgate.check(SOCKET, nodes=2, expected="Libfabric") is not None


def test_the_ib_plugin_of_ngc_images_is_the_infiniband_network():
    """NGC images load HPC-X's RDMA/SHARP plugin, which says "IBext" or "IBext_v8": a correct IB run was stopped."""
    for name in ("IBext", "IBext_v8", "IBext_v11", "IB"):
        facts = nccl_log.parse([f"gpu40:2899:2929 [0] NCCL INFO Using network {name}"])
        assert netgate.check(facts, nodes=2, expected="IB") is None, name
    assert netgate.check(SOCKET, nodes=2, expected="IB") is not None
    ibext = nccl_log.parse(["gpu40:2899:2929 [0] NCCL INFO Using network IBext_v8"])
    assert netgate.check(ibext, nodes=2, expected="AWS Libfabric") is not None


LOG = "/run/nccl/rank0.log"


def test_an_expected_gate_gets_nccls_init_and_net_lines_whatever_the_user_passed():
    """--env NCCL_DEBUG=WARN (or NCCL_DEBUG_SUBSYS=COLL) left NCCL without its "Using network" line: a multi-node
    run on the wrong network trained unverified instead of stopping."""
    gate = {netgate.ENV_EXPECT: "AWS Libfabric"}
    expect = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": LOG}
    assert netgate.debug_env({**gate, "NCCL_DEBUG": "WARN"}, LOG) == expect
    assert netgate.debug_env({**gate, "NCCL_DEBUG": "WARN", "NCCL_DEBUG_SUBSYS": "COLL"}, LOG) == expect
    assert netgate.debug_env(gate, LOG) == expect  # NCCL_DEBUG unset
    info = {**gate, "NCCL_DEBUG": "info"}
    assert netgate.debug_env({**info, "NCCL_DEBUG_SUBSYS": "COLL"}, LOG) == {"NCCL_DEBUG_SUBSYS": "COLL,INIT,NET",
                                                                          "NCCL_DEBUG_FILE": LOG}
    assert netgate.debug_env({**info, "NCCL_DEBUG_SUBSYS": "^NET,COLL"}, LOG)["NCCL_DEBUG_SUBSYS"] == "^COLL"
    assert netgate.debug_env({**info, "NCCL_DEBUG_SUBSYS": "^INIT,NET"}, LOG)["NCCL_DEBUG_SUBSYS"] == "ALL"
    for enough in ({}, {"NCCL_DEBUG_SUBSYS": "INIT,NET"}, {"NCCL_DEBUG_SUBSYS": "ALL"},
                   {"NCCL_DEBUG_SUBSYS": "^COLL"}):
        assert netgate.debug_env({**info, **enough}, LOG) == {"NCCL_DEBUG_FILE": LOG}
    own = {**gate, "NCCL_DEBUG": "TRACE", "NCCL_DEBUG_FILE": "/mine/%h.log"}  # the user's own file is kept
    assert netgate.debug_env(own, LOG) == {}


def test_without_a_gate_only_asked_for_lines_go_to_the_run_directory():
    assert netgate.debug_env({}, LOG) == {}
    assert netgate.debug_env({"NCCL_DEBUG": "WARN"}, LOG) == {"NCCL_DEBUG_FILE": LOG}
    assert netgate.debug_env({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/x"}, LOG) == {}


def test_a_multi_node_run_the_gate_could_not_judge_is_said_unverified():
    """No "Using network" line (NCCL_DEBUG=WARN, no debug file): the gate judged nothing and nothing said so."""
    env = {netgate.ENV_EXPECT: "AWS Libfabric"}
    quiet = nccl_log.parse(["host:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0"])
    assert "no \"Using network\" line" in netgate.unverified(quiet, 2, env)
    assert "'AWS Libfabric'" in netgate.unverified(None, 2, env)
    assert "no NCCL INFO line was read" in netgate.unverified(None, 2, env)
    assert netgate.unverified(SOCKET, 2, env) is None  # judged (and stopped by check)
    assert netgate.unverified(None, 1, env) is None  # one node: no network to judge
    assert netgate.unverified(None, 2, {}) is None  # no network expected
