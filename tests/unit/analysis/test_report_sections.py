"""The report's sections on generated sweeps with known answers: weak vs strong figures, start-up phases
with missing ones shown as missing, the step split, pre-flight busbw, the network path, findings in
words (a multi-node run forced onto sockets, with the real NCCL line of tests/assets/nccl), and
nanochat beside NNTile. Figure text is read from the SVGs (matplotlib writes SVG text as text).

python -m pytest tests/unit/analysis/test_report_sections.py -q
"""

import json
import re
from pathlib import Path

import pytest

from bench import contract, nccl_log
from bench.analysis import findings, scaling
from bench.analysis.collect import collect
from bench.analysis.report import write_report
from tests.support.synthetic import MILESTONE_S, SPAWN_S, SweepSpec, generate_sweep

SOCKET_LOG = Path(__file__).parents[2] / "assets" / "nccl" / "h200-1gpu-Socket.log"
STRONG = SweepSpec(world_sizes=(8, 16), repeats=2, steps=14, sweep_id="strong",
                   runtimes={"bare": 1.0, "ce": 1.0, "apptainer": 1.0}, noise=0.002,
                   startup_s={"bare": 5.0, "ce": 5.5, "apptainer": 5.0}, straggler={"apptainer": (3, 0.06)})
WEAK = SweepSpec(world_sizes=(8, 16, 32), repeats=1, steps=14, sweep_id="weak", scaling="weak",
                 runtimes={"bare": 1.0, "pyxis": 1.0}, startup_s={"bare": 5.0, "pyxis": 19.0},
                 efficiency_per_doubling=0.93, milestones=("runtime_start", "steady"), noise=0.0)
