"""The container scripts' command lines: a bad argument is one line naming it.
    python -m pytest tests/unit/containers/test_container_scripts.py -q
Every tool the scripts call (podman, enroot, apptainer, sarus, ...) is a stub that records its call.
"""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CONTAINERS = REPO / "containers"
TOOLS = ["podman", "podman-hpc", "docker", "enroot", "apptainer", "sarus", "sarusctl", "debootstrap", "lfs"]


@pytest.fixture
def run(tmp_path):
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >>"{calls}"\n')
        (bin_dir / tool).chmod(0o755)

    def _run(script, *args):
        env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "SCRATCH": str(tmp_path),
               "TMPDIR": str(tmp_path), "TORCH_WHEEL": str(tmp_path / "no.whl")}
        out = subprocess.run([str(CONTAINERS / script), *args], capture_output=True, text=True, env=env,
                             timeout=60, cwd=tmp_path)
        return out, calls.read_text() if calls.exists() else ""
    return _run


@pytest.mark.parametrize("flag", ["--target", "--tag", "--base"])
def test_build_flag_without_its_value_is_one_line(run, flag):
    out, calls = run("build.sh", flag)
    assert out.returncode == 2 and calls == ""
    assert out.stderr.count("\n") == 1 and f"build.sh: {flag} needs a value" in out.stderr, out.stderr
    assert "unbound variable" not in out.stderr
