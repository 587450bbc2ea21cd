"""JSON Schemas (draft 2020-12) generated from the contract's classes: one source of truth, checked in
(bench/schemas/) for tools outside Python (ReFrame, jq).

    python -m bench.contract bench/schemas     # refresh the checked-in copies after changing a class
"""

import argparse
import dataclasses
import errno
import json
import os
import sys
from typing import Any, Dict, List, Optional, Union

from .events import EVENT_TYPES
from .record import _FIELD_TYPES, RunManifest
from .validate import Literal, get_args, get_origin
from .files import write_text_atomic
from .versions import MAJOR

_NONE = type(None)


def _json_type(tp: Any) -> Dict[str, Any]:
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return {}
    if origin is Union:
        inner = _json_type(next(a for a in args if a is not _NONE))
        if "$ref" in inner or "enum" in inner:
            return {"anyOf": [inner, {"type": "null"}]}
        return {**inner, "type": [inner["type"], "null"]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _json_type(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _json_type(args[1])}
    if dataclasses.is_dataclass(tp):
        return {"$ref": f"#/$defs/{tp.__name__}"}
    return {"type": {str: "string", int: "integer", float: "number", bool: "boolean"}[tp]}


def _object_schema(cls, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    props, required = dict(extra or {}), list(extra or {})
    for f in dataclasses.fields(cls):
        prop = _json_type(f.type)
        if f.metadata.get("doc"):
            prop["description"] = f.metadata["doc"]
        props[f.name] = prop
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    out = {"type": "object", "properties": props, "additionalProperties": False}
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
        out["description"] = " ".join(cls.__doc__.split())
    if required:
        out["required"] = required
    return out


def json_schemas() -> Dict[str, Dict[str, Any]]:
    """{"run.schema.json": ..., "events.schema.json": ...}: the contract for tools outside Python, as this
    release writes it (a reader in Python also reads older majors and a newer minor's extra fields)."""
    sections = [tp for tp in _FIELD_TYPES.values() if dataclasses.is_dataclass(tp)]
    sections += [get_args(_FIELD_TYPES[name])[0] for name in ("attempts", "evidence")]
    run = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "nanochat-bench run.json",
           **_object_schema(RunManifest), "$defs": {c.__name__: _object_schema(c) for c in sections}}
    run["properties"]["schema_version"]["pattern"] = rf"^{MAJOR}\.[0-9]+$"
    events = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "title": "nanochat-bench metrics.jsonl (one event a line)",
              "oneOf": [_object_schema(cls, {"event": {"const": name}}) for name, cls in EVENT_TYPES.items()]}
    return {"run.schema.json": run, "events.schema.json": events}


def main(argv: Optional[List[str]] = None) -> int:
    """`python -m bench.contract [DIR]`: write the JSON Schemas into DIR, or print them."""
    # argparse, not argv[0]: `--help` or a typo'd option was taken for DIR and got a folder of that name
    parser = argparse.ArgumentParser(prog="python -m bench.contract",
                                     description="The run contract's JSON Schemas, generated from its classes.")
    parser.add_argument("dir", nargs="?", help="write run.schema.json and events.schema.json here (made if "
                                               "missing; e.g. bench/schemas); without it: print them")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    schemas = json_schemas()
    if args.dir is None:
        print(json.dumps(schemas, indent=2))
        return 0
    for name, schema in schemas.items():
        path = os.path.join(args.dir, name)
        try:
            write_text_atomic(path, json.dumps(schema, indent=2) + "\n")
        except OSError as e:
            # makedirs over a file says only "File exists", and the path it names (DIR/run.schema.json) hides why
            why = f"{args.dir} is a file, or has one in its path: give a directory" \
                if e.errno in (errno.EEXIST, errno.ENOTDIR) else e.strerror or e
            print(f"error: cannot write {path}: {why}", file=sys.stderr)
            return 1
        print(path)
    return 0
