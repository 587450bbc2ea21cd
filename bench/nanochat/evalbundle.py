"""The CORE eval bundle under $NANOCHAT_BASE_DIR/eval_bundle, in the layout of upstream's eval_bundle.zip:

  core.yaml           icl_tasks: label, dataset_uri (under eval_data/), num_fewshot [k], icl_task_type,
                      continuation_delimiter (default " ")
  eval_meta_data.csv  DCLM's table: `Eval Task` and `Random baseline` (percent) are the columns read
  eval_data/<category>/<task>.jsonl   one example a line
  origin.json         ours, not in the zip: how the bundle got there (downloaded from a URL, or generated)

Evaluation only reads it: `nanochat-bench data download --eval-bundle` stages it (bench/nanochat/evalstage.py),
`data generate --eval-bundle` writes a small one in the same format (bench/nanochat/evalgen.py). Every problem
is one DataError line naming the file (and line) and what is wrong.
"""

import contextlib
import csv
import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.errors import ConfigError, DataError, first_line
from bench.nanochat.common import get_base_dir

# The task types and the task, here with the reader of core.yaml rather than in core_eval.py (torch): staging and
# planning check a bundle on login nodes, where importing torch would cost seconds.
MULTIPLE_CHOICE, SCHEMA, LANGUAGE_MODELING = "multiple_choice", "schema", "language_modeling"
TASK_TYPES = (MULTIPLE_CHOICE, SCHEMA, LANGUAGE_MODELING)


@dataclass(frozen=True)
class Task:
    """One entry of core.yaml's icl_tasks."""
    label: str
    task_type: str
    dataset_uri: str  # under eval_data/
    num_fewshot: int
    delimiter: str = " "  # continuation_delimiter


EVAL_BUNDLE_URL = "https://karpathy-public.s3.us-west-2.amazonaws.com/eval_bundle.zip"  # upstream's, ~162 MB
BUNDLE_DIR = "eval_bundle"
CONFIG, META, DATA_DIR, ORIGIN = "core.yaml", "eval_meta_data.csv", "eval_data", "origin.json"
SHUFFLE_SEED = 1337  # each task's rows are shuffled by Random(1337) before --max_per_task crops them
FIX = ("stage it with `nanochat-bench data download --eval-bundle` (a mirror: --url), or write a small offline one "
       "with `nanochat-bench data generate --eval-bundle`")
# the keys each row must have, by task type (gold indexes choices / context_options)
ROW_KEYS = {MULTIPLE_CHOICE: ("query", "choices", "gold"), SCHEMA: ("context_options", "continuation", "gold"),
            LANGUAGE_MODELING: ("context", "continuation")}


def bundle_dir() -> Path:
    return get_base_dir() / BUNDLE_DIR


@dataclass
class Bundle:
    path: Path
    tasks: list[Task]
    baselines: dict[str, float]  # label -> random baseline in percent

    def task_data(self, task: Task, max_per_task: int = -1) -> list[dict]:
        """The task's rows, shuffled by Random(1337), then the first max_per_task (-1: all)."""
        rows = read_rows(self.path / DATA_DIR / task.dataset_uri, task.task_type)
        random.Random(SHUFFLE_SEED).shuffle(rows)
        if max_per_task > 0:
            rows = rows[:max_per_task]
        if len(rows) <= task.num_fewshot:
            crop = f" after --max_per_task={max_per_task}" if max_per_task > 0 else ""
            raise DataError(f"CORE task {task.label}: {len(rows)} example(s){crop}, but {task.num_fewshot}-shot "
                            f"prompts need at least {task.num_fewshot + 1}; raise --max_per_task")
        return rows

    def check_max_per_task(self, max_per_task: int) -> None:
        """Refuse a crop too small for a task's shots before any task runs (task_data would stop the run there,
        after the tasks before it); the shots come from the bundle's own core.yaml."""
        short = [t for t in self.tasks if 0 < max_per_task <= t.num_fewshot]
        if short:
            least = max(t.num_fewshot for t in short) + 1
            names = ", ".join(f"{t.label} ({t.num_fewshot}-shot)" for t in short[:3])
            more = f" and {len(short) - 3} more" if len(short) > 3 else ""
            raise ConfigError(f"--max_per_task={max_per_task}: too few examples for the few-shot prompts of CORE "
                              f"tasks {names}{more} in {self.path / CONFIG}; give at least {least}, or -1 for all")

    def origin(self) -> dict:
        """origin.json's record, or {"origin": "unknown"} for a bundle placed by hand."""
        path = self.path / ORIGIN
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {"origin": "unknown"}


