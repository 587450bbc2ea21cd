"""What one trainer process leaves in its run directory, and how failures and signals become evidence.

The run-directory contract itself (fields, events, statuses, the outcome rule) lives in bench/contract/;
this module only decides when the trainer writes what:
- rank 0 writes run.json (merged into what the launcher wrote) and metrics.jsonl events;
- a rank that fails writes an `error` event (the first failure only) and its evidence (bench/contract/
  outcome.py settles the run's status from it), then ends its process at once, so torchrun stops the
  other ranks without anyone waiting for a collective timeout;
- SIGTERM/SIGINT/SIGHUP/SIGQUIT are taken by a dedicated thread (they are blocked in every other thread), so a
  run is marked `cancelled` even while the main thread waits inside a collective;
- every event is also a heartbeat (bench/runside/heartbeat.py), so a collective that times out can name
  the rank that stopped, and a rank whose beat goes silent ends the run as `hung` without any timeout;
- rank 0 claims the run directory first (bench/runside/runclaim.py: one run per directory); run.json is
  updated under its lock file, so no rank's update is lost, and nothing NaN goes into run.json or events;
- a rank whose torchrun agent is gone ends itself, recorded (bench/runside/parentwatch.py);
- the record is written before anything is printed (the terminal may be gone), and a run directory that
  cannot be written any more ends the run with one line naming it; space held back at start
  (bench.contract.reserve_space) lets a full disk still take the final status.
Without NANOCHAT_BENCH_RUN_DIR every write is a no-op (the null event writer, no run.json).
"""

import contextlib
import errno
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Callable, NamedTuple, NoReturn

from bench import provenance
from bench.errors import BenchError, DataError, first_line, run_dir_error
from bench.runside import runclaim
from bench.runside.console import drain_output
from bench.runside.guard import Diverged, json_safe
from bench import netgate
from bench.netgate import WrongNetwork
from bench.runside.heartbeat import Heartbeat, ended_peer, waited_for
from bench.runside.join import NotJoined
from bench.runside.parentwatch import watch_parent
from bench.contract import (
    ENV_RUN_DIR,
    ENV_T0,
    FINAL_STATUSES,
    KINDS,
    RUN_JSON,
    WORKLOAD,
    Evidence,
    EventWriter,
    RunJsonError,
    SchemaError,
    event_writer,
    load_manifest,
    record_evidence,
    release_space,
    reserve_space,
    status_of,
    update_run_json,
)
from bench.contract.outcome import KIND_OF_STATUS

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)  # SIGQUIT: Ctrl-\, passed on by torchrun


