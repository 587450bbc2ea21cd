"""Each rank's sign of life, so that a run whose collective timed out can say which rank it waited for.

Every rank keeps `<run_dir>/.heartbeat/rank<r>.json` ({rank, host, pid, t, event, step, event_t}): a
thread of its own rewrites it every INTERVAL_S (`t`), with the last event the trainer emitted (`event`,
`step`, `event_t`). A rank that waits inside a collective keeps beating (the wait releases the GIL); a
stopped, frozen or lost one does not. So when a collective times out (--watchdog_s), `waited_for` names:
- the rank whose beat stopped, if one did (SIGSTOP, a process stuck holding the GIL), by its own node's clock:
  its beat is older than a beat another rank of that node wrote (or than now, on the reader's node);
- else the rank furthest behind by steps: the one that is still busy elsewhere (a stuck filesystem read, a
  different collective) while the others wait; step numbers need no clock, and ranks at the same step are not
  told apart by when each wrote it (their events are milliseconds apart, less than two nodes' clocks may disagree);
- else a node whose every beat is old by the reader's clock (a frozen node, a node of one rank), saying that two
  nodes' clocks were compared, since nothing else shows it (the watcher below finds such a rank without clocks).
One small file a rank, rewritten atomically: a reader sees the old beat or the new one.

The beats also end a run whose rank went silent, without waiting for any collective: with
`on_silent`, rank 0 watches every other rank's beat and rank 1 watches rank 0's (two readers, however
many ranks), and a beat older than `silent_after_s` (--heartbeat_timeout_s) calls it with the verdict; older by
the beat's own time and by the time since it last changed for the watcher, since the nodes' clocks may disagree.
The thread runs beside training, so a long evaluation, sample or checkpoint never silences it.
Each beat carries the launch's time (`run`: NANOCHAT_BENCH_T0, or under Slurm run.json's launch.t0):
beats of an earlier run or attempt in the same directory are never read as this run's.
"""

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Callable

from bench.contract import ENV_T0, atomic_target, outcome, read_run_json

DIR = ".heartbeat"
INTERVAL_S = 5.0  # at 1024 ranks, ~200 small renames a second in one directory
STOPPED_AFTER_S = 1.5 * INTERVAL_S  # a beat older than this: the rank's process is not running
SILENT_AFTER_S = 30.0  # default --heartbeat_timeout_s: a silent rank ends the run as `hung` after this
# Before the process group exists a rank waits for the others inside torch's rendezvous, which holds the
# GIL: its beats pause there (seen for 16 s on a busy host). So a rank watches only once it is in the group
# itself, and judges only peers whose beat says they are in it too; the rendezvous has its own timeout.
STARTUP_EVENTS = ("start", "runtime_start", "imports_done", None)


def _write(path: Path, beat: dict) -> None:
    """Replace the beat atomically, without fsync: a beat matters only while the run lives, and an fsync
    stalled by a busy disk must not silence a healthy rank."""
    with atomic_target(path) as tmp, open(tmp, "w") as f:
        f.write(json.dumps(beat))


def run_token(run_dir: str | None = None) -> str | None:
    """This launch's identity in the beats: the local launcher's NANOCHAT_BENCH_T0, else the launch time that a
    batch script's `runjson start` wrote into run.json right before srun; None when neither is there."""
    if token := os.environ.get(ENV_T0):
        return token
    t0 = None
    if run_dir:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # unreadable: every beat is this run's
            t0 = (read_run_json(run_dir).get("launch") or {}).get("t0")
    return f"{t0:.6f}" if isinstance(t0, (int, float)) else None


