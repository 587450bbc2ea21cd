"""contract.read_run_json: none yet is {}, a damaged file is a RunJsonError, a failure to read is an OSError.

    python -m pytest tests/unit/contract/test_read_run_json.py -q
"""

import pytest

from bench.contract import RunJsonError, read_run_json


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
