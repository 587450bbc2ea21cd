"""How a probe's run directory becomes an outcome, read back for a resumed sweep (bench/capacity/probe.py).
The run directories here are written as the trainer writes them (run.json + metrics.jsonl).

    python -m pytest tests/unit/capacity/test_probe_outcomes.py -q
"""

import json
import os
import re
import shutil
import sys

import pytest

from bench.capacity import probe
from bench.capacity.probe import ProbeSpec, bytes_asked, classify, read_probe
from bench.errors import ConfigError
from bench.contract import update_run_json
from tests.support import cgroups

SPEC = ProbeSpec("fsdp", 4, steps=3, device_type="cpu")


def write_run(run_dir, status, message=None, losses=(11.0, 10.9, 10.8), log=""):
    update_run_json(run_dir, status=status, message=message)
    events = [{"event": "model_ready", "t": 1.0, "num_params": 123, "flops_per_token": 1}]
    events += [{"event": "step", "t": 2.0 + i, "step": i, "loss": x, "lrm": 1.0, "dt_ms": 100.0 + i,
                "tok_per_sec": 1000.0 - i, "mfu": None, "total_time_s": 0.0} for i, x in enumerate(losses)]
    if status == "ok":
        events.append({"event": "end", "t": 9.0, "peak_mem_mib": 4096.0, "total_training_time_s": 1.0,
                       "min_val_bpb": None})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run_dir / "train.log").write_text(log)


def test_bytes_asked_from_cuda_and_cpu_messages():
    assert bytes_asked("CUDA out of memory. Tried to allocate 5.36 GiB. GPU 0 ...") == int(5.36 * 2 ** 30)
    assert bytes_asked("DefaultCPUAllocator: can't allocate memory: you tried to allocate 16777216 bytes.") == 16777216
    assert bytes_asked("something else") is None and bytes_asked(None) is None


def test_ok_needs_every_step_with_a_finite_loss(tmp_path):
    write_run(tmp_path, "ok")
    r = classify(SPEC, tmp_path)
    assert r.outcome == "ok" and r.num_params == 123 and r.peak_mem_mib == 4096.0
    # the median of the steps after the first: of two, their mean (it was the faster of them, 999)
    assert (r.tok_per_sec, r.step_ms, r.mfu) == (998.5, 101.5, None)
    write_run(tmp_path, "ok", losses=(11.0, float("nan"), 10.0))
    assert classify(SPEC, tmp_path).outcome == "failed"
    write_run(tmp_path, "ok", losses=(11.0, 10.0))
    assert classify(SPEC, tmp_path).outcome == "failed"


def test_oom_keeps_the_bytes_asked(tmp_path):
    write_run(tmp_path, "oom", "rank 0: out of memory at --device_batch_size=1: Tried to allocate 2.00 GiB", ())
    r = classify(SPEC, tmp_path)
    assert r.outcome == "oom" and r.oom_bytes == 2 * 2 ** 30


def test_a_rank_killed_by_the_kernel_is_host_oom(tmp_path):
    write_run(tmp_path, "failed", "torchrun exited with status 1", (),
              log="  exitcode  : -9 (pid: 123)\n  traceback : Signal 9 (SIGKILL) received by PID 123\n")
    r = classify(SPEC, tmp_path)
    assert r.outcome == "oom" and "SIGKILL" in r.message
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "oom"
    write_run(tmp_path, "failed", "a bug", ())
    assert classify(SPEC, tmp_path).outcome == "failed"


@pytest.mark.parametrize("oom_kill", [True, False])
def test_a_rank_killed_by_sigkill_is_host_oom_only_where_the_cgroup_counted_an_oom_kill(tmp_path, monkeypatch,
                                                                                       oom_kill):
    """Any SIGKILL was taken for the kernel's OOM killer ("most likely"), so a kill -9 from outside marked the
    model's size as not fitting; where cgroup v2 counts OOM kills the count says which it was."""
    run_dir = tmp_path / "run"
    events = cgroups.counted_in(tmp_path / "fs", monkeypatch, probe)
    counted = f"open({str(events)!r}, 'w').write({cgroups.EVENTS.format(1)!r}); " if oom_kill else ""

    def backend(spec, run_dir, data):  # the probe's one rank, SIGKILLed
        run_dir.mkdir(parents=True)
        return [sys.executable, "-c", f"import os, signal; {counted}os.kill(os.getpid(), signal.SIGKILL)"], \
            dict(os.environ)

    monkeypatch.setattr(probe, "pytorch_backend", backend)
    r = probe.run_probe(SPEC, run_dir, {}, timeout_s=60)
    if oom_kill:
        assert (r.outcome, r.message) == ("oom", probe.KILLED_BY_OOM_KILLER)
        assert json.loads((run_dir / "run.json").read_text())["status"] == "oom"
    else:
        assert (r.outcome, r.message) == ("failed", probe.KILLED_FROM_OUTSIDE)
        assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"


@pytest.mark.parametrize("seen", ["host", "kernel", "rank"])
def test_out_of_memory_seen_when_the_time_runs_out_is_the_probes_outcome_not_a_timeout(tmp_path, monkeypatch, seen):
    """The host's memory falling under its floor at the poll that found the time out, a rank the kernel killed or
    one that recorded its out-of-memory while torchrun took the others down: each was stored as a timeout."""
    run_dir = tmp_path / "run"
    said = {"host": "", "kernel": "  exitcode  : -9 (pid: 123)",
            "rank": "rank 0: out of memory at --device_batch_size=1: Tried to allocate 2.00 GiB"}[seen]

    def backend(spec, run_dir, data):  # a probe whose run shows it, then hangs as torchrun's teardown can
        run_dir.mkdir(parents=True)
        (run_dir / "train.log").write_text(said + "\n" if seen == "kernel" else "")
        if seen == "rank":
            update_run_json(run_dir, status="oom", message=said)
        return [sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ)

    monkeypatch.setattr(probe, "pytorch_backend", backend)
    monkeypatch.setattr(probe, "host_memory", lambda: (8 << 30, (1 << 30) if seen == "host" else None))
    r = probe.run_probe(SPEC, run_dir, {}, timeout_s=0)
    assert r.outcome == "oom", r.message
    assert json.loads((run_dir / "run.json").read_text())["status"] == "oom"
    if seen == "rank":
        assert r.oom_bytes == 2 << 30


