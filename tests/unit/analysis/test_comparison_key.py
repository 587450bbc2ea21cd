"""The comparison key holds the model's identity: runs of different models, precision, data or tiling are
never repeats of one point, and the report says which runs it kept apart and why.

    python -m pytest tests/unit/analysis/test_comparison_key.py -q
"""

import json

import pandas as pd
import pytest

from bench.analysis import scaling
from bench.analysis.collect import collect, load_table, to_frame
from bench.analysis.report import write_report
from bench.analysis.rundir import manifest_fields


def _two_models(make_run, field: dict, other: dict):
    for i in range(2):
        make_run(f"a{i}", tok_s=17_000.0 + i, **field)
        make_run(f"b{i}", tok_s=500.0 + i, **other)


def test_two_vocabularies_are_two_groups_and_the_report_says_why(make_run, tmp_path):
    _two_models(make_run, {"vocabulary": {"vocab_size": 1024}}, {"vocabulary": {"vocab_size": 65536}})
    table = collect([tmp_path / "runs"], tmp_path / "table").table
    points = scaling.scaling_table(table)
    assert len(points) == 2 and sorted(points["runs"]) == [2, 2]  # not one row of 4 pooled "repeats"
    assert sorted(points["tok_per_sec"]) == pytest.approx([500.5, 17_000.5], rel=0.01)
    assert points["config"].str.contains("vocab 1,024").sum() == 1
    assert points["config"].str.contains("vocab 65,536").sum() == 1

    kept = scaling.kept_apart(table)
    assert list(kept["differs"].unique()) == ["vocab_size"] and sorted(kept["runs"]) == [2, 2]
    write_report(table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    section = md[md.index("## Runs kept apart"):]
    assert "differ in what was trained" in section and "vocab 1,024" in section and "vocab 65,536" in section
    assert md.count("\n## nanochat-base d20") == 2  # one config section per model
    assert "## Runs kept apart" in (tmp_path / "report" / "report.html").read_text().replace("<h2>", "## ")


def test_one_model_has_no_kept_apart_section(make_run, tmp_path):
    _two_models(make_run, {"vocabulary": {"vocab_size": 1024}}, {"vocabulary": {"vocab_size": 1024}})
    table = collect([tmp_path / "runs"], tmp_path / "table").table
    assert len(scaling.scaling_table(table)) == 1 and scaling.kept_apart(table).empty
    write_report(table, tmp_path / "report")
    assert "Runs kept apart" not in (tmp_path / "report" / "report.md").read_text()


def test_fp8_is_another_precision_and_a_run_without_the_key_trained_in_bf16(make_run, tmp_path):
    base = {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288, "device_batch_size": 32}
    _two_models(make_run, {"config": {**base, "fp8": True}}, {"config": base})
    table = collect([tmp_path / "runs"]).table
    assert sorted(table["precision"].unique()) == ["bf16", "fp8"]
    kept = scaling.kept_apart(table)
    assert set(kept["values"]) == {"precision fp8", "precision bf16"}


def test_fp8_lm_head_is_another_precision_never_pooled_with_fp8_or_bf16(make_run, tmp_path):
    """--fp8_lm_head runs another program (lm_head's matmul in FP8 too): with --fp8 or alone, never a repeat
    of a --fp8 or a bf16 run."""
    base = {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288, "device_batch_size": 32}
    for i in range(2):
        make_run(f"fp8{i}", tok_s=182_000.0 + i, config={**base, "fp8": True})
        make_run(f"head{i}", tok_s=188_000.0 + i, config={**base, "fp8": True, "fp8_lm_head": True})
        make_run(f"bf16{i}", tok_s=160_000.0 + i, config=base)
        make_run(f"headonly{i}", tok_s=161_000.0 + i, config={**base, "fp8_lm_head": True})
    table = collect([tmp_path / "runs"]).table
    assert sorted(table["precision"].unique()) == ["bf16", "bf16 + fp8 lm_head", "fp8", "fp8 + fp8 lm_head"]
    points = scaling.scaling_table(table)
    assert len(points) == 4 and list(points["runs"]) == [2, 2, 2, 2]


def test_a_recorded_dtype_bfloat16_is_the_bf16_of_a_run_that_recorded_none(make_run, tmp_path):
    """Regression: mid_train recorded upstream's --dtype=bfloat16 from the release that took the flag on, and its
    runs read precision "bfloat16" beside the "bf16" of earlier runs without it: one precision spelled two ways,
    kept apart as runs that "differ in precision" and never pooled as repeats."""
    base = {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288, "device_batch_size": 32}
    for i in range(2):
        make_run(f"new{i}", tok_s=17_000.0 + i, workload="nanochat-mid", config={**base, "dtype": "bfloat16"})
        make_run(f"old{i}", tok_s=17_000.0 + i, workload="nanochat-mid", config=base)
    table = collect([tmp_path / "runs"]).table
    assert table["precision"].unique().tolist() == ["bf16"]
    assert scaling.kept_apart(table).empty and scaling.scaling_table(table)["runs"].tolist() == [4]


def test_data_identity_and_nntile_tiles_are_flattened_and_keys():
    """run.json's `data` section (origin, tokenizer) read tolerantly: absent is unknown, never an error."""
    row = manifest_fields({"data": {"origin": "generated", "tokenizer_sha256": "ab" * 32}, "config": {}}, [])
    assert (row["data_origin"], row["tokenizer_sha256"], row["precision"]) == ("generated", "ab" * 32, "bf16")
    row = manifest_fields({"config": {}, "data": None}, [])
    assert row["data_origin"] is None and row["tokenizer_sha256"] is None
    tiled = manifest_fields({"workload": "nntile-gpt2", "config": {"seq_tile": 64, "embd_tile": -1}}, [])
    assert tiled["tiling"] == "seq_tile=64"  # -1: untiled, as a release that recorded the flags as given meant
    recorded = manifest_fields({"nntile": {"tiling": {"tiled_axis_groups": 3, "axis_groups": 91}}}, [])
    assert recorded["tiling"] == '{"axis_groups": 91, "tiled_axis_groups": 3}'
    assert {"data_origin", "tokenizer_sha256", "tiling", "vocab_size", "num_params", "flops_per_token",
            "precision"} <= set(scaling.GROUP_KEYS)


def test_untiled_nntile_runs_read_as_untiled_and_differ_in_their_device_batch(make_run, tmp_path):
    """The runner records the tile sizes resolved, so an untiled run read as tiled at its full extents
    ('embd_tile=128,...,minibatch_tile=8,seq_tile=128') and untiled runs at --minibatch 8 and 4 were kept apart as
    differing in tiling; a tile as large as its axis cuts nothing, and the runs differ in their device batch."""
    from bench.workloads.nntile.config import as_record, parse_args

    shape = tmp_path / "d2.json"
    shape.write_text(json.dumps({"n_embd": 128, "n_head": 1, "n_layer": 2, "n_positions": 128, "vocab_size": 1024}))

    def record(*flags):
        return as_record(*parse_args([f"--config-path={shape}", "--batch=8", *flags]))

    for name, flags in (("mb8", ["--minibatch=8"]), ("mb4", ["--minibatch=4"]),
                        ("tiled", ["--minibatch=8", "--seq-tile=64", "--minibatch-tile=4"])):
        make_run(name, tok_s=2_000.0, world_size=1, workload="nntile-gpt2", config=record(*flags))
    table = collect([tmp_path / "runs"]).table
    assert table.set_index("run_id")["tiling"].to_dict() == {
        "mb8": "untiled", "mb4": "untiled", "tiled": "minibatch_tile=4,seq_tile=64"}
    apart = scaling.kept_apart(table)
    assert set(apart["values"]) == {"tiling untiled", "tiling minibatch_tile=4,seq_tile=64"}
    assert not scaling.mixed_batches(scaling.with_config(scaling.usable(table))).empty  # mb8 and mb4: device batch


def test_generated_and_downloaded_data_are_kept_apart(make_run, tmp_path):
    make_run("g0")
    make_run("d0")
    table = collect([tmp_path / "runs"]).table
    table["data_origin"] = pd.Series(["downloaded", "generated"], dtype="string")  # as a newer contract writes
    points = scaling.scaling_table(table)
    assert len(points) == 2 and set(points["config"].str.extract(r"(\w+) data$")[0]) == {"generated", "downloaded"}
    assert to_frame([]).columns.tolist()[-1] == "row_version"


@pytest.mark.parametrize("read", ["collected", "runs.csv"])
def test_fused_kernels_group_runs_by_the_kernels_that_ran_whichever_release_recorded_them(make_run, tmp_path, read):
    """--fused_kernels recorded as true (before the flag took names) meant rotary_norm alone and false none: such
    runs are repeats of runs that name the same kernels, and another set of kernels is another program."""
    base = {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288, "device_batch_size": 32}
    for name, kernels in (("old_on", True), ("new_on", "rotary_norm"), ("both", "rotary_norm,softcap_loss"),
                          ("old_off", False), ("new_off", "")):
        make_run(name, tok_s=160_000.0, config={**base, "fused_kernels": kernels})
    make_run("before_the_flag", tok_s=160_000.0, config=base)
    table = collect([tmp_path / "runs"], tmp_path / "table").table
    assert table.set_index("run_id")["fused_kernels"].fillna("<not recorded>").to_dict() == {
        "old_on": "rotary_norm", "new_on": "rotary_norm", "both": "rotary_norm,softcap_loss", "old_off": "",
        "new_off": "", "before_the_flag": "<not recorded>"}
    if read == "runs.csv":  # where "" is read back as no value, as a run from before the flag
        table = load_table(tmp_path / "table" / "runs.csv")
    points = scaling.scaling_table(table)
    plain = "nanochat-base d20 · seq 2048 · strong scaling, batch 524,288 · zero2 · NVIDIA H200"
    assert dict(zip(points["config"], points["runs"])) == {
        plain: 3, plain + " · fused: rotary_norm": 2, plain + " · fused: rotary_norm, softcap_loss": 1}
    assert scaling.kept_apart(table).empty  # told apart by their labels: another config, not another model


def test_fused_kernels_are_read_from_run_json_with_the_meaning_of_their_release():
    def read(config: dict, workload: str = "nanochat-base"):
        return manifest_fields({"workload": workload, "config": config}, [])["fused_kernels"]

    assert (read({"fused_kernels": True}), read({"fused_kernels": False})) == ("rotary_norm", "")
    assert read({"fused_kernels": "rotary_norm,softcap_loss"}) == "rotary_norm,softcap_loss"
    assert read({"fused_kernels": ""}) == ""
    assert read({}) is None and read({"seq_tile": 64}, "nntile-gpt2") is None  # not recorded: scaling.LEGACY's


def test_the_side_by_side_table_keeps_tilings_and_precisions_apart(make_run, tmp_path):
    """Regression: nanochat beside NNTile pooled every run of one shape into one median per workload and
    runtime, so NNTile's tilings (500 and 900 tok/s) read as one point of 700, and bf16 with fp8 likewise.
    Now each is a row, named by what sets it apart, and no ratio is made against an arbitrary nanochat point."""
    from bench.analysis.sidebyside import side_by_side

    base = {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288, "device_batch_size": 32}
    for i, (tok_s, tile) in enumerate(((500.0, 64), (900.0, 2048))):
        make_run(f"nn{i}", tok_s=tok_s, workload="nntile-gpt2", config={**base, "seq_tile": tile})
    make_run("bf16", tok_s=17_000.0, config=base)
    make_run("fp8", tok_s=20_000.0, config={**base, "fp8": True})
    pairs = side_by_side(collect([tmp_path / "runs"]).table)
    assert sorted(pairs["tok_per_sec"].round(-2)) == [500, 900, 17_000, 20_000]
    assert set(pairs["variant"]) == {"tiling seq_tile=64", "tiling seq_tile=2048", "precision bf16", "precision fp8"}
    assert pairs["vs_nanochat"].isna().all()  # two nanochat points of that shape: neither is the reference


def test_the_side_by_side_table_keeps_device_batches_apart(make_run, tmp_path):
    """Regression: the device batch is no part of a shape (weak and strong runs of one shape are the same work), so
    nanochat's runs of one shape at device batch 16 and 32 (another gradient accumulation each) were pooled into one
    median. Now each device batch is a row of its own, named in the variant column, and neither is the reference."""
    from bench.analysis.sidebyside import side_by_side

    base = {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288}
    make_run("nn", tok_s=500.0, workload="nntile-gpt2", config={**base, "device_batch_size": 32, "seq_tile": 64})
    for name, tok_s, dbs in (("a", 16_000.0, 16), ("b", 18_000.0, 32), ("c", 18_200.0, 32)):
        make_run(name, tok_s=tok_s, config={**base, "device_batch_size": dbs})
    pairs = side_by_side(collect([tmp_path / "runs"]).table)
    nano = pairs[pairs["family"] == "nanochat"]
    assert sorted(zip(nano["variant"], nano["runs"])) == [("device batch 16", 1), ("device batch 32", 2)]
    assert sorted(nano["tok_per_sec"].round(-2)) == [16_000, 18_100]
    assert pairs.loc[pairs["family"] == "nntile", "variant"].tolist() == [""]
    assert pairs["vs_nanochat"].isna().all()  # two nanochat points of that shape: neither is the reference


def test_the_side_by_side_table_keeps_node_counts_apart(make_run, tmp_path):
    """Regression: the node count was no part of a side-by-side point, so nanochat's 8 ranks on one node (18,000 tok/s)
    and on two nodes of 4 (12,000, over the network) were pooled into one median of 15,000, NNTile's one-node run
    compared with it. Now each node count is a row of its own, and NNTile's ratio is to the one-node point alone."""
    from bench.analysis.sidebyside import side_by_side, side_by_side_table

    base = {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288, "device_batch_size": 32}
    make_run("nn", tok_s=500.0, workload="nntile-gpt2", config={**base, "seq_tile": 64})
    make_run("one", tok_s=18_000.0, config=base)
    make_run("two", tok_s=12_000.0, nodes=2, gpus_per_node=4, config=base)
    pairs = side_by_side(collect([tmp_path / "runs"]).table)
    nano = pairs[pairs["family"] == "nanochat"]
    assert sorted(zip(nano["nodes"], nano["runs"], nano["tok_per_sec"].round(-2))) == [(1, 1, 18_000), (2, 1, 12_000)]
    nntile = pairs[pairs["family"] == "nntile"].iloc[0]
    assert nntile["vs_nanochat"] == pytest.approx(nntile["tok_per_sec"] / nano["tok_per_sec"].max())
    table = side_by_side_table(pairs)
    assert [row[table.columns.index("nodes")] for row in table.rows] == ["1", "1", "2"]
    make_run("nn2", tok_s=400.0, workload="nntile-gpt2", nodes=4, gpus_per_node=2, config={**base, "seq_tile": 64})
    pairs = side_by_side(collect([tmp_path / "runs"]).table)  # nanochat never ran on 4 nodes: no reference there
    assert pairs.loc[pairs["nodes"] == 4, "vs_nanochat"].isna().all()


def test_an_nntile_run_trained_in_float32_not_in_nanochats_bf16():
    """Regression: a run.json without a dtype was read as bf16 whatever trained it, so NNTile's float32 runs
    were labelled (and keyed) bf16 in the table and the report."""
    def read(workload: str, config: dict | None = None):
        return manifest_fields({"workload": workload, "config": config or {"seq_tile": 64}}, [])["precision"]

    assert read("nntile-gpt2") == "float32" and read("nanochat-base") == "bf16"
    assert read("nntile-gpt2", {"dtype": "bfloat16"}) == "bf16"  # a dtype it records wins


def test_mid_train_s_dtype_flag_is_not_its_precision():
    """Regression: mid_train takes upstream's --dtype and, as upstream, autocasts to bfloat16 whatever it says, but a
    run given --dtype=float32 read precision float32, a key apart from its identical bf16 runs; chat_sft, whose
    --dtype sets its autocast, keeps it."""
    def read(workload: str, dtype: str):
        return manifest_fields({"workload": workload, "config": {"dtype": dtype}}, [])["precision"]

    assert read("nanochat-mid", "float32") == "bf16" and read("nanochat-mid", "bfloat16") == "bf16"
    assert read("nanochat-sft", "float32") == "float32"


def test_models_whose_short_labels_round_alike_are_never_pooled(tmp_path):
    """Regression: 17.21M and 17.24M parameters both read "17.2M params", so the two models shared one config label
    and the report pooled them as repeats of one point (a median over both models, a ratio across them) and
    kept none apart; now such labels give the values as recorded."""
    def run(runtime, tok_s, params):
        return {"source": f"/r/{runtime}-{params}-{tok_s}", "runtime": runtime, "world_size": 1, "nodes": 1,
                "tok_per_sec": tok_s, "workload": "nanochat-base", "depth": 20, "max_seq_len": 2048,
                "total_batch_size": 524288, "gpu_name": "NVIDIA H200", "status": "ok", "num_params": params}
    table = to_frame([run("bare", 100.0, 17_210_000.0), run("bare", 120.0, 17_240_000.0),
                      run("ce", 90.0, 17_210_000.0)])
    points = scaling.scaling_table(table)
    assert sorted(zip(points["config"].str.split(" · ").str[-1], points["runtime"], points["tok_per_sec"])) == [
        ("params 17,210,000", "bare", 100.0), ("params 17,210,000", "ce", 90.0), ("params 17,240,000", "bare", 120.0)]
    assert scaling.runtime_ratios(table)["ratio"].tolist() == [pytest.approx(0.9)]
    assert sorted(scaling.kept_apart(table)["values"]) == ["params 17,210,000", "params 17,240,000"]
    write_report(table, tmp_path / "report")
    assert "| params 17,240,000 |" in (tmp_path / "report" / "report.md").read_text()
