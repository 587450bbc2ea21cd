"""The launch commands through the real CLI entry (`bench.cli.main`): plan, submit --dry-run, render;
user mistakes end as one `error:` line, exit 1, before anything is written or submitted.

    python -m pytest tests/unit/commands/test_launch_cli.py -q
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from bench import cli
from bench.runtimes.base import Mount

TINY = ["--gpus-per-node=2", "--depth=2", "--max_seq_len=64", "--device_batch_size=2", "--total_batch_size=512",
        "--num_iterations=6", "--device_type=cpu", "--scaling=strong"]


def run_cli(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_plan_prints_the_table(capsys):
    code, out, _ = run_cli(["plan", "--nodes", "1,2,4,8", "--gpus-per-node", "4", "--runtimes", "bare,ce,pyxis",
                            "--repeats", "3"], capsys)
    assert code == 0
    assert out.splitlines()[0].split()[:4] == ["nodes", "runtime", "repeats", "ranks"]
    assert "36 runs" in out and "scaling=weak" in out


def test_plan_chooses_validation_files_and_says_what_to_download(capsys):
    """~52 row groups per FineWeb-Edu shard: 64 ranks need K=2 validation files, 128 need K=3."""
    code, out, _ = run_cli(["plan", "--nodes", "16,32", "--gpus-per-node", "4", "--row-groups", "52",
                            "--shards", "250"], capsys)
    assert code == 0
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.split()[:1] in (["16"], ["32"])}
    head = out.splitlines()[0].split()
    assert rows["16"][head.index("val_K")] == "2" and rows["32"][head.index("val_K")] == "3"
    assert "download 39 shard(s)" in out  # 200 steps x 8.4M tokens at 128 ranks: 36 shards (+10%), + K = 3
    assert "more than" not in out


def test_a_download_beyond_the_shards_fineweb_edu_has_is_said(capsys):
    """At 8,192 ranks of weak scaling the advice was to download 2,426 shards, as if there were that many."""
    code, out, _ = run_cli(["plan", "--nodes", "2048", "--gpus-per-node", "4", "--row-groups", "52",
                            "--shards", "2000"], capsys)
    assert code == 0
    assert re.search(r"download (\d+) shard\(s\) \(.*\), more than the 1,823 FineWeb-Edu has: the runs would "
                     r"read its training tokens more than once", out)


def test_the_recipes_horizon_gets_hours_not_half_an_hour(capsys):
    code, out, _ = run_cli(["plan", "--nodes", "1", "--gpus-per-node", "4", "--num_iterations", "-1",
                            "--scaling", "strong"], capsys)
    assert code == 0
    row = out.splitlines()[1].split()
    head = out.splitlines()[0].split()
    assert row[head.index("steps")] == "21400"  # 20 tokens per parameter at d20, as the trainer derives it
    hours, minutes, _ = map(int, row[head.index("time")].split(":"))
    assert hours >= 5  # 11.2e9 tokens x 3.49e9 FLOPs at 4 x 989 TFLOP/s x 35.6% MFU: 7.7 h, with margin


def test_the_estimates_assume_the_sites_gpu_unless_gpu_is_given(capsys, monkeypatch):
    """--gpu defaulted to H200 whatever the site, so a flow plan on alps (GH200 nodes) said "H200 at 40% MFU"."""
    monkeypatch.delenv("NANOCHAT_BENCH_SITE", raising=False)
    plan = ["plan", "--flow", "speedrun", "--nodes=1", "--gpus-per-node=4", "--row-groups=52", "--shards=250"]
    for extra, gpu in [(["--site", "alps"], "GH200"), (["--site", "alps", "--gpu", "H100"], "H100"), ([], "H200"),
                       (["--site", "infiniband"], "H200")]:
        code, out, _ = run_cli(plan + extra, capsys)
        assert code == 0 and f"(estimates per stage: {gpu} at 40% MFU" in out, extra


def test_an_unknown_gpu_is_refused_naming_the_known_ones(capsys, tmp_path):
    """plan --gpu FOO printed "?" node-hours and each run got the default time limit; a site's gpu was refused."""
    code, out, err = run_cli(["plan", "--gpu", "FOO"], capsys)
    assert code == 1 and not out and err.count("\n") == 1, err
    assert err.startswith("error: --gpu 'FOO': no peak FLOPs known for it")
    assert "name one of GH200, H200 NVL, H200," in err
    code, _, err = run_cli(["submit", "--dry-run", "--gpu", "FOO", "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and "--gpu 'FOO'" in err and not (tmp_path / "s").exists()
    code, out, _ = run_cli(["plan", "--gpu", "NVIDIA H100 80GB HBM3"], capsys)  # torch's name for it
    assert code == 0 and re.search(r"1 runs, [0-9.]+ node-hours estimated \(NVIDIA H100 80GB HBM3 at", out), out


def test_a_point_no_validation_split_can_serve_is_refused(capsys, tmp_path):
    code, out, err = run_cli(["submit", "--nodes", "64", "--gpus-per-node", "4", "--row-groups", "2", "--shards", "4",
                              "--dry-run", "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and "no point of this sweep is possible" in err
    assert "skipping n64-bare-r1: no validation split serves 256 ranks" in out


@pytest.mark.parametrize("kind", ["sbatch", "compare"])
def test_render_refuses_an_impossible_point_as_submit_does(kind, capsys, tmp_path):
    code, out, err = run_cli(["render", kind, "--nodes", "64", "--gpus-per-node", "4", "--row-groups", "2",
                              "--shards", "4", "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and "no point of this sweep is possible: no validation split serves 256 ranks" in err
    assert "skipping n64-bare-r1" in out and not (tmp_path / "s").exists()


@pytest.mark.parametrize("argv,message", [
    (["plan", "--nodes", "1,-2"], "--nodes '1,-2' must be a comma-separated list of positive integers"),
    (["plan", "--runtimes", "bare,docker"],
     "--runtimes 'bare,docker': unknown runtime 'docker'; valid runtimes: bare, ce"),
    (["render", "sbatch", "--runtimes", "nope"], "--runtimes 'nope': unknown runtime 'nope'; valid runtimes: bare, ce"),
    (["submit", "--runtimes", "ce", "--image", "ce=/no/such.sqsh", "--dry-run"], "'/no/such.sqsh' does not exist"),
    (["submit", "--runtimes", "pyxis", "--image", "pyxis=/no/such.sqsh"], "'/no/such.sqsh' does not exist"),
    (["submit", "--runtimes", "apptainer", "--image", "apptainer=/no/such.sif"], "'/no/such.sif' does not exist"),
    (["submit", "--image", "docker=x"], "--image 'docker=x': unknown runtime 'docker'; valid runtimes: bare, ce"),
    (["submit", "--image", "ce"], "--image 'ce' is not RUNTIME=REF"),
    # an image for a runtime the sweep does not run was dropped, and the run it was meant for took the default
    (["submit", "--runtimes", "ce", "--image", "pyxis=/s/img.sqsh"],
     "--image 'pyxis=/s/img.sqsh': runtime pyxis is not in --runtimes 'ce'"),
    (["render", "sbatch", "--image", "ce=/s/img.sqsh"], "runtime ce is not in --runtimes 'bare'"),
    # the hook is CE's and Sarus Suite's: for other runtimes alone the flag changed nothing
    (["submit", "--runtimes", "pyxis,bare", "--ofi-hook", "off"],
     "--ofi-hook off: only ce, sarus-suite have the aws_ofi_nccl hook, and --runtimes 'pyxis,bare' runs neither"),
    (["submit", "--partition", "a b"], "--partition 'a b'"),
    (["submit", "--depht=3"], "unrecognized arguments"),
    (["render", "sbatch", "--nodes", "1,2"], "render takes one node count"),
    (["render", "sbatch", "--nodes", "1,x"], "--nodes '1,x' must be a comma-separated list of positive integers"),
    (["render", "sbatch", "--runtimes", "bare,podman"], "render sbatch makes one run"),
    (["render", "interactive", "--repeats", "2"], "render interactive makes one run"),
    # `data download -n` takes these only: the guide's data step would fail inside the allocation
    (["render", "interactive", "--download", "-4"], "--download -4: shards to download"),
    (["render", "interactive", "--download", "0"], "--download 0: shards to download"),
    (["render", "interactive", "--flow", "speedrun", "--download", "0"], "--download 0: shards to download"),
    # a batch script reads staged data: the count was ignored, silently
    (["render", "sbatch", "--download", "4"], "--download is the interactive guide's data step; render sbatch"),
    (["render", "compare", "--download", "4"], "render compare writes a batch job that reads staged data"),
    # a file as the base directory was rendered into the job as NANOCHAT_BASE_DIR, its data checks passed unsaid
    (["submit", "--dry-run", "--flow", "speedrun", "--base-dir", "/etc/passwd"],
     "--base-dir /etc/passwd: a file, not a directory"),
    (["plan", "--data-dir", "/etc/passwd"], "--data-dir /etc/passwd: a file, not a directory"),
])
def test_bad_input_is_one_error_line_and_nothing_is_written(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        code, out, err = run_cli([*argv, *(["--out", str(tmp_path / "s")] if argv[0] != "plan" else [])], capsys)
    except SystemExit as e:  # argparse's own usage errors
        code, err = e.code, capsys.readouterr().err
        assert code == 2
    else:
        assert code == 1
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert message in err
    assert not (tmp_path / "s").exists() and not (tmp_path / "runs").exists()


def test_submit_dry_run_renders_without_submitting(capsys, tmp_path):
    out_dir = tmp_path / "sweep"
    code, out, _ = run_cli(["submit", "--nodes", "1,2", "--runtimes", "bare,podman", *TINY, "--dry-run",
                            "--out", str(out_dir), "--base-dir", str(tmp_path / "base")], capsys)
    assert code == 0
    assert out.count("would run: cd ") == 4 and "nothing submitted" in out
    scripts = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("job.sbatch"))
    assert scripts == ["n1-bare-r1/job.sbatch", "n1-podman-r1/job.sbatch", "n2-bare-r1/job.sbatch",
                       "n2-podman-r1/job.sbatch"]
    assert not list(out_dir.rglob("run.json")) and not (out_dir / "sweep.json").exists()
    r = subprocess.run([shutil.which("shellcheck"), *map(str, out_dir.rglob("job.sbatch"))], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout


def test_submit_compare_dry_run_groups_runtimes_per_node_count(capsys, tmp_path):
    out_dir = tmp_path / "cmp"
    code, out, _ = run_cli(["submit", "--nodes", "1,2", "--runtimes", "bare,podman", "--repeats", "2", *TINY,
                            "--compare", "--dry-run", "--out", str(out_dir)], capsys)
    assert code == 0
    text = (out_dir / "jobs" / "compare-n2" / "job.sbatch").read_text()
    order = [ln.split()[3].rstrip(":") for ln in text.splitlines() if ln.startswith("# == run ")]
    assert order == ["n2-bare-r1", "n2-podman-r1", "n2-bare-r2", "n2-podman-r2"]  # repeats interleaved


@pytest.mark.parametrize("kind", ["sbatch", "compare", "interactive"])
def test_render_writes_script_and_pending_run_json(kind, capsys, tmp_path):
    rts = "bare,podman" if kind == "compare" else "podman"
    code, out, _ = run_cli(["render", kind, "--nodes", "2", "--runtimes", rts, *TINY, "--out", str(tmp_path / "r")],
                           capsys)
    assert code == 0
    script = tmp_path / "r" / out.split("wrote ")[1].split("\n")[0].split("/r/", 1)[1]
    assert script.is_file()
    manifest = json.loads((tmp_path / "r" / "n2-podman-r1" / "run.json").read_text())
    assert manifest["status"] == "pending" and manifest["world_size"] == 4 and manifest["runtime"] == "podman"
    assert manifest["launch"]["script"] == str(script)
    r = subprocess.run([shutil.which("shellcheck"), str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("flow", [[], ["--flow", "speedrun", "--stages", "base_train", "--no-data-check"]])
def test_render_says_where_time_is_under_the_estimate(flow, capsys, tmp_path):
    """render prints no plan table, so --time 00:01:00 for a run estimated at minutes was written without a word,
    and the run ended as timeout before it trained."""
    code, out, _ = run_cli(["render", "sbatch", "--nodes", "1", "--gpus-per-node", "4", "--row-groups", "2",
                            "--shards", "9", "--time", "00:01:00", *flow, "--out", str(tmp_path / "r")], capsys)
    assert code == 0
    what = "base_train: --time 00:01:00 is under the stage's" if flow else "--time 00:01:00 is under the run's"
    assert f"note: {what} estimate of " in out and "it ends as timeout before its last step" in out


def test_status_of_a_directory_that_is_no_sweep(capsys, tmp_path):
    code, _, err = run_cli(["status", str(tmp_path)], capsys)
    assert code == 1 and "sweep.json" in err and "does not exist" in err


@pytest.mark.parametrize("command", [["submit", "--dry-run"], ["render", "sbatch"]])
@pytest.mark.parametrize("name", ["..", ".", "/", "a/b", "../x"])
def test_a_sweep_name_that_would_leave_runs_is_refused(command, name, tmp_path, monkeypatch, capsys):
    """`--name ..` once wrote the sweep into the current directory (runs/.. = .)."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli([*command, "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}",
                            "--name", name], capsys)
    assert code == 1
    assert err.startswith(f"error: --name {name!r}: ") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["submit", "--dry-run"], ["render", "sbatch"],
                                     ["render", "sbatch", "--flow", "speedrun", "--stages", "base_train"]])
def test_a_name_beside_out_is_refused_not_dropped(command, tmp_path, capsys):
    """`--name mine --out DIR` named the sweep and its jobs after DIR's folder, dropping --name without a word."""
    code, out, err = run_cli([*command, "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}",
                              "--name", "mine", "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and err.startswith("error: --name 'mine' with --out ") and "not both" in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("site", [[], ["--site", "alps"]])
@pytest.mark.parametrize("partition, message", [
    ("", "--partition '' is empty: give a value, or leave the flag out"),
    ("my part", "--partition 'my part' holds characters Slurm directives cannot take")])
def test_plan_refuses_a_partition_submit_refuses(site, partition, message, capsys):
    """plan --partition "$PART" with PART unset printed the default partition's plan (alps: normal's), and without
    --site a name with a space was planned, though submit and render refuse both."""
    code, out, err = run_cli(["plan", *site, "--nodes", "2", "--partition", partition], capsys)
    assert code == 1 and out == "" and err.startswith(f"error: {message}") and err.count("\n") == 1


def test_an_unknown_partition_is_refused_before_the_plan_is_printed(capsys, tmp_path):
    code, out, err = run_cli(["submit", "--dry-run", "--site", "alps", "--partition", "nope", "--nodes", "2",
                              "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and out == "" and "no partition 'nope' (the profile knows: debug, normal, xfer" in err
    assert not (tmp_path / "s").exists()


def test_plan_takes_the_partition_its_advice_names(capsys):
    """plan's run over partition normal's time limit said 'or another --partition', and plan refused --partition."""
    argv = ["plan", "--site", "alps", "--time", "13:00:00", "--nodes", "1"]
    code, out, _ = run_cli(argv, capsys)
    assert code == 0 and "not submitted" in out and out.splitlines()[1].endswith("or another --partition")
    code, out, _ = run_cli([*argv, "--partition", "xfer"], capsys)
    assert code == 0 and "not submitted" not in out and "\n1 runs, " in out
    code, out, err = run_cli([*argv, "--partition", "nope"], capsys)
    assert code == 1 and out == "" and err.startswith("error: site alps: no partition 'nope' (the profile knows: debug")


def test_submit_checks_its_table_against_the_partition_it_submits_to(capsys, tmp_path):
    """submit --partition xfer printed its 13-hour run as 'not submitted' for partition normal's 12 hours (the site's
    default), then submitted it to xfer."""
    code, out, err = run_cli(["submit", "--dry-run", "--no-data-check", "--site", "alps", "--partition", "xfer",
                              "--time", "13:00:00", "--nodes", "1", *TINY, f"--base-dir={tmp_path}",
                              "--out", str(tmp_path / "s")], capsys)
    assert code == 0 and "not submitted" not in out and "\n1 runs, " in out, err
    assert "#SBATCH --partition=xfer" in (tmp_path / "s" / "n1-bare-r1" / "job.sbatch").read_text()


@pytest.mark.parametrize("flags,message", [(["--poll=-1"], "--poll -1: "), (["--poll=nan"], "--poll nan: "),
                                           (["--poll=0"], "--poll 0: "), (["--timeout=-5"], "--timeout -5: "),
                                           (["--poll=0.01"], "--poll 0.01: give the seconds between polls as a "
                                                             "number of at least 1 (each poll queries slurmctld)"),
                                           (["--timeout=nan"], "--timeout nan: ")])
def test_status_wait_refuses_a_poll_or_timeout_that_is_no_duration(flags, message, capsys, tmp_path):
    """A negative or NaN --poll once ended `status --wait` in time.sleep's traceback after the first poll; a
    --poll of 0.01 queried slurmctld, which the machine's users share, a hundred times a second."""
    code, _, err = run_cli(["status", str(tmp_path), "--wait", *flags], capsys)
    assert code == 1 and err.startswith(f"error: {message}") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("text,message", [
    ("not json", "is not a sweep record written by `nanochat-bench submit`: Expecting value"),
    ("[]", "lacks its list of jobs"), ("{}", "lacks its list of jobs"), ('{"jobs": 5}', "lacks its list of jobs"),
    ('{"jobs": [{"name": "j", "job_id": "1", "runs": ["../../etc"]}]}', "run '../../etc' is not a directory inside"),
])
def test_status_of_a_foreign_sweep_json_is_one_error_line_and_writes_nothing(text, message, capsys, tmp_path):
    """A sweep.json not written by submit once ended status in a traceback, or wrote a run.json outside the sweep."""
    sweep = tmp_path / "a" / "b"
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(text)
    for flags in ([], ["--resubmit-failed"]):
        code, _, err = run_cli(["status", str(sweep), *flags], capsys)
        assert code == 1 and err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "sweep.json"]


@pytest.mark.parametrize("command", [["submit", "--dry-run"], ["render", "sbatch"], ["render", "interactive"]])
def test_an_out_that_cannot_be_written_is_one_error_line(command, capsys, tmp_path):
    """`--out` naming a file once ended in mkdir's NotADirectoryError traceback."""
    (tmp_path / "afile").write_text("")
    code, _, err = run_cli([*command, "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}",
                            "--out", str(tmp_path / "afile")], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: cannot write the job into {tmp_path / 'afile'}") and "choose another --out" in err


@pytest.mark.parametrize("arg,message", [("nosuch=3", "unknown flag(s) --nosuch=3 of `tokenizer train`"),
                                         ("vocab_size=abc", "argument --vocab_size: invalid int value: 'abc'"),
                                         ("vocab_size=100", "--vocab_size=100: must be at least 266"),
                                         ("doc_cap=0", "--doc_cap=0: must be >= 1")])
def test_a_flows_bad_tokenizer_arg_is_refused_before_anything_is_written(arg, message, capsys, tmp_path):
    """A --tokenizer-arg `tokenizer train` does not take, or a value it refuses, was once rendered into the job,
    failing only in Slurm."""
    code, _, err = run_cli(["submit", "--flow=speedrun", "--dry-run", "--nodes=1", "--runtimes=bare", *TINY,
                            f"--base-dir={tmp_path}", f"--tokenizer-arg={arg}", "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and err.startswith("error: --tokenizer-arg") and message in err
    assert not (tmp_path / "s").exists()


def test_plan_refuses_the_tokenizer_arg_that_submit_refuses(capsys, tmp_path):
    """plan --flow printed its table over a --tokenizer-arg that submit of the same flags then refused."""
    code, out, err = run_cli(["plan", "--flow=speedrun", "--nodes=1", *TINY, f"--base-dir={tmp_path}",
                              "--tokenizer-arg=vocab_size=abc"], capsys)
    assert code == 1 and not out
    assert err.startswith("error: --tokenizer-arg") and "invalid int value: 'abc'" in err


@pytest.mark.parametrize("flow", [[], ["--flow=speedrun", "--site=test-cluster"]])
def test_the_interactive_guides_python_check_does_not_exit_the_pasted_shell(flow, capsys, tmp_path):
    """The guide promises that nothing in it exits the salloc shell it is pasted into; its Python check did
    (`exit 1`). Run as a script (`bash interactive.sh`) it still stops there."""
    code, out, _ = run_cli(["render", "interactive", *flow, "--nodes=1", "--runtimes=bare", *TINY,
                            "--python=/bin/false", f"--base-dir={tmp_path}", "--out", str(tmp_path / "g")], capsys)
    assert code == 0
    guide = (tmp_path / "g" / out.split("wrote ")[1].split("\n")[0].split("/g/", 1)[1]).read_text()
    # the check alone: the guide's srun lines before it would run where Slurm is live and read bash's stdin
    start = guide.index("bench_python=")
    check = guide[start:guide.index("\nfi\n", start) + 4] + "echo still here\n"
    (tmp_path / "check.sh").write_text(check)
    pasted = subprocess.run(["bash", "-s"], input=check, capture_output=True, text=True)
    assert "needs Python >= 3.8" in pasted.stderr and pasted.stdout == "still here\n"
    script = subprocess.run(["bash", str(tmp_path / "check.sh")], capture_output=True, text=True)
    assert script.returncode == 1 and script.stdout == ""


@pytest.mark.parametrize("command", [["render", "sbatch"], ["render", "interactive"], ["submit"]])
def test_rendering_over_a_run_that_ran_is_refused_and_keeps_its_record(command, capsys, tmp_path):
    """`render sbatch --out` over a run that had ended ok once reset its run.json to pending, its outcome lost."""
    argv = [*command, "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}", "--out", str(tmp_path / "r")]
    assert run_cli(["render", "sbatch", *argv[2:]], capsys)[0] == 0
    again = run_cli(["render", "sbatch", *argv[2:]], capsys)
    assert again[0] == 0  # rendered, never run: rendering again is fine
    record = tmp_path / "r" / "n1-bare-r1" / "run.json"
    ran = {**json.loads(record.read_text()), "status": "ok"}
    record.write_text(json.dumps(ran))
    code, _, err = run_cli(argv, capsys)
    assert code == 1 and "holds a run that has already started (status ok)" in err
    assert json.loads(record.read_text()) == ran


@pytest.mark.parametrize("command", [["render", "sbatch"], ["render", "interactive"],
                                     ["render", "sbatch", "--flow=speedrun", "--stages=base_train"]])
def test_rendering_into_a_submitted_sweep_is_refused_and_keeps_its_jobs(command, capsys, tmp_path, monkeypatch):
    """`render --out` over a sweep whose job was still pending in Slurm rewrote its script and run.json with the
    flags changed (--num_iterations=9): run.json said 9 steps of a job that would train 6, and --resubmit-failed would
    send the new script as if it were the sweep's."""
    from bench.launch import slurm

    class Cluster:
        def submit(self, script, exclude=()):
            return "7"

    monkeypatch.setattr(slurm, "SlurmCLI", Cluster)
    sweep = tmp_path / "s"
    argv = ["--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}", "--no-data-check", "--out", str(sweep)]
    assert run_cli(["submit", *argv], capsys)[0] == 0
    kept = {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
    code, _, err = run_cli([*command, *argv, "--num_iterations=9"], capsys)
    assert code == 1 and err.startswith(f"error: {sweep} already holds a sweep; choose another --out") \
        and len(err.strip().splitlines()) == 1, err
    assert {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()} == kept


def test_submit_refuses_a_partition_slurm_does_not_have_before_writing_the_sweep(capsys, tmp_path, monkeypatch):
    """Without a site profile an unknown --partition was found by sbatch only after sweep.json was written, and
    the advice it printed (`status --resubmit-failed`) resubmits the same script with the same partition."""
    from bench.launch import slurm

    class Cluster:
        submitted = []

        def partitions(self):
            return ["debug", "normal"]

        def submit(self, script, exclude=()):
            self.submitted.append(script)
            return "1"

    monkeypatch.setattr(slurm, "SlurmCLI", Cluster)
    argv = ["submit", "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}"]
    code, out, err = run_cli([*argv, "--partition=nosuch", "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and out == "" and err == "error: --partition 'nosuch': Slurm has no partition nosuch; it has: " \
                                               "debug, normal\n"
    assert not (tmp_path / "s").exists() and Cluster.submitted == []
    assert run_cli([*argv, "--partition=normal,debug", "--out", str(tmp_path / "t")], capsys)[0] == 0
    assert len(Cluster.submitted) == 1


def test_the_guides_download_of_every_shard_is_counted_in_its_salloc_time(capsys, tmp_path):
    """--download -1 (every shard) was timed as minus one shard: the salloc was as short as for none."""
    import re

    def guide(download: str) -> str:
        out = tmp_path / f"d{download}"
        code, _, err = run_cli(["render", "interactive", "--nodes=1", "--runtimes=bare", *TINY,
                                f"--base-dir={tmp_path}", "--download", download, "--out", str(out)], capsys)
        assert code == 0, err
        return (out / "n1-bare-r1" / "interactive.sh").read_text()
    every, eight = guide("-1"), guide("8")
    minutes = [int(re.search(r"allocate nodes for (\d+) minutes", g).group(1)) for g in (every, eight)]
    assert "data download -n 1823" in every and minutes[0] > minutes[1] + 60
    # the data step's comment says where its count came from, not "what the plan needs" for every count
    assert "# -- data: 1823 FineWeb-Edu shards, every one (--download -1)" in every
    assert "# -- data: 8 FineWeb-Edu shards, as --download asks" in eight
    code, _, err = run_cli(["render", "interactive", "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}",
                            "--out", str(tmp_path / "planned")], capsys)
    assert code == 0, err
    planned = (tmp_path / "planned" / "n1-bare-r1" / "interactive.sh").read_text()
    assert "shards, what the plan needs (offline" in planned


@pytest.mark.parametrize("flow", [[], ["--flow=speedrun", "--stages=base_train"]])
def test_a_download_below_what_the_plan_needs_is_noted(flow, capsys, tmp_path):
    """--download 2 where the plan needs 4 was taken without a word: the runs then train on fewer shards than
    their steps consume (the stream wraps around and repeats them)."""
    argv = ["render", "interactive", *flow, "--nodes=2", "--gpus-per-node=4", "--runtimes=bare",
            f"--base-dir={tmp_path}"]
    code, out, err = run_cli([*argv, "--download=2", "--out", str(tmp_path / "few")], capsys)
    assert code == 0, err
    assert "note: --download 2 is below the 4 shard(s) the plan needs" in out
    code, out, err = run_cli([*argv, "--download=4", "--out", str(tmp_path / "enough")], capsys)
    assert code == 0 and "--download" not in out, err


@pytest.mark.parametrize("flow", [[], ["--flow=speedrun", "--stages=base_train"]])
@pytest.mark.parametrize("data,k,fix", [(["--row-groups=1", "--shards=8"], 4, 8), ([], 1, 2)])
def test_a_download_that_leaves_no_training_shard_is_refused_before_anything_is_written(flow, data, k, fix, capsys,
                                                                                        tmp_path):
    """--download 4 where the runs keep the last K=4 shards for validation wrote the guide, whose runs then stopped
    at start-up with no training file; it is refused in one line naming K and the smallest count that works (K+1
    where a shard holds a row group for every rank; 8 here, where 4 single-row-group shards train the 4 ranks)."""
    argv = ["render", "interactive", *flow, "--nodes=1", "--gpus-per-node=4", "--runtimes=bare", *data,
            f"--base-dir={tmp_path}"]
    code, out, err = run_cli([*argv, f"--download={k}", "--out", str(tmp_path / "few")], capsys)
    assert code == 1 and not (tmp_path / "few").exists()
    assert err == (f"error: --download {k}: the runs keep the last NANOCHAT_VAL_FILES_K={k} shard(s) for validation, "
                   f"which leaves no training shard; give --download {fix} or more\n")
    code, out, err = run_cli([*argv, f"--download={fix}", "--out", str(tmp_path / "enough")], capsys)
    assert code == 0, err


@pytest.mark.parametrize("flow", [[], ["--flow=speedrun", "--stages=base_train"]])
def test_a_download_whose_training_split_cannot_serve_every_rank_is_refused(flow, capsys, tmp_path):
    """K=2 was planned for 8 shards of 2 row groups at 4 ranks: --download 3 (above K, below the 14 the plan needs)
    got only a note, and the guide's runs stopped at start-up with 2 training row groups for 4 ranks."""
    argv = ["render", "interactive", *flow, "--nodes=1", "--gpus-per-node=4", "--runtimes=bare", "--row-groups=2",
            "--shards=8", "--num_iterations=2000", f"--base-dir={tmp_path}"]
    code, out, err = run_cli([*argv, "--download=3", "--out", str(tmp_path / "few")], capsys)
    assert code == 1 and not (tmp_path / "few").exists()
    assert err == ("error: --download 3: with the last NANOCHAT_VAL_FILES_K=2 for validation, training gets 1 "
                   "shard(s) of 2 row group(s) (from 8 shard(s) of 2 row groups (given)), fewer than the 4 ranks "
                   "need; give --download 4 or more\n")
    code, out, err = run_cli([*argv, "--download=4", "--out", str(tmp_path / "enough")], capsys)
    assert code == 0 and "note: --download 4 is below the 14 shard(s) the plan needs" in out, err


@pytest.mark.parametrize("flow", [[], ["--flow=speedrun", "--stages=base_train"]])
def test_a_guide_whose_salloc_is_over_its_partition_is_refused_before_anything_is_written(flow, capsys, tmp_path):
    """On alps' 30-minute debug partition the batch job fit, so the guide was written with a salloc of
    over 30 minutes that Slurm refuses: the download and tokenizer steps count against the partition too."""
    argv = ["render", "interactive", *flow, "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}",
            "--site=alps", "--partition=debug", "--time=00:05:00", "--out", str(tmp_path / "g")]
    code, out, err = run_cli(argv, capsys)
    assert code == 1 and not (tmp_path / "g").exists()
    assert err.startswith("error: render interactive: the guide's salloc: its time limit ")
    assert "over partition debug's 00:30:00" in err and "--download" in err
    assert run_cli([*argv[:-3], "--partition=normal", "--out", str(tmp_path / "n")], capsys)[0] == 0


def test_the_guides_tokenizer_step_keeps_a_tokenizer_already_there(capsys, tmp_path):
    """The guide's step retrained the tokenizer every time it ran, on the few shards it had just downloaded,
    replacing the one that the checkpoints under NANOCHAT_BASE_DIR were trained with; now it keeps it, as a flow's
    tokenizer step does."""
    base = tmp_path / "base"
    code, _, err = run_cli(["render", "interactive", "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={base}",
                            "--out", str(tmp_path / "g")], capsys)
    assert code == 0, err
    guide = (tmp_path / "g" / "n1-bare-r1" / "interactive.sh").read_text()
    step = guide[guide.index("# -- tokenizer:"):guide.index("# -- a shell")]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path / 'srun.log'}\n")
    (bin_dir / "srun").chmod(0o755)

    def run_step() -> str:
        # cpus_per_node: what the guide sets at its top, before its first step
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "NANOCHAT_BASE_DIR": str(base), "cpus_per_node": "8"}
        r = subprocess.run(["bash", "-euc", step], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout
    run_step()
    assert "tokenizer train" in (tmp_path / "srun.log").read_text()  # none yet: trained
    (tmp_path / "srun.log").unlink()
    (base / "tokenizer").mkdir(parents=True)
    (base / "tokenizer" / "tokenizer.pkl").write_bytes(b"kept")
    assert "exists, kept" in run_step() and not (tmp_path / "srun.log").exists()


def generate(base, *what: str, monkeypatch) -> None:
    """`data generate` of each of `what` (--chat, --eval-bundle) under `base`: the offline stand-ins."""
    with monkeypatch.context() as mp:
        mp.setenv("NANOCHAT_BASE_DIR", str(base))
        for flag in what:
            assert cli.main(["data", "generate", flag]) == 0


@pytest.mark.parametrize("command", [["submit", "--dry-run"], ["render", "sbatch"]])
def test_a_flow_job_without_its_staged_data_is_refused_before_anything_is_written(command, capsys, tmp_path,
                                                                                 monkeypatch):
    """A flow job whose --base-dir lacks the eval bundle or the chat data ran base_train for hours, then stopped
    at base_eval (no_data): where this host sees --base-dir, submit and render sbatch refuse it, naming both."""
    base = tmp_path / "base"
    base.mkdir()
    argv = [*command, "--flow=speedrun", "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={base}"]
    code, out, err = run_cli([*argv, "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: data the stages need is not staged under {base}: base_eval: no eval bundle")
    assert "`nanochat-bench data download --eval-bundle`" in err and "`nanochat-bench data download --chat`" in err
    assert not (tmp_path / "s").exists()

    generate(base, "--chat", "--eval-bundle", monkeypatch=monkeypatch)
    code, _, err = run_cli([*argv, "--out", str(tmp_path / "s")], capsys)
    assert code == 0, err


def test_a_flow_stage_whose_checkpoint_no_chosen_stage_saves_is_refused_until_it_is_there(capsys, tmp_path,
                                                                                          monkeypatch):
    """`--stages chat_sft` alone: its job would train the tokenizer, then fail at once for want of the point's mid
    checkpoint (a new point's tag has none). Submit refuses it while the base directory does not hold it, the local
    speedrun before the tokenizer or any rank; with its checkpoint there the stage runs alone."""
    from bench.launch.flow import model_tag

    base = tmp_path / "base"
    generate(base, "--chat", monkeypatch=monkeypatch)
    argv = ["submit", "--dry-run", "--flow=speedrun", "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={base}",
            "--out", str(tmp_path / "s")]
    tag = model_tag((tmp_path / "s" / "n1-bare-r1").absolute())
    code, out, err = run_cli([*argv, "--stages=chat_sft"], capsys)
    assert code == 1 and not (tmp_path / "s").exists(), err
    assert f"chat_sft loads the mid checkpoint, which {base}/mid_checkpoints/{tag} does not hold (mid_train saves " \
           f"it: add it to --stages)" in err and "skipping n1-bare-r1: chat_sft loads" in out
    code, _, err = run_cli([*argv, "--stages=base_train,mid_train,chat_sft"], capsys)
    assert code == 0, err
    for name in ("model_000006.pt", "meta_000006.json"):  # what mid-training leaves
        (base / "mid_checkpoints" / tag / name).parent.mkdir(parents=True, exist_ok=True)
        (base / "mid_checkpoints" / tag / name).write_text("")
    code, _, err = run_cli([*argv, "--stages=chat_sft,chat_eval_sft"], capsys)
    assert code == 0, err

    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail(f"{a[0]} started"))
    code, _, err = run_cli(["speedrun", "--stages=chat_sft", "--run-dir", str(tmp_path / "local"), "--nproc=2",
                            *TINY[1:]], capsys)
    assert code == 1 and err.splitlines()[-1].startswith("error: this flow cannot run: chat_sft loads the mid "
                                                         "checkpoint, which "), err
    assert not (tmp_path / "local").exists()


def test_trainer_flags_beside_stages_without_base_train_are_accepted_with_a_note_naming_them(capsys, tmp_path):
    """--stages base_loss,base_eval with --num_iterations 7 or --train-arg matrix_lr=0.05 planned and ran as if
    neither had been given, not a word said: the later stages take only device_type, the flags they inherit and the
    model's shape (their estimates). Accepted, as a flow is resumed by hand by the same command with --stages."""
    argv = ["plan", "--flow=speedrun", "--gpus-per-node=2", "--device_type=cpu", "--depth=2", "--max_seq_len=64",
            "--train-arg=aspect_ratio=64"]
    code, _, err = run_cli([*argv, "--stages=base_loss,base_eval", "--num_iterations=7",
                            "--train-arg=matrix_lr=0.05"], capsys)
    assert code == 0 and err == ("note: --num_iterations=7, --train-arg matrix_lr=0.05 unused: base_train is not in "
                                 "--stages, and no stage chosen takes them\n")
    code, _, err = run_cli([*argv, "--stages=base_loss", "--device_batch_size=2"], capsys)
    assert code == 0 and err == ("note: --device_batch_size=2 unused: base_train is not in --stages, and no stage "
                                 "chosen takes it\n")
    for more in (["--stages=base_loss,base_eval"], ["--stages=base_train,base_loss", "--num_iterations=7"]):
        code, _, err = run_cli([*argv, *more], capsys)
        assert code == 0 and err == "", err


def test_a_local_flow_reads_each_stages_run_json_once_before_it_checks_what_the_stages_need(capsys, tmp_path,
                                                                                            monkeypatch):
    """Which stages a rerun keeps (ok before) was read from their run.json files twice: for the staged data the
    others need, then again for the checkpoints they load."""
    from collections import Counter
    from pathlib import Path

    from bench import contract

    base = tmp_path / "base"
    generate(base, "--chat", monkeypatch=monkeypatch)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
    reads, read = Counter(), contract.read_run_json

    def counted(run_dir):
        reads[Path(run_dir).name] += 1
        return read(run_dir)
    monkeypatch.setattr(contract, "read_run_json", counted)
    code, _, err = run_cli(["speedrun", "--stages=chat_sft", "--run-dir", str(tmp_path / "local"), "--nproc=2",
                            *TINY[1:]], capsys)
    assert code == 1 and "chat_sft loads the mid checkpoint" in err, err
    assert reads == {"chat_sft": 1}


@pytest.mark.parametrize("flags", [["--stages=base_train,base_loss"], ["--no-data-check"]])
def test_a_flow_job_needs_no_staged_data_without_a_stage_reading_it_or_with_no_data_check(flags, capsys, tmp_path):
    code, out, err = run_cli(["submit", "--dry-run", "--flow=speedrun", "--nodes=1", "--runtimes=bare", *TINY,
                              f"--base-dir={tmp_path}", *flags, "--out", str(tmp_path / "s")], capsys)
    assert code == 0, err
    assert "not staged" not in out and "not visible" not in out and (tmp_path / "s").is_dir()


def test_a_mount_not_visible_here_is_noted(capsys, tmp_path):
    """Every container of the job would fail at its start on a node without it; a login node may not see the nodes'
    filesystems, so it is said, not refused."""
    argv = ["render", "sbatch", "--nodes=1", "--runtimes=podman", *TINY, f"--base-dir={tmp_path}",
            "--out", str(tmp_path / "s")]
    code, out, err = run_cli([*argv, f"--mount={tmp_path / 'gone'}:/data"], capsys)
    assert code == 0 and f"note: --mount {tmp_path / 'gone'} is not visible here" in out, err
    code, out, err = run_cli([*argv, f"--mount={tmp_path}:/data", "--out", str(tmp_path / "s2")], capsys)
    assert code == 0 and "--mount" not in out, err


@pytest.mark.parametrize("mount", ["/tmp:", "/tmp::ro", "/tmp:relative", "/tmp:relative:ro"])
def test_a_mount_with_an_empty_or_relative_destination_is_refused(mount, capsys, tmp_path):
    """`/tmp:` was read as /tmp:/tmp, and a relative DST was written into the job for the runtime to refuse on its
    node; both are refused before anything is written, naming the mount."""
    argv = ["render", "sbatch", "--nodes=1", "--runtimes=podman,bare", *TINY, f"--base-dir={tmp_path}",
            "--out", str(tmp_path / "s"), f"--mount={mount}"]
    code, out, err = run_cli(argv, capsys)
    assert code == 1 and f"error: mount {mount!r}: DST" in err and "is not an absolute path" in err, (out, err)
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


def test_the_mount_forms_are_read_as_documented():
    assert [Mount.parse(t) for t in ("/s", "/s:/d", "/s:/d:ro", "/s:/d:rw")] == [
        Mount("/s"), Mount("/s", "/d"), Mount("/s", "/d", readonly=True), Mount("/s", "/d")]


def test_a_train_flag_and_a_train_arg_that_disagree_are_refused(capsys, tmp_path):
    """--depth=2 --train-arg depth=3 trained depth 3 with no word said; the same value given twice is taken."""
    argv = ["submit", "--dry-run", "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}", "--no-data-check"]
    code, out, err = run_cli([*argv, "--train-arg", "depth=3", "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and err == "error: --depth 2 and --train-arg depth=3 disagree; give depth once\n", (out, err)
    assert not (tmp_path / "s").exists()
    code, out, err = run_cli([*argv, "--train-arg=--depth=2", "--out", str(tmp_path / "s2")], capsys)
    assert code == 0 and (tmp_path / "s2").is_dir(), err


def test_the_interactive_guides_data_and_tokenizer_steps_read_the_plans_val_files_k(capsys, tmp_path, monkeypatch):
    """The guide exported the plan's NANOCHAT_VAL_FILES_K only in its runs' block: its tokenizer step took the salloc
    shell's, and one larger than its download leaves for validation (8 of 4 shards) stopped it, as the flow's
    guide, which exports K before its tokenizer, does not. The steps before training run here, srun a stub."""
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "8")
    code, out, err = run_cli(["render", "interactive", "--nodes=1", "--runtimes=bare", *TINY, "--row-groups=1",
                              "--shards=8", f"--base-dir={tmp_path}", "--out", str(tmp_path / "g")], capsys)
    assert code == 0, err
    guide = (tmp_path / "g" / "n1-bare-r1" / "interactive.sh").read_text()
    assert "data download -n 4" in guide  # shards of 1 row group at 2 ranks: K=2, and 2 for training
    stub = tmp_path / "bin" / "srun"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\nargs="$*"\necho "K=$NANOCHAT_VAL_FILES_K: ${args#* -m bench.cli }"\n')
    stub.chmod(0o755)
    steps = subprocess.run(["bash", "-s"], input=guide[:guide.index("# -- a shell")], capture_output=True,
                           text=True, env={**os.environ, "PATH": f"{stub.parent}:{os.environ['PATH']}"})
    assert steps.returncode == 0, steps.stderr
    assert steps.stdout.splitlines() == ["K=2: data download -n 4", "K=2: tokenizer train"]


def test_a_base_dir_not_visible_here_is_not_checked_and_says_so(capsys, tmp_path):
    """A login node that does not see the nodes' filesystem: nothing to check, the job is written with a note."""
    code, out, _ = run_cli(["submit", "--dry-run", "--flow=speedrun", "--nodes=1", "--runtimes=bare", *TINY,
                            f"--base-dir={tmp_path / 'on-the-nodes'}", "--out", str(tmp_path / "s")], capsys)
    assert code == 0 and f"note: --base-dir {tmp_path / 'on-the-nodes'} is not visible here" in out


def test_the_interactive_guide_stages_its_data_itself_and_plan_notes_what_is_missing(capsys, tmp_path):
    argv = ["--flow=speedrun", "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}"]
    code, out, err = run_cli(["render", "interactive", *argv, "--out", str(tmp_path / "g")], capsys)
    assert code == 0, err
    guide = (tmp_path / "g" / "n1-bare-r1" / "interactive.sh").read_text()
    assert "data download --eval-bundle" in guide and "data download --chat" in guide
    code, out, _ = run_cli(["plan", *argv], capsys)
    assert code == 0 and f"note: not staged under {tmp_path} (submit refuses the jobs until it is): base_eval: " in out


@pytest.mark.parametrize("command", [["submit", "--dry-run"], ["render", "sbatch"], ["render", "compare"]])
def test_a_sweep_of_a_workload_reading_staged_data_is_checked_as_a_flow_is(command, capsys, tmp_path, monkeypatch):
    """`--workload base_eval` alone: each job would stop with no_data on the nodes; refused here, naming the
    command that stages it, and written once it is staged (or with --no-data-check)."""
    base = tmp_path / "base"
    base.mkdir()
    argv = [*command, "--workload=base_eval", "--nodes=1", "--runtimes=bare", "--gpus-per-node=2",
            "--device_type=cpu", f"--base-dir={base}"]
    code, out, err = run_cli([*argv, "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and out == "" and not (tmp_path / "s").exists()
    assert err.startswith(f"error: data the stages need is not staged under {base}: base_eval: no eval bundle")
    code, out, _ = run_cli(["plan", *argv[len(command):]], capsys)
    assert code == 0 and "(submit refuses the jobs until it is): base_eval: no eval bundle" in out
    code, _, err = run_cli([*argv, "--no-data-check", "--out", str(tmp_path / "s")], capsys)
    assert code == 0, err
    generate(base, "--eval-bundle", monkeypatch=monkeypatch)
    code, out, err = run_cli([*argv, "--out", str(tmp_path / "t")], capsys)
    assert code == 0 and "not staged" not in out, err


def test_a_sweep_of_a_workload_staging_nothing_is_neither_checked_nor_noted(capsys, tmp_path):
    code, out, err = run_cli(["submit", "--dry-run", "--nodes=1", *TINY, f"--base-dir={tmp_path / 'elsewhere'}",
                              "--out", str(tmp_path / "s")], capsys)
    assert code == 0 and "not visible" not in out, err


def test_a_dry_run_into_a_submitted_sweep_is_refused_and_leaves_its_scripts(capsys, tmp_path, monkeypatch):
    """`submit --dry-run --out` over a sweep already submitted rewrote its job scripts with the new flags, and
    `status --resubmit-failed` then resubmits those, not the ones its jobs ran."""
    from bench.launch import slurm

    class Cluster:
        def partitions(self):
            return ["debug"]

        def submit(self, script, exclude=()):
            return "1"

    monkeypatch.setattr(slurm, "SlurmCLI", Cluster)
    argv = ["submit", "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}", "--out", str(tmp_path / "s")]
    assert run_cli(argv, capsys)[0] == 0
    script = tmp_path / "s" / "n1-bare-r1" / "job.sbatch"
    submitted = script.read_text()
    code, _, err = run_cli([*argv, "--num_iterations=9", "--dry-run"], capsys)
    assert code == 1 and "already holds a sweep" in err
    assert script.read_text() == submitted


def test_status_of_a_dry_run_says_nothing_was_submitted(capsys, tmp_path):
    """`status` of a `render` directory says that the jobs there were written but submit nothing, and what makes a
    sweep to follow; of a directory nothing of ours wrote, that it is no sweep."""
    argv = ["render", "sbatch", "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}"]
    assert run_cli([*argv, "--out", str(tmp_path / "s")], capsys)[0] == 0
    code, _, err = run_cli(["status", str(tmp_path / "s")], capsys)
    assert code == 1 and "holds job scripts that `submit --dry-run` or `render` wrote, which submit nothing" in err
    code, _, err = run_cli(["status", str(tmp_path / "elsewhere")], capsys)
    assert code == 1 and "not a sweep directory made by `nanochat-bench submit`" in err


def test_status_of_a_sweeps_record_names_the_directory_to_give(capsys, tmp_path):
    """`status SWEEP/sweep.json` said "SWEEP/sweep.json/sweep.json does not exist: not a sweep directory", of a
    file that is the sweep's own record."""
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "sweep.json").write_text('{"jobs": []}')
    code, _, err = run_cli(["status", str(tmp_path / "s" / "sweep.json")], capsys)
    assert code == 1 and err == f"error: {tmp_path / 's' / 'sweep.json'}: a file, not a sweep directory; give the " \
                                f"directory that holds sweep.json ({tmp_path / 's'} holds this one)\n"


@pytest.mark.parametrize("flow", [[], ["--flow=speedrun", "--no-data-check"]])
def test_status_of_a_dry_run_says_so_and_gives_the_command_that_submits_it(flow, capsys, tmp_path, monkeypatch):
    """A flow's `submit --dry-run` directory was "not a sweep directory made by `nanochat-bench submit`" (its jobs'
    bookkeeping is one level down); every dry run's now says it is one, nothing submitted, and the command that
    submits it there, which does."""
    from bench.launch import slurm

    class Cluster:
        def submit(self, script, exclude=()):
            return "7"

    monkeypatch.setattr(slurm, "SlurmCLI", Cluster)
    sweep = tmp_path / "s"
    argv = ["submit", *flow, "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}"]
    assert run_cli([*argv, "--dry-run", "--out", str(sweep)], capsys)[0] == 0
    code, _, err = run_cli(["status", str(sweep)], capsys)
    assert code == 1 and f"{sweep} holds the jobs of `submit --dry-run`, and nothing was submitted" in err
    command = err.split("submit them with: ", 1)[1].strip()
    assert command == f"cd {shlex.quote(os.getcwd())} && nanochat-bench {shlex.join([*argv, '--out', str(sweep)])}"
    assert run_cli(shlex.split(command.split(" && nanochat-bench ", 1)[1]), capsys)[0] == 0
    assert json.loads((sweep / "sweep.json").read_text())["jobs"][0]["job_id"] == "7"
    assert not (sweep / "dry-run.json").exists()


def test_a_job_sharing_its_nodes_says_its_ranks_get_only_slurms_default_cpus(capsys, tmp_path):
    """--no-exclusive jobs ask for no CPUs; where a partition gives one CPU a task, torchrun and every rank share
    it and the timings are slow without a word. The note says so; an exclusive job has none."""
    argv = ["submit", "--dry-run", "--nodes=1", "--runtimes=bare", *TINY, f"--base-dir={tmp_path}"]
    code, out, _ = run_cli([*argv, "--no-exclusive", "--out", str(tmp_path / "s")], capsys)
    assert code == 0 and "note: --no-exclusive: CPU ranks ask for no CPUs of their own" in out
    code, out, _ = run_cli([*argv, "--out", str(tmp_path / "t")], capsys)
    assert code == 0 and "--no-exclusive" not in out


def test_a_gpu_job_sharing_its_nodes_asks_for_its_gpus_share_of_the_cpus(capsys, tmp_path):
    """--no-exclusive GPU jobs asked for no CPUs: on a shared node Slurm gave one CPU a task, which torchrun, the
    ranks' data loaders and NCCL's threads shared. Now the site's share (alps: 72 a GH200) or --cpus-per-gpu is
    asked for the node's one task; without either the job is refused, naming both."""
    argv = ["render", "sbatch", "--nodes=1", "--row-groups=100", "--shards=100", "--no-data-check", "--no-exclusive"]

    def directives(*extra):
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        code, _, err = run_cli([*argv, *extra, "--out", str(out)], capsys)
        assert code == 0, err
        return [ln for ln in (out / "n1-bare-r1" / "job.sbatch").read_text().splitlines() if ln.startswith("#SBATCH")]

    assert "#SBATCH --cpus-per-task=288" in directives("--site=alps")
    assert "#SBATCH --cpus-per-task=32" in directives("--site=alps", "--cpus-per-gpu=8")
    assert "#SBATCH --cpus-per-task=16" in directives("--gpus-per-node=2", "--cpus-per-gpu=8")
    code, _, err = run_cli([*argv, "--out", str(tmp_path / "x")], capsys)
    assert code == 1 and "--no-exclusive" in err and "give --cpus-per-gpu N" in err and "cpus_per_gpu" in err
    code, _, err = run_cli([*argv[:-1], "--site=alps", "--cpus-per-gpu=8", "--out", str(tmp_path / "y")], capsys)
    assert code == 1 and "--cpus-per-gpu 8: it has no effect without --no-exclusive" in err, err
    assert "> 0" not in err  # 8 is a valid count: the refusal said to give one > 0
    code, _, err = run_cli([*argv, "--device_type=cpu", "--cpus-per-gpu=8", "--out", str(tmp_path / "z")], capsys)
    assert code == 1 and "--cpus-per-gpu 8: it has no effect on CPU ranks" in err, err
    code, _, err = run_cli([*argv, "--cpus-per-gpu=0", "--out", str(tmp_path / "w")], capsys)
    assert code == 1 and "--cpus-per-gpu 0: give a number of CPUs > 0" in err, err


def run_without_torch(*commands: list[str]) -> None:
    """Each CLI command in one process where `import torch` fails, as on a login node without it; each exits 0."""
    code = ("import sys; sys.modules['torch'] = None; from bench.cli import main; "
            + "; ".join(f"assert main({argv!r}) == 0, {argv!r}" for argv in commands))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_planning_a_sweep_on_a_login_node_never_imports_torch(tmp_path):
    """plan, render and submit --dry-run of a pre-training sweep size the model, pick K and render the jobs with
    torch unimportable: on a login node torch costs seconds to import, when it is there at all."""
    argv = ["--site", "alps", "--nodes", "32", "--row-groups", "100", "--shards", "100"]
    run_without_torch(["plan", *argv], ["render", "sbatch", *argv, "--out", f"{tmp_path}/r"],
                      ["submit", "--dry-run", *argv, "--runtimes", "bare,apptainer", "--out", f"{tmp_path}/s",
                       "--image", "apptainer=docker://x/y:1"])
    assert "--device_batch_size=16" in (tmp_path / "r" / "n32-bare-r1" / "job.sbatch").read_text()


def test_planning_a_flow_on_a_login_node_never_imports_torch(tmp_path):
    """plan, render and submit --dry-run --flow speedrun imported torch through base_loss's and base_eval's
    settings, which lived in their trainer modules: a minute on a slow shared filesystem, or no plan at all."""
    argv = ["--flow", "speedrun", "--site", "alps", "--nodes", "1", "--row-groups", "100", "--shards", "100"]
    unstaged = [*argv, "--no-data-check"]
    run_without_torch(["plan", *argv], ["render", "sbatch", *unstaged, "--out", f"{tmp_path}/r"],
                      ["render", "interactive", *unstaged, "--out", f"{tmp_path}/i"],
                      ["submit", "--dry-run", *unstaged, "--out", f"{tmp_path}/s"])
    assert "-m bench.nanochat.base_loss" in (tmp_path / "r" / "n1-bare-r1" / "job.sbatch").read_text()


@pytest.mark.parametrize("command", [["render", "sbatch"], ["submit", "--dry-run"]])
def test_the_printed_cd_line_pastes_into_a_shell_for_a_directory_with_a_space_or_dollar(command, capsys, tmp_path):
    out_dir = tmp_path / "my runs $HOME"
    code, out, _ = run_cli([*command, *TINY, "--out", str(out_dir), "--base-dir", str(tmp_path / "base")], capsys)
    assert code == 0
    line = next(ln for ln in out.splitlines() if " cd " in ln)
    pasted = line.split(": ", 1)[1].split(" && ")[0] + " && pwd"
    done = subprocess.run(["bash", "-c", pasted], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == str(out_dir / "n1-bare-r1"), done.stderr


def test_plan_says_what_cpus_a_job_sharing_its_nodes_would_ask_for(capsys):
    """plan said nothing of the CPUs a --no-exclusive GPU job asks (its GPUs' share since render and submit ask
    one), nor that one without a share is refused. Now it names the --cpus-per-task render would write, or what
    is missing; CPU ranks ask for none, and plan says nothing of them."""
    argv = ["plan", "--nodes=1,32", "--row-groups=100", "--shards=100"]
    code, out, _ = run_cli([*argv, "--site=alps", "--gpus-per-node=1"], capsys)
    assert code == 0 and "--no-exclusive jobs (render, submit) ask each node for --cpus-per-task=72:" in out
    code, out, _ = run_cli([*argv, "--site=test-cluster"], capsys)
    assert code == 0 and "need --cpus-per-gpu N (site profile test-cluster" in out
    code, out, _ = run_cli([*argv, "--site=alps", "--device_type=cpu"], capsys)
    assert code == 0 and "--no-exclusive" not in out


@pytest.mark.parametrize("site", ["--site=alps", "--site=test-cluster", "--nodes=1"])
def test_plan_of_a_gpu_sweep_says_one_line_of_sharing_nodes(site, capsys):
    """plan of every GPU sweep printed two notes about --no-exclusive, a flag plan does not take and most sweeps
    never use: its CPUs and that its workers are not NUMA-bound. Now one line says what such a job would need;
    render and submit give the NUMA note where --no-exclusive is given."""
    code, out, _ = run_cli(["plan", "--nodes=1", "--row-groups=100", "--shards=100", site], capsys)
    assert code == 0 and len([ln for ln in out.splitlines() if "--no-exclusive" in ln]) == 1, out
    assert "NUMA" not in out


def test_a_cpu_share_over_what_a_node_of_the_site_has_is_refused_naming_the_most_it_takes(capsys, tmp_path):
    """--site alps --no-exclusive --cpus-per-gpu 100 rendered --cpus-per-task=400 for a node of 288 CPUs (72 a
    GH200), which sbatch refuses after the sweep was written; now it is refused here, naming 72. Fewer GPUs a node
    may each take more, up to the node's CPUs."""
    argv = ["render", "sbatch", "--site=alps", "--no-exclusive", "--row-groups=100", "--shards=100", "--no-data-check"]
    code, _, err = run_cli([*argv, "--cpus-per-gpu=73", "--out", str(tmp_path / "a")], capsys)
    assert code == 1 and "--cpus-per-gpu 73 x 4 GPU(s) a node asks 292 CPUs" in err and "give at most 72" in err
    code, _, err = run_cli([*argv, "--cpus-per-gpu=144", "--gpus-per-node=2", "--out", str(tmp_path / "b")], capsys)
    assert code == 0, err
    assert "#SBATCH --cpus-per-task=288" in (tmp_path / "b" / "n1-bare-r1" / "job.sbatch").read_text()


def test_slurms_own_constraint_syntax_reaches_the_directive(capsys, tmp_path):
    """--constraint '[gh200|a100]' (matching OR), 'gpu*2' (counts) and '(a|b)&c' were refused as "characters Slurm
    directives cannot take", which they are Slurm's own syntax for; now they are written as given, and a value
    that cannot go into a #SBATCH line (a space) is refused naming the characters that can."""
    argv = ["render", "sbatch", "--nodes=1", "--row-groups=100", "--shards=100", "--no-data-check"]
    for i, value in enumerate(("[gh200|a100]", "gpu*2", "(a|b)&c")):
        code, _, err = run_cli([*argv, f"--constraint={value}", "--out", str(tmp_path / str(i))], capsys)
        assert code == 0, err
        assert f"#SBATCH --constraint={value}\n" in (tmp_path / str(i) / "n1-bare-r1" / "job.sbatch").read_text()
    code, _, err = run_cli([*argv, "--constraint=a b", "--out", str(tmp_path / "x")], capsys)
    assert code == 1 and "--constraint 'a b' holds characters" in err and "digits and _.,:@%+=&|!/-[]()* only" in err
    assert not (tmp_path / "x").exists()


def test_a_job_sharing_its_nodes_binds_no_worker_to_a_numa_node_unless_asked(capsys, tmp_path):
    """--no-exclusive kept torchrun's default --numa-binding=node, but the share of CPUs Slurm gives such a job need
    not lie on its GPUs' NUMA nodes, where numactl fails every worker or crowds them onto the job's few CPUs there.
    Now a shared job binds none unless --numa-binding asks (render says so); an exclusive job still binds."""
    argv = ["render", "sbatch", "--nodes=1", "--row-groups=100", "--shards=100", "--no-data-check"]

    def binding(*extra):
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        code, stdout, err = run_cli([*argv, *extra, "--out", str(out)], capsys)
        assert code == 0, err
        return re.findall(r"--numa-binding=\w+", (out / "n1-bare-r1" / "job.sbatch").read_text()), stdout

    shared = ("--no-exclusive", "--cpus-per-gpu=8")
    found, out = binding()
    assert found == ["--numa-binding=node"] and "NUMA" not in out
    found, out = binding(*shared)
    assert found == [] and "--no-exclusive: workers are not bound to their GPUs' NUMA nodes" in out, out
    assert binding(*shared, "--numa-binding=socket")[0] == ["--numa-binding=socket"]
    assert "NUMA" not in binding(*shared, "--numa-binding=node")[1]


@pytest.mark.parametrize("command", [["render", "sbatch"], ["submit", "--dry-run"]])
def test_numa_binding_on_cpu_ranks_is_refused_as_cpus_per_gpu_is(command, capsys, tmp_path):
    """--numa-binding node on a CPU sweep was dropped without a word (only GPU workers are bound); now it is
    refused naming the flag, as --cpus-per-gpu on CPU ranks is. none, which binds nothing, still passes."""
    argv = [*command, *TINY, f"--base-dir={tmp_path / 'base'}"]
    code, _, err = run_cli([*argv, "--numa-binding=node", "--out", str(tmp_path / "a")], capsys)
    assert code == 1 and "--numa-binding node: it has no effect on CPU ranks" in err, err
    assert not (tmp_path / "a").exists()
    code, _, err = run_cli([*argv, "--numa-binding=none", "--out", str(tmp_path / "b")], capsys)
    assert code == 0, err


def test_an_empty_or_multi_line_allow_network_is_refused_and_a_name_in_any_case_is_kept(capsys, tmp_path):
    """--allow-network "" (an unset shell variable) rendered no NANOCHAT_BENCH_ALLOW_NET, so the gate let nothing
    through and the runs it was meant for stopped as wrong_network; a value over two lines went into the export.
    Now both are refused naming the flag; a name in another case is kept, the gate comparing without case."""
    argv = ["render", "sbatch", "--site=alps", "--nodes=2", "--row-groups=100", "--shards=100", "--no-data-check"]
    for i, value in enumerate(("", " ", "So\ncket")):
        code, _, err = run_cli([*argv, f"--allow-network={value}", "--out", str(tmp_path / str(i))], capsys)
        assert code == 1 and f"--allow-network {value!r}: give one network's name" in err, err
        assert not (tmp_path / str(i)).exists()
    code, _, err = run_cli([*argv, "--allow-network=socket", "--env=NCCL_NET=Socket", "--out", str(tmp_path / "ok")],
                           capsys)
    assert code == 0, err
    assert "NANOCHAT_BENCH_ALLOW_NET=socket\n" in (tmp_path / "ok" / "n2-bare-r1" / "job.sbatch").read_text()


@pytest.mark.parametrize("argv,flag", [
    (["submit", "--dry-run", *TINY], "--name"), (["render", "sbatch", *TINY], "--name"),
    (["submit", "--dry-run", *TINY], "--python"), (["speedrun"], "--python"), (["train"], "--python"),
    (["plan"], "--gpu"), (["data", "download", "-n", "1"], "--url"),
])
def test_an_empty_value_is_refused_not_taken_for_the_flag_left_out(argv, flag, capsys, tmp_path, monkeypatch):
    """`--name "$NAME"` with NAME unset named the sweep by the date; so --python '' ran this interpreter, --gpu ''
    estimated for the default GPU and --url '' downloaded from the default mirror. Now each is one error line
    naming the flag, before anything is written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path / "base"))
    code, out, err = run_cli([*argv, f"{flag}="], capsys)
    assert code == 1 and err.startswith(f"error: {flag} '': an empty value") and err.count("\n") == 1, err
    assert f"leave {flag} out for its default" in err and not out and not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv,why", [
    (["submit", "--dry-run", "--site=alps", "--nodes=2", *TINY], "CPU ranks talk over gloo"),
    (["submit", "--dry-run", "--flow=speedrun", "--site=alps", "--nodes=1", "--runtimes=bare", *TINY],
     "CPU ranks talk over gloo"),
    (["render", "sbatch", "--site=alps", "--nodes=1"], "every run is on one node"),
    (["render", "sbatch", "--nodes=2"], "without --site no network is expected between nodes"),
    (["render", "sbatch", "--site=test-cluster", "--nodes=2"], "site test-cluster gives no nccl_net"),
    (["render", "sbatch", "--site=alps", "--nodes=2", "--env=NANOCHAT_BENCH_EXPECT_NET="],
     "--env NANOCHAT_BENCH_EXPECT_NET= unsets the network site alps expects"),
])
def test_allow_network_where_the_gate_judges_no_run_is_refused(argv, why, capsys, tmp_path, monkeypatch):
    """--allow-network on a sweep the network gate never judges (CPU ranks, one node, no network expected) was taken
    and did nothing, so a user who meant to measure another network learnt nothing of it; now it is refused naming
    the flag and why, before anything is written."""
    monkeypatch.delenv("NANOCHAT_BENCH_SITE", raising=False)
    code, _, err = run_cli([*argv, "--row-groups=100", "--shards=100", "--no-data-check",
                            f"--base-dir={tmp_path / 'base'}", "--allow-network=Socket",
                            "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and "--allow-network Socket: it has no effect here" in err and why in err, err
    assert not (tmp_path / "s").exists()


def test_allow_network_against_the_network_nccl_net_forces_is_refused(capsys, tmp_path, monkeypatch):
    """On alps every GPU job forces NCCL_NET="AWS Libfabric", so NCCL takes the plugin or fails and never Socket:
    --allow-network Socket was taken, and the runs measured Slingshot as if sockets had been asked. Now it is refused,
    naming NCCL_NET and the --env that makes NCCL take sockets; with that --env, or on a site forcing none, it
    passes."""
    monkeypatch.delenv("NANOCHAT_BENCH_SITE", raising=False)
    argv = ["render", "compare", "--nodes=2", "--runtimes=bare,ce", "--image=ce=nvcr.io#nvidia/pytorch:25.10-py3",
            "--row-groups=100", "--shards=100", "--no-data-check", "--allow-network=Socket"]
    code, _, err = run_cli([*argv, "--site=alps", "--out", str(tmp_path / "a")], capsys)
    assert code == 1 and "--allow-network Socket: it has no effect here: NCCL_NET='AWS Libfabric'" in err, err
    assert "the set-up of site alps" in err and "pass --env=NCCL_NET=Socket" in err and not (tmp_path / "a").exists()
    code, _, err = run_cli([*argv, "--site=alps", "--env=NCCL_NET=IB", "--out", str(tmp_path / "b")], capsys)
    assert code == 1 and "NCCL_NET='IB' (--env)" in err, err
    for i, extra in enumerate((["--site=alps", "--env=NCCL_NET=Socket"], ["--site=alps", "--env=NCCL_NET="],
                               ["--site=infiniband"])):
        code, _, err = run_cli([*argv, *extra, "--out", str(tmp_path / f"ok{i}")], capsys)
        assert code == 0, err
        script = (tmp_path / f"ok{i}" / "jobs" / "compare-n2" / "job.sbatch").read_text()
        assert "NANOCHAT_BENCH_ALLOW_NET=Socket\n" in script


def test_nccl_net_forced_away_from_the_expected_network_without_allow_network_is_refused(capsys, tmp_path,
                                                                                         monkeypatch):
    """--env NCCL_NET=Socket on alps made NCCL take sockets between nodes while the gate expected AWS Libfabric, so
    every multi-node run stopped as wrong_network once its nodes were allocated; now it is refused naming the flag
    that lets the network through. With --allow-network, on one node, or with the expected network, it passes."""
    monkeypatch.delenv("NANOCHAT_BENCH_SITE", raising=False)
    argv = ["render", "sbatch", "--site=alps", "--row-groups=100", "--shards=100", "--no-data-check"]
    code, _, err = run_cli([*argv, "--nodes=2", "--env=NCCL_NET=Socket", "--out", str(tmp_path / "a")], capsys)
    assert code == 1 and err.count("\n") == 1 and "--env NCCL_NET=Socket" in err and "wrong_network" in err, err
    assert "--allow-network Socket" in err and not (tmp_path / "a").exists()
    for i, extra in enumerate((["--nodes=2", "--allow-network=Socket"], ["--nodes=1"], ["--nodes=2"])):
        net = "AWS Libfabric" if i == 2 else "Socket"
        code, _, err = run_cli([*argv, *extra, f"--env=NCCL_NET={net}", "--out", str(tmp_path / f"ok{i}")], capsys)
        assert code == 0, err


@pytest.mark.parametrize("command", [["submit", "--dry-run"], ["render", "sbatch"]])
@pytest.mark.parametrize("env, why", [
    ("NANOCHAT_BENCH_RUN_DIR=/shared", "each run's own directory, which its job sets (all runs would write into one)"),
    ("NANOCHAT_BASE_DIR=/data", "is the one whose staged data is checked; give --base-dir /data instead"),
    ("NANOCHAT_BENCH_RUNTIME=ce", "the runtime each run records, set from --runtimes"),
    ("NANOCHAT_BENCH_T0=0", "the launch time each run measures its start-up from")])
def test_env_may_not_replace_what_the_launch_sets_for_each_run(command, env, why, capsys, tmp_path):
    """--env is exported after the launch's own variables: NANOCHAT_BENCH_RUN_DIR sent every run of the sweep into
    one directory (their run directories stayed empty for status and collect), NANOCHAT_BASE_DIR had the runs read
    another directory than the --base-dir whose data was checked, and the runtime and T0 were recorded wrong."""
    code, _, err = run_cli([*command, *TINY, "--no-data-check", "--row-groups=8", "--shards=4", "--env", env,
                            "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and err.startswith(f"error: --env {env.split('=')[0]}=") and why in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("env, why", [
    ("NANOCHAT_VAL_FILES_K=abc", "the last shard files kept for validation, a whole number >= 1"),
    ("NANOCHAT_VAL_FILES_K=0", "the last shard files kept for validation, a whole number >= 1"),
    ("NANOCHAT_FORCE_FLASH_SDPA=ture", "give 1/true/yes/on to force flash SDPA, 0/false/no/off not to")])
def test_env_of_a_value_the_runs_cannot_read_is_refused_before_anything_is_written(env, why, capsys, tmp_path):
    # each job was submitted, to stop at its start on its node (no_data; or a run's failure once read there)
    code, _, err = run_cli(["submit", "--dry-run", *TINY, "--no-data-check", "--row-groups=8", "--shards=4",
                            "--env", env, "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and err.startswith(f"error: --env {env.split('=')[0]}=") and why in err
    assert not (tmp_path / "s").exists()


def test_env_may_unset_or_give_a_readable_val_files_k_and_force_flash(capsys, tmp_path):
    argv = ["submit", "--dry-run", *TINY, "--no-data-check", "--row-groups=8", "--shards=4"]
    for n, env in enumerate(["NANOCHAT_VAL_FILES_K=2", "NANOCHAT_FORCE_FLASH_SDPA=on", "NANOCHAT_VAL_FILES_K="]):
        assert run_cli([*argv, "--env", env, "--out", str(tmp_path / f"s{n}")], capsys)[0] == 0


def test_allow_network_passes_where_env_alone_sets_the_gate(capsys, tmp_path, monkeypatch):
    """Without a site, --env NANOCHAT_BENCH_EXPECT_NET=IB turns the gate on, and --allow-network goes with it."""
    monkeypatch.delenv("NANOCHAT_BENCH_SITE", raising=False)
    code, _, err = run_cli(["render", "sbatch", "--nodes=2", "--row-groups=100", "--shards=100", "--no-data-check",
                            "--env=NANOCHAT_BENCH_EXPECT_NET=IB", "--allow-network=Socket",
                            "--out", str(tmp_path / "ok")], capsys)
    assert code == 0, err
    assert "NANOCHAT_BENCH_ALLOW_NET=Socket\n" in (tmp_path / "ok" / "n2-bare-r1" / "job.sbatch").read_text()


def test_a_cpu_share_no_node_can_hold_is_refused_without_a_site_profile(capsys, tmp_path):
    """--no-exclusive --cpus-per-gpu 100000 with no site profile rendered --cpus-per-task=400000, which sbatch
    refuses only after the sweep was written; now a share over MAX_NODE_CPUS a node is refused, naming the most."""
    from bench.launch.job import MAX_NODE_CPUS

    argv = ["render", "sbatch", "--no-exclusive", "--row-groups=100", "--shards=100", "--no-data-check"]
    code, out, err = run_cli([*argv, "--cpus-per-gpu=100000", "--out", str(tmp_path / "a")], capsys)
    assert code == 1 and "--cpus-per-gpu 100000 x 4 GPU(s) a node asks 400000 CPUs" in err, err
    assert f"give at most {MAX_NODE_CPUS // 4}" in err and not (tmp_path / "a").exists()
    code, _, err = run_cli([*argv, "--cpus-per-gpu=72", "--out", str(tmp_path / "b")], capsys)
    assert code == 0, err


def test_submit_refuses_a_cpu_share_over_what_the_partitions_nodes_have_before_writing(capsys, tmp_path, monkeypatch):
    """Where sinfo gives the partition's nodes' CPUs, a share over them is refused before the sweep is written (sbatch
    would refuse every job after it); a share that fits is submitted."""
    from bench.launch import slurm

    class Cluster:
        submitted, asked = [], []

        def partitions(self):
            return ["debug", "normal"]

        def node_cpus(self, partition, constraint=None):
            self.asked.append(partition)
            return 64

        def submit(self, script, exclude=()):
            self.submitted.append(script)
            return "1"

    monkeypatch.setattr(slurm, "SlurmCLI", Cluster)
    argv = ["submit", "--nodes=1", "--runtimes=bare", "--no-exclusive", "--partition=debug", "--row-groups=100",
            "--shards=100", "--no-data-check", f"--base-dir={tmp_path}"]
    code, out, err = run_cli([*argv, "--cpus-per-gpu=17", "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and "asks 68 CPUs, but no node of partition debug has more than 64 (sinfo)" in err, err
    assert "give at most 16" in err and not (tmp_path / "s").exists() and Cluster.submitted == []
    assert run_cli([*argv, "--cpus-per-gpu=16", "--out", str(tmp_path / "t")], capsys)[0] == 0
    assert Cluster.asked == ["debug", "debug"] and len(Cluster.submitted) == 1


def test_submit_refuses_a_constraint_no_node_of_the_partition_has_before_writing(capsys, tmp_path, monkeypatch):
    """--constraint h100 on a partition of a100 and gh200 nodes was written into every job, and sbatch refused each
    ("Requested node configuration is not available") after the sweep directory existed. Now, where sinfo lists the
    nodes' features, it is refused first, naming the partition and the features its nodes have; a constraint some
    node satisfies, or one in a form not read here, is submitted as before."""
    from bench.launch import slurm

    sinfo = "288 x86,a100\n72 gh200\n72 (null)\n"
    submitted = []

    def fake(argv, cwd=None):
        if argv[0] == "sbatch":
            submitted.append(argv)
            return subprocess.CompletedProcess(argv, 0, stdout="42\n")
        return subprocess.CompletedProcess(argv, 0, stdout="normal\n" if "%R" in argv else sinfo)

    monkeypatch.setattr(slurm, "_run", fake)
    argv = ["submit", "--nodes=1", "--runtimes=bare", "--partition=normal", "--row-groups=100", "--shards=100",
            "--no-data-check", f"--base-dir={tmp_path}"]
    for i, constraint in enumerate(("h100", "gh200&a100", "h100|v100")):
        code, out, err = run_cli([*argv, f"--constraint={constraint}", "--out", str(tmp_path / str(i))], capsys)
        assert code == 1 and out == "" and err == (f"error: --constraint {constraint}: no node of partition normal has "
                                                   f"the features it asks for, so sbatch would refuse every job; its "
                                                   f"nodes have: a100, gh200, x86 (sinfo)\n"), err
        assert not (tmp_path / str(i)).exists() and submitted == []
    for i, constraint in enumerate(("gh200", "gh200|h100", "[h100*2]")):
        code, _, err = run_cli([*argv, f"--constraint={constraint}", "--out", str(tmp_path / f"ok{i}")], capsys)
        assert code == 0, err
    assert len(submitted) == 3


def test_submit_bounds_a_cpu_share_by_the_nodes_the_constraint_selects(capsys, tmp_path, monkeypatch):
    """submit checked --cpus-per-gpu against the partition's largest node whatever --constraint chose, so a share
    only other nodes could hold was submitted and refused by sbatch. Now the bound is of the nodes the constraint
    selects, and a constraint it cannot read is named in the message as not considered."""
    from bench.launch import slurm

    sinfo = "288 x86,a100\n72 gh200\n"
    monkeypatch.setattr(slurm, "_run", lambda argv, cwd=None: subprocess.CompletedProcess(
        argv, 0, stdout="normal\n" if "%R" in argv else sinfo))
    argv = ["submit", "--nodes=1", "--runtimes=bare", "--no-exclusive", "--partition=normal", "--row-groups=100",
            "--shards=100", "--no-data-check", f"--base-dir={tmp_path}", "--cpus-per-gpu=40"]
    code, _, err = run_cli([*argv, "--constraint=gh200", "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and "no node of partition normal with --constraint gh200 has more than 72 (sinfo)" in err, err
    assert "give at most 18" in err and not (tmp_path / "s").exists()
    code, _, err = run_cli([*argv, "--cpus-per-gpu=100", "--constraint=gh200&arm|x86", "--out", str(tmp_path / "t")],
                           capsys)
    assert code == 1 and "more than 288 (sinfo; --constraint gh200&arm|x86 was not considered" in err, err


def test_a_base_dir_not_visible_here_is_not_refused_for_its_ancestors_filesystem(capsys, tmp_path):
    """`--base-dir /capstor/...` rendered on a host without /capstor was judged by `/`'s local disk, and every
    multi-node stage after pre-training was refused; it is now planned and rendered with a note that it was not
    checked, and a base directory this host has on its local disk is refused as before."""
    unseen = tmp_path / "on-the-nodes"
    argv = ["--flow=speedrun", "--runtimes=bare", *TINY, f"--base-dir={unseen}"]
    note = f"note: --base-dir {unseen} is not visible here, so whether the nodes of a multi-node point share it"
    code, out, _ = run_cli(["plan", "--nodes=1,2", *argv], capsys)
    assert code == 0 and "impossible" not in out and note in out
    code, out, err = run_cli(["render", "sbatch", "--nodes=2", *argv, "--no-data-check", "--out", str(tmp_path / "r")],
                             capsys)
    assert code == 0 and note in out and (tmp_path / "r" / "n2-bare-r1" / "job.sbatch").is_file(), err
    code, out, _ = run_cli(["plan", "--nodes=1", *argv], capsys)  # one node: nothing to share
    assert code == 0 and "not visible" not in out
    unseen.mkdir()
    code, out, _ = run_cli(["plan", "--nodes=1,2", *argv], capsys)
    assert code == 0 and f"impossible: NANOCHAT_BASE_DIR {unseen} is on " in out and "not visible" not in out


def test_render_compare_split_by_the_partition_writes_every_part(capsys, tmp_path, monkeypatch):
    """A comparison over the partition's time limit is split into jobs that fit (as submit --compare does), but
    render compare unpacked assemble's jobs as one and ended in a ValueError traceback, writing nothing; now it
    writes every part and says how to submit each."""
    monkeypatch.delenv("NANOCHAT_BENCH_SITE", raising=False)
    out_dir = tmp_path / "cmp"
    code, out, err = run_cli(["render", "compare", "--site=alps", "--partition=debug", "--nodes=2", "--runtimes=bare",
                              "--repeats=3", "--row-groups=100", "--shards=100", "--no-data-check",
                              "--out", str(out_dir)], capsys)
    assert code == 0, err
    assert "is split into 3 jobs" in out
    for i in (1, 2, 3):
        script = out_dir / "jobs" / f"compare-n2-part{i}" / "job.sbatch"
        assert script.is_file() and f"submit with: cd {script.parent} && sbatch job.sbatch" in out


@pytest.mark.parametrize("flag", ["partition", "account", "constraint"])
def test_an_empty_slurm_directive_value_is_called_empty(flag, capsys, tmp_path):
    """--partition "" (an unset shell variable) was refused as holding "characters Slurm directives cannot take",
    naming no character; now the line says the value is empty and that the flag can be left out."""
    argv = ["render", "sbatch", "--nodes=1", "--row-groups=100", "--shards=100", "--no-data-check"]
    code, out, err = run_cli([*argv, f"--{flag}=", "--out", str(tmp_path / "x")], capsys)
    assert code == 1 and out == ""
    assert err == f"error: --{flag} '' is empty: give a value, or leave the flag out\n"
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("command", [["submit", "--dry-run"], ["render", "sbatch"], ["render", "compare"],
                                     ["submit", "--dry-run", "--flow=speedrun", "--stages=base_train"],
                                     ["render", "interactive"],
                                     ["render", "interactive", "--flow=speedrun", "--stages=base_train"]])
def test_a_shells_val_files_k_the_job_exports_over_is_noted(command, capsys, tmp_path, monkeypatch):
    """The job's script exports the plan's NANOCHAT_VAL_FILES_K over the one sbatch carries from the submitting
    shell: a different one exported there was dropped without a word, as speedrun's note now says for its stages.
    The interactive guide's runs export it over the one its salloc shell has from this shell alike."""
    argv = [*command, "--nodes=1", "--gpus-per-node=2", "--runtimes=bare", "--row-groups=1", "--shards=8",
            f"--base-dir={tmp_path}", "--no-data-check"]
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "5")
    code, out, err = run_cli([*argv, "--out", str(tmp_path / "other")], capsys)
    assert code == 0, err
    who = "the stages run" if "--flow=speedrun" in command else "the runs start"
    how = "the guide exports it over the one its salloc shell takes" if "interactive" in command else \
        "the job's script exports it over the one sbatch carries"
    assert [line for line in out.splitlines() if "NANOCHAT_VAL_FILES_K" in line] == [
        f"note: NANOCHAT_VAL_FILES_K=5 of this environment is not used: {who} with the plan's "
        f"NANOCHAT_VAL_FILES_K=2, chosen for 2 rank(s) from 8 shard(s) of 1 row groups (given), as {how} "
        f"from this shell"]
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "2")  # the plan's own: nothing to say
    code, out, err = run_cli([*argv, "--out", str(tmp_path / "same")], capsys)
    assert code == 0 and "NANOCHAT_VAL_FILES_K" not in out, err
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "5")  # --env's K is what the runs get, as the user asked
    code, out, err = run_cli([*argv, "--env=NANOCHAT_VAL_FILES_K=3", "--out", str(tmp_path / "env")], capsys)
    assert code == 0 and "NANOCHAT_VAL_FILES_K" not in out, err


def test_a_base_directory_from_the_environment_that_is_a_file_is_named_so(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", "/etc/passwd")
    code, _, err = run_cli(["render", "sbatch", "--out", str(tmp_path / "s")], capsys)
    assert code == 1 and err.startswith("error: NANOCHAT_BASE_DIR /etc/passwd: a file, not a directory")
    assert not (tmp_path / "s").exists()
