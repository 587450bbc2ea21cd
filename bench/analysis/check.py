"""Figures against stored references with tolerances (ReFrame's `reference` idea), for CI and acceptance.

A references file (TOML) lists references; each selects rows of the table (`where`, exact values, or
shell-style patterns for strings such as gpu_name = "NVIDIA H200*", not "*H200*", which GH200s match too; a flag
as true/false, 1/0, yes/no or on/off) and bounds figures of them, each aggregated as the report aggregates it
(the column catalogue's: the median; peak memory the largest, min val bpb the lowest):
  [[reference]]
  name = "d20 bare 1x8 H200"
  where = { depth = 20, runtime = "bare", world_size = 8, gpu_name = "NVIDIA H200*" }
  figures.tok_per_sec = { value = 3.9e6, lower = -0.05, unit = "tok/s" }
A figure is a numeric column, or `score:<name>`, a score a stage recorded in run.json `scores` (the table's JSON
`scores` cell): score:CORE, score:ChatCORE, score:val_bpb, a task's accuracy (score:ARC-Easy); aggregated as the
stage tables show scores, the median. Higher is better but for bpb and losses, so a reference gives a score a floor
(lower) and a bpb or loss a ceiling (upper), as it gives tok/s a floor and step time a ceiling.
Tolerances are fractions of the value, as in ReFrame: pass when value*(1+lower) <= measured <=
value*(1+upper), lower from -1 to 0 and upper from 0 to 1; a bound left out is unbounded; with value 0 the tolerances
are absolute.
Only usable rows count (status ok and read whole: a training run with steady-state figures, or an
evaluation, whose figures are its time and problems/s); a reference that selects none fails as missing,
so a broken sweep cannot pass by producing nothing. A reference whose runs differ in what the report keeps
apart (workload config, runtime, ranks, device batch; for a flow's stage its flags and those of the stages before
it whose checkpoint it took, as the stage tables do) fails too, naming those columns or flags: theirs is no
one setup's figure.
"""

import fnmatch
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.analysis.collect import ROW_VERSION
from bench.analysis.columns import AGGREGATES, BY_NAME, FIGURES, TYPES as COLUMNS
from bench.analysis.figures import finite
from bench.analysis.scaling import GROUP_KEYS, settings, with_config, with_legacy
from bench.analysis.stages import lineage, scores_of, unlike_flags
from bench.errors import ConfigError
from bench.nanochat.config import bool_word

# A flag recorded as a bool is stored as Python spells it; `where` may spell it as the flag takes it (false, 0, no).
STORED_BOOLS = {"True": True, "False": False}
SCORE = "score:"  # a figure read from a run's `scores` by name (score:CORE), as the stage tables name their columns
SCORE_UNIT = "score"  # a score's unit, where a references file or ReFrame wants one: run.json records scores bare


def score_name(figure: str) -> str | None:
    """The score a `score:<name>` figure names; None for a column."""
    return figure[len(SCORE):] if figure.startswith(SCORE) else None


def unit_of(figure: str) -> str:
    """A figure's unit as references files and ReFrame give it: the column's, or a score's."""
    return SCORE_UNIT if score_name(figure) is not None else BY_NAME[figure].unit


def row_figure(row: dict, figure: str):
    """A figure of one run's row (a dict, as rundir.read_run_dir gives it): its column, or its recorded score."""
    name = score_name(figure)
    return row.get(figure) if name is None else scores_of(row.get("scores")).get(name)


@dataclass
class Bound:
    value: float
    lower: float | None = None
    upper: float | None = None
    unit: str = ""

    def limits(self) -> tuple[float, float]:
        scale = abs(self.value) if self.value else 1.0  # value 0: tolerances are absolute
        lo = -math.inf if self.lower is None else self.value + self.lower * scale
        hi = math.inf if self.upper is None else self.value + self.upper * scale
        return lo, hi


@dataclass
class Reference:
    name: str
    where: dict
    figures: dict[str, Bound]