class Heartbeat:
    def __init__(self, run_dir: str | None, rank: int, world_size: int,
                 on_silent: "Callable[[str], None] | None" = None):
        self.path = Path(run_dir, DIR, f"rank{rank}.json") if run_dir and world_size > 1 else None
        self.run_dir = run_dir
        self.state = {"rank": rank, "host": socket.gethostname(), "pid": os.getpid(), "run": run_token(run_dir),
                      "event": None, "step": None, "event_t": None}
        self.thread: threading.Thread | None = None
        self.watched = set(range(1, world_size)) if rank == 0 else {0} if rank == 1 else set()
        self.on_silent = on_silent
        self.silent_after_s = SILENT_AFTER_S  # 0 = off
        self.seen: dict = {}  # the watched ranks' last beats and when they were read here (silent_rank)
        self._writing = threading.Lock()

    def beat(self, event: str, step: int | None = None) -> None:
        """The trainer's last event; the thread (started on the first) writes it with its next beat."""
        if self.path is None:
            return
        joined = self.state["event"] in STARTUP_EVENTS and event not in STARTUP_EVENTS
        self.state.update(event=event, step=step if step is not None else self.state["step"], event_t=time.time())
        if joined and self.thread is not None:  # in the group now: say so at once, not up to INTERVAL_S later
            with self._writing:
                if self.path is not None:
                    with contextlib.suppress(OSError):
                        _write(self.path, {**self.state, "t": time.time()})
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        """The rank's record is closed: one last beat marked done (a finished rank is not a silent one),
        then no more beats or checks."""
        with self._writing:
            path, self.path = self.path, None
        if path is not None and self.thread is not None:
            with contextlib.suppress(OSError):
                _write(path, {**self.state, "t": time.time(), "done": True})

    def _run(self) -> None:
        slept = time.monotonic()
        while True:
            with self._writing:  # never a beat after stop()'s last one
                if self.path is None:
                    return
                # a beat that cannot be written is skipped, never the rest: a thread that ended here would
                # leave a healthy rank's beat to age until its watcher ended the run as hung (a run directory
                # that cannot be written is reported by the run record, not here)
                with contextlib.suppress(OSError):
                    _write(self.path, {**self.state, "t": time.time()})
            # a watcher that was not running itself a while (the job suspended and resumed) saw no beat meanwhile:
            # its peers' beats are as old as the pause until they beat again, so it watches them afresh. Timed from
            # its sleep, not its last look: reading a thousand peers' beats on a slow filesystem is no pause
            if time.monotonic() - slept > 2 * INTERVAL_S:
                self.seen.clear()
            if self.on_silent and self.silent_after_s > 0 and self.state["event"] not in STARTUP_EVENTS:
                verdict = silent_rank(self.run_dir, self.watched, self.silent_after_s, seen=self.seen)
                if verdict:
                    self.on_silent(verdict)
            slept = time.monotonic()
            time.sleep(INTERVAL_S)


def silent_rank(run_dir: str, ranks: set[int], silent_after_s: float, now: float | None = None,
                seen: dict | None = None) -> str | None:
    """The verdict on the first of `ranks` (of this run) whose beat is older than silent_after_s, or None.
    `seen` is the watcher's memory ({rank: (beat's t, when this watcher first read it)}): a beat is as old as the
    younger of its own clock's age and the time since it last changed here, so a node whose clock is behind
    this one's is not taken for a silent rank (a stopped one is still named, up to INTERVAL_S later)."""
    now = time.time() if now is None else now
    for b in beats(run_dir):
        if b.get("rank") not in ranks or b.get("done") or b.get("event") in STARTUP_EVENTS:
            continue
        age = now - b["t"]
        if seen is not None:
            if seen.get(b["rank"], (None,))[0] != b["t"]:
                seen[b["rank"]] = (b["t"], now)
            age = min(age, now - seen[b["rank"]][1])
        if age > silent_after_s:
            return _stopped(b, age, f" (--heartbeat_timeout_s={silent_after_s:g})")
    return None


def clear_earlier(run_dir: str) -> None:
    """Remove the beats an earlier run left in `run_dir` (all of them when this launch's time is not known),
    file by file: never the directory, nor a temp file another rank of this run is about to rename into it."""
    token = run_token(run_dir)
    for path in Path(run_dir, DIR).glob("rank*.json"):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if token is None or json.loads(path.read_text()).get("run") != token:
                path.unlink()


