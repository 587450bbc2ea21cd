"""Checks a run directory against the checked-in JSON Schemas (bench/schemas/), with the jsonschema
library: an independent reading of the contract, not the classes that generated it."""

import json
from pathlib import Path

import jsonschema

from bench import contract

SCHEMAS = Path(contract.__file__).resolve().parents[1] / "schemas"


def _validator(name: str):
    return jsonschema.Draft202012Validator(json.loads((SCHEMAS / name).read_text()))


def assert_follows_contract(run_dir) -> dict:
    """run.json and every metrics.jsonl line valid against the schemas; returns run.json."""
    run_dir = Path(run_dir)
    manifest = json.loads((run_dir / contract.RUN_JSON).read_text())
    errors = [f"run.json: {e.json_path}: {e.message}" for e in _validator("run.schema.json").iter_errors(manifest)]
    events = _validator("events.schema.json")
    path = run_dir / contract.METRICS_JSONL
    for i, line in enumerate(path.read_text().splitlines() if path.exists() else []):
        errors += [f"metrics.jsonl line {i + 1}: {e.message}" for e in events.iter_errors(json.loads(line))]
    assert not errors, "\n".join(errors[:20])
    return manifest
