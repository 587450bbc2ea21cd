"""The capacity sweep's progress line keeps a probe's message whole (issue 23: OOM messages were cut at
120 characters, mid-sentence).

    python -m pytest tests/unit/capacity/test_progress_line.py -q
"""

import time
from types import SimpleNamespace

from bench.capacity.probe import ProbeResult, ProbeSpec
from bench.capacity.sweep import Sweep, SweepConfig, format_table

MESSAGE = ("rank 0: out of memory at --device_batch_size=8: [enforce fail at alloc_cpu.cpp:127] err == 0. "
           "DefaultCPUAllocator: can't allocate memory: you tried to allocate 35184372088832 bytes. "
           "Error code 12 (Cannot allocate memory)")


def test_an_oom_probe_line_ends_with_the_whole_message():
    r = ProbeResult(ProbeSpec("zero2", 12, device_batch_size=8), "oom", MESSAGE, num_params=10**8, wall_s=12)
    lines: list[str] = []
    # the sweep's own method, on the little state it reads (no machine is probed)
    Sweep._progress(SimpleNamespace(results=[r], t0=time.time(), log=lines.append), r)
    assert len(lines) == 1 and lines[0].endswith(f"-> oom: {MESSAGE} (12 s)")


def test_the_summary_table_keeps_tok_s_apart_from_the_first_failure():
    search = {"strategy": "zero2", "aspect_ratio": 32, "ratio_to_fsdp": None, "tok_per_sec_at_capacity": 34.0,
              "capacity": {"name": "d8-a32", "num_params": 39845888}, "first_failure": None, "stopped": None,
              "complete": True}
    row = format_table({"searches": [search], "probes": []})[-1]
    assert row.endswith("34  none (largest candidate fits)")


def test_a_search_stopped_between_its_bounds_says_so_beside_its_first_failure():
    """d24 ran out of memory, d8 trained, then d14 hung: the row read 'd8 ... d24', a finished search's row, with
    nothing of the hang, as if every depth between them had run out of memory."""
    search = {"strategy": "fsdp", "aspect_ratio": 64, "ratio_to_fsdp": None, "tok_per_sec_at_capacity": 1.0,
              "capacity": {"name": "d8", "num_params": 92274688}, "complete": False,
              "first_failure": {"name": "d24", "num_params": 880803840},
              "stopped": {"shape": "d14-b1", "num_params": 252313600, "outcome": "timeout", "message": "no end"}}
    row = format_table({"searches": [search], "probes": []})[-1]
    assert row.endswith("d24 (880,803,840); search stopped by timeout at d14-b1")


def test_a_sweep_cut_by_its_budget_says_so_and_claims_no_capacity(tmp_path):
    """The budget spent before a strategy's search started: its row said 'none (largest candidate fits)' and
    no line said that the sweep was cut, as if it had finished."""
    cfg = SweepConfig(out=tmp_path, strategies=["fsdp", "zero2"], budget_s=30, max_depth=4, device_type="cpu")
    lines: list[str] = []
    sweep = Sweep.__new__(Sweep)  # the sweep's own passes and summary, without its machine (no probe runs)
    sweep.__dict__.update(cfg=cfg, log=lines.append, results=[], searches={}, not_probed=[], t0=time.time() - 29,
                          out_of_time=False, interrupted=None,
                          machine={"device_type": "cpu", "device_bytes": 2 << 30, "host_available_bytes": 8 << 30})
    for strategy in cfg.strategies:
        sweep._search(strategy, 64)
    summary = sweep.write_summary()
    assert summary["not_run_for_budget"] == 1 and summary["probes"] == []
    assert not any("largest candidate fits" in line for line in lines), lines
    assert any(line.startswith("zero2") and line.endswith("- (search not finished or not run)") for line in lines)
    assert lines[-1].startswith("(time budget spent: 1 probe(s) cut or not started, the sweep did not finish")


def _search(strategy, depth, complete, aspect_ratio=64):
    cap = {"name": f"d{depth}", "depth": depth, "aspect_ratio": aspect_ratio, "num_params": depth * 10}
    return {"strategy": strategy, "aspect_ratio": aspect_ratio, "capacity": cap, "first_failure": None,
            "stopped": None, "probes": 1, "complete": complete}


def test_no_ratio_to_fsdp_from_a_search_that_did_not_finish():
    """An interrupted sweep's fsdp search had reached d4 of a border further up: zero2's row read '1.00 x fsdp'
    (d4 / d4) beside a finished zero2 search, as if both were capacities."""
    from bench.capacity.sweep import summarize

    searches = [_search("zero2", 4, True), _search("fsdp", 4, False)]
    summary = summarize({}, {}, [], searches)
    assert [s["ratio_to_fsdp"] for s in summary["searches"]] == [None, None]
    searches = [_search("zero2", 4, False), _search("fsdp", 8, True)]  # zero2's d4 is a lower bound
    assert [s["ratio_to_fsdp"] for s in summarize({}, {}, [], searches)["searches"]] == [None, 1.0]
    searches = [_search("zero2", 4, True), _search("fsdp", 8, True)]
    assert [s["ratio_to_fsdp"] for s in summarize({}, {}, [], searches)["searches"]] == [0.5, 1.0]


def test_the_ratio_to_fsdp_is_within_one_shape_family():
    """With --aspect-ratios 32,64 every strategy's ratio was taken to fsdp's first search, at aspect ratio 32:
    zero2 at 64 x depth came out '2.00 x fsdp' against a family of narrower models."""
    from bench.capacity.sweep import summarize

    searches = [_search("fsdp", 4, True, 32), _search("fsdp", 8, True, 64), _search("zero2", 8, True, 64),
                _search("zero2", 2, True, 32)]
    assert [s["ratio_to_fsdp"] for s in summarize({}, {}, [], searches)["searches"]] == [1.0, 1.0, 1.0, 0.5]
