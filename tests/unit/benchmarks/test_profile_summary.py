"""benchmarks/profile_summary.py: a profiled step's kernels summed by kind, from a Chrome trace."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "profile_summary.py"

# Kernel names as torch.profiler records them on an H200 (cuBLAS, cuDNN attention, inductor, NCCL).
KERNELS = [
    ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", 0, 600),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26", 600, 200),
    ("triton_poi_fused__to_copy__unsafe_view_mul_pow_relu_threshold_backward_view_4", 800, 100),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 1000, 50),
    ("Memcpy DtoD (Device -> Device)", 1050, 50),
]


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_kernels_are_summed_by_kind_with_idle_time(tmp_path):
    events = [{"cat": "kernel" if not n.startswith("Memcpy") else "gpu_memcpy", "name": n, "ts": ts, "dur": dur}
              for n, ts, dur in KERNELS]
    events.append({"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5000})  # host side: not counted
    trace = tmp_path / "profile_step12.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    proc = run(trace)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("5 kernels; GPU span 1.1 ms, kernel time 1.0 ms (idle 9.1% of the span)")
    shares = {line[:22].strip(): line[22:].split() for line in lines[3:9]}
    assert shares["matmul"] == ["0.6", "60.0%"]
    assert shares["attention"] == ["0.2", "20.0%"]
    assert shares["compiled (Triton)"] == ["0.1", "10.0%"]
    assert shares["communication"] == ["0.1", "5.0%"] and shares["copy / fill"] == ["0.1", "5.0%"]


def test_kernels_of_two_streams_that_overlap_are_not_taken_for_idle_time(tmp_path):
    """A reduce-scatter beside the matmuls: the sum of kernel times exceeded the span and the idle share
    came out negative (-50.0%); the GPU is idle only where no kernel of any stream runs."""
    events = [{"cat": "kernel", "name": "nvjet_gemm", "ts": 0, "dur": 600},
              {"cat": "kernel", "name": "ncclDevKernel_ReduceScatter", "ts": 100, "dur": 400},
              {"cat": "kernel", "name": "nvjet_gemm", "ts": 700, "dur": 300}]
    trace = tmp_path / "profile_step12.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    proc = run(trace)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == ("3 kernels; GPU span 1.0 ms, kernel time 1.3 ms, 0.4 ms of it beside "
                                           "another stream's (idle 10.0% of the span)")


def test_a_trace_without_gpu_kernels_is_a_clear_error(tmp_path):
    trace = tmp_path / "cpu.json"
    trace.write_text(json.dumps({"traceEvents": [{"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}]}))
    proc = run(trace)
    assert proc.returncode == 2 and "no GPU kernels" in proc.stderr and str(trace) in proc.stderr
    proc = run(tmp_path / "missing.json")
    assert proc.returncode == 2 and "not a readable Chrome trace" in proc.stderr


def test_json_of_another_shape_or_kernels_of_no_time_are_a_clear_error(tmp_path):
    """A JSON list, a traceEvents that is no list of events, or kernels all of 0 us ended in a traceback
    (TypeError, AttributeError, ZeroDivisionError); now each is one error line naming the file."""
    zero = {"cat": "kernel", "name": "nvjet_gemm", "ts": 0, "dur": 0}
    for i, data in enumerate([[], {"traceEvents": [1, 2]}, {"traceEvents": {"a": 1}}, {"traceEvents": [zero]},
                              {"traceEvents": [dict(zero, dur="5")]}]):
        trace = tmp_path / f"t{i}.json"
        trace.write_text(json.dumps(data))
        proc = run(trace)
        assert proc.returncode == 2 and f"error: {trace}: " in proc.stderr, (data, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_a_negative_top_is_refused_naming_the_flag(tmp_path):
    """--top -1 listed every kernel but the last (a slice [:-1]); now it is refused."""
    trace = tmp_path / "profile_step12.json"
    trace.write_text(json.dumps({"traceEvents": [{"cat": "kernel", "name": n, "ts": ts, "dur": d}
                                                 for n, ts, d in KERNELS]}))
    proc = run(trace, "--top", "-1")
    assert proc.returncode == 2 and "--top -1: give how many kernels to list by name" in proc.stderr, proc.stderr
    assert run(trace, "--top", "0").returncode == 0
