"""The memory model's check and refit, and the capacity report, on a GPU sweep's summary.

The "measurements" are made with known constants (activations 50, logits 20, checkpointed input 3 bytes),
so the refit must find those constants again and the check must then show no error; the report must draw
the GPU panels (device and host memory, tok/s, MFU). No GPU here: this checks the arithmetic and the
files, not the hardware.

    python -m pytest tests/unit/capacity/test_calibrate_report.py -q
"""

import copy
import json
import re

import pytest

from bench.analysis.capacity import GIB, write_capacity_report
from bench.capacity import calibrate
from bench.capacity.probe import ProbeResult, ProbeSpec
from bench.nanochat import memory

TRUE = {"act_bytes_per_token_layer_dim": 50, "logits_bytes_per_token_vocab": 20,
        "ac_saved_bytes_per_token_layer_dim": 3}
MACHINE = {"device_type": "cuda", "gpu_name": "NVIDIA H200", "device_bytes": 140 * 2 ** 30, "host_bytes": 125 * 2 ** 30,
           "host_available_bytes": 120 * 2 ** 30, "memory_limit": None, "nproc": 1}


def true_calibration():
    c = copy.deepcopy(memory.load_calibration())
    c["cuda"]["eager"]["act_bytes_per_token_layer_dim"]["value"] = TRUE["act_bytes_per_token_layer_dim"]
    c["cuda"]["eager"]["logits_bytes_per_token_vocab"]["value"] = TRUE["logits_bytes_per_token_vocab"]
    c["cuda"]["ac_saved_bytes_per_token_layer_dim"]["value"] = TRUE["ac_saved_bytes_per_token_layer_dim"]
    return c


def summary():
    truth, probes = true_calibration(), []
    for strategy, depth, batch in [("fsdp", 12, 8), ("fsdp", 24, 16), ("fsdp+ac", 24, 32), ("fsdp+ac", 12, 16),
                                   ("zero2", 24, 16), ("fsdp+ac+offload", 24, 8), ("fsdp", 60, 1)]:
        spec = ProbeSpec(strategy, depth, device_batch_size=batch, device_type="cuda")
        est = memory.estimate(memory.MemoryPoint(depth, device_batch_size=batch, strategy=strategy), truth)
        r = ProbeResult(spec, "ok", num_params=est.num_params, peak_mem_mib=est.peak_bytes / 2 ** 20,
                        tok_per_sec=1e5 / depth * batch, mfu=10.0 + batch / 4, step_ms=100.0,
                        host_peak_bytes=est.host_bytes, run_dir="runs/x")
        probes.append({**r.record(), "run_dir": r.run_dir, "reused": False})
    oom = ProbeResult(ProbeSpec("fsdp", 62, device_type="cuda"), "oom", "Tried to allocate 2.00 GiB",
                      num_params=12_000_000_000, oom_bytes=2 ** 31, extra={"predicted_need_bytes": 150 * 2 ** 30})
    probes.append({**oom.record(), "run_dir": "runs/y", "reused": False})
    cap = {"name": "d60", "depth": 60, "aspect_ratio": 64, "num_params": probes[-2]["num_params"]}
    searches = [{"strategy": "fsdp", "aspect_ratio": 64, "capacity": cap, "stopped": None, "probes": 2,
                 "first_failure": {"name": "d62", "depth": 62, "aspect_ratio": 64, "num_params": 12_000_000_000},
                 "ratio_to_fsdp": 1.0, "tok_per_sec_at_capacity": 1666.0, "batch_at_capacity": 1}]
    return {"machine": MACHINE, "config": {}, "searches": searches, "probes": probes, "not_run_for_budget": 0}


def test_refit_finds_the_constants_that_made_the_measurements():
    s = summary()
    before = [abs(r["error"]) for r in calibrate.check(s)]
    fitted, facts = calibrate.refit(s)
    assert facts["probes_used"] >= 4 and max(before) > 0.05
    for name, value in TRUE.items():
        assert facts["fitted"][name] == pytest.approx(value, rel=0.01)
    assert max(abs(r["error"]) for r in calibrate.check(s, fitted)) < 0.005
    section = fitted["cuda"]["eager"]["act_bytes_per_token_layer_dim"]
    assert section["source"].startswith("measured:") and "NVIDIA H200" in section["source"]
    host = [r for r in calibrate.check(s) if r["measured_host_bytes"]]
    assert len(host) == 1 and abs(host[0]["host_error"]) < 1e-9


