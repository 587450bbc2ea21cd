"""Run a workload on this machine, without Slurm: one run directory, the workload's local command.

`run_local` = `prepare_local` (run.json first, status pending, the launch time; the workload's command,
nanochat's torchrun in standalone mode from bench/workloads/torchrun.py, others from bench/workloads/) + the
process: NANOCHAT_BENCH_RUN_DIR points at the run directory, the output goes to the terminal and to
`<run_dir>/train.log` (the workload's stdout to stdout, its stderr, where failure causes are printed, to
stderr; train.log gets both, in the order they arrived), the wall and CPU time of everything it started
are recorded, and bench.contract.close_unfinished has the last word, as it has for a batch job. It
returns the exit status (128+N for a workload killed by signal N).

The workload runs in a session of its own, so the wrapper decides what reaches it: SIGINT (Ctrl-C),
SIGQUIT (Ctrl-\\), SIGTERM and SIGHUP (the terminal closed) are passed on once and the output is drained to
the end, and a run its trainer could not mark is marked `cancelled` naming the signal. If the wrapper itself dies, the
kernel sends the workload SIGTERM (PR_SET_PDEATHSIG). A terminal that went away, or a train.log that
cannot be written any more, costs that copy of the output, never the run.
"""

import ctypes
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import contract, workloads
from bench.errors import run_dir_error
from bench.workloads.torchrun import torchrun_command
from bench.runside.runclaim import claim, resuming

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
PR_SET_PDEATHSIG = 1


def default_run_dir(sweep_id: str = "local") -> Path:
    """./runs/<sweep_id>/<run_id>, the run id a timestamp (with a suffix if that one exists)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / sweep_id
    path = base / stamp
    n = 1
    while path.exists():
        path = base / f"{stamp}-{n}"
        n += 1
    return path


def prepare_local(train_args: list[str], nproc: int, run_dir: str | os.PathLike, env: dict | None = None,
                  workload: str = workloads.DEFAULT, python: str | None = None,
                  module: str | None = None) -> tuple[list[str], dict]:
    """(command, environment) of a local run, with the launcher's run.json written. `module` replaces the
    nanochat trainer's module under torchrun (a wrapper around it, as the capacity probes' memory cap)."""
    chosen = workloads.get(workload)
    cmd = list(torchrun_command(python or sys.executable, nproc, train_args, module=module)) if module \
        else chosen.local_command(train_args, nproc, python)
    run_dir = Path(run_dir)
    t0 = time.time()
    # OMP_NUM_THREADS=1 and the workload's variables where the environment has none; the run contract's always
    child_env = {**chosen.local_env(), "OMP_NUM_THREADS": "1", **(os.environ if env is None else env),
                 contract.ENV_RUN_DIR: str(run_dir.resolve()), contract.ENV_T0: f"{t0:.6f}"}
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        contract.update_run_json(run_dir, run_id=run_dir.name, sweep_id=run_dir.resolve().parent.name,
                               runtime="bare", workload=chosen.run_workload, status="pending",
                               launch={"kind": "local", "t0": t0, "command": cmd})
    except OSError as e:
        raise run_dir_error(run_dir, e) from None
    return cmd, child_env


def _own_session_dying_with_parent() -> None:
    """In the child before exec: a session of its own (terminal signals reach the wrapper only), and
    SIGTERM when the wrapper dies."""
    os.setsid()
    dying_with_parent()


def dying_with_parent() -> None:
    """In a child before exec: SIGTERM when the process that started it dies, so none is left orphaned."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the child outlives a killed parent


