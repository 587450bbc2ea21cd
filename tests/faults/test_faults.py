"""Faults injected into real runs: every failure ends every process fast, is named right, loses nothing.

    python -m pytest tests/faults -m faults -q

Each case (tests/faults/cases.py) starts real processes: `nanochat-bench train` with 2 (or 4) CPU
ranks on the session's tiny data, `data download|generate` and `tokenizer train` against unreachable
mirrors and full disks, the analysis commands over hostile run directories, tables and references,
`render` and `edf` with hostile strings and paths, and 2-node jobs on the test Slurm cluster; then it
checks the outcome against the goal of issue 15 (harness.problems).
"""

from concurrent.futures import ThreadPoolExecutor

import pytest

from cases import Case, Ctx, local_cases, slurm_cases
from harness import Unavailable, default_signal_dispositions, in_ci, problems

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def _params(cases: list[Case]):
    return [pytest.param(c, id=c.name) for c in cases]


@pytest.fixture(scope="session")
def side_by_side(request, tiny_base_dir, tmp_path_factory):
    """The selected cases that mostly wait (Case.waits: a stopped rank, a silent mirror), all started in the
    background when the first of them is judged (they come last): their waits overlap, their start-ups take turns
    (harness.starting). Each test then judges its own case's outcome, as it would have run it."""
    waiting = [item.callspec.params["case"] for item in request.session.items if hasattr(item, "callspec")
               and getattr(item.callspec.params.get("case"), "waits", False)]
    default_signal_dispositions()  # a thread cannot set signal dispositions: the main thread does it once
    with ThreadPoolExecutor(max_workers=max(len(waiting), 1)) as pool:
        yield {c.name: pool.submit(c.run, Ctx(work=tmp_path_factory.mktemp(c.name), base_dir=tiny_base_dir))
               for c in waiting}


def _judge(case: Case, ctx, request) -> None:
    try:
        outcome = request.getfixturevalue("side_by_side")[case.name].result() if case.waits else case.run(ctx)
    except Unavailable as e:  # this machine cannot stage the fault: a skip, except under CI=true
        (pytest.fail if in_ci() else pytest.skip)(f"{case.name}: {e}")
    missed = problems(outcome, case.expect)
    assert not missed, (f"{case.title}:\n  - " + "\n  - ".join(missed)
                        + f"\n--- output (tail) ---\n{outcome.output[-3000:]}")


@pytest.mark.parametrize("case", _params(sorted(local_cases(), key=lambda c: c.waits)))
def test_local_fault(case, fault_ctx, request):
    _judge(case, fault_ctx, request)


@pytest.mark.slurm
@pytest.mark.parametrize("case", _params(slurm_cases()))
def test_slurm_fault(case, fault_ctx, fault_cluster, request):
    fault_ctx.cluster = fault_cluster
    _judge(case, fault_ctx, request)
