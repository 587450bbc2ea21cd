"""EDF rendering: valid TOML with CE's documented keys and types, hostile values round-trip, bad input named.
    python -m pytest tests/unit/runtimes/test_edf.py -q
"""

import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.errors import RuntimeConfigError
from bench.runtimes import edf

CHECKED_IN = sorted((Path(__file__).resolve().parents[3] / "edf").glob("*.toml"))

# Top-level EDF keys and their TOML types (docs.cscs.ch, container-engine/edf).
EDF_KEYS = {"base_environment": (str, list), "image": str, "workdir": str, "entrypoint": bool,
            "writable": bool, "mounts": list, "env": dict, "annotations": dict}


def flatten(table: dict, prefix: str = "") -> dict:
    """TOML dotted keys come back as nested tables; CE reads them as dotted annotation names."""
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def check_edf_types(doc: dict) -> None:
    """Assert that a parsed EDF has only documented keys, each of its documented type."""
    for key, value in doc.items():
        assert key in EDF_KEYS, f"undocumented EDF key {key!r}"
        assert isinstance(value, EDF_KEYS[key]), f"{key} is {type(value).__name__}"
    assert all(isinstance(m, str) for m in doc.get("mounts", []))
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in doc.get("env", {}).items())
    assert all(isinstance(v, str) for v in flatten(doc.get("annotations", {})).values())


def test_defaults_render_to_documented_keys_and_values():
    doc = tomllib.loads(edf.render_edf(edf.NGC_IMAGE, mounts=edf.DEFAULT_MOUNTS, workdir=edf.WORKDIR))
    check_edf_types(doc)
    assert doc["image"] == "nvcr.io#nvidia/pytorch:25.10-py3"
    assert doc["mounts"] == ["${SCRATCH}:${SCRATCH}"]
    assert doc["workdir"] == "/workspace/nanochat-bench"
    assert doc["writable"] is True
    assert doc["env"] == edf.DEFAULT_ENV
    assert doc["env"]["NANOCHAT_BASE_DIR"] == "${SCRATCH}/nanochat-bench/cache"
    assert doc["env"]["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert not [k for k in doc["env"] if k.startswith(("NCCL_NET", "NCCL_CROSS_NIC", "FI_"))]  # the hook's to set
    assert flatten(doc["annotations"]) == {"com.hooks.aws_ofi_nccl.enabled": "true",
                                           "com.hooks.aws_ofi_nccl.variant": "cuda-dl"}


@pytest.mark.parametrize("path", CHECKED_IN, ids=lambda p: p.name)
def test_checked_in_edf_has_documented_keys(path):
    doc = tomllib.loads(path.read_text())
    check_edf_types(doc)
    assert doc["workdir"] == edf.WORKDIR
    assert doc["env"]["NANOCHAT_BASE_DIR"] == "${SCRATCH}/nanochat-bench/cache"
    # CE's [env] wins over the host's: a K here overrode the one exported for a larger sweep (the plan's)
    assert "NANOCHAT_VAL_FILES_K" not in doc["env"]


def test_empty_env_and_annotations_leave_their_tables_out():
    doc = tomllib.loads(edf.render_edf("/scratch/img.sqsh", env={}, annotations={}, writable=False))
    assert doc == {"image": "/scratch/img.sqsh", "writable": False}


@pytest.mark.parametrize("value", ['say "hi"', "back\\slash", "two\nlines", "$(rm -rf /)", "tab\there",
                                   "bell\x07 del\x7f", "unicode é ✓", "${SCRATCH:-}/x", "'single'", ""])
def test_hostile_values_round_trip(value):
    text = edf.render_edf("img", mounts=["/a:/b"], workdir=value,
                          env={"X": value}, annotations={"com.example.v": value})
    doc = tomllib.loads(text)
    assert doc["workdir"] == value and doc["env"]["X"] == value
    assert flatten(doc["annotations"])["com.example.v"] == value


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_string_round_trips(value):
    assert tomllib.loads(f"v = {edf.toml_string(value)}")["v"] == value


def test_keys_that_are_not_bare_are_quoted():
    assert edf.toml_key("NCCL_NET") == "NCCL_NET"
    assert edf.toml_dotted_key("com.hooks.x y.z") == 'com.hooks."x y".z'
    doc = tomllib.loads(edf.render_edf("img", env={}, annotations={"com.hooks.x y.z": "1"}))
    assert doc["annotations"]["com"]["hooks"]["x y"]["z"] == "1"


def test_header_lines_become_comments():
    text = edf.render_edf("img", header="line one\nline two")
    assert text.startswith("# line one\n# line two\nimage = ")


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(mounts=["scratch:/scratch"]), "EDF mount 'scratch:/scratch' has the relative SRC 'scratch'; a mount is"),
    (dict(mounts=["/a"]), "'/a' has 1 ':'-separated part(s); a mount is SRC:DST"),
    (dict(mounts=["/a:relative"]), "has the relative DST 'relative'"),
    (dict(mounts=["/a:/b:RO"]), "flags joined by +"),
    (dict(mounts="/a:/b"), "list of SRC:DST strings"),
    (dict(env={"1BAD": "x"}), "'1BAD' is not a valid environment variable name"),
    (dict(env={"N": 1}), "[env] value of N must be a string, got int"),
    (dict(annotations={"com.hooks.cxi.enabled": True}), 'use "true", not true'),
    (dict(annotations={"com..x": "1"}), "must be dotted words"),
    # CE reads only the strings "true" and "false"; its hook would be left as it was, unsaid
    (dict(annotations={"com.hooks.cxi.enabled": "yes"}),
     "EDF annotation com.hooks.cxi.enabled = 'yes': a hook's enabled annotation is \"true\" or \"false\""),
    (dict(annotations={"com.hooks.aws_ofi_nccl.enabled": "True"}), "com.hooks.aws_ofi_nccl.enabled = 'True'"),
    (dict(annotations={"com.hooks.a": "1", "com.hooks.a.b": "2"}), "clash"),
])
def test_bad_input_is_named(kwargs, fragment):
    with pytest.raises(RuntimeConfigError, match=None) as info:
        edf.render_edf("img", **kwargs)
    assert fragment in str(info.value)


