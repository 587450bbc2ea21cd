"""A base directory the later speedrun stages can run from, without pre-training: the tiny shards and tokenizer,
`data generate --chat` stand-ins and a depth-1 base checkpoint (random weights: a stage needs no trained model)."""

import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

# The checkpoint's sequence length: SFT's rows need rotary embeddings past 2047 positions (the model has 10 x this)
STAGE_SEQ = 256


def make_stage_base(base: Path, tiny_base_dir: Path) -> Path:
    """`base` holding tiny_base_dir's shards (linked) and tokenizer, the chat data and base_checkpoints/d1."""
    import torch

    from bench.nanochat import chatgen
    from bench.nanochat.checkpoint import save_checkpoint
    from bench.nanochat.gpt import GPTConfig, build_model

    base.mkdir(parents=True, exist_ok=True)
    (base / "base_data").symlink_to(tiny_base_dir / "base_data")
    shutil.copytree(tiny_base_dir / "tokenizer", base / "tokenizer")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NANOCHAT_BASE_DIR", str(base))
        chatgen.generate()
    torch.manual_seed(0)
    config = GPTConfig.from_depth(1, 512, STAGE_SEQ, 64)
    save_checkpoint(base / "base_checkpoints" / "d1", 7, build_model(config, "cpu").state_dict(), [],
                    {"step": 7, "model_config": asdict(config)})
    return base
