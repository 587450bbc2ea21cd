"""Image references checked before anything is submitted: files must exist, registry references must
be in the form the runtime reads, defaults are documented per runtime.

    python -m pytest tests/unit/runtimes -q
"""

import pytest

import bench.runtimes as runtimes
from bench.errors import RuntimeConfigError


@pytest.mark.parametrize("name,suffix", [("ce", ".sqsh"), ("pyxis", ".sqsh"), ("apptainer", ".sif")])
def test_missing_image_file_is_refused_with_the_flag_to_fix_it(tmp_path, name, suffix):
    missing = tmp_path / f"nope{suffix}"
    with pytest.raises(RuntimeConfigError) as e:
        runtimes.get(name).resolve_image(str(missing))
    assert str(missing) in str(e.value) and "does not exist" in str(e.value) and f"--image {name}=" in str(e.value)


@pytest.mark.parametrize("name,suffix", [("ce", ".sqsh"), ("pyxis", ".sqsh"), ("apptainer", ".sif")])
def test_existing_image_file_is_made_absolute(tmp_path, monkeypatch, name, suffix):
    (tmp_path / f"img{suffix}").write_bytes(b"hsqs")
    monkeypatch.chdir(tmp_path)
    assert runtimes.get(name).resolve_image(f"./img{suffix}") == str(tmp_path / f"img{suffix}")


def test_wrong_suffix_is_refused(tmp_path):
    (tmp_path / "img.sif").write_bytes(b"hsqs")
    with pytest.raises(RuntimeConfigError, match=r"\.sqsh"):
        runtimes.get("ce").resolve_image(str(tmp_path / "img.sif"))


@pytest.mark.parametrize("name", ["ce", "pyxis"])
def test_registry_slash_form_is_refused_with_the_hash_form(name):
    with pytest.raises(RuntimeConfigError) as e:
        runtimes.get(name).resolve_image("nvcr.io/nvidia/pytorch:25.10-py3")
    assert "nvcr.io#nvidia/pytorch:25.10-py3" in str(e.value)
    assert runtimes.get(name).resolve_image("nvcr.io#nvidia/pytorch:25.10-py3") == "nvcr.io#nvidia/pytorch:25.10-py3"


@pytest.mark.parametrize("name", ["ce", "pyxis"])
@pytest.mark.parametrize("image", ["docker://nvcr.io/nvidia/pytorch:25.10-py3",
                                   "docker://nvcr.io#nvidia/pytorch:25.10-py3"])
def test_enroot_registry_reference_with_a_scheme_is_refused_with_the_form_to_use(name, image):
    # enroot is given docker:// by the runtime itself: 'docker://docker://...' failed on the nodes, and the advice
    # for the slash form was 'docker:#/nvcr.io/...', the scheme taken for a registry host
    with pytest.raises(RuntimeConfigError) as e:
        runtimes.get(name).resolve_image(image)
    assert "'nvcr.io#nvidia/pytorch:25.10-py3'" in str(e.value) and "docker:#" not in str(e.value)


def test_apptainer_takes_registry_schemes():
    assert runtimes.get("apptainer").resolve_image("docker://nvcr.io/nvidia/pytorch:25.10-py3").startswith("docker://")


@pytest.mark.parametrize("name", ["podman", "podman-hpc", "sarus", "sarus-suite"])
def test_registry_runtimes_refuse_paths(name, tmp_path):
    (tmp_path / "x.sqsh").write_bytes(b"hsqs")
    with pytest.raises(RuntimeConfigError, match="registry reference"):
        runtimes.get(name).resolve_image(str(tmp_path / "x.sqsh"))


def test_bare_takes_no_image():
    assert runtimes.get("bare").resolve_image(None) is None
    with pytest.raises(RuntimeConfigError, match="--python"):
        runtimes.get("bare").resolve_image("/img/x.sqsh")


@pytest.mark.parametrize("unset", [True, False])
def test_default_image_with_unset_variable_names_it(monkeypatch, unset):
    """An empty $SCRATCH made the default image /ce-images/..., and the error said that file does not exist
    without naming the variable: set but empty is taken as unset."""
    if unset:
        monkeypatch.delenv("SCRATCH", raising=False)
    else:
        monkeypatch.setenv("SCRATCH", "")
    with pytest.raises(RuntimeConfigError, match=r"names the unset variable\(s\) SCRATCH;"):
        runtimes.get("ce").resolve_image(None)


@pytest.mark.parametrize("name,suffix", [("ce", ".sqsh"), ("pyxis", ".sqsh"), ("apptainer", ".sif")])
def test_empty_image_file_is_refused_naming_it(tmp_path, name, suffix):
    empty = tmp_path / f"img{suffix}"
    empty.write_bytes(b"")
    with pytest.raises(RuntimeConfigError) as e:
        runtimes.get(name).resolve_image(str(empty))
    assert str(empty) in str(e.value) and "empty (0 bytes)" in str(e.value)


@pytest.mark.parametrize("file_name", ["img$.sqsh", "img$1.sqsh", "a$HOPEFULLY_UNSET_NB.sqsh"])
def test_an_existing_image_with_a_literal_dollar_is_taken_as_written(tmp_path, monkeypatch, file_name):
    monkeypatch.delenv("HOPEFULLY_UNSET_NB", raising=False)
    (tmp_path / file_name).write_bytes(b"hsqs")
    assert runtimes.get("ce").resolve_image(str(tmp_path / file_name)) == str(tmp_path / file_name)


def test_a_missing_image_with_a_literal_dollar_is_missing_not_unset(tmp_path):
    with pytest.raises(RuntimeConfigError) as e:
        runtimes.get("ce").resolve_image(str(tmp_path / "img$.sqsh"))
    assert "does not exist" in str(e.value) and "unset" not in str(e.value)


def test_default_image_expands_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("SCRATCH", str(tmp_path))
    (tmp_path / "ce-images").mkdir()
    (tmp_path / "ce-images" / "nanochat-bench+latest.sqsh").write_bytes(b"hsqs")
    assert runtimes.get("pyxis").resolve_image(None) == str(tmp_path / "ce-images" / "nanochat-bench+latest.sqsh")


def test_every_container_runtime_documents_a_default():
    for name in runtimes.names():
        rt = runtimes.get(name)
        assert (rt.default_image is None) == (name == "bare")