@pytest.mark.parametrize("image", ["", "  ", "a\nb"])
def test_bad_image_is_named(image):
    with pytest.raises(RuntimeConfigError, match="registry reference"):
        edf.render_edf(image)


def test_good_mount_forms_pass():
    for mount in ["/a:/b", "/a:/b:ro", "/a:/b:ro+private", "./img.sqsh:/data:sqsh", "${SCRATCH}:${SCRATCH}"]:
        assert edf.check_mount(mount) == mount


def test_ofi_variant_is_checked():
    assert edf.ofi_nccl_annotations("cuda13")["com.hooks.aws_ofi_nccl.variant"] == "cuda13"
    with pytest.raises(RuntimeConfigError, match="cuda-dl, cuda13"):
        edf.ofi_nccl_annotations("cuda11")


@pytest.mark.parametrize("header", ["bell\x07", "cr\rx", "nel\x85", "ls\u2028x", "esc\x1b"])
def test_a_header_with_control_characters_is_refused(header):
    """Header lines are TOML comments, which may hold no control character but tab."""
    with pytest.raises(RuntimeConfigError, match="header"):
        edf.render_edf("img", header=header)


def test_header_splits_only_at_newlines():
    assert edf.render_edf("img", env={}, annotations={}, header="a\tb\nc").startswith("# a\tb\n# c\nimage = ")


@pytest.mark.parametrize("kwargs", [dict(image="/x/\udcff.sqsh"), dict(mounts=["/a\udcff:/b"]),
                                    dict(workdir="/w\udcff"), dict(env={"X": "\udcff"}),
                                    dict(annotations={"com.x": "\udcff"})], ids=str)
def test_text_that_is_not_utf8_is_refused(kwargs):
    """A surrogate (an undecodable byte of a command-line argument) cannot be written as UTF-8 TOML."""
    kwargs = {"image": "img", **kwargs}
    with pytest.raises(RuntimeConfigError, match="not UTF-8"):
        edf.render_edf(kwargs.pop("image"), **kwargs)
