"""bench/workloads/nntile/env.sh: lint-clean, refuses an interpreter that is not 3.12 before building anything.
(Building the environment itself is done by .ci/run and by tests/integration/test_train_nntile.py.)

    python -m pytest tests/unit/workloads/test_nntile_env.py -q
"""

import os
import shutil
import subprocess

import pytest

from bench.workloads import nntile


def test_env_script_passes_shellcheck():
    found = shutil.which("shellcheck")
    if not found:
        pytest.skip("shellcheck is not installed (pip install -e '.[test]')")
    r = subprocess.run([found, str(nntile.ENV_SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    assert os.access(nntile.ENV_SCRIPT, os.X_OK)


def test_a_base_interpreter_that_is_not_312_is_refused(tmp_path):
    # a stand-in, not this interpreter: where that is 3.12 (the nntile jobs' own) the check would never run
    other = tmp_path / "python3.11"
    other.write_text("#!/bin/sh\nexit 1  # env.sh's version check, as any Python but 3.12 answers it\n")
    other.chmod(0o755)
    env = dict(os.environ, NANOCHAT_BENCH_NNTILE_BASE_PYTHON=str(other))
    r = subprocess.run(["bash", str(nntile.ENV_SCRIPT), str(tmp_path / "venv")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "no Python 3.12 found" in r.stderr
    assert not (tmp_path / "venv").exists()
