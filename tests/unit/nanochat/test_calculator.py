"""The calculator tool (bench/nanochat/calculator.py): upstream's rules and values, evaluated in the sandbox.

    python -m pytest tests/unit/nanochat/test_calculator.py -q

TABLE's expected values are what upstream 5c93a56's own use_calculator returns for each expression;
benchmarks/compare_calculator.py checks them (and random expressions) against an upstream checkout.
"""

import math
from concurrent.futures import ThreadPoolExecutor

from bench.nanochat.calculator import CalculatorText, allowed, use_calculator

TABLE = [
    ('2+3', 5),
    ('1,234 * 5', 6170),
    ('10/4', 2.5),
    ('7//2', 3),
    ('-3 - -4', 1),
    ('(1+2)*3', 9),
    ('2**10', None),
    ('1/0', None),
    ('', None),
    (' ', None),
    ('()', ()),
    ('...', Ellipsis),
    ('1.5*2', 3.0),
    ('.5+.25', 0.75),
    ('1.', 1.0),
    ('2(3)', None),
    ('0123', None),
    ('10/3', 3.3333333333333335),
    ('1e5', None),
    ('99999999999*99999999999', 9999999999800000000001),
    ('0.1+0.2', 0.30000000000000004),
    ('00', 0),
    ('-0.0', -0.0),
    ('()*3', ()),
    ('1..2', None),
    ('12.5 / 0.5', 25.0),
    ('1//0', None),
    ('(((', None),
    ('3 - 5 * 2', -7),
    ("'strawberry'.count('r')", 3),
    ('"hello world".count("o")', 2),
    ("'a,b,c'.count(',')", 4),
    ("'Mississippi'.lower().count('s')", 4),
    ("'abc'.count('a') + 1", None),
    ("'abc'.upper()", None),
    ("'x'.count('x') and 'yes'", 'yes'),
    ("('ab'.count('a'), 'b')", None),
    ("'abc'.count", None),
    ("'abc'.count('a'", None),
    ("'a'.count('a').real", 1),
    ("'x'.count('x') or len('x')", 1),
    ("len('x') or 'x'.count('x')", None),
    ("__import__('os').count('a')", None),
    ("'a'.count('a') is None", False),
    ("'IMPORT'.count('I')", None),
    ("'direction'.count('i')", None),
    ("'profile'.count('f')", None),
    ("b'abc'.count(b'a')", 1),
    ("'abcd'.count('a' 'b')", 1),
    ("True.count('a')", None),
    ("'x'.count('x') * 2", None),
    ("'hello'.count('l') is not 2", False),
    ("'banana'.count('an')", 2),
    ("not 'a'.count('b')", True),
    ("'aaa'.count('a') if 'a' else None", 3),
    ("open('x').count('a')", None),
    ("'a'.count('a') and None", None),
    ("'x'.count('x') and 'it''s'", 'its'),
    ("'ab'.count('a') and ('a' 'b')", 'ab'),
    ("'a'.count('a') and 1.5", 1.5),
    ("'a b c'.count(' ')", 2),
]
EVALUATED = [(expr, want) for expr, want in TABLE if allowed(expr.replace(",", ""))]
REFUSED = [expr for expr, _ in TABLE if not allowed(expr.replace(",", ""))]


def test_the_filter_refuses_what_upstream_never_evaluates():
    assert "2**10" in REFUSED and "'abc'.upper()" in REFUSED and "__import__('os').count('a')" in REFUSED
    assert "'direction'.count('i')" in REFUSED  # "dir" is a forbidden name, even inside a word
    for expr in REFUSED:
        assert use_calculator(expr) is None


def test_each_evaluated_expression_gives_upstreams_value_type_and_text():
    with ThreadPoolExecutor(4) as pool:  # each call is a sandbox start-up, mostly waiting
        values = list(pool.map(use_calculator, [expr for expr, _ in EVALUATED]))
    for (expr, want), got in zip(EVALUATED, values):
        assert type(got) is type(want) and got == want and str(got) == str(want), expr
    assert math.copysign(1, use_calculator("-0.0")) == -1


def test_a_value_that_is_no_literal_comes_back_as_its_text():
    got = use_calculator("'a'.count('a') and 'a'.count")
    assert isinstance(got, CalculatorText) and str(got).startswith("<built-in method count of str object at 0x")


def test_a_power_is_refused_and_a_huge_product_is_exact():
    assert use_calculator("9**9**9") is None
    assert use_calculator("123456789" + "*123456789" * 40) == 123456789 ** 41
