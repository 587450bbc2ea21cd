"""torchrun, ending in one line: `python -m bench.launch.elastic <torchrun's flags>` instead of
`python -m torch.distributed.run`.

torchrun ends a failed run by raising ChildFailedError (a worker died) or SignalException (torchrun itself
got SIGTERM/SIGINT/SIGHUP/SIGQUIT), and Python prints them as tracebacks into the job's output. Here either
becomes one line naming the cause, and what torchrun saw is recorded as evidence (bench/contract/outcome.py
settles the status): of the workers torchrun did not stop itself (SIGTERM, SIGKILL after the shutdown wait),
the one that failed first, killed by a signal (kill -9, the kernel's OOM killer: it cannot say so itself, but a
cgroup v2's count of OOM kills that grew since torchrun started says it for it: `oom`) before
one that exited with an error, and among those the rank that recorded its own failure first in run.json, an
error before a lost peer or a SIGTERM as in the precedence table (torchrun's exit times are whole seconds: a tie
goes to rank 0), so the ranks torchrun then stops, or that lost their peer, do not leave the echo as the run's
status. A worker aborted (SIGABRT, as NCCL's watchdog ends a rank whose collective timed out or whose peer died)
gives way to a rank that recorded its own failure (an error, an OOM: above a kill in that table), and comes before
the rest; aborted while the heartbeats show another rank stopped, it is evidence of `hung`, naming that rank, unless
a rank's own end is recorded (then the abort is its echo).
A signal to torchrun itself is evidence of a cancel, also a SIGINT, SIGTERM, SIGHUP or SIGQUIT before it has its
handlers (while torch is imported, or it reads its flags: a Ctrl-C or scancel in a run's first seconds), which ends it
in the same one line.
A rendezvous that fails before any worker starts (a node that never joins within join_timeout, an endpoint that
cannot be reached, a rendezvous another node's torchrun closed) ends in one line naming the endpoint, the nodes
expected and how long it waited, recorded as the wrapper's exit (`failed`) instead of torch's traceback.
Workers get SHUTDOWN_TIMEOUT_S between SIGTERM and SIGKILL instead of torchrun's 30 s, also on the path where one
worker failed and torchrun stops the others (there its 30 s are fixed, not the TORCH_ELASTIC_SHUTDOWN_TIMEOUT it
reads for signals): a stopped (SIGSTOP) or wedged worker must not hold the job for long, and ours end within a
second of SIGTERM. The closing signal is followed by SIGCONT, so a stopped worker (the hung rank itself) takes its
SIGTERM at once instead of waiting for the SIGKILL.
A signal that reaches torchrun while it starts its workers ends it before it has noted the ones already
started (each in a session of its own, so no signal to torchrun's group reaches them): a worker still
running when torchrun returns is stopped the same way, so none trains on as an orphan. torchrun's own log lines
that say what the one line says (ECHOES) are left out.
"""

import math
import os
import signal
import socket
import sys
import time

# `python -m bench.launch.elastic`: a Ctrl-C while torch is imported (seconds of it) would end this module in a
# KeyboardInterrupt traceback, a SIGTERM, SIGHUP or SIGQUIT (Ctrl-\) without a word, before main could say or record
# anything; each is noted here and main ends on it
EARLY: list[int] = []
EARLY_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)  # those torchrun's handlers take over


def _note_early(signum, _frame) -> None:
    EARLY.append(signum)


def _stop_early(signum, _frame) -> None:
    EARLY.append(signum)
    raise KeyboardInterrupt


if __name__ == "__main__":
    for _signum in EARLY_SIGNALS:
        signal.signal(_signum, _note_early)

from torch.distributed.elastic.agent.server import api as agent  # noqa: E402
from torch.distributed.elastic.multiprocessing import api as processes
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.multiprocessing.subprocess_handler.subprocess_handler import SubprocessHandler
from torch.distributed.elastic.rendezvous import (RendezvousClosedError, RendezvousConnectionError, RendezvousError,
                                                 RendezvousTimeoutError)
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout
from torch.distributed.run import main as torchrun_main, parse_args as torchrun_args

from bench import contract
from bench.launch import numabind
from bench.nanochat import numanode
from bench.runside.heartbeat import ended_peer, waited_for
from bench.runside.runrecord import say
from bench.processes import children_of, exit_now, oom_kills, oom_killed_since

