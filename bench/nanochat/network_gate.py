"""The trainer's side of the network gate (bench/netgate.py): before the pre-flight, every rank reads its own
NCCL INFO file, and the ranks agree in one all-reduce whether any of them saw the wrong network, so all stop
together within seconds instead of one rank leaving the others waiting in their first collective."""

import torch
import torch.distributed as dist

from bench import nccl_log, netgate
from bench.netgate import WrongNetwork


def network_facts(backend: str | None, facts: dict | None, nodes: int) -> dict | None:
    """run.json's network section: the backend, under NCCL this rank's NCCL lines (`facts`:
    nccl_log.own_facts), and why the gate judged nothing where it should have (`unverified`)."""
    if backend is None:
        return None
    facts = facts if backend == "nccl" else None
    why = netgate.unverified(facts, nodes)
    return {"backend": backend, **(facts or {}), **({"unverified": why} if why else {})}


def stop_on_wrong_network(nodes: int, ddp: bool, device, record, backend: str | None) -> None:
    """Raise WrongNetwork (on every rank together) when the gate says so; run.json's `network` is written first,
    so a stopped run keeps the facts it was stopped for (the end of a run writes them again, complete). The NCCL
    log is read once: what is recorded is what was judged."""
    facts = nccl_log.own_facts()
    record.update(network=network_facts(backend, facts, nodes))
    why = wrong_network(nodes, ddp, device, facts)
    if why:
        raise WrongNetwork(why)


def wrong_network(nodes: int, ddp: bool, device, facts: dict | None) -> str | None:
    """Why this run must stop as `wrong_network` (every rank gets a reason), or None; `facts`: this rank's NCCL
    lines (nccl_log.own_facts)."""
    why = netgate.check_env(facts, nodes)
    if not ddp:
        return why
    # the highest rank that saw it, plus one (0: none), so the others can name it
    seen_by = torch.tensor([dist.get_rank() + 1 if why else 0], dtype=torch.int64, device=device)
    dist.all_reduce(seen_by, op=dist.ReduceOp.MAX)
    rank = int(seen_by.item()) - 1
    if rank >= 0 and not why:
        why = (f"rank {rank} saw NCCL choose a network other than the site's; its NCCL log says which "
               f"(nccl/rank{rank}.log in the run directory, unless NCCL_DEBUG_FILE named another)")
    return why
