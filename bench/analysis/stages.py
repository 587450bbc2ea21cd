"""The report per stage of a flow (bench/launch/flow.py): for each stage, its throughput, its time and its
scores side by side across runtimes and rank counts, then the time per stage and in total (the time to a
chat model), so a runtime that changes a result, not only a speed, shows.

Only usable runs enter (they ended ok, their figures could be read). A stage's runs are compared only with the
same stage's (run.json `stage`, part of the comparison key with `workload`), and within a stage only runs of
one model and point shape (runtime, ranks, nodes) are summarised together, as the column catalogue says (the
median; peak memory the largest), and only where they ran their stage, and each stage before it whose checkpoint
they took, with the same flags (run.json config, the catalogue's `settings`): a point whose runs differ there is
left out, and a note says in what, as the scaling sections leave out a point of mixed device batches. An
evaluation records no model of its own, so a run's model is its flow's: the config of the flow's training
stage (the same sweep and point run id), and a `model` column tells them apart where the runs trained more
than one. Training stages have tok/s and MFU from their steady steps (bench/analysis/figures.py); evaluation
stages record no steps, so their throughput is what their `score` events counted (problems, tokens) over the
seconds those scores took. A figure's header is the stage's own where its workload says what it counts
(bench/workloads `headers`: base_loss's sequences/s, SFT's supervised tok/s).
"""

import json

import pandas as pd

from bench.analysis import scaling
from bench.analysis.columns import AGGREGATES, cell
from bench.analysis.tables import Table, fmt

POINT = ["runtime", "world_size", "nodes"]
VAL_FILES_K = "NANOCHAT_VAL_FILES_K"  # run.json val_files_k, among a stage's flags (_with_k)
FLOW = ["root", "sweep_id", "run_id"]  # the stages of one flow point share these (bench/launch/flow.py)
# The figures a stage section shows, where its runs recorded them, in this order.
FIGURES = ("tok_per_sec", "mfu", "problems_per_sec", "eval_tok_per_sec", "stage_time_s", "peak_mem_mib",
           "min_val_bpb")
STAGES_NOTE = ("Medians over the runs of each point that ended ok (peak memory: the largest; min val bpb: the "
               "lowest). Training stages: "
               "tok/s of the steady steps and MFU (FLOPs per token x the tokens the model ran per second / peak); "
               "chat_sft's throughput is its supervised tokens per second (upstream's num_tokens), its MFU counts "
               "every position it ran, padding included. Evaluations: what their scores counted (base_loss "
               "sequences and tokens, forward only; base_eval examples; chat_eval problems, and the tokens its "
               "generative tasks generated) over the seconds those scores took. peak mem MiB: the stage's peak "
               "allocated GPU memory. time s: from the launch to the stage's end, start-up included. Scores as "
               "run.json records them (val/train bpb, CORE, ChatCORE, each task's accuracy). Runs are repeats of "
               "a point only where they ran the stage, and every stage before it whose checkpoint they took, with "
               "the same flags (run.json config, less the checkpoint's folder and the bounds of waits, and "
               "NANOCHAT_VAL_FILES_K, which picks the validation and training shards): a point "
               "whose runs differ there is left out of the stage's table and of the time to a chat model, the note "
               "under it saying in what.")


def scores_of(cell) -> dict:
    """A row's `scores` (JSON text by name, rundir.scores_text; or the dict itself) as a dict; {} where none."""
    if isinstance(cell, str):
        try:
            cell = json.loads(cell)
        except ValueError:  # a hand-edited CSV: no scores rather than a traceback
            return {}
    return cell if isinstance(cell, dict) else {}


def stage_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The usable runs of a flow's stages (ended ok, read whole, not a copy), their scores as `score:<name>`."""
    rows = table[table["stage"].notna() & (table["status"] == "ok") & table["skip_reason"].isna()].copy()
    scores = [scores_of(text) for text in rows["scores"]]
    for name in sorted({name for s in scores for name in s}):
        rows[f"score:{name}"] = [s.get(name) for s in scores]
    rows["model"] = _models(rows)
    rows["lineage"] = lineage(rows)
    return rows


def _flow_keys(df: pd.DataFrame) -> list[tuple]:
    return [tuple(map(str, k)) for k in zip(*(df[c] for c in FLOW))]