SHUTDOWN_TIMEOUT_S = 10
# The workers torchrun signalled to stop once one had failed (SIGTERM, SIGKILL after the shutdown wait): torchrun
# counts their exits (-15, -9, 143) among its failures too, yet they are the echo of the one that started it.
STOPPED: set[int] = set()


def bound_shutdown() -> None:
    """Cap the SIGTERM-to-SIGKILL wait of every way torchrun stops its workers."""
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SHUTDOWN_TIMEOUT_S))
    close = processes.PContext.close

    def close_soon(self, death_sig=None, timeout: int = 30):
        return close(self, death_sig, min(timeout, SHUTDOWN_TIMEOUT_S))

    processes.PContext.close = close_soon
    handler_close = SubprocessHandler.close

    def close_and_continue(self, death_sig=None):
        STOPPED.add(self.proc.pid)
        handler_close(self, death_sig)
        try:  # a stopped process keeps the signal pending until it runs again
            os.killpg(self.proc.pid, signal.SIGCONT)
        except OSError:
            pass  # already gone

    SubprocessHandler.close = close_and_continue


# torchrun's own log lines of a failure that main's one line says (the worker that failed, the SIGTERM it sends the
# others, its own signal); what it logs of a worker that would not stop stays
ECHOES = ("failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s", "Sending process %s closing signal %s",
          "Closing process %s via signal %s", "Received %s death signal, shutting down workers")


def quiet_echoes() -> None:
    """Leave out torchrun's log lines that main's one line replaces (ECHOES)."""
    for logger in (processes.logger, agent.logger):
        logger.addFilter(lambda record: record.msg not in ECHOES)


def quiet_timer_finalizer() -> None:
    """torch's rendezvous keep-alive timer stops its thread in a weakref finalizer, which the collector may run on
    that very thread as torchrun returns: `thread.join()` raises 'cannot join current thread', and Python prints it
    as a traceback ("Exception ignored in: <finalize object ...>") after main's one line, though the thread is
    ending anyway. That one error is left out; any other unraisable error is printed as before."""
    printed = sys.unraisablehook

    def hook(unraisable) -> None:
        exc = unraisable.exc_value
        if not (isinstance(exc, RuntimeError) and str(exc) == "cannot join current thread"):
            printed(unraisable)

    sys.unraisablehook = hook


def stop_leftovers() -> None:
    """Stop the workers (this process's children) still running once torchrun has returned: SIGTERM and SIGCONT
    to each one's session, SIGKILL after SHUTDOWN_TIMEOUT_S."""
    running = children_of(os.getpid())
    for pid in running:
        _signal_group(pid, signal.SIGTERM)
        _signal_group(pid, signal.SIGCONT)
    deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S
    while running and time.monotonic() < deadline:
        running = [pid for pid in running if not _reaped(pid)]
        time.sleep(0.1)
    for pid in running:
        _signal_group(pid, signal.SIGKILL)
        _reaped(pid, wait=True)


def _reaped(pid: int, wait: bool = False) -> bool:
    """Whether the child has ended (and is reaped now); `wait`: until it has."""
    try:
        return os.waitpid(pid, 0 if wait else os.WNOHANG) != (0, 0)
    except ChildProcessError:
        return True


def _signal_group(pid: int, signum: int) -> None:
    """The worker's session (its own children too), or the worker alone where it leads none."""
    for send in (os.killpg, os.kill):
        try:
            return send(pid, signum)
        except OSError:
            continue  # already gone, or not a group's leader


def describe(rank: int, failure, oom: bool = False) -> str:
    """`rank 1 on node7 died: killed by SIGKILL` / `rank 0 on node7 exited with status 1`; `oom`: the cgroup counted
    the SIGKILL as the kernel's out-of-memory killer's."""
    who = f"rank {rank} on {socket.gethostname()}"
    if oom:
        return f"the kernel's out-of-memory killer ended {who} (host memory)"
    if failure.exitcode is not None and failure.exitcode < 0:
        return f"{who} died: killed by {_signal_name(-failure.exitcode)}"
    return f"{who} exited with status {failure.exitcode}"


def failed(e: ChildFailedError) -> dict:
    """torchrun's failures (rank -> ProcessFailure) less the workers it stopped itself (STOPPED)."""
    return {rank: f for rank, f in e.failures.items() if f.pid not in STOPPED} or e.failures


