"""torchrun's ending (bench/launch/elastic.py): the cause of a failed run, recorded over its echoes.

    python -m pytest tests/unit/launch/test_elastic.py -q
"""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from torch.distributed.elastic.multiprocessing import api as processes
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ErrorHandler, ProcessFailure

from bench import contract
from bench.launch import elastic
from bench.launch.elastic import SHUTDOWN_TIMEOUT_S, describe, first_failure, record_root_cause, record_signal
from bench.runside.heartbeat import STOPPED_AFTER_S
from tests.support import cgroups
from tests.support.synthetic import write_heartbeat as write_beat

HOST = socket.gethostname()


def failure(rank: int, exitcode: int, timestamp: int) -> ProcessFailure:
    f = ProcessFailure(local_rank=rank, pid=4000 + rank, exitcode=exitcode, error_file="<N/A>")
    f.timestamp = timestamp
    return f


def test_a_killed_worker_is_the_cause_before_the_one_that_lost_it():
    # rank 0 exited 1 (its peer vanished) a moment before torchrun saw rank 1's SIGKILL
    e = ChildFailedError("train", {0: failure(0, 1, 100), 1: failure(1, -signal.SIGKILL, 101)})
    rank, f = first_failure(e)
    assert rank == 1 and describe(rank, f) == f"rank 1 on {HOST} died: killed by SIGKILL"
    assert describe(0, failure(0, 3, 1)) == f"rank 0 on {HOST} exited with status 3"


def test_the_first_rank_to_record_its_failure_is_the_cause_not_rank_0_of_torchrun_s_tie(tmp_path):
    # rank 1 raised, rank 0 lost it 20 ms later: torchrun saw both exits within its one-second resolution
    for rank, kind, t in ((1, "error", 100.08), (0, "peer_lost", 100.10)):
        contract.record_evidence(tmp_path, contract.Evidence(source="trainer", kind=kind, rank=rank, t=t))
    e = ChildFailedError("train", {0: failure(0, 1, 100), 1: failure(1, 1, 100)})
    assert first_failure(e, str(tmp_path))[0] == 1
    assert first_failure(e)[0] == 0  # nothing recorded: torchrun's own choice


def closing(e: ChildFailedError, run_dir) -> tuple[int, str]:
    """What the wrapper does with torchrun's failures as it ends (elastic.main): the first failure and its line,
    recorded as evidence in run_dir."""
    rank, f = first_failure(e, str(run_dir))
    cause = describe(rank, f)
    record_root_cause(str(run_dir), rank, f, cause)
    return rank, cause


def test_a_rank_s_own_error_recorded_a_moment_later_is_the_cause_not_the_peer_that_lost_it_first(tmp_path):
    """rank 1's NCCL communicator went down as it raised: rank 0 recorded the lost peer 30 ms before rank 1 its own
    error, and the closing line named rank 0 while run.json's status and message were rank 1's."""
    for rank, kind, t in ((0, "peer_lost", 100.05), (1, "oom", 100.08), (2, "cancelled", 100.02)):
        contract.record_evidence(tmp_path, contract.Evidence(source="trainer", kind=kind, rank=rank, t=t,
                                                             message=f"rank {rank}: {kind}"))
    e = ChildFailedError("train", {0: failure(0, 1, 100), 1: failure(1, 1, 100), 2: failure(2, 143, 100)})
    assert closing(e, tmp_path)[0] == 1
    assert contract.read_run_json(tmp_path)["message"] == "rank 1: oom"


def raised(tmp_path, monkeypatch, rank: int, exc: BaseException) -> ProcessFailure:
    """The failure torchrun reads of a rank that exited 1 on `exc`, from the error file @record writes for it."""
    error_file = tmp_path / f"error_{rank}.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    ErrorHandler().record_exception(exc)
    return ProcessFailure(local_rank=rank, pid=4000 + rank, exitcode=1, error_file=str(error_file))


