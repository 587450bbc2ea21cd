"""Start-up phases (bench/breakdown.py) and the step split (bench/nanochat/steptimer.py).

    python -m pytest tests/unit/test_breakdown.py -q
"""

from types import SimpleNamespace

import pytest

from bench import breakdown
from bench.nanochat import steptimer
from bench.nanochat.preflight import bus_factor


def test_phases_add_up_to_the_whole_and_skip_what_a_run_lacks():
    times = {"launch": 100.0, "runtime_start": 101.0, "start": 102.5, "imports_done": 105.0, "dist_init": 106.0,
             "model_ready": 110.0, "data_ready": 110.5, "first_step": 140.0, "steady": 170.0, "end": 200.0,
             "finished": 203.0}  # no pre-flight: its time goes to the next phase, model build
    p = breakdown.phases(times)
    assert list(p) == ["runtime_start", "start", "imports_done", "dist_init", "model_ready", "data_ready",
                       "first_step", "steady", "end", "finished"]
    assert p["model_ready"] == 4.0 and p["runtime_start"] == 1.0
    assert sum(p.values()) == pytest.approx(times["finished"] - times["launch"])
    assert breakdown.phases({"end": 5.0}) == {}


def test_the_phases_that_span_the_batch_host_and_rank_0s_node():
    """Only these can come out negative under clock skew (the others are timed on one node)."""
    times = {"launch": 0.0, "image_ready": 1.0, "runtime_start": 2.0, "start": 3.0, "end": 9.0, "finished": 10.0}
    assert breakdown.across_hosts(times) == {"runtime_start", "finished"}
    assert breakdown.across_hosts({"launch": 0.0, "start": 3.0, "end": 9.0}) == {"start"}
    assert breakdown.across_hosts({"start": 3.0, "end": 9.0}) == set()


def test_cpu_split_adds_up_to_the_step(monkeypatch):
    """On a clock the test moves itself: sleeps on a loaded machine overshoot by more than any tolerance."""
    now = [0.0]

    def spend(ms):
        now[0] += ms / 1000.0

    monkeypatch.setattr(steptimer, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    timer = steptimer.StepTimer("cpu")
    steptimer.use(timer)
    try:
        timer.begin()
        with timer.section("fwd_bwd"):
            spend(20)
            with timer.section("data"):
                spend(10)

        class Work:
            def wait(self):
                spend(10)

        with timer.section("optim"):
            steptimer.wait(Work())  # as the sharded optimizers wait for their collectives
            spend(5)
        spend(1)  # outside every section: clipping, zeroing, the sync
        split = timer.split(now[0] * 1000)
    finally:
        steptimer.use(steptimer.NullTimer())
    # data taken out of fwd_bwd and comm out of optim; `other` is the rest, so the parts are the step
    want = {"fwd_bwd_ms": 20, "data_ms": 10, "comm_ms": 10, "optim_ms": 5, "other_ms": 1}
    assert split == pytest.approx(want, abs=1e-6)


def test_the_null_timer_costs_nothing_and_says_nothing():
    t = steptimer.NullTimer()
    with t.section("data"):
        pass
    assert t.split(10.0) == {}


@pytest.mark.parametrize("collective,n,factor", [("all_reduce", 8, 1.75), ("all_gather", 8, 0.875),
                                                 ("reduce_scatter", 2, 0.5), ("all_reduce", 1, 0.0)])
def test_bus_bandwidth_factors_are_nccl_tests(collective, n, factor):
    assert bus_factor(collective, n) == factor
