"""Contract 2.2 reads what 2.1 wrote, as it is, and a rewrite raises the file to 2.2; 2.2's own fields (the image
step: launch.image_ready_at, launch.image_step, image.file) round-trip.

    python -m pytest tests/unit/contract/test_contract_minor_versions.py -q
"""

from bench import contract


def test_a_2_1_run_is_read_without_notes_and_rewritten_as_2_2(tmp_path):
    old = {"schema_version": "2.1", "run_id": "r", "status": "ok", "launch": {"kind": "slurm", "t0": 1.0},
           "image": {"reference": "/img/nb.sqsh", "digest": "sha256:" + "0" * 64}}
    m = contract.RunManifest.from_dict(old)
    assert m.notes == [] and m.launch.image_ready_at is None and m.image.file is None
    assert contract.SCHEMA_VERSION == "2.2"
    new = m.merged({"launch": {"image_ready_at": 2.5, "image_step": "an import"}, "image": {"file": "/img/nb.sqsh"}})
    data = new.to_dict()
    assert data["schema_version"] == "2.2" and data["launch"]["t0"] == 1.0 and data["launch"]["image_ready_at"] == 2.5
    assert data["image"] == {**old["image"], "id": None, "build": None, "file": "/img/nb.sqsh"}
    assert contract.RunManifest.from_dict(data).launch.image_step == "an import"
