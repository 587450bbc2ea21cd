"""Shared fixtures: a tiny NANOCHAT_BASE_DIR with generated shards and a trained small tokenizer.

`tiny_base_dir` is built once per test session (a few seconds): 3 shards of 256 offline-corpus
documents in row groups of 16, so the train split (2 files) has 32 row groups and the validation
split (the last file) 16, enough for 2 ranks in both, and a 512-token BPE tokenizer trained on them.
Tests that need the data use `base_dir_env`, which points NANOCHAT_BASE_DIR at it for one test.

Triton, where installed, runs its kernels (bench/nanochat/fused.py) on CPU tensors through its interpreter,
which it chooses when it is imported: so before any test imports it.
"""

import os
import signal

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    """SIGTERM (a CI job's timeout, `kill`) ends the suite as Ctrl-C does, through its fixtures' teardown: killed
    outright, it left the test Slurm clusters' slurmctld, slurmd and munged running, and their jobs."""
    signal.signal(signal.SIGTERM, _interrupted)


def _interrupted(signum, _frame):
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")

TINY_SHARDS = 3
TINY_DOCS_PER_SHARD = 256
TINY_ROW_GROUP_SIZE = 16
TINY_VOCAB_SIZE = 512


@pytest.fixture(scope="session")
def tiny_base_dir(tmp_path_factory):
    """A NANOCHAT_BASE_DIR holding base_data/shard_0000{0,1,2}.parquet and tokenizer/ (vocab 512)."""
    from bench.nanochat import dataset, tokenizer

    base = tmp_path_factory.mktemp("nanochat_base")
    mp = pytest.MonkeyPatch()
    mp.setenv("NANOCHAT_BASE_DIR", str(base))
    mp.delenv("NANOCHAT_VAL_FILES_K", raising=False)
    try:
        dataset.generate_shards(TINY_SHARDS, TINY_DOCS_PER_SHARD, TINY_ROW_GROUP_SIZE)
        tokenizer.train_tokenizer(vocab_size=TINY_VOCAB_SIZE)
    finally:
        mp.undo()
    return base


@pytest.fixture
def base_dir_env(tiny_base_dir, monkeypatch):
    """Point NANOCHAT_BASE_DIR at the tiny base directory for one test (K=1 validation file)."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tiny_base_dir))
    monkeypatch.delenv("NANOCHAT_VAL_FILES_K", raising=False)
    return tiny_base_dir
