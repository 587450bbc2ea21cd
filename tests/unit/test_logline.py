"""The step line where MFU is not measured (CPU runs): `mfu: -`, read as None by the shared parser and by
the upstream-log reader built on it, while upstream's own lines (a number there) still parse.

    python -m pytest tests/unit/test_logline.py -q
"""

import random

import pytest

from bench.analysis.upstream import read_upstream_log
from bench.logline import format_step_line, parse_step_line, steps_digest

UPSTREAM = ("step 00042/21400 (0.20%) | loss: 7.123456 | grad norm: 0.8123 | lrm: 1.00 | dt: 487.12ms | "
            "tok/sec: 1,076,234 | mfu: 47.52 | total time: 0.34m")


def test_an_unmeasured_mfu_prints_as_a_dash_and_parses_as_none():
    line = format_step_line(12, 20, 5.5, 1.0, 0.25, 4000.0, None, 30.0, grad_norm=0.5)
    assert "| mfu: - |" in line and "0.00" not in line.split("mfu:")[1]
    rec = parse_step_line(line)
    assert rec["mfu"] is None
    assert (rec["step"], rec["loss"], rec["dt_ms"], rec["tok_per_sec"], rec["grad_norm"]) == \
        (12, 5.5, 250.0, 4000.0, 0.5)


def test_a_measured_mfu_and_upstreams_line_still_parse_as_numbers():
    assert parse_step_line(format_step_line(3, 20, 5.5, 1.0, 0.25, 4000.0, 41.237, 30.0))["mfu"] == pytest.approx(41.24)
    assert parse_step_line(UPSTREAM)["mfu"] == pytest.approx(47.52)
    assert parse_step_line("0: " + UPSTREAM)["step"] == 42  # srun -l's label


def test_a_log_of_cpu_step_lines_is_read_with_no_mfu(tmp_path):
    log = tmp_path / "base_train.log"
    log.write_text("".join(format_step_line(s, 20, 5.0, 1.0, 0.5, 4000.0, None, s) + "\n" for s in range(20)))
    row = read_upstream_log(log)
    assert row["steady_steps"] > 0 and row["tok_per_sec"] == pytest.approx(4000.0)
    assert row.get("mfu") is None


def test_a_runs_step_records_and_their_printed_lines_give_one_digest():
    """collect tells a console log of a run directory by its steps: the events' full-precision loss and dt and
    the lines' printed ones must hash alike, and another run's timings must not."""
    rng = random.Random(7)
    records = [{"step": s, "loss": rng.uniform(2, 11), "dt_ms": (dt := rng.uniform(0.01, 90)) * 1000,
                "dt": dt} for s in range(40)]
    lines = [format_step_line(r["step"], 40, r["loss"], 1.0, r["dt"], 1000.0, 40.0, 0.0) for r in records]
    assert steps_digest([parse_step_line(line) for line in lines]) == steps_digest(records)
    rerun = [{**r, "dt_ms": r["dt_ms"] + 0.01} if r["step"] == 39 else r for r in records]
    assert steps_digest(rerun) != steps_digest(records) and steps_digest([]) is None
    assert steps_digest([{"step": 0, "loss": 10**400, "dt_ms": "?"}])  # a damaged record is hashed, never raised
