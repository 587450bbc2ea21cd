"""Trainer flags (bench/nanochat/config.py): nanochat's names and defaults, both flag forms, clear errors.

    python -m pytest tests/unit/nanochat/test_train_config.py -q
"""

import re
from dataclasses import asdict, fields
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.errors import ConfigError
from bench.nanochat.config import FUSED_KERNELS, TrainConfig, fused_kernel_names, grad_accum_steps, parse_args


def test_defaults_are_upstream_base_train():
    c = parse_args([])
    assert (c.run, c.depth, c.max_seq_len, c.device_batch_size, c.total_batch_size) == ("dummy", 20, 2048, 32, 524288)
    assert (c.embedding_lr, c.unembedding_lr, c.matrix_lr, c.weight_decay, c.grad_clip) == (0.2, 0.004, 0.02, 0.0, 1.0)
    assert (c.warmup_ratio, c.warmdown_ratio, c.final_lr_frac) == (0.0, 0.2, 0.0)
    assert (c.eval_every, c.eval_tokens, c.sample_every, c.save_every) == (250, 20 * 524288, 2000, -1)
    assert (c.num_iterations, c.target_flops, c.target_param_data_ratio) == (-1, -1.0, 20)
    assert c.data_bin_dir == "" and c.force_flash_sdpa is False


def test_both_flag_forms_and_leading_double_dash():
    c = parse_args(["--", "--depth=4", "--device_batch_size", "8", "--run=x", "--target_flops=1e18"])
    assert (c.depth, c.device_batch_size, c.run, c.target_flops) == (4, 8, "x", 1e18)
    assert parse_args(["--force_flash_sdpa"]).force_flash_sdpa is True
    assert parse_args(["--force_flash_sdpa=0"]).force_flash_sdpa is False
    assert asdict(c)["depth"] == 4


def test_unknown_flag_names_close_matches():
    with pytest.raises(ConfigError, match=r"--device_batch_siz.*did you mean --device_batch_size"):
        parse_args(["--device_batch_siz=4"])
    with pytest.raises(ConfigError, match="unknown argument"):
        parse_args(["--zzz=1"])


def test_abbreviations_are_not_accepted():
    with pytest.raises(ConfigError, match="did you mean --depth"):
        parse_args(["--dept=4"])


def test_bad_value_is_a_config_error():
    with pytest.raises(ConfigError, match="--depth.*invalid int"):
        parse_args(["--depth=four"])


def test_core_metric_only_disabled():
    assert parse_args(["--core_metric_every=-1"]).core_metric_every == -1
    assert parse_args(["--core_metric_every=0"]).core_metric_every == 0
    with pytest.raises(ConfigError, match="CORE metric is not part of this benchmark"):
        parse_args(["--core_metric_every=2000"])


def test_total_batch_size_that_does_not_divide_lists_working_sizes():
    assert grad_accum_steps(524288, 32, 2048, 8) == 1
    assert grad_accum_steps(524288, 32, 2048, 1) == 8
    with pytest.raises(ConfigError) as e:
        grad_accum_steps(524288, 32, 2048, 16)  # upstream: a bare AssertionError
    msg = str(e.value)
    assert "32 x 2048 x 16 = 1,048,576" in msg
    assert "--device_batch_size=16 | 8 | 4 | 2 | 1 with --total_batch_size=524288" in msg
    assert "--total_batch_size=1048576" in msg


def test_no_horizon_is_refused():
    with pytest.raises(ConfigError, match="no training horizon"):
        parse_args(["--target_param_data_ratio=-1"])


def test_every_field_has_a_flag_and_help():
    from dataclasses import fields

    from bench.nanochat.config import build_parser

    help_text = build_parser().format_help()
    for f in fields(TrainConfig):
        assert f"--{f.name}" in help_text
        assert f.metadata.get("doc")


# Counts whose documented "off" or "derive it" value is -1: anything below is a mistake, not a setting
# (upstream ran on with --num_iterations=-5 as if it were -1, for the full Chinchilla horizon).
MINUS_ONE_COUNTS = ["num_iterations", "target_param_data_ratio", "eval_every", "sample_every", "save_every",
                    "profile_step", "resume_from_step"]


