"""benchmarks/bench_tokenizer.py: a text that is not in place is one line, not a traceback."""

import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_tokenizer.py"


def test_shards_not_staged_are_one_line_naming_the_command_that_stages_them(tmp_path, capsys, monkeypatch):
    sys.path.insert(0, str(SCRIPT.parent))
    import bench_tokenizer

    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    assert bench_tokenizer.main(["--text", "shards"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: --text shards: 0 shard file(s) in {tmp_path / 'base_data'}")
    assert "run `nanochat-bench data generate`" in err and err.count("\n") == 1
