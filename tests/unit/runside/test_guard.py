"""A diverged run is not `ok` (bench/runside/guard.py): non-finite or runaway losses, NaN never in JSON.

    python -m pytest tests/unit/runside/test_guard.py -q
"""

import json
import math

import pytest

from bench.runside.guard import Diverged, DivergenceGuard, check_finite, json_safe
from bench.runside.runrecord import RunRecord, classify_failure


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_loss_has_diverged_naming_the_step(value):
    with pytest.raises(Diverged, match=rf"diverged at step 7: the training loss is {value}"):
        DivergenceGuard().check(7, value)


def test_a_loss_far_above_its_start_after_warm_up_has_diverged():
    guard = DivergenceGuard(floor=0.0, rise_factor=3.0, warmup_steps=10)
    guard.check(0, 6.0)
    guard.check(5, 25.0)  # the first steps may overshoot
    guard.check(11, 17.9)
    with pytest.raises(Diverged, match=r"step 12: the training loss is 18.5, more than 3 x its start 6"):
        guard.check(12, 18.5)


def test_a_resumed_run_is_measured_against_a_uniform_guess():
    guard = DivergenceGuard(floor=10.0)  # ln(vocabulary); the resumed run starts at 3.0
    guard.check(100, 3.0)
    guard.check(120, 14.0)  # a spike well above 1.5 x 3.0, still better than a uniform guess x 1.5
    with pytest.raises(Diverged, match="more than 1.5 x its start 10"):
        guard.check(121, 15.5)


def test_the_message_names_the_workloads_own_flags():
    guard = DivergenceGuard(remedy="lower --lr (now 50.0)")
    with pytest.raises(Diverged, match=r"not a number\); lower --lr \(now 50.0\)$"):
        guard.check(3, math.nan)
    guard.check(0, 6.0)
    with pytest.raises(Diverged, match=r"its start 6; lower --lr \(now 50.0\)$"):
        guard.check(12, 100.0)


def test_diverged_is_its_own_status():
    failure = classify_failure(Diverged("diverged at step 3: ..."))
    assert failure.status == "diverged" and not failure.bug
    with pytest.raises(Diverged, match="validation bpb is nan"):
        check_finite(4, math.nan, "validation bpb")


def test_non_finite_figures_become_null():
    assert json_safe({"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": "nan", "e": 2}) == \
        {"a": None, "b": [1.0, None, {"c": None}], "d": "nan", "e": 2}


def test_the_run_record_writes_valid_json_whatever_the_figures(tmp_path):
    record = RunRecord(0, str(tmp_path))
    record.emit("step", step=1, loss=1.5, lrm=1.0, dt_ms=2.0, tok_per_sec=64.0, mfu=math.nan, grad_norm=math.inf,
                total_time_s=0.0)
    record.update(result={"final_val_bpb": math.nan})
    record.close()
    text = (tmp_path / "metrics.jsonl").read_text() + (tmp_path / "run.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    json.loads((tmp_path / "run.json").read_text())
    step = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert step.get("mfu") is None and step.get("grad_norm") is None and step["dt_ms"] == 2.0
