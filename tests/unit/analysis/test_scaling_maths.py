"""Scaling maths on hand-made tables with known answers: speedup, efficiency, ratios and their CIs.

python -m pytest tests/unit/analysis/test_scaling_maths.py -q
"""

import math

import numpy as np
import pytest
from scipy import stats

from bench.analysis import scaling
from bench.analysis.collect import to_frame


def row(runtime, world, tps, depth=20, status="ok", skip=None, **kw):
    return {"source": f"/r/{runtime}-{world}-{tps}-{depth}", "runtime": runtime, "world_size": world,
            "tok_per_sec": tps, "workload": "nanochat-base", "depth": depth, "max_seq_len": 2048,
            "total_batch_size": 524288, "gpu_name": "NVIDIA H200", "status": status, "skip_reason": skip,
            "nodes": max(1, world // 4), **kw}


def test_speedup_and_efficiency_known_answers():
    # repeats at 1 GPU: median 100; at 2: median 180; at 4: 320
    rows = ([row("bare", 1, t) for t in (90, 100, 130)] + [row("bare", 2, 180)]
            + [row("bare", 4, t) for t in (320, 300, 340)])
    pts = scaling.scaling_table(to_frame(rows))
    assert pts["world_size"].tolist() == [1, 2, 4]
    assert pts["runs"].tolist() == [3, 1, 3]
    assert pts["tok_per_sec"].tolist() == [100, 180, 320]
    assert pts["speedup"].tolist() == pytest.approx([1.0, 1.8, 3.2])
    assert pts["efficiency"].tolist() == pytest.approx([1.0, 0.9, 0.8])
    assert pts["ideal_tok_per_sec"].tolist() == pytest.approx([100, 200, 400])
    assert (pts["tok_per_sec_min"].tolist(), pts["tok_per_sec_max"].tolist()) == ([90, 180, 300], [130, 180, 340])


def test_efficiency_relative_to_the_configs_smallest_point_and_none_without_it():
    """Regression: a runtime measured only from 8 ranks read 100% there (its own smallest point) beside a
    runtime measured from 4, however slow it was."""
    rows = [row("ce", 8, 800), row("ce", 16, 1200), row("bare", 4, 500), row("bare", 16, 1500),
            row("podman", 4, 450), row("podman", 8, 800)]
    pts = scaling.scaling_table(to_frame(rows)).set_index(["runtime", "world_size"])
    assert pts.loc[("bare", 16), "efficiency"] == pytest.approx(1500 / 500 * 4 / 16)
    assert pts.loc[("podman", 8), "efficiency"] == pytest.approx(800 / 450 * 4 / 8)
    assert pts.loc["ce", ["speedup", "efficiency", "ideal_tok_per_sec"]].isna().all().all()
    assert pts.loc["ce", "tok_per_sec"].tolist() == [800, 1200]  # its throughput stays


def test_unusable_rows_and_other_configs_are_kept_apart():
    rows = [row("bare", 1, 100), row("bare", 1, 1, status="failed", skip="run failed"),
            row("ce", 1, 95, depth=26)]
    df = to_frame(rows)
    pts = scaling.scaling_table(df)
    assert sorted(pts["config"].unique()) == [
        "nanochat-base d20 · seq 2048 · strong scaling, batch 524,288 · zero2 · NVIDIA H200",
        "nanochat-base d26 · seq 2048 · strong scaling, batch 524,288 · zero2 · NVIDIA H200"]
    assert pts.loc[pts["runtime"] == "bare", "tok_per_sec"].tolist() == [100]  # the failed run is not in
    assert scaling.runtime_ratios(df).empty  # ce ran another config: no ratio to bare


def test_attention_kernels_are_not_pooled():
    # a run restricted to another SDPA kernel is another program, not a repeat
    rows = [row("bare", 1, 100), row("bare", 1, 101, sdpa_backends="cudnn")]
    pts = scaling.scaling_table(to_frame(rows))
    assert sorted(pts["tok_per_sec"].tolist()) == [100, 101]
    assert any("SDPA kernels: cudnn" in c for c in pts["config"])


def test_fused_kernels_are_named_in_the_label_and_none_says_nothing():
    plain = "nanochat-base d20 · seq 2048 · NVIDIA H200"
    assert scaling.config_label({**row("bare", 1, 100), "device": "NVIDIA H200", "fused_kernels": ""}) == plain
    assert scaling.config_label({**row("bare", 1, 100), "device": "NVIDIA H200"}) == plain
    both = {**row("bare", 1, 100), "device": "NVIDIA H200", "fused_kernels": "rotary_norm,softcap_loss"}
    assert scaling.config_label(both) == plain + " · fused: rotary_norm, softcap_loss"
    # a run from before the flag used none: one curve with the runs that name none
    rows = [row("bare", 1, 100), row("bare", 1, 102, fused_kernels=""),
            row("bare", 1, 110, fused_kernels="rotary_norm")]
    pts = scaling.scaling_table(to_frame(rows))
    assert sorted(zip(pts["config"].str.split(" · ").str[-1], pts["runs"])) == [
        ("NVIDIA H200", 2), ("fused: rotary_norm", 1)]


def test_ratio_ci_hand_computed():
    # logs: x = [0, 0.2] (mean 0.1, var 0.02), base = [0, 0] (var 0): se = 0.1, Welch dof = 1, t = 12.7062
    ratio, low, high = scaling.ratio_ci(np.exp([0.0, 0.2]), [1.0, 1.0])
    assert ratio == pytest.approx(math.exp(0.1))
    assert low == pytest.approx(math.exp(0.1 - 12.7062047 * 0.1), rel=1e-6)
    assert high == pytest.approx(math.exp(0.1 + 12.7062047 * 0.1), rel=1e-6)


def test_ratio_ci_agrees_with_welch_reference():
    x, base = [0.95, 0.97, 0.96, 0.99], [1.0, 1.03, 0.99]
    ratio, low, high = scaling.ratio_ci(x, base)
    ref = stats.ttest_ind(np.log(x), np.log(base), equal_var=False).confidence_interval(0.95)
    assert (math.log(low), math.log(high)) == pytest.approx((ref.low, ref.high))
    assert ratio == pytest.approx(stats.gmean(x) / stats.gmean(base))


def test_ratio_without_repeats_has_no_ci():
    ratio, low, high = scaling.ratio_ci([0.9], [1.0, 1.1])
    assert ratio == pytest.approx(0.9 / math.sqrt(1.1)) and math.isnan(low) and math.isnan(high)
    assert scaling.no_ci(1, 2, low) == scaling.NO_CI_FEW


def test_identical_repeats_on_both_sides_have_no_ci_and_say_why():
    """Regression: two bit-identical repeats a side (copied run directories, a figure that cannot vary) gave a
    zero-width interval, [2.000, 2.000] in the table and a bar of no height, read as certainty; now no interval,
    and the table and figure say the repeats are identical instead of drawing one."""
    import matplotlib.pyplot as plt

    from bench.analysis import plots, tables

    ratio, low, high = scaling.ratio_ci([2.0, 2.0], [1.0, 1.0])
    assert ratio == pytest.approx(2.0) and math.isnan(low) and math.isnan(high)
    rows = [row("bare", 8, 100.0) for _ in range(2)] + [row("ce", 8, 95.0) for _ in range(3)]
    rows = [{**r, "source": f"{r['source']}-{i}"} for i, r in enumerate(rows)]  # separate runs of equal figures
    ratios = scaling.runtime_ratios(to_frame(rows))
    assert scaling.no_ci(*ratios.iloc[0][["runs", "baseline_runs", "ci_low"]]) == scaling.NO_CI_IDENTICAL
    assert tables.ratio_table(ratios, "GPUs").rows == [["ce", "8", "3", "2", "0.950", "repeats identical: no interval"]]
    fig = plots.ratios(ratios, {"ce": "C1"}, "bare", "c", "GPUs")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    plt.close(fig)
    assert "ce: no CI (repeats identical)" in labels and "ce" not in labels


def test_ratio_ci_of_one_sides_identical_repeats_is_exact_and_warns_of_nothing():
    """Regression: identical repeats on one side made `report` print scipy's "Precision loss ... Results may be
    unreliable" on stderr; the interval is exact there: the other side's variance with its n-1 degrees of freedom."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ratio, low, high = scaling.ratio_ci([9500.0, 9500.0], [10000.0, 10400.0])
    lb = np.log([10000.0, 10400.0])
    half = stats.t.ppf(0.975, 1) * lb.std(ddof=1) / math.sqrt(2)
    d = math.log(9500) - lb.mean()
    assert (ratio, low, high) == pytest.approx((math.exp(d), math.exp(d - half), math.exp(d + half)))


def test_runtime_ratios_table():
    rows = [row("bare", 8, t) for t in (100, 102, 98)] + [row("ce", 8, t) for t in (97, 99, 98)] + [row("ce", 16, 190)]
    ratios = scaling.runtime_ratios(to_frame(rows))
    assert len(ratios) == 1  # no bare run at 16 GPUs: nothing to compare with there
    r = ratios.iloc[0]
    assert (r["runtime"], r["world_size"], r["runs"], r["baseline_runs"]) == ("ce", 8, 3, 3)
    assert r["ratio"] == pytest.approx(stats.gmean([97, 99, 98]) / stats.gmean([100, 102, 98]))
    assert r["ci_low"] < r["ratio"] < r["ci_high"]


def test_runs_that_name_no_runtime_get_no_ratio_either_way():
    """A console log of this trainer names no runtime (scaling.UNKNOWN_RUNTIME): its ratio to bare at the same point
    compared with nothing known, and so did bare's and ce's to it, which a baseline of theirs took; they are left out
    either way (and `report --baseline unknown` is refused)."""
    rows = [row("bare", 8, t) for t in (100, 102)] + [row(None, 8, t) for t in (97, 99)] + [row("ce", 8, 98)]
    assert scaling.runtime_ratios(to_frame(rows))["runtime"].tolist() == ["ce"]
    assert scaling.runtime_ratios(to_frame(rows), baseline=scaling.UNKNOWN_RUNTIME).empty


def test_runs_of_another_device_batch_at_one_point_get_no_ratio_and_a_note_says_why():
    """Strong scaling keys only the total batch, so podman at device batch 2 (twice the accumulation) was ratioed
    against bare at 4 on the same ranks, and the report gave "ratio 0.695" as the runtime's cost. No ratio is taken
    where the device batches differ, and the ratio section says why; the same device batch still gets its ratio."""
    from bench.analysis import report

    strong = dict(scaling="strong", strategy="zero2")
    rows = ([row("bare", 8, t, device_batch_size=4, **strong) for t in (1000, 1010)]
            + [row("podman", 8, t, device_batch_size=2, **strong) for t in (695, 700)]
            + [row("ce", 8, t, device_batch_size=4, **strong) for t in (990, 995)])
    table = to_frame(rows)
    assert scaling.runtime_ratios(table)["runtime"].tolist() == ["ce"]
    runs = scaling.with_config(scaling.usable(table))
    assert report.unlike_batch_note(runs, "bare", "GPUs") == (
        "podman at 8 GPUs ran device batch 2, bare 4: no ratio there (another gradient accumulation, so a ratio "
        "would time that, not the runtime).")
    assert report.unlike_batch_note(runs[runs["runtime"] != "podman"], "bare", "GPUs") is None


def test_runs_of_one_runtime_at_one_point_with_another_device_batch_are_no_repeats():
    """Strong scaling keys only the total batch, so podman's runs at 8 GPUs at device batch 2 and 4 (another gradient
    accumulation each) were one point's repeats: their median and min-max bar mixed two programs. That point is left
    out now, and the summary's note says why; a point of one device batch keeps its repeats."""
    from bench.analysis import report

    strong = dict(scaling="strong", strategy="zero2")
    rows = ([row("podman", 8, t, device_batch_size=4, **strong) for t in (1000, 1010)]
            + [row("podman", 8, 700, device_batch_size=2, **strong)]
            + [row("podman", 4, t, device_batch_size=4, **strong) for t in (520, 530)])
    table = to_frame(rows)
    pts = scaling.scaling_table(table)
    assert (pts["world_size"].tolist(), pts["runs"].tolist()) == ([4], [2])
    runs = scaling.with_config(scaling.usable(table))
    assert report.mixed_batch_note(runs, "GPUs") == (
        " podman at 8 GPUs ran device batch 2, 4: not repeats of one point (another gradient accumulation each), "
        "so that point is left out of the table and figures.")
    assert report.mixed_batch_note(runs[runs["world_size"] == 4], "GPUs") == ""


def test_runs_of_one_rank_count_on_other_node_counts_are_no_repeats_nor_ratioed():
    """2 ranks on one node and 2 ranks on two were pooled as one point's repeats, shown as 'nodes 1,2', their median
    mixing throughput within a node and across nodes; and a runtime across nodes was ratioed against the baseline
    within one. That point is left out with a note, no ratio is taken there, and check calls such runs pooled."""
    from bench.analysis import check, report

    rows = ([row("bare", 1, 100, nodes=1)] + [row("bare", 2, t, nodes=1) for t in (190, 192)]
            + [row("bare", 2, 120, nodes=2)] + [row("ce", 2, t, nodes=2) for t in (118, 119)]
            + [row("ce", 1, 99, nodes=1)])
    table = to_frame(rows)
    pts = scaling.scaling_table(table)
    assert pts[["runtime", "world_size", "nodes"]].values.tolist() == [["bare", 1, "1"], ["ce", 1, "1"],
                                                                       ["ce", 2, "2"]]
    assert scaling.runtime_ratios(table)["world_size"].tolist() == [1]
    runs = scaling.with_config(scaling.usable(table))
    assert report.mixed_nodes_note(runs, "GPUs") == (
        " bare at 2 GPUs ran on 1, 2 nodes: not repeats of one point (within a node and across nodes), so that point "
        "is left out of the table and figures.")
    assert report.unlike_nodes_note(runs, "bare", "GPUs") == (
        "ce at 2 GPUs ran on 2 nodes, bare on 1, 2 nodes: no ratio there (within a node against across nodes, so a "
        "ratio would time the network between them, not the runtime).")
    assert check._pooled(runs[runs["world_size"] == 2]) == ("runtime", "nodes")
    one_node = runs[(runs["world_size"] == 2) & (runs["nodes"] == 1)]
    assert check._pooled(one_node) == () and report.mixed_nodes_note(one_node, "GPUs") == ""


def test_a_baseline_point_left_out_is_not_called_a_point_the_baseline_never_ran():
    """bare ran at 2 GPUs on 1 and 2 nodes, so its point there was left out; the ratio section's notes then said
    both "No bare run at 2 GPUs" and "bare on 1, 2 nodes". The notes of the left-out point say why no ratio is
    taken there; a rank count bare never ran at is still named."""
    from bench.analysis import report

    rows = ([row("bare", 2, t, nodes=n) for t, n in ((190, 1), (120, 2))] + [row("ce", 2, 118, nodes=2)]
            + [row("ce", 4, 230, nodes=2)])
    table = to_frame(rows)
    pts, runs = scaling.scaling_table(table), scaling.with_config(scaling.usable(table))
    assert report.no_baseline_note(pts, "bare", "GPUs", runs) == (
        "No bare run at 4 GPUs: no ratio there (--baseline names another runtime to compare with).")
    left_out = runs[runs["world_size"] == 2]
    assert report.no_baseline_note(pts[pts["world_size"] == 2], "bare", "GPUs", left_out) is None
    assert report.unlike_nodes_note(left_out, "bare", "GPUs").startswith("ce at 2 GPUs ran on 2 nodes, bare on 1, 2")


def test_a_run_without_a_device_batch_beside_one_with_is_no_repeat_in_the_table_nor_in_check():
    """A point of a run at device batch 32 and one that recorded none was averaged as two repeats by the table, while
    check's pooled columns (astype(str): NaN is "nan" under pandas 2) failed a reference over the same runs. One rule
    (scaling.settings) now decides both: an unknown device batch may be another, so the point is left out and named."""
    from bench.analysis import check, report

    strong = dict(scaling="strong", strategy="zero2")
    table = to_frame([row("bare", 8, 1000, device_batch_size=32, **strong), row("bare", 8, 700, **strong),
                      row("bare", 4, 520, **strong), row("bare", 4, 530, **strong)])
    assert scaling.scaling_table(table)[["world_size", "runs"]].values.tolist() == [[4, 2]]
    runs = scaling.with_config(scaling.usable(table))
    assert report.mixed_batch_note(runs, "GPUs").startswith(" bare at 8 GPUs ran device batch 32, unknown: not repeats")
    assert check._pooled(runs[runs["world_size"] == 8]) == ("device_batch_size",)
    assert check._pooled(runs[runs["world_size"] == 4]) == ()  # both unknown: one setting


def weak(runtime, world, tps, dbs=32, **kw):
    """A weak-scaling row: the total batch is device batch x seq x ranks, as the planner sets it."""
    return row(runtime, world, tps, scaling="weak", device_batch_size=dbs, total_batch_size=dbs * 2048 * world,
               strategy="zero2", **kw)


def test_weak_curve_is_one_group_though_its_total_batch_grows():
    rows = [weak("bare", n, 1000 * n * 0.95 ** i) for i, n in enumerate((8, 16, 32))]
    pts = scaling.scaling_table(to_frame(rows))
    assert pts["config"].nunique() == 1
    assert pts["config"].iloc[0] == ("nanochat-base d20 · seq 2048 · weak scaling, 32 x 2,048 tokens per rank · "
                                     "zero2 · NVIDIA H200")
    # weak efficiency = tok/s per rank over the smallest point's: the ideal is flat
    assert pts["efficiency"].tolist() == pytest.approx([1.0, 0.95, 0.95 ** 2])
    assert pts["total_batch_size"].tolist() == [8 * 65536, 16 * 65536, 32 * 65536]


def test_weak_curves_of_another_device_batch_are_another_config():
    rows = [weak("bare", 8, 1000), weak("bare", 16, 2000), weak("bare", 8, 600, dbs=16)]
    pts = scaling.scaling_table(to_frame(rows))
    assert sorted(pts.groupby("config")["world_size"].apply(list).tolist()) == [[8], [8, 16]]


def test_weak_point_with_accumulation_for_a_site_limit_stays_on_its_curve():
    """The plan lowers a weak point's device batch where the site's limit or the memory model says so (Alps: 16 x
    accumulation 2 from 128 ranks on), keeping the tokens per rank and step; the report drew that point as a curve of
    its own, 100% efficient at 128 GPUs against itself. The weak curve's key is the sequences per rank and step."""
    rows = [weak("bare", n, 1000 * n) for n in (8, 16, 32)]
    rows.append(row("bare", 128, 1000 * 128 * 0.9, scaling="weak", device_batch_size=16,
                    total_batch_size=16 * 2 * 2048 * 128, strategy="zero2"))
    pts = scaling.scaling_table(to_frame(rows))
    assert pts["config"].nunique() == 1 and "32 x 2,048 tokens per rank" in pts["config"].iloc[0]
    assert pts["efficiency"].tolist() == pytest.approx([1.0, 1.0, 1.0, 0.9])


def test_weak_point_with_accumulation_is_named_beside_the_table(tmp_path):
    """A weak point whose device batch the plan lowered stays on its curve, but nothing said that its micro-batches
    were smaller: part of an efficiency drop there may be that, not the network or the runtime. The summary's note
    names the counts and their device batch x accumulation against the curve's usual one."""
    from bench.analysis import report

    rows = [weak(rt, n, 1000 * n) for rt in ("bare", "ce") for n in (8, 16, 32)]
    rows += [row(rt, n, 1000 * n * 0.9, scaling="weak", device_batch_size=16, total_batch_size=16 * 2 * 2048 * n,
                 strategy="zero2") for rt in ("bare", "ce") for n in (128, 256)]
    runs = scaling.with_config(scaling.usable(to_frame(rows)))
    assert report.weak_accumulation_note(runs, "GPUs", "weak") == (
        " At 128, 256 GPUs the device batch was 16 x accumulation 2, elsewhere 32 x 1 (the same sequences per rank "
        "and step): smaller micro-batches can cost throughput, so part of an efficiency drop there may be that, not "
        "the network or the runtime.")
    assert report.weak_accumulation_note(runs[runs["world_size"] < 128], "GPUs", "weak") == ""
    report.write_report(to_frame(rows), tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.count("At 128, 256 GPUs the device batch was 16 x accumulation 2, elsewhere 32 x 1") == 1


def test_strong_curves_of_another_total_are_another_config_and_device_batch_is_no_key():
    rows = [row("bare", 8, 1000, scaling="strong", device_batch_size=32),
            row("bare", 16, 1900, scaling="strong", device_batch_size=16),  # fit_batch lowered it: same curve
            row("bare", 8, 1100, scaling="strong", total_batch_size=1048576)]
    pts = scaling.scaling_table(to_frame(rows))
    by_config = pts.groupby("config")["world_size"].apply(list).to_dict()
    assert sorted(by_config.values()) == [[8], [8, 16]]
    assert any("batch 1,048,576" in c for c in by_config)


def test_scaling_mode_strategy_and_aspect_ratio_separate_configs():
    # the same total batch at one rank count, run weak, strong, sharded another way, or wider: four programs
    rows = [row("bare", 8, 100, scaling="strong", device_batch_size=32),
            row("bare", 8, 101, scaling="weak", device_batch_size=32),
            row("bare", 8, 102, scaling="strong", strategy="fsdp", device_batch_size=32),
            row("bare", 8, 103, scaling="strong", aspect_ratio=128, device_batch_size=32)]
    pts = scaling.scaling_table(to_frame(rows))
    assert pts["config"].nunique() == 4
    assert any("fsdp" in c for c in pts["config"]) and any("d20 (aspect 128)" in c for c in pts["config"])


def test_runs_before_the_fields_existed_join_their_default_curve():
    # no scaling/strategy/aspect recorded (older nanochat runs): strong, zero2, 64; NNTile gets none of them
    rows = [row("bare", 8, 100), row("bare", 16, 190, scaling="strong", strategy="zero2", aspect_ratio=64),
            row("bare", 8, 50, workload="nntile-gpt2")]
    pts = scaling.scaling_table(to_frame(rows))
    nano = pts[pts["workload"] == "nanochat-base"]
    assert nano["config"].nunique() == 1 and nano["world_size"].tolist() == [8, 16]
    nntile = pts.loc[pts["workload"] == "nntile-gpt2", "config"].iloc[0]
    assert nntile == "nntile-gpt2 d20 · seq 2048 · batch 524,288 · NVIDIA H200"


def test_cpu_runs_count_ranks_not_gpus():
    rows = [row("bare", 2, 100, gpu_name=None, gpus_per_node=0), row("bare", 2, 100, gpu_name=None)]
    pts = scaling.scaling_table(to_frame(rows))
    devices = sorted(pts["device"].fillna("none"))
    assert devices == ["CPU", "none"]  # no GPU recorded and no 0 GPUs per node: the device is unknown
    assert {scaling.rank_unit(d) for d in pts["device"]} == {"ranks"}
    assert scaling.rank_unit("NVIDIA H200") == "GPUs"
    assert any(c.endswith("· CPU") for c in pts["config"]) and any("device not recorded" in c for c in pts["config"])


def test_point_figures_summarise_the_why_columns_and_keep_missing_phases_missing():
    rows = [row("bare", 8, 100, phase_imports_done_s=6.0, phase_dist_init_s=1.0, busbw_all_reduce_gbps=300.0),
            row("bare", 8, 100, phase_imports_done_s=8.0, phase_dist_init_s=1.5, busbw_all_reduce_gbps=310.0),
            row("bare", 8, 100, phase_dist_init_s=9.0)]  # no imports milestone: its time is in dist_init
    pt = scaling.scaling_table(to_frame(rows)).iloc[0]
    assert pt["phase_imports_done_s"] == pytest.approx(7.0)  # median of the runs that measured it
    assert pt["phase_dist_init_s"] == pytest.approx(1.5) and pt["busbw_all_reduce_gbps"] == pytest.approx(305.0)
    assert math.isnan(pt["phase_preflight_s"])  # measured by none: missing, not 0


def test_a_slurm_cpu_run_is_a_cpu_run_though_it_has_ranks_per_node():
    # under Slurm gpus_per_node counts the ranks of a node; --device_type=cpu says what they ran on
    rows = [row("bare", 4, 100, gpu_name=None, gpus_per_node=2, device_type="cpu")]
    pts = scaling.scaling_table(to_frame(rows))
    assert pts["device"].tolist() == ["CPU"] and pts["config"].iloc[0].endswith("· CPU")


def k_runs(root, ks_and_bpb, iterations=(), resolved=()):
    """Pre-training runs of bare at 2 GPUs, each validated on NANOCHAT_VAL_FILES_K shards with that min val bpb (and
    trained for that many of `iterations` steps, where given: --num_iterations; `resolved`: the steps the trainer
    recorded in run.json, where given)."""
    import random

    from tests.support.synthetic import run_events, write_run

    for i, (k, bpb) in enumerate(ks_and_bpb):
        events = run_events(2000.0, 30, 65536, 2, 1e9, 5.0, random.Random(i))
        events[-1]["min_val_bpb"] = events[-2]["val_bpb"] = bpb
        horizon = {"num_iterations": iterations[i]} if iterations else {}
        steps = {"num_iterations": resolved[i]} if resolved and resolved[i] is not None else {}
        write_run(root / f"r{i}", {**steps, "run_id": f"r{i}", "sweep_id": "s", "workload": "nanochat-base",
                                   "runtime": "bare",
                                   "nodes": 1, "gpus_per_node": 2, "world_size": 2, "status": "ok", "val_files_k": k,
                                   "gpu_name": "NVIDIA H200", "config": {"depth": 20, "total_batch_size": 65536,
                                                                         "device_batch_size": 16, "max_seq_len": 2048,
                                                                         **horizon}},
                  events)


def test_repeats_validated_on_other_shards_have_no_min_val_bpb(tmp_path):
    """Regression: NANOCHAT_VAL_FILES_K (the last K shards are the validation split) was in no key, so a point's
    repeats that validated on 1 and on 2 shards were pooled and its min val bpb was a minimum across two validation
    sets. Such a point keeps its throughput (K changes no step's speed) but has no min val bpb, and the note says why;
    check calls a reference on min val bpb over such runs pooled."""
    from bench.analysis import check, report
    from bench.analysis.collect import collect

    k_runs(tmp_path / "mixed", [(1, 1.2), (2, 0.9), (1, 1.1)])
    table = collect([tmp_path / "mixed"], tmp_path / "t1").table
    pts = scaling.scaling_table(table)
    assert pts["runs"].tolist() == [3] and pts["tok_per_sec"].notna().all() and pts["min_val_bpb"].isna().all()
    runs = scaling.with_config(scaling.usable(table))
    assert report.mixed_val_files_note(runs, "GPUs") == (
        " bare at 2 GPUs validated on NANOCHAT_VAL_FILES_K 1, 2: val bpb of other validation shards, so that point "
        "has no min val bpb.")
    assert check._pooled(runs, "min_val_bpb") == ("val_files_k",) and check._pooled(runs, "tok_per_sec") == ()
    k_runs(tmp_path / "one", [(2, 1.2), (2, 0.9)])
    table = collect([tmp_path / "one"], tmp_path / "t2").table
    assert scaling.scaling_table(table)["min_val_bpb"].tolist() == [0.9]
    assert report.mixed_val_files_note(scaling.with_config(scaling.usable(table)), "GPUs") == ""


def test_repeats_trained_for_other_step_counts_have_no_min_val_bpb(tmp_path):
    """Regression: num_iterations (the training horizon) was in no key, so a point's repeats trained for 30 and for
    300 steps were pooled and its min val bpb was the longer run's loss beside the shorter's. Such a point keeps its
    throughput (the steady steps' speed does not depend on how many there are) but has no min val bpb, the note
    naming each horizon; check calls a reference on min val bpb over such runs pooled."""
    from bench.analysis import check, report
    from bench.analysis.collect import collect

    k_runs(tmp_path / "mixed", [(1, 1.2), (1, 0.9), (1, 1.1)], iterations=(30, 300, 30))
    table = collect([tmp_path / "mixed"], tmp_path / "t1").table
    pts = scaling.scaling_table(table)
    assert pts["runs"].tolist() == [3] and pts["tok_per_sec"].notna().all() and pts["min_val_bpb"].isna().all()
    runs = scaling.with_config(scaling.usable(table))
    assert report.mixed_horizons_note(runs, "GPUs") == (
        " bare at 2 GPUs trained for num_iterations 30, 300: val bpb after other training horizons, so that point "
        "has no min val bpb.")
    assert check._pooled(runs, "min_val_bpb") == ("num_iterations",) and check._pooled(runs, "tok_per_sec") == ()
    k_runs(tmp_path / "one", [(1, 1.2), (1, 0.9)], iterations=(300, 300))
    table = collect([tmp_path / "one"], tmp_path / "t2").table
    assert scaling.scaling_table(table)["min_val_bpb"].tolist() == [0.9]
    assert report.mixed_horizons_note(scaling.with_config(scaling.usable(table)), "GPUs") == ""


def test_repeats_whose_horizon_the_trainer_derived_are_told_apart_by_the_steps_it_recorded(tmp_path):
    """Regression: the horizon was read from --num_iterations alone, so runs given -1 (the horizon from
    --target_param_data_ratio or --target_flops) all read -1 and a point's repeats that trained 30 and 300 steps were
    pooled, their min val bpb the longer run's beside the shorter's, without the note. The horizon of such a run is
    the steps the trainer recorded (run.json num_iterations); an explicit flag is the horizon asked for, and a run of
    an older release that recorded no steps keeps its flag."""
    from bench.analysis import check, report
    from bench.analysis.collect import collect

    k_runs(tmp_path / "mixed", [(1, 1.2), (1, 0.9), (1, 1.1)], iterations=(-1, -1, -1), resolved=(30, 300, 30))
    table = collect([tmp_path / "mixed"], tmp_path / "t1").table
    assert sorted(table["num_iterations"]) == [30, 30, 300]
    assert scaling.scaling_table(table)["min_val_bpb"].isna().all()
    runs = scaling.with_config(scaling.usable(table))
    assert report.mixed_horizons_note(runs, "GPUs") == (
        " bare at 2 GPUs trained for num_iterations 30, 300: val bpb after other training horizons, so that point "
        "has no min val bpb.")
    assert check._pooled(runs, "min_val_bpb") == ("num_iterations",)
    # the same derived horizon is one: repeats; an explicit flag is read as given (mid_train records its steps, N - 1)
    k_runs(tmp_path / "one", [(1, 1.2), (1, 0.9), (1, 1.0)], iterations=(-1, -1, 300), resolved=(300, 300, 299))
    table = collect([tmp_path / "one"], tmp_path / "t2").table
    assert scaling.scaling_table(table)["min_val_bpb"].tolist() == [0.9]
    # a run that recorded no steps (an older release, or one that stopped before its horizon was known) keeps -1
    k_runs(tmp_path / "old", [(1, 1.2), (1, 0.9)], iterations=(-1, -1), resolved=(None, 300))
    table = collect([tmp_path / "old"], tmp_path / "t3").table
    assert sorted(table["num_iterations"]) == [-1, 300] and scaling.scaling_table(table)["min_val_bpb"].isna().all()