class Output:
    """The workload's output, each stream to its own on the terminal and both to train.log; either copy
    that fails stops alone, with one line saying so (on whichever of the two still works)."""

    def __init__(self, log_path: Path):
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.terminal = True
        self._lock = threading.Lock()  # one writer at a time: stdout's and stderr's readers share train.log

    def write(self, chunk: bytes, stream) -> None:
        """One chunk to `stream` (the terminal's stdout or stderr) and to train.log."""
        with self._lock:
            if self.terminal:
                try:
                    stream.buffer.write(chunk)
                    stream.flush()
                except (OSError, ValueError, AttributeError):  # AttributeError: no stream (started with it closed)
                    self.terminal = False
            if self.log is not None:
                try:
                    self.log.write(chunk)
                    self.log.flush()
                except OSError as e:
                    self.log = None
                    self._note(f"error: {self.log_path} cannot be written any more ({e.strerror}); "
                               f"the output goes on on the terminal only")

    def note(self, line: str) -> None:
        with self._lock:
            self._note(line)

    def _note(self, line: str) -> None:
        if self.terminal:
            try:
                print(line, file=sys.stderr, flush=True)
            except (OSError, ValueError):
                self.terminal = False

    def copy(self, pipe, stream) -> threading.Thread:
        """A thread copying one of the workload's pipes, line by line, until it closes."""
        def run() -> None:
            for chunk in iter(pipe.readline, b""):
                self.write(chunk, stream)
        thread = threading.Thread(target=run, name="output-copy", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        if self.log is not None:
            try:
                self.log.close()
            except OSError:
                pass


def run_local(train_args: list[str], nproc: int, run_dir: str | os.PathLike, env: dict | None = None,
              workload: str = workloads.DEFAULT, python: str | None = None, overwrite: bool = False,
              resumable: bool = True) -> int:
    """Train with `nproc` local processes; the run directory gets run.json, metrics.jsonl, train.log.
    `overwrite`: a run already in run_dir is deleted first (else it is refused, unless resumed; `resumable`: the
    refusal says how to resume it)."""
    run_dir = Path(run_dir)
    # one run per directory (runside/runclaim.py)
    claim(run_dir, refuse_finished=True, resume=resuming(train_args), overwrite=overwrite, resumable=resumable)
    received: list[int] = []
    started: list[subprocess.Popen] = []

    def forward(signum, _frame):
        if not received:  # once: a second signal would cut torchrun's own shutdown of the ranks short
            received.append(signum)
            if started:
                started[0].send_signal(signum)

    # From run.json's `pending` to its last write a signal is taken, the run's stop (recorded) until the workload
    # ended: the default handlers would end the launcher there with a traceback, the run left pending or without
    # the launcher's word.
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        cmd, child_env = prepare_local(train_args, nproc, run_dir, env, workload, python)
        try:
            output = Output(run_dir / contract.TRAIN_LOG)
        except OSError as e:
            raise run_dir_error(run_dir, e) from None
        t0 = time.time()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            # rc decided with the start: a signal between the two would leave a run not started with exit code 0
            if received:  # stopped before it started: as if the signal had killed it
                rc = -received[0]
            else:
                started.append(subprocess.Popen(cmd, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                preexec_fn=_own_session_dying_with_parent))
                if received:  # came while it started, before `forward` could reach it
                    started[0].send_signal(received[0])
                proc = started[0]
                copies = [output.copy(proc.stdout, sys.stdout), output.copy(proc.stderr, sys.stderr)]
                for thread in copies:  # until both pipes close (every process holding them ended)
                    while thread.is_alive():
                        thread.join(0.5)  # in slices: the main thread stays free to run the signal handler
                rc = proc.wait()
            # one after this came once the workload had ended on its own: absorbed, the run is its own exit's
            stop = received[:1]
        finally:
            output.close()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        try:
            contract.update_run_json(run_dir, launch={"exit_code": rc, "finished_at": time.time(),
                                                    "wall_time_s": time.time() - t0, "cpu_time_s": cpu})
            if stop:
                name = signal.Signals(stop[0]).name
                contract.record_evidence(run_dir, contract.Evidence(
                    source="launcher", kind="stopped", signal=name, exit_code=rc,
                    message=f"nanochat-bench train received {name}; the workload was "
                            + ("stopped" if started else "not started")))
            contract.close_unfinished(run_dir, rc, workloads.get(workload).local_launcher)
        except OSError as e:
            output.note(f"error: {run_dir_error(run_dir, e)}; its run.json keeps the last status written")
        except (contract.RunJsonError, contract.SchemaError) as e:
            # run.json damaged while the workload ran, or rewritten by a newer release: left as it is, and the exit
            # status is still the workload's
            why = e.problem if isinstance(e, contract.RunJsonError) else e
            output.note(f"error: {why}; the workload's end (exit code {rc}) is not recorded in it")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    caller = previous[received[0]] if received else None
    if callable(caller) and caller is not signal.default_int_handler:
        # a caller's own handler (a local flow's, which starts no stage after one) is told of the signal, also of one
        # absorbed after the workload ended; the default ones would end the launcher before it returned the status
        caller(received[0], None)
    return rc if rc >= 0 else 128 - rc  # killed by signal N: 128+N, as a shell says it (an exit status of -9 is 247)
