"""How a run ended, settled in one place.

Every writer that sees something of a run's end (the trainer's ranks, torchrun's wrapper, the local
launcher, the batch script, `status`, the capacity probe, `submit`) appends an `Evidence` entry to
run.json's `evidence` list: who saw it (`source`), what it was (`kind`), and the facts (rank, node,
signal, exit code, time, a message for people). No writer decides the status; `settle` does, from the
evidence alone, by one precedence table: the entry of the highest row wins, the earliest within a row.
No verdict reads a message: messages are for people, kinds and fields are for this table.
A new failure kind is one row here.
"""

import dataclasses
from typing import Any, Iterable, List, Optional, Tuple

from .validate import Literal, field

# Final statuses of a run; "pending" from submission until the trainer starts, "running" while it goes on.
FINAL_STATUSES = ("ok", "failed", "timeout", "oom", "nccl_timeout", "hung", "no_data", "cancelled",
                  "diverged", "wrong_network")
STATUSES = FINAL_STATUSES + ("pending", "running")
Status = Literal[STATUSES]  # a tuple subscript is the list of values

# The precedence table, highest first: (kind, the status it gives, what it means). Kinds on one row
# share a rank (oom and no_data: neither explains the other).
PRECEDENCE: Tuple[Tuple[Tuple[str, ...], str, str], ...] = (
    (("completed",), "ok", "the trainer recorded its end: its figures are whole, whatever ended the job after"),
    (("node_lost",), "failed", "Slurm lost a node of the job: every rank's error after it is its echo"),
    (("time_limit",), "timeout", "a time limit (Slurm's, the probe's) ended the run: the ranks saw only SIGTERM"),
    (("hung",), "hung", "a collective timed out while the heartbeats show one rank stopped: that rank"),
    (("wrong_network",), "wrong_network", "NCCL chose another transport than the site's network"),
    (("diverged",), "diverged", "the loss became non-finite or exploded"),
    (("oom", "no_data"), None, "out of memory; the data is missing or too small"),
    (("error", "nccl_timeout"), None, "a rank's own error (its exception), or a collective that timed out"),
    (("rank_killed",), "failed", "a rank was killed by a signal (SIGKILL, SIGABRT): it could not say why"),
    (("peer_lost",), "failed", "a rank lost contact with another: the echo of that one's end"),
    (("rank_exited",), "failed", "a rank exited with an error it did not record"),
    (("stopped",), "cancelled", "a launcher (torchrun, nanochat-bench train, scancel) was stopped by a signal"),
    (("cancelled",), "cancelled", "a rank received SIGTERM/SIGINT/SIGHUP/SIGQUIT: a cancel, or a teardown's echo"),
    (("not_submitted", "exit"), "failed", "sbatch refused the job; a launcher's exit code, nothing else known"),
    (("not_run",), "cancelled", "a stage of a flow not started: a stage before it in its point failed or was stopped"),
)
# kind -> (row, status); a row without its own status gives the kind's name (oom -> "oom", error -> "failed").
_RANK = {kind: (row, status or (kind if kind in FINAL_STATUSES else "failed"))
         for row, (kinds, status, _) in enumerate(PRECEDENCE) for kind in kinds}
KINDS = tuple(_RANK)
# How one rank itself ended (its own failure, or torchrun's word on it): the rows from `hung` to `rank_exited` but a
# peer's lost contact, which is the echo of such an end
RANK_ENDS = tuple(k for k in KINDS if _RANK["hung"][0] <= _RANK[k][0] <= _RANK["rank_exited"][0] and k != "peer_lost")
SOURCES = ("trainer", "wrapper", "launcher", "batch_script", "status", "probe", "submit", "record")
# What a final status recorded without evidence (an older release, or a writer of run.json's `status`)
# counts as: the kind that gives that status.
KIND_OF_STATUS = {"ok": "completed", "failed": "error", "timeout": "time_limit", "cancelled": "cancelled",
                  **{s: s for s in FINAL_STATUSES if s in _RANK}}


@dataclasses.dataclass
class Evidence:
    """One thing a writer saw of the run's end (run.json `evidence`, appended, never rewritten)."""

    source: Literal[SOURCES] = field("record", "who saw it: trainer, wrapper (torchrun), launcher, batch_script, "
                                               "status, probe, submit; record: a status written without evidence")
    kind: Literal[KINDS] = field("exit", "what was seen: a row of bench/contract/outcome.py's PRECEDENCE")
    t: Optional[float] = field(None, "when, epoch seconds")
    rank: Optional[int] = field(None, "the rank it concerns")
    node: Optional[str] = field(None, "the host it concerns or was seen on")
    signal: Optional[str] = field(None, "the signal involved (SIGTERM, SIGKILL, ...)")
    exit_code: Optional[int] = field(None, "the exit status seen (negative: killed by that signal)")
    message: Optional[str] = field(None, "what it was, for people: the run's message when this entry decides "
                                         "(never read by settle)")


def status_of(kind: str) -> str:
    return _RANK[kind][1]


def settle(evidence: Iterable[Any]) -> Optional[Tuple[str, Optional[str]]]:
    """(status, message) from the evidence (Evidence objects or their dicts), or None when there is none.
    The highest row of PRECEDENCE wins; within a row the earliest entry (the first cause; later ones
    are mostly its echoes). What torchrun's wrapper saw of a rank that recorded its own end is its echo.
    A kind this release does not know is not weighed; a final status it decided still counts (files.py)."""
    entries = [entry if isinstance(entry, dict) else dataclasses.asdict(entry) for entry in evidence]
    spoke = {e.get("rank") for e in entries if e.get("source") == "trainer"}
    best = None
    for i, e in enumerate(entries):
        if e.get("source") == "wrapper" and e.get("rank") is not None and e["rank"] in spoke:
            continue  # torchrun's word on a rank that recorded its own end adds nothing to that rank's
        if e.get("kind") not in _RANK:
            continue  # a newer minor's kind (kept in run.json by the reader): its row is unknown here
        key = (_RANK[e["kind"]][0], i)
        if best is None or key < best[0]:
            best = (key, e)
    if best is None:
        return None
    return status_of(best[1]["kind"]), best[1].get("message")


def never_started(evidence: Any) -> bool:
    """Evidence of a flow's stage that was not started and nothing else: a mark, no attempt of its own."""
    return bool(evidence) and isinstance(evidence, list) and \
        all(isinstance(e, dict) and e.get("kind") == "not_run" for e in evidence)


def legacy(status: str, message: Optional[str]) -> List[Evidence]:
    """The evidence a final status stands for when it was written without any (release 7031fbf, a writer
    of run.json's `status` field): one entry, so later evidence is weighed against it."""
    return [Evidence(source="record", kind=KIND_OF_STATUS[status], message=message)] if status in KIND_OF_STATUS else []