def lineage(rows: pd.DataFrame) -> list[str]:
    """Per run, JSON of the flags (run.json config, the `settings` column) of its stage and of every stage before it
    in its flow that saved a checkpoint: another mid-training is another model for chat_eval_mid to score, whatever
    chat_eval's own flags. A stage of the flow with no ok run is null, a setting of its own (scaling.settings)."""
    from bench.launch.flow import FLOWS  # standard library and the launch side only: no torch

    saves = {s.name for stages in FLOWS.values() for s in stages if s.saves}
    texts = rows["settings"] if "settings" in rows.columns else pd.Series(None, index=rows.index, dtype=object)
    flags = {(key, stage): _with_k(text, k)
             for key, stage, text, k in zip(_flow_keys(rows), rows["stage"], texts, rows["val_files_k"])}
    out = []
    for key, stage in zip(_flow_keys(rows), rows["stage"]):
        before = sorted((s for s in saves if _stage_order(s) < _stage_order(stage)), key=_stage_order)
        out.append(json.dumps({s: flags.get((key, s)) for s in [*before, stage]}))
    return out


def _with_k(text, k) -> str | None:
    """A run's flags with its NANOCHAT_VAL_FILES_K: the last K shards are the validation split and the others the
    training one, so another K is another val bpb and, for pre-training, other training data."""
    flags = json.loads(text) if isinstance(text, str) else None
    if pd.notna(k):
        flags = {**(flags or {}), VAL_FILES_K: int(k)}
    return None if flags is None else json.dumps(flags, sort_keys=True)


def unlike_flags(runs: pd.DataFrame) -> list[str]:
    """The flags one stage's runs at a point differ in ('mid_train num_iterations 40, 80'), its own and those of the
    stages before it (lineage); [] where they are repeats."""
    flows = [json.loads(text) for text in runs["lineage"]]
    said = []
    for stage in sorted({s for f in flows for s in f}, key=_stage_order):
        ran = [json.loads(f[stage]) if isinstance(f.get(stage), str) else None for f in flows]
        if len({json.dumps(r, sort_keys=True) for r in ran}) < 2:
            continue
        if None in ran:
            said.append(f"{stage} flags recorded by some runs only")
            continue
        for flag in sorted({k for r in ran for k in r}):
            values = dict.fromkeys(json.dumps(r[flag]) if flag in r else "not recorded" for r in ran)
            if len(values) > 1:
                said.append(f"{stage} {flag} {', '.join(values)}")
    return said


def _models(rows: pd.DataFrame) -> list:
    """Per run, the config label of the model its flow trained: that of the flow's first stage (in the flows'
    order) that records the model's depth; None where no such stage ended ok."""
    trained = rows[rows["depth"].notna()]
    trained = scaling.with_config(trained.sort_values("stage", key=lambda col: col.map(lambda st: _stage_order(st)[0]),
                                                      kind="stable"))
    label = {}
    for key, config in zip(_flow_keys(trained), trained["config"]):
        label.setdefault(key, config)
    return [label.get(key) for key in _flow_keys(rows)]


def _stage_order(stage: str) -> tuple[int, str]:
    """A stage's place in the flows (the report's order of sections), others after by name."""
    from bench.launch.flow import FLOWS  # standard library and the launch side only: no torch

    order = list(dict.fromkeys(s.name for stages in FLOWS.values() for s in stages))
    return order.index(stage) if stage in order else len(order), stage


def _by_point(rows: pd.DataFrame, models: bool, unit: str, where: str) -> tuple[list, str | None]:
    """(cells, runs) of each point, a point shape of one model where the runs trained several (`models`), whose
    runs are repeats; and the note of the points left out of `where` (None where none was), a stage's runs there
    differing in their flags (unlike_flags)."""
    kept, said = [], []
    for key, g in rows.groupby(["model", *POINT] if models else POINT, sort=True, dropna=False):
        model = [fmt(key[0])] if models else []
        runtime, ranks, nodes = key[len(model):]
        flags = list(dict.fromkeys(f for _, s in g.groupby("stage", sort=False) for f in unlike_flags(s)))
        if not flags:
            kept.append(([*model, str(runtime), fmt(ranks, "int"), fmt(nodes, "int")], g))
            continue
        at = scaling.count(ranks, unit) if pd.notna(ranks) else f"{unit} not recorded"
        point = (f"{runtime} at {at}, {scaling.nodes_text(nodes)}"
                 + (f" (model {key[0]})" if models else ""))
        said.append(f"{point} ran {'; '.join(flags)}")
    return kept, (f"{'; '.join(said)}: not repeats of one point (another way of running the stage or one before "
                  f"it), so that point is left out of {where}.") if said else None


