"""Which model to probe next: doubling, then bisection, over model shapes sorted by parameter count.

Candidates are nanochat's family (width = aspect_ratio x depth, heads of 128; even depths give head dim
128 exactly) or the depths a user lists. The search starts where the memory model predicts the border
and steps away from it in strides that double (1, 2, 4, ... candidates) until it holds a shape that
trained and one that did not; without a prediction it starts at the smallest shape and doubles the
parameter count. Then it bisects between the two (geometric middle of the parameter counts) until they
are neighbours.
"""

import math
from dataclasses import dataclass

from bench.errors import ConfigError


@dataclass(frozen=True, order=True)
class Shape:
    num_params: int
    depth: int
    aspect_ratio: int = 64

    @property
    def name(self) -> str:
        return f"d{self.depth}" + ("" if self.aspect_ratio == 64 else f"-a{self.aspect_ratio}")


def num_params(depth: int, aspect_ratio: int = 64, vocab_size: int = 65536) -> int:
    """The GPT's parameter count from its sizing rule (gpt.GPTConfig.from_depth), without building it."""
    from bench.nanochat.gpt import GPTConfig

    c = GPTConfig.from_depth(depth, vocab_size, 2048, aspect_ratio)
    kv = c.n_kv_head * (c.n_embd // c.n_head)
    block = c.n_embd * (2 * c.n_embd + 2 * kv) + 8 * c.n_embd * c.n_embd  # attention + MLP
    return c.n_layer * block + 2 * vocab_size * c.n_embd


def params_text(n: float) -> str:
    """A parameter count as the sweep's log and the report's capacity bars write it: 5.17B, 82.9M."""
    return f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.1f}M"


def shapes(depths: list[int], aspect_ratio: int = 64, vocab_size: int = 65536) -> list[Shape]:
    if any(d < 1 for d in depths) or aspect_ratio < 1:
        raise ConfigError(f"depths {depths} and aspect ratio {aspect_ratio} must be positive integers")
    return sorted({Shape(num_params(d, aspect_ratio, vocab_size), d, aspect_ratio) for d in depths})


def family(max_depth: int, aspect_ratio: int = 64, vocab_size: int = 65536) -> list[Shape]:
    """Even depths 2..max_depth: nanochat's shapes with head dim 128 at aspect ratio 64; at another ratio
    those whose width splits into heads the GPT can build (a probe of another would only fail, ending the search)."""
    from bench.nanochat.config import shape_problem

    depths = [d for d in range(2, max_depth + 1, 2) if shape_problem(d, aspect_ratio) is None]
    return shapes(depths, aspect_ratio, vocab_size)


class CapacitySearch:
    """Feed it outcomes (`record`), ask it for the next shape (`next`); None when the border is found.

    With a predicted start the steps away from it double in candidates (1, 2, 4, ...: a right prediction
    costs two probes, an off-by-one three); without one the search starts at the smallest shape and
    doubles the parameter count."""

    def __init__(self, candidates: list[Shape], start: int | None = None):
        if not candidates:
            raise ConfigError("no model shapes to search")
        self.candidates = sorted(candidates)
        self.predicted = start is not None
        self.start = min(max(start or 0, 0), len(self.candidates) - 1)
        self.lo: int | None = None  # largest index that trained
        self.hi: int | None = None  # smallest index that did not fit
        self.probes = 0

    def record(self, shape: Shape, fits: bool) -> None:
        i = self.candidates.index(shape)
        self.probes += 1
        if fits:
            self.lo = i if self.lo is None else max(self.lo, i)
        else:
            self.hi = i if self.hi is None else min(self.hi, i)
        if self.lo is not None and self.hi is not None and self.lo >= self.hi:
            raise ConfigError(f"{self.candidates[self.lo].name} trained but the smaller "
                              f"{self.candidates[self.hi].name} did not fit: memory is not monotonic here")

    def next(self) -> Shape | None:
        i = self._next_index()
        return None if i is None else self.candidates[i]

    def _next_index(self) -> int | None:
        lo, hi, last, start = self.lo, self.hi, len(self.candidates) - 1, self.start
        if lo is None and hi is None:
            return start
        if hi is None:
            if lo == last:
                return None
            if self.predicted:
                return min(last, lo + max(1, lo - start))
            return self._at_least(2 * self.candidates[lo].num_params, lo + 1)
        if lo is None:
            if hi == 0:
                return None
            if self.predicted:
                return max(0, hi - max(1, start - hi))
            return self._at_most(self.candidates[hi].num_params // 2, hi - 1)
        if hi - lo <= 1:
            return None
        middle = math.sqrt(self.candidates[lo].num_params * self.candidates[hi].num_params)
        inner = range(lo + 1, hi)
        return min(inner, key=lambda j: abs(math.log(self.candidates[j].num_params / middle)))

    def _at_least(self, n: int, floor: int) -> int:
        return next((j for j in range(floor, len(self.candidates)) if self.candidates[j].num_params >= n),
                    len(self.candidates) - 1)

    def _at_most(self, n: int, ceiling: int) -> int:
        return next((j for j in range(ceiling, -1, -1) if self.candidates[j].num_params <= n), 0)

    @property
    def capacity(self) -> Shape | None:
        return None if self.lo is None else self.candidates[self.lo]

    @property
    def first_failure(self) -> Shape | None:
        return None if self.hi is None else self.candidates[self.hi]
