"""How a run ended, settled from its evidence by one table (bench/contract/outcome.py).

    python -m pytest tests/unit/contract/test_outcome_precedence.py -q
"""

import json

import pytest

from bench.contract import FINAL_STATUSES, KINDS, PRECEDENCE, Evidence, record_evidence, settle
from bench.contract.files import load_manifest, update_run_json


SAID = object()  # the default: a message naming who saw what


def ev(kind, source="trainer", rank=None, message=SAID):
    return Evidence(source=source, kind=kind, rank=rank, message=f"{source} saw {kind}" if message is SAID else message)


# Each case: the evidence in the order it was written, then the status and the deciding entry's message.
CASES = [
    ("nothing seen", [], None),
    ("a finished run stays ok whatever ended the job after",
     [ev("completed", message=None), ev("node_lost", "batch_script"), ev("time_limit", "status")], ("ok", None)),
    ("a lost node over the survivors' errors and the time limit",
     [ev("peer_lost", rank=0), ev("cancelled", rank=1), ev("time_limit", "batch_script"),
      ev("node_lost", "batch_script")], ("failed", "batch_script saw node_lost")),
    ("the time limit over the SIGTERM it sent", [ev("cancelled", rank=0), ev("time_limit", "batch_script")],
     ("timeout", "batch_script saw time_limit")),
    ("a stopped rank (hung) over the timeouts of the others",
     [ev("nccl_timeout", rank=0), ev("hung", rank=1), ev("time_limit", "probe")], ("timeout", "probe saw time_limit")),
    ("hung over a wrong network", [ev("wrong_network", rank=0), ev("hung", "wrapper")], ("hung", "wrapper saw hung")),
    ("a wrong network over a divergence", [ev("diverged", rank=0), ev("wrong_network", rank=0)],
     ("wrong_network", "trainer saw wrong_network")),
    ("a divergence over an OOM", [ev("oom", rank=1), ev("diverged", rank=0)], ("diverged", "trainer saw diverged")),
    ("oom and no_data share a row: the first wins", [ev("no_data", rank=1), ev("oom", rank=0)],
     ("no_data", "trainer saw no_data")),
    ("an OOM over a rank's own error", [ev("error", rank=0), ev("oom", rank=1)], ("oom", "trainer saw oom")),
    ("a rank's own error over torchrun's word on another rank",
     [ev("error", rank=0), ev("rank_killed", "wrapper", rank=1)], ("failed", "trainer saw error")),
    ("a collective timeout is a rank's own error: the first one wins",
     [ev("nccl_timeout", rank=1), ev("error", rank=0)], ("nccl_timeout", "trainer saw nccl_timeout")),
    ("a killed rank over the peer that lost it", [ev("peer_lost", rank=0), ev("rank_killed", "wrapper", rank=1)],
     ("failed", "wrapper saw rank_killed")),
    ("a lost peer over a rank that exited unexplained", [ev("peer_lost", rank=0), ev("rank_exited", "wrapper", rank=1)],
     ("failed", "trainer saw peer_lost")),
    ("torchrun's word on a rank that recorded its own end is its echo",
     [ev("cancelled", rank=1), ev("rank_exited", "wrapper", rank=1)], ("cancelled", "trainer saw cancelled")),
    ("an unexplained exit over the ranks' cancels", [ev("cancelled", rank=0), ev("rank_exited", "wrapper", rank=1)],
     ("failed", "wrapper saw rank_exited")),
    ("a launcher's signal over the teardown's cancels", [ev("cancelled", rank=0), ev("stopped", "wrapper"),
                                                         ev("stopped", "launcher")], ("cancelled", "wrapper saw stopped")),
    ("a cancel over the exit code", [ev("exit", "launcher"), ev("cancelled", rank=0)],
     ("cancelled", "trainer saw cancelled")),
    ("the exit code when nothing else was seen", [ev("exit", "batch_script")], ("failed", "batch_script saw exit")),
    ("not submitted", [ev("not_submitted", "submit")], ("failed", "submit saw not_submitted")),
]


@pytest.mark.parametrize("evidence,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_precedence(evidence, expected):
    assert settle(evidence) == expected
    assert settle([e.__dict__ for e in evidence]) == expected  # as read back from run.json


def test_every_kind_has_one_row_and_gives_a_final_status():
    kinds = [k for row in PRECEDENCE for k in row[0]]
    assert sorted(kinds) == sorted(set(kinds)) == sorted(KINDS)
    assert all(settle([ev(k)])[0] in FINAL_STATUSES for k in KINDS)
    assert {"diverged", "wrong_network"} <= set(FINAL_STATUSES)


def test_record_evidence_appends_and_settles(tmp_path):
    update_run_json(tmp_path, status="running")
    record_evidence(tmp_path, ev("cancelled", rank=0, message="rank 0: received SIGTERM (signal 15)"))
    m = record_evidence(tmp_path, ev("time_limit", "batch_script", message="the run reached its time limit"))
    assert (m.status, m.message, [e.kind for e in m.evidence]) == ("timeout", "the run reached its time limit",
                                                                   ["cancelled", "time_limit"])
    assert load_manifest(tmp_path).finished_at is not None


def test_a_status_written_as_a_field_counts_as_evidence(tmp_path):
    # release 7031fbf wrote status and message only; an older writer still may
    update_run_json(tmp_path, status="oom", message="rank 1: out of memory")
    m = record_evidence(tmp_path, ev("rank_exited", "wrapper", rank=3))
    assert (m.status, m.message) == ("oom", "rank 1: out of memory")
    assert [(e.source, e.kind) for e in m.evidence] == [("record", "oom"), ("wrapper", "rank_exited")]


def test_a_new_launch_starts_with_no_evidence(tmp_path):
    record_evidence(tmp_path, ev("completed", message=None))
    m = update_run_json(tmp_path, status="pending")
    assert (m.status, m.evidence) == ("pending", [])


def test_a_newer_minors_evidence_kind_is_kept_and_a_writer_still_settles(tmp_path):
    # a run.json a newer release wrote: its kind is read as a note; appending to it ended in a KeyError
    update_run_json(tmp_path, status="running")
    path = tmp_path / "run.json"
    data = json.loads(path.read_text())
    data.update(status="oom", message="rank 0: out of memory",
                evidence=[{"source": "trainer", "kind": "gpu_fell_off", "message": "rank 0: out of memory"}])
    path.write_text(json.dumps(data))
    m = record_evidence(tmp_path, ev("exit", "launcher"))
    assert (m.status, m.message) == ("oom", "rank 0: out of memory")
    assert [e.kind for e in m.evidence] == ["gpu_fell_off", "oom", "exit"]
