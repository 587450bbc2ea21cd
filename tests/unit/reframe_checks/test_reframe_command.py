"""`nanochat-bench reframe`: the shipped checks and configurations on ReFrame's command line.

    python -m pytest tests/unit/reframe_checks/test_reframe_command.py -q
"""

import os
import shlex
from pathlib import Path

import pytest

from bench import cli
from bench.reframe_checks import CHECKS, CONFIG_DIR


def test_print_command_names_the_shipped_files(capsys):
    assert cli.main(["reframe", "--config", "alps-example", "--print-command", "--", "--system", "alps-example",
                     "-r"]) == 0
    argv = shlex.split(capsys.readouterr().out)
    assert argv == ["reframe", "-C", str(CONFIG_DIR / "alps_example.py"), "-c", str(CHECKS), "--timestamp",
                    "--system", "alps-example", "-r"]
    assert CHECKS.is_file() and (CONFIG_DIR / "alps_example.py").is_file()


def test_reframe_flags_before_the_dashes_are_refused_with_the_command_as_it_should_be(capsys):
    """argparse said only "unrecognized arguments: -r", with no word that ReFrame's flags follow --, as train's do."""
    with pytest.raises(SystemExit) as e:
        cli.main(["reframe", "--config", "alps-example", "--print-command", "-r"])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("nanochat-bench: error: unrecognized arguments: -r; ReFrame's "
                                                        "flags go after --: nanochat-bench reframe --config "
                                                        "alps-example --print-command -- -r")


def test_a_timestamp_the_user_gives_is_kept_and_not_doubled(capsys):
    assert cli.main(["reframe", "--config", "test-cluster", "--print-command", "--", "--timestamp=%F", "-r"]) == 0
    argv = shlex.split(capsys.readouterr().out)
    assert argv[-2:] == ["--timestamp=%F", "-r"] and argv.count("--timestamp") == 0


def test_reframe_lists_the_checks_of_the_test_cluster(capfd, monkeypatch):
    """Real ReFrame loads the checks and the configuration: one case per runtime the partition offers and
    scaling mode."""
    repo = str(Path(__file__).resolve().parents[3])  # the checks import this checkout's bench package
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
    assert cli.main(["reframe", "--config", "test-cluster", "--", "--system", "nbtest", "-l"]) == 0
    out = capfd.readouterr().out
    assert "- nanochat_bench %runtime=bare %scaling=weak" in out and "%runtime=bare %scaling=strong" in out
    assert "Found 2 check(s)" in out  # ce, pyxis, ... need partitions that list them as features


def test_an_unknown_configuration_is_one_error_line(capsys):
    assert cli.main(["reframe", "--config", "nowhere.py", "--print-command"]) == 1
    assert capsys.readouterr().err == ("error: --config 'nowhere.py': no such file; shipped configurations: "
                                       "test-cluster, alps-example\n")


def test_a_configuration_that_is_a_directory_is_named_so(capsys, tmp_path):
    assert cli.main(["reframe", "--config", str(tmp_path), "--print-command"]) == 1
    assert capsys.readouterr().err.startswith(f"error: --config '{tmp_path}': a directory, not a ReFrame "
                                              "configuration file; shipped configurations: ")


def test_an_empty_configuration_is_named_empty_not_a_directory(capsys):
    """`--config "$CONFIG"` with CONFIG unset was read as the current directory: "a directory, not a ... file"."""
    assert cli.main(["reframe", "--config", "", "--print-command"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --config '': an empty value") and "directory" not in err