def test_report_of_a_gpu_sweep(tmp_path):
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps(summary()))
    md = write_capacity_report([tmp_path / "sweep"], tmp_path / "report").read_text()
    assert re.search(r"\| *fsdp *\| *1 *\| *d60 *\|", md) and "d62" in md  # cells padded to their column
    for name in ("capacity", "memory", "speed"):
        assert (tmp_path / "report" / "figures" / f"capacity-{name}.png").stat().st_size > 10_000


def test_each_capacity_is_reported_with_the_sequence_length_it_was_found_at(tmp_path):
    """Regression: sweeps at --seq 2048 and --seq 512 reported together read as two fsdp capacities of one GPU, d60
    and d62, the report naming the sequence length nowhere though the capacity depends on it."""
    short = summary()
    for p in short["probes"]:
        p["probe"]["max_seq_len"] = 512
    short["searches"][0]["capacity"] = short["searches"][0]["first_failure"]
    for name, s in (("long", summary()), ("short", short)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(s))
    md = write_capacity_report([tmp_path / "long", tmp_path / "short"], tmp_path / "report").read_text()
    assert re.search(r"\| *largest that trained *\| *parameters *\| *seq *\|", md)
    assert re.search(r"\| *d60 *\| *[\d,]+ *\| *2,048 *\|", md) and re.search(r"\| *d62 *\| *[\d,]+ *\| *512 *\|", md)


def test_sweeps_of_other_machines_reported_together_each_name_their_machine(tmp_path):
    """Regression: an H100's sweep and an H200's reported together read 'Machine: NVIDIA H100, 80.0 GiB per device'
    alone, the H200's capacity under the H100's name, and their rows told apart by nothing; each machine is named
    with its sweeps, and the capacity table gains a machine column where they differ."""
    h100 = summary()
    h100["machine"] = {**MACHINE, "gpu_name": "NVIDIA H100", "device_bytes": 80 * GIB, "host_bytes": 1024 * GIB}
    h100["searches"][0]["capacity"] = h100["searches"][0]["first_failure"]
    for name, s in (("h100", h100), ("h200", summary()), ("h200-again", summary())):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(s))
    dirs = [tmp_path / d for d in ("h100", "h200", "h200-again")]
    md = write_capacity_report(dirs, tmp_path / "report").read_text()
    assert (f"Machines: NVIDIA H100, 80.0 GiB per device, host 1024 GiB ({dirs[0]}); NVIDIA H200, 140.0 GiB per "
            f"device, host 125 GiB ({dirs[1]}, {dirs[2]}).") in md and "Machine:" not in md
    assert re.search(r"\| *fsdp *\| *NVIDIA H100 *\| *1 *\| *d62 *\|", md)
    assert re.search(r"\| *fsdp *\| *NVIDIA H200 *\| *1 *\| *d60 *\|", md)
    md = write_capacity_report(dirs[1:], tmp_path / "report").read_text()
    assert f"Machine: NVIDIA H200, 140.0 GiB per device, host 125 GiB. Sweeps: {dirs[1]}, {dirs[2]}." in md
    assert "NVIDIA H200 |" not in md


def test_probes_of_sweeps_on_other_machines_each_name_their_machine(tmp_path):
    """Regression: the every-probe table of an H100's sweep and an H200's reported together had no machine column,
    so their probes of one strategy, depth and batch read as two measurements of one GPU."""
    h100 = summary()
    h100["machine"] = {**MACHINE, "gpu_name": "NVIDIA H100", "device_bytes": 80 * GIB}
    for name, s in (("h100", h100), ("h200", summary())):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(s))
    every = lambda md: md.split("## Every probe")[1]  # noqa: E731
    md = every(write_capacity_report([tmp_path / "h100", tmp_path / "h200"], tmp_path / "report").read_text())
    assert re.search(r"\| *strategy *\| *machine *\| *GPUs *\| *depth *\|", md)
    for gpu in ("NVIDIA H100", "NVIDIA H200"):
        assert re.search(rf"\| *fsdp *\| *{gpu} *\| *1 *\| *60 *\| *1 *\| *[\d,]+ *\| *ok *\|", md)
    assert "machine" not in every(write_capacity_report([tmp_path / "h200"], tmp_path / "report").read_text())