@dataclass
class Outcome:
    reference: str
    figure: str
    verdict: str  # "pass", "fail" (out of range, or runs of different setups: pooled) or "missing"
    measured: float | None
    bound: Bound
    runs: int  # the runs aggregated; of a missing figure, the runs selected (none of which recorded it)
    pooled: tuple[str, ...] = ()  # columns that differ among the runs selected: no one setup's figure, a fail
    agg: str = "median"  # how the runs were aggregated (aggregate)
    older: tuple[int, ...] = ()  # the selected runs' row versions older than this release's (new columns empty)
    unmatched: str = ""  # of a reference that selects no run: the `where` values no usable run has, and theirs
    recorded: tuple[str, ...] | None = None  # of a missing score: the score names the runs selected recorded

    def line(self) -> str:
        lo, hi = self.bound.limits()
        unit = f" {self.bound.unit}" if self.bound.unit else ""
        span = f"[{_g(lo)}, {_g(hi)}]"
        if self.verdict == "missing":  # no run to select, or runs that never measured it (MFU on CPU): two fixes
            why = (f"{self.runs} usable run(s) match but none recorded it" if self.runs
                   else "no usable run matches" + (f" ({self.unmatched})" if self.unmatched else ""))
            if self.runs and self.recorded:  # score names depend on the bundle and tasks: the ones there are
                why += f" (the scores they recorded: {', '.join(self.recorded)})"
            else:  # runs with scores lack this one whatever their row version
                why += (" (they recorded no scores)" if self.runs and self.recorded is not None else "") + self._older()
            return f"MISSING {self.reference}: {self.figure}: {why} (ref {_g(self.bound.value)}{unit})"
        if self.pooled:  # a figure over setups the report keeps apart is no figure of the reference's setup
            return (f"FAIL    {self.reference}: {self.figure}: the {self.runs} run(s) matched differ in "
                    f"{', '.join(self.pooled)}, so no one setup is checked (narrow `where` to one of each; "
                    f"ref {_g(self.bound.value)}{unit}){self._older()}")
        word = "ok" if self.verdict == "pass" else ("below" if self.measured < lo else "above") + " the allowed range"
        measured = _g(self.measured)
        if self.verdict == "fail":  # missed by a hair: both printed alike would read as a pass
            measured, limit = _apart(self.measured, lo if self.measured < lo else hi)
            span = f"[{limit}, {_g(hi)}]" if self.measured < lo else f"[{_g(lo)}, {limit}]"
        return (f"{self.verdict.upper():7s} {self.reference}: {self.figure} = {measured}{unit} "
                f"({word}; ref {_g(self.bound.value)}, allowed {span}, {self.agg} of {self.runs} run(s))")


    def _older(self) -> str:
        """Why an older table's runs may lack a figure or differ in a column: it was added after they were collected."""
        if not self.older:
            return ""
        return (f"; the runs matched are rows of row version {', '.join(map(str, self.older))}, older than this "
                f"release's {ROW_VERSION} (columns added since are empty for them): collect them again")