def test_a_rank_torchrun_stopped_is_not_the_cause_of_the_one_that_raised(tmp_path, monkeypatch):
    """torchrun counts the ranks it stops among its failures: rank 0, which it SIGTERMed (or SIGKILLed after the
    shutdown wait) once rank 1 raised, was named the first failed worker, killed by a signal, and recorded so."""
    raised_1 = raised(tmp_path, monkeypatch, 1, RuntimeError("CUDA error: an illegal memory access was encountered"))
    monkeypatch.setattr(elastic, "STOPPED", {4000})
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for when in (raised_1.timestamp, raised_1.timestamp - 1):  # torchrun's whole seconds: a tie, or earlier
            e = ChildFailedError("train", {0: failure(0, -signum, when), 1: raised_1})
            rank, f = first_failure(e, str(tmp_path))
            assert (rank, describe(rank, f)) == (1, f"rank 1 on {HOST} exited with status 1")
    record_root_cause(str(tmp_path), rank, f, describe(rank, f))
    assert contract.read_run_json(tmp_path)["message"] == f"rank 1 on {HOST} exited with status 1"
    # the kernel's OOM killer is no teardown of torchrun's: the rank it killed is the cause
    monkeypatch.setattr(elastic, "STOPPED", set())
    assert first_failure(ChildFailedError("train", {0: failure(0, -signal.SIGKILL, 1), 1: raised_1}))[0] == 0


def test_ranks_that_raised_in_the_same_second_name_the_lower_rank_whatever_torchrun_s_order(tmp_path, monkeypatch):
    raised_0 = raised(tmp_path, monkeypatch, 0, RuntimeError("CUDA error: uncorrectable ECC error encountered"))
    raised_1 = raised(tmp_path, monkeypatch, 1, RuntimeError("CUDA error: uncorrectable ECC error encountered"))
    raised_1.timestamp = raised_0.timestamp
    for failures in ({0: raised_0, 1: raised_1}, {1: raised_1, 0: raised_0}):
        assert first_failure(ChildFailedError("train", failures), str(tmp_path))[0] == 0


def test_a_rank_s_own_error_is_the_cause_not_the_peer_its_watchdog_then_aborted(tmp_path):
    """rank 1 raised; NCCL's watchdog then aborted rank 0 (SIGABRT), its communicator gone: the closing line named
    rank 0, killed by SIGABRT, while run.json's status and message were rank 1's error."""
    contract.record_evidence(tmp_path, contract.Evidence(source="trainer", kind="error", rank=1, t=100.08,
                                                         message="rank 1: RuntimeError: boom"))
    e = ChildFailedError("train", {0: failure(0, -signal.SIGABRT, 100), 1: failure(1, 1, 100)})
    assert closing(e, tmp_path) == (1, f"rank 1 on {HOST} exited with status 1")
    data = contract.read_run_json(tmp_path)
    assert (data["status"], data["message"]) == ("failed", "rank 1: RuntimeError: boom")
    assert first_failure(e)[0] == 0  # nothing recorded: the abort is all there is to tell


def test_an_aborted_rank_is_still_the_cause_when_its_stopped_peer_recorded_nothing_of_its_own(tmp_path):
    now = time.time()
    write_beat(tmp_path, 0, now, 7)
    write_beat(tmp_path, 1, now - STOPPED_AFTER_S - 20, 7, host="nid2")
    # rank 1, stopped, takes torchrun's SIGTERM once it runs again: a cancel, no error of its own
    contract.record_evidence(tmp_path, contract.Evidence(source="trainer", kind="cancelled", rank=1, t=now,
                                                         message="rank 1: received SIGTERM (signal 15)"))
    e = ChildFailedError("train", {0: failure(0, -signal.SIGABRT, 100), 1: failure(1, 143, 100)})
    assert closing(e, tmp_path)[0] == 0
    data = contract.read_run_json(tmp_path)
    assert data["status"] == "hung" and data["message"].startswith("rank 1 on nid2 (pid 101) stopped")


def test_a_rank_the_oom_killer_killed_is_the_cause_before_the_peer_that_lost_it(tmp_path):
    contract.record_evidence(tmp_path, contract.Evidence(source="trainer", kind="peer_lost", rank=1, t=99.5,
                                                         message="rank 1: lost contact with another rank"))
    e = ChildFailedError("train", {0: failure(0, -signal.SIGKILL, 100), 1: failure(1, 1, 100)})
    assert closing(e, tmp_path) == (0, f"rank 0 on {HOST} died: killed by SIGKILL")
    assert contract.read_run_json(tmp_path)["message"] == f"rank 0 on {HOST} died: killed by SIGKILL"


