"""Our sandboxed calculator tool against upstream nanochat's own use_calculator, on the same expressions.

    NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat /tmp/upstream-venv/bin/python benchmarks/compare_calculator.py --random 400

Needs a checkout of upstream karpathy/nanochat at 5c93a56 (never vendored here) and a Python that can
import its nanochat/engine.py (torch). Compared: a fixed table (the one tests/unit/nanochat/test_calculator.py
asserts, plus what it cannot spell out) and `--random` expressions drawn from each branch's characters;
for each, the type and value, and str() as the engine would insert it. Prints the mean time of a call that
passed the filter on each side (ours starts a sandbox); the exit status is 1 on any difference.
"""

import argparse
import math
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.nanochat.calculator import CalculatorText, allowed  # noqa: E402
from bench.nanochat.calculator import use_calculator as ours  # noqa: E402
from tests.unit.nanochat.test_calculator import TABLE  # noqa: E402

EXTRA = ["'a'.count('a') and 'a'.split", "'a'.count('a') and ...", "1" + "0" * 400 + ".0*1",
         "'a'.count('a') and 'a'.count"]
WORDS = ["'strawberry'", '"Mississippi"', "'a b,c'", "''", "'banana'", "b'abc'"]


def random_arithmetic(rng: random.Random) -> str:
    """Numbers (some with commas or a dot), operators and parentheses, at times unbalanced or odd."""
    def number():
        return rng.choice([str(rng.randint(0, 10**rng.randint(1, 12))), f"{rng.randint(0, 999):,}",
                           f"{rng.random() * 100:.{rng.randint(0, 3)}f}", ".5", "0", "00"])
    parts = [number()]
    for _ in range(rng.randint(0, 5)):
        parts += [rng.choice(["+", "-", "*", "/", "//", "**", " - -", "*("]), number()]
        if rng.random() < 0.3:
            parts.append(")")
    return rng.choice(["", " "]).join(parts)


def random_count(rng: random.Random) -> str:
    """`.count(` calls joined by Python words, with the filter's traps now and then."""
    def call():
        word, sub = rng.choice(WORDS), rng.choice(["'a'", "'s'", "''", '"an"', "b'a'", "'A'"])
        return f"{word}{rng.choice(['', '.lower()', '.upper()'])}.count({sub})" + rng.choice(["", ".real", ""])
    parts = [call()]
    for _ in range(rng.randint(0, 3)):
        parts += [rng.choice(["and", "or", "is", "is not", "if", "else", "not", "+", "dir", "file"]), call()]
    return " ".join(parts)


def upstream_calculator(upstream_dir: str):
    sys.path.insert(0, upstream_dir)
    from nanochat.engine import use_calculator
    return use_calculator


def same(a, b) -> bool:
    if isinstance(b, CalculatorText) or isinstance(a, CalculatorText):
        return str(a).split(" at 0x")[0] == str(b).split(" at 0x")[0]  # a method's str shows its address
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b and str(a) == str(b)


def random_expressions(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [random_arithmetic(rng) if i % 2 else random_count(rng) for i in range(n)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=400, help="random expressions as well (default 400)")
    args = parser.parse_args()
    upstream_dir = os.environ.get("NANOCHAT_UPSTREAM_DIR", "/tmp/upstream-nanochat")
    theirs = upstream_calculator(upstream_dir)
    expressions = [expr for expr, _ in TABLE] + EXTRA + random_expressions(args.random)
    differences, t_ours, t_theirs, evaluated, sandboxed = 0, 0.0, 0.0, 0, 0
    for expr in expressions:
        t0 = time.perf_counter()
        want = theirs(expr)
        t1 = time.perf_counter()
        got = ours(expr)
        t2 = time.perf_counter()
        if allowed(expr.replace(",", "")):  # timed where a sandbox started (the filter refuses in µs)
            t_theirs += t1 - t0
            t_ours += t2 - t1
            sandboxed += 1
        evaluated += want is not None or got is not None
        if not same(got, want):
            differences += 1
            print(f"DIFFERENT {expr!r}: ours {got!r} ({type(got).__name__}), upstream {want!r} ({type(want).__name__})")
    n = len(expressions)
    print(f"{n} expressions ({evaluated} with a value), {differences} different; mean per call past the "
          f"filter ({sandboxed}): ours {1e3 * t_ours / sandboxed:.1f} ms, upstream {1e3 * t_theirs / sandboxed:.3f} ms")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
