"""The workload registry and the commands each workload gives the launchers.

    python -m pytest tests/unit/workloads/test_workloads.py -q
"""

import ast
import sys
from pathlib import Path

import pytest

from bench import workloads
from bench.errors import ConfigError
from bench.workloads import nntile

REPO = Path(__file__).resolve().parents[3]


def test_unknown_workload_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="valid: nanochat, nntile"):
        workloads.get("nanogpt")


def test_nanochat_local_command_is_torchrun():
    argv = ["--depth=2"]
    assert workloads.get("nanochat").local_command(argv, 2) == [
        sys.executable, "-m", "bench.launch.elastic", "--standalone", "--nproc_per_node=2", "-m",
        "bench.nanochat.train", "--", "--depth=2"]


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


def test_nntile_is_one_process():
    with pytest.raises(ConfigError, match="--nproc=2"):
        workloads.get("nntile").check([], 2)


def test_starpu_home_is_pinned_beside_the_data():
    env = workloads.get("nntile").launch_env("/scratch/cache", 4)
    assert env["STARPU_HOME"] == "/scratch/cache/starpu" and env["STARPU_SILENT"] == "1"
    assert env["STARPU_NCUDA"] == "4"


def _imports(path: Path) -> set[str]:
    """Top-level packages a module imports when it is imported (imports inside functions are lazy)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", ["bench/__init__.py", *sorted(str(p.relative_to(REPO)) for p in (REPO / "bench/contract").glob("*.py")),
                                    "bench/logline.py", "bench/metrics.py",
                                    "bench/errors.py", "bench/provenance.py", "bench/nanochat/__init__.py",
                                    "bench/nanochat/runrecord.py",
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
        assert "unknown argument(s): '--depth=2'" in str(e)
        accepted = False
    assert accepted == workload.takes_depth
