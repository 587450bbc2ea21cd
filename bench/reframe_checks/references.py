"""ReFrame references generated from a nanochat-bench references file, so both judge by the same numbers.

`nanochat-bench check` (bench/analysis/check.py) selects table rows with each reference's `where` and
bounds their figures. A ReFrame test case is one run: its row (bench.analysis.rundir.read_run_dir, the
row collect would put in the table) is matched against the same `where` clauses by the same code, and
each bound becomes ReFrame's `(value, lower, upper, unit)` under the test's `system:partition`.

The tolerances mean the same in both: fractions of the value, absolute when the value is 0, mirrored
for a negative value. ReFrame limits lower to [-1, 0] for a positive value (and upper to [0, 1] for a
negative one); a bound outside that is refused with its name rather than silently changed.

A score (`score:CORE`) is the performance variable `score_CORE`: ReFrame splits a reference's key at its last
`:` (system:partition:variable), so under its own name it would be looked up as `CORE` and bound nothing.
"""

from bench.analysis.check import SCORE, Bound, Reference, checkable, score_name, select, unit_of
from bench.analysis.collect import to_frame
from bench.analysis.columns import BY_NAME
from bench.errors import ConfigError

PERF_SCORE = "score_"  # a score's performance variable: no catalogue column is named so

RefTuple = tuple[float, float | None, float | None, str]


def matching(row: dict, references: list[Reference]) -> list[Reference]:
    """The references whose `where` selects this run's row (none when the row is not usable)."""
    frame = checkable(to_frame([row]))
    return [ref for ref in references if not select(frame, ref.where).empty]


def perf_variable(figure: str) -> str:
    """ReFrame's name of a figure's performance variable (score:CORE -> score_CORE)."""
    name = score_name(figure)
    return figure if name is None else PERF_SCORE + name


def figure_of(variable: str) -> str:
    """The figure a performance variable reports (perf_variable's inverse)."""
    if variable in BY_NAME or not variable.startswith(PERF_SCORE):
        return variable
    return SCORE + variable[len(PERF_SCORE):]


def as_tuple(ref_name: str, figure: str, bound: Bound) -> RefTuple:
    """One bound as ReFrame's reference tuple (in the figure's own unit where the file gives none), after checking
    that ReFrame accepts its tolerances."""
    if bound.value > 0 and bound.lower is not None and bound.lower < -1:
        raise ConfigError(f"{ref_name}: figures.{figure}: lower = {bound.lower} is below -1, which ReFrame "
                          f"refuses for a positive value; use -1 (a bound of 0)")
    if bound.value < 0 and bound.upper is not None and bound.upper > 1:
        raise ConfigError(f"{ref_name}: figures.{figure}: upper = {bound.upper} is above 1, which ReFrame "
                          f"refuses for a negative value; use 1 (a bound of 0)")
    if ":" in (score_name(figure) or ""):  # ReFrame would look it up by what follows its last ':'
        raise ConfigError(f"{ref_name}: figures.{figure}: a score whose name holds ':' cannot be a ReFrame "
                          f"reference (ReFrame splits its keys at ':'); `nanochat-bench check` can bound it")
    # a file may leave a unit out: ReFrame would warn that "" does not match the performance variable's unit
    return (bound.value, bound.lower, bound.upper, bound.unit or unit_of(figure))


def check_bounds(path: str, references: list[Reference]) -> list[Reference]:
    """The references, once every bound is one ReFrame accepts: checked at setup with the file, as a bound
    checked only for the run it selects was refused after that run, hours after the file was read."""
    for ref in references:
        for figure, bound in ref.figures.items():
            try:
                as_tuple(ref.name, figure, bound)
            except ConfigError as e:
                raise ConfigError(f"{path}: {e}") from None
    return references


def figures_for(row: dict, references: list[Reference]) -> tuple[dict[str, RefTuple], list[str]]:
    """figure -> reference tuple for this row, and the names of the references used. One reference per
    figure: ReFrame holds one per partition, so two that select the same run and bound the same figure
    are refused (make their `where` clauses tell the runs apart)."""
    out: dict[str, RefTuple] = {}
    source: dict[str, str] = {}
    used = []
    for ref in matching(row, references):
        used.append(ref.name)
        for figure, bound in ref.figures.items():
            if figure in out:
                raise ConfigError(f"references {source[figure]!r} and {ref.name!r} both bound {figure} of this run; "
                                  f"ReFrame takes one reference per figure and partition")
            out[figure], source[figure] = as_tuple(ref.name, figure, bound), ref.name
    return out, used


def reframe_reference(partition: str, row: dict, references: list[Reference]) -> tuple[dict, list[str]]:
    """ReFrame's `reference` for this run on `partition` (its `system:partition`) from a references file's entries
    (loaded at setup, so that a mistake in the file is met before the run, not after it)."""
    figures, used = figures_for(row, references)
    return {partition: {perf_variable(figure): ref for figure, ref in figures.items()}}, used
