"""Checkpoints: upstream's file layout, written atomically, also when two runs share a model tag."""

import errno
import os
import shutil
import threading

import pytest
import torch

from bench.errors import CheckpointError
from bench.nanochat.checkpoint import check_writable, checkpoint_error, load_model_state, save_checkpoint


def test_save_then_load_round_trips(tmp_path):
    state = {"w": torch.arange(6.0).reshape(2, 3)}
    save_checkpoint(tmp_path / "d4", 7, state, [{"opt": 1}], {"step": 7})
    loaded, meta = load_model_state(tmp_path / "d4", 7)
    assert torch.equal(loaded["w"], state["w"]) and meta == {"step": 7}
    assert sorted(os.listdir(tmp_path / "d4")) == ["meta_000007.json", "model_000007.pt", "optim_000007_rank0.pt"]


def _save_as_rank(rank: int, store: str, directory: str, slow_s: float) -> None:
    """One rank of a 2-rank gloo group saving a checkpoint; rank 1's optimizer state is slow to write. Rank 0
    reports the files there when save_checkpoint returns (what it then records as the step to resume from)."""
    import time

    import torch.distributed as dist

    from bench.nanochat import checkpoint

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    real = checkpoint._save_atomic
    if rank == 1:
        checkpoint._save_atomic = lambda obj, path: (time.sleep(slow_s), real(obj, path))
    checkpoint.save_checkpoint(directory, 5, {"w": torch.zeros(2)}, [{"opt": rank}], {"step": 5}, rank=rank)
    if rank == 0:
        with open(os.path.join(directory, "seen.txt"), "w") as f:
            f.write(" ".join(sorted(os.listdir(directory))))
    dist.destroy_process_group()


