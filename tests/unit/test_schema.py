"""The run contract (bench/contract/): merge rules, older majors and newer
minors read, violations named, events checked, the JSON Schemas checked in equal to the ones the classes
generate.

    python -m pytest tests/unit/test_schema.py -q
    python -m bench.contract bench/schemas    # refresh the checked-in schemas after changing a class
"""

import json
import math
import os
from pathlib import Path

import jsonschema
import pytest

from bench import contract
from tests.support.contract import SCHEMAS


def test_the_readmes_contract_names_the_current_version_and_every_event():
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    contracts = text[text.index("## Contracts"):]
    assert f"(now `{contract.SCHEMA_VERSION}`)" in contracts
    events = contracts[contracts.index("(events "):contracts.index("appended and")]
    assert [e for e in contract.EVENTS if f"`{e}`" not in events] == []


def test_checked_in_schemas_are_generated_from_the_classes():
    for name, generated in contract.json_schemas().items():
        assert json.loads((SCHEMAS / name).read_text()) == generated, f"refresh: python -m bench.contract {SCHEMAS}"
    assert sorted(p.name for p in SCHEMAS.iterdir()) == sorted(contract.json_schemas())


def test_sections_merge_and_unknown_values_never_blank_them(tmp_path):
    contract.update_run_json(tmp_path, status="pending", slurm={"job_id": "7"}, image={"reference": "img"})
    contract.update_run_json(tmp_path, slurm={"nodelist": "n[1-2]", "job_id": None}, image=None, message="x")
    m = contract.load_manifest(tmp_path)
    assert (m.slurm.job_id, m.slurm.nodelist, m.image.reference, m.message) == ("7", "n[1-2]", "img", "x")
    contract.update_run_json(tmp_path, message=None)  # a top-level value is replaced, None included
    assert contract.load_manifest(tmp_path).message is None
    assert (m.run_id, m.sweep_id) == (tmp_path.name, tmp_path.parent.name)  # named after the directories


@pytest.mark.parametrize("fields,named", [
    ({"status": "exploded"}, "status: 'exploded' is not one of"),
    ({"nodes": "2"}, "nodes: expected an integer, got '2'"),
    ({"world_size": True}, "world_size: expected an integer, got True"),
    ({"slurm": {"jobid": "7"}}, "slurm: unknown field(s) 'jobid'"),
    ({"launch": {"kind": "ssh"}}, "launch.kind: 'ssh' is not one of 'local', 'slurm'"),
    ({"launch_t0": 1.0}, "'launch_t0' is not a field of the run contract"),
    ({"network_env": {"NCCL_DEBUG": 1}}, "network_env.NCCL_DEBUG: expected str"),
])
def test_a_writer_cannot_write_outside_the_contract(tmp_path, fields, named):
    with pytest.raises(contract.SchemaError, match=None) as e:
        contract.update_run_json(tmp_path, **fields)
    assert named in str(e.value)
    assert not (tmp_path / contract.RUN_JSON).exists()  # nothing half-valid was written


def test_reader_reads_every_known_major_and_rejects_only_an_unknown_one():
    old = contract.RunManifest.from_dict({"schema_version": 1, "launch_t0": 5.0, "launcher": "local", "slurm": None,
                                        "grad_accum_steps": 2, "status": "ok"})
    assert (old.launch.t0, old.launch.kind, old.grad_accum, old.status) == (5.0, "local", 2, "ok")
    assert old.schema_version == "2.0" and "schema_version 1" in old.notes[0]
    assert contract.RunManifest.from_dict({"schema_version": 2, "status": "running"}).schema_version == "2.0"
    for version in (3, "3.0", 0, "two"):
        with pytest.raises(contract.SchemaError, match=f"schema_version {version!r} is"):
            contract.RunManifest.from_dict({"schema_version": version})
    for version, whose in ((3, "a newer release of nanochat-bench reads it"), (0, "no release of nanochat-bench wrote"),
                           (-1, "no release")):  # a damaged version is not sent to an upgrade that cannot read it
        with pytest.raises(contract.SchemaError, match=f"reads majors 1, 2 \\({whose}"):
            contract.RunManifest.from_dict({"schema_version": version})
    with pytest.raises(contract.SchemaError, match="run.json: expected an object, got list"):
        contract.RunManifest.from_dict([1, 2])


def test_a_newer_minors_field_is_read_with_a_note_and_kept_on_rewrite(tmp_path):
    (tmp_path / contract.RUN_JSON).write_text(json.dumps({"schema_version": "2.7", "status": "running", "fp8": True,
                                                        "slurm": {"job_id": "7", "het_group": 1}}))
    m = contract.load_manifest(tmp_path)
    assert m.status == "running" and m.slurm.job_id == "7"
    assert any("'fp8'" in n for n in m.notes) and any("slurm: unknown field(s) 'het_group'" in n for n in m.notes)
    contract.update_run_json(tmp_path, nodes=2)  # an older writer rewrites it: nothing it does not know is lost
    data = json.loads((tmp_path / contract.RUN_JSON).read_text())
    assert (data["fp8"], data["slurm"]["het_group"], data["nodes"], data["schema_version"]) == (True, 1, 2, "2.7")
    ev = contract.parse_event({"event": "start", "t": 1.0, "gpu_clock_mhz": 1980}, notes := [])
    assert ev["gpu_clock_mhz"] == 1980 and "gpu_clock_mhz" in notes[0]