def say(line: str) -> None:
    """A line on stderr, if there still is one (a closed terminal, a broken pipe): never a new failure. One write
    of the line and its newline: a rank's own error and the signal thread's "cancelling" can be said at once
    (torchrun stops a rank that is already failing), and print's two writes would run them into one line."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # AttributeError: started with stderr closed
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def flush_streams() -> None:
    drain_output()  # print0's queued lines first (bounded: a stdout nobody reads costs them, not the exit)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()


class RunRecord:
    def __init__(self, rank: int, run_dir: str | None = None):
        self.rank = rank
        self.run_dir = run_dir if run_dir is not None else (os.environ.get(ENV_RUN_DIR) or None)
        self.events = self._writing(lambda: event_writer(self.run_dir, rank == 0))
        runclaim.remember_launcher()  # while it is still our ancestor: an orphaned rank still records its end
        self.heartbeat = Heartbeat(self.run_dir, rank, int(os.environ.get("WORLD_SIZE", "1")),
                                   on_silent=self._silent)
        self.closed = False
        # The signal thread records a cancellation while the main thread may still be logging a step:
        # after a failure is recorded, the error event stays the last line and the status stays put.
        self._lock = threading.Lock()
        self._failed = False

    def _writing(self, write: Callable):
        """Run a write into the run directory; an OSError becomes a RunDirError naming the directory."""
        try:
            return write()
        except OSError as e:
            raise run_dir_error(self.run_dir, e) from None

    def emit(self, event: str, **fields) -> None:
        with self._lock:
            if not self._failed:
                t = fields.pop("t", None)
                t = time.time() if t is None else t
                self._writing(lambda: self.events.emit(event, t=t, **json_safe(fields)))
        self.heartbeat.beat(event, fields.get("step"))

    def write_breakdown(self, ranks: list[dict], network: dict | None) -> None:
        """run.json's breakdown (each rank's steady figures, the slowest) and network sections (rank 0, after
        the end event). The phases and the step split are the reader's, from the events (bench/analysis/why.py)."""
        if not (self.rank == 0 and self.run_dir):
            return
        slowest = max(ranks, key=lambda r: r.get("step_ms") or 0.0, default={})
        self.update(breakdown={"ranks": ranks or None, "slowest_rank": slowest.get("rank"),
                               "slowest_host": slowest.get("host")}, network=network)

    def update(self, **fields) -> None:
        """Merge fields into run.json (rank 0 only; nothing once a failure is recorded)."""
        with self._lock:
            if self.rank == 0 and self.run_dir and not self._failed:
                # one read-modify-write, serialised by the contract with every other writer of this run
                self._writing(lambda: update_run_json(self.run_dir, **json_safe(fields)))

    def start(self, config: dict, world_size: int, nodes: int, gpus_per_node: int,
              peak_flops_per_gpu: float | None) -> None:
        """The manifest at start: config, shape, provenance, status running (keeps launcher fields)."""
        if not (self.rank == 0 and self.run_dir):
            return
        existing = load_manifest(self.run_dir)
        t0 = os.environ.get(ENV_T0)
        # What the trainer cannot see (Slurm facts inside some containers, GPUs on a CPU run) stays as the
        # launcher wrote it: sections merge only known values, and a CPU run's 0 GPUs keeps the planned count.
        keep_gpus = not gpus_per_node and existing.gpus_per_node is not None
        self._writing(lambda: reserve_space(self.run_dir))
        self.update(
            **provenance.collect(), workload=existing.workload or WORKLOAD,
            config=config, world_size=world_size, nodes=nodes,
            gpus_per_node=existing.gpus_per_node if keep_gpus else gpus_per_node,
            peak_flops_per_gpu=peak_flops_per_gpu, launch={"t0": float(t0) if t0 else None},
            started_at=time.time(), status="running", message=None,
        )

    def evidence(self, kind: str, message: str | None, signal_name: str | None = None) -> Evidence:
        return Evidence(source="trainer", kind=kind, rank=self.rank, node=socket.gethostname(), signal=signal_name,
                        message=message)

    def finish(self, status: str, message: str | None = None, **fields) -> None:
        """The end of a run that ended normally (rank 0): `ok`, or `timeout` where --deadline stopped it."""
        with self._lock:
            if self.rank == 0 and self.run_dir and not self._failed:
                entry = self.evidence(KIND_OF_STATUS[status], message)
                self._writing(lambda: record_evidence(self.run_dir, entry, **fields))
        if self.rank == 0 and self.run_dir:
            release_space(self.run_dir)
        self.close()

    def fail(self, kind: str, message: str, signal_name: str | None = None) -> None:
        """Record a failure seen by this rank (an evidence kind, or a status such as "failed"): its evidence,
        and an error event when it is the run's first; once per process."""
        kind = kind if kind in KINDS else KIND_OF_STATUS[kind]
        with self._lock:
            if self._failed:
                return
            self._failed = True
            self._record_failure(kind, message, signal_name)

    def _record_failure(self, kind: str, message: str, signal_name: str | None) -> None:
        if not self.run_dir or not runclaim.ours(self.run_dir):  # a run refused its directory writes nothing
            return
        first = True
        for attempt in (1, 2):
            try:
                # The first failure gets the error event; later ones (peers stopped by torchrun) are mostly
                # its echoes: their evidence is kept, their write errors are not worth a line.
                first = load_manifest(self.run_dir).status not in FINAL_STATUSES
                if first:
                    writer = self.events if self.rank == 0 else EventWriter(self.run_dir)
                    writer.emit("error", kind=status_of(kind), message=message, rank=self.rank)
                record_evidence(self.run_dir, self.evidence(kind, f"rank {self.rank}: {message}", signal_name))
                release_space(self.run_dir)
                return
            except OSError as e:  # a full disk gets the space held back at start, once
                if attempt == 1 and e.errno == errno.ENOSPC and release_space(self.run_dir):
                    continue
                if first:
                    say(f"[rank {self.rank}] could not record the failure: {run_dir_error(self.run_dir, e)}")
                return
            except (ValueError, RecursionError) as e:  # a newer major's run.json (SchemaError), a corrupt one
                # not this release's to rewrite: the rank still ends with its status, saying why nothing was recorded;
                # RunJsonError's advice to delete the run directory is not for a rank still running in it
                path = os.path.join(self.run_dir, RUN_JSON)
                if isinstance(e, RunJsonError):
                    why = e.problem
                elif isinstance(e, SchemaError):  # its message starts with the path
                    why = f"{path} is not of this release's contract: {first_line(e).removeprefix(path + ': ')}"
                else:
                    why = f"{path} is not a run's record ({first_line(e, type(e).__name__)})"
                say(f"[rank {self.rank}] could not record the failure: {why}")
                return

    def cancel_on_signals(self) -> None:
        """Take SIGTERM/SIGINT/SIGHUP/SIGQUIT in a thread of their own: the run is recorded `cancelled`, naming
        the signal, then the process ends (install_signal_thread)."""
        def on_signal(signum: int) -> None:
            name = signal.Signals(signum).name
            self.fail("cancelled", f"received {name} (signal {signum})", name)
            say(f"[rank {self.rank}] received {name}: cancelling")

        install_signal_thread(on_signal)

    def _silent(self, verdict: str) -> NoReturn:
        """A watched rank's beat went silent: `hung`, naming it, unless a rank's own end is recorded already."""
        gone = ended_peer(self.run_dir, self.rank)
        if gone:
            self.end("peer_lost", f"lost contact with another rank, which ended first ({gone}): {verdict}")
        self.end("hung", verdict)

    def end(self, status: str, message: str) -> NoReturn:
        """End the process from a watching thread (a silent peer, a lost parent): the status, one line,
        os._exit, whatever recording it raised (the thread would end there, and the process live on); torchrun then
        stops the other ranks."""
        try:
            try:
                self.fail(status, message)
            except Exception:  # noqa: BLE001 - a record that cannot be written must not keep the rank running
                say(traceback.format_exc().rstrip())
            say(f"[rank {self.rank}] error ({status_of(status) if status in KINDS else status}): {message}")
            flush_streams()
        finally:
            os._exit(1)

    def die(self, exc: BaseException, device_batch_size: int | None = None) -> NoReturn:
        """End the process for an exception: the status first, then one line (a traceback only for a bug),
        then os._exit, without destroy_process_group (peers may sit in a collective that never completes),
        so torchrun stops the others at once."""
        kind, message, bug = classify_failure(exc, device_batch_size)
        if kind == "nccl_timeout":
            gone = ended_peer(self.run_dir, self.rank)
            culprit = None if gone else waited_for(self.run_dir)
            if gone:  # the rank it waited for did not stop: it ended, and recorded why
                kind, message = "peer_lost", f"lost contact with another rank, which ended first ({gone}): {message}"
            elif culprit:
                kind, message = "hung", f"{culprit[0]}; the others timed out waiting for it ({message})"
        self.fail(kind, message)
        say(f"[rank {self.rank}] error ({status_of(kind)}): {message}")
        if bug:
            say(traceback.format_exc().rstrip())
        flush_streams()
        os._exit(1)

    def close(self) -> None:
        self.heartbeat.stop()
        if not self.closed:
            with contextlib.suppress(OSError):
                self.events.close()
            self.closed = True