def test_save_returns_once_every_ranks_optimizer_state_is_written(tmp_path):
    """Rank 0 recorded the step in run.json (a resubmitted job resumes from it) while another rank was still writing
    its optimizer state: a time limit in between left a checkpoint that could not be resumed."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=_save_as_rank, args=(r, str(tmp_path / "store"), str(tmp_path / "d"), 1.0))
             for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert "optim_000005_rank1.pt" in (tmp_path / "d" / "seen.txt").read_text().split()


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


def test_missing_step_names_the_saved_ones(tmp_path):
    import pytest

    from bench.errors import ConfigError

    save_checkpoint(tmp_path / "d4", 3, {}, [{}], {"step": 3})
    save_checkpoint(tmp_path / "d4", 6, {}, [{}], {"step": 6})
    with pytest.raises(ConfigError, match=r"no checkpoint of step 5 in .*d4 .*saved steps there: 3, 6"):
        load_model_state(tmp_path / "d4", 5)
    with pytest.raises(ConfigError, match="saved steps there: none"):
        load_model_state(tmp_path / "elsewhere", 5)


def test_optimizer_state_needs_the_world_size_that_saved_it(tmp_path):
    import pytest

    from bench.errors import ConfigError
    from bench.nanochat.checkpoint import load_optimizer_states

    save_checkpoint(tmp_path / "d4", 4, {}, [{"adamw": 1}, {"muon": 2}], {"step": 4, "world_size": 2})
    with pytest.raises(ConfigError, match=r"written by 2 rank\(s\); resume it with 2, not 1"):
        load_model_state(tmp_path / "d4", 4, expect_world_size=1)
    with pytest.raises(ConfigError, match=r"no optimizer state for rank 1 at .*optim_000004_rank1\.pt"):
        load_optimizer_states(tmp_path / "d4", 4, rank=1)
    assert load_model_state(tmp_path / "d4", 4, expect_world_size=2)[1]["world_size"] == 2
    assert load_optimizer_states(tmp_path / "d4", 4, rank=0) == [{"adamw": 1}, {"muon": 2}]


def test_a_write_that_does_not_fit_is_named_disk_full(tmp_path):
    # torch.save's own words for a failed write carry no errno: the free space decides
    path = tmp_path / "base_checkpoints" / "d4" / "model_000007.pt"
    path.parent.mkdir(parents=True)
    free = shutil.disk_usage(tmp_path).free
    err = checkpoint_error(path, RuntimeError("[enforce fail at inline_container.cc:858] . PytorchStreamWriter "
                                              "failed writing file data/0: file write failed"), needed=free + 2**30)
    assert str(err).startswith(f"checkpoint write failed: disk full at {path} (")
    err = checkpoint_error(path, OSError(errno.EROFS, "Read-only file system"), needed=1)
    assert str(err) == f"checkpoint write failed at {path}: Read-only file system"


def test_a_failed_write_leaves_no_temp_file(tmp_path):
    (tmp_path / "d4").mkdir()
    with pytest.raises(CheckpointError, match="checkpoint write failed"):
        save_checkpoint(tmp_path / "d4", 7, {"w": Unpicklable()}, [], {"step": 7})
    assert os.listdir(tmp_path / "d4") == []


class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("cannot be written")


def test_a_save_below_an_earlier_runs_later_steps_is_said(tmp_path):
    """mid_train (or chat_sft) run again with fewer steps saved step 2 beside an earlier run's step 5, and the next
    stage, given no step, loaded step 5 without a word."""
    from bench.nanochat.checkpoint import later_steps_note

    for step in (3, 5, 2):
        save_checkpoint(tmp_path / "d2", step, {"w": torch.zeros(1)}, None, {"step": step})
    assert later_steps_note(tmp_path / "d2", 2) == (
        f"note: {tmp_path / 'd2'} also holds step(s) 3, 5 from an earlier run; a stage reading it without a step "
        "loads step 5, not 2: give it the step, or remove the later files")
    assert later_steps_note(tmp_path / "d2", 5) == ""


def test_a_checkpoint_directory_that_cannot_be_made_is_named_and_nothing_is_made(tmp_path):
    """The trainer checks it at start-up (tests run as root: a file in the way stands for a read-only directory)."""
    (tmp_path / "base_checkpoints").write_text("kept")
    for tag, why in (("d2", f"{tmp_path / 'base_checkpoints'} is a file in the way"),
                     ("", "a file of that name is in the way")):
        folder = tmp_path / "base_checkpoints" / tag if tag else tmp_path / "base_checkpoints"
        with pytest.raises(CheckpointError) as e:
            check_writable(folder, "leave out --save_every")
        assert str(e.value) == (f"the checkpoint directory {folder} cannot be written: {why}, not a directory; "
                                f"give a NANOCHAT_BASE_DIR that can be, or leave out --save_every")
        with pytest.raises(CheckpointError) as e:  # a stage that always saves (SFT) has no flag to leave out
            check_writable(folder)
        assert str(e.value).endswith("not a directory; give a NANOCHAT_BASE_DIR that can be")
    check_writable(tmp_path / "base" / "base_checkpoints" / "d2")
    check_writable(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base_checkpoints"]  # nothing made to find that out


@pytest.mark.slow
@pytest.mark.parametrize("saving, flag", [("--save_every=2", "--save_every"), ("--deadline=1", "--deadline")])
def test_train_with_save_every_and_a_checkpoint_directory_it_cannot_make_stops_before_its_first_step(
        tmp_path, tiny_base_dir, monkeypatch, capsys, saving, flag):
    """With --save_every and a base directory whose checkpoints could not be written, every step up to the first
    save ran before the run failed there; with --deadline (which saves when it stops the run early), the steps up
    to the deadline."""
    from bench import cli, contract

    base = tmp_path / "base"
    shutil.copytree(tiny_base_dir, base)
    shutil.rmtree(base / "base_checkpoints", ignore_errors=True)  # the shared base's, where other tests trained
    (base / "base_checkpoints").write_text("in the way")
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
    monkeypatch.delenv("NANOCHAT_VAL_FILES_K", raising=False)
    run_dir = tmp_path / "run"
    assert cli.main(["train", "--nproc", "1", "--run-dir", str(run_dir), "--", "--device_type=cpu", "--depth=2",
                     "--max_seq_len=64", "--device_batch_size=2", "--total_batch_size=128", "--num_iterations=4",
                     saving, "--eval_every=-1", "--sample_every=-1", "--model_tag=d2"]) == 1
    record = contract.read_run_json(run_dir)
    assert record["status"] == "failed" and record["message"].startswith(
        f"rank 0: the checkpoint directory {base / 'base_checkpoints' / 'd2'} cannot be written: "
        f"{base / 'base_checkpoints'} is a file in the way, not a directory; give a NANOCHAT_BASE_DIR that can be, "
        f"or leave out {flag}")
    assert '"event": "step"' not in (run_dir / contract.METRICS_JSONL).read_text()
