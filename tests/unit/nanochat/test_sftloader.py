"""SFT's batches as upstream's sft_data_generator makes them: one conversation a row, inputs padded with
assistant_end, targets -1 off the assistant's tokens and on the padding, rank r taking r, r+W, ... endlessly.
python -m pytest tests/unit/nanochat/test_sftloader.py -q"""

import pytest

from bench.errors import ConfigError, DataError
from bench.logline import parse_step_line, parse_val_line
from bench.nanochat.chat_format import render_conversation
from bench.nanochat.chat_sft import STEP_LINE, VAL_LINE
from bench.nanochat.sftconfig import parse_sft_args, sft_grad_accum
from bench.nanochat.sftloader import sft_batches
from tests.unit.nanochat.chat_fixtures import ASSISTANT_END, ASSISTANT_START, BOS, USER_END, USER_START, byte_tokenizer


def chat(user: str, assistant: str) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}


def test_rows_are_padded_and_only_the_assistant_is_a_target():
    tok = byte_tokenizer()
    data = [chat("hi", "yo"), chat("a", "bcd")]
    inputs, targets = next(sft_batches(data, tok, 2, 0, 1, "cpu"))
    # row 0: BOS <us> h i <ue> <as> y o <ae> = 9 tokens; row 1: BOS <us> a <ue> <as> b c d <ae> = 9 as well
    assert inputs.shape == targets.shape == (2, 8)
    assert inputs[0].tolist() == [BOS, USER_START, *b"hi", USER_END, ASSISTANT_START, *b"yo"]
    assert targets[0].tolist() == [-1, -1, -1, -1, -1, *b"yo", ASSISTANT_END]
    data = [chat("hi", "yo"), chat("long question", "x")]
    inputs, targets = next(sft_batches(data, tok, 2, 0, 1, "cpu"))
    ids, _ = render_conversation(tok, data[0])
    short = len(ids) - 1
    assert inputs[0, short:].eq(ASSISTANT_END).all() and targets[0, short:].eq(-1).all()  # the padding
    assert targets[1].tolist()[-2:] == [ord("x"), ASSISTANT_END]


def test_each_rank_strides_the_examples_and_starts_over():
    tok = byte_tokenizer()
    data = [chat(str(i), "ok") for i in range(5)]
    seen = []
    batches = sft_batches(data, tok, 1, 1, 2, "cpu")  # rank 1 of 2: examples 1, 3, then 1 again
    for _ in range(3):
        inputs, _ = next(batches)
        seen.append(chr(inputs[0, 2].item()))
    assert seen == ["1", "3", "1"]


def test_a_conversation_out_of_role_order_is_one_clear_error():
    tok = byte_tokenizer()
    bad = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    with pytest.raises(DataError, match=r"SFT example 1 of 2: message 1 is from 'user' but should be from "
                                        r"'assistant'"):
        next(sft_batches([chat("a", "b"), bad], tok, 2, 0, 1, "cpu"))
    with pytest.raises(DataError, match="SFT data has 1 example.*too few for 2 rank"):
        next(sft_batches([chat("a", "b")], tok, 1, 1, 2, "cpu"))


def test_the_batch_arithmetic_names_what_would_work():
    assert sft_grad_accum(32, 4, 8) == 1 and sft_grad_accum(32, 4, 2) == 4
    with pytest.raises(ConfigError, match=r"--target_examples_per_step=32 is not a multiple of device_batch_size x "
                                          r"world_size = 4 x 64 = 256; for 64 rank\(s\) use "
                                          r"--target_examples_per_step=256"):
        sft_grad_accum(32, 4, 64)
    assert parse_sft_args([]).eval_metrics_every == 200  # upstream's defaults
    with pytest.raises(ConfigError, match="--source='sft'"):
        parse_sft_args(["--source=sft"])
    with pytest.raises(ConfigError, match="did you mean --target_examples_per_step"):
        parse_sft_args(["--target_example_per_step=8"])
    with pytest.raises(ConfigError, match=r"--eval_every=0: give a count > 0, or -1"):
        parse_sft_args(["--eval_every=0"])


def test_upstreams_sft_lines_are_not_read_as_pretraining_lines():
    step = STEP_LINE.format(42, 701, 0.531712, 0.940086, 1234)
    assert step == "Step 00042/00701 | Training loss: 0.531712| lrm: 0.940086| num_tokens: 1,234"
    val = VAL_LINE.format(100, 1.0115)
    assert val == "Step 00100 | Validation loss: 1.011500"
    assert parse_step_line(step) is None and parse_val_line(step) is None
    assert parse_step_line(val) is None and parse_val_line(val) is None


def test_one_iteration_is_refused_as_it_makes_no_update():
    """--num_iterations=1 ran only the last pass's evaluation and saved the input model as the sft checkpoint."""
    with pytest.raises(ConfigError, match=r"^--num_iterations=1: counts the last pass, .* give at least 2"):
        parse_sft_args(["--num_iterations=1"])
    assert parse_sft_args(["--num_iterations=2"]).num_iterations == 2


@pytest.mark.parametrize("value", ["-0.1", "nan", "inf"])
def test_a_weight_decay_that_is_not_a_finite_number_at_least_0_is_refused_by_mid_and_sft(value):
    """--weight_decay=-0.1 or nan went to AdamW as given: a run that grows its weights, or one that diverges."""
    from bench.nanochat.mid_train import parse_args

    for parse in (parse_args, parse_sft_args):
        with pytest.raises(ConfigError, match=rf"^--weight_decay={float(value)!r}: must be a finite number >= 0"):
            parse([f"--weight_decay={value}"])
    assert parse_sft_args(["--weight_decay=0.1"]).weight_decay == parse_args(["--weight_decay=0.1"]).weight_decay
