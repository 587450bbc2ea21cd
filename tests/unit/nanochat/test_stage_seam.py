"""The seam every nanochat stage stands on: its settings parsed like the trainer's, checkpoints found and
loaded by phase as upstream's checkpoint_manager finds them, its torchrun command from its module."""

import os
from dataclasses import asdict, dataclass

import pytest
import torch

from bench.contract import field as _f
from bench.errors import ConfigError
from bench.nanochat.checkpoint import find_model_tag, load_model, save_checkpoint
from bench.nanochat.config import RunSettings, parse_config
from bench.nanochat.gpt import GPTConfig, build_model
from bench.workloads.stage import TorchrunStage


@dataclass
class TinyStage(RunSettings):
    device_batch_size: int = _f(4, "sequences per micro-batch per rank")


def test_a_stage_parses_its_own_and_the_shared_flags():
    config = parse_config(TinyStage, ["--", "--device_batch_size=8", "--watchdog_s=0"], "tiny")
    assert (config.device_batch_size, config.watchdog_s, config.preflight) == (8, 0, True)
    with pytest.raises(ConfigError, match="did you mean --device_batch_size"):
        parse_config(TinyStage, ["--device_batch_sizes=8"], "tiny")
    with pytest.raises(ConfigError, match="--heartbeat_timeout_s=3"):  # RunSettings.validate runs
        parse_config(TinyStage, ["--heartbeat_timeout_s=3"], "tiny")


def _save(tag: str, step: int, config: GPTConfig) -> dict:
    model = build_model(config, "cpu")
    # a compiled model's keys carry _orig_mod.; the loader takes them either way
    state = {f"_orig_mod.{k}": v for k, v in model.state_dict().items()}
    save_checkpoint(f"{tag}", step, state, [], {"step": step, "model_config": asdict(config)})
    return model.state_dict()


def test_load_model_takes_the_largest_depth_and_the_last_step(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"no mid checkpoints in .*mid_checkpoints: mid-training"):
        load_model("mid", "cpu")
    small, big = GPTConfig.from_depth(1, 64, 32, 8), GPTConfig.from_depth(2, 64, 32, 8)
    root = tmp_path / "mid_checkpoints"
    _save(root / "d1", 5, small)
    _save(root / "d2", 3, big)
    expect = _save(root / "d2", 7, big)
    assert find_model_tag("mid") == "d2"
    model, meta = load_model("mid", "cpu")
    assert meta["step"] == 7 and meta["model_tag"] == "d2"
    assert all(torch.equal(model.state_dict()[k], v) for k, v in expect.items())
    model, meta = load_model("mid", "cpu", model_tag="d1")
    assert meta["step"] == 5 and model.config.n_layer == 1
    with pytest.raises(ConfigError, match="no checkpoint of step 4 in .*d2.*saved steps there: 3, 7"):
        load_model("mid", "cpu", step=4)
    with pytest.raises(ConfigError, match="unknown checkpoint source 'rl'"):
        load_model("rl", "cpu")


def test_without_a_tag_a_run_saved_under_sweep_and_run_is_found(tmp_path, monkeypatch):
    # `nanochat-bench train` without --model_tag saves into base_checkpoints/<sweep>-<hash>/<run>
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    root = tmp_path / "base_checkpoints"
    config = GPTConfig.from_depth(1, 64, 32, 8)
    _save(root / "local" / "20261204-100000", 3, config)
    _save(root / "local" / "20261204-110000", 5, config)
    os.utime(root / "local" / "20261204-100000", (2e9, 2e9))  # the newer of the two by time
    assert find_model_tag("base") == "local/20261204-100000"
    model, meta = load_model("base", "cpu")
    assert meta["step"] == 3 and meta["model_tag"] == "local/20261204-100000"


