"""The run contract: what a run directory holds and how a run's end is settled. Standard library only,
Python 3.8 syntax: `ship` copies this package beside each sweep's jobs, where the batch script imports
it with the cluster's own python3, outside any container (bench/launch/jobrecord.py).

    validate.py   values checked against the dataclasses: strict for writers, noting for readers
    versions.py   schema_version MAJOR.MINOR; the migration of older majors (1: release 7031fbf)
    outcome.py    statuses, Evidence, the precedence table and settle()
    record.py     run.json: sections, RunManifest, file and variable names
    events.py     metrics.jsonl: event classes, make_event/parse_event, the event writers
    files.py      atomic writes, run.json updates, record_evidence, close_unfinished, reserved space
    generate.py   the JSON Schemas (bench/schemas/) generated from the classes
    __main__.py   `python -m bench.contract [DIR]`: those schemas printed, or written into DIR
"""

import os

from .events import EVENTS, EventWriter, NullEventWriter, event_writer, make_event, parse_event
from .files import (RunJsonError, atomic_target, close_unfinished, load_manifest, log_tail, read_run_json,
                    record_evidence, release_space, reserve_space, slurm_facts, update_run_json, write_json_atomic,
                    write_manifest, write_synced, write_text_atomic)
from .generate import json_schemas
from .outcome import FINAL_STATUSES, KINDS, PRECEDENCE, STATUSES, Evidence, never_started, settle, status_of
from .record import (ENV_BASE_DIR, ENV_FORCE_FLASH_SDPA, ENV_RUN_DIR, ENV_T0, ENV_VAL_FILES_K, METRICS_JSONL,
                     NNTILE_WORKLOAD, RUN_JSON, TRAIN_LOG, WORKLOAD, Attempt, Launch, RunManifest)
from .validate import SchemaError, field
from .versions import SCHEMA_VERSION

MODULES = ("__init__", "validate", "versions", "outcome", "record", "events", "files", "generate")

__all__ = ['EVENTS', 'EventWriter', 'NullEventWriter', 'event_writer', 'make_event', 'parse_event', 'atomic_target',
           'close_unfinished', 'load_manifest', 'log_tail', 'read_run_json', 'record_evidence', 'release_space',
           'reserve_space', 'slurm_facts', 'update_run_json', 'write_json_atomic', 'write_manifest',
           'write_synced', 'write_text_atomic', 'json_schemas', 'FINAL_STATUSES', 'KINDS', 'PRECEDENCE', 'STATUSES',
           'Evidence', 'never_started', 'settle', 'status_of', 'ENV_BASE_DIR', 'ENV_FORCE_FLASH_SDPA', 'ENV_RUN_DIR',
           'ENV_T0', 'ENV_VAL_FILES_K', 'METRICS_JSONL', 'NNTILE_WORKLOAD', 'RUN_JSON', 'TRAIN_LOG', 'WORKLOAD',
           'Attempt', 'Launch', 'RunManifest', 'SchemaError', 'field', 'SCHEMA_VERSION', 'ship', 'MODULES',
           'RunJsonError']


def ship(lib_dir: "str | os.PathLike") -> str:
    """Copy this package into `<lib_dir>/contract/` (for the host's python3 beside the jobs); its path."""
    here = os.path.dirname(os.path.abspath(__file__))
    target = os.path.join(os.fspath(lib_dir), "contract")
    for name in MODULES:
        with open(os.path.join(here, name + ".py")) as f:
            write_text_atomic(os.path.join(target, name + ".py"), f.read())
    return target