@pytest.mark.parametrize("killed_by_oom", [True, False])
def test_a_sigkill_while_the_cgroup_counted_an_oom_kill_is_oom_and_another_stays_failed(tmp_path, monkeypatch, capsys,
                                                                                       killed_by_oom):
    """Outside Slurm a rank the kernel's OOM killer ended was `failed` (rank_killed): nothing there said OOM the way
    Slurm's OUT_OF_MEMORY does; cgroup v2's memory.events counts the kill. The line torchrun's wrapper prints says
    what run.json says (it read 'killed by SIGKILL' beside an `oom` run.json)."""
    run_dir = tmp_path / "run"
    events = cgroups.counted_in(tmp_path / "fs", monkeypatch, elastic)

    def workers_fail(argv):
        if killed_by_oom:
            events.write_text(cgroups.EVENTS.format(1))
        raise ChildFailedError("train", {0: failure(0, -signal.SIGKILL, 100), 1: failure(1, 1, 100)})
    monkeypatch.setattr(elastic, "torchrun_main", workers_fail)
    monkeypatch.setattr(elastic, "bound_shutdown", lambda: None)  # torch is left as it is in this process
    monkeypatch.setattr(elastic, "stop_leftovers", lambda: None)
    monkeypatch.setenv(contract.ENV_RUN_DIR, str(run_dir))
    assert elastic.main(["--standalone", "train.py"]) == 1
    data = contract.read_run_json(run_dir)
    assert f"torchrun: {data['message']} (first of 2 failed worker(s))" in capsys.readouterr().err
    if killed_by_oom:
        assert data["status"] == "oom" and data["evidence"][-1]["signal"] == "SIGKILL"
        assert data["message"] == f"the kernel's out-of-memory killer ended rank 0 on {HOST} (host memory)"
    else:
        assert (data["status"], data["message"]) == ("failed", f"rank 0 on {HOST} died: killed by SIGKILL")


def test_the_echo_gives_way_but_a_rank_s_own_reason_stays(tmp_path):
    contract.record_evidence(tmp_path, contract.Evidence(source="trainer", kind="peer_lost", rank=0, message=(
        "rank 0: lost contact with another rank: Connection closed by peer")))
    record_root_cause(str(tmp_path), 1, failure(1, -9, 1), "rank 1 on n1 died: killed by SIGKILL")
    assert contract.read_run_json(tmp_path)["message"] == "rank 1 on n1 died: killed by SIGKILL"
    contract.record_evidence(tmp_path, contract.Evidence(source="trainer", kind="oom", rank=1, message=(
        "rank 1: out of memory at --device_batch_size=32")))
    record_root_cause(str(tmp_path), 1, failure(1, 1, 1), "rank 1 on n1 exited with status 1")
    assert contract.read_run_json(tmp_path)["status"] == "oom"  # the rank's own reason, over torchrun's word


def test_an_aborted_rank_with_a_stopped_peer_is_hung(tmp_path):
    now = time.time()
    write_beat(tmp_path, 0, now, 7)
    write_beat(tmp_path, 1, now - STOPPED_AFTER_S - 20, 7, host="nid2")
    contract.update_run_json(tmp_path, status="running")
    record_root_cause(str(tmp_path), 0, failure(0, -signal.SIGABRT, 1), "rank 0 on nid1 died: killed by SIGABRT")
    data = contract.read_run_json(tmp_path)
    assert data["status"] == "hung" and data["message"].startswith("rank 1 on nid2 (pid 101) stopped")


def test_a_signal_to_torchrun_is_the_run_s_cancel(tmp_path):
    contract.update_run_json(tmp_path, status="cancelled", message="rank 0: received SIGTERM (signal 15)")
    record_signal(str(tmp_path), "SIGHUP")
    data = contract.read_run_json(tmp_path)
    assert data["status"] == "cancelled" and data["message"].startswith("torchrun received SIGHUP")
    contract.update_run_json(tmp_path, status="ok", message=None)
    record_signal(str(tmp_path), "SIGTERM")
    assert contract.read_run_json(tmp_path)["status"] == "ok"


# rank 1 stops itself (as a hung rank is stopped), rank 0 fails a moment later and notes when
STOPPED_PEER = textwrap.dedent("""
    import os, signal, sys, time
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(120)
    time.sleep(1)
    open(sys.argv[1], "w").write(repr(time.time()))
    sys.exit(3)
""")