def test_a_probe_cancelled_from_outside_the_sweep_runs_again_on_resume(tmp_path, monkeypatch):
    """Regression: a SIGTERM to the probe's trainer alone (the sweep ran on) was stored as `failed`, read back
    so on every resume and the search stopped there, while a cancelled probe is to run again."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.search import Shape
    from bench.capacity.sweep import Sweep, SweepConfig

    write_run(tmp_path, "cancelled", "rank 0: received SIGTERM (signal 15)", (11.0,))
    assert classify(SPEC, tmp_path).outcome == "cancelled"
    cfg = SweepConfig(out=tmp_path / "sweep", strategies=["fsdp"], depths=[4], device_type="cpu")
    monkeypatch.setattr(sweepmod, "run_probe", lambda spec, run_dir, *a, **k: classify(spec, tmp_path))
    machine = {"device_type": "cpu", "gpu_name": None, "device_bytes": 1 << 30, "host_bytes": 8 << 30}
    sweep = Sweep.__new__(Sweep)  # the sweep's own method, without probing the machine
    sweep.__dict__.update(cfg=cfg, log=lambda line: None, results=[], t0=0, out_of_time=False, machine=machine,
                          data={}, host_floor=0)
    result = sweep.probe("fsdp", Shape(123, 4), 1)
    assert result.outcome == "cancelled" and result.stop_record()["outcome"] == "cancelled"
    run_dir = cfg.out / "runs" / "fsdp" / SPEC.name
    assert read_probe(SPEC, run_dir) is None  # nothing stored: a resumed sweep runs it again


def test_a_timeout_under_a_shorter_time_per_point_runs_again_on_resume(tmp_path):
    """Regression: a probe that timed out under --time-per-point 0.5 was read back when the sweep was resumed with
    a longer limit, so its strategy's search stayed stopped at that timeout whatever limit was given. Real probes
    (the trainer on CPU, stopped while it starts)."""
    from bench.capacity.cpuhost import TINY_MEMORY_LIMIT_MIB
    from bench.capacity.sweep import Sweep, SweepConfig

    def sweep(limit):
        cfg = SweepConfig(out=tmp_path, strategies=["zero2"], search=False, depths=[2], aspect_ratios=[32],
                          max_seq_len=64, batch_search=False, time_per_point=limit, device_type="cpu",
                          memory_limit=TINY_MEMORY_LIMIT_MIB << 20)
        return Sweep(cfg, log=lambda line: None).run()["probes"]

    [first] = sweep(0.5)
    assert first["outcome"] == "timeout" and first["time_limit_s"] == 0.5 and not first["reused"]
    [again] = sweep(1.0)
    assert not again["reused"] and again["time_limit_s"] == 1.0  # run again under the longer limit
    [back] = sweep(0.5)
    assert back["reused"] and back["time_limit_s"] == 1.0  # what hung for 1 s would hang for 0.5 s


def test_a_search_stopped_by_a_timeout_counts_the_probe_that_ran(tmp_path):
    """Regression: a search counted only its probes that trained or ran out of memory, so one stopped by a timeout
    on its first probe showed `probes 0` in the report. A real probe (the trainer on CPU, stopped while it starts)."""
    from bench.capacity.cpuhost import TINY_MEMORY_LIMIT_MIB
    from bench.capacity.sweep import Sweep, SweepConfig

    cfg = SweepConfig(out=tmp_path, strategies=["zero2"], aspect_ratios=[32], max_depth=2, max_seq_len=64,
                      batch_search=False, time_per_point=0.5, device_type="cpu",
                      memory_limit=TINY_MEMORY_LIMIT_MIB << 20)
    summary = Sweep(cfg, log=lambda line: None).run()
    [search], [hung] = summary["searches"], summary["probes"]
    assert hung["outcome"] == "timeout" and search["stopped"]["outcome"] == "timeout"
    assert search["probes"] == 1


def test_read_back_only_for_the_same_settings(tmp_path):
    write_run(tmp_path, "ok")
    assert read_probe(SPEC, tmp_path) is None  # no capacity record yet: it must run
    r = classify(SPEC, tmp_path)
    r.extra["predicted_peak_bytes"] = 5
    update_run_json(tmp_path, capacity=r.record())
    back = read_probe(SPEC, tmp_path)
    assert back.reused and back.outcome == "ok" and back.tok_per_sec == 998.5
    assert back.extra["predicted_peak_bytes"] == 5
    assert read_probe(ProbeSpec("fsdp", 4, steps=4, device_type="cpu"), tmp_path) is None


def test_a_probe_under_another_memory_cap_runs_again(tmp_path):
    # an oom under --memory-limit 875M says nothing of a sweep resumed with 1100M
    capped = ProbeSpec("fsdp", 4, steps=3, device_type="cpu", memory_limit=875 << 20)
    write_run(tmp_path, "oom", "you tried to allocate 50331648 bytes", ())
    update_run_json(tmp_path, capacity=classify(capped, tmp_path).record())
    assert read_probe(capped, tmp_path).outcome == "oom"
    assert read_probe(ProbeSpec("fsdp", 4, steps=3, device_type="cpu", memory_limit=1100 << 20), tmp_path) is None
    assert read_probe(SPEC, tmp_path) is None


def test_a_probe_recorded_before_caps_were_recorded_reads_back_uncapped(tmp_path):
    write_run(tmp_path, "ok")
    record = classify(SPEC, tmp_path).record()
    del record["probe"]["memory_limit"]
    update_run_json(tmp_path, capacity=record)
    assert read_probe(SPEC, tmp_path).outcome == "ok"
    assert read_probe(ProbeSpec("fsdp", 4, steps=3, device_type="cpu", memory_limit=1 << 30), tmp_path) is None


def test_an_unknown_strategy_is_refused_naming_the_valid_ones(tmp_path):
    from bench.capacity.sweep import SweepConfig

    SweepConfig(tmp_path, ["fsdp+ac+offload"])
    with pytest.raises(ConfigError, match="valid"):
        SweepConfig(tmp_path, ["zero3"])
    with pytest.raises(ConfigError, match="valid"):
        probe.pytorch_backend(ProbeSpec("zero3", 4), tmp_path, {})


def test_a_bad_max_batch_names_the_flag_as_typed(tmp_path):
    from bench.capacity.sweep import SweepConfig

    with pytest.raises(ConfigError, match=r"^--max-batch=0: must be positive$"):
        SweepConfig(out=tmp_path, strategies=["fsdp"], depths=[2], max_batch=0)


def test_a_zero_memory_limit_or_a_vocabulary_the_token_files_cannot_hold_is_refused(tmp_path):
    from bench.capacity.sweep import SweepConfig

    with pytest.raises(ConfigError, match=r"^--memory-limit=0: must be positive"):  # not a sweep without a cap
        SweepConfig(out=tmp_path, strategies=["fsdp"], memory_limit=0)
    for vocab in (10, 265, 65546, 100000):
        with pytest.raises(ConfigError, match=rf"^--vocab-size={vocab}: the probes' tokenizer holds 266..65536"):
            SweepConfig(out=tmp_path, strategies=["fsdp"], vocab_size=vocab)
    SweepConfig(out=tmp_path, strategies=["fsdp"], vocab_size=266)
    SweepConfig(out=tmp_path, strategies=["fsdp"], vocab_size=65536)


def test_a_negative_budget_or_a_search_without_shapes_is_refused_naming_the_flag(tmp_path):
    from bench.capacity.sweep import SweepConfig

    with pytest.raises(ConfigError, match=r"^--budget=-5: must be positive seconds"):
        SweepConfig(out=tmp_path, strategies=["fsdp"], budget_s=-5)
    with pytest.raises(ConfigError, match=r"^--budget=nan: must be positive seconds"):  # it meant no bound
        SweepConfig(out=tmp_path, strategies=["fsdp"], budget_s=float("nan"))
    with pytest.raises(ConfigError, match=r"^--time-per-point=nan: must be positive"):
        SweepConfig(out=tmp_path, strategies=["fsdp"], time_per_point=float("nan"))
    for depth in (0, 1):  # refused before any data is made, as the flag
        with pytest.raises(ConfigError, match=rf"^--max-depth={depth}: the search needs at least 2"):
            SweepConfig(out=tmp_path, strategies=["fsdp"], max_depth=depth)
    SweepConfig(out=tmp_path, strategies=["fsdp"], search=False, depths=[2], max_depth=1)  # no search: not read
    SweepConfig(out=tmp_path, strategies=["fsdp"], max_depth=2, budget_s=60)


def test_a_max_depth_beyond_any_node_is_refused_not_listed_for_minutes(tmp_path):
    """Regression: --max-depth 100000 listed and predicted 50,000 shapes per strategy, minutes before any probe."""
    from bench.capacity.sweep import SEARCH_MAX_DEPTH, SweepConfig

    deepest = SEARCH_MAX_DEPTH
    with pytest.raises(ConfigError, match=rf"^--max-depth=100000: at most {deepest} \(d{deepest} has 5.3e13"):
        SweepConfig(out=tmp_path, strategies=["fsdp"], max_depth=100000)
    SweepConfig(out=tmp_path, strategies=["fsdp"], max_depth=SEARCH_MAX_DEPTH)
    SweepConfig(out=tmp_path, strategies=["fsdp"], search=False, depths=[2], max_depth=100000)  # no search: not read


def test_gpus_zero_is_refused_not_read_as_unset(tmp_path):
    from bench.cli import main

    with pytest.raises(ConfigError, match=r"^--gpus=0: must be positive$"):
        main(["-v", "capacity", "--gpus", "0", "--out", str(tmp_path)])


def test_a_search_stopped_by_a_probe_names_it_as_its_run_directory(tmp_path):
    """Regression: a search stopped by a hung probe named it `d4` or `d4-b1` depending on the path taken."""
    from bench.capacity.rebuild import search_from_probes
    from bench.capacity.probe import ProbeResult

    hung = ProbeResult(SPEC, "timeout", "no end after 200 s", num_params=123)
    search = search_from_probes("fsdp", 64, [ProbeResult(ProbeSpec("fsdp", 2, device_type="cpu"), "ok", num_params=45),
                                            hung])
    assert search["stopped"] == hung.stop_record() == {"shape": "d4-b1", "num_params": 123, "outcome": "timeout",
                                                       "message": "no end after 200 s"}
    assert search["capacity"]["name"] == "d2"


def test_a_rebuilt_summary_keeps_to_the_probes_of_the_sweep_that_ended(tmp_path):
    """`capacity --report` on an --out that also holds an earlier sweep's probes (another --memory-limit): the
    summary is the newest probe's settings' alone, and says what it left out."""
    import os

    from bench.capacity.probe import ProbeResult
    from bench.capacity.rebuild import rebuild_summary

    def probe(depth, outcome, memory_limit, mtime):
        spec = ProbeSpec("fsdp", depth, device_type="cpu", memory_limit=memory_limit)
        run_dir = tmp_path / "runs" / "fsdp" / spec.name
        run_dir.mkdir(parents=True, exist_ok=True)  # a probe of the same shape in a later sweep: the same directory
        update_run_json(run_dir, capacity=ProbeResult(spec, outcome, num_params=depth * 10).record())
        os.utime(run_dir / "run.json", (mtime, mtime))

    probe(2, "ok", 2 << 30, 100)  # an earlier sweep under a 2 GiB cap: d6 fitted there
    probe(6, "ok", 2 << 30, 110)
    probe(2, "ok", 1 << 30, 200)  # the sweep that ended, under 1 GiB (d2 probed again): d4 did not fit
    probe(4, "oom", 1 << 30, 210)
    summary = rebuild_summary(tmp_path)
    [search] = summary["searches"]
    assert search["capacity"]["name"] == "d2" and search["first_failure"]["name"] == "d4"
    assert [p["probe"]["depth"] for p in summary["probes"]] == [2, 4]
    assert summary["machine"]["memory_limit"] == 1 << 30
    assert f"1 probe(s) of an earlier sweep left out: memory_limit={2 << 30}" in summary["rebuilt"]


def test_a_rebuilt_summary_keeps_to_the_probes_of_the_gpu_that_ended(tmp_path):
    """An --out on a shared file system, swept on an H100 node, then resumed on an H200 node and killed after it
    probed d2 and d6 again: `capacity --report` rebuilt a summary of both nodes' probes (the H100's oom at d4 the
    H200's first failure) under the H100's name, where a resumed sweep runs another GPU's probes again."""
    import os

    from bench.capacity.probe import ProbeResult
    from bench.capacity.rebuild import rebuild_summary

    h100 = {"device_type": "cuda", "gpu_name": "NVIDIA H100", "device_bytes": 80 << 30, "host_bytes": 1 << 40}
    h200 = dict(h100, gpu_name="NVIDIA H200", device_bytes=141 << 30)

    def probe(depth, outcome, gpu, mtime):
        spec = ProbeSpec("fsdp", depth, device_type="cuda")
        run_dir = tmp_path / "runs" / "fsdp" / spec.name
        run_dir.mkdir(parents=True, exist_ok=True)
        update_run_json(run_dir, capacity=ProbeResult(spec, outcome, num_params=depth * 10, extra=gpu).record())
        os.utime(run_dir / "run.json", (mtime, mtime))

    probe(2, "ok", h100, 100)
    probe(4, "oom", h100, 110)
    probe(2, "ok", h200, 200)
    probe(6, "ok", h200, 210)
    summary = rebuild_summary(tmp_path)
    [search] = summary["searches"]
    assert search["capacity"]["name"] == "d6" and search["first_failure"] is None
    assert [p["probe"]["depth"] for p in summary["probes"]] == [2, 6]
    assert summary["machine"]["gpu_name"] == "NVIDIA H200"
    assert "1 probe(s) of an earlier sweep left out: device_bytes=85899345920, gpu_name=NVIDIA H100" \
        in summary["rebuilt"]