NNTILE = SweepSpec(world_sizes=(8,), repeats=1, steps=14, sweep_id="nntile", workload=contract.NNTILE_WORKLOAD,
                   strategy=None, runtimes={"bare": 0.5}, noise=0.0, detail=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One report of a strong runtime comparison (ce forced onto sockets, an apptainer straggler), a weak
    sweep (pyxis slow to start; imports and pre-flight not measured) and an NNTile run beside nanochat."""
    root = tmp_path_factory.mktemp("sections")
    sockets = nccl_log.parse_file(str(SOCKET_LOG))
    generate_sweep(root / "runs", SweepSpec(**{**STRONG.__dict__, "network": {"ce": sockets}}))
    generate_sweep(root / "runs", WEAK)
    generate_sweep(root / "runs", NNTILE)
    table = collect([root / "runs"]).table
    write_report(table, root / "report", source="runs")
    out = root / "report"
    return table, out, (out / "report.md").read_text(), out / "figures"


def section(md: str, config_start: str) -> str:
    """The Markdown of the config whose heading starts with config_start."""
    start = md.index(f"## {config_start}")
    end = md.find("\n## ", start + 3)
    return md[start:end if end > 0 else None]


def cells(text: str) -> str:
    return re.sub(r" {2,}", " ", text)


def md_rows(text: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table after `heading`, as {column: cell}."""
    lines = text[text.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([c.strip() for c in line.strip().strip("|").split("|")])
    header, rows = table[0], table[2:]  # the second line is the alignment row
    return [dict(zip(header, r, strict=True)) for r in rows]


def svg(figures: Path, table, config: str, name: str) -> str:
    """The text of a config's figure: configs are numbered in the order of their labels."""
    index = sorted(scaling.with_config(scaling.usable(table))["config"].unique()).index(config) + 1
    return next(figures.glob(f"{index:02d}-*-{name}.svg")).read_text()


STRONG_LABEL = "nanochat-base d20 · seq 2048 · strong scaling, batch 524,288 · zero2 · NVIDIA H200"
WEAK_LABEL = "nanochat-base d20 · seq 2048 · weak scaling, 32 x 2,048 tokens per rank · zero2 · NVIDIA H200"


def test_weak_and_strong_sweeps_are_their_own_configs_with_their_own_figures(report):
    table, _, md, figures = report
    assert f"## {STRONG_LABEL}" in md and f"## {WEAK_LABEL}" in md
    names = {i: {p.name.rsplit("-", 1)[1][:-4] for p in figures.glob(f"{i:02d}-*.png")} for i in (1, 2, 3)}
    configs = sorted(scaling.with_config(scaling.usable(table))["config"].unique())
    strong, weak = configs.index(STRONG_LABEL) + 1, configs.index(WEAK_LABEL) + 1
    assert "speedup" in names[strong] and "per_gpu" not in names[strong]
    assert "per_gpu" in names[weak] and "speedup" not in names[weak]
    # one weak curve although its total batch grows with the ranks
    weak_md = cells(section(md, WEAK_LABEL))
    for n in (8, 16, 32):
        assert f"| bare | {n} | {n // 8} | 1 |" in weak_md and f"| {32 * 2048 * n:,} |" in weak_md
    assert "ideal: flat at bare's 8 GPUs" in svg(figures, table, WEAK_LABEL, "per_gpu")
    assert "ideal (linear from 8 GPUs)" in svg(figures, table, STRONG_LABEL, "speedup")


def test_efficiency_figure_labels_the_gap_to_ideal(report):
    table, _, _, figures = report
    pts = scaling.scaling_table(table)
    weak = pts[(pts["config"] == WEAK_LABEL) & (pts["runtime"] == "bare")].sort_values("world_size")
    text = svg(figures, table, WEAK_LABEL, "efficiency")
    for e in weak["efficiency"].iloc[1:]:
        assert f"{100 * e:.1f}%" in text  # each point's efficiency is written beside it
    assert weak["efficiency"].iloc[-1] == pytest.approx(WEAK.efficiency_per_doubling ** 2, rel=1e-3)
    assert "Weak-scaling efficiency vs GPUs (ideal: flat)" in text


def test_start_up_phases_with_missing_ones_shown_as_missing(report):
    table, _, md, figures = report
    # the weak sweep recorded runtime_start but not imports_done, pre-flight or data_ready: '–', not 0
    phases = md_rows(section(md, WEAK_LABEL), "### Start-up phases")
    phase = next(r for r in phases if (r["runtime"], r["GPUs"]) == ("pyxis", "8"))
    assert phase["Python imports"] == phase["pre-flight"] == phase["data loaders"] == "–"
    assert float(phase["runtime start-up"]) == pytest.approx(WEAK.startup_s["pyxis"] - SPAWN_S, abs=0.05)
    # its time is in the next measured phase: process group holds the imports
    assert float(phase["process group"]) == pytest.approx(MILESTONE_S["imports_done"] + MILESTONE_S["dist_init"],
                                                          abs=0.05)
    text = svg(figures, table, WEAK_LABEL, "startup")
    assert "Python imports: not measured" in text and "pre-flight: not measured" in text
    assert "runtime start-up" in text and "runtime start-up: not measured" not in text


def test_the_start_up_figure_says_its_bars_are_sums_of_the_phases_medians():
    """Each bar ends at the sum of its phases' medians (18 s here), which the table's launch to 1st step (the median
    of each run's sum, 15 s) need not equal, and the axis read "median over repeats" as if they were one figure."""
    import pandas as pd

    from bench.analysis.plots_why import startup_phases

    point = {c: 2.0 for c in scaling.STARTUP_PHASES}
    point.update(runtime="bare", world_size=8, nodes=1, startup_overhead_s=6.0, launch_to_first_step_s=15.0)
    fig = startup_phases(pd.DataFrame([point]), "a config", "GPUs")
    assert fig.axes[0].get_xlabel() == ("seconds from launch\nthe phases' medians stacked: their sum, not the median "
                                        "launch to 1st step")


def test_the_methods_say_what_each_start_up_figure_of_the_summary_measures(report):
    """The summary's `1st step s` (imports to the first step) sat beside the phase table's much smaller `first
    step (compile)` with nothing saying they measure different spans."""
    _, _, md, _ = report
    assert "Start-up s = trainer start − launch" in md and "1st step s = first step − trainer start" in md


def test_step_split_and_busbw_beside_throughput(report):
    _, _, md, _ = report
    strong_md = section(md, STRONG_LABEL)
    split = {(r["runtime"], r["GPUs"]): r for r in md_rows(strong_md, "### Steady step split")}
    assert split[("bare", "8")]["exposed comm ms"] == "0.0 (0.0%)"
    assert split[("bare", "16")]["exposed comm ms"].endswith("(1.0%)")  # 1% of the step per node beyond the first
    busbw = {(r["runtime"], r["GPUs"]): r for r in md_rows(strong_md, "### Pre-flight bus bandwidth")}
    assert [busbw[("bare", n)]["all-reduce GB/s"] for n in ("8", "16")] == ["350.0", "40.0"]  # within / across nodes
    assert busbw[("bare", "16")]["tok/s"] == md_rows(strong_md, "**Findings.**")[1]["tok/s"]  # beside the summary's


def test_a_multi_node_run_forced_onto_sockets_is_a_finding_with_ncclS_line(report):
    _, _, md, _ = report
    line = next(raw.strip() for raw in SOCKET_LOG.read_text().splitlines() if "Using network Socket" in raw)
    strong_md = section(md, STRONG_LABEL)
    findings_md = strong_md.split("\n| runtime")[0]
    assert "- ce at 2 nodes: inter-node NCCL used NET/Socket (TCP) in 2 of 2 run(s)" in findings_md
    assert f"`{line}`" in findings_md
    # one node, or no NCCL facts
    assert "ce at 1 nodes" not in findings_md and "bare at 2 nodes: inter" not in findings_md
    network = cells(strong_md[strong_md.index("### Network path of each run"):])
    assert f"| ce-n16-r0 | strong/ce-n16-r0 | ce | 2 | 16 | Socket | – | – | {line} |" in network
    assert "| ce-n8-r0 | strong/ce-n8-r0 | ce | 1 | 8 | Socket | – | – | one node |" in network


def test_the_network_table_names_each_run_with_its_directory():
    """One run id recurs in every sweep (n1-bare-r1 in each of results/cpu-slurm-breakdown's eight), so the network
    table's rows, named by run id alone, could not be told apart; they carry the directory, as the runs tables do."""
    import pandas as pd

    from bench.analysis.tables import network_table

    runs = pd.DataFrame([{"run_id": "n1-bare-r1", "source": f"{sweep}/n1-bare-r1", "runtime": "bare", "nodes": 1,
                          "world_size": 2, "net": "gloo", "net_provider": None, "nccl_transports": None,
                          "net_over_sockets": None, "net_unverified": None} for sweep in ("off-1", "on-1")])
    table = network_table(runs, "ranks")
    assert table.columns[:2] == ["run", "directory"]
    assert [row[:2] for row in table.rows] == [["n1-bare-r1", "off-1/n1-bare-r1"], ["n1-bare-r1", "on-1/n1-bare-r1"]]


def test_findings_in_words_with_their_evidence(report):
    _, _, md, _ = report
    weak_findings = section(md, WEAK_LABEL).split("\n| runtime")[0]
    gap = WEAK.startup_s["pyxis"] - WEAK.startup_s["bare"]
    assert f"- pyxis start-up is {gap:.1f} s longer than bare (mean over 8, 16, 32 GPUs), most of it in " \
           f"runtime start-up (+{gap:.1f} s)" in weak_findings
    eff = 100 * WEAK.efficiency_per_doubling ** 2
    assert re.search(rf"- bare at 32 GPUs \(4 nodes\) reaches {eff:.1f}% parallel efficiency, below 90%: "
                     r"`tok/s per GPU [\d,]+ vs [\d,]+ at 8 GPUs; pre-flight busbw all_reduce 350 -> 40 GB/s`",
                     weak_findings)
    strong_findings = section(md, STRONG_LABEL).split("\n| runtime")[0]
    assert "- rank 3 on host nid000000 is the slowest rank of apptainer at 8 GPUs (1 node) in 2 of 2 run(s)" \
        in strong_findings
    assert "lie up to 6.0% of the median apart" in strong_findings
    # ce starts 0.5 s later than bare: below STARTUP_GAP_S, so no finding; equal throughput: no ratio finding
    assert 0.5 < findings.STARTUP_GAP_S and "ce start-up" not in strong_findings
    assert "slower than bare" not in strong_findings and "faster than bare" not in strong_findings


def test_nanochat_and_nntile_side_by_side(report):
    table, _, md, _ = report
    side = cells(md[md.index("## nanochat and NNTile side by side"):md.index("## Failed runs")])
    rows = [line for line in side.splitlines() if line.startswith("| 20 | 2,048 | 524,288 | NVIDIA H200 | 8 | 1 |")]
    assert [r.split(" | ")[6] for r in rows] == ["nanochat-base", "nanochat-base", "nanochat-base", "nanochat-base",
                                                 "nntile-gpt2"]
    nntile = table.loc[table["workload"] == "nntile-gpt2", "tok_per_sec"].iloc[0]
    # the weak sweep's 8-GPU point has the same shape (32 x 2048 x 8 = 524,288): it is compared too
    bare = table[(table["workload"] == "nanochat-base") & (table["runtime"] == "bare")
                 & (table["world_size"] == 8)]["tok_per_sec"]
    assert f"| {nntile:,.0f} | {nntile / bare.median():.2f} |" in rows[-1]  # tok/s and its ratio to nanochat's
    assert "| 16 |" not in side  # nntile ran 8 GPUs only: no other rank count is compared


def test_a_clean_sweep_has_no_findings(tmp_path):
    spec = SweepSpec(world_sizes=(8, 16), repeats=1, steps=12, runtimes={"bare": 1.0}, efficiency_per_doubling=0.99)
    generate_sweep(tmp_path / "runs", spec)
    write_report(collect([tmp_path / "runs"]).table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "**Findings.** None: no gap in these runs passes its threshold." in md


def test_efficiency_above_ideal_is_flagged_and_strong_scaling_has_a_throughput_figure(tmp_path):
    """A point beyond 100% efficiency is a finding (not a gain taken as is); strong scaling draws tok/s
    itself, and each throughput figure says its bars are min-max over repeats."""
    spec = SweepSpec(runtimes={"bare": 1.0}, world_sizes=(8, 16), repeats=2, steps=14, noise=0.0,
                     efficiency_per_doubling=1.08)
    generate_sweep(tmp_path / "runs", spec)
    table = collect([tmp_path / "runs"], tmp_path / "table").table
    md = write_report(table, tmp_path / "report").with_name("report.md").read_text()
    assert re.search(r"bare at 16 GPUs \(2 nodes\) reaches 10[78]\.\d% parallel efficiency, above ideal", md)
    assert "Throughput (strong scaling; bars: min–max over repeats)" in md
    assert any(p.name.endswith("-throughput.png") for p in (tmp_path / "report" / "figures").iterdir())


def test_a_ratio_without_a_ci_is_drawn_hollow_and_says_so():
    """A ratio of fewer than 2 runs a side has no CI: drawn as a hollow marker named so in the legend, never as a
    point under the figure's "95% CI" bars whose missing bar reads as an exact ratio."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from bench.analysis import plots

    table = pd.DataFrame([
        {"config": "c", "world_size": 1, "runtime": "podman", "runs": 1, "baseline_runs": 2,
         "ratio": 0.92, "ci_low": float("nan"), "ci_high": float("nan")},
        {"config": "c", "world_size": 1, "runtime": "sarus", "runs": 3, "baseline_runs": 2,
         "ratio": 0.97, "ci_low": 0.9, "ci_high": 1.04}])
    fig = plots.ratios(table, {"podman": "C1", "sarus": "C2"}, "bare", "c", "GPUs")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    plt.close(fig)
    assert "podman: no CI (under 2 runs a side)" in labels and "podman" not in labels
    assert "sarus" in labels


def test_a_throughput_point_of_one_run_is_drawn_hollow_and_says_so():
    """A point of one run drew a zero-wide bar under the legend's "bars: min-max over repeats", as if its repeats
    agreed exactly. It is now a hollow marker without a bar, named so in the legend and in the figure's caption."""
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from bench.analysis import plots

    rows = [{"runtime": rt, "world_size": n, "runs": runs, "tok_per_sec": 900.0 * n, "tok_per_sec_min": 890.0 * n,
             "tok_per_sec_max": 910.0 * n, "ideal_tok_per_sec": 1000.0 * n, "speedup": n / 4 * 0.9,
             "efficiency": 0.9, "mfu": 40.0}
            for rt, runs in (("bare", 3), ("podman", 1)) for n in (4, 8)]
    points, colors = pd.DataFrame(rows), {"bare": "C0", "podman": "C1"}
    points.loc[points["runs"] == 1, ["tok_per_sec_min", "tok_per_sec_max"]] = points["tok_per_sec"]
    for draw in (plots.per_gpu, plots.throughput):
        fig = draw(points, colors, "bare", "c", "GPUs")
        ax = fig.axes[0]
        labels = ax.get_legend_handles_labels()[1]
        bars = [c for c in ax.containers if c.get_label() == "podman"]
        hollow = [ln for ln in ax.get_lines() if ln.get_label() == f"podman: {plots.ONE_RUN}"]
        plt.close(fig)
        assert "podman" not in labels and f"podman: {plots.ONE_RUN}" in labels and "bare" in labels
        assert not any(np.isfinite(seg).all() for c in bars for coll in c.lines[2] for seg in coll.get_segments())
        assert len(hollow) == 1 and hollow[0].get_markerfacecolor() == "none"
    captions = {name: caption for name, caption, fig in plots.scaling_figures(points, pd.DataFrame(), colors, "bare",
                                                                             "c", "GPUs", "strong") if fig}
    assert captions["throughput"] == f"Throughput (strong scaling; {plots.SPREAD_BARS}; hollow: {plots.ONE_RUN})"


@pytest.mark.parametrize("lo, hi, counts", [(303_753, 603_732, (2, 4)), (150_000, 77_000_000, (1, 512)),
                                           (1_000, 1_900, (1, 2)), (100, 110, (1, 2)), (230_000, 1_000_000, (4, 32)),
                                           (420_000, 1_300_000, (8, 32)), (40_000, 10_000_000, (1, 256))])
def test_the_strong_throughput_axis_is_labelled_in_round_numbers(lo, hi, counts):
    """Regression: the log2 tokens/s axis was labelled at powers of two, so H200's 303,753 and 603,732 tok/s had one
    tick, '524.288k' (the batch size to the eye), and a wider sweep read '1.04858M', '16.7772M': no figure could be
    read off the axis. Its ticks are now round numbers, at least three in view (230k to 1M tok/s was labelled at
    500k and 1M alone, so the smallest points could not be read off it) and at most eight."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from bench.analysis import plots

    rows = [{"runtime": "bare", "world_size": n, "runs": 1, "tok_per_sec": v, "tok_per_sec_min": v,
             "tok_per_sec_max": v, "ideal_tok_per_sec": lo * n / counts[0]} for n, v in zip(counts, (lo, hi))]
    fig = plots.throughput(pd.DataFrame(rows), {"bare": "C0"}, "bare", "c", "GPUs")
    fig.canvas.draw()
    ax = fig.axes[0]
    y0, y1 = ax.get_ylim()
    shown = [t.get_text() for t in ax.get_yticklabels() if y0 <= t.get_position()[1] <= y1 and t.get_text()]
    minor = [t.get_text() for t in ax.get_yticklabels(minor=True) if t.get_text()]
    plt.close(fig)
    assert 3 <= len(shown) <= 8 and not minor, shown
    assert all(re.fullmatch(r"\d{1,3}(\.\d)?[kMG]?", text) for text in shown), shown



@pytest.mark.parametrize("lo, hi", [(1e-3, 1e6), (1.0, 1e8), (1e-10, 1e10), (3e-4, 2e9)])
def test_a_log_axis_over_many_decades_keeps_to_eight_labels(lo, hi):
    """Regression: a log axis spanning more than eight decades (tok/s from 1e-3 to 1e6) was labelled at every decade,
    10 to 21 labels crowded into one another; it is labelled every n-th decade, evenly, eight labels at most."""
    import numpy as np

    from bench.analysis import plots

    ticks = [t for t in plots.RoundLogLocator().tick_values(lo, hi) if lo <= t <= hi]
    powers = np.log10(ticks)
    assert 3 <= len(ticks) <= 8, ticks
    assert np.allclose(powers, np.round(powers)) and len(set(np.round(np.diff(powers)))) == 1, ticks

def test_a_report_that_cannot_be_written_in_full_keeps_the_older_one_whole(tmp_path, monkeypatch):
    """A disk that fills while the new report is written: report.md, report.html and figures/ stay the older
    report's (figures/ was replaced before the reports were written, leaving new figures beside old reports),
    and nothing half-written is left beside them."""
    from bench.analysis import report
    from bench.errors import AnalysisError

    generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8, 16), repeats=1, steps=12, runtimes={"bare": 1.0}))
    table = collect([tmp_path / "runs"]).table
    out = tmp_path / "report"
    write_report(table, out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    fsyncs = []

    def fsync_then_full(fd):  # the first report's file is written, the second finds the disk full
        fsyncs.append(fd)
        if len(fsyncs) == 2:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(report.os, "fsync", fsync_then_full)
    with pytest.raises(AnalysisError, match="No space left on device.*what was there is kept"):
        write_report(table.assign(tok_per_sec=table["tok_per_sec"] * 2), out)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in out.iterdir()) == ["figures", "report.html", "report.md"]


def test_rising_curves_keep_every_runtime_at_its_rank_count():
    """Regression: on the speedup and strong-throughput figures runtimes were nudged along the log2 axis, and on
    a line of slope 1 the one shifted left sat above the ideal line: three runtimes at 99.9% efficiency read as
    superlinear, ideal and sublinear. Now their points stay at their rank counts, told apart by marker shape."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from bench.analysis import plots

    rows = [{"runtime": rt, "world_size": n, "runs": 2, "tok_per_sec": 1000.0 * n, "tok_per_sec_min": 1000.0 * n,
             "tok_per_sec_max": 1000.0 * n, "ideal_tok_per_sec": 1000.0 * n, "speedup": n / 4, "efficiency": 1.0}
            for rt in ("bare", "podman", "sarus") for n in (4, 8, 16)]
    points = pd.DataFrame(rows)
    colors = {"bare": "C0", "podman": "C1", "sarus": "C2"}
    for fig in (plots.speedup(points, colors, "c", "GPUs"),
                plots.throughput(points, colors, "bare", "c", "GPUs")):
        handles, labels = fig.axes[0].get_legend_handles_labels()
        lines = [getattr(h, "lines", [h])[0] for h, label in zip(handles, labels) if label in colors]  # errorbar's
        assert len(lines) == 3 and len({ln.get_marker() for ln in lines}) == 3
        for line in lines:
            assert list(line.get_xdata()) == [4, 8, 16]
        plt.close(fig)


def test_a_low_efficiency_names_the_ideal_speedup_of_any_rank_counts():
    """Regression: the ideal speedup was rounded to a whole number, so 4 -> 6 GPUs read "of an ideal 2x"."""
    import pandas as pd

    points = pd.DataFrame([{"runtime": "bare", "world_size": n, "nodes": "1", "speedup": s, "efficiency": s * 4 / n,
                            "tok_per_sec_per_gpu": 1.0, "busbw_all_reduce_gbps": None}
                           for n, s in ((4, 1.0), (6, 1.2))])
    found = findings.low_efficiency(points, "GPUs", "strong")
    assert found[0].evidence == "speedup 1.20x of an ideal 1.5x"


def test_every_scaling_figure_says_what_its_bars_are_or_that_it_has_none():
    """A figure says what its error bars are: throughput min-max, ratios a 95% CI, and the speedup, efficiency and
    MFU figures, medians without bars, said so in the legend (they said nothing)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from bench.analysis import plots

    rows = [{"runtime": rt, "world_size": n, "runs": 2, "tok_per_sec": 900.0 * n, "tok_per_sec_min": 890.0 * n,
             "tok_per_sec_max": 910.0 * n, "ideal_tok_per_sec": 1000.0 * n, "tok_per_sec_per_gpu": 900.0,
             "tok_per_sec_per_gpu_min": 890.0, "tok_per_sec_per_gpu_max": 910.0, "speedup": n / 4 * 0.9,
             "efficiency": 0.9, "mfu": 40.0} for rt in ("bare", "podman") for n in (4, 8)]
    points, colors = pd.DataFrame(rows), {"bare": "C0", "podman": "C1"}
    figures = {"speedup": plots.speedup(points, colors, "c", "GPUs"),
               "efficiency": plots.efficiency(points, colors, "c", "GPUs", "strong"),
               "mfu": plots.mfu(points, colors, "c", "GPUs"),
               "throughput": plots.throughput(points, colors, "bare", "c", "GPUs")}
    said = {name: fig.axes[0].get_legend().get_title().get_text() for name, fig in figures.items()}
    for fig in figures.values():
        plt.close(fig)
    assert said == {"speedup": plots.NO_BARS, "efficiency": plots.NO_BARS, "mfu": plots.NO_BARS,
                    "throughput": plots.SPREAD_BARS}


def test_the_busbw_figure_says_its_points_are_medians_without_bars_and_its_throughput_axis_is_zoomed():
    """The pre-flight figure drew medians without bars and a throughput per GPU axis not starting at 0, and said
    neither: a drop of a tenth read as a collapse."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from bench.analysis import plots, plots_why

    rows = [{"runtime": "bare", "world_size": n, "tok_per_sec": 900.0 * n, "busbw_all_reduce_gbps": bw,
             "busbw_reduce_scatter_gbps": bw, "busbw_all_gather_gbps": bw} for n, bw in ((8, 350.0), (16, 40.0))]
    fig = plots_why.busbw(pd.DataFrame(rows), {"bare": "C0"}, "c", "GPUs")
    legend, ylabel = fig.legends[0].get_title().get_text(), fig.axes[1].get_ylabel()
    plt.close(fig)
    assert legend == plots.NO_BARS
    assert ylabel == "steady tokens/s per GPU (axis zoomed)"


def test_the_ideal_line_is_drawn_from_a_runtime_run_at_the_smallest_rank_count():
    """Regression: with the baseline first run at 8 GPUs and another runtime at 4, the strong throughput figure's
    legend named an ideal from the baseline's 8 GPUs but drew no line (its ideal is unknown), and the weak figure
    drew the ideal flat at the baseline's 8 GPUs, while speedup and efficiency are relative to the 4 GPUs."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from bench.analysis import plots

    def point(rt, n, tps, eff):
        known = not pd.isna(eff)
        return {"runtime": rt, "world_size": n, "runs": 2, "tok_per_sec": tps, "tok_per_sec_min": tps,
                "tok_per_sec_max": tps,
                "ideal_tok_per_sec": 100.0 * n if known else None, "speedup": tps / 400 if known else None,
                "efficiency": eff}
    points = pd.DataFrame([point("bare", 8, 760.0, None), point("bare", 16, 1400.0, None),
                           point("ce", 4, 400.0, 1.0), point("ce", 8, 720.0, 0.9), point("ce", 16, 1300.0, 0.81)])
    colors = {"bare": "C0", "ce": "C1"}
    strong = plots.throughput(points, colors, "bare", "c", "GPUs")
    ideal = [ln for ln in strong.axes[0].get_lines() if ln.get_label().startswith("ideal")][0]
    # not "ce's 4 GPUs x GPUs": 400 tok/s x 8 GPUs would be 3,200 at 8, not the 800 drawn
    assert ideal.get_label() == "ideal: linear from ce's 4 GPUs"
    assert list(ideal.get_ydata()) == [400.0, 800.0, 1600.0]
    weak = plots.per_gpu(points, colors, "bare", "c", "GPUs")
    flat = [ln for ln in weak.axes[0].get_lines() if ln.get_label().startswith("ideal")][0]
    assert (flat.get_label(), flat.get_ydata()[0]) == ("ideal: flat at ce's 4 GPUs", 100.0)
    plt.close(strong)
    plt.close(weak)


def test_runtimes_without_the_baseline_beside_them_say_so_instead_of_finding_no_gap(tmp_path):
    """Regression: ce and podman 10% apart with no bare run got no ratio section and "Findings. None: no gap in
    these runs passes its threshold"; a rank count with no bare run was left out of the ratios without a word."""
    import pandas as pd

    from bench.analysis import report

    spec = SweepSpec(world_sizes=(8,), repeats=2, steps=14, runtimes={"ce": 1.0, "podman": 0.9}, noise=0.0)
    generate_sweep(tmp_path / "runs", spec)
    md = write_report(collect([tmp_path / "runs"]).table, tmp_path / "rep").with_name("report.md").read_text()
    assert "### Steady-state throughput relative to bare\n\nNo bare run at 8 GPUs: no ratio there" in md
    assert "(--baseline names another runtime to compare with).\n\n### " in md  # no "None." under the note
    html = (tmp_path / "rep" / "report.html").read_text()
    assert re.search(r"another runtime to compare with\)\.</p>\s*<h3>", html)
    assert "no gap in these runs" not in md  # no ratio was taken: Findings says so instead
    assert "**Findings.** None among the comparisons made; some were not made, as the notes below say." in md
    points = pd.DataFrame({"runtime": ["bare", "ce", "ce", "podman"], "world_size": [8, 8, 16, 32]})
    assert report.no_baseline_note(points, "bare", "GPUs").startswith("No bare run at 16, 32 GPUs: no ratio there")
    assert report.no_baseline_note(points[points["world_size"] == 8], "bare", "GPUs") is None


def test_the_start_up_table_names_a_clock_skew_instead_of_a_negative_phase(make_run, tmp_path):
    """Rank 0's node 5 s behind the batch host: the start-up table printed a negative phase as a duration."""
    d = make_run("skewed", t0=1000.0, startup_s=2.0)
    lines = (d / contract.METRICS_JSONL).read_text().splitlines()
    shifted = [{**ev, "t": ev["t"] - 5.0} for ev in map(json.loads, lines)]
    (d / contract.METRICS_JSONL).write_text("".join(json.dumps(ev) + "\n" for ev in shifted))
    table = collect([d], tmp_path / "table").table
    write_report(table, tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    start_up = md[md.index("### Start-up phases"):]
    assert "Clock skew: in 1 run(s)" in start_up and "torchrun and spawn came out -3.0 s" in start_up
    assert not re.search(r"\| +-\d", start_up.split("###")[1])  # no negative cell in the table


def test_a_multi_node_run_whose_network_went_unverified_says_so(tmp_path):
    """A multi-node run whose NCCL named no network (the gate judged nothing) showed a blank network path."""
    why = ("the network between nodes was not checked against the site's 'AWS Libfabric': no NCCL INFO line "
           "was read (no log at NCCL_DEBUG_FILE, or not the NCCL backend)")
    spec = SweepSpec(world_sizes=(8, 16), repeats=1, steps=14, runtimes={"bare": 1.0}, noise=0.0,
                     network={"bare": {"unverified": why}})
    generate_sweep(tmp_path / "runs", spec)
    table = collect([tmp_path / "runs"], tmp_path / "table").table
    write_report(table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "- bare at 2 nodes: the network between nodes of 1 run(s) was not verified" in md
    network = {r["GPUs"]: r for r in md_rows(md, "### Network path of each run")}
    assert network["16"]["inter-node over sockets"] == f"not verified: {why}"
    assert network["8"]["inter-node over sockets"] == "one node"


def test_runtimes_that_ran_different_nccl_settings_say_so(tmp_path):
    """On Alps CE's aws_ofi_nccl hook sets its own NCCL/libfabric variables (since CE v26.06.1 on Daint
    NCCL_CROSS_NIC=0, FI_CXI_RDZV_*=0, ...) while the other runtimes get the site profile's: a comparison of
    the two measured that tuning too, and the report said nothing of it. Logging and plugin paths are no tuning."""
    slingshot = {"NCCL_NET": "AWS Libfabric", "NCCL_CROSS_NIC": "1", "NCCL_DEBUG": "INFO",
                 "FI_CXI_RX_MATCH_MODE": "software"}
    hook = {**slingshot, "NCCL_CROSS_NIC": "0", "FI_CXI_RDZV_THRESHOLD": "0", "NCCL_NET_PLUGIN": "/netstack/lib"}
    spec = SweepSpec(world_sizes=(8, 16), repeats=1, steps=14, runtimes={"bare": 1.0, "ce": 1.0, "pyxis": 1.0},
                     noise=0.0, network={rt: {"net": "AWS Libfabric"} for rt in ("bare", "ce", "pyxis")},
                     network_env={"bare": slingshot, "ce": hook,
                                  "pyxis": {**slingshot, "NCCL_NET_PLUGIN": "/other/lib", "NCCL_DEBUG": "WARN"}})
    generate_sweep(tmp_path / "runs", spec)
    table = collect([tmp_path / "runs"], tmp_path / "table").table
    write_report(table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    for nodes in ("1 node", "2 nodes"):
        assert f"- at {nodes} the runtimes ran NCCL/libfabric with different settings (2 variable(s))" in md
    assert "FI_CXI_RDZV_THRESHOLD: bare unset, ce 0, pyxis unset; NCCL_CROSS_NIC: bare 1, ce 0, pyxis 1" in md
    assert "NCCL_DEBUG:" not in md and "NCCL_NET_PLUGIN:" not in md

    alike = SweepSpec(**{**spec.__dict__, "sweep_id": "alike", "network_env": {rt: slingshot for rt in spec.runtimes}})
    generate_sweep(tmp_path / "alike", alike)
    assert findings.tuning(collect([tmp_path / "alike"], tmp_path / "t2").table) == []


def test_tuning_compares_every_repeat_and_leaves_out_runs_that_recorded_none():
    """Only each runtime's first run was compared (a hook that changed between repeats went unsaid), and a run of
    a release that recorded no network_env was read as every variable unset."""
    import pandas as pd

    from bench.analysis import why

    ce = [json.dumps({"NCCL_CROSS_NIC": v}) for v in ("1", "0")]
    runs = pd.DataFrame({"nodes": [2, 2, 2], "runtime": ["bare", "ce", "ce"],
                         "net_tuning": [json.dumps({"NCCL_CROSS_NIC": "1"}), *ce]})
    [finding] = findings.tuning(runs)
    assert "NCCL_CROSS_NIC: bare 1, ce 0 or 1" in finding.evidence
    assert "net_tuning" not in why.section_fields({"network": {"backend": "nccl"}})


def test_runtimes_compared_in_a_ratio_that_ran_other_software_say_so():
    """ce's ratio to bare compared runs of another torch, NCCL and nanochat-bench revision (a container's own NCCL is
    sometimes the point), and nothing said so: the gap read as the runtime's alone. A finding names each runtime's
    versions, of the runs its ratios compare only; a version no run recorded, or one alike on both sides, is none."""
    import pandas as pd

    runs = pd.DataFrame({"runtime": ["bare", "bare", "ce", "ce", "pyxis", "ce"], "world_size": [8, 8, 8, 8, 8, 16],
                         "torch_version": ["2.9.0", "2.9.0", "2.8.0", "2.8.0", "2.9.0", "2.7.0"],
                         "cuda_version": ["12.8", "12.8", "12.8", None, "12.8", "12.8"],
                         "nccl_version": ["2.27.3", "2.27.3", "2.21.5", "2.21.5", "2.27.3", "2.27.3"],
                         "driver_version": [None] * 6, "git_revision": ["abc", "abc", "abc-dirty", "abc-dirty",
                                                                        "abc", "abc"]})
    ratios = pd.DataFrame({"runtime": ["ce", "pyxis"], "world_size": [8, 8]})  # no bare run at 16: no ratio there
    [finding] = findings.software(runs, ratios, "bare", "GPUs")
    assert finding.text == ("ce and bare, compared at 8 GPUs, ran other software (torch, NCCL, nanochat-bench), so "
                            "the ratio measures that too, not the runtime alone")
    assert finding.evidence == ("torch: bare 2.9.0, ce 2.8.0; NCCL: bare 2.27.3, ce 2.21.5; nanochat-bench: bare abc, "
                                "ce abc-dirty")



def test_the_report_says_when_runtimes_compared_ran_other_software(tmp_path):
    """The finding above, in the report's findings of the config whose ratio compared them."""
    paths = generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8,), repeats=2, steps=14,
                                                        runtimes={"bare": 1.0, "ce": 1.0}))
    for run_dir in paths:
        manifest = json.loads((run_dir / "run.json").read_text())
        manifest["software"]["nccl"] = "2.21.5" if manifest["runtime"] == "ce" else "2.27.3"
        (run_dir / "run.json").write_text(json.dumps(manifest))
    md = write_report(collect([tmp_path / "runs"]).table, tmp_path / "rep").with_name("report.md").read_text()
    assert ("- ce and bare, compared at 8 GPUs, ran other software (NCCL), so the ratio measures that too, not the "
            "runtime alone: `NCCL: bare 2.27.3, ce 2.21.5`") in md


def test_the_ratio_table_and_figure_say_they_are_of_geometric_means_and_the_point_table_of_medians(report):
    """Regression: a ratio is of geometric means over repeats while the table above it shows each point's median,
    and neither said so: two tok/s cells divided gave another number than the ratio column, with nothing saying
    why. Now the summary table says its figures are medians (and which are not), the ratio table and its figure's
    caption that they are of geometric means with a Welch t CI on logs."""
    _, _, md, _ = report
    strong = section(md, STRONG_LABEL)
    assert ("Each measure is the median over the point's repeats (peak mem MiB: the max, min val bpb: the min); "
            "speedup and efficiency are of the median tok/s.") in strong
    ratio_note = strong[strong.index("### Steady-state throughput relative to bare"):].splitlines()[2]
    assert ratio_note == ("Ratios of geometric means over repeats, 95% CI by Welch t on log tok/s: not the medians "
                          "of the table above, so a quotient of two of its tok/s cells can differ.")
    rows = md_rows(strong, "### Steady-state throughput relative to bare")
    assert {"ratio of geometric means", "95% CI (Welch t on logs)"} <= set(rows[0])
    assert ("![Ratio to bare of geometric means over repeats, not of the tables' medians (bars: 95% CI over repeats, "
            "Welch t on log tok/s)]") in strong
    assert "### Pre-flight bus bandwidth beside throughput (medians over repeats)" in strong


def test_runs_that_name_no_runtime_get_no_note_of_a_missing_baseline(tmp_path):
    """results/h200-d20/same-job's ours.log (this trainer's console log: runtime unknown) got "No bare run at 1 GPU:
    no ratio there (--baseline names another runtime to compare with)", though no --baseline names its runtime;
    upstream's log beside it, a runtime --baseline can name, keeps the note."""
    import pandas as pd

    from bench.analysis import report

    points = pd.DataFrame({"runtime": ["unknown", "unknown", "ce"], "world_size": [1, 8, 8]})
    assert report.no_baseline_note(points[points["runtime"] == "unknown"], "bare", "GPUs") is None
    assert report.no_baseline_note(points, "bare", "GPUs").startswith("No bare run at 8 GPUs: no ratio there")
    same_job = Path(__file__).resolve().parents[3] / "results" / "h200-d20" / "same-job"
    md = write_report(collect([same_job]).table, tmp_path / "rep").with_name("report.md").read_text()
    assert "No bare run at 1 GPU" not in md and "No bare run at 1 rank: no ratio there" in md


def test_the_mixed_batch_note_names_the_batches_recorded_and_a_run_without_one_as_unknown():
    """A run of a mixed point that recorded no device batch (NaN) made the note's int conversion raise; it is named as
    unknown, one more setting (scaling.settings)."""
    import pandas as pd

    from bench.analysis.report import mixed_batch_note

    runs = pd.DataFrame({"config": ["c"] * 3, "runtime": ["bare"] * 3, "world_size": [8] * 3,
                         "device_batch_size": [16, 32, float("nan")]})
    assert mixed_batch_note(runs, "GPUs").startswith(" bare at 8 GPUs ran device batch 16, 32, unknown: not repeats")


def test_a_config_whose_every_point_mixes_device_batches_keeps_its_section_and_note(make_run, tmp_path):
    """Regression: runs of one rank count at device batch 16 and 32 are no repeats, so their point is left out of the
    table; where that was the config's only point, the whole config vanished from the report, its note and findings
    with it, and nothing said so. Now its section stays, with the note and no table (a "None." under the note, and
    the note of what the table's cells are, spoke of a table that has no point)."""
    base = {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288}
    for i, dbs in enumerate((16, 32)):
        make_run(f"r{i}", config={**base, "device_batch_size": dbs})
    md = write_report(collect([tmp_path / "runs"]).table, tmp_path / "rep").with_name("report.md").read_text()
    strong = section(md, STRONG_LABEL.replace("NVIDIA H200", ""))
    assert ("bare at 8 GPUs ran device batch 16, 32: not repeats of one point (another gradient accumulation each), "
            "so that point is left out of the table and figures.") in strong
    assert "None." not in strong and "Each measure is the median" not in strong
    assert "No run has usable figures yet" not in md
    assert "Not recorded by these runs: the steady step split" in strong  # the start-up phases they did record


def test_a_gap_to_the_baseline_without_a_ci_is_not_called_no_gap(tmp_path):
    """pyxis 10% slower than bare in one run each: its ratio had no CI, so no finding could be drawn from it, yet
    Findings said "None: no gap in these runs passes its threshold", as if the runtimes had been found alike."""
    spec = SweepSpec(world_sizes=(8, 16), repeats=1, steps=14, runtimes={"bare": 1.0, "pyxis": 0.9, "ce": 1.0},
                     startup_s={"bare": 5.0, "pyxis": 5.0, "ce": 5.0}, noise=0.0, efficiency_per_doubling=1.0)
    generate_sweep(tmp_path / "runs", spec)
    md = write_report(collect([tmp_path / "runs"]).table, tmp_path / "rep").with_name("report.md").read_text()
    assert "no gap in these runs" not in md
    assert "**Findings.** None among the comparisons made; some were not made, as the notes below say." in md
    assert ("### Steady-state throughput relative to bare\n\npyxis at 8, 16 GPUs is 1% or more from bare with no "
            "95% CI (under 2 runs a side): no finding is drawn from that gap.") in md



def test_a_baseline_that_failed_at_a_rank_count_is_not_said_never_to_have_run_there(tmp_path):
    """bare's two runs at 8 GPUs ran out of memory while ce's ended ok: the ratio section said 'No bare run at 8 GPUs'
    and the figures' legends 'bare: not run at 8 GPUs', as if bare had never been tried there, hiding that it failed
    where ce did not. The note now says that bare ran there and how its runs ended."""
    paths = generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8, 16), repeats=2, steps=14,
                                                        runtimes={"bare": 1.0, "ce": 0.97}))
    for run_dir in paths:
        manifest = json.loads((run_dir / "run.json").read_text())
        if manifest["runtime"] == "bare" and manifest["world_size"] == 8:
            manifest.update(status="oom", message="oom: CUDA out of memory")
            (run_dir / "run.json").write_text(json.dumps(manifest))
    out = write_report(collect([tmp_path / "runs"]).table, tmp_path / "rep")
    md = out.with_name("report.md").read_text()
    assert "No bare run at 8 GPUs" not in md
    assert "bare ran at 8 GPUs, but none of its runs there ended ok (2 oom; see Failed runs): no ratio there." in md
    svgs = " ".join(p.read_text() for p in (tmp_path / "rep" / "figures").glob("*.svg"))
    assert "not run at 8 GPUs" not in svgs and "bare: no run ended ok at 8 GPUs" in svgs