def test_only_probes_out_of_memory_are_drawn_as_out_of_memory(tmp_path):
    """Regression: the memory figure drew every probe that did not train (a timeout, a failure, a cancel) as an
    'x out of memory' at its predicted need, so a hang below the device's memory read as a model that did not fit
    there."""
    from bench.analysis.capacity import load, memory_figure

    s = summary()
    for depth, outcome in ((64, "timeout"), (66, "failed"), (68, "cancelled")):
        stuck = ProbeResult(ProbeSpec("fsdp", depth, device_type="cuda"), outcome, "no end after 600 s",
                            num_params=depth * 10 ** 8, extra={"predicted_need_bytes": 100 * GIB})
        s["probes"].append({**stuck.record(), "run_dir": "runs/z", "reused": False})
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps(s))
    probes, _, machines = load([tmp_path / "sweep"])
    fig = memory_figure(probes, machines, {k: "C0" for k in probes["strategy"]})
    crosses = [x for line in fig.axes[0].lines if line.get_marker() == "x" for x in line.get_xdata()]
    assert crosses == [12_000_000_000]  # the one probe out of memory, d62


def test_the_allocation_an_oom_asked_for_is_shown_in_mib(tmp_path):
    """Regression: the probe table gave the failed allocation in GiB to one decimal, so the few MiB a probe at the
    border typically asks for (CUDA's 'Tried to allocate 20.00 MiB', 48 MiB on a capped CPU) read '0.0'."""
    s = summary()
    s["probes"][-1].update(oom_bytes=20 * 2 ** 20, message="Tried to allocate 20.00 MiB")
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps(s))
    md = write_capacity_report([tmp_path / "sweep"], tmp_path / "report").read_text()
    header = next(line for line in md.splitlines() if "OOM asked" in line)
    row = next(line for line in md.splitlines() if "| oom " in line)
    cells = dict(zip(*(map(str.strip, line.strip("|").split("|")) for line in (header, row))))
    assert cells == {**cells, "OOM asked MiB": "20.0", "outcome": "oom"}


def test_a_search_that_did_not_finish_is_reported_as_such(tmp_path):
    """An interrupted sweep's fsdp search had reached d60 without finding its border: the report's row showed
    d60 as the largest that trained, with nothing in it to say the search had not ended."""
    s = summary()
    s["searches"][0].update(first_failure=None, complete=False, ratio_to_fsdp=None)
    s["interrupted"] = "SIGINT"
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps(s))
    md = write_capacity_report([tmp_path / "sweep"], tmp_path / "report").read_text()
    assert re.search(r"\| *fsdp *\| *1 *\| *d60 *\|.*\| *not finished *\|", md)


def test_the_report_recomputes_the_ratio_to_fsdp_from_the_searches(tmp_path):
    """Regression: a summary of an older release stored zero2 at '1.00 x fsdp' against fsdp's unfinished search
    (a lower bound), and the report printed the stored value; now the report works it out from the rows."""
    from bench.analysis.capacity import load

    s = summary()
    fsdp = dict(s["searches"][0], first_failure=None, complete=False, ratio_to_fsdp=1.0)
    zero2 = dict(s["searches"][0], strategy="zero2", complete=True, ratio_to_fsdp=1.0)
    s["searches"] = [fsdp, zero2]
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps(s))
    assert load([tmp_path / "sweep"])[1]["ratio_to_fsdp"].isna().all()
    md = write_capacity_report([tmp_path / "sweep"], tmp_path / "report").read_text()
    assert "1.00" not in md
    fsdp.update(first_failure=zero2["first_failure"], complete=True)  # finished: the ratio stands
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps(s))
    assert load([tmp_path / "sweep"])[1]["ratio_to_fsdp"].tolist() == [1.0, 1.0]