def test_a_probe_whose_run_json_was_cut_is_left_out_of_the_rebuilt_summary_in_one_note(tmp_path, capsys):
    from bench.capacity.probe import ProbeResult
    from bench.capacity.rebuild import finished_probes

    for depth in (2, 4):
        spec = ProbeSpec("fsdp", depth, device_type="cpu")
        run_dir = tmp_path / "runs" / "fsdp" / spec.name
        run_dir.mkdir(parents=True)
        update_run_json(run_dir, capacity=ProbeResult(spec, "ok").record())
    (run_dir / "run.json").write_text('{"capacity": ')  # the kill that ended the sweep cut it
    assert [p.spec.depth for p in finished_probes(tmp_path)] == [2]
    assert capsys.readouterr().err == (f"note: {run_dir / 'run.json'} is not valid JSON (Expecting value: line 1); "
                                       "that probe is left out of the rebuilt summary\n")


def test_a_rebuilt_summary_marks_a_search_complete_where_its_probes_settle_it(tmp_path):
    """`capacity --report` after a sweep killed in its batch probes marked every search incomplete, so the report said
    'not finished' (and took no ratio to fsdp) where the largest model that fits and the next that does not were both
    recorded. Such a search is complete; one with a shape of its family left between them, or stopped, is not."""
    from bench.capacity.probe import ProbeResult
    from bench.capacity.rebuild import rebuild_summary, search_from_probes
    from bench.capacity.search import num_params

    def probe(strategy, depth, outcome):
        spec = ProbeSpec(strategy, depth, device_type="cpu", vocab_size=1024)
        run_dir = tmp_path / "runs" / strategy / spec.name
        run_dir.mkdir(parents=True)
        update_run_json(run_dir, capacity=ProbeResult(spec, outcome, num_params=num_params(depth, 64, 1024)).record())

    probe("fsdp", 4, "ok"), probe("fsdp", 6, "oom")  # neighbours: settled
    probe("zero2", 2, "ok"), probe("zero2", 8, "oom")  # d4, d6 between: what the search would probe next
    probe("ddp", 2, "oom")  # the smallest shape does not fit: settled, no capacity
    searches = {s["strategy"]: s for s in rebuild_summary(tmp_path)["searches"]}
    assert (searches["fsdp"]["complete"], searches["zero2"]["complete"], searches["ddp"]["complete"]) == (
        True, False, True)
    stopped = [ProbeResult(ProbeSpec("fsdp", d, device_type="cpu"), outcome, num_params=num_params(d))
               for d, outcome in ((4, "ok"), (6, "oom"), (8, "timeout"))]
    assert search_from_probes("fsdp", 64, stopped)["complete"] is False
    assert search_from_probes("fsdp", 64, stopped[:2])["complete"] is True