def test_speedup_relative_to_the_next_count_where_every_run_at_the_smallest_failed(tmp_path):
    """Every run at 8 GPUs failed (bare's out of memory, ce's timed out): speedup and efficiency were taken relative
    to 16 GPUs, where efficiency then read 100%, and nothing said that the curve's first point was not its first
    count. The summary now says so, naming the count and how its runs ended."""
    paths = generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8, 16, 32), repeats=2, steps=14,
                                                        runtimes={"bare": 1.0, "ce": 0.97}))
    for run_dir in paths:
        manifest = json.loads((run_dir / "run.json").read_text())
        if manifest["world_size"] == 8:
            status = "oom" if manifest["runtime"] == "bare" else "timeout"
            manifest.update(status=status, message=f"{status}: at 8 GPUs")
            (run_dir / "run.json").write_text(json.dumps(manifest))
    table = collect([tmp_path / "runs"]).table
    pts = scaling.scaling_table(table).set_index(["runtime", "world_size"])
    assert pts.loc[("bare", 16), "efficiency"] == 1.0  # the next count is the base: said beside the table
    strong = section(write_report(table, tmp_path / "rep").with_name("report.md").read_text(), STRONG_LABEL)
    note = ("Speedup and efficiency are relative to 16 GPUs, the smallest count with a run that ended ok: no run at "
            "8 GPUs (bare 2 oom; ce 2 timeout) did; see Failed runs.")
    assert note in strong.split("|")[0]  # the summary's note, above its table
    generate_sweep(tmp_path / "ok", SweepSpec(world_sizes=(8, 16), repeats=1, steps=14, runtimes={"bare": 1.0}))
    md = write_report(collect([tmp_path / "ok"]).table, tmp_path / "rep-ok").with_name("report.md").read_text()
    assert "the smallest count with a run that ended ok" not in md


