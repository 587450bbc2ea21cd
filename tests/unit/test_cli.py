"""The command line itself (bench/cli.py): every command explains itself, a closed pipe ends quietly,
bad counts are refused by name.

    python -m pytest tests/unit/test_cli.py -q
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import cli


def commands(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from commands(sub, (*prefix, name))


def test_every_command_has_a_help_description():
    missing = [" ".join(name) for name, sub in commands(cli.build_parser()) if not sub.description]
    assert not missing, f"commands without a --help description: {missing}"
    described = dict(commands(cli.build_parser()))
    assert described[("data", "info")].description.startswith("List the shards")


def test_output_into_a_closed_pipe_ends_without_a_traceback():
    # `true` exits at once, so the first write meets a pipe with no reader (EPIPE), as `| head` does later
    r = subprocess.run(f"{sys.executable} -m bench.cli plan --nodes 1,2 | true; exit ${{PIPESTATUS[0]}}",
                       shell=True, executable="/bin/bash", capture_output=True, text=True)
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr
    assert r.returncode == 141


@pytest.mark.parametrize("argv", [["train", "--nproc", "0", "--", "--depth=2"], ["smoke", "--nproc", "0"]])
def test_zero_processes_is_refused(argv, capsys):
    assert cli.main(argv) == 1
    assert "--nproc 0: must be >= 1" in capsys.readouterr().err


def test_a_smoke_base_dir_it_cannot_use_is_one_error_naming_base_dir(tmp_path):
    """A --base-dir that was a file (or could not be made) ended smoke in a FileExistsError traceback, and shards of
    other settings there were refused with "pass --overwrite ... or set NANOCHAT_BASE_DIR", which smoke ignores for
    the data (its --overwrite is the run's, and --base-dir sets NANOCHAT_BASE_DIR); the shards stay untouched."""
    from bench.nanochat import dataset

    (tmp_path / "file").write_text("kept")
    other = tmp_path / "other"
    dataset.generate_shards(4, 16, 8, out_dir=other / "base_data")
    before = {p.name: p.read_bytes() for p in (other / "base_data").iterdir()}
    for base, expected in ((tmp_path / "file", "cannot be made: a file of that name is in the way"),
                           (tmp_path / "file" / "sub", f"cannot be made: {tmp_path / 'file'} is a file in the way"),
                           (other, "generating would replace them; give smoke another --base-dir")):
        r = subprocess.run([sys.executable, "-m", "bench.cli", "smoke", "--base-dir", str(base), "--overwrite",
                            "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        [line] = r.stderr.splitlines()
        assert line.startswith("error: ") and expected in line and "NANOCHAT_BASE_DIR" not in line, line
        assert "--overwrite" not in line and (str(base) in line), line
    assert {p.name: p.read_bytes() for p in (other / "base_data").iterdir()} == before
    assert (tmp_path / "file").read_text() == "kept" and not (tmp_path / "run").exists()


def test_smokes_errors_advise_what_smoke_takes(tmp_path):
    """A tokenizer smoke cannot write sent its user to NANOCHAT_BASE_DIR and `tokenizer train` (smoke sets the one from
    --base-dir and trains the other itself), and a --run-dir holding a run to `train -- --resume_from_step`."""
    def smoke(base, run_dir):
        r = subprocess.run([sys.executable, "-m", "bench.cli", "smoke", "--base-dir", str(base), "--run-dir",
                            str(run_dir)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        return r.stderr.strip().splitlines()[-1]

    (tmp_path / "base" / "tokenizer").mkdir(parents=True)
    (tmp_path / "base" / "tokenizer" / "tokenizer.pkl").mkdir()  # in the way of the tokenizer's rename
    line = smoke(tmp_path / "base", tmp_path / "run")
    assert line.startswith(f"error: cannot write the tokenizer into {tmp_path / 'base' / 'tokenizer'}: "), line
    assert line.endswith(f"give smoke another --base-dir (not {tmp_path / 'base'})") and "NANOCHAT" not in line, line
    (tmp_path / "base" / "tokenizer" / "tokenizer.pkl").rmdir()
    (tmp_path / "ran").mkdir()
    (tmp_path / "ran" / "metrics.jsonl").write_text('{"event": "start"}\n')
    line = smoke(tmp_path / "base", tmp_path / "ran")
    assert "already holds a run" in line and "--overwrite" in line and "resume_from_step" not in line, line


def test_a_smoke_run_dir_the_run_would_refuse_is_refused_before_the_data_is_made(tmp_path, monkeypatch, capsys):
    """A --run-dir that was a file (or below one), or that held a run, without --overwrite, was refused only once
    smoke had generated its shards and trained its tokenizer; then only after it had made --base-dir."""
    from bench.commands import workload

    monkeypatch.setattr(workload, "prepare_smoke_data", lambda base: pytest.fail("smoke data generated"))
    (tmp_path / "file").write_text("kept")
    (tmp_path / "ran").mkdir()
    (tmp_path / "ran" / "metrics.jsonl").write_text('{"event": "start"}\n')
    for run_dir, expected in (
            (tmp_path / "file", f"the run directory {tmp_path / 'file'} cannot be written: a file of that name is in "
                                "the way, not a directory"),
            (tmp_path / "file" / "run", f"the run directory {tmp_path / 'file' / 'run'} cannot be written: "
                                        f"{tmp_path / 'file'} is a file in the way, not a directory"),
            (tmp_path / "ran", f"{tmp_path / 'ran'} already holds a run (its metrics.jsonl has events); give a new "
                               "--run-dir or start it afresh with --overwrite (the old run's files are deleted)")):
        assert cli.main(["smoke", "--base-dir", str(tmp_path / "base"), "--run-dir", str(run_dir)]) == 1
        assert capsys.readouterr().err == f"error: {expected}\n"
    assert (tmp_path / "file").read_text() == "kept" and sorted(p.name for p in (tmp_path / "ran").iterdir()) == \
        ["metrics.jsonl"]
    assert not (tmp_path / "base").exists()
    with pytest.raises(pytest.fail.Exception, match="smoke data generated"):  # --overwrite: the run empties it
        cli.main(["smoke", "--base-dir", str(tmp_path / "base"), "--run-dir", str(tmp_path / "ran"), "--overwrite"])


def test_a_preflight_json_that_cannot_be_written_is_refused_before_any_rank_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("torchrun started"))
    (tmp_path / "file").write_text("kept")
    # /proc: its directory's W_OK says yes (to root as to the owner of a read-only mount), yet no file is made there
    for path in (tmp_path, tmp_path / "file" / "x.json", tmp_path / "missing" / "x.json", Path("/proc/x.json")):
        assert cli.main(["preflight", "--nproc", "1", "--json", str(path)]) == 1
        assert capsys.readouterr().err.startswith(f"error: --json {path}: cannot be written: ")
    assert (tmp_path / "file").read_text() == "kept"
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    assert cli.main(["preflight", "--nproc", "1", "--json", str(tmp_path / "x.json")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the trial file is gone


@pytest.mark.parametrize("mib", ["0", "-1"])
def test_a_preflight_buffer_of_no_size_is_refused_not_read_as_the_default(mib, monkeypatch, capsys):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("torchrun started"))
    assert cli.main(["preflight", "--nproc", "1", "--max-mib", mib]) == 1
    assert capsys.readouterr().err == f"error: --max-mib {mib}: must be >= 1 (MiB; default: 1024 on GPU, 4 on CPU)\n"
    from bench.nanochat import preflight

    with pytest.raises(SystemExit):  # alone under torchrun too, and its help says what CPU_SIZES holds
        preflight.main(["--max-mib", mib])
    assert "--max-mib: must be >= 1" in capsys.readouterr().err


def test_the_preflight_module_alone_takes_no_abbreviated_flag(capsys):
    # python -m bench.nanochat.preflight --max 0 was read as --max-mib 0, as no nanochat-bench command reads it
    from bench.nanochat import preflight

    with pytest.raises(SystemExit) as e:
        preflight.main(["--max", "0"])
    assert e.value.code == 2 and "unrecognized arguments: --max 0" in capsys.readouterr().err


def test_a_ctrl_c_while_the_commands_load_is_one_line(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt  # as a Ctrl-C during the seconds torch takes to import
    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["train"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_the_help_of_local_commands_does_not_speak_of_jobs_sweeps_or_minutes():
    """speedrun's --help took submit's words (the tokenizer "trained once per sweep", "one job each") for a run on
    this machine, and smoke's said "minutes" for a run of seconds (README: 13 s from a fresh clone)."""
    described = dict(commands(cli.build_parser()))
    speedrun = " ".join(described[("speedrun",)].format_help().split())
    assert "once per sweep" not in speedrun and "one job each" not in speedrun
    assert "trained before the first stage" in speedrun and "one job each" in " ".join(
        described[("submit",)].format_help().split())
    smoke = described[("smoke",)].description
    assert "minutes" not in smoke and "seconds" in smoke


@pytest.mark.parametrize("argv, fixed", [
    (["train", "--nproc", "2", "--depth=2"], "nanochat-bench train --nproc 2 -- --depth=2"),
    (["train", "--depth", "2", "--run-dir", "r"], "nanochat-bench train --run-dir r -- --depth 2"),
    (["train", "--depth=2", "--", "--num_iterations=3"], "nanochat-bench train -- --depth=2 --num_iterations=3")])
def test_trainer_flags_before_the_dashes_are_refused_with_the_command_as_it_should_be(argv, fixed, capsys):
    # argparse said only "unrecognized arguments: --depth=2", with no word that the trainer's flags follow --
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"; trainer flags go after --: {fixed}")


@pytest.mark.parametrize("argv, close", [
    (["train", "--run_dir", "r", "--", "--depth=2"], "--run-dir"), (["train", "--nprc", "2"], "--nproc"),
    (["train", "--ovewrite", "--", "--depth=2"], "--overwrite")])
def test_a_misspelt_flag_of_train_itself_is_named_not_moved_after_the_dashes(argv, close, capsys):
    # the hint moved --run_dir after --, where the trainer refuses it too, instead of naming --run-dir
    with pytest.raises(SystemExit):
        cli.main(argv)
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.endswith(f"(did you mean {close}?)") and "go after --" not in last


@pytest.mark.parametrize("argv", [["train", "--run=d20", "--", "--depth=2"], ["speedrun", "--run=d20"]])
def test_the_trainers_run_name_is_not_taken_for_run_dir(argv, capsys, monkeypatch):
    # argparse took nanochat's --run=d20 for an abbreviation of --run-dir: the run directory was ./d20, unsaid
    from bench.commands import launch, workload

    for module, name in ((workload, "cmd_train"), (launch, "cmd_speedrun")):  # nothing trains if it were taken
        monkeypatch.setattr(module, name, lambda args: pytest.fail(f"run directory {args.run_dir}"))
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2 and "unrecognized arguments: --run=d20" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["plan", "--run", "d20"], ["submit", "--dry-run", "--run=d20"],
                                  ["data", "generate", "--cha"]])
def test_no_command_takes_an_abbreviated_flag(argv, capsys):
    # plan took nanochat's --run d20 for --runtimes d20 and blamed --runtimes, a flag never typed
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2 and f"unrecognized arguments: {' '.join(argv[-2 if argv[-1] == 'd20' else -1:])}" \
        in capsys.readouterr().err


def test_an_unknown_flag_of_another_command_is_refused_as_before(capsys):
    with pytest.raises(SystemExit):
        cli.main(["plan", "--depht=3"])
    assert capsys.readouterr().err.splitlines()[-1] == "nanochat-bench: error: unrecognized arguments: --depht=3"


@pytest.mark.parametrize("argv,flag", [
    (["collect", "", "--out", "t"], "ROOT"), (["collect", "runs", "--out", ""], "--out"),
    (["report", "", "--out", "r"], "TABLE_OR_ROOT"), (["report", "t", "--out", ""], "--out"),
    (["report", "t", "--out", "r", "--title", ""], "--title"),
    (["check", "", "--references", "r.toml"], "TABLE"), (["check", "t", "--references", ""], "--references"),
    (["capacity", "--report", "--out", ""], "--out"), (["edf", "--image", "x", "--output", ""], "--output"),
    (["data", "bin", "--out", ""], "--out"), (["plan", "--data-dir", ""], "--data-dir"),
    (["plan", "--base-dir", ""], "--base-dir"), (["plan", "--site", ""], "--site"),
    (["submit", "--dry-run", "--out", ""], "--out"), (["render", "sbatch", "--out", ""], "--out"),
    (["speedrun", "--run-dir", ""], "--run-dir"), (["speedrun", "--data-dir", ""], "--data-dir"),
    (["train", "--run-dir", "", "--", "--depth=2"], "--run-dir"), (["preflight", "--json", ""], "--json"),
    (["smoke", "--base-dir", ""], "--base-dir"), (["smoke", "--run-dir", ""], "--run-dir"),
    (["status", ""], "SWEEP"), (["status", "", "--resubmit-failed"], "SWEEP"),
    (["edf", "--regenerate", ""], "--regenerate")])
def test_an_empty_path_is_refused_naming_its_flag_not_read_as_here_or_the_default(argv, flag, capsys, tmp_path,
                                                                                  monkeypatch):
    """`report t --out "$OUT"` with OUT unset wrote the report into the current directory, `smoke --base-dir ""` its
    shards and tokenizer; others took the default unsaid (`preflight --json ""` wrote no records)."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag} '': an empty value") and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv", [["--depth=2"], ["--workload", "base_loss"]])
def test_train_refuses_a_bad_val_files_k_before_torchrun_starts(tmp_path, monkeypatch, capsys, argv):
    """NANOCHAT_VAL_FILES_K=0 was refused only by the ranks, after torchrun had started them."""
    from bench.launch import local

    monkeypatch.setattr(local, "run_local", lambda *a, **kw: pytest.fail("the run was started"))
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "0")
    workload, flags = (argv[:2], []) if argv[0] == "--workload" else ([], argv)
    assert cli.main(["train", *workload, "--nproc", "1", "--run-dir", str(tmp_path / "run"), "--", *flags]) == 1
    assert capsys.readouterr().err == ("error: NANOCHAT_VAL_FILES_K='0' is not a number of validation files; use a "
                                       "whole number >= 1 and below the number of shard files (unset: 1)\n")
    assert not (tmp_path / "run").exists()


def test_train_refuses_a_force_flash_sdpa_it_cannot_read_before_torchrun_starts(tmp_path, monkeypatch, capsys):
    from bench.launch import local

    monkeypatch.setattr(local, "run_local", lambda *a, **kw: pytest.fail("the run was started"))
    monkeypatch.setenv("NANOCHAT_FORCE_FLASH_SDPA", "ture")
    assert cli.main(["train", "--nproc", "1", "--run-dir", str(tmp_path / "run"), "--", "--depth=2"]) == 1
    assert capsys.readouterr().err.startswith("error: NANOCHAT_FORCE_FLASH_SDPA='ture': give 1/true/yes/on")
    assert not (tmp_path / "run").exists()


def test_a_run_json_that_breaks_the_contract_is_one_line_naming_it(tmp_path, capsys):
    """`train --run-dir` over a run.json with a field of the wrong type (`"nodes": "x"`) ended in a SchemaError
    traceback: the contract's error names the file and the field, in one line."""
    (tmp_path / "run.json").write_text('{"schema_version": "2.0", "nodes": "x"}')
    assert cli.main(["train", "--run-dir", str(tmp_path), "--", "--depth=2"]) == 1
    assert capsys.readouterr().err == f"error: {tmp_path / 'run.json'}: nodes: expected an integer, got 'x'\n"


@pytest.mark.parametrize("damage, why", [('{"status": "o', "is not valid JSON"),
                                         (None, "cannot be read: Is a directory")])
def test_train_whose_run_json_cannot_be_read_keeps_the_runs_exit_status(tmp_path, monkeypatch, capsys, damage, why):
    """After the run, train reads run.json to print its status: a damaged one ended in the reader's error and exit
    status 1 instead of the run's, and one that could not be read (a directory, EACCES) was passed over in silence."""
    from bench.launch import local

    def run_local(train_args, nproc, run_dir, **kwargs):
        run_dir.mkdir(parents=True)
        if damage is None:
            (run_dir / "run.json").mkdir()
        else:
            (run_dir / "run.json").write_text(damage)
        return 3

    monkeypatch.setattr(local, "run_local", run_local)
    run_dir = tmp_path / "run"
    assert cli.main(["train", "--nproc", "1", "--run-dir", str(run_dir), "--", "--depth=2", "--device_type=cpu",
                     "--num_iterations=1"]) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"note: the run ended with exit status 3; its status is not known: {run_dir / 'run.json'} "
                           f"{why}")


@pytest.mark.parametrize("mib, sizes", [("2", [64 << 10, 1 << 20, 2 << 20]),
                                        ("8", [64 << 10, 1 << 20, 4 << 20, 8 << 20])])
def test_preflight_max_mib_is_the_largest_buffer_measured(mib, sizes, tmp_path):
    """--max-mib only capped the built-in sizes: 8 on CPU measured at most 4 MiB (1 GiB on GPU for 2048) and 2 at
    most 1 MiB, without a word, though --help calls it the largest buffer."""
    out = tmp_path / "pre.json"
    r = subprocess.run([sys.executable, "-m", "bench.nanochat.preflight", "--device_type", "cpu", "--max-mib", mib,
                        "--json", str(out)], capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr[-2000:]
    measured = sorted({rec["bytes"] for rec in json.loads(out.read_text())["records"]})
    assert measured == sizes


def test_a_command_leaves_the_downloaders_libraries_unimported():
    """Regression: every command imported `data download`'s downloader (requests, pyarrow, numpy) for the defaults
    its --help shows: 0.37 s of the 0.89 s each `nanochat-bench` call took to start. Its flags are added when it is
    parsed, and its help still shows them."""
    code = ("import sys\nfrom bench import cli\ncli.build_parser().parse_known_args(['plan', '--nodes', '1'])\n"
            "print(sorted(m for m in ('requests', 'pyarrow', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]
    help_text = " ".join(subprocess.run([sys.executable, "-m", "bench.cli", "data", "download", "--help"],
                                        capture_output=True, text=True, timeout=60).stdout.split())
    assert "parallel downloads (default: 4)" in help_text and "(default: 30; connecting gets at most 10)" in help_text
    args, _ = cli.build_parser().parse_known_args(["data", "download", "-n", "2"])
    assert args.num_shards == 2 and args.timeout == 30.0 and args.func.__name__ == "cmd_download"