def _point_table(head: list[str], rows: list[list[str]], models: bool, unit: str) -> Table:
    """A Table whose rows start with their point's cells; the model's (if shown) and the runtime's are text."""
    return Table([*["model", "runtime", unit, "nodes"][0 if models else 1:], *head], rows,
                 text_cols=tuple(range(2 if models else 1)))


def stage_table(rows: pd.DataFrame, models: bool = False, unit: str = "ranks") -> tuple[Table, str | None]:
    """One stage: per runtime x ranks x nodes (and model, with `models`), its runs, throughput, MFU, time, peak
    memory and every score it recorded; headers as the stage's workload names its figures. A point whose runs ran
    other flags is left out, the note returned with the table saying so."""
    score_cols = [c for c in rows.columns if c.startswith("score:") and rows[c].notna().any()]
    figures = [c for c in FIGURES if rows[c].notna().any()]
    workload = next(iter(rows["workload"].dropna()), None)
    out = []
    points, note = _by_point(rows, models, unit, "this table")
    for cells, g in points:
        summary = {c: pd.to_numeric(g[c], errors="coerce").agg(AGGREGATES.get(c, "median"))
                   for c in figures + score_cols}
        out.append([*cells, str(len(g)),
                    *(fmt(summary[c], cell(c)[2]) for c in figures), *(fmt(summary[c], "3") for c in score_cols)])
    head = ["runs", *(cell(c, unit[:-1], workload)[0] for c in figures), *(c.split(":", 1)[1] for c in score_cols)]
    return _point_table(head, out, models, unit), note


def time_to_chat(rows: pd.DataFrame, stages: list[str], models: bool = False,
                 unit: str = "ranks") -> tuple[Table, str | None]:
    """Per runtime x ranks x nodes (and model, with `models`): each stage's median time and their sum; a stage
    with no ok run there is '–' and the total says how many stages it adds up. The note returned with the table
    names the points left out, a sum of medians over other ways of running a stage being no one flow's time."""
    out = []
    points, note = _by_point(rows, models, unit, "the time to a chat model")
    for cells, g in points:
        per = {s: pd.to_numeric(g.loc[g["stage"] == s, "stage_time_s"], errors="coerce").median() for s in stages}
        known = [v for v in per.values() if pd.notna(v)]
        total = f"{fmt(sum(known), '1')}" + ("" if len(known) == len(stages) else f" ({len(known)} of {len(stages)})")
        out.append([*cells, *(fmt(per[s], "1") for s in stages), total if known else fmt(None)])
    return _point_table([*(f"{s} s" for s in stages), "total s"], out, models, unit), note


def stage_sections(table: pd.DataFrame) -> dict | None:
    """The report's flow part: a section per stage and the time to a chat model (None: no stage ran ok)."""
    if "stage" not in table.columns:
        return None
    rows = stage_rows(table)
    if rows.empty:
        return None
    stages = sorted(dict.fromkeys(rows["stage"]), key=_stage_order)  # those that ran, in the flows' order
    models = rows["model"].astype(str).nunique() > 1  # one model: the column would say nothing
    # a rank is a GPU where every stage's runs ran on GPUs, by the other tables' rule; one word for the whole part
    units = {scaling.rank_unit(scaling.device_name(*d)) for d in zip(rows["gpu_name"], rows["gpus_per_node"],
                                                                      rows["device_type"])}
    unit = units.pop() if len(units) == 1 else "ranks"
    sections = []
    for s in stages:
        ran = rows[rows["stage"] == s]
        table, note = stage_table(ran, models, unit)
        sections.append({"name": s, "workload": ", ".join(sorted(set(ran["workload"].dropna()))), "table": table,
                         "note": note})
    time_table, time_note = time_to_chat(rows, stages, models, unit)
    return {"note": STAGES_NOTE, "sections": sections, "time_to_chat": time_table, "time_note": time_note}