def open_record(rank: int) -> "RunRecord | None":
    """The rank's run record, taking the signals; None (after one line) when the run directory cannot be
    written, so there is nothing to record into."""
    run_dir = os.environ.get(ENV_RUN_DIR) or None
    try:
        if rank == 0 and run_dir:  # one run per directory: refused at once, before anything is written
            runclaim.claim(run_dir)
        record = RunRecord(rank)
    except BenchError as e:
        say(f"[rank {rank}] error (failed): {e}")
        return None
    record.cancel_on_signals()  # before any thread starts (the heartbeat's starts with the first event)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # started by torchrun's agent: end with it, never as an orphan
        watch_parent(lambda message: record.end("failed", message))
    return record


# Failed allocations outside torch's CUDA caching allocator: its CPU allocator, a pinned buffer or a
# driver allocation (CUDA error), C++'s new.
ALLOC_FAILED = re.compile(r"can't allocate memory|CUDA error: out of memory|std::bad_alloc")


class Failure(NamedTuple):
    kind: str  # the evidence kind (bench/contract/outcome.py): error, oom, no_data, peer_lost, ...
    message: str  # one line
    bug: bool = False  # an unexpected exception: its traceback is kept

    @property
    def status(self) -> str:
        return status_of(self.kind)


# A peer that died or left: the echo of another rank's failure, which torchrun (bench/launch/elastic.py)
# or that rank itself records as the cause; recorded as `peer_lost`, below them in the precedence table. The store's
# words (its host gone) are capitalised in torch 2.x and lower case before.
PEER_LOST = re.compile(r"Connection (closed|reset) by peer|Broken pipe|remote process exited|ncclRemoteError|"
                       r"failed to recv, got 0 bytes|failed to send, sent 0 bytes|NCCL communicator was aborted",
                       re.IGNORECASE)