def load_bundle(path: Path | None = None) -> Bundle:
    """core.yaml and the baselines, checked: every task's type, its data file and its baseline are there."""
    path = Path(path) if path is not None else bundle_dir()
    if not (path / CONFIG).is_file():
        what = "no eval bundle" if not path.exists() else f"no {CONFIG} in the eval bundle"
        raise DataError(f"{what} at {path}; {FIX}")
    tasks = read_tasks(path / CONFIG)
    baselines = read_baselines(path / META)
    for task in tasks:
        if task.label not in baselines:
            raise DataError(f"{path / META}: no `Random baseline` for CORE task {task.label}; {FIX}")
        if not (path / DATA_DIR / task.dataset_uri).is_file():
            raise DataError(f"{path / DATA_DIR / task.dataset_uri}: missing (CORE task {task.label}); {FIX}")
    return Bundle(path, tasks, baselines)


def missing_staged(base: Path) -> str:
    """"" when the bundle under the base directory `base` passes load_bundle's checks (core.yaml, the baselines,
    every task's file there; no task's rows are read: cheap enough to ask before hours of pre-training), else its
    one line naming what is missing and the command that stages it."""
    try:
        load_bundle(Path(base) / BUNDLE_DIR)
    except DataError as e:
        return str(e)
    return ""


def read_tasks(config: Path) -> list[Task]:
    try:
        doc = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise DataError(f"{config}: not readable YAML ({first_line(e)}); {FIX}") from None
    entries = doc.get("icl_tasks") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise DataError(f"{config}: no `icl_tasks` list; {FIX}")
    return [_task(config, i, e) for i, e in enumerate(entries)]


def _task(config: Path, i: int, entry) -> Task:
    where = f"{config}: icl_tasks[{i}]"
    if not isinstance(entry, dict):
        raise DataError(f"{where}: not a mapping")
    missing = [k for k in ("label", "dataset_uri", "num_fewshot", "icl_task_type") if k not in entry]
    if missing:
        raise DataError(f"{where}: missing {', '.join(missing)}")
    if entry["icl_task_type"] not in TASK_TYPES:
        raise DataError(f"{where} ({entry['label']}): icl_task_type {entry['icl_task_type']!r}; valid: "
                        f"{', '.join(TASK_TYPES)}")
    shots = entry["num_fewshot"]
    if not (isinstance(shots, list) and shots and isinstance(shots[0], int) and shots[0] >= 0):
        raise DataError(f"{where} ({entry['label']}): num_fewshot {shots!r} must be a list like [10]")
    return Task(label=str(entry["label"]), task_type=entry["icl_task_type"], dataset_uri=str(entry["dataset_uri"]),
                num_fewshot=shots[0], delimiter=str(entry.get("continuation_delimiter", " ")))


def read_baselines(meta: Path) -> dict[str, float]:
    try:
        with open(meta, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"{meta}: not readable ({first_line(e)}); {FIX}") from None
    out = {}
    for n, row in enumerate(rows, start=2):
        try:
            out[row["Eval Task"]] = float(row["Random baseline"])
        except (KeyError, TypeError, ValueError):
            raise DataError(f"{meta}:{n}: needs the columns `Eval Task` and `Random baseline` (a number); "
                            f"{FIX}") from None
    return out


@contextlib.contextmanager
def replaced_whole(target: Path):
    """A fresh `eval_bundle` folder beside `target` to write a bundle into, moved onto `target` (what was there
    removed) when the block ends without an error, gone otherwise: an interrupted run leaves no half bundle that a
    rerun would call already there and base_eval would read."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{BUNDLE_DIR}-") as tmp:
        new = Path(tmp) / BUNDLE_DIR
        yield new
        if target.exists():
            shutil.rmtree(target)
        os.replace(new, target)


def read_rows(path: Path, task_type: str) -> list[dict]:
    """Every line of a task's JSONL file, checked for the keys its type needs."""
    try:  # a file's lines, as upstream reads them: str.splitlines() would also split at U+2028, U+0085, ...
        with open(path, encoding="utf-8") as f:
            lines = list(f)
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not readable ({first_line(e)}); {FIX}") from None
    rows = []
    for n, line in enumerate(lines, start=1):
        try:
            row = json.loads(line.strip())
        except ValueError as e:
            raise DataError(f"{path}:{n}: not valid JSON ({first_line(e)}); {FIX}") from None
        problem = row_problem(row, task_type)
        if problem:
            raise DataError(f"{path}:{n}: {problem} (a {task_type} row needs {', '.join(ROW_KEYS[task_type])}); "
                            f"{FIX}")
        rows.append(row)
    return rows


def row_problem(row, task_type: str) -> str | None:
    if not isinstance(row, dict):
        return "not a JSON object"
    missing = [k for k in ROW_KEYS[task_type] if k not in row]
    if missing:
        return f"missing {', '.join(missing)}"
    options = row.get("choices") if task_type == MULTIPLE_CHOICE else row.get("context_options")
    if task_type == LANGUAGE_MODELING:
        return None
    if not isinstance(options, list) or not options:
        return "the options are not a non-empty list"
    gold = row["gold"]
    if not isinstance(gold, int) or isinstance(gold, bool) or not 0 <= gold < len(options):
        return f"gold {gold!r} is not an index of its {len(options)} option(s)"
    return None
