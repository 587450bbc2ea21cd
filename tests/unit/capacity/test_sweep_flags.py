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


def _fake_smi(tmp_path, monkeypatch, gpus):
    import os

    smi = tmp_path / "nvidia-smi"
    listing = "".join(f'echo "GPU {i}: NVIDIA H100"; ' for i in range(gpus))
    smi.write_text(f'#!/bin/sh\ncase "$1" in -L) {listing};; *) echo "NVIDIA H100, 81559";; esac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(sweep, "_gpu", lambda: ("NVIDIA H100", 80 << 30))


def test_more_gpus_than_visible_are_refused_naming_the_flag_and_the_count(tmp_path, monkeypatch):
    """Regression: --gpus 8 on a node of 2 GPUs (or a job shown 2 of 8) was taken: every probe started 8 ranks, those
    past the second found no GPU, and each strategy's search stopped at its first probe as `failed`. No GPU runs
    here: a fake nvidia-smi stands in."""
    _fake_smi(tmp_path, monkeypatch, 8)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    for device_type in ("cuda", ""):
        cfg = SweepConfig(out=tmp_path, strategies=["fsdp"], nproc=8, device_type=device_type)
        with pytest.raises(ConfigError, match=r"^--gpus 8: only 2 GPU\(s\) visible here \(nvidia-smi -L, "
                                              r"CUDA_VISIBLE_DEVICES\); give --gpus 2 or fewer$"):
            sweep.machine(cfg)
    assert sweep.machine(SweepConfig(out=tmp_path, strategies=["fsdp"], nproc=2))["nproc"] == 2
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert sweep.machine(SweepConfig(out=tmp_path, strategies=["fsdp"], nproc=8))["nproc"] == 8
    with pytest.raises(ConfigError, match=r"^--gpus 9: only 8 GPU\(s\) visible"):
        sweep.machine(SweepConfig(out=tmp_path, strategies=["fsdp"], nproc=9))


def test_ranks_on_cpu_are_not_bounded_by_the_gpus_of_the_host(tmp_path, monkeypatch):
    """--device-type cpu: --gpus is the ranks of a probe, processes on the host's cores, whatever GPUs it has."""
    _fake_smi(tmp_path, monkeypatch, 1)
    machine = sweep.machine(SweepConfig(out=tmp_path, strategies=["fsdp"], nproc=4, device_type="cpu"))
    assert machine["device_type"] == "cpu" and machine["nproc"] == 4


def test_nvidia_smi_l_is_asked_once_a_sweep_when_it_hangs(tmp_path, monkeypatch, capsys):
    """Regression: with a wedged driver and no --gpus, `capacity` waited on `nvidia-smi -L` to count the GPUs, then
    again (as long) to check that count against the GPUs visible, before its first probe."""
    import os

    from bench.cli import main

    calls = tmp_path / "calls"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$1" >> {calls}\ncase "$1" in -L) exec sleep 30;; *) echo "NVIDIA H100, 81559";; '
                   'esac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(sweep, "_gpu", lambda: ("NVIDIA H100", 80 << 30))
    monkeypatch.setattr(sweep, "SMI_TIMEOUT_S", 1)
    ran = []
    monkeypatch.setattr(sweep.Sweep, "run", lambda self: ran.append(self.cfg.nproc))
    assert main(["capacity", "--strategies", "fsdp", "--out", str(tmp_path / "out")]) == 0
    assert ran == [2] and calls.read_text().split().count("-L") == 1
    assert "nvidia-smi -L did not answer in 1 s" in capsys.readouterr().err


@pytest.mark.parametrize("gpus", [[], ["--gpus", "1"]])
def test_a_wedged_driver_ends_capacity_in_one_line_naming_what_did_not_answer(tmp_path, monkeypatch, capsys, gpus):
    """Regression: where nvidia-smi --query-gpu gave no answer, the GPU was asked of torch in a subprocess without a
    timeout, so a wedged driver hung `capacity` before its first probe, with or without --gpus."""
    import os
    import sys
    import time

    from bench.cli import main

    for name in ("nvidia-smi", "python"):  # both wedged in the driver
        (tmp_path / name).write_text("#!/bin/sh\nexec sleep 30\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(sweep, "SMI_TIMEOUT_S", 1)
    monkeypatch.setattr(sweep, "TORCH_GPU_TIMEOUT_S", 1)
    monkeypatch.setattr(sweep.Sweep, "run", lambda self: pytest.fail("no sweep runs on a GPU that did not answer"))
    t0 = time.monotonic()
    assert main(["capacity", "--strategies", "fsdp", "--out", str(tmp_path / "out"), *gpus]) == 1
    assert time.monotonic() - t0 < 20
    assert capsys.readouterr().err == (
        "error: the GPU could not be asked: torch.cuda did not answer in 1 s (in a subprocess, after nvidia-smi "
        "--query-gpu gave no answer); a wedged GPU driver hangs both: check it, or give --device-type cpu\n")


def test_the_gpu_is_asked_of_nvidia_smi_once_a_sweep_when_it_hangs(tmp_path, monkeypatch):
    """Regression: with a wedged driver and no --gpus, `capacity` waited on `nvidia-smi --query-gpu` for the GPU's
    name and memory to take the default --gpus, then again (as long) for the sweep's machine."""
    import os
    import sys

    from bench.cli import main

    calls = tmp_path / "calls"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$1" >> {calls}\ncase "$1" in -L) echo "GPU 0: NVIDIA H100";; *) exec sleep 30;; '
                   'esac\n')
    smi.chmod(0o755)
    (tmp_path / "python").write_text("#!/bin/sh\necho 'NVIDIA H100|85899345920'\n")  # torch's answer
    (tmp_path / "python").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(sweep, "SMI_TIMEOUT_S", 1)
    ran = []
    monkeypatch.setattr(sweep.Sweep, "run", lambda self: ran.append((self.cfg.nproc, self.machine["gpu_name"])))
    assert main(["capacity", "--strategies", "fsdp", "--out", str(tmp_path / "out")]) == 0
    assert ran == [(1, "NVIDIA H100")]
    assert [c for c in calls.read_text().split() if c.startswith("--query-gpu")] == ["--query-gpu=name,memory.total"]