TIMED_OUT = re.compile(r"timed out|timeout caused|Watchdog caught collective operation timeout", re.IGNORECASE)
# NCCL's last error when NCCL_NET names a network it cannot open (its plugin, or the plugin's provider, missing where
# the rank runs): with NCCL_NET forced, the form a container without the site's network stack fails in
NO_NETWORK = re.compile(r"Error: network (.+?) not found")


def classify_failure(exc: BaseException, device_batch_size: int | None = None) -> Failure:
    """The status and one-line message of an exception that ended the run."""
    try:
        import torch
    except ImportError:  # an interpreter without torch (the wrong one given for NNTile): still one line
        torch = None
    # NNTile's runner passes none: it has no --device_batch_size to name
    at = "" if device_batch_size is None else f" at --device_batch_size={device_batch_size}"

    if torch is not None and isinstance(exc, torch.OutOfMemoryError):
        hint = ""
        if device_batch_size and device_batch_size > 1:
            hint = (f"; try --device_batch_size={device_batch_size // 2} (gradient accumulation keeps "
                    f"--total_batch_size the same)")
        # torch's advice on the allocator dropped: whole sentences kept, the hint after the last full stop
        first = first_line(exc, "out of memory").split(" If reserved but unallocated")[0].rstrip(" .")
        return Failure("oom", f"out of memory{at}: {first}{hint}")
    # outside torch's CUDA caching allocator; ENOMEM as well (numpy's memmap of the token files under an
    # address-space cap), but not EAGAIN, which a thread limit raises too
    if isinstance(exc, MemoryError) or ALLOC_FAILED.search(str(exc)) or \
            (isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
        return Failure("oom", f"out of memory{at}: {first_line(exc, 'out of memory')}")
    if isinstance(exc, KeyboardInterrupt):
        return Failure("cancelled", "interrupted")
    # the project's own errors, their message as it is: the first class that matches decides
    for cls, kind in ((DataError, "no_data"), (Diverged, "diverged"), (WrongNetwork, "wrong_network"),
                      (NotJoined, "hung"), (BenchError, "error")):
        if isinstance(exc, cls):
            return Failure(kind, str(exc))
    text = str(exc)
    if isinstance(exc, RuntimeError):  # gloo's, NCCL's and the store's errors (torch's DistError kinds)
        if missing := NO_NETWORK.search(text):
            setup = os.environ.get(netgate.ENV_SETUP)
            return Failure("wrong_network", f"NCCL found no network {missing[1]!r} (NCCL_NET): its plugin or the "
                                            f"plugin's provider is missing where the rank runs"
                                            + (f"; the runtime's network set-up: {setup}" if setup else ""))
        if TIMED_OUT.search(text):
            return Failure("nccl_timeout", f"a collective timed out: {first_line(exc, 'timeout')}")
        if PEER_LOST.search(text):
            return Failure("peer_lost", f"lost contact with another rank: {first_line(exc, 'peer lost')}")
    return Failure("error", f"{type(exc).__name__}: {text}".strip(), bug=True)


def install_signal_thread(on_signal: Callable[[int], None]) -> None:
    """Block SIGNALS in this (main) thread and the threads it starts later, and handle them in one thread
    that waits for them: it runs `on_signal(signum)` and ends the process with 128+signum.
    Call it first thing in the process, before libraries start threads of their own."""
    signals = set(SIGNALS)
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)

    def wait_for_signal():
        signum = signal.sigwait(signals)
        try:
            on_signal(signum)
        except BaseException:  # noqa: BLE001 - nothing may keep the process from ending
            say(traceback.format_exc().rstrip())
        finally:
            flush_streams()
            os._exit(128 + signum)

    threading.Thread(target=wait_for_signal, name="signal-wait", daemon=True).start()


def process_start_time(pid: str | int = "self") -> float | None:
    """When a process began, epoch seconds (Linux /proc: its start in clock ticks after boot, measured back
    from now and the uptime, both to 10 ms; /proc/stat's boot time is whole seconds). The kernel's clock, so
    a process inside a container reads its own and its parents' alike."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, after the command name
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def runtime_start_time() -> float | None:
    """When the first process inside the runtime began: torchrun's agent, this process's parent, when it is
    one (a container's start-up ends there); else this process itself."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read()
    except OSError:
        parent = b""
    torchrun = any(name in parent for name in (b"bench.launch.elastic", b"torch.distributed.run", b"torchrun"))
    return process_start_time(os.getppid() if torchrun else "self")

