"""benchmarks/gpu_bench.py: its --gpus, --variant and --out are checked before the first (minutes-long) run."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_bench.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("flag, value, says", [
    ("--gpus", "abc", "--gpus 'abc': give comma-separated positive GPU counts"),
    ("--gpus", "0", "--gpus '0'"),
    ("--gpus", "1,-2", "--gpus '1,-2'"),
    ("--variant", "fast:FOO", "--variant 'fast:FOO': give NAME, NAME:ENV=V,..."),
    ("--variant", ":A=1", "--variant ':A=1'"),
])
def test_a_bad_value_is_refused_naming_the_flag(tmp_path, flag, value, says):
    proc = run("--base-dir", tmp_path / "data", "--out", tmp_path / "out", flag, value)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "out").exists()  # nothing prepared or run


def test_an_out_that_already_holds_the_runs_is_refused_before_any_run(tmp_path):
    """Run again into the same --out, the trainer refused the first run directory with a traceback that
    named flags gpu_bench does not have, after the data was prepared; now it is refused at once."""
    (tmp_path / "out" / "baseline-1gpu").mkdir(parents=True)
    (tmp_path / "out" / "baseline-1gpu" / "metrics.jsonl").write_text('{"event": "step"}\n')
    proc = run("--base-dir", tmp_path / "data", "--out", tmp_path / "out")
    assert proc.returncode == 2 and "already holds baseline-1gpu: give a new --out" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "data").exists()


def test_two_runs_into_one_run_directory_are_refused(tmp_path):
    proc = run("--base-dir", tmp_path / "data", "--out", tmp_path / "out", "--gpus", "1,1")
    assert proc.returncode == 2 and "baseline-1gpu would run twice" in proc.stderr, proc.stderr


def test_the_variant_syntax_is_parsed_into_name_environment_and_flags():
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_bench

    assert gpu_bench.parse_variant("baseline") == ("baseline", {}, [])
    assert gpu_bench.parse_variant("fast:A=1,B=x=y:--x=1 --y=2") == ("fast", {"A": "1", "B": "x=y"}, ["--x=1", "--y=2"])
    assert gpu_bench.parse_variant("big::--device_batch_size=64") == ("big", {}, ["--device_batch_size=64"])
    assert gpu_bench.parse_gpus("1, 2,4") == [1, 2, 4]


def test_stepdev_is_over_the_steps_that_the_figures_are_medians_of(tmp_path):
    """A run shorter than the warm-up has figures over its later half (the analysis' rule); its stepdev
    was '-' as if it had no steady steps."""
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_bench

    times = [900.0, 120.0, 100.0, 110.0]  # steps 0..3: the later half is 100 and 110 ms
    (tmp_path / "metrics.jsonl").write_text("".join(
        f'{{"event": "step", "t": {i}, "step": {i}, "loss": 5.0, "lrm": 1.0, "dt_ms": {t}, "tok_per_sec": 1000, '
        f'"mfu": null, "total_time_s": 0.0}}\n'
        for i, t in enumerate(times)))
    assert gpu_bench.step_figures(tmp_path)["max_step_dev"] == pytest.approx(110 / 105 - 1)