def test_a_stopped_worker_ends_with_its_sigterm_not_the_sigkill_after_the_shutdown_wait(tmp_path):
    script, failed_at = tmp_path / "stopped_peer.py", tmp_path / "failed_at"
    script.write_text(STOPPED_PEER)
    env = {k: v for k, v in os.environ.items() if k != "NANOCHAT_BENCH_RUN_DIR"}
    proc = subprocess.run([sys.executable, "-m", "bench.launch.elastic", "--standalone", "--nproc_per_node=2",
                           str(script), str(failed_at)], env=env, capture_output=True, text=True, timeout=120)
    ended = time.time()
    assert proc.returncode == 1 and "torchrun: rank" in proc.stderr
    assert ended - float(failed_at.read_text()) < SHUTDOWN_TIMEOUT_S, proc.stderr[-2000:]
    assert "forcefully exiting via" not in proc.stderr  # torchrun never had to SIGKILL it


# torchrun takes SIGINT right after starting its first worker, before it has noted it (as a Ctrl-C can)
SIGNAL_WHILE_STARTING = textwrap.dedent("""
    import os, signal, sys
    from torch.distributed.elastic.multiprocessing.subprocess_handler.subprocess_handler import SubprocessHandler
    from bench.launch import elastic

    popen = SubprocessHandler._popen

    def popen_then_signal(self, *args, **kwargs):
        proc = popen(self, *args, **kwargs)
        open(os.environ["WORKER_PID_FILE"], "w").write(str(proc.pid))
        os.kill(os.getpid(), signal.SIGINT)
        return proc

    SubprocessHandler._popen = popen_then_signal
    sys.exit(elastic.main(sys.argv[1:]))
""")
WORKER = "import time; time.sleep(60)"


