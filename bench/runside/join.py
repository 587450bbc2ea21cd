"""A rank that never joins the process group: bounded, and named.

Each rank waits inside `init_process_group` until every other rank has put its address into torchrun's
store; a rank stopped or stuck before it gets there used to hold the others for the backend's own timeout
(30 min gloo, 10 min NCCL), since the heartbeat watch and the collective watchdog start only once the
group exists. `join_group` gives that wait its own bound, --join_timeout_s (JOIN_TIMEOUT_S by default),
counted from this rank's arrival, and turns its timeout into NotJoined naming the ranks that are missing:
from the store keys the wait timed out on (gloo's key of a rank's address ends in its rank), and for each
what its heartbeat says (none yet: stopped or stuck before its first event; a stale one: stopped; a fresh
one: alive but slower to start than the bound). Only the join is bounded so: the caller sets the
collectives' own timeout once the group exists (bench/nanochat/watchdog.py).
"""

import os
import re
import time
from datetime import timedelta
from typing import Callable

from bench.contract import ENV_RUN_DIR
from bench.errors import BenchError
from bench.runside.heartbeat import STOPPED_AFTER_S, beats

JOIN_TIMEOUT_S = 30.0  # default --join_timeout_s on one node: its ranks start together, so a later one is stuck
# across nodes each node starts its own container and imports from the shared filesystem: they arrive apart
JOIN_TIMEOUT_MULTINODE_S = 180.0
STORE_TIMEOUT = re.compile(r"wait timeout|timed out|timeout", re.IGNORECASE)
KEYS = re.compile(r"keys?: (.*)$", re.MULTILINE)


def join_bound(join_timeout_s: float, world_size: int, local_world_size: int) -> float | None:
    """The join's bound in seconds (None: the backend's own): -1 picks the one-node or the multi-node default."""
    if join_timeout_s == -1:
        return JOIN_TIMEOUT_S if world_size <= local_world_size else JOIN_TIMEOUT_MULTINODE_S
    return join_timeout_s or None


class NotJoined(BenchError):
    """Ranks did not join the process group within --join_timeout_s: the run is `hung`, naming them."""


def join_group(init: Callable[[timedelta | None], None], rank: int, world_size: int,
               join_timeout_s: float | None) -> None:
    """`init(timeout)` (an init_process_group) with the join bound; NotJoined when it passes."""
    import torch.distributed as dist

    timeout = timedelta(seconds=join_timeout_s) if join_timeout_s else None
    try:
        init(timeout)
    except (dist.DistStoreError, RuntimeError) as e:
        if not join_timeout_s or not STORE_TIMEOUT.search(str(e)):
            raise
        raise NotJoined(not_joined_message(str(e), rank, world_size, join_timeout_s)) from None


def missing_ranks(error_text: str, rank: int, world_size: int) -> list[int]:
    """The ranks whose store keys the wait timed out on (`.../<rank>` keys), else those without a live beat."""
    named: set[int] = set()
    for keys in KEYS.findall(error_text):
        for key in keys.split(","):
            m = re.search(r"/(\d+)\s*$", key.strip())
            if m and int(m.group(1)) < world_size and int(m.group(1)) != rank:
                named.add(int(m.group(1)))
    if named:
        return sorted(named)
    live = {b.get("rank") for b in _beats() if time.time() - b["t"] <= STOPPED_AFTER_S}
    return [r for r in range(world_size) if r != rank and r not in live]


def not_joined_message(error_text: str, rank: int, world_size: int, join_timeout_s: float,
                       now: float | None = None) -> str:
    """`rank 1 did not join the process group within 30 s of rank 0 (--join_timeout_s=30): ...`."""
    now = time.time() if now is None else now
    ranks = missing_ranks(error_text, rank, world_size)
    by_rank = {b.get("rank"): b for b in _beats()}
    if len(ranks) == 1:
        who, states = f"rank {ranks[0]}", f"it has {_state(by_rank.get(ranks[0]), now)}"
    else:
        who = f"ranks {', '.join(map(str, ranks))}" if ranks else "a rank"
        states = "; ".join(f"rank {r} has {_state(by_rank.get(r), now)}" for r in ranks)
    return (f"{who} did not join the process group within {join_timeout_s:g} s of rank {rank} "
            f"(--join_timeout_s={join_timeout_s:g})" + (f": {states}" if states else "") +
            "; a rank merely slower to start than that needs a larger --join_timeout_s")


def _state(beat: dict | None, now: float) -> str:
    """What a missing rank's heartbeat says, after "it has"."""
    if beat is None:
        return "no heartbeat at all (stopped, or stuck before its first event)"
    where = f"on {beat.get('host')} (pid {beat.get('pid')})"
    age = now - beat["t"]
    if age > STOPPED_AFTER_S:
        return f"stopped {where}: no heartbeat for {age:.0f} s, last event `{beat.get('event')}`"
    return f"a live heartbeat {where}, last event `{beat.get('event')}`"


def _beats() -> list[dict]:
    run_dir = os.environ.get(ENV_RUN_DIR)
    return beats(run_dir) if run_dir else []
