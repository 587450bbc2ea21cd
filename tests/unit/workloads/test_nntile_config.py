"""The NNTile workload's flags, checked in the main process before StarPU starts (no torch-nntile needed).

    python -m pytest tests/unit/workloads/test_nntile_config.py -q
"""

import json

import pytest

from bench.commands.workload import model_summary
from bench.errors import ConfigError, DataError
from bench.workloads.nntile import config as nconfig


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "gpt2.json"
    path.write_text(json.dumps({"n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 32, "vocab_size": 512}))
    return str(path)


def parse(cfg, *flags):
    return nconfig.parse_args([f"--config-path={cfg}", *flags])


def test_defaults_resolve_to_untiled_sizes(cfg):
    config, shape = parse(cfg, "--batch=8")
    assert shape["n_inner"] == 4 * 64  # NNTile's example sets n_inner = 4 x n_embd
    assert (config.minibatch, config.minibatch_tile, config.seq_tile, config.embd_tile, config.inner_tile,
            config.head_tile) == (8, 8, 32, 64, 256, 4)
    assert config.num_minibatch == 1 and config.optimizer == "fusedadamw"


@pytest.mark.parametrize("n_inner, noted", [(100, True), (256, False), (None, False)])
def test_an_n_inner_the_run_replaces_is_noted(tmp_path, n_inner, noted):
    """An n_inner in --config-path was silently replaced by 4 x n_embd, as NNTile's example does."""
    path = tmp_path / "gpt2.json"
    path.write_text(json.dumps({"n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 32, "vocab_size": 512,
                                "n_inner": n_inner}))
    config, shape = nconfig.parse_args([f"--config-path={path}"])
    assert shape["n_inner"] == 256
    note = nconfig.inner_note(config.config_path, shape)
    assert note == (f"note: --config-path {path}: n_inner=100 is not used; the MLP is 4 x n_embd = 256 wide, as "
                    "NNTile's gpt2_custom_training.py sets it" if noted else "")
    assert nconfig.inner_note("", shape) == ""  # the default config (GPT-2 small) gives none


def test_the_default_shape_is_gpt2_small():
    config, shape = nconfig.parse_args([])
    assert (shape["n_layer"], shape["n_embd"], shape["n_head"], shape["n_positions"], shape["vocab_size"]) == \
        (12, 768, 12, 1024, 50257)


@pytest.mark.parametrize("flags, named", [
    (["--seq-tile=24"], "--seq-tile=24 does not divide n_positions=32"),
    (["--head-tile=3"], "--head-tile=3 does not divide n_head=4"),
    (["--embd-tile=48"], "--embd-tile=48 does not divide n_embd=64"),
    (["--inner-tile=100"], "--inner-tile=100 does not divide n_inner=256"),
    (["--minibatch=4", "--minibatch-tile=3"], "--minibatch-tile=3 does not divide minibatch=4"),
    (["--minibatch=3"], "--minibatch=3 must divide --batch=8"),
    (["--flashattention"], "no flash attention"),
    (["--dataset=WikiText-103"], "--dataset=WikiText-103"),
    (["--optimizer=lion"], "--optimizer=lion"),
    (["--seqtile=16"], "did you mean --seq-tile"),
    # float() takes these, and each trains nothing sensible (NaN loss or gradient ascent)
    (["--lr=nan"], "--lr=nan: must be a finite number >= 0"),
    (["--lr=-1"], "--lr=-1.0: must be a finite number >= 0"),
    (["--start-lr=inf"], "--start-lr=inf"),
    (["--weight-decay=nan"], "--weight-decay=nan"),
    (["--optimizer-eps=0"], "--optimizer-eps=0.0: must be a finite number > 0"),
])
def test_bad_sizes_and_flags_fail_with_the_flag_named(cfg, flags, named):
    with pytest.raises(ConfigError, match=named.replace("+", r"\+")):
        parse(cfg, "--batch=8", *flags)


@pytest.mark.parametrize("flag", ["--bogus=1", "--foo", "--xyz=2"])
def test_an_unknown_flag_is_not_matched_to_an_unrelated_one(cfg, flag):
    """'--bogus=1' was answered '(did you mean --nepochs?)': the names were compared with their leading '--',
    which every flag shares, so an unrelated flag passed as close; nanochat's flags compare without it."""
    with pytest.raises(ConfigError, match=r"unknown argument") as e:
        parse(cfg, flag)
    assert "did you mean" not in str(e.value)


@pytest.mark.parametrize("flag, field", [("--depth=4", "n_layer"), ("--max_seq_len=256", "n_positions"),
                                         ("--aspect_ratio=64", "n_embd")])
def test_a_nanochat_model_shape_flag_says_where_nntile_takes_the_shape(cfg, flag, field):
    """'--depth=4' was answered '(did you mean --dataset-path, --nepochs?)': names half alike passed as close, and
    nothing said that NNTile's model shape is the GPT-2 JSON of --config-path."""
    with pytest.raises(ConfigError, match=r"unknown argument") as e:
        parse(cfg, flag)
    assert "did you mean" not in str(e.value)
    assert f"the GPT-2 JSON of --config-path: {flag[2:].split('=')[0]} is its {field}" in str(e.value)


def test_a_zero_learning_rate_is_kept_for_timing_runs(cfg):
    assert parse(cfg, "--lr=0", "--nbackward=2")[0].lr == 0.0


def test_a_bad_tile_lists_the_sizes_that_work(cfg):
    with pytest.raises(ConfigError, match=r"valid: 1, 2, 4, 8, 16, 32$"):
        parse(cfg, "--seq-tile=5")


def test_aliases_of_the_newer_example(cfg):
    assert parse(cfg, "--optimizer=adamw")[0].optimizer == "fusedadamw"
    assert parse(cfg, "--optimizer=adam")[0].optimizer == "fusedadam"


def test_a_config_without_a_shape_field_is_refused(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"n_embd": 64, "n_layer": 2}))
    with pytest.raises(ConfigError, match="n_head is missing"):
        nconfig.parse_args([f"--config-path={path}"])
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        nconfig.parse_args([f"--config-path={path}"])


def test_a_config_cut_mid_string_is_read_plainly(tmp_path):
    """A config cut mid-string read "(Unterminated string starting at at line 2)": json's message ends in "at"."""
    path = tmp_path / "cut.json"
    path.write_text('{"n_embd": 64,\n "n_he')
    with pytest.raises(ConfigError) as e:
        nconfig.parse_args([f"--config-path={path}"])
    assert "not JSON (Unterminated string starting at: line 2)" in str(e.value) and "at at" not in str(e.value)


SHAPE = {"n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 32, "vocab_size": 512}


def test_a_misspelt_shape_field_is_named_as_missing_with_the_files_close_name(tmp_path):
    """A config with n_heads for n_head read 'n_head must be a positive integer, got None', as if it were given
    as null, and named neither the spellings read nor the file's misspelt key."""
    path = tmp_path / "typo.json"
    path.write_text(json.dumps({**{k: v for k, v in SHAPE.items() if k != "n_head"}, "n_heads": 4}))
    with pytest.raises(ConfigError) as e:
        nconfig.parse_args([f"--config-path={path}"])
    assert str(e.value) == (f"--config-path {path}: n_head is missing (read as n_head, num_heads or "
                            "num_attention_heads; the file has n_heads: misspelt?); give it as a positive integer")


@pytest.mark.parametrize("body, named", [
    ({**SHAPE, "layer_norm_epsilon": "abc"}, "layer_norm_epsilon must be a positive number"),
    ({**SHAPE, "layer_norm_epsilon": None}, "layer_norm_epsilon must be a positive number"),
    ({**SHAPE, "initializer_range": -1}, "initializer_range must be a positive number"),
    ("n_embd", "a JSON object of GPT-2 fields is needed, not str"),
    ([SHAPE], "a JSON object of GPT-2 fields is needed, not list"),
])
def test_a_config_with_a_wrong_typed_field_or_no_object_is_refused(tmp_path, body, named):
    """A config JSON edited by hand: a string epsilon or a top-level string ended in a ValueError or TypeError
    traceback, and a negative initializer_range was passed on to the model's init."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(body))
    with pytest.raises(ConfigError, match=f"^--config-path {path}: {named}"):
        nconfig.parse_args([f"--config-path={path}"])
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        nconfig.parse_args([f"--config-path={path}"])


def test_flops_per_token_equal_nanochats_for_the_same_shape():
    """NNTile's example counts matmul FLOPs per layer; nanochat counts 6N + 12·L·E·T: the same number for a
    GPT-2 of nanochat's shape (width 64·depth, 4x MLP, untied lm_head), so MFU compares across workloads."""
    for depth, seq in ((2, 64), (4, 256), (20, 2048)):
        ours = model_summary(depth, vocab_size=65536, max_seq_len=seq)
        width = 64 * depth
        shape = {"n_embd": width, "n_inner": 4 * width, "n_positions": seq, "vocab_size": 65536, "n_layer": depth}
        assert nconfig.flops_per_token(shape) == ours["flops_per_token"]


def test_dataset_checks(cfg, tmp_path):
    config, shape = parse(cfg, "--batch=4", f"--dataset-path={tmp_path}")
    with pytest.raises(DataError, match="no token file"):
        nconfig.check_dataset(config, shape)
    (tmp_path / "train.bin").write_bytes(b"\0\0" * (4 * 33 - 1))  # one token short of a batch
    with pytest.raises(DataError, match="fewer than one batch"):
        nconfig.check_dataset(config, shape)
    (tmp_path / "train.bin").write_bytes(b"\0\0" * (4 * 33 * 3))
    assert nconfig.check_dataset(config, shape)["batches_per_epoch"] == 3
    (tmp_path / "meta.json").write_text(json.dumps({"tokenizer": "gpt2", "vocab_size": 50257}))
    with pytest.raises(DataError, match="raise vocab_size"):
        nconfig.check_dataset(config, shape)


def test_a_token_file_named_without_a_suffix_is_read(cfg, tmp_path):
    """--dataset-path=/data/tokens, a token file without a suffix, was taken for a directory: the run stopped with
    'no token file at /data/tokens/train.bin'."""
    (tmp_path / "tokens").write_bytes(b"\0\0" * (4 * 33 * 2))
    config, shape = parse(cfg, "--batch=4", f"--dataset-path={tmp_path / 'tokens'}")
    assert nconfig.check_dataset(config, shape)["path"] == str(tmp_path / "tokens")
    assert nconfig.train_bin(nconfig.NNTileConfig(dataset_path="/not/here")) == nconfig.Path("/not/here/train.bin")


@pytest.mark.parametrize("seed", [-2**63 - 1, 2**64])
def test_a_seed_torch_refuses_is_refused_before_starpu_starts(cfg, seed):
    """A seed outside torch.manual_seed's range failed ('ValueError: Overflow when unpacking long long') only
    after StarPU had started."""
    with pytest.raises(ConfigError, match=rf"^--seed={seed}: must be from -2\*\*63 to 2\*\*64-1$"):
        parse(cfg, f"--seed={seed}")
    assert parse(cfg, f"--seed={-2**63}")[0].seed == -2**63 and parse(cfg, f"--seed={2**64 - 1}")[0].seed == 2**64 - 1


def test_the_record_carries_the_analysis_keys(cfg):
    record = nconfig.as_record(*parse(cfg, "--batch=8", "--minibatch=2"))
    assert (record["depth"], record["max_seq_len"], record["total_batch_size"], record["device_batch_size"]) == \
        (2, 32, 8 * 32, 2)
    json.dumps(record)  # run.json material


def test_starpu_worker_counts_are_checked_before_starpu_starts():
    """STARPU_NCPU=abc ended the run in a ValueError traceback, and STARPU_NCPU=0 on a CPU run in
    'RuntimeError: Error in starpu_initialize()' after StarPU had started."""
    assert nconfig.workers("", {"STARPU_NCPU": "3", "STARPU_NCUDA": "1"}) == (3, 1)
    assert nconfig.workers("cpu", {"STARPU_NCPU": "2", "STARPU_NCUDA": "4"}) == (2, 0)
    assert nconfig.workers("cuda", {"STARPU_NCPU": "0"}) == (0, -1)  # GPU workers only
    with pytest.raises(ConfigError, match=r"^STARPU_NCPU=abc: give a number of workers >= 0"):
        nconfig.workers("", {"STARPU_NCPU": "abc"})
    with pytest.raises(ConfigError, match=r"^STARPU_NCUDA=1.5: give a number of workers"):
        nconfig.workers("", {"STARPU_NCUDA": "1.5"})
    with pytest.raises(ConfigError, match=r"^STARPU_NCPU=0 with --restrict=cpu: no StarPU worker"):
        nconfig.workers("cpu", {"STARPU_NCPU": "0"})
    with pytest.raises(ConfigError, match=r"^STARPU_NCPU=0 with STARPU_NCUDA=0: no StarPU worker"):
        nconfig.workers("", {"STARPU_NCPU": "0", "STARPU_NCUDA": "0"})


@pytest.mark.parametrize("name,value", [("STARPU_NCPU", "-1"), ("STARPU_NCPU", "-5"), ("STARPU_NCUDA", "-1")])
def test_a_negative_worker_count_is_refused(name, value):
    """STARPU_NCPU=-1, which the error for a non-number offered as 'every one', passed the check, then StarPU
    (which reads the variable itself) aborted on an assertion with a native backtrace."""
    with pytest.raises(ConfigError, match=rf"^{name}={value}: give a number of workers >= 0 \(leave it unset"):
        nconfig.workers("", {name: value})


def test_no_cpu_worker_needs_restrict_cuda():
    """STARPU_NCPU=0 without --restrict on a machine with no GPU passed the check, then ended in
    'RuntimeError: Error in starpu_initialize()' after StarPU had started."""
    with pytest.raises(ConfigError, match=r"^STARPU_NCPU=0 without --restrict=cuda: .* give STARPU_NCPU at least 1, "
                                          r"or run on GPUs only with --restrict=cuda$"):
        nconfig.workers("", {"STARPU_NCPU": "0"})


def test_restrict_cuda_without_a_cuda_worker_is_refused_before_starpu_starts():
    """--restrict=cuda on a machine without a GPU (or with STARPU_NCUDA=0) passed the check, StarPU started with
    CPU workers only, and the first step ended the run in 'RuntimeError: Error in copy task submission' (ENODEV)."""
    with pytest.raises(ConfigError, match=r"^--restrict=cuda with STARPU_NCUDA=0: StarPU would have no worker for "
                                          r"any task; leave --restrict out"):
        nconfig.workers("cuda", {"STARPU_NCPU": "2", "STARPU_NCUDA": "0"})
    with pytest.raises(ConfigError, match=r"^--restrict=cuda with no GPU visible here: StarPU would have no worker"):
        nconfig.workers("cuda", {"STARPU_NCPU": "2"}, gpus=0)
    assert nconfig.workers("cuda", {"STARPU_NCPU": "2"}, gpus=1) == (2, -1)
    assert nconfig.workers("", {"STARPU_NCPU": "2"}, gpus=0) == (2, -1)  # StarPU runs on the CPU workers


def test_the_workload_check_refuses_a_bad_worker_count_before_the_run(cfg, tmp_path, monkeypatch):
    from bench.workloads.nntile import WORKLOAD

    (tmp_path / "train.bin").write_bytes(b"\0" * 2 * 33 * 4)
    monkeypatch.setenv("STARPU_NCPU", "abc")
    with pytest.raises(ConfigError, match="^STARPU_NCPU=abc"):
        WORKLOAD.check([f"--config-path={cfg}", f"--dataset-path={tmp_path / 'train.bin'}"], 1)


@pytest.mark.parametrize("flags", [["--nepochs=0"], ["--nepochs=0", "--nepochs-warmup=2", "--nbackward=3"]])
def test_a_run_with_no_timed_epoch_is_refused_naming_the_flag(cfg, flags):
    """Regression: --nepochs=0 trained no step (or only untimed warm-up epochs) and ended `ok` with no figure."""
    with pytest.raises(ConfigError, match=r"^--nepochs=0: the run would train no timed epoch; give --nepochs >= 1"):
        parse(cfg, *flags)
    assert parse(cfg, "--nepochs=1", "--nepochs-warmup=0")[0].nepochs == 1
