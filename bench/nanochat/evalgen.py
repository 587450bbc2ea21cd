"""`nanochat-bench data generate --eval-bundle`: a small CORE eval bundle in the real bundle's format, offline.

The 22 tasks of upstream's core.yaml (labels, types, shots, delimiters and random baselines as the real bundle
has them; bench/nanochat/evalbundle.py describes the files), each with ROWS examples whose text is drawn from
the offline corpus (bench/nanochat/corpus.py). The scores it gives measure nothing about a model: it is for
tests, CI and timing the evaluation path, and origin.json says it was generated.
"""

import csv
import io
import json
from pathlib import Path

import yaml

from bench.contract import write_json_atomic, write_text_atomic
from bench.errors import DataError, os_reason_and_remedy
from bench.nanochat.corpus import CorpusText
from bench.nanochat import download
from bench.nanochat.common import ELSEWHERE
from bench.nanochat.evalbundle import CONFIG, DATA_DIR, META, ORIGIN, SCHEMA, bundle_dir, replaced_whole
from bench.nanochat.evalbundle import LANGUAGE_MODELING as LM, MULTIPLE_CHOICE as MC

SEED = 4321
ROWS = 24  # more than the 10 shots + 1 that the few-shot tasks need
ANSWER = "\nAnswer: "
# label, type, shots, random baseline (%), file under eval_data/, continuation_delimiter (None: the default " ")
TASKS = (
    ("hellaswag_zeroshot", MC, 0, 25.0, "language_understanding/hellaswag.jsonl", None),
    ("jeopardy", LM, 10, 0.0, "world_knowledge/jeopardy_all.jsonl", ANSWER),
    ("bigbench_qa_wikidata", LM, 10, 0.0, "world_knowledge/bigbench_qa_wikidata.jsonl", None),
    ("arc_easy", MC, 10, 25.0, "world_knowledge/arc_easy.jsonl", ANSWER),
    ("arc_challenge", MC, 10, 25.0, "world_knowledge/arc_challenge.jsonl", ANSWER),
    ("copa", MC, 0, 50.0, "commonsense_reasoning/copa.jsonl", None),
    ("commonsense_qa", MC, 10, 20.0, "commonsense_reasoning/commonsense_qa.jsonl", None),
    ("piqa", MC, 10, 50.0, "commonsense_reasoning/piqa.jsonl", ANSWER),
    ("openbook_qa", MC, 0, 25.0, "commonsense_reasoning/openbook_qa.jsonl", None),
    ("lambada_openai", LM, 0, 0.0, "language_understanding/lambada_openai.jsonl", None),
    ("hellaswag", MC, 10, 25.0, "language_understanding/hellaswag.jsonl", None),
    ("winograd", SCHEMA, 0, 50.0, "language_understanding/winograd_wsc.jsonl", None),
    ("winogrande", SCHEMA, 0, 50.0, "language_understanding/winogrande.jsonl", None),
    ("bigbench_dyck_languages", LM, 10, 0.0, "symbolic_problem_solving/bigbench_dyck_languages.jsonl", None),
    ("agi_eval_lsat_ar", MC, 3, 20.0, "symbolic_problem_solving/agi_eval_lsat_ar.jsonl", None),
    ("bigbench_cs_algorithms", LM, 10, 0.0, "symbolic_problem_solving/bigbench_cs_algorithms.jsonl", None),
    ("bigbench_operators", LM, 10, 0.0, "symbolic_problem_solving/bigbench_operators.jsonl", None),
    ("bigbench_repeat_copy_logic", LM, 10, 0.0, "symbolic_problem_solving/bigbench_repeat_copy_logic.jsonl", None),
    ("squad", LM, 10, 0.0, "reading_comprehension/squad.jsonl", None),
    ("coqa", LM, 0, 0.0, "reading_comprehension/coqa.jsonl", None),
    ("boolq", MC, 10, 62.0, "reading_comprehension/boolq.jsonl", ANSWER),
    ("bigbench_language_identification", MC, 10, 9.1, "language_understanding/bigbench_language_identification.jsonl",
     None),
)


def _row(t: CorpusText, task_type: str, baseline: float) -> dict:
    """One example whose right answer is how the corpus goes on (the other options are drawn at random), so a
    model trained on the corpus scores above chance on some."""
    words = t.words(10, 24).split()
    while len(words) < 8:  # a short paragraph: an empty context would not be a prefix once stripped
        words = t.words(10, 24).split()
    cut = len(words) - t.rng.randint(1, 3)
    head, tail = " ".join(words[:cut]), " ".join(words[cut:])
    if task_type == MC:
        k = min(max(2, round(100 / baseline)), 11)  # language identification's 9.1% is 11 choices
        gold = t.rng.randrange(k)
        choices = [tail if i == gold else t.words(1, 3) for i in range(k)]
        return {"query": head, "choices": choices, "gold": gold}
    if task_type == SCHEMA:
        gold = t.rng.randrange(2)
        lead, rest = " ".join(words[:3]), " ".join(words[3:cut])
        options = [lead if i == gold else t.words(3, 3) for i in range(2)]
        return {"context_options": options, "continuation": f"{rest} {tail}", "gold": gold}
    the = [i for i, w in enumerate(words) if w == "the" and i >= 4]
    if the and t.rng.random() < 0.5:  # the corpus' commonest word: one a small model gets right
        head, tail = " ".join(words[:the[0]]), "the"
    return {"context": head + (" " if t.rng.random() < 0.3 else ""), "continuation": tail}


def config_text() -> str:
    tasks = [{"label": label, "dataset_uri": uri, "num_fewshot": [shots], "icl_task_type": task_type,
              **({"continuation_delimiter": delimiter} if delimiter is not None else {})}
             for label, task_type, shots, _, uri, delimiter in TASKS]
    return yaml.safe_dump({"icl_tasks": tasks}, sort_keys=False, allow_unicode=True)


def meta_text() -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["Eval Task", "Task Category", "Task Type", "#shots", "Random baseline"])
    for label, task_type, shots, baseline, uri, _ in TASKS:
        w.writerow([label, uri.split("/")[0], task_type, shots, baseline])
    return out.getvalue()


def generate(path: Path | None = None, rows: int = ROWS, overwrite: bool = False) -> Path:
    """Write the bundle (refusing to replace one already there unless `overwrite`); its directory."""
    path = Path(path) if path is not None else bundle_dir()
    if path.exists() and not overwrite:
        raise DataError(f"{path}: an eval bundle is already there; pass --overwrite to replace it with a "
                        "generated one")
    # written beside it and moved into place whole, as `data download --eval-bundle` does, and not while it does
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with download.one_download_at_a_time(path.parent), replaced_whole(path) as new:
            _write(new, rows)
    except OSError as e:  # a full or read-only disk: the temporary directory is gone with its files
        raise DataError(f"data generate --eval-bundle: cannot write into {path.parent}: "
                        f"{os_reason_and_remedy(e, ELSEWHERE)}") from None
    return path


def _write(path: Path, rows: int) -> None:
    t = CorpusText(SEED, max_chars=400)
    written = {}
    for label, task_type, _, baseline, uri, _ in TASKS:
        if uri in written:
            continue  # hellaswag and hellaswag_zeroshot read one file, as in the real bundle
        lines = [json.dumps(_row(t, task_type, baseline), ensure_ascii=False) for _ in range(rows)]
        target = path / DATA_DIR / uri
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written[uri] = rows
    write_text_atomic(path / META, meta_text())
    write_text_atomic(path / CONFIG, config_text())
    write_json_atomic(path / ORIGIN, {"origin": "generated", "rows_per_task": rows, "seed": SEED})
