"""Failure statuses and the run record (bench/runside/runrecord.py).

    python -m pytest tests/unit/runside/test_runrecord.py -q
"""

import json
import os
import sys

import torch

from bench.errors import ConfigError, DataError
from bench.runside.runrecord import RunRecord, classify_failure
from bench.contract import WORKLOAD, read_run_json, update_run_json


def test_oom_suggests_a_smaller_device_batch_size():
    kind, message, bug = classify_failure(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB"), 32)
    assert kind == "oom" and not bug
    assert "--device_batch_size=16" in message and "Tried to allocate 8.00 GiB" in message


TORCH_CUDA_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which "
                  "1.23 GiB is free. Including non-PyTorch memory, this process has 77.86 GiB memory in use. Of the "
                  "allocated memory 75.10 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but "
                  "unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
                  "expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
                  "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def test_an_oom_message_keeps_whole_sentences():
    """Issue 23: OOM messages were cut mid-sentence; torch's allocator advice goes, its facts stay whole."""
    message = classify_failure(torch.OutOfMemoryError(TORCH_CUDA_OOM), 8).message
    assert message == ("out of memory at --device_batch_size=8: " + TORCH_CUDA_OOM.split(" If reserved")[0][:-1] +
                       "; try --device_batch_size=4 (gradient accumulation keeps --total_batch_size the same)")
    try:  # a real failed allocation of torch's CPU allocator
        torch.empty(2 ** 62, dtype=torch.uint8)  # beyond any address space
    except RuntimeError as e:
        cpu = classify_failure(e, 8)
    assert cpu.kind == "oom" and cpu.message.endswith("(Cannot allocate memory)"), cpu.message


def test_enomem_outside_torch_is_oom_but_eagain_is_not():
    """Under the CPU stand-in's address-space cap, numpy's memmap of the token files raised ENOMEM after the model
    was built, and the probe was recorded failed; EAGAIN (a thread that could not start) may be a thread limit."""
    import errno
    import os

    enomem = classify_failure(OSError(errno.ENOMEM, os.strerror(errno.ENOMEM)), 1)
    assert enomem.kind == "oom" and enomem.message == "out of memory at --device_batch_size=1: " \
        "[Errno 12] Cannot allocate memory"
    assert classify_failure(OSError(errno.EAGAIN, os.strerror(errno.EAGAIN)), 1).status == "failed"
    assert classify_failure(RuntimeError("Resource temporarily unavailable"), 1).status == "failed"


def test_an_oom_without_a_device_batch_size_names_none():
    """NNTile's runner has no --device_batch_size, and its out-of-memory runs read 'out of memory at
    --device_batch_size=None: ... DefaultCPUAllocator: can't allocate memory', a flag it does not take."""
    try:
        torch.empty(2 ** 62, dtype=torch.uint8)
    except RuntimeError as e:
        cpu = classify_failure(e)
    assert cpu.kind == "oom" and cpu.message.startswith("out of memory: ") and "device_batch_size" not in cpu.message
    assert classify_failure(MemoryError()).message == "out of memory: out of memory"


def test_other_statuses():
    assert classify_failure(DataError("no shards in /x")).status == "no_data"
    assert classify_failure(ConfigError("bad flag")) == ("error", "bad flag", False)
    assert classify_failure(ConfigError("bad flag")).status == "failed"
    assert classify_failure(KeyboardInterrupt()).status == "cancelled"
    assert classify_failure(ValueError("boom")) == ("error", "ValueError: boom", True)  # a bug keeps its traceback


def test_a_lost_peer_and_a_timeout_are_named_without_a_traceback():
    # gloo's words when the rank at the other end of a pair died, and when a collective waited too long
    lost = classify_failure(RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
                                         "peer [127.0.0.1]:4242\nmore"))
    assert (lost.kind, lost.status) == ("peer_lost", "failed") and not lost.bug
    assert lost.message == ("lost contact with another rank: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                            "Connection closed by peer [127.0.0.1]:4242")
    timeout = classify_failure(RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for "
                                            "recv operation to complete"))
    assert timeout.status == "nccl_timeout" and not timeout.bug and "Timed out waiting 10000ms" in timeout.message
    assert classify_failure(BrokenPipeError(32, "Broken pipe")).bug  # our own stdout, not a peer


# torch's DistBackendError when the communicator's NCCL found no network named NCCL_NET (torch 2.x wording)
NCCL_NO_NETWORK = ("NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, invalid usage (run "
                   "with NCCL_DEBUG=WARN for details), NCCL version 2.27.7\nncclInvalidUsage: This usually reflects "
                   "invalid usage of NCCL library.\nLast error:\nError: network AWS Libfabric not found.")


