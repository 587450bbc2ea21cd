"""Checkpoints: upstream's file layout, written atomically, also when two runs share a model tag."""

import os
import threading

import torch

from bench.nanochat.checkpoint import load_model_state, save_checkpoint


def test_save_then_load_round_trips(tmp_path):
    state = {"w": torch.arange(6.0).reshape(2, 3)}
    save_checkpoint(tmp_path / "d4", 7, state, [{"opt": 1}], {"step": 7})
    loaded, meta = load_model_state(tmp_path / "d4", 7)
    assert torch.equal(loaded["w"], state["w"]) and meta == {"step": 7}
    assert sorted(os.listdir(tmp_path / "d4")) == ["meta_000007.json", "model_000007.pt", "optim_000007_rank0.pt"]


def test_concurrent_saves_of_one_tag_all_succeed(tmp_path):
    """Two benchmark runs with the same depth write the same paths at the same step: each writer must
    have its own temp file (a shared temp name made the later rename fail with FileNotFoundError)."""
    errors = []

    def save(i):
        try:
            for _ in range(5):
                save_checkpoint(tmp_path / "d20", 200, {"w": torch.full((256, 256), float(i))}, [{}], {"writer": i})
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=save, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    state, meta = load_model_state(tmp_path / "d20", 200)
    assert state["w"].unique().numel() == 1 and meta["writer"] in range(4)  # one whole file, from one writer
    assert not [n for n in os.listdir(tmp_path / "d20") if n.endswith(".tmp")]