def test_a_runtime_whose_smallest_point_was_left_out_is_not_said_to_have_failed_there(tmp_path):
    """ce's two runs at 8 GPUs ended ok, one on one node and one on two, so that point was left out (the note said so);
    the speedup and efficiency figures' legends then read 'ce: no run ended ok at 8 GPUs', as if they had failed. The
    legends now say that ce's point there was left out."""
    paths = generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8, 16), repeats=2, steps=14,
                                                        runtimes={"bare": 1.0, "ce": 0.97}))
    for run_dir in paths:
        manifest = json.loads((run_dir / "run.json").read_text())
        if manifest["runtime"] == "ce" and manifest["world_size"] == 8 and manifest["repeat"] == 1:
            manifest.update(nodes=2, gpus_per_node=4)
            (run_dir / "run.json").write_text(json.dumps(manifest))
    md = write_report(collect([tmp_path / "runs"]).table, tmp_path / "rep").with_name("report.md").read_text()
    assert "ce at 8 GPUs ran on 1, 2 nodes: not repeats of one point" in md
    figures = tmp_path / "rep" / "figures"
    for name in ("speedup", "efficiency"):
        svg = next(figures.glob(f"*-{name}.svg")).read_text()
        assert "ce: no run ended ok" not in svg and "ce: its 8 GPUs point left out (see the note)" in svg


