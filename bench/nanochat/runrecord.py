"""What one trainer process leaves in its run directory, and how failures and signals become statuses.

The run-directory contract itself (fields, events, statuses) lives in bench/schema.py; this module
only decides when the trainer writes what:
- rank 0 writes run.json (merged into what the launcher wrote) and metrics.jsonl events;
- a rank that fails writes an `error` event and the failure status itself, then ends its process at
  once, so torchrun stops the other ranks without anyone waiting for a collective timeout;
- SIGTERM/SIGINT are taken by a dedicated thread (they are blocked in every other thread), so a run
  is marked `cancelled` even while the main thread waits inside a collective.
Without NANOCHAT_BENCH_RUN_DIR every write is a no-op (the null event writer, no run.json).
"""

import os
import re
import signal
import sys
import threading
import time
import traceback
from typing import Callable

from bench import breakdown, provenance
from bench.errors import BenchError, DataError
from bench.schema import (
    ENV_RUN_DIR,
    ENV_T0,
    FINAL_STATUSES,
    WORKLOAD,
    EventWriter,
    event_writer,
    load_manifest,
    update_run_json,
)


class RunRecord:
    def __init__(self, rank: int, run_dir: str | None = None):
        self.rank = rank
        self.run_dir = run_dir if run_dir is not None else (os.environ.get(ENV_RUN_DIR) or None)
        self.events = event_writer(self.run_dir, rank == 0)
        self.closed = False
        self.milestones: dict[str, float] = {}  # first time of each event, for the breakdown
        # The signal thread records a cancellation while the main thread may still be logging a step:
        # after a failure is recorded, the error event stays the last line and the status stays put.
        self._lock = threading.Lock()
        self._failed = False

    def emit(self, event: str, **fields) -> None:
        with self._lock:
            if not self._failed:
                t = fields.pop("t", None)
                t = time.time() if t is None else t
                self.events.emit(event, t=t, **fields)
                self.milestones.setdefault(event, t)

    def write_breakdown(self, step_ms: dict, ranks: list[dict], network: dict | None) -> None:
        """run.json's breakdown (phases from launch.t0 to the end event, the steady step split, the ranks)
        and network sections (rank 0, after the end event)."""
        if not (self.rank == 0 and self.run_dir):
            return
        times = {**self.milestones, "launch": load_manifest(self.run_dir).launch.t0}
        slowest = max(ranks, key=lambda r: r.get("step_ms") or 0.0) if ranks else None
        self.update(breakdown={"phases_s": breakdown.phases(times), "step_ms": step_ms or None, "ranks": ranks or None,
                               "slowest_rank": slowest["rank"] if slowest else None,
                               "slowest_host": slowest["host"] if slowest else None},
                    network=network)

    def update(self, **fields) -> None:
        """Merge fields into run.json (rank 0 only; nothing once a failure is recorded)."""
        with self._lock:
            if self.rank == 0 and self.run_dir and not self._failed:
                update_run_json(self.run_dir, **fields)

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
        update_run_json(
            self.run_dir, **provenance.collect(), workload=existing.workload or WORKLOAD,
            config=config, world_size=world_size, nodes=nodes,
            gpus_per_node=existing.gpus_per_node if keep_gpus else gpus_per_node,
            peak_flops_per_gpu=peak_flops_per_gpu, launch={"t0": float(t0) if t0 else None},
            started_at=time.time(), status="running", message=None,
        )

    def finish(self, status: str, message: str | None = None, **fields) -> None:
        """Final status of a run that ended normally (rank 0)."""
        self.update(status=status, message=message, finished_at=time.time(), **fields)
        self.close()

    def fail(self, kind: str, message: str) -> None:
        """Record a failure from any rank: an error event and run.json's status, unless already final."""
        assert kind in FINAL_STATUSES
        with self._lock:
            if self._failed:
                return
            self._failed = True
            self._record_failure(kind, message)

    def _record_failure(self, kind: str, message: str) -> None:
        if not self.run_dir:
            return
        try:
            if load_manifest(self.run_dir).status in FINAL_STATUSES:
                return  # the first failure wins: later ones (peers stopped by torchrun) are its echoes
            writer = self.events if self.rank == 0 else EventWriter(self.run_dir)
            writer.emit("error", kind=kind, message=message, rank=self.rank)
            update_run_json(self.run_dir, status=kind, message=f"rank {self.rank}: {message}",
                            finished_at=time.time())
        except OSError as e:  # a full or vanished disk must not hide the original failure
            print(f"[rank {self.rank}] could not record the failure in {self.run_dir}: {e}", file=sys.stderr)

    def close(self) -> None:
        if not self.closed:
            self.events.close()
            self.closed = True


# Failed allocations outside torch's CUDA caching allocator: its CPU allocator, a pinned buffer or a
# driver allocation (CUDA error), C++'s new.
ALLOC_FAILED = re.compile(r"can't allocate memory|CUDA error: out of memory|std::bad_alloc")


def classify_failure(exc: BaseException, device_batch_size: int | None = None) -> tuple[str, str]:
    """(status, one-line message) for an exception that ended the run."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        hint = ""
        if device_batch_size and device_batch_size > 1:
            hint = (f"; try --device_batch_size={device_batch_size // 2} (gradient accumulation keeps "
                    f"--total_batch_size the same)")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
        first = first.split(" If reserved but unallocated")[0]  # drop torch's generic allocator advice
        return "oom", f"out of memory at --device_batch_size={device_batch_size}: {first}{hint}"
    if isinstance(exc, MemoryError) or ALLOC_FAILED.search(str(exc)):  # outside torch's CUDA caching allocator
        first = (str(exc).strip().splitlines() or ["out of memory"])[0]
        return "oom", f"out of memory at --device_batch_size={device_batch_size}: {first}"
    if isinstance(exc, DataError):
        return "no_data", str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "cancelled", "interrupted"
    text = str(exc)
    dist_error = getattr(torch.distributed, "DistBackendError", ())
    if isinstance(exc, dist_error) or "Watchdog caught collective operation timeout" in text:
        if "timeout" in text.lower() or "timed out" in text.lower():
            return "nccl_timeout", text.strip().splitlines()[0] if text.strip() else "collective timeout"
    if isinstance(exc, BenchError):
        return "failed", text
    return "failed", f"{type(exc).__name__}: {text}".strip()


def install_signal_thread(on_signal: Callable[[int], None]) -> None:
    """Block SIGTERM/SIGINT in this (main) thread and the threads it starts later, and handle them in
    one thread that waits for them: it runs `on_signal(signum)` and ends the process with 128+signum.
    Call it first thing in the process, before libraries start threads of their own."""
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)

    def wait_for_signal():
        signum = signal.sigwait(signals)
        try:
            on_signal(signum)
        except BaseException:  # noqa: BLE001 - nothing may keep the process from ending
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
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
    torchrun = b"torch.distributed.run" in parent or b"torchrun" in parent
    return process_start_time(os.getppid() if torchrun else "self")

