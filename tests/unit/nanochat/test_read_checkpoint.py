"""A damaged checkpoint on resume is one line naming the file (bench/nanochat/train.py read_checkpoint).

    python -m pytest tests/unit/nanochat/test_read_checkpoint.py -q
"""

import pytest
import torch

from bench.errors import ConfigError
from bench.nanochat.checkpoint import load_optimizer_states
from bench.nanochat.train import first_sentence, read_checkpoint


def test_a_truncated_shard_names_its_file(tmp_path):
    path = tmp_path / "optim_000002_rank1.pt"
    torch.save([{"state": {}, "param_groups": []}], path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ConfigError, match=rf"{path} cannot be read as a checkpoint \(.*\): the file is damaged"):
        read_checkpoint(path, load=lambda: load_optimizer_states(tmp_path, 2, 1))


def test_causes_are_cut_at_a_sentence_end():
    long = RuntimeError("First sentence is here. " + "second " * 40)
    assert first_sentence(long) == "First sentence is here."
    assert first_sentence(RuntimeError("short")) == "short"
    assert first_sentence(RuntimeError("x" * 10 + " " + "y" * 200)).endswith(" …")
