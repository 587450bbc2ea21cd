"""The workload registry and the commands each workload gives the launchers.

    python -m pytest tests/unit/workloads/test_workloads.py -q
"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import workloads
from bench.errors import ConfigError, DataError
from bench.workloads import nntile

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def cfg_and_data(tmp_path):
    """Flags of a tiny GPT-2 whose checks pass: a config and a train.bin of three batches."""
    (tmp_path / "gpt2.json").write_text(json.dumps({"n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 32,
                                                    "vocab_size": 512}))
    (tmp_path / "train.bin").write_bytes(b"\0\0" * (4 * 33 * 3))
    return [f"--config-path={tmp_path / 'gpt2.json'}", "--batch=4", f"--dataset-path={tmp_path}"]


def test_unknown_workload_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="valid: nanochat, nntile"):
        workloads.get("nanogpt")


def test_nanochat_local_command_is_torchrun():
    argv = ["--depth=2"]
    assert workloads.get("nanochat").local_command(argv, 2) == [
        sys.executable, "-m", "bench.launch.elastic", "--standalone", "--nproc_per_node=2", "-m",
        "bench.nanochat.train", "--", "--depth=2"]


def test_a_stage_interpreter_that_is_not_there_is_refused_before_any_run_directory(tmp_path):
    from bench.cli import main

    assert workloads.get("base_loss").local_command([], 1, "python3")[0] == "python3"  # a name on PATH is taken
    with pytest.raises(ConfigError, match=r"^--python=/nowhere/python: no such interpreter"):
        main(["-v", "train", "--python", "/nowhere/python", "--run-dir", str(tmp_path / "run"), "--",
              "--depth=2", "--device_type=cpu", "--num_iterations=1"])
    assert not (tmp_path / "run").exists()  # not a run left `pending` for ever


def test_nntile_runs_by_path_on_the_host_and_as_a_module_in_an_image():
    w = workloads.get("nntile")
    host = w.launch_command("/venv/bin/python", 1, 4, ["--batch=8"], containerised=False)
    assert host == ("/venv/bin/python", str(nntile.RUNNER), "--batch=8") and Path(host[1]).is_file()
    assert w.launch_command("python", 1, 4, ["--batch=8"], containerised=True) == \
        ("python", "-m", "bench.workloads.nntile.runner", "--batch=8")
    with pytest.raises(ConfigError, match="one node"):
        w.launch_command("python", 2, 4, [], containerised=True)


def test_nntile_interpreter_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BENCH_NNTILE_VENV", str(tmp_path / "venv"))
    monkeypatch.delenv("NANOCHAT_BENCH_NNTILE_PYTHON", raising=False)
    with pytest.raises(ConfigError, match="env.sh"):
        nntile.interpreter()
    monkeypatch.setenv("NANOCHAT_BENCH_NNTILE_PYTHON", sys.executable)
    assert nntile.interpreter() == sys.executable
    assert nntile.interpreter("/bin/sh") == "/bin/sh"  # --python wins
    with pytest.raises(ConfigError, match="--python=/nowhere/python"):
        nntile.interpreter("/nowhere/python")
    # regression: a directory passed the check and failed in Popen with a traceback; a name on PATH was refused
    with pytest.raises(ConfigError, match="--python=/tmp: no such interpreter"):
        nntile.interpreter("/tmp")
    assert nntile.interpreter("sh") == "sh"


def test_an_interpreter_without_torch_nntile_fails_in_one_line(cfg_and_data, tmp_path):
    """A --python that is not the NNTile environment: one line naming it and env.sh, no traceback."""
    # torch and torch_nntile made unimportable: this interpreter then stands in for a plain system Python
    code = ("import runpy, sys; sys.modules['torch'] = sys.modules['torch_nntile'] = None; "
            f"sys.argv = [{str(nntile.RUNNER)!r}, *sys.argv[1:]]; runpy.run_path(sys.argv[0], run_name='__main__')")
    env = dict(os.environ, NANOCHAT_BENCH_RUN_DIR=str(tmp_path / "run"))
    out = subprocess.run([sys.executable, "-c", code, *cfg_and_data], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr + out.stdout, out.stderr
    assert f"{sys.executable} cannot import torch" in out.stdout + out.stderr and "env.sh" in out.stdout + out.stderr
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "failed" and "cannot import torch" in run["message"]


def test_an_nntile_environment_that_fails_to_load_says_why(cfg_and_data, tmp_path):
    """torch-nntile found but not loadable (a shared library that does not map under a memory cap, or one missing
    on the node) was reported as '... cannot import _C: the nntile workload needs the NNTile environment', as if
    the interpreter were the wrong one; the line keeps the loader's reason."""
    fake = tmp_path / "site" / "torch_nntile"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('libcublasLt.so.12: failed to map segment from shared "
                                      "object', name='_C')\n")
    code = ("import runpy, sys; "
            f"sys.argv = [{str(nntile.RUNNER)!r}, *sys.argv[1:]]; runpy.run_path(sys.argv[0], run_name='__main__')")
    env = dict(os.environ, NANOCHAT_BENCH_RUN_DIR=str(tmp_path / "run"), PYTHONPATH=str(tmp_path / "site"))
    out = subprocess.run([sys.executable, "-c", code, *cfg_and_data], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr + out.stdout, out.stderr
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "failed"
    assert "torch_nntile" in run["message"] and "libcublasLt.so.12: failed to map segment" in run["message"]
    assert "pass its interpreter" not in run["message"]


def test_nntile_is_one_process():
    with pytest.raises(ConfigError, match="--nproc=2"):
        workloads.get("nntile").check([], 2)


def test_only_the_stages_that_read_the_validation_shards_check_val_files_k_before_starting(tmp_path, monkeypatch):
    """A .bin directory holds its own validation split, and the chat stages and CORE read no shards: a
    NANOCHAT_VAL_FILES_K they never use does not stop them."""
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "0")
    (tmp_path / "train.bin").write_bytes(b"")
    small = ["--device_batch_size=1", "--max_seq_len=64", "--total_batch_size=64"]
    workloads.get("nanochat").check([f"--data_bin_dir={tmp_path}", *small], 1)
    for name in ("base_eval", "mid_train"):
        workloads.get(name).check([], 1)
    for name, argv in (("nanochat", small), ("base_loss", [])):
        with pytest.raises(DataError, match="^NANOCHAT_VAL_FILES_K='0' is not a number of validation files"):
            workloads.get(name).check(argv, 1)
    with pytest.raises(ConfigError, match="^--total_batch_size=63 is not a multiple"):  # the flags' error first
        workloads.get("nanochat").check([*small, "--total_batch_size=63"], 1)