def test_a_report_rebuilt_from_settled_searches_does_not_say_the_sweep_did_not_finish(tmp_path, monkeypatch, capsys):
    """`capacity --report` of a sweep that wrote no summary printed 'the sweep did not finish' even where every
    search its probes show was settled; it says the summary was rebuilt, and 'did not finish' only where a search is
    left unsettled."""
    from bench.capacity.search import Shape, num_params
    from bench.cli import main

    sweep, _ = gh200_sweep(tmp_path, monkeypatch, ["fsdp"])
    sweep.probe("fsdp", Shape(num_params(2), 2), 1)
    sweep.probe("fsdp", Shape(num_params(4), 4), 1)  # d2 fits, d4 does not: the search is settled
    assert main(["capacity", "--report", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "rebuilt from the finished probes under" in out and "(the sweep wrote no summary)" in out
    assert "did not finish" not in out
    assert "interrupted" not in json.loads((tmp_path / "summary.json").read_text())
    shutil.rmtree(tmp_path / "runs" / "fsdp" / ProbeSpec("fsdp", 4, device_type="cuda").name)
    sweep.probe("fsdp", Shape(num_params(6), 6), 1)  # d4 left between d2 and d6: what the sweep would probe next
    (tmp_path / "summary.json").unlink()
    assert main(["capacity", "--report", "--out", str(tmp_path)]) == 0
    assert "note: the sweep did not finish (an end without a summary, before every search was settled)" in (
        capsys.readouterr().out)


def test_a_rebuilt_summary_keeps_the_probes_that_ended_before_their_model_was_built(tmp_path, monkeypatch):
    """An out of memory while the model is built comes before the trainer reports its parameter count: the sweep
    recorded such a probe without one, and `capacity --report` after a killed sweep left it out (no first failure,
    `probes 0` for a search stopped by its first probe)."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult
    from bench.capacity.rebuild import rebuild_summary
    from bench.capacity.search import Shape, num_params

    sweep, _ = gh200_sweep(tmp_path, monkeypatch, ["fsdp"])
    monkeypatch.setattr(sweepmod, "run_probe", lambda spec, *a, **k: ProbeResult(
        spec, "ok", num_params=num_params(2), tok_per_sec=1.0) if spec.depth <= 2 else ProbeResult(spec, "oom"))
    sweep.probe("fsdp", Shape(num_params(2), 2), 1)
    sweep.probe("fsdp", Shape(num_params(4), 4), 1)
    spec = ProbeSpec("fsdp", 6, device_type="cuda")  # as an earlier release recorded it: no count
    run_dir = tmp_path / "runs" / "fsdp" / spec.name
    run_dir.mkdir(parents=True)
    update_run_json(run_dir, capacity=ProbeResult(spec, "failed", "rank 0: ImportError").record())
    [search] = rebuild_summary(tmp_path)["searches"]
    assert search["capacity"]["name"] == "d2" and search["first_failure"]["name"] == "d4"
    assert search["stopped"]["shape"] == "d6-b1" and search["probes"] == 3


def test_a_memory_limit_that_is_no_number_is_refused_naming_the_flag():
    from bench.commands.capacity import parse_size

    assert parse_size("1.5GiB") == 3 << 29 and parse_size("760M") == 760 << 20 and parse_size(".5G") == 1 << 29
    for text in ("1.5.5G", ".", "..M"):  # digits and dots, but no number: not a ValueError's traceback
        with pytest.raises(ConfigError, match=rf"^--memory-limit '{text}': give bytes or a size such as 760M"):
            parse_size(text)
    with pytest.raises(ConfigError, match=r"^--memory-limit '0.1': less than a byte"):  # not '--memory-limit=0'
        parse_size("0.1")


def test_a_memory_limit_in_decimal_units_means_them_and_binary_ones_too():
    """`--memory-limit 2GB` was read as 2 GiB (2,147,483,648 bytes), 7% over the 2e9 bytes asked: KB, MB, GB are
    powers of 1000, KiB, MiB, GiB and README's bare K, M, G (875M) of 1024, and a unit of neither is refused."""
    from bench.commands.capacity import parse_size

    assert parse_size("2GB") == 2 * 10 ** 9 and parse_size("1.5 gb") == 15 * 10 ** 8
    assert parse_size("875MB") == 875 * 10 ** 6 and parse_size("1000000KB") == 10 ** 9
    assert parse_size("2G") == parse_size("2GiB") == 2 << 30 and parse_size("875M") == parse_size("875MiB") == 875 << 20
    assert parse_size("400000000B") == 4 * 10 ** 8
    with pytest.raises(ConfigError, match=r"^--memory-limit '320MB': 320,000,000 bytes, too little .*at least 320M"):
        parse_size("320MB")
    units = r"\(K, M, G: powers of 1024, as KiB, MiB, GiB; KB, MB, GB: of 1000\)$"
    for text in ("2iB", "2e9", "GB"):
        with pytest.raises(ConfigError, match=rf"^--memory-limit '{text}': give bytes or a size such as .* {units}"):
            parse_size(text)


def test_a_memory_limit_too_small_to_start_a_probe_is_refused_suggesting_a_unit(tmp_path, capsys):
    """A bare `--memory-limit 875` (bytes, its unit forgotten) was taken, and every probe then failed with "can't start
    new thread": a limit below what a probe needs to start is refused, naming the value and the unit it may lack."""
    from bench.cli import main
    from bench.commands.capacity import parse_size

    assert main(["capacity", "--device-type", "cpu", "--memory-limit", "875", "--out", str(tmp_path / "c")]) == 1
    assert capsys.readouterr().err.strip() == (
        "error: --memory-limit '875': 875 bytes, too little for a probe to start (at least 320M: under ~256M a rank "
        "fails in its start-up, importing pyarrow, starting gloo's threads or mapping the token files, not in the "
        "model); a unit forgotten? give e.g. 875M or 875G")
    assert not (tmp_path / "c").exists()
    with pytest.raises(ConfigError, match=r"^--memory-limit '1k': 1,024 bytes, too little .* give e.g. 760M, 2G"):
        parse_size("1k")
    # 64M to ~200M passed, and the probe of the smallest model was then recorded as failed, importing pyarrow
    with pytest.raises(ConfigError, match=r"^--memory-limit '200M': 209,715,200 bytes, too little .*at least 320M"):
        parse_size("200M")
    with pytest.raises(ConfigError, match=r"a unit forgotten\? give e.g. 100G$"):  # 100M would be too little too
        parse_size("100")
    assert parse_size("320M") == 320 << 20


def test_an_out_that_cannot_be_a_directory_is_refused_naming_the_flag(tmp_path):
    from types import SimpleNamespace

    from bench.capacity.sweep import Sweep, SweepConfig

    (tmp_path / "file").write_text("kept")
    for out, reason in ((tmp_path / "file", "a file of that name is in the way"),  # one line, not a traceback
                        (tmp_path / "file" / "sub", f"{tmp_path / 'file'} is a file in the way")):
        cfg = SweepConfig(out=out, strategies=["fsdp"], depths=[2])
        with pytest.raises(ConfigError, match=rf"^--out {out}: .*{reason}"):
            Sweep._passes(SimpleNamespace(cfg=cfg, log=print))  # the sweep's own method, no machine probed
    assert (tmp_path / "file").read_text() == "kept"


def test_a_probe_measured_on_another_gpu_runs_again(tmp_path, monkeypatch):
    """The same --out on a shared file system, resumed on an H200 node: the H100 node's probes were read back
    and written into the summary under the H200's name and memory."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult
    from bench.capacity.search import Shape
    from bench.capacity.sweep import Sweep, SweepConfig

    h100 = {"device_type": "cuda", "gpu_name": "NVIDIA H100", "device_bytes": 80 << 30, "host_bytes": 1 << 40}
    h200 = dict(h100, gpu_name="NVIDIA H200", device_bytes=141 << 30, host_available_bytes=1 << 40)
    cfg = SweepConfig(out=tmp_path, strategies=["fsdp"], depths=[4], device_type="cuda")
    spec = ProbeSpec("fsdp", 4, device_type="cuda")
    run_dir = tmp_path / "runs" / "fsdp" / spec.name
    run_dir.mkdir(parents=True)
    update_run_json(run_dir, capacity=ProbeResult(spec, "oom", num_params=123, extra=h100).record())
    ran = []
    monkeypatch.setattr(sweepmod, "run_probe",
                        lambda spec, *a, **k: ran.append(spec) or ProbeResult(spec, "ok", tok_per_sec=1.0))
    sweep = Sweep.__new__(Sweep)  # the sweep's own method, without probing the machine
    sweep.__dict__.update(cfg=cfg, log=lambda line: None, results=[], t0=0, out_of_time=False, machine=h200, data={},
                          host_floor=0)
    result = sweep.probe("fsdp", Shape(123, 4), 1)
    assert ran == [spec] and result.outcome == "ok" and not result.reused
    sweep.results = []  # as a resumed sweep
    assert sweep.probe("fsdp", Shape(123, 4), 1).reused and len(ran) == 1  # now recorded on this GPU: read back


def test_a_sweep_resumed_with_the_device_type_it_resolved_to_reads_its_probes_back(tmp_path, monkeypatch):
    """Regression: a sweep run without --device-type (cuda, a GPU being visible) recorded its probes under the flag's
    "", so the same command resumed with --device-type cuda ran every probe again; the probes record the device
    the sweep resolved, and those recorded under "" by earlier releases read back as the device they ran on."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult
    from bench.capacity.rebuild import finished_probes
    from bench.capacity.search import Shape
    from bench.capacity.sweep import Sweep, SweepConfig

    h100 = {"device_type": "cuda", "gpu_name": "NVIDIA H100", "device_bytes": 80 << 30, "host_bytes": 1 << 40,
            "host_available_bytes": 1 << 40}
    ran = []
    monkeypatch.setattr(sweepmod, "run_probe",
                        lambda spec, *a, **k: ran.append(spec) or ProbeResult(spec, "ok", tok_per_sec=1.0))

    def sweep(device_type):
        s = Sweep.__new__(Sweep)  # the sweep's own method, without probing the machine
        s.__dict__.update(cfg=SweepConfig(out=tmp_path, strategies=["fsdp"], depths=[4], device_type=device_type),
                          log=lambda line: None, results=[], t0=0, out_of_time=False, machine=h100, data={},
                          host_floor=0)
        return s.probe("fsdp", Shape(123, 4), 1)

    assert not sweep("").reused and ran[0].device_type == "cuda"
    assert sweep("cuda").reused and sweep("").reused and len(ran) == 1
    # as an earlier release recorded it: the flag's "" beside the device it ran on
    run_dir = tmp_path / "runs" / "fsdp" / "d4-b1"
    record = json.loads((run_dir / "run.json").read_text())["capacity"]
    update_run_json(run_dir, capacity=dict(record, probe=dict(record["probe"], device_type="")))
    assert sweep("cuda").reused and len(ran) == 1
    [back] = finished_probes(tmp_path)  # `capacity --report` reads it too
    assert back.spec.device_type == "cuda" and back.outcome == "ok"


def test_report_after_a_killed_sweep_rebuilds_over_an_earlier_sweeps_summary(tmp_path, capsys):
    """A finished sweep left summary.json; a second one into the same --out (another --memory-limit) was killed
    outright after rewriting d2's and d4's probes: `capacity --report` reported the first sweep's summary, its
    capacity and its rows pointing at run directories that now held the second sweep's probes."""
    import os

    from bench.capacity.probe import ProbeResult
    from bench.capacity.sweep import load_summary
    from bench.cli import main

    earlier = {"machine": {"device_type": "cpu", "gpu_name": None, "device_bytes": 2 << 30, "host_bytes": 8 << 30,
                           "nproc": 1, "memory_limit": 2 << 30}, "config": {}, "probes": [], "interrupted": None,
               "searches": [{"strategy": "fsdp", "aspect_ratio": 64, "complete": True, "stopped": None, "probes": 2,
                             "capacity": {"name": "d6", "depth": 6, "aspect_ratio": 64, "num_params": 60},
                             "first_failure": None}]}
    (tmp_path / "summary.json").write_text(json.dumps(earlier))
    os.utime(tmp_path / "summary.json", (100, 100))
    for depth, outcome in ((2, "ok"), (4, "oom")):
        spec = ProbeSpec("fsdp", depth, device_type="cpu", memory_limit=1 << 30)
        run_dir = tmp_path / "runs" / "fsdp" / spec.name
        run_dir.mkdir(parents=True)
        extra = {"device_type": "cpu", "gpu_name": None, "device_bytes": 1 << 30, "host_bytes": 8 << 30,
                 "predicted_need_bytes": depth << 28}  # as the sweep records them
        update_run_json(run_dir, capacity=ProbeResult(spec, outcome, num_params=depth * 10, tok_per_sec=99.0,
                                                         extra=extra).record())
    assert main(["capacity", "--report", "--out", str(tmp_path)]) == 0
    [search] = load_summary(tmp_path)["searches"]
    assert search["capacity"]["name"] == "d2" and search["first_failure"]["name"] == "d4"
    assert "summary.json: rebuilt from the finished probes" in capsys.readouterr().out
    assert main(["capacity", "--report", "--out", str(tmp_path)]) == 0  # now the newest: kept, not rebuilt
    assert "summary.json: rebuilt" not in capsys.readouterr().out


def gh200_sweep(tmp_path, monkeypatch, strategies: list[str]):
    """A sweep of `strategies` on a 95 GiB GH200 whose probes train up to d2 and run out of memory above: its own
    searches and summary, without probing the machine (the caller sets the GPU's free memory); (sweep, its log)."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult
    from bench.capacity.sweep import Sweep, SweepConfig

    gh200 = {"device_type": "cuda", "gpu_name": "NVIDIA GH200", "device_bytes": 95 << 30, "host_bytes": 1 << 40,
             "host_available_bytes": 1 << 40}
    cfg = SweepConfig(out=tmp_path, strategies=strategies, max_depth=6, device_type="cuda", batch_search=False)
    monkeypatch.setattr(sweepmod, "run_probe", lambda spec, *a, **k: ProbeResult(
        spec, "ok" if spec.depth <= 2 else "oom", tok_per_sec=1.0 if spec.depth <= 2 else None))
    lines: list[str] = []
    sweep = Sweep.__new__(Sweep)
    sweep.__dict__.update(cfg=cfg, log=lines.append, results=[], searches={}, not_probed=[], t0=0, out_of_time=False,
                          interrupted=None, machine=gh200, data={}, host_floor=0)
    return sweep, lines


def test_the_summary_of_a_sweep_of_other_settings_is_kept_beside_its_probes(tmp_path, monkeypatch):
    """Regression: a sweep into the --out of one with another --gpus replaced its summary.json and probes.csv: the
    earlier sweep's capacities were lost to `capacity --report`. They move to <out>/earlier/ (where its probes go);
    a resumed sweep of the same settings, or a second summary of the same sweep, replaces its own."""
    sweep, lines = gh200_sweep(tmp_path, monkeypatch, ["fsdp"])
    monkeypatch.setattr(sweep.cfg, "depths", [2])
    monkeypatch.setattr(sweep.cfg, "search", False)
    sweep._passes()
    sweep.write_summary()
    sweep.write_summary()  # the same sweep, again (a stop after its end): nothing set aside
    assert not (tmp_path / "earlier").exists()
    monkeypatch.setattr(sweep.cfg, "nproc", 2)  # the same --out, with --gpus 2
    sweep.results, lines[:] = [], []
    sweep._passes()
    second = sweep.write_summary()
    kept = tmp_path / "earlier" / "summary-1.json"
    assert json.loads(kept.read_text())["config"]["nproc"] == 1
    assert (tmp_path / "earlier" / "probes-1.csv").read_text().count("\n") == 2  # its header and its d2 probe
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(second))
    assert any(str(kept) in line and "nproc=1" in line for line in lines), lines


@pytest.mark.parametrize("free_gib, held", [(60, 35 << 30), (94.8, None)])
def test_a_capacity_bounded_by_memory_other_processes_held_says_so(tmp_path, monkeypatch, free_gib, held):
    """A shared GPU (--no-exclusive, a workstation): another job held 35 of its 95 GiB, d4 ran out of memory, and
    the summary gave d2 as the node's capacity without a word; now each probe records the GPU's free memory as it
    started, and a first failure under others' memory is named (an idle GPU's few hundred MiB are not)."""
    from bench.capacity import sweep as sweepmod

    sweep, lines = gh200_sweep(tmp_path, monkeypatch, ["fsdp"])
    monkeypatch.setattr(sweepmod, "gpu_free", lambda nproc: int(free_gib * 2 ** 30))
    sweep._search("fsdp", 64)
    [search] = sweep.write_summary()["searches"]
    assert search["capacity"]["name"] == "d2" and search["first_failure"]["name"] == "d4"
    assert search["held_by_others_bytes"] == held
    recorded = read_probe(ProbeSpec("fsdp", 4, device_type="cuda"), tmp_path / "runs" / "fsdp" / "d4-b1")
    assert recorded.device_free_bytes == int(free_gib * 2 ** 30)  # in run.json: a resumed sweep keeps it
    row = next(line for line in lines if line.startswith("fsdp"))
    assert row.endswith("when other processes held 35.0 GiB of the GPU") == bool(held)
    assert any("bounds that capacity by what they left" in line for line in lines) == bool(held)


@pytest.mark.parametrize("free_gib, ratios", [({"fsdp": 94.8, "zero2": 94.8}, [1.0, 1.0]),
                                               ({"fsdp": 94.8, "zero2": 60}, [1.0, None]),
                                               ({"fsdp": 60, "zero2": 94.8}, [None, None])])
def test_no_ratio_to_fsdp_where_other_processes_held_either_sides_memory(tmp_path, monkeypatch, free_gib, ratios):
    """A shared GPU: zero2's search ran while another job held 35 of its 95 GiB, fsdp's on the whole GPU, and the
    summary gave zero2 at '1.00 x fsdp' as if the two had seen the same memory; now no ratio is taken to or from a
    capacity bounded by memory others held, and the note under the table says so."""
    from bench.capacity import sweep as sweepmod

    sweep, lines = gh200_sweep(tmp_path, monkeypatch, ["fsdp", "zero2"])
    for strategy in sweep.cfg.strategies:
        monkeypatch.setattr(sweepmod, "gpu_free", lambda nproc, s=strategy: int(free_gib[s] * 2 ** 30))
        sweep._search(strategy, 64)
    searches = sweep.write_summary()["searches"]
    assert [s["first_failure"]["name"] for s in searches] == ["d4", "d4"]
    assert [s["ratio_to_fsdp"] for s in searches] == ratios
    rows = [line for line in lines if line.startswith(("fsdp ", "zero2 "))]
    assert [row.split()[3] for row in rows] == [f"{r:.2f}" if r else "-" for r in ratios]
    assert any("no 'x fsdp' is taken to or from it" in line for line in lines) == (None in ratios)


def test_the_free_memory_read_is_of_the_gpus_the_ranks_see(monkeypatch):
    """On a node shared by jobs the GPUs of this one are those CUDA_VISIBLE_DEVICES names, not nvidia-smi's 0, 1."""
    from bench.capacity.sweep import _gpu_ids

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert _gpu_ids(1) == "2" and _gpu_ids(2) == "2,3"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _gpu_ids(4) == "0,1,2,3"


def test_the_default_gpus_are_those_the_ranks_see(tmp_path, monkeypatch):
    """A job given 2 of a node's 8 GPUs (CUDA_VISIBLE_DEVICES=2,5): `capacity` without --gpus started every probe on
    8 ranks, nvidia-smi -L's count of the node, and each failed to find its GPU, stopping every search."""
    from bench.commands.capacity import _gpus

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + 'case "$1" in -L) for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H100"; done;; '
                   '*) echo "NVIDIA H100, 81559";; esac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert _gpus()[0] == 2
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _gpus()[0] == 8


@pytest.mark.parametrize("visible", ["", "-1", "NoDevFiles"])
def test_a_job_shown_no_gpu_probes_on_one_rank_not_every_gpu_of_the_node(tmp_path, monkeypatch, visible):
    """CUDA_VISIBLE_DEVICES set to show the ranks no GPU (empty, -1, Slurm's NoDevFiles) was read as unset, or as
    one GPU: `capacity` without --gpus started its probes on nvidia-smi's count of the node, and the sweep read
    the memory of GPUs its ranks could not use."""
    from bench.capacity import sweep as sweepmod
    from bench.commands.capacity import _gpus

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + 'case "$1" in -L) for i in 0 1 2 3; do echo "GPU $i: NVIDIA H100"; done;; '
                   '*) echo "NVIDIA H100, 81559";; esac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert sweepmod.visible_gpus() == [] and sweepmod._gpu_ids(2) == "" and sweepmod._smi("memory.free", 2) == []
    assert _gpus()[0] == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"1,{visible},2")  # CUDA reads no further than a name of no GPU
    assert sweepmod.visible_gpus() == (["1"] if visible else ["1", "2"])


