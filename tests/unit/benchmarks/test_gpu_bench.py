"""benchmarks/gpu_bench.py: its --gpus, --variant and --out are checked before the first (minutes-long) run."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_bench.py"
UPSTREAM = os.environ.get("NANOCHAT_UPSTREAM_DIR")


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("flag, value, says", [
    ("--gpus", "abc", "--gpus 'abc': give comma-separated positive GPU counts"),
    ("--gpus", "0", "--gpus '0'"),
    ("--gpus", "1,-2", "--gpus '1,-2'"),
    ("--variant", "fast:FOO", "--variant 'fast:FOO': give NAME, NAME:ENV=V,..."),
    ("--variant", ":A=1", "--variant ':A=1'"),
    # flags without the empty ENV part became an environment variable named "--device_batch_size": a baseline run
    ("--variant", "big:--device_batch_size=64", "--variant 'big:--device_batch_size=64': give NAME"),
    ("--variant", "x:A B=1", "ENV a variable name"),
    # 0 or less reached the trainer as "derive the horizon": a full-length d20 run of hours, not a benchmark
    ("--steps", "0", "--steps 0: give a positive number of optimizer steps"),
    ("--steps", "-1", "--steps -1: give a positive number"),
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


@pytest.mark.parametrize("flag", ["--out", "--base-dir"])
def test_a_directory_that_cannot_be_made_is_refused_before_the_data_is_prepared(tmp_path, flag):
    """An --out that could not be made ended in a traceback after the shards and the tokenizer (minutes at
    65k) were made; a --base-dir, in a traceback naming NANOCHAT_BASE_DIR. Now both are refused at once."""
    (tmp_path / "file").write_text("")
    dirs = {"--out": tmp_path / "out", "--base-dir": tmp_path / "data", flag: tmp_path / "file" / "sub"}
    proc = run(*(x for kv in dirs.items() for x in kv))
    assert proc.returncode == 2 and f"{flag} {tmp_path / 'file' / 'sub'}: {tmp_path / 'file'} is a file in the way" \
        in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "data" / "base_data").exists()


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


def fake_checkout(root: Path) -> Path:
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "base_train.py").write_text("")
    (root / "nanochat").mkdir()
    return root


@pytest.mark.parametrize("extra, says", [
    ([], "--upstream {missing}: no scripts/base_train.py and nanochat/ there; give a checkout of karpathy/nanochat"),
    (["--synthetic"], "--upstream with --synthetic: upstream reads only parquet shards"),
    (["--variant", "upstream"], "--variant upstream: that name is --upstream's"),
])
def test_upstream_settings_are_refused_before_anything_runs(tmp_path, extra, says):
    checkout = tmp_path / "missing" if not extra else fake_checkout(tmp_path / "nanochat")
    proc = run("--base-dir", tmp_path / "data", "--out", tmp_path / "out", "--upstream", checkout, *extra)
    assert proc.returncode == 2 and says.format(missing=checkout) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "data").exists()


def test_an_out_that_holds_upstreams_log_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "upstream-1gpu.log").write_text("step 00000/00010\n")
    proc = run("--base-dir", tmp_path / "data", "--out", tmp_path / "out", "--upstream", fake_checkout(tmp_path / "u"))
    assert proc.returncode == 2 and "already holds upstream-1gpu.log" in proc.stderr, proc.stderr


def test_upstreams_evaluations_and_samples_stay_off_the_measured_steps():
    """Upstream evaluates and samples whenever `step % every == 0`: -1 would be every step; past the horizon
    leaves only its first and last validation and its last sample."""
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_bench

    args = gpu_bench.argparse.Namespace(depth=20, device_batch_size=32, total_batch_size=524288, steps=15)
    flags = dict(f[2:].split("=") for f in gpu_bench.upstream_flags(args))
    assert flags["eval_every"] == flags["sample_every"] == "16" and flags["core_metric_every"] == "-1"
    assert flags["num_iterations"] == "15" and flags["eval_tokens"] == "524288" and "run" not in flags


@pytest.mark.slow
@pytest.mark.skipif(not UPSTREAM or not Path(UPSTREAM, "scripts", "base_train.py").is_file(),
                    reason="no upstream nanochat checkout: set NANOCHAT_UPSTREAM_DIR to karpathy/nanochat at 5c93a56")
@pytest.mark.skipif(importlib.util.find_spec("rustbpe") is None, reason="upstream's rustbpe is not installed")
def test_upstream_in_the_same_job_trains_the_same_loss_curve(tmp_path):
    """On the CPU, d2: upstream's own base_train on the same data and tokenizer logs the same losses (its EMA, to
    6 decimals) as this trainer, and the table reads both."""
    env = dict(os.environ, TORCHDYNAMO_DISABLE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--depth", "2", "--device_batch_size", "1",
                           "--total_batch_size", "2048", "--steps", "12", "--vocab_size", "512",
                           "--base-dir", tmp_path / "data", "--out", tmp_path / "out", "--upstream", UPSTREAM],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["variant"]: r for r in json.loads((tmp_path / "out" / "summary.json").read_text())}
    assert rows["upstream"]["tok_per_sec"] > 0 and rows["baseline"]["vs_upstream"] > 0
    assert rows["upstream"]["loss_dev"] < 1e-3
    assert "x upstream" in proc.stdout


def test_its_efficiency_is_named_strong_scaling_as_its_fixed_total_batch_makes_it():
    """The table's `eff` was explained nowhere and its code called it weak-scaling, while every GPU count trains
    the same total batch (524,288 tokens): a strong-scaling figure, speed-up over GPUs, as the README reports it."""
    source = SCRIPT.read_text()
    assert "weak-scaling" not in source and "(strong scaling): `eff`" in source


def upstream_log_text(last_step: int, steps: int = 15, final: bool = False) -> str:
    """A log of upstream's base_train at d20 on one GPU (the lines results/h200-d20/same-job/upstream.log has),
    up to `last_step` of `steps`, with its final lines only when `final`."""
    lines = ["Autodetected device type: cuda", "2026-12-03 18:04:00,534 - nanochat.common - INFO - Distributed "
             "world size: 1", "num_layers: 20", "Tokens / micro-batch / rank: 32 x 2048 = 65,536",
             "Total batch size 524,288 => gradient accumulation steps: 8", "Estimated FLOPs per token: 3.491758e+09",
             "Step 00000 | Validation bpb: 3.6095"]
    for i in range(last_step + 1):
        dt, tps = (54414.94, 9635) if i == 0 else (3450.0 + i, 151_000 + i)
        lines.append(f"step {i:05d}/{steps:05d} ({100 * i / steps:.2f}%) | loss: {11 - i / 3:.6f} | grad norm: 1.0 | "
                     f"lrm: 1.00 | dt: {dt:.2f}ms | tok/sec: {tps:,} | mfu: 53.00 | total time: 0.00m")
    if final:
        lines += ["Peak memory usage: 75096.27MiB", "Total training time: 0.23m", "Minimum validation bpb: 1.3389"]
    return "\n".join(lines) + "\n"


def fake_run_local(flags, nproc, run_dir, env=None):
    """A run of 15 steps of this trainer, as its metrics.jsonl records them."""
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(
        f'{{"event": "step", "t": {i}, "step": {i}, "loss": {11 - i / 3}, "lrm": 1.0, "dt_ms": 3000.0, '
        f'"tok_per_sec": 170000, "mfu": null, "total_time_s": 0.0}}\n' for i in range(15)))
    return 0


def stopped_during_upstream(tmp_path, monkeypatch) -> int:
    """gpu_bench's exit status when the job's time limit comes during upstream's run, after its step 9 of 15."""
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_bench

    checkout = fake_checkout(tmp_path / "nanochat")
    (checkout / "scripts" / "base_train.py").write_text(
        f"import os, signal, sys, time\nsys.stdout.write({upstream_log_text(9)!r})\nsys.stdout.flush()\n"
        "os.kill(os.getppid(), signal.SIGTERM)\ntime.sleep(60)\n")
    monkeypatch.setattr(gpu_bench, "prepare_data", lambda *a: None)
    monkeypatch.setattr(gpu_bench, "run_local", fake_run_local)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["gpu_bench.py", "--steps", "15", "--out", str(tmp_path / "out"), "--upstream",
                                      str(checkout), "--variant", "bf16", "--gpus", "1,2"])
    return gpu_bench.main()


