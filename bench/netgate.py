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
Standard library only.
"""

import os
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
# "OFI" when NCCL_NET says that: one plugin, one network (its nvidia_plugin_name_fixup)
_SAME_NETWORK = {"aws libfabric": "libfabric", "ofi": "libfabric"}


def _same(chosen: str, wanted: str) -> bool:
    def key(name: str) -> str:
        name = name.strip().lower()
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
    if chosen is None or _same(chosen, expected) or (allowed and _same(chosen, allowed)):
        return None
    proof = next((line for line in facts.get("evidence") or [] if chosen in line), None)
    how = f"; the runtime's network set-up: {setup}" if setup else ""
    said = f" (NCCL: {proof.strip()})" if proof else ""
    return (f"NCCL chose the network {chosen!r} between nodes, not the site's {expected!r}{said}{how}; "
            f"stopped before training, since its throughput would measure that network and not the runtime "
            f"(to measure it on purpose: --allow-network {shlex.quote(chosen)})")


def check_env(facts: Optional[Mapping[str, object]], nodes: int,
              environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """check() with what the job rendered into the environment."""
    return check(facts, nodes=nodes, expected=environ.get(ENV_EXPECT) or None,
                 allowed=environ.get(ENV_ALLOW) or None, setup=environ.get(ENV_SETUP, ""))
