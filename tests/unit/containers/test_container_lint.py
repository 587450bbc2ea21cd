"""Container recipes pass their linters (hadolint, shellcheck) and the requirement filter keeps image packages.
    python -m pytest tests/unit/containers/test_container_lint.py -q
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CONTAINERFILES = [REPO / "Containerfile", *sorted((REPO / "containers").glob("*.Containerfile"))]
SCRIPTS = sorted((REPO / "containers").glob("*.sh"))


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return path


@pytest.mark.parametrize("path", CONTAINERFILES, ids=lambda p: p.name)
def test_hadolint(path):
    out = subprocess.run([_tool("hadolint"), "--no-color", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("path", CONTAINERFILES, ids=lambda p: p.name)
def test_images_set_no_variable_of_the_run_contract(path):
    """CE, Apptainer and Sarus let an image's ENV beat the job's value: the image must not set one."""
    text = path.read_text()
    env_lines = [ln for ln in text.replace("\\\n", " ").splitlines() if ln.strip().startswith("ENV ")]
    assert not [ln for ln in env_lines if "NANOCHAT_" in ln], env_lines


def test_shellcheck():
    assert SCRIPTS
    out = subprocess.run([_tool("shellcheck"), "-x", *map(str, SCRIPTS)], capture_output=True, text=True,
                         cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr


def test_scripts_are_executable():
    for script in SCRIPTS:
        assert script.read_text().startswith("#!/usr/bin/env bash\n"), script.name
        assert script.stat().st_mode & 0o111, f"{script.name} is not executable"


def test_containerfile_contract():
    text = (REPO / "Containerfile").read_text()
    assert "ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.10-py3" in text
    assert "AS deps" in text and "FROM deps AS full" in text
    assert "WORKDIR /workspace/nanochat-bench" in text
    assert "--no-deps" in text and "venv" not in text.replace("virtual environment", "")


def _missing(tmp_path, deps, *extras):
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'x'\ndependencies = [" + ", ".join(f"'{d}'" for d in deps) + "]\n"
        "[project.optional-dependencies]\nextra = ['surely-not-installed-pkg>=1']\n")
    return subprocess.run([sys.executable, str(REPO / "containers" / "missing-requirements.py"),
                           str(tmp_path / "pyproject.toml"), *extras], capture_output=True, text=True)


def test_missing_requirements_keeps_installed_packages(tmp_path):
    # pytest is installed here at some version; ">=999" must not force an upgrade.
    out = _missing(tmp_path, ["pytest>=999", 'surely-not-installed-pkg==1.0; python_version>"3"'], "extra")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ['surely-not-installed-pkg==1.0; python_version>"3"',
                                       "surely-not-installed-pkg>=1"]


def test_missing_requirements_names_a_bad_extra(tmp_path):
    out = _missing(tmp_path, [], "nope")
    assert out.returncode != 0 and "no extra 'nope'" in out.stderr and "valid: extra" in out.stderr


@pytest.mark.parametrize("text, fragment", [
    (None, "cannot be read"), ("x = \n", "is not TOML"), ("[tool.x]\n", "has no [project] table"),
])
def test_missing_requirements_names_an_unreadable_pyproject(tmp_path, text, fragment):
    path = tmp_path / "pyproject.toml"
    if text is not None:
        path.write_text(text)
    out = subprocess.run([sys.executable, str(REPO / "containers" / "missing-requirements.py"), str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"missing-requirements: {path} ")
    assert fragment in out.stderr