def test_starpu_home_is_pinned_beside_the_data():
    env = workloads.get("nntile").launch_env("/scratch/cache", 4)
    assert env["STARPU_HOME"] == "/scratch/cache/starpu" and env["STARPU_SILENT"] == "1"
    assert env["STARPU_NCUDA"] == "4"


@pytest.mark.parametrize("backward", [False, True])
def test_the_timed_passes_are_tiled_as_the_training_steps(backward, monkeypatch):
    """--nforward or --nbackward with a tile flag (--seq-tile=64 --nbackward=1) ended the run at its first training
    step ('GEMM lowering: no tile ... matches', 'coord OOB'): the passes compiled untiled graphs, which fixed the
    weights' tiles, and the steps then asked for others."""
    import contextlib
    import types

    from bench.workloads.nntile import config as nconfig
    from bench.workloads.nntile.runner import timed_passes

    calls = []

    class Tokens:
        def to(self, device):
            return self

    class Loss:
        def backward(self):
            calls.append("backward")

    class Model:
        def __call__(self, tokens):
            calls.append("forward")

        def parameters(self):
            return []

    fake_nntile = types.SimpleNamespace(compile_graph=lambda: calls.append("compile"), run=lambda: None,
                                        wait=lambda: None)
    fake_torch = types.SimpleNamespace(randint=lambda high, size: Tokens(), no_grad=contextlib.nullcontext)
    monkeypatch.setitem(sys.modules, "torch_nntile", fake_nntile)
    monkeypatch.setitem(sys.modules, "torch_nntile.training",
                        types.SimpleNamespace(cross_entropy=lambda logits, tokens: Loss()))
    config = nconfig.NNTileConfig(nforward=2, nforward_warmup=1, nbackward=2, nbackward_warmup=1, minibatch=2)
    timed_passes(Model(), fake_torch, fake_nntile, config, {"vocab_size": 16, "n_positions": 8}, backward,
                 tile=lambda tokens: calls.append("tile"))
    per_pass = ["forward", "backward", "tile", "compile"] if backward else ["forward", "tile", "compile"]
    assert calls == per_pass * 3