DAMAGED = ["", '{"machine": {}, "searc', "[]", "{}", '{"machine": [], "searches": [], "probes": []}', "\udcff"]


@pytest.mark.parametrize("text", DAMAGED)
def test_a_damaged_summary_is_one_line_naming_it_and_how_to_rebuild_it(tmp_path, capsys, text):
    """A summary.json cut short or edited by hand: `capacity --report` ended in a JSONDecodeError, KeyError or
    TypeError traceback."""
    from bench.cli import main

    (tmp_path / "summary.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    assert main(["capacity", "--report", "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'summary.json'} is not a capacity summary (") and "delete it" in err
    assert len(err.strip().splitlines()) == 1


def test_a_capacity_bounded_by_memory_others_held_is_reported_as_such(tmp_path):
    """A search on a shared GPU whose first failure started while other processes held 35 GiB of it: the report
    gave its capacity as the node's, with nothing in its row to say otherwise; and zero2's, searched on the whole
    GPU, came out '1.00 x fsdp' against it."""
    from bench.analysis.capacity import load

    s = summary()
    s["searches"][0].update(complete=True, held_by_others_bytes=35 * GIB)
    s["searches"].append(dict(s["searches"][0], strategy="zero2", held_by_others_bytes=None))
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps(s))
    md = write_capacity_report([tmp_path / "sweep"], tmp_path / "report").read_text()
    assert re.search(r"\| *fsdp *\| *1 *\| *d60 *\|.*\| *35\.0 GiB held by others *\|", md)
    assert load([tmp_path / "sweep"])[1]["ratio_to_fsdp"].isna().all() and "1.00" not in md


def test_each_search_is_a_bar_of_its_own_where_its_label_is():
    """--aspect-ratios 32,64: both fsdp searches were labelled 'fsdp (1 GPU)' and drawn as one bar, the second's text
    left beside no bar."""
    import pandas as pd

    from bench.analysis.capacity import _colors, capacity_bars

    rows = [dict(strategy="fsdp", aspect_ratio=a, gpus=1, gpu_name="NVIDIA H200", capacity=name, capacity_params=n,
                 ratio_to_fsdp=1.0, stopped=None) for a, name, n in ((32, "d8-a32", 4e7), (64, "d6", 8e7))]
    searches = pd.DataFrame(rows)
    ax = capacity_bars(searches, _colors(searches["strategy"])).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["fsdp a32 (1 GPU)", "fsdp (1 GPU)"]
    bars = [b.get_y() + b.get_height() / 2 for b in ax.patches]
    assert bars == [t.get_position()[1] for t in ax.texts] == [0, 1]


def test_a_bars_parameters_read_as_the_sweeps_log_writes_them():
    """The bars read ' d60 11.1201G, 1.00x fsdp' (six digits, G) where the sweep's log wrote 11.12B."""
    import pandas as pd

    from bench.analysis.capacity import _colors, capacity_bars

    searches = pd.DataFrame([dict(strategy="fsdp", aspect_ratio=64, gpus=1, gpu_name="NVIDIA H200", capacity="d60",
                                  capacity_params=11_120_148_480, ratio_to_fsdp=1.0, stopped=None)])
    ax = capacity_bars(searches, _colors(searches["strategy"])).axes[0]
    assert [t.get_text() for t in ax.texts] == [" d60 11.12B, 1.00x fsdp"]


def test_a_machine_that_recorded_no_device_memory_is_reported_not_a_type_error(tmp_path):
    """A CPU sweep on a host without /proc/meminfo records device_bytes None; the report stopped on a TypeError
    (None / int) where the memory figure already drew without it. The machine line says the memory is not recorded."""
    s = summary()
    s["machine"] = {**MACHINE, "device_type": "cpu", "gpu_name": None, "device_bytes": None}
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps(s))
    md = write_capacity_report([tmp_path / "sweep"], tmp_path / "report").read_text()
    assert "Machine: cpu, memory not recorded, host 125 GiB." in md


