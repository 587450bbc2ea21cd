"""The calculator tool of chat generation: upstream's use_calculator (nanochat/engine.py), run in the sandbox.

The rules are upstream's: commas are stripped; an expression of only `0-9*+-/.() ` is evaluated
unless it holds `**`; anything else may use only letters, digits, quotes, parentheses, `._` and
spaces, must avoid a list of names (FORBIDDEN, matched case-blind) and must call `.count(`. The
evaluation is upstream's too (eval with empty builtins, 3 s), but in a sandboxed interpreter
(bench/nanochat/sandbox.py) instead of the evaluating process: the filter above is all that stands
between a model's text and eval, so it is not trusted alone. Any error gives None, as upstream.

The value comes back exactly: ints and floats in hex, other literals as their repr; a value that
is no literal (a bound method, say) comes back as an object whose str() is the one the sandbox saw,
which is all the engine uses (it inserts str(result) after output_start).
"""

import ast
import string

from bench.nanochat.sandbox import execute_code

ARITHMETIC_CHARS = frozenset("0123456789*+-/.() ")
STRING_OP_CHARS = frozenset(string.ascii_letters + string.digits + "'\"()._ ")
FORBIDDEN = ("__", "import", "exec", "eval", "compile", "open", "file", "input", "raw_input", "globals",
             "locals", "vars", "dir", "getattr", "setattr", "delattr", "hasattr")
TIMEOUT_S = 3.0  # upstream's eval_with_timeout

# Runs in the sandbox: the expression goes in as a literal; out come its kind, its exact text (hex
# or repr, one line) and, for a literal, the str() the engine would insert (the rest of the output).
_PROGRAM = """
import warnings
warnings.simplefilter("ignore", SyntaxWarning)
value = eval({expr!r}, {{"__builtins__": {{}}}}, {{}})
if type(value) is int:
    print("int", hex(value), sep="\\n", end="")
elif type(value) is float:
    print("float", value.hex(), sep="\\n", end="")
else:
    print("literal", "..." if value is ... else repr(value), str(value), sep="\\n", end="")
"""


class CalculatorText:
    """A value that is no Python literal, carried as the text str() gave for it in the sandbox."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


def use_calculator(expr: str) -> object | None:
    """The value of `expr` under upstream's rules, or None (refused, failed or timed out)."""
    expr = expr.replace(",", "")
    if not allowed(expr):
        return None
    result = execute_code(_PROGRAM.format(expr=expr), timeout_s=TIMEOUT_S)
    return _decode(result.stdout) if result.success else None


def allowed(expr: str) -> bool:
    """Whether upstream's filter lets `expr` (commas already stripped) through to the evaluation."""
    if all(c in ARITHMETIC_CHARS for c in expr):
        return "**" not in expr  # no power operator: 9**9**9 would never finish
    if not all(c in STRING_OP_CHARS for c in expr):
        return False
    lowered = expr.lower()
    return not any(name in lowered for name in FORBIDDEN) and ".count(" in expr


def _decode(output: str) -> object | None:
    """The value as the sandbox printed it; a repr that is no literal comes back as its str()."""
    kind, _, rest = output.partition("\n")
    text, _, shown = rest.partition("\n")
    try:
        if kind == "int":
            return int(text, 16)
        if kind == "float":
            return float.fromhex(text)
        if kind != "literal":
            return None
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return CalculatorText(shown) if kind == "literal" else None
    return value if repr(value) == text or value is ... else CalculatorText(shown)
