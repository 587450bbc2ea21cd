"""The network gate: a multi-node run on another network than the site's stops in seconds.

A runtime that lacks the site's network plugin does not fail: NCCL quietly falls back to TCP sockets and the
run trains, 20x slower between nodes (CSCS measured ~122 vs ~5.4 GB/s all_reduce busbw with and without the
CXI hook). Measured as "container overhead", that misconfiguration would be the sweep's headline. So as soon
as the process group is up (bound to its GPU, NCCL sets its communicator up there and logs "Using network X"),
before the communication pre-flight, each rank compares NCCL's choice (bench/nccl_log.py) with the one the
job expects, and the ranks agree to stop together with status `wrong_network`.

The job says what it expects through two variables, rendered from the site profile (bench/sites):
  NANOCHAT_BENCH_EXPECT_NET   the network NCCL must choose between nodes ("AWS Libfabric", "IB"); unset or
                              empty: no gate
  NANOCHAT_BENCH_NET_SETUP    one line: how this runtime was set up for that network (quoted in the message)
and `--allow-network NAME` (rendered as NANOCHAT_BENCH_ALLOW_NET) measures another network on purpose.
Whenever a gate is expected the trainer makes NCCL write its INIT and NET INFO lines (debug_env), whatever
NCCL_DEBUG the user passed: without them there is nothing to judge. Standard library only.
"""

import os
import re
import shlex
from typing import Mapping, Optional

from bench.errors import BenchError

ENV_EXPECT = "NANOCHAT_BENCH_EXPECT_NET"
ENV_SETUP = "NANOCHAT_BENCH_NET_SETUP"
ENV_ALLOW = "NANOCHAT_BENCH_ALLOW_NET"


class WrongNetwork(BenchError):
    """The run's NCCL chose another network than the site's: the run ends as `wrong_network`."""


def chosen_network(facts: Mapping[str, object]) -> Optional[str]:
    """The network NCCL took between nodes: its "Using network X" line, else the NET/ transport it used."""
    net = facts.get("net")
    if net:
        return str(net)
    return next((str(t).removeprefix("NET/") for t in facts.get("transports") or {} if str(t).startswith("NET/")),
                None)


# aws-ofi-nccl names itself "Libfabric" since 1.12, "AWS Libfabric" before and whenever NCCL_NET says so, and
# "OFI" when NCCL_NET says that: one plugin, one network (its nvidia_plugin_name_fixup). The RDMA/SHARP plugin
# that NGC images load from HPC-X (nccl_rdma_sharp_plugin) is NCCL's IB transport as a plugin: "IBext", or
# "IBext_v8" and so on with the plugin API version it was built for, all the network "IB" names
_SAME_NETWORK = {"aws libfabric": "libfabric", "ofi": "libfabric", "ibext": "ib"}
_API_VERSION = re.compile(r"_v\d+$")  # IBext_v8: the plugin API a plugin was built for, not another network


def same_network(chosen: str, wanted: str) -> bool:
    """Whether two of NCCL's names (a "Using network" line's, NCCL_NET's, a site's) are one network."""
    def key(name: str) -> str:
        name = _API_VERSION.sub("", name.strip().lower())
        return _SAME_NETWORK.get(name, name)
    return key(chosen) == key(wanted)


def check(facts: Optional[Mapping[str, object]], *, nodes: int, expected: Optional[str],
          allowed: Optional[str] = None, setup: str = "") -> Optional[str]:
    """Why the run must stop (one line), or None when it may go on.

    Only a run across nodes is judged (within a node NCCL uses NVLink/PCIe/shared memory whatever the
    network), only when the job expects a network, and only on what NCCL said: without NCCL INFO lines
    (gloo, NCCL_DEBUG off) there is nothing to judge.
    """
    if nodes <= 1 or not expected or not facts:
        return None
    chosen = chosen_network(facts)
    if chosen is None or same_network(chosen, expected) or (allowed and same_network(chosen, allowed)):
        return None
    proof = next((line for line in facts.get("evidence") or [] if chosen in line), None)
    how = f"; the runtime's network set-up: {setup}" if setup else ""
    said = f" (NCCL: {proof.strip()})" if proof else ""
    return (f"NCCL chose the network {chosen!r} between nodes, not the site's {expected!r}{said}{how}; "
            f"stopped before training, since its throughput would measure that network and not the runtime "
            f"(to measure it on purpose: --allow-network {shlex.quote(chosen)})")


