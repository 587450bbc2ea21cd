"""torchrun, ending in one line: `python -m bench.launch.elastic <torchrun's flags>` instead of
`python -m torch.distributed.run`.

torchrun ends a failed run by raising ChildFailedError (a worker died) or SignalException (torchrun itself
got SIGTERM/SIGINT/SIGHUP), and Python prints them as tracebacks into the job's output. Here either
becomes one line naming the cause, and the worker that failed first is recorded as the run's cause: a
worker killed by a signal (kill -9, the kernel's OOM killer) cannot say so itself, and the ranks torchrun
then stops with SIGTERM, or that lost their peer, would otherwise leave the echo as the run's status. A
worker aborted (SIGABRT, as NCCL's watchdog ends a rank whose collective timed out) while the heartbeats
show another rank stopped is recorded `hung`, naming that rank. A signal to torchrun itself is recorded
as the run's `cancelled`.
Workers get SHUTDOWN_TIMEOUT_S between SIGTERM and SIGKILL instead of torchrun's 30 s, also on the path
where one worker failed and torchrun stops the others (there its 30 s are fixed, not the
TORCH_ELASTIC_SHUTDOWN_TIMEOUT it reads for signals): a stopped (SIGSTOP) or wedged worker must not hold
the job for long, and ours end within a second of SIGTERM.
"""

import os
import signal
import socket
import sys

from torch.distributed.elastic.multiprocessing import api as processes
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import main as torchrun_main

from bench import schema
from bench.nanochat.heartbeat import waited_for
from bench.nanochat.rundir import locked

SHUTDOWN_TIMEOUT_S = 10


def bound_shutdown(timeout_s: int = SHUTDOWN_TIMEOUT_S) -> None:
    """Cap the SIGTERM-to-SIGKILL wait of every way torchrun stops its workers."""
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(timeout_s))
    close = processes.PContext.close

    def close_soon(self, death_sig=None, timeout: int = 30):
        return close(self, death_sig, min(timeout, timeout_s))

    processes.PContext.close = close_soon


def describe(rank: int, failure) -> str:
    """`rank 1 on node7 died: killed by SIGKILL` / `rank 0 on node7 exited with status 1`."""
    who = f"rank {rank} on {socket.gethostname()}"
    if failure.exitcode is not None and failure.exitcode < 0:
        try:
            name = signal.Signals(-failure.exitcode).name
        except ValueError:
            name = f"signal {-failure.exitcode}"
        return f"{who} died: killed by {name}"
    return f"{who} exited with status {failure.exitcode}"


def first_failure(e: ChildFailedError) -> tuple[int, object]:
    """The cause among the failed workers: one killed by a signal (it could not say why itself) before
    one that exited with an error (often its echo: a lost peer), else torchrun's first."""
    killed = sorted((f.timestamp, rank, f) for rank, f in e.failures.items()
                    if f.exitcode is not None and f.exitcode < 0)
    if killed:
        _, rank, failure = killed[0]
        return rank, failure
    return e.get_first_failure()


def record_root_cause(run_dir: str, rank: int, failure, cause: str) -> None:
    """The failure becomes the run's status where what is recorded is only the teardown's echo: no final
    status, `cancelled` (torchrun's SIGTERM) or a lost peer. A rank's own reason stays (an OOM, a data
    error, `hung` naming the rank it waited for)."""
    manifest = _manifest(run_dir)
    if manifest is None or manifest.status == "ok" or (manifest.message or "").startswith(f"rank {rank}:"):
        return
    unexplained = _teardown_only(manifest)
    lost_peer = "lost contact with another rank" in (manifest.message or "")
    killed = failure.exitcode is not None and failure.exitcode < 0
    if not (unexplained or (lost_peer and killed)):  # a rank's own diagnosis (hung, oom, no_data) stays
        return
    status, message = "failed", cause
    culprit = waited_for(run_dir) if failure.exitcode == -signal.SIGABRT else None
    if culprit and culprit[1]:  # NCCL's watchdog aborts a rank whose collective timed out; one rank stopped
        status, message = "hung", f"{culprit[0]}; {cause} (a collective timed out)"
    _update(run_dir, status=status, message=message)


def _manifest(run_dir: str):
    """run.json as recorded so far, or None where it cannot be read (nothing to correct then)."""
    try:
        return schema.load_manifest(run_dir)
    except (OSError, schema.SchemaError):
        return None


def _teardown_only(manifest) -> bool:
    """No final status yet, or only the `cancelled` the workers record when torchrun stops them."""
    return manifest.status not in schema.FINAL_STATUSES or manifest.status == "cancelled"


def _update(run_dir: str, **fields) -> None:
    try:
        with locked(run_dir):  # serialised with the ranks' own updates (bench/nanochat/rundir.py)
            schema.update_run_json(run_dir, **fields)
    except OSError as e:
        print(f"torchrun: could not record the outcome in {run_dir}: {e}", file=sys.stderr)


def record_signal(run_dir: str, name: str) -> None:
    """torchrun was stopped by a signal: the run is `cancelled` by it (the workers' own `cancelled` names
    only the SIGTERM torchrun passed on)."""
    manifest = _manifest(run_dir)
    if manifest is not None and _teardown_only(manifest):
        _update(run_dir, status="cancelled", message=f"torchrun received {name}; the workers were stopped")


def main(argv: list[str] | None = None) -> int:
    bound_shutdown()
    run_dir = os.environ.get(schema.ENV_RUN_DIR)
    try:
        torchrun_main(sys.argv[1:] if argv is None else argv)
    except ChildFailedError as e:
        rank, failure = first_failure(e)
        cause = describe(rank, failure)
        print(f"torchrun: {cause} (first of {len(e.failures)} failed worker(s))", file=sys.stderr, flush=True)
        if run_dir:
            record_root_cause(run_dir, rank, failure, cause)
        return 1
    except SignalException as e:
        print(f"torchrun: stopped by {e.sigval.name}; the workers were stopped with it", file=sys.stderr, flush=True)
        if run_dir:
            record_signal(run_dir, e.sigval.name)
        return 128 + int(e.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