@pytest.mark.parametrize("name", MINUS_ONE_COUNTS)
@pytest.mark.parametrize("value", [-2, -5, -1000])
def test_negative_counts_other_than_minus_one_are_refused(name, value):
    with pytest.raises(ConfigError) as e:
        parse_args([f"--{name}={value}"])
    message = str(e.value)
    assert message.startswith(f"--{name}={value}: ") and "-1" in message and "\n" not in message


@pytest.mark.parametrize("name", MINUS_ONE_COUNTS)
def test_minus_one_stays_the_documented_off(name):
    horizon = [] if name == "num_iterations" else ["--num_iterations=5"]
    assert getattr(parse_args([f"--{name}=-1", *horizon]), name) == -1


@pytest.mark.parametrize("argv, flag", [(["--target_flops=-5"], "--target_flops=-5.0"),
                                        (["--eval_tokens=-1"], "--eval_tokens=-1"),
                                        (["--target_flops=-1", "--target_param_data_ratio=-3"],
                                         "--target_param_data_ratio=-3")])
def test_other_negative_values_are_refused(argv, flag):
    with pytest.raises(ConfigError, match=f"^{flag}: "):
        parse_args(argv)


@pytest.mark.parametrize("value, recorded", [
    ("", ""), ("False", ""), ("0", ""), ("no", ""), ("off", ""), ("none", ""), ("OFF", ""),
    ("all", "rotary_norm,softcap_loss"), ("True", "rotary_norm,softcap_loss"), ("1", "rotary_norm,softcap_loss"),
    ("yes", "rotary_norm,softcap_loss"), ("on", "rotary_norm,softcap_loss"),
    ("rotary_norm", "rotary_norm"), ("softcap_loss", "softcap_loss"),
    ("softcap_loss,rotary_norm", "rotary_norm,softcap_loss"),  # FUSED_KERNELS' order, whatever the flag's
    ("rotary_norm, rotary_norm,,softcap_loss,", "rotary_norm,softcap_loss")])  # each once, blanks ignored
def test_fused_kernels_are_recorded_as_their_names_in_one_order(value, recorded):
    """run.json's config records which kernels ran, one spelling per set: a bare True would mean another set in
    a release with another kernel, and two spellings of one set would be kept apart as two programs."""
    config = parse_args([f"--fused_kernels={value}"])
    assert config.fused_kernels == recorded and asdict(config)["fused_kernels"] == recorded
    assert fused_kernel_names(value) == tuple(n for n in recorded.split(",") if n)


def test_fused_kernels_default_to_none_and_every_name_is_in_the_help():
    from bench.nanochat.config import build_parser

    assert parse_args([]).fused_kernels == "" and fused_kernel_names("") == ()
    assert fused_kernel_names("all") == tuple(FUSED_KERNELS) == ("rotary_norm", "softcap_loss")
    help_text = " ".join(build_parser().format_help().split())
    assert all(f"{name} ({meaning})" in help_text for name, meaning in FUSED_KERNELS.items())
    assert "needs a CUDA GPU" in help_text


@pytest.mark.parametrize("value, unknown", [("rotary", "rotary"), ("rotary_norm,fp8", "fp8"),
                                            ("all,rotary_norm", "all"), ("Rotary_Norm", "Rotary_Norm")])
def test_an_unknown_fused_kernel_is_refused_with_the_valid_names(value, unknown):
    with pytest.raises(ConfigError) as e:
        parse_args([f"--fused_kernels={value}"])
    assert str(e.value) == (f"--fused_kernels={value!r}: unknown kernel(s) {unknown}; valid: rotary_norm, "
                            "softcap_loss (comma-separated), all, or none")


@pytest.mark.parametrize("tag", ["..", "../..", ".", "/abs", "a//b", "../d20", "a\\b", "x\ny", "d20/..", "a/"])
def test_model_tag_that_would_leave_base_checkpoints_is_refused(tag):
    with pytest.raises(ConfigError, match=r"^--model_tag=.*base_checkpoints"):
        parse_args([f"--model_tag={tag}"])


