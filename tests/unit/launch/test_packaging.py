"""The Slurm templates ship inside the wheel (package bench.slurm_templates, mapped onto slurm/), so
a `pip install` outside the repository renders scripts too.

    python -m pytest tests/unit/launch/test_packaging.py -q
"""

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def test_every_bench_subpackage_is_listed_in_pyproject():
    """Packages are listed (not discovered) because of the template mapping: a new one must be added."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "bench").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert "bench.slurm_templates" in listed


@pytest.mark.slow
def test_pip_install_outside_the_repository_finds_the_templates(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("bench", "slurm"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", src)
    readme = REPO / "README.md"
    (src / "README.md").write_text(readme.read_text() if readme.exists() else "nanochat-bench\n")
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                        "-q", "--target", str(target), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in (target / "bench" / "slurm_templates").glob("*.j2")) == \
        sorted(p.name for p in (REPO / "slurm").glob("*.j2"))

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "OMP_NUM_THREADS": "1"}
    code = ("import bench.launch.render as r, sys; d = r.template_dirs(); print(d[0]); "
            "sys.exit(r.__file__.startswith(sys.argv[1]) is False)")
    r = subprocess.run([sys.executable, "-c", code, str(target)], cwd=elsewhere, env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stdout.strip() == str(target / "bench" / "slurm_templates"), r.stderr
    r = subprocess.run([sys.executable, "-m", "bench.cli", "render", "sbatch", "--runtimes", "bare", "--name", "w",
                        "--gpus-per-node", "2", "--device_type", "cpu"], cwd=elsewhere, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (elsewhere / "runs" / "w" / "n1-bare-r1" / "job.sbatch").read_text().startswith("#!/bin/bash")
