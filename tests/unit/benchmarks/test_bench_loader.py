"""benchmarks/bench_loader.py: its refusals of settings it cannot measure."""

import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_loader.py"


def test_threads_0_is_refused_before_any_data_is_made(capsys, monkeypatch):
    """It generated shards and a tokenizer, then ended in a ThreadPoolExecutor traceback."""
    sys.path.insert(0, str(SCRIPT.parent))
    import bench_loader

    monkeypatch.setattr(bench_loader, "ensure_data", lambda vocab_size: pytest.fail("data made for --threads 0"))
    with pytest.raises(SystemExit) as e:
        bench_loader.main(["--threads", "2", "0"])
    assert e.value.code == 2
    assert capsys.readouterr().err.endswith("error: --threads: each count must be >= 1, not 0\n")