@pytest.mark.parametrize("tag", ["", "d20", "my-run_2.1", "..hidden-but-inside"])
def test_model_tags_that_stay_inside_are_fine(tag):
    assert parse_args([f"--model_tag={tag}"]).model_tag == tag


def test_the_sweep_run_tag_a_deadline_stop_names_for_resuming_is_accepted():
    """A run stopped by --deadline in a run directory said `continue with --resume_from_step=N --model_tag=sw/r1`
    (its default tag, train.default_model_tag), and the trainer refused that tag as more than one folder name."""
    from bench.nanochat.train import default_model_tag

    tag = default_model_tag(parse_args([]), SimpleNamespace(run_dir="/runs/sw/r1"))
    assert re.fullmatch(r"sw-[0-9a-f]{8}/r1", tag)
    assert parse_args([f"--model_tag={tag}", "--resume_from_step=5"]).model_tag == tag


def test_runs_of_one_sweep_and_run_name_in_different_places_save_apart():
    """.../a/sw/r1 and .../b/sw/r1 both saved under the tag sw/r1, one run's checkpoints beside the other's."""
    from bench.nanochat.train import default_model_tag

    a, b, again = (default_model_tag(parse_args([]), SimpleNamespace(run_dir=d))
                   for d in ("/a/sw/r1", "/b/sw/r1", "/a/sw/r1"))
    assert a != b and a == again  # the same run directory (a resumed run) keeps its tag


def test_the_trainer_flags_the_readme_names_exist():
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    section = readme.split("### Training on one machine", 1)[1].split("\n### ", 1)[0]
    prose = "\n".join(line for line in section.splitlines() if not line.startswith("    "))  # not the examples
    named = set(re.findall(r"`--([a-z][a-z0-9_]*)", prose)) - {"help", "key"}  # `--key=value`: the form
    assert named and named <= {f.name for f in fields(TrainConfig)}, named - {f.name for f in fields(TrainConfig)}


@pytest.mark.parametrize("eval_tokens,passes,line", [
    (4096, 4, "Validation: 4 pass(es) over 4,096 tokens"),
    (100, 1, "Validation: 1 pass(es) over 1,024 tokens (--eval_tokens=100 in whole passes of 1,024)"),
    (5000, 4, "Validation: 4 pass(es) over 4,096 tokens (--eval_tokens=5,000 in whole passes of 1,024)")])
def test_the_validation_line_counts_the_tokens_it_reads(eval_tokens, passes, line):
    from bench.nanochat.train import validation_passes

    assert validation_passes(eval_tokens, 1024) == (passes, line)


@pytest.mark.parametrize("depth,aspect_ratio", [(1, 129), (2, 65), (10, 32)])
def test_a_width_the_heads_cannot_split_evenly_is_refused_naming_a_ratio_that_works(depth, aspect_ratio):
    from bench.nanochat.config import shape_problem

    # 129 in 2 heads, 65 channels a head (rotary turns pairs), 320 in 3 heads: an assertion or a shape
    # mismatch in the first forward, not one line
    with pytest.raises(ConfigError, match=rf"^--depth={depth} --aspect_ratio={aspect_ratio}: width .* heads"):
        parse_args([f"--depth={depth}", f"--aspect_ratio={aspect_ratio}"])
    near = int(re.search(r"e\.g\. aspect ratio (\d+)", shape_problem(depth, aspect_ratio))[1])
    assert shape_problem(depth, near) is None
    parse_args([f"--depth={depth}", f"--aspect_ratio={near}"])
    assert shape_problem(20, 64) is None and shape_problem(3, 8) is None and shape_problem(3, 7) is not None


@pytest.mark.parametrize("value", ["-0.1", "nan", "inf"])
def test_a_weight_decay_that_is_not_a_finite_number_of_zero_or_more_is_refused(value):
    """It went to AdamW as given: weights that grow (below 0), or a run that diverges; 0.1 still trains."""
    with pytest.raises(ConfigError, match=rf"--weight_decay={value}: must be a finite number >= 0 \(default 0.0\)"):
        parse_args([f"--weight_decay={value}"])
    assert parse_args(["--weight_decay=0.1"]).weight_decay == 0.1


