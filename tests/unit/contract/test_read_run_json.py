"""contract.read_run_json: none yet is {}, a damaged file (a section of another shape too) is a RunJsonError, a
failure to read is an OSError.

    python -m pytest tests/unit/contract/test_read_run_json.py -q
"""

import json

import pytest

from bench.contract import RunJsonError, RunManifest, SchemaError, load_manifest, read_run_json


def test_none_yet_is_empty(tmp_path):
    assert read_run_json(tmp_path / "absent") == {}
    (tmp_path / "file").write_text("")
    assert read_run_json(tmp_path / "file") == {}  # a run directory that is a file: no run there


def test_a_cut_short_run_json_is_a_run_json_error(tmp_path):
    (tmp_path / "run.json").write_text('{"status": "o')
    with pytest.raises(RunJsonError, match="is not valid JSON.*move it aside"):
        read_run_json(tmp_path)


def test_a_run_json_that_cannot_be_read_stays_an_os_error(tmp_path):
    """It was a RunJsonError, which the writers that catch OSError (torchrun's wrapper recording a failure, the
    trainer's RunDirError) let through as a traceback, and which advised deleting a run over an I/O error."""
    (tmp_path / "run.json").mkdir()
    with pytest.raises(OSError) as raised:
        read_run_json(tmp_path)
    assert not isinstance(raised.value, RunJsonError)


@pytest.mark.parametrize("version", [1, "2.5"])
@pytest.mark.parametrize("name, value, said", [
    ("launch", [1], "an array for its 'launch' section, not an object or null"),
    ("slurm", "x", "a string for its 'slurm' section, not an object or null"),
    ("config", None, "null for its 'config' section, not an object"),
    ("capacity", 3, "a number for its 'capacity' section, not an object or null"),
    ("evidence", {}, "an object for its 'evidence' section, not an array"),
    ("attempts", True, "a boolean for its 'attempts' section, not an array")])
def test_a_section_of_another_shape_is_a_run_json_error_naming_the_file_and_the_section(tmp_path, version, name,
                                                                                        value, said):
    """A major 1 launch of another shape was a TypeError out of load_manifest; the readers of plain data (status,
    the batch script's resume step, a flow's rerun) took a section's .get, or iterated it, in a traceback."""
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": version, "status": "ok", name: value}))
    for read in (read_run_json, load_manifest):
        with pytest.raises(RunJsonError, match=f"^{tmp_path / 'run.json'} has {said}; move it aside"):
            read(tmp_path)


def test_a_null_section_reads_as_an_empty_one(tmp_path):
    data = {"schema_version": "2.5", "status": "ok", "launch": None, "capacity": None, "sandbox": None, "evidence": []}
    (tmp_path / "run.json").write_text(json.dumps(data))
    assert read_run_json(tmp_path) == data


def test_a_major_1_launch_of_another_shape_is_named_by_the_contract_not_a_type_error():
    """collect reads run.json as text and builds the manifest itself."""
    with pytest.raises(SchemaError, match=r"^run.json: launch: expected an object, got list$"):
        RunManifest.from_dict({"schema_version": 1, "launch": [1], "launch_t0": 5.0})


def test_a_newer_majors_run_json_of_other_shapes_is_said_to_be_a_newer_releases_not_damaged(tmp_path):
    """The shape check called a newer major's run.json whose launch section had become a list damaged, with the
    advice to delete its directory. Handed on as plain data, its readers of plain data (a flow's kept stage, a
    capacity probe read back) raised AttributeError tracebacks: it is refused, as a newer release's record."""
    from bench.capacity.probe import ProbeSpec, read_probe
    from bench.launch import flow

    (tmp_path / "run.json").write_text(json.dumps({"schema_version": "3.0", "status": "ok", "launch": [1],
                                                   "capacity": [2]}))
    why = (f"^{tmp_path / 'run.json'} is of schema_version '3.0', a newer release's record \\(its 'launch' section "
           "is an array\\); read it with that release of nanochat-bench$")
    for read in (read_run_json, load_manifest, lambda d: flow._other_flags(d, ()),
                 lambda d: read_probe(ProbeSpec("fsdp", 4), d)):
        with pytest.raises(RunJsonError, match=why):
            read(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": "3.0", "status": "ok"}))
    assert read_run_json(tmp_path)["status"] == "ok"  # of this major's shapes: read as plain data
    with pytest.raises(SchemaError, match="is of major 3; .*a newer release of nanochat-bench reads it"):
        load_manifest(tmp_path)
