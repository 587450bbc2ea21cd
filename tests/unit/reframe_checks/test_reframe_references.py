"""ReFrame references from a nanochat-bench references file: the same runs selected, the same limits.

    python -m pytest tests/unit/reframe_checks/test_reframe_references.py -q
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import reframe.utility.sanity as sn
from hypothesis import example, given
from hypothesis import strategies as st

from bench.analysis.check import Bound, check, load_references
from bench.analysis.collect import to_frame
from bench.analysis.rundir import read_run_dir
from bench.commands.reframe import reframe_command
from bench.errors import ConfigError
from bench.reframe_checks.checks import ENVIRON_FEATURE
from bench.reframe_checks.references import figures_for, reframe_reference

REFS = """
[[reference]]
name = "d20 bare 8xH200"
where = { depth = 20, runtime = "bare", world_size = 8, gpu_name = "*H200*" }
figures.tok_per_sec = { value = 100000, lower = -0.05, unit = "tok/s" }
figures.startup_overhead_s = { value = 0, upper = 30, unit = "s" }

[[reference]]
name = "d20 bare 16xH200"
where = { depth = 20, runtime = "bare", world_size = 16 }
figures.tok_per_sec = { value = 200000, lower = -0.05, unit = "tok/s" }
"""


@pytest.fixture
def refs(tmp_path):
    path = tmp_path / "references.toml"
    path.write_text(REFS)
    return path


def test_the_references_selecting_the_run_become_its_reframe_reference(make_run, refs):
    row = read_run_dir(make_run("r8", tok_s=101_000.0, world_size=8))
    reference, used = reframe_reference("alps:gh200-ce", row, load_references(refs))
    assert used == ["d20 bare 8xH200"]
    assert reference == {"alps:gh200-ce": {"tok_per_sec": (100000.0, -0.05, None, "tok/s"),
                                           "startup_overhead_s": (0.0, None, 30, "s")}}
    assert reframe_reference("alps:gh200-ce", read_run_dir(make_run("r4", world_size=4)), load_references(refs))[0] == \
        {"alps:gh200-ce": {}}


def test_a_run_check_would_not_use_gets_no_reference(make_run, refs):
    row = read_run_dir(make_run("failed", world_size=8, status="failed", message="boom"))
    assert figures_for(row, load_references(refs)) == ({}, [])


def test_two_references_bounding_one_figure_of_a_run_are_refused(make_run, refs, tmp_path):
    refs.write_text(REFS + '\n[[reference]]\nname = "any 8"\nwhere = { world_size = 8 }\n'
                    'figures.tok_per_sec = { value = 1, lower = -0.5 }\n')
    row = read_run_dir(make_run("r8", world_size=8))
    with pytest.raises(ConfigError, match="'d20 bare 8xH200' and 'any 8' both bound tok_per_sec"):
        figures_for(row, load_references(refs))


def test_a_tolerance_reframe_cannot_hold_is_refused_by_name(make_run, refs):
    refs.write_text('[[reference]]\nname = "loose"\nwhere = { world_size = 8 }\n'
                    'figures.tok_per_sec = { value = 10, lower = -2 }\n')
    with pytest.raises(ConfigError, match="loose: figures.tok_per_sec: lower = -2 is below -1"):
        figures_for(read_run_dir(make_run("r8", world_size=8)), load_references(refs))


def test_reframe_and_check_give_one_verdict_on_the_same_run(make_run, refs):
    for tok_s, verdict in ((101_000.0, "pass"), (90_000.0, "fail")):
        row = read_run_dir(make_run(f"r{int(tok_s)}", tok_s=tok_s, world_size=8))
        (outcome,) = [o for o in check(to_frame([row]), load_references(refs))
                      if o.figure == "tok_per_sec" and o.verdict != "missing"]
        value, lower, upper, _ = figures_for(row, load_references(refs))[0]["tok_per_sec"]
        lo, hi = sn.reference_bounds(value, lower, upper)
        assert outcome.verdict == verdict == ("pass" if lo <= row["tok_per_sec"] <= hi else "fail")


finite = st.floats(-1e9, 1e9, allow_nan=False)
fraction = st.one_of(st.none(), st.floats(0, 1))


@given(value=st.one_of(finite, st.just(0.0)), lower=fraction, upper=st.one_of(st.none(), st.floats(0, 5)))
@example(value=17289124.0, lower=0.99999, upper=None)  # a lower bound near 0 of a large value
def test_tolerances_mean_the_same_to_reframe_and_check(value, lower, upper):
    """ReFrame's own bounds (reframe.utility.sanity.reference_bounds) equal check's, for every tolerance
    ReFrame accepts: fractions of the value, mirrored when it is negative, absolute when it is 0."""
    lower = None if lower is None else -lower
    if value < 0 and upper is not None:
        upper = min(upper, 1.0)
    ours = Bound(value, lower, upper).limits()
    theirs = sn.reference_bounds(value, lower, upper)
    # value * (1 + tolerance) may be rounded in another order: a bound near 0 of a large value keeps only
    # the value's absolute precision, so compare to within that
    for a, b in zip(ours, theirs):
        assert a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12 * max(1.0, abs(value)))


def test_a_bound_without_a_unit_takes_the_figures_own(make_run, refs):
    """A file may leave `unit` out; the reference tuple's "" then differed from the performance variable's
    unit, and ReFrame warned of a mismatch for every such figure of every case."""
    refs.write_text('[[reference]]\nname = "no units"\nwhere = { world_size = 8 }\n'
                    'figures.tok_per_sec = { value = 10, lower = -0.5 }\n'
                    'figures.step_time_cv = { value = 0, upper = 1 }\n')
    figures, _ = figures_for(read_run_dir(make_run("r8", world_size=8)), load_references(refs))
    assert figures == {"tok_per_sec": (10.0, -0.5, None, "tok/s"), "step_time_cv": (0.0, None, 1, "")}


def test_a_tolerance_reframe_cannot_hold_stops_the_case_at_setup_though_no_run_matches_it(tmp_path):
    """The file was read at setup, but a bound ReFrame refuses was met only in the performance stage of a run its
    reference selected, after that run; a dry run (setup and performance, no job) passed."""
    refs = tmp_path / "refs.toml"
    refs.write_text('[[reference]]\nname = "loose"\nwhere = { world_size = 64 }\n'
                    'figures.tok_per_sec = { value = 10, lower = -2 }\n')
    part = {"name": "cpu", "scheduler": "local", "launcher": "local", "environs": ["nb"], "features": ["bare"],
            "extras": {"nanochat_bench": {"gpus_per_node": 2, "train": ["device_type=cpu"], "exclusive": False,
                                          "numa_binding": "none", "base_dir": str(tmp_path / "base")}}}
    config = {"systems": [{"name": "here", "hostnames": [".*"], "partitions": [part]}],
              "environments": [{"name": "nb", "features": [ENVIRON_FEATURE]}]}
    (tmp_path / "site.py").write_text(f"site_configuration = {config!r}\n")
    repo = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    _, *args = reframe_command(str(tmp_path / "site.py"), ["-n", "%scaling=weak", "-S", "depth=2", "-S",
                                                           f"references={refs}", "--report-file=report.json",
                                                           "--dry-run"])
    reframe = Path(sys.executable).with_name("reframe")
    r = subprocess.run([str(reframe), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    [case] = [c for run in json.loads((tmp_path / "report.json").read_text())["runs"] for c in run["testcases"]]
    assert (case["result"], case["fail_phase"]) == ("fail", "setup"), r.stdout[-4000:]
    assert case["fail_reason"] == (f"config error: {refs}: loose: figures.tok_per_sec: lower = -2 is below -1, so the "
                                   "allowed range reaches below 0 and no measurement fails it; lower is a fraction of "
                                   "the value (-0.05 for 5% below; -1, a bound of 0, the lowest); leave it out for no "
                                   "lower bound")


def test_a_score_is_a_performance_variable_reframe_bounds(tmp_path):
    """A reference on a stage's score (`score:CORE`, from run.json `scores`) is bounded by ReFrame as by check: the
    run's score, decoded from its row's JSON `scores`, is the performance variable score_CORE (ReFrame splits a
    reference's key at its last ':', so a variable named score:CORE would be looked up as CORE and bound nothing)."""
    from reframe.utility import ScopedDict

    from bench.reframe_checks.checks import performance
    from bench.reframe_checks.references import as_tuple
    from bench.workloads.base import EVALUATION

    assert as_tuple("d20", "score:CORE", Bound(0.2, lower=-0.05)) == (0.2, -0.05, None, "score")
    assert as_tuple("d20", "score:val_bpb", Bound(0.8, upper=0.02, unit="score")) == (0.8, None, 0.02, "score")
    with pytest.raises(ConfigError, match="d20: figures.score:a:b: a score whose name holds ':' cannot be a ReFrame"):
        as_tuple("d20", "score:a:b", Bound(0.2))
    run_dir = Path(__file__).resolve().parents[3] / "results" / "h200-d20" / "speedrun" / "runs" / "base_eval"
    row = read_run_dir(run_dir)
    assert isinstance(row["scores"], str)  # JSON text, as the table holds it
    path = tmp_path / "refs.toml"
    path.write_text('[[reference]]\nname = "core"\nwhere = { stage = "base_eval" }\n'
                    'figures."score:CORE" = { value = 0.34, lower = -0.05 }\n'
                    'figures."score:ARC-Easy" = { value = 0.25, lower = -0.1 }\n')
    reference, used = reframe_reference("site:gpu", row, load_references(path))
    assert used == ["core"] and reference == {"site:gpu": {"score_CORE": (0.34, -0.05, None, "score"),
                                                           "score_ARC-Easy": (0.25, -0.1, None, "score")}}
    assert ScopedDict(reference)["site:gpu:score_CORE"] == (0.34, -0.05, None, "score")
    figures = performance(row, EVALUATION, reference["site:gpu"])
    assert figures["score_CORE"] == (pytest.approx(0.34090743), "score")
    assert math.isnan(figures["score_ARC-Easy"][0])  # base_eval's task is arc_easy: ReFrame fails the NaN
    assert "problems_per_sec" in figures  # the kind's own figures still
    lo, hi = sn.reference_bounds(0.34, -0.05, None)
    [outcome] = [o for o in check(to_frame([row]), load_references(path)) if o.figure == "score:CORE"]
    assert outcome.verdict == "pass" and lo <= figures["score_CORE"][0] <= hi