def test_a_newer_minors_field_of_an_evidence_entry_or_attempt_is_kept_on_rewrite(tmp_path):
    # the note said "kept", yet an older writer's rewrite (the batch script's copy of the contract) dropped them
    (tmp_path / contract.RUN_JSON).write_text(json.dumps({
        "schema_version": "2.7", "status": "running", "attempts": [{"job_id": "1", "status": "failed", "queue": "q"}],
        "evidence": [{"source": "trainer", "kind": "oom", "rank": 0, "message": "rank 0: out of memory", "pid": 42}]}))
    m = contract.load_manifest(tmp_path)
    assert any("evidence[0]: unknown field(s) 'pid' kept" in n for n in m.notes)
    m = contract.record_evidence(tmp_path, contract.Evidence(source="launcher", kind="exit", exit_code=1))
    assert (m.status, m.message) == ("oom", "rank 0: out of memory")
    data = json.loads((tmp_path / contract.RUN_JSON).read_text())
    assert [e.get("pid") for e in data["evidence"]] == [42, None] and data["attempts"][0]["queue"] == "q"
    contract.update_run_json(tmp_path, status="pending")  # a new launch: the old evidence goes, its fields with it
    assert json.loads((tmp_path / contract.RUN_JSON).read_text())["evidence"] == []

def test_events_are_checked_on_write_and_read(tmp_path):
    writer = contract.EventWriter(tmp_path)
    writer.emit("dist_init", world_size=2, backend="gloo")
    with pytest.raises(contract.SchemaError, match="step event: missing field 'loss'"):
        writer.emit("step", step=1)
    with pytest.raises(contract.SchemaError, match="unknown event 'teleport'"):
        writer.emit("teleport")
    with pytest.raises(contract.SchemaError, match="world_size: expected an integer"):
        contract.NullEventWriter().emit("dist_init", world_size="2", backend=None)  # checked without a run dir too
    writer.close()
    [line] = (tmp_path / contract.METRICS_JSONL).read_text().splitlines()
    event = contract.parse_event(json.loads(line))
    assert event["event"] == "dist_init" and event["world_size"] == 2 and event["t"] > 0
    with pytest.raises(contract.SchemaError, match="missing field 't'"):
        contract.parse_event({"event": "start"})


def test_an_integer_too_large_for_a_float_is_a_schema_error_not_a_crash():
    # json.loads reads 1e400 written as digits into an int; float() of it raised OverflowError past every reader
    with pytest.raises(contract.SchemaError, match="val event.val_bpb: expected a number, got an integer of 401"):
        contract.parse_event({"event": "val", "t": 1.0, "step": 1, "val_bpb": 10 ** 400})
    with pytest.raises(contract.SchemaError, match="run.json: flops_per_token: expected a number"):
        contract.RunManifest.from_dict({"schema_version": "2.3", "flops_per_token": 10 ** 400})


def test_nan_figures_stay_numbers():
    """A diverged loss is a real value of a step: NaN passes the type check (the analysis drops it)."""
    ev = contract.make_event("step", step=3, loss=math.nan, lrm=1.0, dt_ms=1.0, tok_per_sec=1.0, mfu=None,
                           total_time_s=0.0)
    assert math.isnan(ev["loss"])


def test_a_full_manifest_validates_against_the_json_schema():
    manifest = contract.RunManifest(run_id="r", status="ok", launch=contract.Launch(kind="local", t0=1.0),
                                  attempts=[contract.Attempt(job_id="1", status="failed")]).to_dict()
    jsonschema.validate(manifest, json.loads((SCHEMAS / "run.schema.json").read_text()))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**manifest, "launch_t0": 1.0}, json.loads((SCHEMAS / "run.schema.json").read_text()))


def test_close_unfinished_is_the_one_last_word(tmp_path):
    contract.update_run_json(tmp_path, status="pending")
    (tmp_path / contract.TRAIN_LOG).write_text("Traceback ...\nImportError: no module named torch\n")
    m = contract.close_unfinished(tmp_path, 1, "torchrun")
    assert m.status == "failed" and [(e.source, e.kind, e.exit_code) for e in m.evidence] == [("launcher", "exit", 1)]
    assert m.message == "the trainer never started (torchrun exit code 1): ImportError: no module named torch"
    contract.update_run_json(tmp_path, status="ok", message=None)
    assert contract.close_unfinished(tmp_path, 0, "srun").status == "ok"  # a recorded final status stays


def test_atomic_target_leaves_nothing_on_failure(tmp_path):
    path = tmp_path / "out.txt"
    contract.write_text_atomic(path, "old")
    with pytest.raises(RuntimeError):
        with contract.atomic_target(path) as tmp:
            Path(tmp).write_text("half")
            raise RuntimeError("disk went away")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_atomic_target_keeps_the_umask_without_setting_it(tmp_path, monkeypatch):
    """Setting the umask to 0 and back to read it would leave it 0 for an instant, in which a file another thread
    creates (a rank's heartbeat thread writes beside its checkpoint) would be world-writable."""
    old = os.umask(0o027)
    try:
        monkeypatch.setattr(os, "umask", lambda mask: pytest.fail(f"os.umask({mask:o}) called"))
        contract.write_text_atomic(tmp_path / "out.txt", "text")
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o640


def test_the_schema_command_takes_help_and_names_a_folder_it_cannot_write(tmp_path, monkeypatch, capsys):
    """`python -m bench.contract --help` wrote the schemas into a new folder named `--help`."""
    from bench.contract.generate import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as ended:
        main(["--help"])
    assert ended.value.code == 0 and "write run.schema.json" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("")
    assert main([str(tmp_path / "file" / "schemas")]) == 1
    assert capsys.readouterr().err.startswith(f"error: cannot write {tmp_path / 'file' / 'schemas'}")
    # a file for DIR (run.json for its folder) was reported as `.../run.json/run.schema.json: File exists`
    assert main([str(tmp_path / "file")]) == 1
    assert f"{tmp_path / 'file'} is a file, or has one in its path: give a directory" in capsys.readouterr().err
    assert main(["out"]) == 0 and sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        contract.json_schemas())