def test_a_time_limit_during_upstreams_run_leaves_the_table_of_what_was_measured(tmp_path, monkeypatch, capsys):
    """The job's time limit (SIGTERM) during upstream's run, after its step 9 of 15, ended gpu_bench at once:
    no summary.json and no table, though the variants before it had finished. Now the table and summary.json
    hold every run measured, and a last line names the cut run and where its log ends."""
    assert stopped_during_upstream(tmp_path, monkeypatch) == 128 + 15
    rows = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [(r["variant"], r["gpus"]) for r in rows] == [("bf16", 1), ("bf16", 2), ("upstream", 1)]
    out = capsys.readouterr().out
    assert "stopped by SIGTERM during upstream on 1 GPU(s) (its last step logged 9)" in out
    assert "not run: upstream on 2 GPU(s)" in out and "x upstream" in out


def test_a_run_stopped_by_a_signal_starts_no_further_run(tmp_path, monkeypatch, capsys):
    """The launcher passes a SIGTERM on to the run and returns: gpu_bench went on to the next variant, until
    the time limit's SIGKILL ended it with no table. Now it stops there and prints the table."""
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_bench

    def stopped_run(flags, nproc, run_dir, env=None):
        fake_run_local(flags, nproc, run_dir)
        (run_dir / "run.json").write_text(json.dumps({"evidence": [
            {"source": "launcher", "kind": "stopped", "signal": "SIGTERM", "exit_code": 143}]}))
        return 143
    monkeypatch.setattr(gpu_bench, "prepare_data", lambda *a: None)
    monkeypatch.setattr(gpu_bench, "run_local", stopped_run)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["gpu_bench.py", "--out", str(tmp_path / "out"), "--variant", "a",
                                      "--variant", "b"])
    assert gpu_bench.main() == 128 + 15
    assert not (tmp_path / "out" / "b-1gpu").exists()
    assert "stopped by SIGTERM during a on 1 GPU(s) (its last step logged 14)" in capsys.readouterr().out
    assert len(json.loads((tmp_path / "out" / "summary.json").read_text())) == 1


def test_x_upstream_is_not_read_against_a_cut_upstreams_warm_up_steps(tmp_path, monkeypatch):
    """Upstream cut after its step 9 has no step past the warm-up: its figures are over steps 5..9 (the later
    half), and `x upstream` divided the variant's steady steps by those. Now that ratio is left out."""
    stopped_during_upstream(tmp_path, monkeypatch)
    rows = {r["variant"]: r for r in json.loads((tmp_path / "out" / "summary.json").read_text()) if r["gpus"] == 1}
    assert rows["upstream"]["tok_per_sec"] and rows["upstream"]["steady_rule"] != rows["bf16"]["steady_rule"]
    assert rows["bf16"]["vs_upstream"] is None