def test_a_worker_started_just_before_torchrun_is_stopped_does_not_outlive_it(tmp_path):
    launcher, worker, pid_file = tmp_path / "launcher.py", tmp_path / "worker.py", tmp_path / "worker.pid"
    launcher.write_text(SIGNAL_WHILE_STARTING)
    worker.write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if k != "NANOCHAT_BENCH_RUN_DIR"}
    proc = subprocess.run([sys.executable, str(launcher), "--standalone", "--nproc_per_node=2", str(worker)],
                          env={**env, "WORKER_PID_FILE": str(pid_file)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr[-2000:]
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"worker {pid} outlived torchrun")


class GoneTerminal:
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")  # the launcher reading torchrun's output was killed

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_signal_to_torchrun_is_recorded_though_its_terminal_is_gone(tmp_path, monkeypatch):
    def stopped(argv):
        raise SignalException("stopped", sigval=signal.SIGTERM)
    monkeypatch.setattr(elastic, "torchrun_main", stopped)
    monkeypatch.setattr(elastic, "bound_shutdown", lambda: None)  # torch is left as it is in this process
    monkeypatch.setattr(elastic, "stop_leftovers", lambda: None)
    monkeypatch.setenv(contract.ENV_RUN_DIR, str(tmp_path))
    monkeypatch.setattr(sys, "stderr", GoneTerminal())
    assert elastic.main(["--standalone", "train.py"]) == 128 + signal.SIGTERM
    assert contract.read_run_json(tmp_path)["message"] == "torchrun received SIGTERM; the workers were stopped"


def test_a_ctrl_c_before_torchrun_has_its_handlers_is_its_cancel_in_one_line(tmp_path, monkeypatch, capsys):
    """A Ctrl-C in a stage's first seconds reached torchrun while it imported torch, or before it had its signal
    handlers, and ended it in a KeyboardInterrupt traceback, in the output and train.log, with no word in run.json."""
    def interrupted(argv):
        raise KeyboardInterrupt
    monkeypatch.setattr(elastic, "torchrun_main", interrupted)
    monkeypatch.setattr(elastic, "bound_shutdown", lambda: None)  # torch is left as it is in this process
    monkeypatch.setattr(elastic, "stop_leftovers", lambda: None)
    monkeypatch.setenv(contract.ENV_RUN_DIR, str(tmp_path))
    assert elastic.main(["--standalone", "train.py"]) == 128 + signal.SIGINT
    assert capsys.readouterr().err == "torchrun: stopped by SIGINT before it started the workers\n"
    record = contract.read_run_json(tmp_path)
    assert record["status"] == "cancelled" and [(e["source"], e["kind"], e["signal"]) for e in record["evidence"]] \
        == [("wrapper", "stopped", "SIGINT")]


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"])
def test_a_signal_while_torch_is_imported_is_the_runs_cancel_in_one_line(name, tmp_path):
    """A Ctrl-C (SIGINT), a scancel (SIGTERM), a closed terminal (SIGHUP) or a SIGQUIT in a stage's first seconds
    reached torchrun's wrapper while it imported torch: a SIGINT ended it in a KeyboardInterrupt traceback, the others
    with no line saying why, and run.json kept no evidence of the cancel; torchrun itself takes all four alike."""
    run_dir, worker = tmp_path / "run", tmp_path / "worker.py"
    run_dir.mkdir()
    worker.write_text(WORKER)
    proc = subprocess.Popen([sys.executable, "-m", "bench.launch.elastic", "--standalone", "--nproc_per_node=1",
                             str(worker)], env={**os.environ, contract.ENV_RUN_DIR: str(run_dir)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while "/torch/" not in open(f"/proc/{proc.pid}/maps").read():  # importing torch, seconds of it
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.01)
    proc.send_signal(signal.Signals[name])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.Signals[name], err
    assert err == f"torchrun: stopped by {name} before it started the workers\n"
    record = contract.read_run_json(run_dir)
    assert record["status"] == "cancelled" and record["evidence"][-1]["signal"] == name


@pytest.mark.parametrize("conf, why", [
    ("join_timeout=1", "timed out after 1 s (join_timeout): not every node joined"),
    ("is_host=false,read_timeout=1", "could not be reached: "),  # then torch's own word on the connection
])
def test_a_rendezvous_that_fails_is_one_line_naming_the_endpoint_and_a_failed_run(conf, why, tmp_path):
    """A second node that never joined (or a first node's endpoint not listening) ended torchrun's wrapper in torch's
    traceback, its RendezvousTimeoutError saying nothing at all, and run.json kept no word of why the run ended."""
    run_dir, worker = tmp_path / "run", tmp_path / "worker.py"
    run_dir.mkdir()
    worker.write_text(WORKER)
    with socket.socket() as s:  # nobody listens there: this node is the only one to come
        s.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{s.getsockname()[1]}"
    proc = subprocess.run([sys.executable, "-m", "bench.launch.elastic", "--nnodes=2", "--nproc_per_node=1",
                           "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}", "--rdzv_id=7", f"--rdzv_conf={conf}",
                           str(worker)], env={**os.environ, contract.ENV_RUN_DIR: str(run_dir), "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    cause = f"the rendezvous at {endpoint} (--nnodes=2) {why}"
    assert proc.stderr.splitlines()[-1].startswith(f"torchrun: {cause}"), proc.stderr[-2000:]
    assert proc.stderr.endswith("; the workers were not started\n")
    record = contract.read_run_json(run_dir)
    assert record["status"] == "failed" and record["message"].startswith(cause)
    assert [(e["source"], e["kind"], e["exit_code"]) for e in record["evidence"]] == [("wrapper", "exit", 1)]


@pytest.mark.parametrize("conf, torch_says", [
    ("join_timeout", "The rendezvous configuration option 'join_timeout' must have a value specified."),
    ("join_timeout=abc", "The rendezvous configuration option 'join_timeout' does not represent a valid integer"),
])
def test_a_rendezvous_configuration_typed_wrong_is_one_line_and_a_failed_run(conf, torch_says, tmp_path):
    """Regression: a --rdzv_conf edited by hand in a job script ended torchrun's wrapper in torch's ValueError
    traceback, and run.json kept no word of why the run ended."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    proc = subprocess.run([sys.executable, "-m", "bench.launch.elastic", "--nnodes=1", "--nproc_per_node=1",
                           "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0", f"--rdzv_conf={conf}", "-m", "this"],
                          env={**os.environ, contract.ENV_RUN_DIR: str(run_dir)}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.splitlines()[-1].startswith(f"torchrun: its flags: {torch_says}"), proc.stderr[-2000:]
    record = contract.read_run_json(run_dir)
    assert record["status"] == "failed" and torch_says in record["message"], record


def test_a_valueerror_of_the_wrappers_own_code_is_not_called_torchruns_flags(tmp_path, monkeypatch):
    """Regression: every ValueError inside the wrapper was reported as torchrun refusing its flags, exit 2, a bug of
    the wrapper's own (here its NUMA check) included; only torchrun's own ValueError is that now."""
    def broken(argv):
        raise ValueError("a bug of the wrapper's")
    monkeypatch.setattr(elastic.numabind, "usable", broken)
    monkeypatch.setattr(elastic, "bound_shutdown", lambda: None)  # torch is left as it is in this process
    monkeypatch.setattr(elastic, "stop_leftovers", lambda: None)
    monkeypatch.setenv(contract.ENV_RUN_DIR, str(tmp_path))
    with pytest.raises(ValueError, match="a bug of the wrapper's"):
        elastic.main(["--standalone", "train.py"])
    assert not (tmp_path / "run.json").exists()


def test_a_sigterm_after_torch_is_imported_but_before_torchruns_handlers_is_its_cancel(tmp_path, monkeypatch, capsys):
    """Between the import and torchrun's own handlers a SIGTERM ends the wrapper as one during the import does."""
    monkeypatch.setattr(elastic, "torchrun_main", lambda argv: os.kill(os.getpid(), signal.SIGTERM))
    monkeypatch.setattr(elastic, "bound_shutdown", lambda: None)  # torch is left as it is in this process
    monkeypatch.setattr(elastic, "stop_leftovers", lambda: None)
    monkeypatch.setenv(contract.ENV_RUN_DIR, str(tmp_path))
    before = signal.signal(signal.SIGTERM, elastic._note_early)  # as `python -m bench.launch.elastic` has it
    try:
        assert elastic.main(["--standalone", "train.py"]) == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, before)
        elastic.EARLY.clear()
    assert capsys.readouterr().err == "torchrun: stopped by SIGTERM before it started the workers\n"
    assert contract.read_run_json(tmp_path)["evidence"][-1]["signal"] == "SIGTERM"


def torchrun_fails_early(argv):
    raise SystemExit(2)  # its flags refused (argparse), before it has its handlers


def torchrun_is_stopped(argv):
    signal.signal(signal.SIGTERM, processes._terminate_process_handler)  # torchrun's, left as it returns
    raise SignalException("stopped", sigval=signal.SIGINT)


@pytest.mark.parametrize("torchrun, code", [(torchrun_fails_early, 2), (torchrun_is_stopped, 128 + signal.SIGINT)])
def test_a_sigterm_while_the_wrapper_stops_leftover_workers_is_no_traceback(torchrun, code, tmp_path, monkeypatch):
    """The early handler (or torchrun's) outlived torchrun: a SIGTERM while the wrapper stopped the workers left
    running (up to SHUTDOWN_TIMEOUT_S) raised KeyboardInterrupt (or SignalException) past its one line."""
    def sigterm_while_stopping():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # the handler runs
    monkeypatch.setattr(elastic, "torchrun_main", torchrun)
    monkeypatch.setattr(elastic, "bound_shutdown", lambda: None)  # torch is left as it is in this process
    monkeypatch.setattr(elastic, "stop_leftovers", sigterm_while_stopping)
    monkeypatch.setenv(contract.ENV_RUN_DIR, str(tmp_path))
    before = signal.signal(signal.SIGTERM, elastic._note_early)  # as `python -m bench.launch.elastic` has it
    try:
        try:
            ended = elastic.main(["--standalone", "train.py"])
        except SystemExit as e:  # torchrun's own ending
            ended = e.code
        except (KeyboardInterrupt, SignalException) as e:
            pytest.fail(f"the SIGTERM raised {e!r} past the wrapper's ending")
        assert ended == code
    finally:
        signal.signal(signal.SIGTERM, before)
        elastic.EARLY.clear()


def test_a_run_json_that_cannot_be_recorded_in_is_one_line_not_a_traceback(tmp_path, capsys):
    """A directory named run.json (or one cut short) made torchrun's wrapper end in a traceback while recording a
    signal or a failed worker."""
    for name, make in (("dir", lambda p: p.mkdir()), ("cut", lambda p: p.write_text('{"status": "o'))):
        (tmp_path / name).mkdir()
        make(tmp_path / name / "run.json")
        record_signal(str(tmp_path / name), "SIGTERM")
        err = capsys.readouterr().err
        assert err.startswith(f"torchrun: could not record the outcome in {tmp_path / name}: ") and \
            err.count("\n") == 1, err


# rank 1 raises under torch's @record (its error file); rank 0, still starting, has no handler of SIGTERM yet
ONE_RAISES = textwrap.dedent("""
    import os, sys, time
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main():
        if os.environ["RANK"] == "1":
            time.sleep(0.5)
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        time.sleep(60)

    main()
""")


def test_the_rank_that_raised_is_recorded_not_the_one_torchrun_then_stopped(tmp_path):
    script, run_dir = tmp_path / "one_raises.py", tmp_path / "run"
    script.write_text(ONE_RAISES)
    run_dir.mkdir()
    env = {**os.environ, "NANOCHAT_BENCH_RUN_DIR": str(run_dir), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "bench.launch.elastic", "--standalone", "--nproc_per_node=2",
                           str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == f"torchrun: rank 1 on {HOST} exited with status 1 (first of 1 failed " \
                                           "worker(s))", proc.stderr
    data = contract.read_run_json(run_dir)
    assert (data["status"], data["message"]) == ("failed", f"rank 1 on {HOST} exited with status 1")


ONE_FAILS = textwrap.dedent("""
    import os, signal, sys, time
    if os.environ["RANK"] == "1":
        sys.exit(1)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # as the trainer's ranks end on torchrun's SIGTERM
    time.sleep(60)
""")


def test_a_failed_worker_ends_in_the_one_line_without_torchrun_s_own_log_lines(tmp_path):
    """Beside its one line, torchrun's log said the same again: 'Sending process ... closing signal SIGTERM' for
    the worker it stopped and 'failed (exitcode: 1) local_rank: 1 ...' for the one that failed."""
    script = tmp_path / "one_fails.py"
    script.write_text(ONE_FAILS)
    env = {k: v for k, v in os.environ.items() if k != "NANOCHAT_BENCH_RUN_DIR"}
    env["OMP_NUM_THREADS"] = "1"  # as the launchers set it: torchrun's warning of its own default stays out
    proc = subprocess.run([sys.executable, "-m", "bench.launch.elastic", "--standalone", "--nproc_per_node=2",
                           str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"torchrun: rank 1 on {socket.gethostname()} exited with status 1 (first of 1 "
                                        "failed worker(s))"], proc.stderr


def test_an_aborted_rank_whose_peer_ended_with_its_own_failure_is_not_hung(tmp_path):
    """rank 1 on nid2 ran out of memory and ended; NCCL's watchdog then aborted rank 0 (SIGABRT) here, and since
    rank 1's heartbeat had stopped with it, torchrun's word on rank 0 was `hung` naming rank 1, over rank 1's own
    `oom`."""
    now = time.time()
    write_beat(tmp_path, 0, now, 7)
    write_beat(tmp_path, 1, now - STOPPED_AFTER_S - 20, 7, host="nid2")
    contract.record_evidence(tmp_path, contract.Evidence(source="trainer", kind="oom", rank=1, t=now - 20,
                                                         message="rank 1: out of memory at --device_batch_size=32"))
    e = ChildFailedError("train", {0: failure(0, -signal.SIGABRT, 100)})
    assert closing(e, tmp_path) == (0, f"rank 0 on {HOST} died: killed by SIGABRT")
    data = contract.read_run_json(tmp_path)
    assert (data["status"], data["message"]) == ("oom", "rank 1: out of memory at --device_batch_size=32")


TIMER_RACE = """
import sys, time
from datetime import timedelta
from torch.distributed.elastic.rendezvous.utils import _PeriodicTimer
from bench.launch import elastic
if sys.argv[1] == "quiet":
    elastic.quiet_timer_finalizer()
box = {}
box["timer"] = _PeriodicTimer(timedelta(seconds=0.01), lambda: box.pop("timer", None))
box["timer"].start()  # its first tick drops the last reference on the timer's own thread: the finalizer runs there
time.sleep(0.5)
class Broken:
    def __del__(self):
        raise ValueError("another unraisable error")
Broken()
"""


@pytest.mark.parametrize("mode", ["quiet", "as is"])
def test_torch_s_timer_finalizer_on_its_own_thread_prints_no_traceback_after_the_one_line(mode):
    """As torchrun returned on a signal, torch's rendezvous keep-alive timer was at times collected on its own thread,
    whose finalizer then joined that thread: 'RuntimeError: cannot join current thread' printed as a traceback after
    the wrapper's one line (the SIGTERM fault case, once in many runs). That error alone is left out."""
    r = subprocess.run([sys.executable, "-c", TIMER_RACE, mode], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert r.returncode == 0, r.stderr
    assert "another unraisable error" in r.stderr  # the others are printed as before
    assert ("cannot join current thread" in r.stderr) == (mode == "as is"), r.stderr