def _imports(path: Path) -> set[str]:
    """Top-level packages a module imports when it is imported (imports inside functions are lazy)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _package(name: str) -> list[str]:
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "bench" / name).glob("*.py"))


@pytest.mark.parametrize("module", ["bench/__init__.py", *_package("contract"), *_package("runside"),
                                    "bench/logline.py", "bench/metrics.py", "bench/errors.py", "bench/provenance.py",
                                    "bench/workloads/__init__.py", "bench/workloads/base.py",
                                    "bench/workloads/nntile/__init__.py", "bench/workloads/nntile/config.py"])
def test_what_the_nntile_interpreter_imports_is_standard_library(module):
    """The runner imports these in a Python that has torch-nntile and nothing of ours installed."""
    allowed = set(sys.stdlib_module_names) | {"bench"}
    assert _imports(REPO / module) <= allowed, f"{module} imports {_imports(REPO / module) - allowed}"


@pytest.mark.parametrize("name", workloads.names())
def test_takes_depth_says_what_the_workloads_parser_accepts(name):
    """`takes_depth` (the ReFrame case sets --depth only where it holds) agrees with the workload's own parser:
    pre-training takes --depth, every later stage loads its checkpoint's and refuses the flag."""
    workload = workloads.get(name)
    try:
        workload.settings({"depth": "2"}, "weak")
        accepted = True
    except ConfigError as e:
        assert "unknown argument(s): " in str(e) and "depth=2" in str(e)  # nntile names it as --train-arg gave it
        accepted = False
    assert accepted == workload.takes_depth


def test_train_help_names_every_workload_with_its_summary():
    """`--workload`'s help is generated from the registry: a new workload or stage appears with its own line."""
    import contextlib
    import io

    from bench import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(out.getvalue().split())
    for name in workloads.names():
        summary = workloads.get(name).summary
        assert summary and f"{name}: {' '.join(summary.split())}" in text


@pytest.mark.parametrize("name", workloads.names())
def test_what_a_workload_stages_is_checked_by_its_own_missing_staged(name, tmp_path):
    """A workload that declares `staging` says, before a flow starts, that an empty base directory lacks it and
    names its staging command (a staging workload without its check would let a flow run hours and stop there)."""
    workload = workloads.get(name)
    missing = workload.missing_staged(str(tmp_path))
    if workload.staging is None:
        assert missing == ""
    else:
        assert "\n" not in missing and str(tmp_path) in missing
        assert f"`nanochat-bench {' '.join(workload.staging_command())}`" in missing


@pytest.mark.parametrize("name", [n for n in workloads.names() if n != "nntile"])
def test_the_checks_before_torchrun_leave_torch_to_the_ranks(name, tmp_path):
    """Regression: `train` checked NANOCHAT_FORCE_FLASH_SDPA through the attention module, which imports torch:
    2 s of every local pre-training run's start went to a torch the command line never used."""
    argv = ["-i", "base"] if name == "chat_eval" else []  # the one stage with a flag it cannot do without
    code = (f"import sys\nfrom bench import workloads\nworkloads.get({name!r}).check({argv!r}, 2)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])")
    env = {**os.environ, "NANOCHAT_BASE_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    env.pop("NANOCHAT_VAL_FILES_K", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout
