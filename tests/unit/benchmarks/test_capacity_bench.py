"""benchmarks/capacity_bench.py: its summary of the memory model's error."""

import re
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "capacity_bench.py"


def test_the_median_error_is_the_median():
    """Of an even count it was the larger middle value (20.0% here), above half of the errors."""
    sys.path.insert(0, str(SCRIPT.parent))
    import capacity_bench

    rows = [{"error": e} for e in (0.05, -0.10, 0.20, -0.40, None)]
    assert capacity_bench.error_line(rows) == \
        "memory model vs measured peak: 4 probe(s), largest error 40.0%, median 15.0%"
    assert capacity_bench.error_line([]) == "memory model vs measured peak: 0 probe(s)"


def test_max_batch_0_is_refused_naming_the_flag_not_read_as_the_default(tmp_path, capsys):
    sys.path.insert(0, str(SCRIPT.parent))
    import capacity_bench

    assert capacity_bench.main([str(tmp_path / "out"), "--tiny", "--max-batch", "0"]) == 1
    assert capsys.readouterr().err == "error: --max-batch=0: must be positive\n"
    assert not (tmp_path / "out").exists()


def test_strategies_are_read_as_the_cli_reads_them(tmp_path, capsys):
    """Regression: the script split --strategies on commas alone, so 'fsdp, zero2' passed the check as ' zero2' (a
    run directory `runs/ zero2/`) and an empty item was refused as --strategies=''; the CLI trims and skips them."""
    from bench.cli import main as cli

    sys.path.insert(0, str(SCRIPT.parent))
    import capacity_bench

    refusal = r"--strategies zero2 with --gpus 3: zero2's sharded AdamW .* or leave zero2 out \(fsdp splits unevenly\)"
    for text in ("fsdp, zero2", "fsdp,,zero2 "):  # zero2 on 3 ranks: refused before any probe, naming it as given
        assert capacity_bench.main([str(tmp_path / "out"), "--tiny", "--gpus", "3", "--strategies", text]) == 1
        assert re.fullmatch(f"error: {refusal}\n", capsys.readouterr().err)
        assert cli(["capacity", "--gpus", "3", "--strategies", text, "--out", str(tmp_path / "out")]) == 1
        assert re.fullmatch(f"error: {refusal}\n", capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_a_budget_that_is_not_positive_is_refused_without_promising_no_bound(tmp_path, capsys):
    """Regression: the refusal said 'leave it out for no bound', while leaving it out here gives 480 s."""
    sys.path.insert(0, str(SCRIPT.parent))
    import capacity_bench

    for budget in ("0", "-5", "nan"):
        assert capacity_bench.main([str(tmp_path / "out"), "--tiny", "--budget", budget]) == 1
        assert capsys.readouterr().err == f"error: --budget={float(budget):g}: must be positive seconds\n"
    assert not (tmp_path / "out").exists()


def test_an_interrupt_before_any_probe_finished_does_not_point_at_a_summary(tmp_path, capsys, monkeypatch):
    """Regression: Ctrl-C before the first probe finished said the finished probes are in OUT/summary.json, a file
    the sweep writes only once a probe has finished (none was there)."""
    sys.path.insert(0, str(SCRIPT.parent))
    import capacity_bench

    class Stopped:
        def __init__(self, cfg, log):
            pass

        def run(self):
            raise KeyboardInterrupt

    monkeypatch.setattr(capacity_bench, "Sweep", Stopped)
    monkeypatch.setattr(capacity_bench, "SweepConfig", lambda **kw: kw)
    out = tmp_path / "out"
    assert capacity_bench.main([str(out), "--tiny"]) == 130
    assert capsys.readouterr().err == "interrupted before any probe finished; nothing summarised\n"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    assert capacity_bench.main([str(out), "--tiny"]) == 130
    assert capsys.readouterr().err == f"interrupted; the finished probes are in {out.resolve() / 'summary.json'}\n"