def test_nvidia_smi_finding_no_device_counts_no_gpu(tmp_path, monkeypatch):
    """Its one line, "No devices were found", is no GPU's: the probes run on one rank, the least there is."""
    from bench.capacity import sweep as sweepmod
    from bench.commands.capacity import _gpus

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'No devices were found'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(sweepmod, "_gpu", lambda: ("a GPU", 2 ** 30))  # torch sees one
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert _gpus()[0] == 1


@pytest.mark.parametrize("script, why", [("exec sleep 30", "did not answer in 1 s"), (None, "could not run")])
def test_the_default_gpus_are_one_when_nvidia_smi_hangs_or_is_missing(tmp_path, monkeypatch, capsys, script, why):
    """`nvidia-smi -L` ran without a timeout (a wedged driver hung `capacity`), and a GPU torch saw without
    nvidia-smi ended it in a FileNotFoundError traceback."""
    import time

    from bench.capacity import sweep as sweepmod
    from bench.commands.capacity import _gpus

    if script:
        (tmp_path / "nvidia-smi").write_text(f"#!/bin/sh\n{script}\n")
        (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}" if script else str(tmp_path))
    monkeypatch.setattr(sweepmod, "_gpu", lambda: ("a GPU", 2 ** 30))
    monkeypatch.setattr(sweepmod, "SMI_TIMEOUT_S", 1)
    t0 = time.monotonic()
    assert _gpus()[0] == 1
    assert time.monotonic() - t0 < 10
    assert capsys.readouterr().err == (f"note: nvidia-smi -L {why}, so the GPUs were not counted: probing with 1; "
                                       "give --gpus N for another count\n")


@pytest.mark.parametrize("script, why", [("exec sleep 30", "did not answer in 1 s"),
                                         ("exit 9", "failed (exit status 9)"), (None, "could not run")])