def test_speedup_relative_to_the_next_count_where_the_smallest_points_were_left_out(tmp_path):
    """bare's and ce's runs at 8 GPUs ended ok, each point's on one node and on two, so both points were left out and
    speedup and efficiency were taken relative to 16 GPUs, where efficiency then read 100%; only the figures' ideal
    line said so, and a reader took that 100% as measured against 8 GPUs. The summary now says it, as where every run
    at the smallest count failed; where bare's failed there instead, it says both."""
    paths = generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8, 16, 32), repeats=2, steps=14,
                                                        runtimes={"bare": 1.0, "ce": 0.97}))
    for run_dir in paths:
        manifest = json.loads((run_dir / "run.json").read_text())
        if manifest["world_size"] == 8 and manifest["repeat"] == 1:
            manifest.update(nodes=2, gpus_per_node=4)
            (run_dir / "run.json").write_text(json.dumps(manifest))
    table = collect([tmp_path / "runs"]).table
    assert scaling.scaling_table(table).set_index(["runtime", "world_size"]).loc[("bare", 16), "efficiency"] == 1.0
    strong = section(write_report(table, tmp_path / "rep").with_name("report.md").read_text(), STRONG_LABEL)
    note = ("Speedup and efficiency are relative to 16 GPUs, the smallest count with a point in the table: at 8 GPUs "
            "the points of bare, ce are left out (below).")
    assert note in strong.split("|")[0]
    for run_dir in paths:  # bare's runs at 8 GPUs fail instead: its point there is no left-out one
        manifest = json.loads((run_dir / "run.json").read_text())
        if manifest["world_size"] == 8 and manifest["runtime"] == "bare":
            manifest.update(status="oom", message="oom: at 8 GPUs", nodes=1, gpus_per_node=8)
            (run_dir / "run.json").write_text(json.dumps(manifest))
    table = collect([tmp_path / "runs"]).table
    strong = section(write_report(table, tmp_path / "rep").with_name("report.md").read_text(), STRONG_LABEL)
    note = ("Speedup and efficiency are relative to 16 GPUs, the smallest count with a point in the table: at 8 GPUs "
            "the point of ce is left out (below) and no run of bare ended ok (bare 2 oom; see Failed runs).")
    assert note in strong.split("|")[0]