def first_failure(e: ChildFailedError, run_dir: str | None = None) -> tuple[int, object]:
    """The cause among the failed workers that torchrun did not stop itself (STOPPED): the first killed by a signal
    other than SIGABRT, else the one whose record in run_dir ranks highest in the contract's precedence table, the
    first of those, where its own failure (an error, an OOM, hung) outranks a kill, else the first aborted (SIGABRT),
    else the first other record (a lost peer before a SIGTERM), else torchrun's first (module docstring). torchrun's
    times are whole seconds, when it saw each exit: a rank that failed and the ones that lost it a moment later tie
    there, and rank 0 would win the tie."""
    failures = failed(e)
    killed = sorted((f.timestamp, rank, f) for rank, f in failures.items()
                    if f.exitcode is not None and f.exitcode < 0)
    # NCCL's watchdog aborts a rank whose peer failed too: the peer's own record, if any, is the cause
    signalled = [k for k in killed if k[2].exitcode != -signal.SIGABRT]
    aborted = [k for k in killed if k[2].exitcode == -signal.SIGABRT]
    if signalled:
        _, rank, failure = signalled[0]
        return rank, failure
    recorded = sorted((_row(entry.get("kind")), entry.get("t") or math.inf, entry["rank"])
                      for entry in _evidence(run_dir)
                      if entry.get("source") == "trainer" and entry.get("rank") in failures)
    if recorded and (recorded[0][0] < _row("rank_killed") or not aborted):
        rank = recorded[0][2]
        return rank, failures[rank]
    if aborted:
        _, rank, failure = aborted[0]
        return rank, failure
    rank = min(failures, key=lambda r: (failures[r].timestamp, r))
    return rank, failures[rank]


def _row(kind) -> int:
    """The kind's row in the contract's precedence table (a kind this release does not know: after them all)."""
    rows = contract.PRECEDENCE
    return next((row for row, (kinds, _, _) in enumerate(rows) if kind in kinds), len(rows))


def _evidence(run_dir: str | None) -> list[dict]:
    """run.json's evidence so far; none without a run directory or a readable run.json."""
    if not run_dir:
        return []
    try:
        return contract.read_run_json(run_dir).get("evidence") or []
    except (OSError, ValueError):
        return []


def killed_by_oom(failure, oom_kills_before: int | None) -> bool:
    """A SIGKILL while the cgroup's count of out-of-memory kills (`oom_kills_before` as the workers started) grew."""
    return failure.exitcode == -signal.SIGKILL and bool(oom_killed_since(oom_kills_before))


def record_root_cause(run_dir: str, rank: int, failure, cause: str, oom: bool = False) -> None:
    """What torchrun saw of the worker that failed first, as evidence (rank_killed, rank_exited, or hung: see the
    module docstring; oom: killed_by_oom). Whether that is the run's cause or a rank's own reason stays (an OOM, a
    data error) is settled by the contract."""
    killed = failure.exitcode is not None and failure.exitcode < 0
    kind, message = ("oom" if oom else "rank_killed" if killed else "rank_exited"), cause
    aborted = failure.exitcode == -signal.SIGABRT and not ended_peer(run_dir, rank)  # a peer that ended did not stop
    culprit = waited_for(run_dir) if aborted else None
    if culprit and culprit[1]:  # one rank stopped: the others' collective timed out waiting for it
        kind, message = "hung", f"{culprit[0]}; {cause} (a collective timed out)"
    _record(run_dir, contract.Evidence(source="wrapper", kind=kind, rank=rank, node=socket.gethostname(),
                                     signal=_signal_name(-failure.exitcode) if killed else None,
                                     exit_code=failure.exitcode, message=message))


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _record(run_dir: str, evidence) -> None:
    try:
        contract.record_evidence(run_dir, evidence)
    except (OSError, contract.SchemaError, contract.RunJsonError) as e:
        say(f"torchrun: could not record the outcome in {run_dir}: {e}")


def record_signal(run_dir: str, name: str, started: bool = True) -> None:
    """torchrun was stopped by a signal: the run is `cancelled` by it (the workers' own `cancelled` names
    only the SIGTERM torchrun passed on, and ranks lower in the precedence table). `started`: any worker was."""
    _record(run_dir, contract.Evidence(source="wrapper", kind="stopped", node=socket.gethostname(), signal=name,
                                     message=f"torchrun received {name}; the workers were "
                                             + ("stopped" if started else "not started")))