def test_the_default_gpus_are_those_the_ranks_see_when_nvidia_smi_cannot_count_them(tmp_path, monkeypatch, capsys,
                                                                                    script, why):
    """A job shown 4 GPUs (CUDA_VISIBLE_DEVICES=0,1,2,3) whose nvidia-smi -L hung or failed probed on 1 GPU, the
    hang's note on stdout among the sweep's lines and a failure's with none. No GPU runs here: a fake nvidia-smi
    stands in, and torch's view of the first GPU is set."""
    from bench.capacity import sweep as sweepmod
    from bench.commands.capacity import _gpus

    if script:
        (tmp_path / "nvidia-smi").write_text(f"#!/bin/sh\n[ \"$1\" = -L ] || exit 6\n{script}\n")
        (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}" if script else str(tmp_path))
    monkeypatch.setattr(sweepmod, "_gpu", lambda: ("a GPU", 2 ** 30))
    monkeypatch.setattr(sweepmod, "SMI_TIMEOUT_S", 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert _gpus()[0] == 4
    out, err = capsys.readouterr()
    assert out == "" and err == (f"note: nvidia-smi -L {why}, so the GPUs were counted from CUDA_VISIBLE_DEVICES: "
                                 "probing with 4; give --gpus N for another count\n")


def test_nvidia_smi_finding_no_device_and_exiting_so_counts_no_gpu(tmp_path, monkeypatch, capsys):
    from bench.capacity import sweep as sweepmod
    from bench.commands.capacity import _gpus

    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(sweepmod, "_gpu", lambda: ("a GPU", 2 ** 30))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert _gpus()[0] == 1 and capsys.readouterr().err == ""


@pytest.mark.parametrize("script, free", [
    ("echo 81000; echo 80000", 80000 * 2 ** 20),  # the least of the probe's GPUs
    ("echo '[N/A]'", None),  # a GPU that does not report it
    ("exit 6", None),  # no such GPU
    ("exec sleep 30", None),  # a wedged driver: the sweep goes on without the figure, not with it
])
def test_free_memory_from_nvidia_smi_or_none_when_it_cannot_tell(tmp_path, monkeypatch, script, free):
    import time

    from bench.capacity import sweep as sweepmod

    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{script}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(sweepmod, "SMI_TIMEOUT_S", 1)
    t0 = time.monotonic()
    assert sweepmod.gpu_free(2) == free
    assert time.monotonic() - t0 < 10


def test_a_budget_under_what_a_probe_needs_is_refused(tmp_path):
    """Regression: --budget 10 ran no probe (none starts with less than 20 s of the budget left), yet each was
    reported `not run: the sweep's time budget is spent` a second after the sweep began."""
    from bench.capacity.sweep import SweepConfig

    with pytest.raises(ConfigError, match=r"^--budget=10: no probe starts with less than 20 s of the budget left; "
                                          r"give at least 20$"):
        SweepConfig(out=tmp_path, strategies=["fsdp"], budget_s=10)
    SweepConfig(out=tmp_path, strategies=["fsdp"], budget_s=20)


@pytest.mark.parametrize("damage", ['{"capacity": {"pro', "[]", None])
def test_report_after_a_killed_sweep_skips_a_damaged_probe_naming_it(tmp_path, capsys, damage):
    """A probe's run.json cut short by the kill (or not an object) stopped the rebuild on one error line, so the
    probes that finished went unreported."""
    from bench.capacity.probe import ProbeResult
    from bench.capacity.sweep import load_summary
    from bench.cli import main

    for depth, outcome in ((2, "ok"), (4, "oom"), (6, None)):
        spec = ProbeSpec("fsdp", depth, device_type="cpu")
        run_dir = tmp_path / "runs" / "fsdp" / spec.name
        run_dir.mkdir(parents=True)
        extra = {"device_type": "cpu", "gpu_name": None, "device_bytes": 1 << 30, "host_bytes": 8 << 30,
                 "predicted_need_bytes": depth << 28}  # as the sweep records them
        if outcome:
            update_run_json(run_dir, capacity=ProbeResult(spec, outcome, num_params=depth * 10, tok_per_sec=99.0,
                                                          extra=extra).record())
        elif damage is None:  # as a read that fails (EACCES, EIO)
            (run_dir / "run.json").mkdir()
        else:
            (run_dir / "run.json").write_text(damage)
    assert main(["capacity", "--report", "--out", str(tmp_path)]) == 0
    [search] = load_summary(tmp_path)["searches"]
    assert search["capacity"]["name"] == "d2" and search["first_failure"]["name"] == "d4"
    [note] = [line for line in capsys.readouterr().err.splitlines() if "run.json" in line]
    assert note.startswith(f"note: {run_dir / 'run.json'} ") and "left out" in note


@pytest.mark.parametrize("damage", ['{"capacity": {"pro', "[]", '{"capacity": 3}', None])
def test_a_resumed_sweep_runs_a_damaged_probe_again_naming_it(tmp_path, monkeypatch, capsys, damage):
    """A probe's run.json cut short by the kill that ended the sweep stopped the resumed sweep on one error line,
    though the rebuilt report said to resume it and the probe's directory is emptied before it runs anyway."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult
    from bench.capacity.search import Shape
    from bench.capacity.sweep import Sweep, SweepConfig

    cpu = {"device_type": "cpu", "gpu_name": None, "device_bytes": 1 << 30, "host_bytes": 8 << 30,
           "host_available_bytes": 8 << 30}
    cfg = SweepConfig(out=tmp_path, strategies=["fsdp"], depths=[4], device_type="cpu")
    spec = ProbeSpec("fsdp", 4, device_type="cpu")
    run_dir = tmp_path / "runs" / "fsdp" / spec.name
    run_dir.mkdir(parents=True)
    if damage is None:  # as a read that fails (EACCES, EIO)
        (run_dir / "run.json").mkdir()
    else:
        (run_dir / "run.json").write_text(damage)
    ran = []

    def run_probe(spec, run_dir, *a, **k):
        ran.append(spec)
        shutil.rmtree(run_dir)  # as run_probe does
        run_dir.mkdir()
        return ProbeResult(spec, "ok", tok_per_sec=1.0)

    monkeypatch.setattr(sweepmod, "run_probe", run_probe)
    sweep = Sweep.__new__(Sweep)  # the sweep's own method, without probing the machine
    sweep.__dict__.update(cfg=cfg, log=lambda line: None, results=[], t0=0, out_of_time=False, machine=cpu, data={},
                          host_floor=0)
    result = sweep.probe("fsdp", Shape(123, 4), 1)
    assert ran == [spec] and result.outcome == "ok" and not result.reused
    [note] = capsys.readouterr().err.splitlines()
    assert note.startswith(f"note: {run_dir / 'run.json'} ") and note.endswith("; that probe runs again")
    sweep.results = []  # as a resumed sweep
    assert sweep.probe("fsdp", Shape(123, 4), 1).reused and len(ran) == 1  # recorded anew: read back


def test_a_depth_the_search_probes_again_is_one_probe_in_the_summary(tmp_path, monkeypatch):
    """Regression: --depths 2 with the search (benchmarks/capacity_bench.py's depth-24 point) probed d2 as a point,
    then the search read it back and recorded it again, so summary.json, probes.csv and the report's every-probe
    table held d2-b1 twice."""
    from bench.capacity.search import family

    sweep, lines = gh200_sweep(tmp_path, monkeypatch, ["fsdp"])
    monkeypatch.setattr(sweep.cfg, "depths", [2])
    sweep.probe("fsdp", family(2)[0], 1)
    sweep._search("fsdp", 64)
    summary = sweep.write_summary()
    assert sorted(p["probe"]["depth"] for p in summary["probes"]) == [2, 4, 6]
    assert sum(" d2-b1 " in line and "->" in line for line in lines) == 1
    [search] = summary["searches"]
    assert search["capacity"]["name"] == "d2" and search["first_failure"]["name"] == "d4" and search["complete"]


def test_a_depths_point_that_fails_at_one_aspect_ratio_stops_that_aspect_ratios_search_alone(tmp_path, monkeypatch):
    """Regression: --depths 2 --aspect-ratios 64,128 whose d2-a128 point crashed stopped the search at every aspect
    ratio, a64's too (its d2 had trained), each row saying `failed at d2-a128`; a point's failure or hang stops only
    the search of its own width, and that search still names it."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult

    sweep, lines = gh200_sweep(tmp_path, monkeypatch, ["fsdp"])
    monkeypatch.setattr(sweep.cfg, "depths", [2])
    monkeypatch.setattr(sweep.cfg, "aspect_ratios", [64, 128])
    monkeypatch.setattr(sweepmod.capdata, "prepare", lambda base_dir, vocab_size: base_dir)

    def run_probe(spec, *a, **k):
        if spec.aspect_ratio == 128:
            return ProbeResult(spec, "failed", "rank 0 crashed")
        return ProbeResult(spec, "ok" if spec.depth <= 2 else "oom", tok_per_sec=1.0 if spec.depth <= 2 else None)

    monkeypatch.setattr(sweepmod, "run_probe", run_probe)
    sweep._passes()
    a64, a128 = (sweep.searches[("fsdp", ar)] for ar in (64, 128))
    assert a64["stopped"] is None and a64["complete"] and a64["probes"] > 0
    assert a64["capacity"]["name"] == "d2" and a64["first_failure"]["name"] == "d4"
    assert a128["stopped"]["outcome"] == "failed" and a128["stopped"]["shape"] == "d2-a128-b1"
    assert a128["stopped"]["message"] == "rank 0 crashed" and not a128["complete"] and a128["probes"] == 0
    sweep.write_summary()
    rows = [line for line in lines if line.startswith("fsdp")]
    assert rows[0].endswith("d4 (" + format(a64["first_failure"]["num_params"], ",") + ")")
    assert rows[1].endswith("failed at d2-a128-b1")


@pytest.mark.parametrize("outcome", ["failed", "timeout"])
def test_depths_points_after_a_failure_at_their_aspect_ratio_are_not_probed(tmp_path, monkeypatch, outcome):
    """Regression: --depths 2,4,6 --aspect-ratios 64,128 whose d2-a128 point crashed (or hung) still probed d4-a128
    and d6-a128, each as likely to crash and a hang up to --time-per-point, though that width's search was already
    not started for it; they are skipped for that reason, and said so, and a64's points are probed."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult

    sweep, lines = gh200_sweep(tmp_path, monkeypatch, ["fsdp"])
    monkeypatch.setattr(sweep.cfg, "depths", [2, 4, 6])
    monkeypatch.setattr(sweep.cfg, "aspect_ratios", [64, 128])
    monkeypatch.setattr(sweep.cfg, "search", False)
    monkeypatch.setattr(sweepmod.capdata, "prepare", lambda base_dir, vocab_size: base_dir)
    ran = []

    def run_probe(spec, *a, **k):
        ran.append(spec.name)
        if spec.aspect_ratio == 128:
            return ProbeResult(spec, outcome, "rank 0 crashed")
        return ProbeResult(spec, "ok" if spec.depth <= 2 else "oom", tok_per_sec=1.0 if spec.depth <= 2 else None)

    monkeypatch.setattr(sweepmod, "run_probe", run_probe)
    sweep._passes()
    assert ran == ["d2-b1", "d4-b1", "d6-b1", "d2-a128-b1"]
    skips = [line for line in lines if "not probed" in line]
    assert skips == [f"fsdp d{d}-a128-b1 not probed: d2-a128-b1, smaller, at this aspect ratio ended {outcome} "
                     "(rank 0 crashed)" for d in (4, 6)]
    [a128] = [s for s in sweep.write_summary()["searches"] if s["aspect_ratio"] == 128]
    assert a128["stopped"]["shape"] == "d2-a128-b1" and a128["probes"] == 1


def test_a_resumed_sweep_runs_a_failed_probe_again_keeping_the_failed_attempt(tmp_path, monkeypatch):
    """Regression: a probe that crashed (`failed`: a node's hiccup as likely as the model) was read back on every
    resume, so its strategy's search stayed stopped there until the sweep's directory was deleted by hand; a
    resumed sweep runs it again and says so, the failed attempt's run directory moved aside, not deleted."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult
    from bench.capacity.search import Shape
    from bench.capacity.sweep import Sweep, SweepConfig

    cpu = {"device_type": "cpu", "gpu_name": None, "device_bytes": 1 << 30, "host_bytes": 8 << 30,
           "host_available_bytes": 8 << 30}
    cfg = SweepConfig(out=tmp_path, strategies=["fsdp"], depths=[4], device_type="cpu")
    spec = ProbeSpec("fsdp", 4, device_type="cpu")
    run_dir = tmp_path / "runs" / "fsdp" / spec.name
    outcomes = ["failed", "failed", "ok"]

    def run_probe(spec, run_dir, *a, **k):
        shutil.rmtree(run_dir, ignore_errors=True)  # as run_probe does
        run_dir.mkdir(parents=True)
        outcome = outcomes.pop(0)
        (run_dir / "train.log").write_text(f"attempt {3 - len(outcomes)}: {outcome}\n")
        return ProbeResult(spec, outcome, "rank 0 crashed" if outcome == "failed" else None, tok_per_sec=1.0)

    monkeypatch.setattr(sweepmod, "run_probe", run_probe)
    lines: list[str] = []
    sweep = Sweep.__new__(Sweep)  # the sweep's own method, without probing the machine
    sweep.__dict__.update(cfg=cfg, log=lines.append, results=[], t0=0, out_of_time=False, machine=cpu, data={},
                          host_floor=0)
    assert sweep.probe("fsdp", Shape(123, 4), 1).outcome == "failed"
    assert sweep.probe("fsdp", Shape(123, 4), 1).outcome == "failed" and len(outcomes) == 2  # once a sweep
    kept = []
    for left in (1, 0):
        sweep.results, lines[:] = [], []  # as a resumed sweep
        result = sweep.probe("fsdp", Shape(123, 4), 1)
        assert len(outcomes) == left and not result.reused
        [moved] = [line for line in lines if "runs again" in line]
        kept.append(tmp_path / "failed" / "fsdp" / f"{spec.name}-{2 - left}")
        assert str(kept[-1]) in moved and "rank 0 crashed" in moved
    assert [(k / "train.log").read_text() for k in kept] == ["attempt 1: failed\n", "attempt 2: failed\n"]
    assert read_probe(spec, kept[0]).outcome == "failed"  # its record kept with it
    assert (run_dir / "train.log").read_text() == "attempt 3: ok\n" and result.outcome == "ok"
    sweep.results = []
    assert sweep.probe("fsdp", Shape(123, 4), 1).reused  # ok is a fact of the size: read back


CPU_HOST = {"device_type": "cpu", "gpu_name": None, "device_bytes": 1 << 30, "host_bytes": 8 << 30,
            "host_available_bytes": 8 << 30}


def rerunning_cpu_sweep(monkeypatch, cfg) -> tuple:
    """A sweep of `cfg` on a CPU host whose probes, when run, end ok (their run directory emptied first, as run_probe
    does), without probing the machine; (sweep, its log)."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult
    from bench.capacity.sweep import Sweep

    def run_probe(spec, run_dir, *a, **k):
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        return ProbeResult(spec, "ok", tok_per_sec=1.0)

    monkeypatch.setattr(sweepmod, "run_probe", run_probe)
    lines: list[str] = []
    sweep = Sweep.__new__(Sweep)  # the sweep's own method, without probing the machine
    sweep.__dict__.update(cfg=cfg, log=lines.append, results=[], t0=0, out_of_time=False, machine=CPU_HOST, data={},
                          host_floor=0)
    return sweep, lines


@pytest.mark.parametrize("earlier", ["steps", "gpu"])
def test_a_failed_probe_of_other_settings_is_kept_as_a_failed_attempt(tmp_path, monkeypatch, earlier):
    """Regression: a `failed` probe of another --steps (or measured on another GPU) was not moved to <out>/failed/
    as a failed probe of the same settings is: the new attempt deleted its run directory, and its log with it."""
    from bench.capacity.probe import ProbeResult
    from bench.capacity.search import Shape
    from bench.capacity.sweep import SweepConfig

    spec = ProbeSpec("fsdp", 4, steps=4 if earlier == "steps" else 3, device_type="cpu")
    run_dir = tmp_path / "runs" / "fsdp" / spec.name
    run_dir.mkdir(parents=True)
    (run_dir / "train.log").write_text("rank 0 crashed\n")
    extra = dict(CPU_HOST, device_bytes=2 << 30) if earlier == "gpu" else CPU_HOST
    update_run_json(run_dir, capacity=ProbeResult(spec, "failed", "rank 0 crashed", extra=extra).record())
    sweep, lines = rerunning_cpu_sweep(monkeypatch, SweepConfig(out=tmp_path, strategies=["fsdp"], depths=[4]))
    assert sweep.probe("fsdp", Shape(123, 4), 1).outcome == "ok"
    kept = tmp_path / "failed" / "fsdp" / f"{spec.name}-1"
    assert (kept / "train.log").read_text() == "rank 0 crashed\n"
    assert any(str(kept) in line and "rank 0 crashed" in line for line in lines)


@pytest.mark.parametrize("earlier, says", [("nproc", "nproc=1"), ("seq", "max_seq_len=64"),
                                            ("gpu", "another device or a shorter --time-per-point")])
def test_a_measured_probe_of_other_settings_is_kept_when_it_runs_again(tmp_path, monkeypatch, earlier, says):
    """Regression: `capacity --gpus 2` into the --out of a `--gpus 1` sweep (or another --seq, or another GPU) ran each
    probe again over the run directory of the one measured before: its figures and its log were deleted. It is moved
    to <out>/earlier/ first, and the log says with what it was measured."""
    from bench.capacity.probe import ProbeResult
    from bench.capacity.search import Shape
    from bench.capacity.sweep import SweepConfig

    now = ProbeSpec("fsdp", 4, max_seq_len=128, nproc=2, device_type="cpu")
    before = ProbeSpec("fsdp", 4, nproc=1 if earlier == "nproc" else 2, max_seq_len=64 if earlier == "seq" else 128,
                       device_type="cpu")
    assert before.name == now.name  # one run directory for both
    run_dir = tmp_path / "runs" / "fsdp" / now.name
    run_dir.mkdir(parents=True)
    (run_dir / "train.log").write_text("measured before\n")
    extra = dict(CPU_HOST, device_bytes=2 << 30) if earlier == "gpu" else CPU_HOST
    update_run_json(run_dir, capacity=ProbeResult(before, "ok", tok_per_sec=7.0, extra=extra).record())
    cfg = SweepConfig(out=tmp_path, strategies=["fsdp"], depths=[4], nproc=2, max_seq_len=128)
    sweep, lines = rerunning_cpu_sweep(monkeypatch, cfg)
    result = sweep.probe("fsdp", Shape(123, 4), 1)
    assert result.tok_per_sec == 1.0 and not result.reused
    kept = tmp_path / "earlier" / "fsdp" / f"{now.name}-1"
    assert (kept / "train.log").read_text() == "measured before\n"
    assert read_probe(before, kept).tok_per_sec == 7.0  # its record kept with it
    assert any(str(kept) in line and f"({says})" in line for line in lines), lines


def test_depths_points_not_probed_after_a_failure_are_in_the_summary_the_csv_and_the_report(tmp_path, monkeypatch):
    """Regression: --depths 2,4,6 at an aspect ratio whose d2 point crashed skipped d4 and d6, said so in the log
    alone: summary.json, probes.csv and the report listed d2 only, as if d4 and d6 had never been asked for."""
    import csv

    from bench.analysis.capacity import write_capacity_report
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult

    sweep, lines = gh200_sweep(tmp_path, monkeypatch, ["fsdp"])
    monkeypatch.setattr(sweep.cfg, "depths", [2, 4, 6])
    monkeypatch.setattr(sweep.cfg, "search", False)
    monkeypatch.setattr(sweepmod.capdata, "prepare", lambda base_dir, vocab_size: base_dir)
    monkeypatch.setattr(sweepmod, "run_probe", lambda spec, *a, **k: ProbeResult(spec, "failed", "rank 0 crashed"))
    sweep.machine["nproc"] = 1  # as machine() records it, for the report
    sweep._passes()
    summary = sweep.write_summary()
    assert [p["probe"]["depth"] for p in summary["probes"]] == [2]
    skipped = summary["not_probed"]
    assert [(p["probe"]["depth"], p["outcome"]) for p in skipped] == [(4, "not probed"), (6, "not probed")]
    assert all(p["after"] == {"shape": "d2-b1", "num_params": summary["probes"][0]["num_params"],
                              "outcome": "failed", "message": "rank 0 crashed"} for p in skipped)
    assert all(p["num_params"] > summary["probes"][0]["num_params"] for p in skipped)
    with open(tmp_path / "probes.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["depth"], r["outcome"]) for r in rows] == [("2", "failed"), ("4", "not probed"), ("6", "not probed")]
    assert rows[1]["message"] == "d2-b1, smaller, at this aspect ratio ended failed (rank 0 crashed)"
    md = write_capacity_report([tmp_path], tmp_path / "report").read_text()
    for depth in (4, 6):
        assert re.search(rf"\| *fsdp *\| *1 *\| *{depth} *\| *1 *\| *[\d,]+ *\| *not probed: d2-b1 failed *\|", md)
    summary.pop("not_probed")  # a summary of an earlier release: read as before
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert "not probed" not in write_capacity_report([tmp_path], tmp_path / "report").read_text()


def test_a_sweep_killed_before_its_summary_still_reports_the_depths_points_not_probed(tmp_path, monkeypatch, capsys):
    """Regression: --depths 2,4,6 --aspect-ratios 64,128 whose d2-a128 point crashed, then killed outright before its
    summary: the summary `capacity --report` rebuilt from the run directories listed d2-a128 alone, d4-a128 and
    d6-a128, skipped for it, left no run directory and were lost; the rebuilt summary lists them as the sweep's."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult
    from bench.capacity.sweep import load_summary
    from bench.cli import main

    sweep, lines = gh200_sweep(tmp_path, monkeypatch, ["fsdp"])
    monkeypatch.setattr(sweep.cfg, "depths", [2, 4, 6])
    monkeypatch.setattr(sweep.cfg, "aspect_ratios", [64, 128])
    monkeypatch.setattr(sweep.cfg, "search", False)
    monkeypatch.setattr(sweepmod.capdata, "prepare", lambda base_dir, vocab_size: base_dir)
    monkeypatch.setattr(sweepmod, "run_probe", lambda spec, *a, **k: ProbeResult(
        spec, "failed" if spec.aspect_ratio == 128 else "ok", "rank 0 crashed", tok_per_sec=1.0))
    sweep.machine["nproc"] = 1
    sweep._passes()
    expected = sweep.write_summary()["not_probed"]
    assert [p["probe"]["depth"] for p in expected] == [4, 6]
    (tmp_path / "summary.json").unlink()  # as a SIGKILL leaves the sweep
    assert main(["capacity", "--report", "--out", str(tmp_path)]) == 0
    assert load_summary(tmp_path)["not_probed"] == expected
    md = (tmp_path / "report" / "capacity.md").read_text()
    for depth in (4, 6):
        assert re.search(rf"\| *fsdp *\| *1 *\| *{depth} *\| *1 *\| *[\d,]+ *\| *not probed: d2-a128-b1 failed *\|", md)


def test_a_depths_sweep_cut_by_its_budget_counts_the_probes_that_ran(tmp_path, monkeypatch):
    """Regression: --depths 2,4,6 with a --budget spent after d2 gave its summary row 2 probes, d2 and d4, whose probe
    was never started for want of time (its parameter count filled in all the same)."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult

    sweep, lines = gh200_sweep(tmp_path, monkeypatch, ["fsdp"])
    monkeypatch.setattr(sweep.cfg, "depths", [2, 4, 6])
    monkeypatch.setattr(sweep.cfg, "search", False)
    monkeypatch.setattr(sweep.cfg, "budget_s", 100.0)
    sweep.t0 = float("inf")  # the whole budget left for the first probe
    monkeypatch.setattr(sweepmod.capdata, "prepare", lambda base_dir, vocab_size: base_dir)

    def run_probe(spec, *a, **k):
        sweep.t0 = 0.0  # and none after it
        return ProbeResult(spec, "ok", tok_per_sec=1.0)

    monkeypatch.setattr(sweepmod, "run_probe", run_probe)
    sweep._passes()
    summary = sweep.write_summary()
    assert [p["probe"]["depth"] for p in summary["probes"]] == [2] and summary["not_run_for_budget"] == 1
    [search] = summary["searches"]
    assert search["probes"] == 1 and search["capacity"]["name"] == "d2" and not search["complete"]


@pytest.mark.parametrize("depths, not_probed", [([4, 8], [8]), ([2, 8], []), ([2], [])])
def test_a_sweep_resumed_with_other_depths_and_killed_reports_the_points_it_left_not_probed(tmp_path, monkeypatch,
                                                                                           depths, not_probed):
    """Regression: --depths 2,4,6 whose d4-a128 point hung left d6-a128 not probed; resumed with --depths 4,8 (2,8 or
    2) and killed before its summary, `capacity --report` named d6-a128 not probed, from the first sweep's list (its
    summary, or the probes that sweep recorded), though this sweep did not ask for it, and left out d8-a128, which
    this sweep did leave not probed after the d4-a128 it read back."""
    from bench.capacity import sweep as sweepmod
    from bench.capacity.probe import ProbeResult
    from bench.capacity.sweep import load_summary
    from bench.cli import main

    def sweep(depths):
        sweep, lines = gh200_sweep(tmp_path, monkeypatch, ["fsdp"])
        monkeypatch.setattr(sweep.cfg, "depths", depths)
        monkeypatch.setattr(sweep.cfg, "aspect_ratios", [64, 128])
        monkeypatch.setattr(sweep.cfg, "search", False)
        monkeypatch.setattr(sweepmod, "run_probe", lambda spec, *a, **k: ProbeResult(
            spec, "timeout", "no end") if (spec.depth, spec.aspect_ratio) == (4, 128) else ProbeResult(
            spec, "ok", tok_per_sec=1.0))
        sweep.machine["nproc"] = 1
        sweep._passes()
        return sweep

    monkeypatch.setattr(sweepmod.capdata, "prepare", lambda base_dir, vocab_size: base_dir)
    first = sweep([2, 4, 6]).write_summary()
    assert [(p["probe"]["depth"], p["probe"]["aspect_ratio"]) for p in first["not_probed"]] == [(6, 128)]
    for path in [*(tmp_path / "runs").glob("*/*/run.json"), tmp_path / "summary.json"]:  # as written in the past
        os.utime(path, (100, 100) if path.name == "summary.json" else (50, 50))
    resumed = sweep(depths)  # killed outright before its summary
    assert all(r.reused for r in resumed.results if r.spec.depth in (2, 4))
    assert [r.spec.depth for r in resumed.not_probed] == not_probed  # the resumed sweep's own list
    assert main(["capacity", "--report", "--out", str(tmp_path)]) == 0
    assert [p["probe"]["depth"] for p in load_summary(tmp_path)["not_probed"]] == not_probed
