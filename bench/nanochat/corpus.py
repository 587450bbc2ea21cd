"""An offline text corpus installed with the project itself, so the data pipeline runs without a network.

Two sources, both installed with the project (no download):
- prose: `pydoc_data.topics`, the Python language reference as plain text (~465k characters, part of
  every CPython), cut into paragraphs; a prose document is a run of consecutive paragraphs;
- code: the `.py` sources of the standard library and of the project's own dependencies (numpy,
  pandas, matplotlib, torch; tests left out); a code document is a window of whole lines of one module.
The prose alone allows only ~10k BPE merges; with the code, the default `data generate` followed by
`tokenizer train` reaches the full 65,536-token vocab offline. Documents are drawn with a seeded RNG,
a few KB each like FineWeb-Edu's; the same seed gives the same documents on the same installation
(generate once on a shared file system and every runtime reads the same shards).

`eval_texts()` gives a few labelled texts for `tokenizer eval` (as upstream's scripts/tok_eval.py), all offline.
"""

import codecs
import contextlib
import functools
import importlib.util
import inspect
import io
import itertools
import os
import random
import re
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path

MIN_PARAGRAPH_CHARS = 40  # drops headings and one-word lines: they would make documents choppy
MIN_DOCUMENT_CHARS = 200


@functools.lru_cache(maxsize=1)
def paragraphs() -> tuple[str, ...]:
    """Every paragraph of the language reference shipped with Python, in a fixed order."""
    from pydoc_data import topics  # imported here: ~0.5 MB of text, only needed when generating

    paras = (p.strip() for name in sorted(topics.topics) for p in re.split(r"\n\s*\n", topics.topics[name]))
    return tuple(p for p in paras if len(p) >= MIN_PARAGRAPH_CHARS)


class CorpusText:
    """Sentences and words from the paragraphs shorter than `max_chars`, drawn with one seeded generator:
    the text of the generated chat data (chatgen.py) and CORE bundle (evalgen.py)."""

    def __init__(self, seed: int, max_chars: int = 600):
        self.rng = random.Random(seed)
        self.paragraphs = [p for p in paragraphs() if len(p) < max_chars]

    def sentence(self, max_chars: int = 200) -> str:
        return self.rng.choice(self.paragraphs)[:max_chars].strip() or "What is Python?"

    def words(self, lo: int, hi: int) -> str:
        words = self.rng.choice(self.paragraphs).split()
        n = self.rng.randint(lo, hi)
        start = self.rng.randrange(max(1, len(words) - n))
        return " ".join(words[start:start + n])


SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "testing", "idle_test", "__pycache__"}
# Pure-Python sources of the project's own dependencies: with the standard library, enough distinct
# text (~70M characters) for the 65,271 merges of the default vocab, which the stdlib alone barely gives.
CODE_PACKAGES = ("numpy", "pandas", "matplotlib", "torch")


def _py_files(top: str) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)  # pruned, not filtered: site-packages is huge
        found += [Path(root, f) for f in files if f.endswith(".py")]
    return found


@functools.lru_cache(maxsize=1)
def code_files() -> tuple[Path, ...]:
    """.py files of the standard library and of CODE_PACKAGES, tests left out, sorted (found without importing)."""
    found = _py_files(sysconfig.get_paths()["stdlib"])
    for name in CODE_PACKAGES:
        spec = importlib.util.find_spec(name)
        for top in (spec.submodule_search_locations or []) if spec else []:
            found += _py_files(top)
    return tuple(sorted(set(found)))


@functools.lru_cache(maxsize=4096)
def _lines(path: Path) -> tuple[str, ...]:
    return tuple(path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True))


def prose_document(rng: random.Random) -> str:
    """A run of 4 to 24 consecutive reference paragraphs (~1-5 KB); a run reads like one article."""
    paras = paragraphs()
    n, start = rng.randint(4, 24), rng.randrange(len(paras))
    return "\n\n".join(paras[(start + i) % len(paras)] for i in range(n))


def code_document(rng: random.Random) -> str:
    """A window of whole lines of one standard-library module, 500 to 8,000 characters when the file allows."""
    lines = _lines(rng.choice(code_files()))
    target = rng.randint(500, 8000)
    i = rng.randrange(len(lines)) if lines else 0
    out, size = [], 0
    while i < len(lines) and size < target:
        out.append(lines[i])
        size += len(lines[i])
        i += 1
    return "".join(out)


def documents(count: int, seed: int = 0) -> list[str]:
    """`count` documents (prose or, with probability 1/2, code), reproducible by seed."""
    return list(itertools.islice(iter_documents(seed), count))


def iter_documents(seed: int = 0) -> Iterator[str]:
    """documents(), one at a time and without end: a shard of any size is written without holding it all."""
    rng = random.Random(seed)
    code_fraction = 0.5 if code_files() else 0.0
    while True:
        doc = code_document(rng) if rng.random() < code_fraction else prose_document(rng)
        if len(doc.strip()) >= MIN_DOCUMENT_CHARS:  # e.g. a code window that hit the end of its file
            yield doc


MATH_TEXT = r"""
\begin{equation}
  \mathcal{L}(\theta) = -\frac{1}{N}\sum_{i=1}^{N} \log p_\theta(x_i \mid x_{<i}),
  \qquad \mathrm{bpb} = \frac{\sum_i \ell_i}{\ln 2 \cdot \sum_i b_i}
\end{equation}
For a vocabulary of $V = 2^{16} = 65536$ tokens the loss at initialisation is $\ln V \approx 11.09$ nats.
If $5x + 3 = 13$ then $x = 2$; and $\int_0^1 x^2\,dx = 1/3$, $e^{i\pi} + 1 = 0$.
""".strip()


def eval_texts() -> dict[str, str]:
    """Labelled texts for compression evaluation: prose, a poem, code, maths and a long reference section."""
    with contextlib.redirect_stdout(io.StringIO()):  # `import this` prints the Zen; we want its text only
        import this

    from bench.nanochat import dataset  # any module of ours: real, current Python source

    paras = paragraphs()
    return {
        "zen": codecs.decode(this.s, "rot13"),
        "reference": "\n\n".join(paras[:200]),
        "code": textwrap.dedent(inspect.getsource(dataset)),
        "math": MATH_TEXT,
    }
