"""The capacity sweep's refusals name the flags `nanochat-bench capacity` takes, not the trainer's
(bench/capacity/sweep.py).

    python -m pytest tests/unit/capacity/test_sweep_flags.py -q
"""

import pytest

from bench.capacity import sweep
from bench.capacity.sweep import SweepConfig
from bench.errors import ConfigError


def test_an_unknown_strategy_names_the_strategies_flag(tmp_path):
    with pytest.raises(ConfigError, match=r"^--strategies='foo': valid: zero2 \| fsdp"):
        SweepConfig(out=tmp_path, strategies=["zero2", "foo"], search=True)


def test_cuda_without_a_gpu_names_the_device_type_flag(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "_gpu", lambda: (None, None))
    cfg = SweepConfig(out=tmp_path, strategies=["zero2"], search=True, device_type="cuda")
    with pytest.raises(ConfigError, match=r"^--device-type cuda but no GPU is visible"):
        sweep.machine(cfg)


def test_zero2_on_ranks_that_cannot_split_the_vocabulary_is_refused_naming_the_rule(tmp_path):
    """Regression: --gpus 3 with zero2 ran a first probe that failed late in the trainer's sharded AdamW (65,536
    vocabulary rows over 3 ranks) and stopped the search as `failed`; fsdp pads an uneven split."""
    with pytest.raises(ConfigError, match=r"^--strategies zero2\+ac with --gpus 3: .* 65,536 is not a multiple of 3; "
                                          r"give a --vocab-size that 3 divides \(e.g. 65535\)"):
        SweepConfig(out=tmp_path, strategies=["fsdp", "zero2+ac"], nproc=3)
    SweepConfig(out=tmp_path, strategies=["fsdp", "fsdp+ac+offload"], nproc=3)
    SweepConfig(out=tmp_path, strategies=["zero2"], nproc=3, vocab_size=65535)
    SweepConfig(out=tmp_path, strategies=["zero2"], nproc=4)


def test_a_memory_limit_on_a_gpu_sweep_is_refused_naming_the_flag(tmp_path, monkeypatch):
    """Regression: --memory-limit on a GPU node was taken, and every probe started under an address-space cap that
    bounds the CUDA driver's reservations, not the GPU's memory."""
    monkeypatch.setattr(sweep, "_gpu", lambda: ("NVIDIA H100", 80 << 30))
    cfg = SweepConfig(out=tmp_path, strategies=["fsdp"], memory_limit=1 << 30)
    with pytest.raises(ConfigError, match=r"^--memory-limit 1024M caps a CPU rank's address space .* --device-type cpu"):
        sweep.machine(cfg)
    assert sweep.machine(SweepConfig(out=tmp_path, strategies=["fsdp"]))["device_type"] == "cuda"


def test_a_strategy_given_twice_is_refused_and_each_is_searched_by_one_spelling(tmp_path):
    """Regression: --strategies zero2,zero2 searched zero2 twice and recorded each probe twice (6 probes in
    summary.json for 3), and fsdp+offload+ac beside fsdp+ac+offload were two strategies searched apart."""
    with pytest.raises(ConfigError, match=r"^--strategies zero2,fsdp,zero2: zero2 is given twice; name each strategy "
                                          r"once$"):
        SweepConfig(out=tmp_path, strategies=["zero2", "fsdp", "zero2"])
    with pytest.raises(ConfigError, match=r"^--strategies fsdp\+offload\+ac,fsdp\+ac\+offload: fsdp\+offload\+ac and "
                                          r"fsdp\+ac\+offload are both fsdp\+ac\+offload; name each strategy once$"):
        SweepConfig(out=tmp_path, strategies=["fsdp+offload+ac", "fsdp+ac+offload"])
    cfg = SweepConfig(out=tmp_path, strategies=["fsdp+offload+ac", "zero2 + ac", "fsdp"])
    assert cfg.strategies == ["fsdp+ac+offload", "zero2+ac", "fsdp"]  # its run directories: runs/fsdp+ac+offload/


def test_an_aspect_ratio_given_twice_is_refused(tmp_path):
    """Regression: --aspect-ratios 32,32 probed (or read back) every shape of that width twice, so probes.csv and
    summary.json held each probe twice and the table a row per repeat; as a strategy given twice, it is refused."""
    with pytest.raises(ConfigError, match=r"^--aspect-ratios 32,64,32: 32 is given twice; name each aspect ratio "
                                          r"once$"):
        SweepConfig(out=tmp_path, strategies=["zero2"], aspect_ratios=[32, 64, 32], depths=[2], search=False)
    assert SweepConfig(out=tmp_path, strategies=["zero2"], aspect_ratios=[32, 64]).aspect_ratios == [32, 64]


def test_a_report_of_an_out_that_is_a_file_says_so(tmp_path, capsys):
    """It said 'no capacity summary and no finished probe under FILE/runs', as of an empty sweep directory."""
    from bench import cli

    (tmp_path / "notes.txt").write_text("x")
    assert cli.main(["capacity", "--report", "--out", str(tmp_path / "notes.txt")]) == 1
    err = capsys.readouterr().err
    assert err == f"error: --out {tmp_path / 'notes.txt'} is a file, not a directory; give the directory a " \
                  "capacity sweep wrote\n", err