# NCCL_DEBUG levels at which NCCL writes INFO lines (NCCL's ABORT and TRACE are above INFO); unset or another
# level (NONE, VERSION, WARN) writes none, so not "Using network X"
_INFO_LEVELS = ("INFO", "ABORT", "TRACE")
_GATE_SUBSYS = ("INIT", "NET")  # the subsystems of the lines the gate reads (bench/nccl_log.py)


def debug_env(environ: Mapping[str, str], log_file: str) -> dict[str, str]:
    """The NCCL_DEBUG* variables a rank sets before NCCL starts, so that its lines reach a file: `log_file`
    unless NCCL_DEBUG_FILE names one. With a gate expected, NCCL's INIT and NET INFO lines are added to what
    the user asked for (a level below INFO is raised to INFO of those two alone: another subsystem they named
    would log, at INFO, every collective); without one, only the file, and only when NCCL_DEBUG asks for lines.
    NCCL writes all its lines to that file, none to the console, either way."""
    level = environ.get("NCCL_DEBUG", "")
    out = {}
    if environ.get(ENV_EXPECT):
        if level.strip().upper() not in _INFO_LEVELS:
            out = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": ",".join(_GATE_SUBSYS)}
        elif (subsys := _with_gate_subsys(environ.get("NCCL_DEBUG_SUBSYS", ""))) is not None:
            out = {"NCCL_DEBUG_SUBSYS": subsys}
    elif not level:
        return {}
    if "NCCL_DEBUG_FILE" not in environ:
        out["NCCL_DEBUG_FILE"] = log_file
    return out


def _with_gate_subsys(subsys: str) -> Optional[str]:
    """NCCL_DEBUG_SUBSYS `subsys` with INIT and NET in it (its other subsystems kept), or None when they are
    (unset: NCCL's default, INIT,BOOTSTRAP,ENV, has INIT, under which it says "Using network X")."""
    names = [n.strip() for n in subsys.strip().lstrip("^").split(",") if n.strip()]
    if not names:
        return None
    if subsys.strip().startswith("^"):  # every subsystem but those named
        kept = [n for n in names if n.upper() not in _GATE_SUBSYS]
        return None if kept == names else "^" + ",".join(kept) if kept else "ALL"
    upper = {n.upper() for n in names}
    missing = [] if "ALL" in upper else [n for n in _GATE_SUBSYS if n not in upper]
    return ",".join(names + missing) if missing else None


def unverified(facts: Optional[Mapping[str, object]], nodes: int,
               environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """Why a run across nodes that expects a network was not judged (one line: run.json network.unverified),
    or None when it was, or need not be: NCCL said no network between nodes, or no NCCL line was read."""
    expected = environ.get(ENV_EXPECT)
    if nodes <= 1 or not expected or (facts and chosen_network(facts)):
        return None
    said = ("NCCL's INFO lines name no network between nodes (no \"Using network\" line)" if facts else
            "no NCCL INFO line was read (no log at NCCL_DEBUG_FILE, or not the NCCL backend)")
    return f"the network between nodes was not checked against the site's {expected!r}: {said}"


def check_env(facts: Optional[Mapping[str, object]], nodes: int,
              environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """check() with what the job rendered into the environment."""
    return check(facts, nodes=nodes, expected=environ.get(ENV_EXPECT) or None,
                 allowed=environ.get(ENV_ALLOW) or None, setup=environ.get(ENV_SETUP, ""))