def test_without_a_tag_the_checkpoints_a_rerun_set_aside_are_never_loaded(tmp_path, monkeypatch):
    """A flow's rerun moves a training stage's earlier checkpoints to <tag>.attempt-<time>; base_eval without a tag
    loaded them when they were the newest folder (the rerun had failed before saving), the model set aside."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    root, config = tmp_path / "base_checkpoints", GPTConfig.from_depth(1, 64, 32, 8)
    _save(root / "other-run", 2, config)
    _save(root / "sw-point-0123abcd.attempt-20261204-100000", 6, config)
    os.utime(root / "other-run", (1e9, 1e9))  # the set-aside folder is the newer
    assert find_model_tag("base") == "other-run"
    (root / "other-run").rename(root / "other-run.attempt-20261204-110000")
    with pytest.raises(ConfigError, match=r"no base checkpoints in .*base_checkpoints but the ones a rerun set aside "
                                          r"\(other-run\.attempt-20261204-110000, sw-point-0123abcd\.attempt-"):
        find_model_tag("base")
    _, meta = load_model("base", "cpu", model_tag="sw-point-0123abcd.attempt-20261204-100000")  # by its tag: loaded
    assert meta["step"] == 6


def test_a_stage_runs_its_own_module_under_torchrun():
    class Stage(TorchrunStage):
        name, module = "tiny", "bench.nanochat.tiny_stage"

        def parse(self, argv):
            return parse_config(TinyStage, argv, "tiny")

    stage = Stage()
    command = stage.local_command(["--device_batch_size=2"], 2, python="python3")
    assert command[command.index("-m", 3):] == ["-m", "bench.nanochat.tiny_stage", "--", "--device_batch_size=2"]
    settings = stage.settings({"device_batch_size": 3}, "weak")
    assert settings.config.device_batch_size == 3 and settings.argv == ("--device_batch_size=3",)
    assert stage.manifest_config(["--device_batch_size=2"])["device_batch_size"] == 2


STAGE_PARSERS = {"base_loss": "--model_tag", "base_eval": "--model_tag", "mid_train": "--model_tag",
                 "chat_sft": "--model_tag", "chat_eval": "-g/--model-tag"}


@pytest.mark.parametrize("stage", STAGE_PARSERS)
@pytest.mark.parametrize("tag", ["../base_checkpoints/d2", "/tmp", "d2/../../x", "a//b", "."])
def test_every_stage_refuses_a_tag_that_leaves_its_checkpoint_folder(stage, tag):
    """chat_eval -g ../base_checkpoints/d2 evaluated the base model and called it mid; -g /tmp read /tmp; base_loss
    and base_eval took any path too."""
    from bench.workloads import get

    with pytest.raises(ConfigError, match=rf"^{STAGE_PARSERS[stage]}='{tag}': a folder below .* none '\.' or '\.\.'"):
        get(stage).parse([*(["-i", "mid"] if stage == "chat_eval" else []), f"--model_tag={tag}"])


@pytest.mark.parametrize("stage", STAGE_PARSERS)
def test_a_sweeps_sweep_and_run_tag_is_fine_for_every_stage(stage):
    from bench.workloads import get

    argv = ["-i", "mid"] if stage == "chat_eval" else []
    assert get(stage).parse([*argv, "--model_tag=sweep/run-1.a_b"]).model_tag == "sweep/run-1.a_b"


def test_a_resumed_stage_marks_its_steady_state_after_its_own_warm_up(monkeypatch):
    """Resumed at step 10, the trainer said `steady` right after its first step (at step 10, its compile's), and
    resumed at 15 never: the start-up breakdown showed no warm-up and counted it as steady training."""
    from bench.metrics import WARMUP_STEPS
    from bench.nanochat import gcfreeze, stagerun
    from bench.nanochat.watchdog import Watchdog

    class Record:
        def __init__(self):
            self.events = []

        def emit(self, event, **fields):
            self.events.append((event, fields.get("step")))

    monkeypatch.setattr(gcfreeze, "after_step", lambda step, first: None)
    for resumed_at in (0, 10, 15):
        session = stagerun.Session(False, 0, 1, torch.device("cpu"), "cpu", None, Watchdog(0.0, False), None)
        record = Record()
        for step in range(resumed_at, resumed_at + 2 * WARMUP_STEPS):
            stagerun.log_step(session, record, step, 100, 3.0, 1.0, 0.1, 1000.0, None, 0.0, line="")
        assert [e for e in record.events if e[0] != "step"] == [("first_step", None),
                                                               ("steady", resumed_at + WARMUP_STEPS)]


def test_a_gpu_trained_checkpoint_loads_in_float32_on_the_cpu(tmp_path, monkeypatch):
    """Pre-training on CUDA keeps the embedding in bf16, and so does its checkpoint. Upstream's build_model turns
    every bf16 tensor into fp32 when loading on the CPU (or MPS), for every stage; mid_train, base_loss and base_eval
    kept the bf16 embedding here, and their first forward failed on the mixed dtypes."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    config = GPTConfig.from_depth(1, 64, 32, 8)
    model = build_model(config, "cpu")
    state = {k: v.bfloat16() if k == "transformer.wte.weight" else v for k, v in model.state_dict().items()}
    save_checkpoint(tmp_path / "base_checkpoints" / "d1", 3, state, [], {"step": 3, "model_config": asdict(config)})
    loaded, _ = load_model("base", "cpu")
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    assert torch.equal(loaded.transformer.wte.weight, state["transformer.wte.weight"].float())
    logits = loaded(torch.zeros((1, 4), dtype=torch.long))  # the forward runs
    assert logits.dtype == torch.float32
