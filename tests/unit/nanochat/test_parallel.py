"""Memory strategies as trainer flags: what --strategy accepts, and what it refuses with one clear line.

    python -m pytest tests/unit/nanochat/test_parallel.py -q
"""

import pytest

from bench.errors import ConfigError
from bench.nanochat.config import parse_args
from bench.nanochat.parallel import Strategy


@pytest.mark.parametrize("text, expect", [("zero2", Strategy()), ("fsdp", Strategy("fsdp")),
                                          ("fsdp+ac", Strategy("fsdp", ac=True)),
                                          ("fsdp+ac+offload", Strategy("fsdp", True, True)),
                                          ("fsdp+offload+ac", Strategy("fsdp", True, True)),
                                          ("zero2+ac", Strategy("zero2", ac=True))])
def test_parse(text, expect):
    assert Strategy.parse(text) == expect
    assert Strategy.parse(expect.name) == expect


@pytest.mark.parametrize("text, match", [("zero3", "valid: zero2 | fsdp"), ("fsdp+ac+ac", "valid"),
                                         ("zero2+offload", "offload needs fsdp"), ("fsdp+cpu", "valid")])
def test_refused(text, match):
    with pytest.raises(ConfigError, match=match):
        Strategy.parse(text)


def test_trainer_flag():
    assert parse_args(["--strategy=fsdp+ac"]).strategy == "fsdp+ac"
    with pytest.raises(ConfigError, match="leave out --save_every"):  # FSDP checkpoints are not written yet: say so
        parse_args(["--strategy=fsdp", "--save_every=10"])
    with pytest.raises(ConfigError, match="--strategy='zero9'"):
        parse_args(["--strategy=zero9"])
    assert parse_args(["--aspect_ratio=128"]).aspect_ratio == 128
