"""Provenance inside containers: baked build facts, Podman's .containerenv, launcher variables, network env.
    python -m pytest tests/unit/test_provenance.py -q
"""

import json
import subprocess
import sys

import pytest

from bench import provenance


def test_bake_writes_facts_and_build_info_reads_them(tmp_path):
    path = tmp_path / "etc" / "image.json"
    provenance.bake(path, reference="localhost/nanochat-bench:ci", base_image="nvcr.io/nvidia/pytorch:25.10-py3",
                    git_revision="")
    facts = provenance.build_info(path)
    assert facts["reference"] == "localhost/nanochat-bench:ci"
    assert facts["base_image"] == "nvcr.io/nvidia/pytorch:25.10-py3"
    assert "git_revision" not in facts  # empty build args are left out
    assert facts["created"].endswith("Z")


def test_bake_command_line(tmp_path):
    path = tmp_path / "image.json"
    out = subprocess.run([sys.executable, "-m", "bench.provenance", "bake", str(path), "--reference", "r:1",
                          "--git-revision", "abc123"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == json.loads(path.read_text())
    assert json.loads(path.read_text())["git_revision"] == "abc123"


def test_build_info_is_none_when_missing_or_broken(tmp_path):
    assert provenance.build_info(tmp_path / "absent.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert provenance.build_info(tmp_path / "bad.json") is None


def test_containerenv_parsed(tmp_path):
    path = tmp_path / ".containerenv"
    path.write_text('engine="podman-4.3.1"\nname="c1"\nimage="localhost/nanochat-bench:ci"\n'
                    'imageid="0123abcd"\nrootless=0\n')
    assert provenance.containerenv(path) == {"engine": "podman-4.3.1", "name": "c1", "rootless": "0",
                                             "image": "localhost/nanochat-bench:ci", "imageid": "0123abcd"}
    (tmp_path / "empty").write_text("")  # unprivileged containers get an empty file
    assert provenance.containerenv(tmp_path / "empty") == {}
    assert provenance.containerenv(tmp_path / "absent") is None


def test_runtime_launcher_variable_wins_then_detection(tmp_path):
    assert provenance.detect_runtime({"NANOCHAT_BENCH_RUNTIME": "ce"}, root=tmp_path) == "ce"
    assert provenance.detect_runtime({}, root=tmp_path) == "bare"
    (tmp_path / ".dockerenv").write_text("")
    assert provenance.detect_runtime({}, root=tmp_path) == "bare"  # CI machines are Docker containers
    assert provenance.detect_runtime({"APPTAINER_CONTAINER": "/s/x.sif"}, root=tmp_path) == "apptainer"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".containerenv").write_text("")
    assert provenance.detect_runtime({}, root=tmp_path) == "podman"


def test_image_prefers_launcher_values_then_runtime_then_build():
    build = {"reference": "built:tag", "git_revision": "abc"}
    podman = {"image": "localhost/x:1", "imageid": "feed"}
    env = {"NANOCHAT_BENCH_IMAGE": "/s/x.sqsh"}
    assert provenance.image(env, build, podman) == {"reference": "/s/x.sqsh", "digest": None,
                                                   "id": "feed", "build": build}
    assert provenance.image({}, build, podman)["reference"] == "localhost/x:1"
    assert provenance.image({"APPTAINER_CONTAINER": "/s/x.sif"}, build, {})["reference"] == "/s/x.sif"
    assert provenance.image({}, build, {}) == {"reference": "built:tag", "digest": None, "build": build}
    assert provenance.image({}) == {"reference": None, "digest": None}


def test_git_revision_falls_back_to_the_baked_one(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no git: as in an image without .git
    assert provenance.git_revision({"git_revision": "abc123"}) == "abc123"
    assert provenance.git_revision(None) is None


def test_network_env_keeps_nccl_and_fi_only():
    env = {"NCCL_NET": "AWS Libfabric", "FI_CXI_RX_MATCH_MODE": "software", "HOME": "/root",
           "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "PATH": "/bin"}
    assert provenance.network_env(env) == {"FI_CXI_RX_MATCH_MODE": "software", "NCCL_NET": "AWS Libfabric",
                                           "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


@pytest.mark.parametrize("name", ["NCCL_IB_TOKEN", "FI_CXI_PASSWORD", "TORCH_NCCL_SECRET_KEY", "UCX_AUTH_TOKEN",
                                  "NCCL_PASSWD", "FI_CREDENTIALS", "NCCL_API_KEY", "UCX_PRIVATE_KEY"])
def test_network_env_leaves_out_secret_looking_names(name):
    """A name that looks like a credential stays out of run.json even under a recorded prefix."""
    assert provenance.network_env({name: "s3cr3t", "NCCL_DEBUG": "INFO"}) == {"NCCL_DEBUG": "INFO"}


def test_collect_has_the_run_json_fields():
    facts = provenance.collect({"NANOCHAT_BENCH_RUNTIME": "podman", "NCCL_DEBUG": "INFO"})
    assert set(facts) == {"software", "git_revision", "slurm", "image", "runtime", "network_env"}
    assert facts["runtime"] == "podman" and facts["network_env"] == {"NCCL_DEBUG": "INFO"}


def test_digest_from_the_sidecar_of_a_squashfs_image(tmp_path, monkeypatch):
    sqsh = tmp_path / "nanochat-bench+latest.sqsh"
    sqsh.write_bytes(b"not really squashfs")
    subprocess.run(f"sha256sum {sqsh} > {sqsh}.sha256", shell=True, check=True)  # as enroot-import.sh does
    expected = "sha256:" + (tmp_path / f"{sqsh.name}.sha256").read_text().split()[0]
    monkeypatch.setenv("MY_SCRATCH", str(tmp_path))
    env = {"NANOCHAT_BENCH_IMAGE": "${MY_SCRATCH}/nanochat-bench+latest.sqsh"}
    assert provenance.image(env)["digest"] == expected
    (tmp_path / f"{sqsh.name}.sha256").write_text("garbage\n")
    assert provenance.image(env)["digest"] is None
    assert provenance.sidecar_digest("nanochat-bench:latest") is None