def test_a_network_nccl_did_not_find_is_the_wrong_network(monkeypatch):
    """Regression: NCCL_NET forced (every GPU run on alps) and its plugin or libfabric's CXI provider missing in the
    container, NCCL fails to set its communicator up: the run ended `failed` as a bug, with a traceback and a first
    line that did not say which network was missing, where the network gate names the runtime's set-up."""
    monkeypatch.setenv("NANOCHAT_BENCH_NET_SETUP", "alps/pyxis: CSCS's netstack")
    failure = classify_failure(torch.distributed.DistBackendError(NCCL_NO_NETWORK))
    assert (failure.kind, failure.status, failure.bug) == ("wrong_network", "wrong_network", False)
    assert "\n" not in failure.message and "'AWS Libfabric'" in failure.message
    assert "alps/pyxis: CSCS's netstack" in failure.message


def test_record_keeps_launcher_fields_and_first_failure_wins(tmp_path):
    update_run_json(tmp_path, run_id="r7", sweep_id="s", runtime="ce")
    rank0, rank1 = RunRecord(0, str(tmp_path)), RunRecord(1, str(tmp_path))
    rank0.start({"depth": 2}, world_size=2, nodes=1, gpus_per_node=2, peak_flops_per_gpu=989e12)
    run = read_run_json(tmp_path)
    assert run["run_id"] == "r7" and run["status"] == "running" and run["config"] == {"depth": 2}
    assert run["peak_flops_per_gpu"] == 989e12 and "software" in run
    rank1.fail("failed", "boom")
    rank0.fail("cancelled", "received signal 15")  # torchrun stopping rank 0 afterwards
    run = read_run_json(tmp_path)
    assert run["status"] == "failed" and run["message"] == "rank 1: boom"
    errors = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(e["event"], e["kind"], e["rank"]) for e in errors] == [("error", "failed", 1)]


