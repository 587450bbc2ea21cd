"""Chat evaluation's scoring (bench/nanochat/chat_eval.py) on a tiny model and the generated stand-in data.

    python -m pytest tests/unit/nanochat/test_chat_eval.py -q
"""

import pytest
import torch

from bench.errors import ConfigError
from bench.nanochat import chat_eval
from bench.nanochat.chat_format import render_for_completion
from bench.nanochat.engine import Engine
from bench.nanochat.tasks.arc import ARC
from bench.nanochat.tasks.gsm8k import GSM8K

from chat_fixtures import byte_tokenizer, chat_base, generated_base  # noqa: F401 (fixtures)
from test_engine import random_model


def one_by_one(task, tokenizer, model, n):
    """The categorical rule applied to each problem alone, unpadded: what the batched scoring must equal."""
    passed = 0
    for i in range(n):
        conversation = task[i]
        ids = render_for_completion(tokenizer, conversation)
        with torch.no_grad():
            logits = model(torch.tensor([ids]))[0, -1]
        letters = conversation["letters"]
        scores = [logits[tokenizer.encode(letter)[0]].item() for letter in letters]
        passed += int(letters[scores.index(max(scores))] == conversation["messages"][-1]["content"])
    return passed


@pytest.mark.parametrize("batch_size", [1, 8, 7])
def test_categorical_batches_score_as_each_problem_alone(chat_base, batch_size):
    tok, model = byte_tokenizer(), random_model(seq=1024)
    task = ARC(subset="ARC-Easy", split="test")
    counts = chat_eval.categorical_counts(task, tok, model, batch_size, max_problems=20)
    assert counts.total == 20
    assert counts.passed == one_by_one(task, tok, model, 20)
    assert 0 < counts.passed < 20  # a random model: some right, some wrong, so the comparison means something


def test_generative_counts_generated_tokens_and_scores(chat_base, capsys):
    tok, model = byte_tokenizer(), random_model(seq=1024)
    task = GSM8K(subset="main", split="test")
    engine = Engine(model, tok, calculator=lambda expr: None)
    counts = chat_eval.generative_counts(task, tok, engine, num_samples=2, max_new_tokens=8, temperature=1.0,
                                         top_k=50, max_problems=3)
    assert (counts.passed, counts.total) == (0, 3)  # a random model does not solve grade-school maths
    assert 3 * 2 <= counts.generated_tokens <= 3 * 2 * 8
    assert capsys.readouterr().out.endswith("\r\x1b[KRank 0 | 0/3 (0.00%)\n")


def test_chatcore_needs_all_six_and_centres_on_chance():
    accuracies = {name: chat_eval.BASELINES[name] for name in chat_eval.TASKS}
    assert chat_eval.chatcore(accuracies) == 0.0
    assert chat_eval.chatcore(dict(accuracies, GSM8K=0.6)) == pytest.approx(0.1)
    assert chat_eval.chatcore({"ARC-Easy": 1.0}) is None


def test_task_names_in_upstream_order_and_unknown_named():
    assert chat_eval.task_names(None) == ["ARC-Easy", "ARC-Challenge", "MMLU", "GSM8K", "HumanEval", "SpellingBee"]
    assert chat_eval.task_names("GSM8K|ARC-Easy") == ["GSM8K", "ARC-Easy"]
    with pytest.raises(ConfigError) as e:
        chat_eval.task_names("ARC-Easy|GSM8k")
    assert "'GSM8k'" in str(e.value) and "GSM8K" in str(e.value) and "\n" not in str(e.value)


def test_a_step_below_minus_1_is_refused_not_read_as_the_last():
    """-s -5 evaluated the last saved step, silently."""
    from bench.nanochat.chat_eval_config import parse

    with pytest.raises(ConfigError, match=r"^-s/--step=-5: give a saved step >= 0, or -1 for the last saved"):
        parse(["-i", "mid", "-s", "-5"])
    assert parse(["-i", "mid", "-s", "-1"]).step == -1 and parse(["-i", "mid", "-s", "0"]).step == 0