def beats(run_dir: str) -> list[dict]:
    """This run's beats (all of them when its launch time is not known)."""
    token = run_token(run_dir)
    out = []
    for path in sorted(Path(run_dir, DIR).glob("rank*.json")):
        try:
            beat = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(beat, dict) and isinstance(beat.get("t"), (int, float)) and \
                (token is None or beat.get("run") == token):
            out.append(beat)
    return out


def _who(b: dict) -> str:
    return f"rank {b.get('rank')} on {b.get('host')} (pid {b.get('pid')})"


def waited_for(run_dir: str | None, now: float | None = None, host: str | None = None) -> tuple[str, bool] | None:
    """(the rank the others waited for, in words; whether its process stopped), or None without beats or when
    they do not tell (every rank alive and at the same step). `host`: the reader's node (this one's)."""
    found = beats(run_dir) if run_dir else []
    if not found:
        return None
    now = time.time() if now is None else now
    clocks = _clocks(found, host or socket.gethostname(), now)
    live = [b for b in found if not b.get("done")]  # a finished rank is not a stopped one
    oldest = max(live, key=lambda b: clocks[b.get("host")] - b["t"], default=None)
    if oldest and clocks[oldest.get("host")] - oldest["t"] > STOPPED_AFTER_S:
        return _stopped(oldest, clocks[oldest.get("host")] - oldest["t"], ""), True
    step = {id(b): b.get("step") if b.get("step") is not None else -1 for b in found}
    fewest = min(step.values())
    behind = [b for b in found if step[id(b)] == fewest]
    if len(behind) < len(found):
        return _behind(behind), False
    # every rank at one step: a node whose newest beat is old by the reader's clock, if any
    node = min((b.get("host") for b in live), key=clocks.get, default=None)
    if node is not None and now - clocks[node] > STOPPED_AFTER_S:
        silent = min((b for b in live if b.get("host") == node), key=lambda b: b["t"])
        return _stopped(silent, now - clocks[node],
                        f" by this node's clock against {node}'s (the two clocks are not known to agree)"), True
    return None


def ended_peer(run_dir: str | None, rank: int) -> str | None:
    """The message of the first recorded end of a rank other than `rank` (outcome.RANK_ENDS), or None. A rank whose
    end is recorded did not stop: the others' timed-out collective, or its beat gone silent, is the echo of that end,
    not a hang."""
    try:
        evidence = (read_run_json(run_dir).get("evidence") or []) if run_dir else []
    except (OSError, ValueError):
        return None
    for e in evidence:
        if isinstance(e, dict) and e.get("kind") in outcome.RANK_ENDS and \
                e.get("source") in ("trainer", "wrapper") and isinstance(e.get("rank"), int) and e["rank"] != rank:
            return e.get("message") or f"rank {e['rank']} ended ({e['kind']})"
    return None


def _clocks(found: list[dict], host: str, now: float) -> dict:
    """Each node's latest reading of its own clock: `now` on the reader's node, elsewhere its newest beat. A beat's
    age is read on the clock that wrote it, so nodes whose clocks disagree never make a live rank look stopped."""
    clocks: dict = {}
    for b in found:
        clocks[b.get("host")] = max(clocks.get(b.get("host"), b["t"]), b["t"])
    return {**clocks, host: now} if host in clocks else clocks


def _stopped(b: dict, age: float, how: str) -> str:
    at = f" at step {b['step']}" if b.get("step") is not None else ""
    return f"{_who(b)} stopped: no heartbeat for {age:.0f} s{how}, last event `{b.get('event')}`{at}"


def _behind(behind: list[dict]) -> str:
    """The first of the ranks at the fewest steps, and how many more are there."""
    b = min(behind, key=lambda b: b.get("rank") if isinstance(b.get("rank"), int) else 1 << 30)
    others = f" and {len(behind) - 1} other rank(s) at its step are" if len(behind) > 1 else " is"
    # both times are the rank's own clock's: how long it has been busy since, whatever the reader's clock says
    since = f", {b['t'] - b['event_t']:.0f} s before its last heartbeat" if b.get("event_t") else ""
    step = f" of step {b['step']}" if b.get("step") is not None else ""
    return f"{_who(b)}{others} behind the others: its last event was `{b.get('event')}`{step}{since}"
