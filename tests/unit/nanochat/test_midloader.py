"""Mid-training's packing loader and settings: python -m pytest tests/unit/nanochat/test_midloader.py -q"""

import pytest
import torch

from bench.errors import ConfigError, DataError
from bench.nanochat.chat_format import render_conversation
from bench.nanochat.mid_train import MidConfig, parse_args
from bench.nanochat.midloader import MidLoader
from bench.nanochat.tasks.common import Task, TaskMixture
from tests.unit.nanochat.chat_fixtures import BOS, byte_tokenizer


class Chats(Task):
    """Conversation i: a user asking str(i) and the assistant answering "ok"."""

    def __init__(self, n: int, bad: int | None = None):
        super().__init__()
        self.n, self.bad = n, bad

    def num_examples(self):
        return self.n

    def get_example(self, i):
        roles = ("assistant", "user") if i == self.bad else ("user", "assistant")
        return {"messages": [{"role": roles[0], "content": str(i)}, {"role": roles[1], "content": "ok"}]}


def stream(tok, task, order):
    return [t for i in order for t in render_conversation(tok, task[i])[0]]


def test_rows_are_packed_whole_conversations_with_carry_over():
    tok, task = byte_tokenizer(), Chats(50)
    B, T = 2, 16
    loader = MidLoader(task, tok, B, T, rank=0, world_size=1, device="cpu")
    tokens = stream(tok, task, range(50))
    for k in range(3):  # each batch pops B*T+1 tokens: inputs the first B*T, targets shifted by one
        x, y = next(loader)
        assert x.dtype == torch.int32 and y.dtype == torch.int64 and x.shape == (B, T)
        start = k * (B * T + 1)
        assert x.flatten().tolist() == tokens[start:start + B * T]
        assert y.flatten().tolist() == tokens[start + 1:start + B * T + 1]
    assert x.flatten().tolist().count(BOS) >= 1 and not loader.last_step  # BOS per conversation, no mask


def test_ranks_stride_the_mixture_and_the_first_wrap_is_the_last_step():
    tok, task = byte_tokenizer(), Chats(20)
    loaders = [MidLoader(task, tok, 1, 8, rank=r, world_size=2, device="cpu") for r in range(2)]
    for r, loader in enumerate(loaders):
        x, _ = next(loader)
        assert x.flatten().tolist() == stream(tok, task, range(r, 20, 2))[:8]
    rank0 = loaders[0]
    progress = []
    while not rank0.last_step:
        next(rank0)
        progress.append(rank0.progress)
    assert rank0.cursor < 2 and progress[-1] < progress[-2]  # wrapped: the cursor (and its progress) restart
    assert max(progress) > 0.8


def test_num_iterations_counts_batches_and_val_never_ends_the_run():
    tok, task = byte_tokenizer(), Chats(100)
    loader = MidLoader(task, tok, 1, 8, 0, 1, "cpu", num_iterations=3)
    next(loader), next(loader)
    assert not loader.last_step and loader.progress == pytest.approx(2 / 3)
    next(loader)
    assert loader.last_step and loader.progress == 1.0
    val = MidLoader(task, tok, 1, 8, 0, 1, "cpu", train=False, num_iterations=3)
    for _ in range(300):  # several epochs
        next(val)
    assert not val.last_step


def test_a_conversation_out_of_order_names_its_task_and_row():
    tok = byte_tokenizer()
    mixture = TaskMixture([Chats(3), Chats(3, bad=1)])
    loader = MidLoader(mixture, tok, 4, 64, 0, 1, "cpu")
    with pytest.raises(DataError, match=r"conversation 1 of Chats \(row \d\) of the train mixture: message 0 is "
                                        r"from 'assistant' but should be from 'user'"):
        next(loader)


def test_flags_and_defaults_are_upstreams():
    c = parse_args([])
    assert (c.num_iterations, c.max_seq_len, c.device_batch_size, c.total_batch_size) == (-1, 2048, 32, 524288)
    assert (c.unembedding_lr, c.embedding_lr, c.matrix_lr, c.init_lr_frac, c.weight_decay) == (0.004, 0.2, 0.02,
                                                                                                  1.0, 0.0)
    assert (c.eval_every, c.eval_tokens, c.dry_run, c.model_tag, c.step) == (150, 20 * 524288, 0, "", -1)
    assert isinstance(c, MidConfig) and parse_args(["--model_tag=sweep/run-1", "--step=5"]).step == 5
    for bad, says in (("--init_lr_frac=0", "init_lr_frac=0.0: must be a finite number > 0"),
                      ("--num_iterations=1", "give at least 2"), ("--dry_run=2", "--dry_run=2"),
                      ("--model_tag=../x", "none '.' or '..'"), ("--device_batch_sise=2", "did you mean"),
                      ("--eval_every=-5", r"^--eval_every=-5: give a count >= 0, or -1 to turn validation off$")):
        with pytest.raises(ConfigError, match=says):
            parse_args([bad])


def test_upstreams_dtype_flag_is_taken_and_changes_nothing():
    """Upstream mid_train has dtype = "bfloat16" among its flags (its autocast is bfloat16 whatever it says);
    --dtype=bfloat16 was refused as an unknown argument."""
    assert parse_args(["--dtype=bfloat16"]).dtype == "bfloat16" and parse_args(["--dtype=float32"]).dtype == "float32"
    with pytest.raises(ConfigError, match=r"^--dtype='fp16': valid values are bfloat16, float32"):
        parse_args(["--dtype=fp16"])


def test_the_step_line_is_upstreams_and_parses():
    from bench.logline import format_progress_step_line, parse_step_line

    line = format_progress_step_line(42, 12.5, 1.2345678, 0.5, 0.48712, 1076234.9, 47.521, 20.4)
    assert line == ("step 00042 (12.50%) | loss: 1.234568 | lrm: 0.50 | dt: 487.12ms | tok/sec: 1,076,234 | "
                    "mfu: 47.52 | total time: 0.34m")
    upstream = "step 00809 (100.00%) | loss: 1.019811 | lrm: 0.00 | dt: 487.30ms | tok/sec: 1,075,906 | mfu: " \
               "47.49 | total time: 9.88m"  # a line of upstream's mid_train
    parsed = parse_step_line(upstream)
    assert parsed["step"] == 809 and parsed["num_iterations"] is None and parsed["loss"] == 1.019811
    assert parse_step_line(line)["tok_per_sec"] == 1076234
