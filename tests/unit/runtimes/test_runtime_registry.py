"""The runtime registry: every runtime by name, unknown names refused with the valid ones listed.

    python -m pytest tests/unit/runtimes -q
"""

import pytest

import bench.runtimes as runtimes
from bench.errors import RuntimeConfigError

ALL = ["bare", "ce", "pyxis", "apptainer", "podman", "podman-hpc", "sarus", "sarus-suite"]


def test_every_runtime_is_registered_under_its_name():
    assert runtimes.names() == ALL
    for name in ALL:
        rt = runtimes.get(name)
        assert rt.name == name


def test_unknown_runtime_lists_the_valid_ones():
    with pytest.raises(RuntimeConfigError) as e:
        runtimes.get("docker")
    assert "'docker'" in str(e.value) and all(n in str(e.value) for n in ALL)


@pytest.mark.parametrize("text", ["", " , ", "bare,bare", "bare,singularity"])
def test_parse_names_refuses_empty_duplicate_and_unknown(text):
    with pytest.raises(RuntimeConfigError):
        runtimes.parse_names(text)


def test_parse_names_keeps_order():
    assert runtimes.parse_names(" pyxis, bare ,ce") == ["pyxis", "bare", "ce"]


def test_double_registration_is_refused():
    with pytest.raises(ValueError):
        runtimes.register(runtimes.Bare)
