"""The steady-state rule and per-run figures, on hand-made step records with known answers.

python -m pytest tests/unit/analysis/test_steady_figures.py -q
"""

import math

import numpy as np
import pytest

from bench.analysis.figures import (RULE_AFTER_WARMUP, RULE_SECOND_HALF, WARMUP_EPOCHS_LEFT_OUT, WARMUP_STEPS,
                                    spread, steady_mask, step_figures)


def steps(dts_ms, tok=1000.0, start=0):
    """Records with the given step times; tok/s = tok / dt so throughput follows time exactly."""
    return [{"step": start + i, "dt_ms": dt, "tok_per_sec": tok / (dt / 1000), "mfu": 1.0, "loss": 5.0 - i}
            for i, dt in enumerate(dts_ms)]


def test_warmup_steps_are_left_out():
    # 11 slow warm-up steps (0..10), then 5 steady ones of 100 ms
    recs = steps([1000.0] * (WARMUP_STEPS + 1) + [100.0] * 5)
    fig, notes = step_figures(recs, world_size=4, flops_per_token=None, peak_flops_per_gpu=None)
    assert fig["steady_rule"] == RULE_AFTER_WARMUP
    assert fig["steady_steps"] == 5
    assert fig["tok_per_sec"] == pytest.approx(10_000.0)
    assert fig["tok_per_sec_per_gpu"] == pytest.approx(2_500.0)
    assert fig["step_time_ms"] == pytest.approx(100.0)
    assert fig["step_time_cv"] == pytest.approx(0.0)
    assert "mfu" not in fig  # no peak (CPU): no MFU, not a zero
    assert notes == []


def test_short_run_uses_its_second_half():
    mask, rule = steady_mask([0, 1, 2, 3, 4])
    assert rule == RULE_SECOND_HALF
    assert mask == [False, False, True, True, True]
    # out-of-order records: the later half by step number, not by position
    mask, _ = steady_mask([3, 0, 2, 1])
    assert mask == [True, False, True, False]


def test_spread_cv_and_p90():
    dts = [100.0, 200.0, 300.0, 400.0]
    fig, _ = step_figures(steps([1.0] * 11 + dts), 1, None, None)
    assert fig["step_time_ms"] == pytest.approx(250.0)
    assert fig["step_time_p90_ms"] == pytest.approx(370.0)  # linear interpolation between 300 and 400
    assert fig["step_time_cv"] == pytest.approx(np.std(dts, ddof=1) / 250.0)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 40])
def test_spread_agrees_with_numpy(n):
    values = [float((i * 37) % 11 + 1) for i in range(n)]
    med, p90, cv = spread(values)
    assert med == pytest.approx(np.median(values)) and p90 == pytest.approx(np.percentile(values, 90))
    assert cv is None if n == 1 else cv == pytest.approx(np.std(values, ddof=1) / np.mean(values))


def test_mfu_recomputed_from_flops_and_peak():
    recs = steps([1.0] * 11 + [100.0] * 3, tok=1000.0)  # 10,000 tok/s
    fig, _ = step_figures(recs, world_size=2, flops_per_token=1e9, peak_flops_per_gpu=1e14)
    assert fig["mfu_source"] == "recomputed"
    assert fig["mfu"] == pytest.approx(100 * 1e9 * 10_000 / (2 * 1e14))


def test_recorded_mfu_is_the_fallback_without_flops():
    fig, _ = step_figures(steps([1.0] * 11 + [100.0] * 3), 2, None, 1e14)
    assert fig["mfu_source"] == "recorded" and fig["mfu"] == pytest.approx(1.0)


def test_nan_and_non_positive_steps_are_left_out_and_said():
    recs = steps([1.0] * 11 + [100.0, 100.0, 100.0, 100.0])
    recs[-1]["dt_ms"] = float("nan")
    recs[-2]["tok_per_sec"] = float("inf")
    recs[-3]["dt_ms"] = 0.0
    fig, notes = step_figures(recs, 1, None, None)
    assert fig["steady_steps"] == 1
    assert fig["tok_per_sec"] == pytest.approx(10_000.0)
    assert any("3 steady step(s)" in n for n in notes)


def test_all_steady_steps_bad_gives_no_figure():
    recs = steps([1.0] * 11 + [100.0])
    recs[-1]["tok_per_sec"] = None
    fig, _ = step_figures(recs, 1, None, None)
    assert "tok_per_sec" not in fig and fig["steady_steps"] == 0


def test_no_records():
    fig, notes = step_figures([], 1, None, None)
    assert fig == {"steps_recorded": 0} and notes == []
    assert not math.isnan(fig["steps_recorded"])


def test_a_resumed_run_warms_up_again_after_its_restart(make_run):
    """--resume_from_step appends a second start to metrics.jsonl: its first 11 steps compile and warm up again
    and are no steady state, however late their step numbers."""
    import json

    from bench.analysis.rundir import read_run_dir

    run = make_run("resumed", steps=20)  # steps 0..19
    first = read_run_dir(run)
    t = 2000.0
    resumed = [{"event": "start", "t": t}, {"event": "first_step", "t": t + 1}]
    resumed += [{"event": "step", "t": t + 1 + i, "step": 20 + i, "loss": 3.0, "lrm": 1.0, "dt_ms": 50_000.0,
                 "tok_per_sec": 1.0, "mfu": None, "total_time_s": 0.0} for i in range(WARMUP_STEPS + 1)]
    with open(run / "metrics.jsonl", "a") as f:
        f.writelines(json.dumps(ev) + "\n" for ev in resumed)
    row = read_run_dir(run)
    assert row["steps_recorded"] == first["steps_recorded"] + WARMUP_STEPS + 1
    assert row["steady_steps"] == first["steady_steps"]  # the restart's warm-up left out
    assert row["tok_per_sec"] == pytest.approx(first["tok_per_sec"])
    assert row["step_time_p90_ms"] == pytest.approx(first["step_time_p90_ms"])


def test_steps_flagged_as_warm_up_epochs_are_no_steady_state():
    """NNTile's --nepochs-warmup epochs (`warmup_epoch` in its step events) stay out of its runner's timed figure;
    the analysis counted their steps after step 10 as steady, mixing a slower warm-up epoch into the median."""
    warm = steps([1000.0] * 20)  # epoch 0, warm-up: steps 0..19, 9 of them beyond step 10
    timed = steps([100.0] * 20, start=20)  # epoch 1, timed
    for r in warm:
        r["warmup_epoch"] = True
    for r in timed:
        r["warmup_epoch"] = False
    fig, _ = step_figures(warm + timed, 1, None, None)
    assert fig["steady_steps"] == 20 and fig["tok_per_sec"] == pytest.approx(10_000.0)
    assert fig["steady_rule"] == RULE_AFTER_WARMUP + WARMUP_EPOCHS_LEFT_OUT
    # a short run whose timed steps are all within warm-up: the later half of the timed steps, not of all
    mask, rule = steady_mask([0, 1, 2, 3, 4, 5], warmup=[True, True, False, False, False, False])
    assert mask == [False, False, False, False, True, True] and rule == RULE_SECOND_HALF + WARMUP_EPOCHS_LEFT_OUT
    # steps nobody flagged follow the rule as before
    assert step_figures(steps([1000.0] * 20 + [100.0] * 20), 1, None, None)[0]["steady_steps"] == 29