def test_a_machine_that_recorded_no_memory_draws_no_limit_line_and_says_so(tmp_path):
    """Without device or host memory the memory figure drew a limit line of 0 GiB on an axis of no height (matplotlib
    warned) and the machine line read "host 0 GiB"; now no limit is drawn and the line says it was not recorded."""
    import warnings

    s = summary()
    s["machine"] = {**MACHINE, "device_type": "cpu", "gpu_name": None, "device_bytes": None, "host_bytes": None}
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps(s))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        md = write_capacity_report([tmp_path / "sweep"], tmp_path / "report").read_text()
    assert "Machine: cpu, memory not recorded, host not recorded." in md


def cpu_sweep(tmp_path):
    """A capped CPU sweep's summary as the README's tiny search leaves it: 875M a rank, models of 17.6M-39.8M."""
    machine = {**MACHINE, "device_type": "cpu", "gpu_name": None, "device_bytes": 875 * 2 ** 20}
    probes = []
    for depth, params, outcome, batch, tps in ((4, 17_563_648, "ok", 1, 59.0), (6, 27_820_032, "ok", 1, 52.0),
                                               (8, 39_845_888, "oom", 1, None), (4, 17_563_648, "ok", 2, 127.0)):
        r = ProbeResult(ProbeSpec("fsdp", depth, 32, batch, max_seq_len=64, device_type="cpu"), outcome,
                        num_params=params, tok_per_sec=tps, extra={"predicted_need_bytes": depth * 2 ** 28})
        probes.append({**r.record(), "run_dir": "runs/x", "reused": False})
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps({"machine": machine, "config": {}, "searches": [],
                                                                 "probes": probes}))
    return tmp_path / "sweep"


def test_the_memory_limit_line_is_labelled_with_its_own_size(tmp_path):
    """The line of a CPU rank's 875M cap, at 0.85 GiB, was labelled 'device memory 1 GiB' (GiB to no decimal), while
    the report's machine line read 0.9 GiB: the figure's limit did not read as the limit it drew."""
    from bench.analysis.capacity import load, memory_figure

    probes, _, machines = load([cpu_sweep(tmp_path)])
    ax = memory_figure(probes, machines, {"fsdp": "C0"}).axes[0]
    limit = next(line for line in ax.lines if line.get_label().startswith("device memory"))
    assert limit.get_label() == "device memory 0.854 GiB" and limit.get_ydata()[0] == pytest.approx(875 / 1024)


def test_sweeps_of_machines_with_other_memory_draw_each_machines_limit_labelled(tmp_path):
    """Regression: an H100's sweep and an H200's reported together drew one device memory line, the H200's 140 GiB
    (and one host line, the larger host's), so the H100's points read against a limit 60 GiB above its own."""
    from bench.analysis.capacity import load, memory_figure

    h100, h200 = summary(), summary()
    h100["machine"] = {**MACHINE, "gpu_name": "NVIDIA H100", "device_bytes": 80 * GIB, "host_bytes": 500 * GIB}
    for s in (h100, h200):  # an offloading probe at batch 1: the host panel
        next(p for p in s["probes"] if "offload" in p["probe"]["strategy"])["probe"]["device_batch_size"] = 1
    for name, s in (("h100", h100), ("h200", h200), ("h200-again", h200)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(s))
    probes, _, machines = load([tmp_path / d for d in ("h100", "h200", "h200-again")])
    device, host = memory_figure(probes, machines, {k: "C0" for k in probes["strategy"]}).axes
    limits = lambda ax: {line.get_label(): line.get_ydata()[0] for line in ax.lines  # noqa: E731
                         if "memory" in line.get_label()}
    assert limits(device) == {"NVIDIA H100 device memory 80 GiB": 80, "NVIDIA H200 device memory 140 GiB": 140}
    assert limits(host) == {"NVIDIA H100 host memory 500 GiB": 500, "NVIDIA H200 host memory 125 GiB": 125}