def rendezvous_failure(e: RendezvousError, torchrun_argv: list[str]) -> str:
    """`the rendezvous at node1:29500 (--nnodes=2) timed out after 900 s: not every node joined`: torch's own
    exceptions say nothing of the endpoint or the wait (a timeout's has no message at all)."""
    args = torchrun_args(torchrun_argv)  # torchrun parsed the same flags already: no error here
    where = f"the rendezvous at {args.rdzv_endpoint} (--nnodes={args.nnodes})" if args.rdzv_endpoint else \
        f"the rendezvous (--nnodes={args.nnodes})"
    if isinstance(e, RendezvousTimeoutError):
        conf = dict(kv.split("=", 1) for kv in (args.rdzv_conf or "").split(",") if "=" in kv)
        waited = conf.get("join_timeout") or int(RendezvousTimeout().join.total_seconds())
        return f"{where} timed out after {waited} s (join_timeout): not every node joined"
    if isinstance(e, RendezvousClosedError):
        return f"{where} was closed: another node's torchrun ended it"
    cause = (str(e.__cause__ or e).strip().splitlines() or [type(e).__name__])[0].rstrip(".")
    return f"{where} could not be reached: {cause}" if isinstance(e, RendezvousConnectionError) else \
        f"{where} failed: {cause}"


def main(argv: list[str] | None = None) -> int:
    run_dir = os.environ.get(contract.ENV_RUN_DIR)
    try:
        try:
            for signum in EARLY_SIGNALS:  # from here to torchrun's handlers: KeyboardInterrupt, the signal in EARLY
                if signal.getsignal(signum) is _note_early:
                    signal.signal(signum, _stop_early)
            if EARLY:
                raise KeyboardInterrupt
            bound_shutdown()
            quiet_echoes()
            quiet_timer_finalizer()
            oom_kills_before = oom_kills()
            torchrun_argv, warning = numabind.usable(sys.argv[1:] if argv is None else argv)
            if warning:
                say(warning)
                os.environ[numanode.ENV_BIND] = "1"  # the workers inherit it
            run_torchrun(torchrun_argv)
        finally:  # the outcome is said and recorded from here: a later signal is noted, not raised as a traceback
            for signum in EARLY_SIGNALS:
                if signal.getsignal(signum) in (_stop_early, processes._terminate_process_handler):
                    signal.signal(signum, _note_early)
    except ChildFailedError as e:
        rank, failure = first_failure(e, run_dir)
        oom = killed_by_oom(failure, oom_kills_before)
        cause = describe(rank, failure, oom)
        if run_dir:  # recorded before anything is printed: the terminal may be gone (the launcher killed)
            record_root_cause(run_dir, rank, failure, cause, oom)
        say(f"torchrun: {cause} (first of {len(failed(e))} failed worker(s))")
        return 1
    except SignalException as e:
        if run_dir:
            record_signal(run_dir, e.sigval.name)
        say(f"torchrun: stopped by {e.sigval.name}; the workers were stopped with it")
        return 128 + int(e.sigval)
    except KeyboardInterrupt:  # a signal before torchrun had its handlers (which raise SignalException)
        name = signal.Signals(EARLY[0]).name if EARLY else "SIGINT"  # Python's own handler notes no SIGINT
        if run_dir:
            record_signal(run_dir, name, started=False)
        say(f"torchrun: stopped by {name} before it started the workers")
        return 128 + signal.Signals[name]
    except RendezvousError as e:  # before any worker started: no rank and no signal to name
        return not_started(run_dir, rendezvous_failure(e, torchrun_argv), 1)
    except FlagsRefused as e:
        return not_started(run_dir, f"its flags: {e}", 2)
    finally:
        stop_leftovers()
    return 0


class FlagsRefused(Exception):
    """torchrun refused its flags before it started a worker."""


def run_torchrun(argv: list[str]) -> None:
    """torchrun's main; its ValueError is its checks of its flags (`--rdzv_conf=join_timeout=abc` typed by hand),
    told apart from a ValueError of this wrapper's own code, which is a bug and keeps its traceback."""
    try:
        torchrun_main(argv)
    except ValueError as e:
        raise FlagsRefused(str(e)) from e


def not_started(run_dir: str | None, cause: str, code: int) -> int:
    """torchrun ended before it started a worker: the run's outcome, one line, and `code` to exit with."""
    if run_dir:
        _record(run_dir, contract.Evidence(source="wrapper", kind="exit", node=socket.gethostname(), exit_code=code,
                                         message=cause))
    say(f"torchrun: {cause}; the workers were not started")
    return code


if __name__ == "__main__":
    exit_now(main())  # without Python's teardown of torch (bench/processes.py)
