"""Which network path NCCL really took, read from its `NCCL_DEBUG=INFO` lines (subsystems INIT and NET).

The lines proving a run's path (NCCL's own wording, as NCCL 2.2x prints it):
  `NCCL version 2.28.9+cuda13.0`                       the library's version
  `NET/Plugin: ...`, `NET/OFI Selected provider is cxi` the network plugin and its libfabric provider
  `Using network Socket` / `IB` / `AWS Libfabric`      the network between nodes it chose
  `... via P2P/CUMEM/read`, `via SHM/direct/direct`,   the transport of each channel's connection between
  `via NET/Socket/0`, `via NET/IB/0/GDRDMA`            two GPUs (NVLink/PCIe P2P, shared memory, network)
  `N coll channels, ... N p2p channels`                how many channels a communicator opened
A run whose nodes talked over `Socket` took TCP: on a Slingshot or InfiniBand system that means the
container lacked the right network plugin, and its throughput says nothing about the runtime.

Standard library only: the trainer parses its own debug file (bench/nanochat/stagerun.py sets
NCCL_DEBUG_FILE into the run directory), the analysis reads the result from run.json.
"""

import os
import re
import socket
from typing import Dict, Iterable, List, Optional

# fact -> the pattern of the line that gives it (the first such line wins)
_FACTS = {
    "nccl_version": re.compile(r"NCCL version (\S+)"),
    "net": re.compile(r"Using network (.+?)\s*$"),
    "net_provider": re.compile(r"NET/OFI Selected [Pp]rovider is ([^\s,]+)"),
    "net_plugin": re.compile(r"NET/Plugin\s*:?\s*(.+?)\s*$"),
    "channels": re.compile(r"(\d+) coll channels"),
    "ofi_plugin_version": re.compile(r"NET/OFI Initializing aws-ofi-nccl (\S+)"),  # the plugin's own banner
    "libfabric_version": re.compile(r"NET/OFI Using Libfabric version (\S+)"),
}
# a NET connection names its network up to the device number: the name may hold a space ("NET/AWS Libfabric/0")
_VIA = re.compile(r"\bvia (P2P|SHM|NET|COLLNET|NVLS)\b(?:/([^/]+)/\d)?")
EVIDENCE_KEEP = 8  # lines kept as evidence in run.json


def parse(lines: Iterable[str]) -> Dict[str, object]:
    """The network facts of one rank's NCCL INFO lines (absent facts are None; `evidence` quotes them)."""
    facts: Dict[str, object] = dict.fromkeys(_FACTS)
    transports: Dict[str, int] = {}
    evidence: List[str] = []

    def keep(line: str) -> None:
        if len(evidence) < EVIDENCE_KEEP and line not in evidence:
            evidence.append(line)

    for raw in lines:
        if "NCCL" not in raw:
            continue
        line = raw.strip()
        for key, pattern in _FACTS.items():
            if facts[key] is None and (m := pattern.search(line)):
                facts[key] = int(m.group(1)) if key == "channels" else m.group(1)
                keep(line)
        if m := _VIA.search(line):
            kind = m.group(1) + ("/" + m.group(2) if m.group(1) == "NET" and m.group(2) else "")
            if kind not in transports:
                keep(line)
            transports[kind] = transports.get(kind, 0) + 1
    facts["transports"] = transports
    facts["evidence"] = evidence
    return facts


def parse_file(path: str) -> Optional[Dict[str, object]]:
    """parse() of a debug file; None when there is none (no NCCL, or NCCL_DEBUG unset)."""
    try:
        with open(path, errors="replace") as f:
            return parse(f)
    except OSError:
        return None


def debug_file(template: str, host: Optional[str] = None, pid: Optional[int] = None) -> str:
    """The file NCCL writes for NCCL_DEBUG_FILE=`template` in this process: it expands %h (the host name up to
    its first dot), %p (the process id) and %% as NCCL's debug.cc does, and keeps any other %x as it is."""
    host = socket.gethostname().split(".")[0] if host is None else host
    pid = os.getpid() if pid is None else pid
    return re.sub(r"%(.)", lambda m: {"h": host, "p": str(pid), "%": "%"}.get(m.group(1), m.group(0)), template)


def own_facts() -> Optional[Dict[str, object]]:
    """parse() of this process's NCCL debug file (NCCL_DEBUG_FILE, expanded as NCCL expands it), or None."""
    template = os.environ.get("NCCL_DEBUG_FILE")
    return parse_file(debug_file(template)) if template else None


def over_sockets(facts: Dict[str, object]) -> Optional[str]:
    """The line proving that NCCL's inter-node traffic went over TCP sockets, or None."""
    if facts.get("net") != "Socket" and "NET/Socket" not in (facts.get("transports") or {}):
        return None
    return next((line for line in facts.get("evidence") or []
                 if "Using network Socket" in line or "via NET/Socket" in line), "Using network Socket")