def test_a_max_new_tokens_past_the_rotary_cache_is_one_line_naming_the_m_that_fits(chat_base):
    """-m 3000 on a model of sequence length 256 ended in gpt.py's AssertionError traceback mid-evaluation."""
    tok, model = byte_tokenizer(), random_model(seq=64)  # rotary embeddings for 640 positions
    task = GSM8K(subset="main", split="test")
    prompt = len(render_for_completion(tok, task[0]))
    engine = Engine(model, tok, calculator=lambda expr: None)
    with pytest.raises(ConfigError, match=rf"^-m/--max-new-tokens=640: GSM8K problem 0's prompt is {prompt} tokens "
                                          rf"and the model's rotary embeddings cover 640 positions \(10 x its "
                                          rf"sequence length 64\); give -m <= {640 - prompt}$"):
        chat_eval.generative_counts(task, tok, engine, num_samples=1, max_new_tokens=640, temperature=0.0,
                                    top_k=50, max_problems=1)
    counts = chat_eval.generative_counts(task, tok, engine, num_samples=1, max_new_tokens=640 - prompt,
                                         temperature=0.0, top_k=50, max_problems=1)
    assert counts.total == 1  # exactly full: the last new token's position is the table's last


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_temperature_that_is_not_a_finite_number_at_least_0_is_refused(value):
    """-t nan passed the `< 0` check and ended in the engine's AssertionError; -t inf sampled uniformly, status ok."""
    from bench.nanochat.chat_eval_config import parse

    with pytest.raises(ConfigError, match=rf"^-t/--temperature={value}: must be a finite number >= 0 \(0 = greedy\)$"):
        parse(["-i", "mid", "-t", value])


def test_a_chat_evaluation_records_the_sandbox_layers_it_ran_model_code_under(tmp_path, monkeypatch):
    """The README said the sandbox's isolation() goes into a run record, but no run.json said how the model-written
    programs of a chat evaluation were fenced in; now the evaluation records the layers as run.json `sandbox`."""
    import json
    from contextlib import nullcontext
    from types import SimpleNamespace

    from bench import contract
    from bench.nanochat import sandbox

    model = SimpleNamespace(num_params=lambda: 1, estimate_flops=lambda: 6.0)
    session = SimpleNamespace(device="cpu", autocast=nullcontext, synchronize=lambda: None,
                              watchdog=SimpleNamespace(relaxed=nullcontext))
    monkeypatch.setattr(chat_eval.stagerun, "begin", lambda *a: session)
    ends = []
    monkeypatch.setattr(chat_eval.stagerun, "end", lambda *a, **k: ends.append(k) or 0.0)
    monkeypatch.setattr(chat_eval, "load_for_eval", lambda *a: (model, None, {"checkpoint_dir": "d", "step": 1}))
    monkeypatch.setattr(chat_eval, "evaluate", lambda *a: ({"ARC-Easy": 0.5}, None))
    monkeypatch.setattr(sandbox, "isolation", lambda: ("userns+netns+pidns", "landlock-7", "seccomp"))
    record = SimpleNamespace(emit=lambda *a, **k: None, update=lambda **f: contract.update_run_json(tmp_path, **f))
    chat_eval.run(SimpleNamespace(dtype="float32", source="mid"), record)
    written = json.loads((tmp_path / contract.RUN_JSON).read_text())
    assert written["sandbox"] == ["userns+netns+pidns", "landlock-7", "seccomp"]
    assert contract.load_manifest(tmp_path).notes == []
    assert ends == [{"training": False}]  # an evaluation prints no "Total training time" line


def test_upstream_spellings_dashed_short_and_joined_read_as_the_fields():
    from bench.nanochat.chat_eval_config import parse

    c = parse(["-i", "sft", "--task-name", "GSM8K", "--max-problems=3", "-k5", "--device-type=cpu", "--top_k=7"])
    assert (c.source, c.task_name, c.max_problems, c.top_k, c.device_type) == ("sft", "GSM8K", 3, 7, "cpu")
    with pytest.raises(ConfigError, match=r"^-x: expects a value \(see --help\)$"):
        parse(["-i", "sft", "-x"])