def test_without_run_dir_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv("NANOCHAT_BENCH_RUN_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    record = RunRecord(0)
    record.emit("start")
    record.start({}, 1, 1, 0, None)
    record.fail("failed", "x")
    assert list(tmp_path.iterdir()) == []

def test_trainer_keeps_launcher_facts_it_cannot_see(tmp_path, monkeypatch):
    # inside some containers SLURM_* is hidden, and a CPU run has no GPUs to count
    for var in ("SLURM_JOB_ID", "NANOCHAT_BENCH_IMAGE"):
        monkeypatch.delenv(var, raising=False)
    update_run_json(tmp_path, run_id="r1", sweep_id="s1", workload=WORKLOAD, runtime="podman", gpus_per_node=2,
                    slurm={"job_id": "42", "nodelist": "n[1-2]"}, image={"reference": "localhost/x:1", "digest": "sha256:ab"},
                    status="pending")
    RunRecord(rank=0, run_dir=str(tmp_path)).start({"depth": 2}, world_size=4, nodes=2, gpus_per_node=0,
                                                   peak_flops_per_gpu=None)
    run = read_run_json(tmp_path)
    assert (run["slurm"]["job_id"], run["slurm"]["nodelist"]) == ("42", "n[1-2]")
    assert run["gpus_per_node"] == 2
    assert run["image"]["reference"] == "localhost/x:1" and run["image"]["digest"] == "sha256:ab"
    assert run["run_id"] == "r1" and run["status"] == "running" and run["world_size"] == 4
    assert run["software"]["torch"]  # what the trainer does see is recorded


def test_the_jobs_slurm_facts_survive_a_trainer_in_a_clean_environment(tmp_path, monkeypatch):
    """The batch script records the job's Slurm facts before srun (jobrecord start); apptainer's --cleanenv then
    hides every SLURM_* from the trainer, whose own Slurm section is empty: it must not blank the job's."""
    from bench.contract.record import SLURM_VARS
    from bench.launch import jobrecord

    job = {key: f"{key}-value" for key in SLURM_VARS}
    for key, var in SLURM_VARS.items():
        monkeypatch.setenv(var, job[key])
    update_run_json(tmp_path, run_id="r1", sweep_id="s1", workload=WORKLOAD, runtime="apptainer", status="pending")
    jobrecord.start(str(tmp_path), "apptainer version 1.3.4")
    for var in [v for v in os.environ if v.startswith("SLURM_")]:
        monkeypatch.delenv(var)
    RunRecord(rank=0, run_dir=str(tmp_path)).start({"depth": 2}, world_size=4, nodes=1, gpus_per_node=4,
                                                   peak_flops_per_gpu=None)
    run = read_run_json(tmp_path)
    assert run["slurm"] == job and run["status"] == "running"


def test_trainer_alone_fills_every_field(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    run_dir = tmp_path / "local" / "run-7"
    RunRecord(rank=0, run_dir=str(run_dir)).start({"depth": 2}, world_size=1, nodes=1, gpus_per_node=0,
                                                  peak_flops_per_gpu=None)
    run = read_run_json(run_dir)
    assert (run["run_id"], run["sweep_id"], run["workload"]) == ("run-7", "local", WORKLOAD)
    assert run["gpus_per_node"] == 0 and not any(run["slurm"].values())


def test_two_threads_saying_at_once_never_share_a_line(monkeypatch):
    """A failing rank's own error and its signal thread's "received SIGTERM: cancelling" (torchrun stopping it at
    the same moment) ran into one line: print writes the text and its newline apart. Each line is one write."""
    import io
    import sys
    import threading

    from bench.runside import runrecord

    class OneWriteAtATime(io.StringIO):
        def write(self, text):  # a thread switch between any two writes, as under load
            written = super().write(text)
            threading.Event().wait(0.001)
            return written

    stream = OneWriteAtATime()
    monkeypatch.setattr(sys, "stderr", stream)
    threads = [threading.Thread(target=lambda i=i: [runrecord.say(f"[rank {i}] line {n}") for n in range(50)])
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 100 and all(line.count("[rank") == 1 for line in lines), lines[:5]


def test_a_watching_thread_ends_the_process_even_when_the_record_cannot_be_written(tmp_path, monkeypatch):
    """A silent peer (the heartbeat's watcher) or a lost torchrun agent (the parent watch) ends the rank from a thread
    of its own: an error in recording it (here a run.json of a newer major, which this release cannot read) ended that
    thread before os._exit, and the orphan trained on, or the run waited on its silent rank for a collective timeout."""
    import os

    import pytest

    class Exited(Exception):
        pass

    def exit_(code):
        raise Exited(code)

    (tmp_path / "run.json").write_text(json.dumps({"schema_version": "99.0", "status": "running"}))
    record = RunRecord(0, str(tmp_path))
    monkeypatch.setattr(os, "_exit", exit_)
    with pytest.raises(Exited) as ended:
        record.end("hung", "rank 1 on nid1 (pid 101) stopped: no heartbeat for 31 s")
    assert ended.value.args == (1,)


def test_a_rank_started_with_its_output_closed_still_says_and_ends(monkeypatch):
    """A rank started with stdout and stderr closed (`>&-`) has them as None: `say`, which may never be a new
    failure, raised AttributeError, and print0's writer thread died, so the rank's exit waited out its drain."""
    from bench.runside import console as console_module, runrecord

    monkeypatch.setattr(sys, "stderr", None)
    monkeypatch.setattr(sys, "stdout", None)
    runrecord.say("a line nobody reads")
    runrecord.flush_streams()
    console = console_module.Console()
    for line in ("a step line\n", "the next one\n"):  # the second is written only if the thread lived on
        console.put(line)
    console.drain(5.0)
    assert console.lines.unfinished_tasks == 0


def test_a_failure_recorded_before_rank_0_starts_is_not_hidden_by_running(tmp_path):
    """Another rank failing before rank 0 wrote its start: run.json said `running` until someone else wrote."""
    update_run_json(tmp_path, run_id="r8", sweep_id="s", status="pending")
    RunRecord(1, str(tmp_path)).fail("no_data", "too few row groups")
    RunRecord(0, str(tmp_path)).start({"depth": 2}, world_size=2, nodes=1, gpus_per_node=0, peak_flops_per_gpu=None)
    run = read_run_json(tmp_path)
    assert (run["status"], run["message"]) == ("no_data", "rank 1: too few row groups")
    assert run["config"] == {"depth": 2}


def test_a_failing_rank_exits_even_when_run_json_cannot_be_read(tmp_path, monkeypatch, capsys):
    """A run.json of a newer major (SchemaError) or a corrupt one made die() raise instead of ending the rank."""
    import os

    import pytest

    class Exited(Exception):
        pass

    def exit_(code):
        raise Exited(code)

    monkeypatch.setattr(os, "_exit", exit_)
    for text in (json.dumps({"schema_version": "99.0", "status": "running"}), '{"status": "runn'):
        (tmp_path / "run.json").write_text(text)
        with pytest.raises(Exited) as ended:
            RunRecord(1, str(tmp_path)).die(ConfigError("bad flag"))
        assert ended.value.args == (1,)
        said = capsys.readouterr().err
        assert "[rank 1] could not record the failure" in said and "[rank 1] error (failed): bad flag" in said


def test_a_failure_not_recorded_is_said_in_one_accurate_line(tmp_path, capsys):
    """The line named run.json twice, said a newer major's run.json (read, only not this release's) could not be
    read, and passed on the advice to delete the run directory to a rank still running in it."""
    path = tmp_path / "run.json"
    cases = [
        (json.dumps({"schema_version": "99.0", "status": "running"}),
         f"{path} is not of this release's contract: schema_version '99.0' is of major 99"),
        ('{"status": "runn', f"{path} is not valid JSON"),
    ]
    for text, why in cases:
        path.write_text(text)
        RunRecord(1, str(tmp_path)).fail("failed", "bad flag")
        said = [line for line in capsys.readouterr().err.splitlines() if "could not record the failure" in line]
        assert len(said) == 1 and said[0].startswith(f"[rank 1] could not record the failure: {why}"), said
        assert said[0].count(str(path)) == 1 and "delete" not in said[0] and "cannot be read" not in said[0]


NCCL_WATCHDOG = ("[PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught collective operation timeout: "
                 "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=60000) ran for 60007 "
                 "milliseconds before timing out.")


def test_a_peer_s_timeout_or_silence_after_a_rank_ended_with_its_own_failure_is_its_echo(tmp_path, monkeypatch):
    """rank 1 (on nid2) ran out of memory, or the kernel's OOM killer killed it (torchrun's word on it); rank 0's
    collective then timed out, or its heartbeat watcher found rank 1's beat silent: the run settled as `hung` (or
    `nccl_timeout` where the beats did not tell), rank 0's symptom, over the rank that failed first."""
    import time

    import pytest

    from bench.contract import Evidence, record_evidence
    from tests.support.synthetic import write_heartbeat as write_beat

    class Exited(Exception):
        pass

    def exit_(code):
        raise Exited(code)

    monkeypatch.setattr(os, "_exit", exit_)
    monkeypatch.delenv("NANOCHAT_BENCH_T0", raising=False)
    oom = "out of memory at --device_batch_size=32: CUDA out of memory. Tried to allocate 8.00 GiB"
    killed = Evidence(source="wrapper", kind="rank_killed", rank=1, node="nid2", signal="SIGKILL", exit_code=-9,
                      message="rank 1 on nid2 died: killed by SIGKILL")
    ends = (lambda d: RunRecord(1, str(d)).fail("oom", oom), lambda d: record_evidence(d, killed))
    peers = (lambda r: r.die(RuntimeError(NCCL_WATCHDOG)),
             lambda r: r.heartbeat.on_silent("rank 1 on nid2 (pid 101) stopped: no heartbeat for 31 s"))
    for case, (end, expected) in enumerate(zip(ends, (("oom", f"rank 1: {oom}"),
                                                      ("failed", "rank 1 on nid2 died: killed by SIGKILL")))):
        for way, peer in enumerate(peers):
            for beating in (True, False):
                run_dir = tmp_path / f"{case}-{way}-{beating}"
                run_dir.mkdir()
                if beating:
                    write_beat(run_dir, 0, time.time(), 7)
                    write_beat(run_dir, 1, time.time() - 60, 7, host="nid2")  # gone a minute ago
                end(run_dir)
                with pytest.raises(Exited):
                    peer(RunRecord(0, str(run_dir)))
                run = read_run_json(run_dir)
                assert (run["status"], run["message"]) == expected, (case, way, beating)


def test_a_store_closed_under_a_rank_is_a_lost_peer_not_a_bug_of_its_own():
    """The TCPStore's host (rank 0, torchrun's agent) ended: a rank waiting on the store read torch's 'Failed to recv,
    got 0 bytes' (capitalised since torch 2.x), which was no lost peer, so the rank recorded a bug of its own with a
    traceback, and that `error` outranked torchrun's word on the rank that was killed (the OOM killer's SIGKILL)."""
    from torch.distributed import DistNetworkError

    from bench.contract import Evidence, settle

    closed = "Connection was likely closed. Did the remote server shutdown or crash?"
    killed = Evidence(source="wrapper", kind="rank_killed", rank=0, message="rank 0 on nid1 died: killed by SIGKILL")
    for said in (f"Failed to recv, got 0 bytes. {closed}", f"Failed to send, sent 0 bytes. {closed}"):
        lost = classify_failure(DistNetworkError(said))
        assert (lost.kind, lost.message, lost.bug) == ("peer_lost", f"lost contact with another rank: {said}", False)
        assert settle([killed, Evidence(source="trainer", kind=lost.kind, rank=1, message=lost.message)]) == \
            ("failed", "rank 0 on nid1 died: killed by SIGKILL")