def _g(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _apart(measured: float, limit: float) -> tuple[str, str]:
    """The measured figure and the limit it missed, with as many digits as tell them apart."""
    a, b, digits = _g(measured), _g(limit), 5
    while a == b and digits <= 17:
        a, b, digits = f"{measured:.{digits}g}", f"{limit:.{digits}g}", digits + 1
    return a, b


def load_references(path: str | Path, given_by: str = "--references") -> list[Reference]:
    """Parse and validate a references file; every mistake names the file, the entry and the fix (an unreadable
    file: with `given_by`, the option that named it)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{given_by} {path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{given_by} {path}: a directory, not a references file (TOML)") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{given_by} {path}: not UTF-8 text (byte {e.start}: binary data?); a references file "
                          "is TOML (see results/references.example.toml)") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{given_by} {path}: not valid TOML ({e})") from None
    entries = data.get("reference")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"{path}: no [[reference]] entries (see results/references.example.toml)")
    unknown = sorted(set(data) - {"reference"})
    if unknown:  # a misspelt [[refrence]] is no reference: the gate would pass without checking it
        raise ConfigError(f"{path}: unknown key(s) {unknown} beside [[reference]]; a references file holds only "
                          f"[[reference]] entries (see results/references.example.toml)")
    references = [_reference(path, i, e) for i, e in enumerate(entries)]
    names = [r.name for r in references]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # results are reported by name: two of one name could not be told apart
        raise ConfigError(f"{path}: more than one reference named {', '.join(map(repr, twice))}; "
                          f"give each its own name")
    return references


def _reference(path: Path, i: int, entry: dict) -> Reference:
    name = str(entry.get("name") or f"reference #{i + 1}")
    unknown = set(entry) - {"name", "where", "figures"}
    if unknown:  # a misspelt `where` is no filter: the median of every run would be checked
        raise ConfigError(f"{path}: {name}: unknown key(s) {sorted(unknown)}; valid: name, where, figures")
    where, figures = entry.get("where", {}), entry.get("figures")
    if not isinstance(where, dict):
        raise ConfigError(f"{path}: {name}: where must be a table of column = value, e.g. "
                          f"where = {{ depth = 20, runtime = \"bare\" }}; got {where!r}")
    where_err = [k for k in where if k not in COLUMNS]
    if where_err:
        raise ConfigError(f"{path}: {name}: unknown column(s) in where: {', '.join(where_err)}; "
                          f"valid: {', '.join(COLUMNS)}")
    not_numbers = [k for k, v in where.items() if COLUMNS[k] != "str" and finite(v) is None]
    if not_numbers:
        raise ConfigError(f"{path}: {name}: where {', '.join(not_numbers)} must be number(s), "
                          f"got {', '.join(repr(where[k]) for k in not_numbers)}")
    # a list, table or date would be compared as its text and match no run: missing, a pass with --allow-missing
    not_scalars = [k for k, v in where.items() if COLUMNS[k] == "str" and not isinstance(v, (str, int, float))]
    if not_scalars:
        raise ConfigError(f"{path}: {name}: where {', '.join(not_scalars)} must be text (a value, or a shell "
                          f"pattern), a number or true/false; got {', '.join(repr(where[k]) for k in not_scalars)}")
    if not isinstance(figures, dict) or not figures:
        raise ConfigError(f"{path}: {name}: no figures (e.g. figures.tok_per_sec = {{ value = 1e6, lower = -0.05 }})")
    return Reference(name, where, {fig: _bound(path, name, fig, spec) for fig, spec in figures.items()})


def _bound(path: Path, name: str, fig: str, spec) -> Bound:
    where = f"{path}: {name}: figures.{fig}"
    score = score_name(fig)
    if score is not None and not score.strip():
        raise ConfigError(f"{where} names no score; give score:<name>, e.g. score:CORE, score:ChatCORE, "
                          f"score:val_bpb, or a task's accuracy such as score:ARC-Easy")
    if score is None and fig not in FIGURES:
        raise ConfigError(f"{path}: {name}: unknown figure {fig!r}; valid: {', '.join(FIGURES)}, "
                          f"or score:<name> (score:CORE, score:val_bpb, ...)")
    if not isinstance(spec, dict) or finite(spec.get("value")) is None:
        got = f"; got value = {spec.get('value')!r}" if isinstance(spec, dict) and "value" in spec else ""
        raise ConfigError(f"{where} needs a numeric value, e.g. {{ value = 1.0, lower = -0.05 }}{got}")
    unknown = set(spec) - {"value", "lower", "upper", "unit"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; valid: value, lower, upper, unit")
    lower, upper = spec.get("lower"), spec.get("upper")
    for key, v in (("lower", lower), ("upper", upper)):
        if v is not None and finite(v) is None:  # finite: no bool, NaN, inf or integer past a float
            raise ConfigError(f"{where}: {key} = {v!r} is not a number; {key} is a fraction of the value "
                              f"({'lower <= 0, e.g. -0.05' if key == 'lower' else 'upper >= 0, e.g. 0.05'})")
    if (lower is not None and lower > 0) or (upper is not None and upper < 0):
        raise ConfigError(f"{where}: lower must be <= 0 and upper >= 0 "
                          f"(fractions of the value, ReFrame style); got lower={lower}, upper={upper}")
    if lower is not None and lower < -1 and float(spec["value"]) > 0:  # as ReFrame: a bound below 0 bounds nothing
        raise ConfigError(f"{where}: lower = {lower} is below -1, so the allowed range reaches below 0 and no "
                          f"measurement fails it; lower is a fraction of the value (-0.05 for 5% below; -1, a bound "
                          f"of 0, the lowest); leave it out for no lower bound")
    if upper is not None and upper > 1 and float(spec["value"]) != 0:  # 5 for 5%: six times the value passed
        raise ConfigError(f"{where}: upper = {upper} is above 1, a bound {upper:.0%} above the value; upper is a "
                          f"fraction of the value (0.05 for 5% above), at most 1 (100% above); for a looser bound "
                          f"give the limit as the value with upper = 0, or leave upper out")
    if not isinstance(spec.get("unit", ""), str):
        raise ConfigError(f"{where}: unit = {spec['unit']!r} must be a string, e.g. unit = \"tok/s\"")
    unit, own = spec.get("unit", ""), unit_of(fig)
    if unit and score is not None and unit != own:  # 25 for a CORE of 0.25 would be compared as 25
        raise ConfigError(f"{where}: unit = {unit!r}, but scores are as run.json records them (CORE and accuracies "
                          f"as fractions, bpb in bits per byte); give unit = \"{own}\" or leave unit out")
    if unit and own and unit != own:  # a value written in another unit would be compared as if in this one
        raise ConfigError(f"{where}: unit = {unit!r}, but {fig} is in {own}; give the value in {own} "
                          f"(unit = \"{own}\") or leave unit out")
    return Bound(float(spec["value"]), lower, upper, spec.get("unit", ""))


def select(df: pd.DataFrame, where: dict) -> pd.DataFrame:
    """The rows `where` selects, read as the report reads them: a run from before a field has LEGACY's value."""
    df = with_legacy(df)
    mask = pd.Series(True, index=df.index)
    for col, want in where.items():
        values = df[col]
        if COLUMNS[col] == "str":
            mask &= values.map(lambda v, w=want: isinstance(v, str) and _matches(v, w)).astype(bool)
        else:
            mask &= values.astype("Float64") == float(want)
    return df[mask.fillna(False).astype(bool)]


def _matches(value: str, want) -> bool:
    """A stored string against a `where` value: a shell pattern, or a boolean however it is spelt."""
    if value in STORED_BOOLS and bool_word(str(want)) is not None:
        return STORED_BOOLS[value] == bool_word(str(want))
    return fnmatch.fnmatchcase(value, str(want))


def checkable(table: pd.DataFrame) -> pd.DataFrame:
    """The rows whose figures a reference may bound: those the reader left no skip_reason (an ended-ok training run
    with steady steps, or an evaluation, which takes no step: its figures are its time and problems/s, and
    scaling.usable, which needs tok/s, would leave it out), their ranks known."""
    return table[table["skip_reason"].isna() & table["world_size"].notna()]


def check(table: pd.DataFrame, references: list[Reference]) -> list[Outcome]:
    """One outcome per (reference, figure): the figure over the usable rows the reference selects (aggregate)."""
    ok = checkable(table)
    # over the whole table, not a reference's rows: an evaluation's lineage holds the flags of the training before it
    staged = ok["stage"].notna()
    ok = ok.assign(lineage=pd.Series(lineage(ok[staged]), index=ok.index[staged], dtype=object))
    outcomes = []
    for ref in references:
        rows = select(ok, ref.where)
        older = tuple(sorted({int(v) for v in rows["row_version"].dropna() if v < ROW_VERSION}))
        unmatched = "" if len(rows) else _unmatched(ok, ref.where)
        for fig, bound in ref.figures.items():
            name = score_name(fig)
            scores = [] if name is None else [scores_of(text) for text in rows["scores"]]
            column = rows[fig] if name is None else pd.Series([s.get(name) for s in scores], index=rows.index)
            values = pd.to_numeric(column, errors="coerce").dropna()
            if values.empty:
                recorded = None if name is None else tuple(sorted({n for s in scores for n in s}))
                outcomes.append(Outcome(ref.name, fig, "missing", None, bound, len(rows), older=older,
                                        unmatched=unmatched, recorded=recorded))
                continue
            how = aggregate(fig)
            measured = float(values.agg(how))
            lo, hi = bound.limits()
            pooled = _pooled(rows.loc[values.index], fig)
            verdict = "pass" if lo <= measured <= hi and not pooled else "fail"
            outcomes.append(Outcome(ref.name, fig, verdict, measured, bound, len(values), pooled, how,
                                    older if pooled else ()))
    return outcomes


def _unmatched(ok: pd.DataFrame, where: dict, shown: int = 8) -> str:
    """Of a `where` that selects no usable run, each value no usable run has (stage = "chat_eval", where a flow's
    are chat_eval_mid and chat_eval_sft) with the values they have, so the fix can be read off the line."""
    if ok.empty:
        return "the table has no usable run"
    ok = with_legacy(ok)
    out = []
    for col, want in where.items():
        if select(ok, {col: want}).empty:
            have = sorted({f"{v:g}" if isinstance(v, float) else str(v) for v in ok[col].dropna()})
            listed = ", ".join(have[:shown]) + (f", ... ({len(have)} in all)" if len(have) > shown else "")
            out.append(f"{col} = {want!r} matches none; the usable runs' {col}: {listed or 'none recorded'}")
    if where and not out:
        return "each value of `where` is some usable run's, but no run has them all"
    return "; ".join(out)


def aggregate(fig: str) -> str:
    """How repeats of a figure are aggregated, as the report's tables do (the catalogue's agg: the largest peak memory,
    the lowest min val bpb), so a reference bounds the figure the report shows; a figure the catalogue does not
    summarise, the median."""
    return AGGREGATES.get(fig, "median")


def _pooled(rows: pd.DataFrame, fig: str = "") -> tuple[str, ...]:
    """The columns of a report's point (its config, runtime, ranks and nodes, and the device batch, which a strong
    curve's key leaves out: scaling.mixed_batches, mixed_nodes; for val bpb the validation shards and the training
    horizon, scaling_table's val_sets and horizons) on which the selected runs differ: a figure over them is no
    figure of one setting, as the report never pools them; one not recorded is a setting of its own
    (scaling.settings). Runs of one flow stage (with check's `lineage`) also name the flags they differ in
    (stages.unlike_flags): the stage tables take no median over other --max_problems, nor over evaluations of another
    mid-training."""
    if len(rows) < 2:
        return ()
    keyed = with_config(rows)
    point = (*GROUP_KEYS, "runtime", "world_size", "nodes", "device_batch_size",
             *(("val_files_k", "num_iterations") if fig == "min_val_bpb" else ()))
    differ = tuple(c for c in point if settings(keyed[c]) > 1)
    if "lineage" in rows and "stage" not in differ and rows["stage"].notna().all():
        differ += tuple(unlike_flags(rows))
    return differ