def test_the_size_and_throughput_axes_are_labelled_at_round_numbers_in_view(tmp_path):
    """Models of 17.6M-39.8M parameters had no labelled tick on the parameters axis (matplotlib's log ticks are
    powers of ten, none in view, their minor ones unlabelled), and tok/s of 52-127 read '100' and '6 x 10^1':
    no point's size or speed could be read off the axes. Both take ticks at round numbers now."""
    from bench.analysis.capacity import load, memory_figure, speed_figure

    probes, _, machines = load([cpu_sweep(tmp_path)])
    colors = {"fsdp": "C0"}
    for fig in (memory_figure(probes, machines, colors), speed_figure(probes, colors)):
        fig.canvas.draw()
        ax = fig.axes[0]
        lo, hi = ax.get_xlim()
        shown = [t.get_text() for t in ax.get_xticklabels() if lo <= t.get_position()[0] <= hi and t.get_text()]
        assert len(shown) >= 2 and all(re.fullmatch(r"[\d.]+[kMB]?", t) for t in shown), shown
    lo, hi = ax.get_ylim()
    shown = [t.get_text() for t in ax.get_yticklabels() if lo <= t.get_position()[1] <= hi and t.get_text()]
    assert len(shown) >= 2 and all(re.fullmatch(r"[\d.]+[kMB]?", t) for t in shown), shown


def test_a_cpu_sweep_s_report_speaks_of_ranks_and_says_peak_memory_is_a_gpu_figure(tmp_path):
    """A CPU sweep's report headed its rank counts 'GPUs', labelled its speed 'tokens/s (all GPUs)' and its memory
    figure's legend showed a 'measured' marker for points never drawn (a CPU probe has no peak memory), beside an
    empty 'peak MiB' column the text did not explain."""
    from bench.analysis.capacity import load, memory_figure, speed_figure

    sweep = cpu_sweep(tmp_path)
    probes, _, machines = load([sweep])
    memory = memory_figure(probes, machines, {"fsdp": "C0"}).axes[0]
    assert not [line for line in memory.lines if "measured" in line.get_label()]
    assert memory.get_ylabel() == "peak memory per rank (GiB)"
    assert speed_figure(probes, {"fsdp": "C0"}, "ranks").axes[0].get_ylabel() == "tokens/s (all ranks)"
    md = write_capacity_report([sweep], tmp_path / "report").read_text()
    assert md.split("## Every probe")[1].split("|")[2].strip() == "ranks"
    assert "GPUs" not in md and "(on a GPU: these CPU probes have none)" in md


def test_sweeps_of_other_gpu_counts_or_sequence_lengths_each_draw_their_own_predicted_curve(tmp_path):
    """Regression: sweeps at --gpus 1 --seq 2048 and --gpus 2 --seq 512 reported together drew one predicted curve
    per strategy, at the GPU count and sequence length of its first probe, so the other sweep's points read against
    a prediction made for another sweep; each (strategy, GPUs, seq) present has its own curve, labelled with them,
    and one sweep's reads as before."""
    from bench.analysis.capacity import _predicted_curve, load, memory_figure

    other = summary()
    other["machine"] = {**MACHINE, "nproc": 2}
    for p in other["probes"]:
        p["probe"].update(nproc=2, max_seq_len=512, device_batch_size=1)
    for name, s in (("one", summary()), ("two", other)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(s))
    colors = {"fsdp": "C0", "fsdp+ac": "C1", "zero2": "C2", "fsdp+ac+offload": "C3"}
    curves = lambda ax: {(line.get_label(), tuple(line.get_ydata())) for line in ax.lines  # noqa: E731
                         if line.get_color() == "C0" and line.get_linestyle() != "None"}
    probes, _, machines = load([tmp_path / "one", tmp_path / "two"])
    b1 = probes[(probes["device_batch_size"] == 1) & (probes["strategy"] == "fsdp")]
    drawn = curves(memory_figure(probes, machines, colors).axes[0])
    assert drawn == {(f"fsdp predicted, {n} GPU{'s' * (n > 1)}, seq {seq}",
                      tuple(_predicted_curve("fsdp", b1[b1["nproc"] == n], "need")[1]))
                     for n, seq in ((1, 2048), (2, 512))}
    probes, _, machines = load([tmp_path / "one"])
    [(label, _)] = curves(memory_figure(probes, machines, colors).axes[0])
    assert label.startswith("_")  # one sweep's curve: no legend entry, as before
