"""Checking plain data against the contract's dataclasses: a value against its annotation (str, int,
float, bool, Optional, Literal, List, Dict, a dataclass).

Writers are checked strictly: a field the contract does not have is a SchemaError naming where it is.
Readers are lenient where a newer minor release may have added something: a `Reading` collects each
unknown field as a note and keeps its value, so the run is read and a rewrite loses nothing.
A reader checks every event of thousands of runs, so the per-class field lists are made once and a
field's place in the file is spelled out only when it is wrong.
"""

import dataclasses
import functools
from typing import Any, Dict, List, Tuple, Union

try:
    from typing import Literal, get_args, get_origin
except ImportError:  # pragma: no cover - Python < 3.8 cannot run the contract
    import sys
    raise SystemExit("nanochat-bench's run records need Python >= 3.8 (this is %s)" % sys.version.split()[0])


class SchemaError(ValueError):
    """A value that the contract does not allow; the message starts with where it is (`run.json: slurm.job_id`)."""


def field(default: Any = None, doc: str = ""):
    """A field with a default and its one-line meaning (the JSON Schema's description)."""
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"doc": doc})
    return dataclasses.field(default=default, metadata={"doc": doc})


class Reading:
    """What a lenient read found beside the contract: notes for the reader, unknown values to keep."""

    def __init__(self, retired: "frozenset | set" = frozenset()):
        self.notes: List[str] = []
        self.unknown: Dict[Tuple[str, ...], Any] = {}  # path inside the file (section, field) -> value
        self.retired = retired  # paths an earlier minor wrote: kept, not worth a note

    def keep(self, path: Tuple[str, ...], data: Dict[str, Any], names: List[str]) -> None:
        new = [n for n in names if path[1:] + (n,) not in self.retired]
        if new:
            self.notes.append(f"{where(path)}: unknown field(s) {', '.join(map(repr, new))} kept, not checked "
                              f"(written by a newer release?)")
        for name in names:
            self.unknown[path[1:] + (name,)] = data[name]


def where(path: Tuple[str, ...]) -> str:
    """("run.json", "slurm", "job_id") -> "run.json: slurm.job_id"."""
    return path[0] + (": " + ".".join(path[1:]) if len(path) > 1 else "")


def _fail(path: Tuple[str, ...], message: str) -> SchemaError:
    return SchemaError(f"{where(path)}: {message}")


@functools.lru_cache(maxsize=None)
def fields_of(cls) -> Tuple[Tuple[str, Any, bool, Any], ...]:
    """(name, type, required, default) of each field of a dataclass."""
    out = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append((f.name, f.type, required, None if f.default is dataclasses.MISSING else f.default))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _shape(tp: Any) -> Tuple[Any, Tuple[Any, ...]]:
    return get_origin(tp), get_args(tp)


def values(cls, data: Any, path: Tuple[str, ...], reading: "Reading | None" = None) -> Dict[str, Any]:
    """The fields of the dataclass `cls` from `data`, each checked against its annotation; an optional
    field left out gets its plain default (a default factory is left to the class). An unknown field is
    an error, or with a `reading` a note."""
    if not isinstance(data, dict):
        raise _fail(path, f"expected an object, got {type(data).__name__}")
    fields = fields_of(cls)
    if len(data) > len(fields) or not data.keys() <= {f[0] for f in fields}:
        unknown = sorted(set(data) - {f[0] for f in fields})
        if reading is None:
            raise _fail(path, f"unknown field(s) {', '.join(map(repr, unknown))}")
        reading.keep(path, data, unknown)
    out = {}
    for name, tp, required, default in fields:
        if name in data:
            out[name] = check(data[name], tp, path, name, reading)
        elif required:
            raise _fail(path, f"missing field {name!r}")
        else:
            out[name] = default
    return out


def build(cls, data: Any, path: Tuple[str, ...], reading: "Reading | None" = None):
    """An instance of the dataclass `cls` from `data`, each field checked against its annotation."""
    checked = values(cls, data, path, reading)
    return cls(**{k: v for k, v in checked.items() if k in data})


def check(value: Any, tp: Any, path: Tuple[str, ...], name: str, reading: "Reading | None" = None) -> Any:
    """`value` of the field `name` (at `path`) as its annotation `tp` allows, or SchemaError."""
    if tp is float:
        if type(value) is float:
            return value
        if type(value) is int:
            try:
                return float(value)
            except OverflowError:  # JSON's integers have no bound; no float holds this one
                raise _fail(path + (name,), f"expected a number, got an integer of {len(str(value))} digits "
                                            f"(too large for a float)") from None
        raise _fail(path + (name,), f"expected a number, got {value!r}")
    if tp is int:
        if type(value) is int:
            return value
        raise _fail(path + (name,), f"expected an integer, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return str(value)  # a subclass (torch's TorchVersion) is written as the plain string
        raise _fail(path + (name,), f"expected str, got {type(value).__name__} {value!r}")
    if tp is bool:
        if type(value) is bool:
            return value
        raise _fail(path + (name,), f"expected bool, got {type(value).__name__} {value!r}")
    if tp is Any:
        return value
    origin, args = _shape(tp)
    if origin is Union:  # Optional[X]: None, or an X
        return None if value is None else check(value, args[0], path, name, reading)
    if origin is Literal:
        if value not in args:
            known = ', '.join(map(repr, args))
            if reading is not None and isinstance(value, str):  # a newer minor's word (a status, a kind): kept
                reading.notes.append(f"{where(path + (name,))}: {value!r} is not one of {known}; kept, not checked "
                                     f"(written by a newer release?)")
                return value
            raise _fail(path + (name,), f"{value!r} is not one of {known}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise _fail(path + (name,), f"expected a list, got {type(value).__name__}")
        return [check(v, args[0], path, f"{name}[{i}]", reading) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise _fail(path + (name,), f"expected an object with string keys, got {type(value).__name__}")
        return {k: check(v, args[1], path + (name,), k, reading) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path + (name,), reading)
    raise TypeError(f"the run contract cannot check the annotation {tp!r}")  # a bug in the contract, not the data