def test_resuming_past_the_horizon_is_refused_naming_both_steps():
    """--resume_from_step=3 with --num_iterations=2 stepped past the end: the loop stops only at the horizon, so it
    ran on forever, or ended in a ZeroDivisionError traceback where the warmdown rounded to 0 steps."""
    from bench.nanochat.config import check_horizon

    with pytest.raises(ConfigError, match=r"^--resume_from_step=3 is past this run's horizon of 2 iterations "
                                          r"\(user-provided number of iterations\); give --num_iterations >= 3"):
        check_horizon(3, 2, "user-provided number of iterations")
    check_horizon(2, 2, "user-provided number of iterations")  # the final evaluation (and nothing saved)
    check_horizon(-1, 1, "target FLOPs")  # a fresh run


@pytest.mark.parametrize("flag", ["warmup_ratio", "warmdown_ratio", "final_lr_frac"])
@pytest.mark.parametrize("value", ["nan", "-0.5", "1.5", "inf"])
def test_a_schedule_fraction_outside_0_to_1_is_refused(flag, value):
    """--warmup_ratio=nan ended in a ValueError traceback at step 0; --final_lr_frac=nan trained the warmdown at a
    nan learning rate; --warmdown_ratio=-1 silently meant no warmdown."""
    with pytest.raises(ConfigError, match=rf"^--{flag}={value}: a fraction from 0 to 1 \(default "):
        parse_args([f"--{flag}={value}"])
    assert getattr(parse_args([f"--{flag}=0.5"]), flag) == 0.5


@pytest.mark.parametrize("value", ["nan", "-1.0", "inf"])
def test_a_grad_clip_that_is_not_a_finite_norm_of_zero_or_more_is_refused(value):
    """--grad_clip=nan turned clipping off without a word (nan > 0 is false); 0 is the documented off."""
    with pytest.raises(ConfigError, match=rf"^--grad_clip={value}: a finite gradient norm > 0, or 0 for no clipping"):
        parse_args([f"--grad_clip={value}"])
    assert parse_args(["--grad_clip=0"]).grad_clip == 0


def test_a_save_every_below_minus_one_names_what_minus_one_really_does():
    """The error said -1 would `save only the final checkpoint`; the trainer saves nothing at -1 (its help text)."""
    with pytest.raises(ConfigError, match=r"^--save_every=-2: give a count >= 0, or -1 to save no checkpoint"):
        parse_args(["--save_every=-2"])
    assert "-1 or 0 = never" in TrainConfig.__dataclass_fields__["save_every"].metadata["doc"]


@pytest.mark.parametrize("argv, how", [(["--target_flops=1"], "target FLOPs"),
                                       (["--target_param_data_ratio=1"], "target data:param ratio")])
def test_a_derived_horizon_of_no_steps_is_refused(argv, how):
    """--target_flops=1 came to 0 iterations: the run trained nothing and still ended as `ok`."""
    from bench.nanochat.config import check_horizon, training_horizon

    steps, why = training_horizon(parse_args(argv), num_params=1000, flops_per_token=6000.0)
    assert (steps, why) == (0, how)
    with pytest.raises(ConfigError, match=rf"^the horizon \({how}\) comes to 0 iterations: nothing would be trained"):
        check_horizon(-1, steps, why)


@pytest.mark.timeout(20)
def test_a_very_wide_ratio_that_does_not_split_is_refused_at_once():
    """--aspect_ratio 10000001 tried every ratio up to twice it for the nearest that splits (minutes, a hang to the
    user, of model, plan and capacity alike) before the one-line error."""
    from bench.nanochat.config import shape_problem

    assert shape_problem(1, 10**9 + 1).endswith("at depth 1 e.g. aspect ratio 1000000000")
    assert shape_problem(3, 7).endswith("e.g. aspect ratio 6")  # of 6 and 8, the smaller, as before
