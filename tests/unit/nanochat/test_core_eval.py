"""CORE's logic on hand-checked cases: prompts, few-shot draws, scored spans, scoring and centring.
python -m pytest tests/unit/nanochat/test_core_eval.py -q"""

import random

import pytest
import torch

from bench.errors import DataError
from bench.nanochat import core_eval, evalgen
from bench.nanochat.core_eval import LANGUAGE_MODELING, MULTIPLE_CHOICE, SCHEMA, Task
from bench.nanochat.evalbundle import load_bundle


def test_multiple_choice_prompts_put_each_shot_and_a_blank_line_before_each_choice():
    task = Task("arc_easy", MULTIPLE_CHOICE, "x.jsonl", 1, "\nAnswer: ")
    row = {"query": "Q?", "choices": ["a", "b"], "gold": 1}
    shot = {"query": "S?", "choices": ["x", "y"], "gold": 0}
    assert core_eval.render_prompts(row, task, [shot]) == ["S?\nAnswer: x\n\nQ?\nAnswer: a",
                                                           "S?\nAnswer: x\n\nQ?\nAnswer: b"]


def test_schema_prompts_vary_the_context_and_shots_use_the_gold_context():
    task = Task("winograd", SCHEMA, "x.jsonl", 1)
    row = {"context_options": ["The cat", "The dog"], "continuation": "ran.", "gold": 1}
    shot = {"context_options": ["A", "B"], "continuation": "c", "gold": 1}
    assert core_eval.render_prompts(row, task, [shot]) == ["B c\n\nThe cat ran.", "B c\n\nThe dog ran."]


def test_language_modelling_prompts_trim_contexts_and_strip_the_prompt_without():
    task = Task("lambada", LANGUAGE_MODELING, "x.jsonl", 1)
    row = {"context": "  Hello there ", "continuation": "world"}
    shot = {"context": "A ", "continuation": "B"}
    assert core_eval.render_prompts(row, task, [shot]) == ["A B\n\nHello there", "A B\n\nHello there world"]
    assert core_eval.render_prompts(row, Task("l", LANGUAGE_MODELING, "x", 0), []) == ["Hello there",
                                                                                        "Hello there world"]


def test_fewshot_draws_exclude_the_example_and_follow_its_seed():
    assert core_eval.fewshot_indices(3, 10, 0) == []
    draw = core_eval.fewshot_indices(3, 10, 4)
    assert draw == random.Random(1234 + 3).sample([0, 1, 2, 4, 5, 6, 7, 8, 9], 4) and 3 not in draw


def test_common_prefix_and_suffix_give_the_scored_spans():
    assert core_eval.common_length([[1, 2, 3], [1, 2, 4]]) == 2
    assert core_eval.common_length([[5, 1, 2], [6, 1, 2]], from_end=True) == 2
    assert core_eval.common_length([[1, 2], [1, 2, 3]]) == 2
    assert core_eval.spans([[0, 5, 6, 7], [0, 5, 6, 8, 9]], MULTIPLE_CHOICE) == (
        [[0, 5, 6, 7], [0, 5, 6, 8, 9]], [3, 3], [4, 5])
    assert core_eval.spans([[0, 4, 8, 9], [0, 5, 6, 8, 9]], SCHEMA)[1:] == ([2, 3], [4, 5])
    assert core_eval.spans([[0, 1, 2], [0, 1, 2, 3, 4]], LANGUAGE_MODELING) == ([[0, 1, 2, 3, 4]], [3], [5])
    with pytest.raises(ValueError, match="prefix"):
        core_eval.spans([[0, 1, 2], [0, 1, 7, 3]], LANGUAGE_MODELING)


class Bigram(torch.nn.Module):
    """A bigram table as a model: the logits after token t are row t (hand-set, so the scores are known)."""

    def __init__(self, table):
        super().__init__()
        self.table = torch.tensor(table, dtype=torch.float32)

    def forward(self, ids):
        return self.table[ids]


def test_language_modelling_is_correct_only_when_every_token_is_the_argmax():
    table = torch.full((6, 6), -5.0)
    for a, b in ((0, 1), (1, 2), (2, 3), (3, 4)):
        table[a, b] = 5.0
    model = Bigram(table.tolist())
    assert core_eval.score(model, [[0, 1, 2, 3, 4]], [3], [5], LANGUAGE_MODELING, None, 0, "cpu")
    assert not core_eval.score(model, [[0, 1, 2, 3, 5]], [3], [5], LANGUAGE_MODELING, None, 0, "cpu")
    assert core_eval.score(model, [[0, 1, 2, 3, 5]], [2], [3], LANGUAGE_MODELING, None, 0, "cpu")


def test_choices_are_ranked_by_mean_loss_over_their_span_only():
    # After the shared [0, 1], choice 0 continues 2 2 (each likely), choice 1 continues 3 (less likely); the
    # padding (BOS = 0) after the shorter choice is outside its span and changes nothing.
    table = torch.zeros(4, 4)
    table[1, 2], table[2, 2], table[1, 3] = 4.0, 4.0, 2.0
    model = Bigram(table.tolist())
    seqs, starts, ends = core_eval.spans([[0, 1, 2, 2], [0, 1, 3]], MULTIPLE_CHOICE)
    assert starts == [2, 2] and ends == [4, 3]
    assert core_eval.score(model, seqs, starts, ends, MULTIPLE_CHOICE, 0, 0, "cpu")
    assert not core_eval.score(model, seqs, starts, ends, MULTIPLE_CHOICE, 1, 0, "cpu")
    table[1, 3] = 9.0  # now choice 1's one token is far likelier than choice 0's mean
    assert core_eval.score(Bigram(table.tolist()), seqs, starts, ends, MULTIPLE_CHOICE, 1, 0, "cpu")


def test_centred_accuracy_and_the_csv():
    assert core_eval.centered(0.5, 25.0) == pytest.approx(1 / 3)
    assert core_eval.centered(0.0, 0.0) == 0.0
    rows = [core_eval.TaskResult("copa", 0.5625, 0.125, 16, 1.0)]
    assert core_eval.results_csv(rows, 0.125).splitlines() == [
        "Task                               , Accuracy  , Centered  ",
        "copa                               , 0.562500  , 0.125000  ",
        "CORE                               ,           , 0.125000  "]


def test_generated_bundle_has_the_real_tasks_and_shuffles_then_crops(tmp_path):
    bundle = load_bundle(evalgen.generate(tmp_path / "eval_bundle"))
    assert [t.label for t in bundle.tasks][:3] == ["hellaswag_zeroshot", "jeopardy", "bigbench_qa_wikidata"]
    assert len(bundle.tasks) == 22 and bundle.baselines["boolq"] == 62.0
    jeopardy = bundle.tasks[1]
    assert jeopardy.num_fewshot == 10 and jeopardy.delimiter == "\nAnswer: "
    rows = [__import__("json").loads(x) for x in (bundle.path / "eval_data" / jeopardy.dataset_uri).read_text()
            .splitlines()]
    random.Random(1337).shuffle(rows)
    assert bundle.task_data(jeopardy, 12) == rows[:12]
    with pytest.raises(DataError, match=r"jeopardy: 5 example\(s\) after --max_per_task=5, but 10-shot"):
        bundle.task_data(jeopardy, 5)
