"""The one NAME=VALUE parser of the repeatable flags, and the one NANOCHAT_BASE_DIR default.

    python -m pytest tests/unit/launch/test_pairs_and_base_dir.py -q
"""

import re
from pathlib import Path

import pytest

from bench import paths
from bench.errors import ConfigError
from bench.launch.job import LaunchOptions
from bench.pairs import parse_pairs


def test_pairs_split_at_the_first_equals_and_the_last_wins():
    assert parse_pairs(["A=1", "B=x=y", "A=2", "C="], "--env", "A=1") == {"A": "2", "B": "x=y", "C": ""}


@pytest.mark.parametrize("item", ["A", "=1"])
def test_a_pair_without_a_name_names_the_flag_and_an_example(item):
    with pytest.raises(ConfigError, match=rf"--env '{item}' is not NAME=VALUE \(e.g. --env NCCL_PROTO=\^LL128\)"):
        parse_pairs([item], "--env", "NCCL_PROTO=^LL128")


def test_a_required_value_is_required():
    with pytest.raises(ConfigError, match="is not RUNTIME=REF"):
        parse_pairs(["ce="], "--image", "ce=/x.sqsh", form="RUNTIME=REF", value_required=True)


@pytest.mark.parametrize("name, value, why", [
    ("1A", "2", "'1A' is no variable name: give letters, digits and _, not starting with a digit"),
    ("NCCL-DEBUG", "INFO", "'NCCL-DEBUG' is no variable name"), ("A", "x\ny", "a value of one line")])
def test_an_env_the_batch_script_cannot_export_says_what_is_wrong_with_it(name, value, why):
    # both were told "a variable name and a value on one line", whichever was at fault
    with pytest.raises(ConfigError, match=rf"^--env {re.escape(name)}={re.escape(repr(value))}: {why}"):
        LaunchOptions(base_dir="/b", env={name: value})


def test_base_dir_given_then_environment_then_nanochat_default(monkeypatch, tmp_path):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    assert paths.base_dir("/given") == "/given"
    assert paths.base_dir() == str(tmp_path)
    monkeypatch.delenv("NANOCHAT_BASE_DIR")
    monkeypatch.setenv("HOME", "/home/u")
    assert paths.base_dir() == str(Path("/home/u/.cache/nanochat"))
