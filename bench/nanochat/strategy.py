"""A memory strategy's name parsed (`--strategy=fsdp+ac+offload`); bench/nanochat/parallel.py applies it and says what
each part does. Apart from it so that validating a config (the planner does, on a login node) needs no torch.
"""

from dataclasses import dataclass

from bench.errors import ConfigError

BASES = ("zero2", "fsdp")
MODIFIERS = ("ac", "offload")


@dataclass(frozen=True)
class Strategy:
    base: str = "zero2"
    ac: bool = False
    offload: bool = False

    @classmethod
    def parse(cls, text: str, flag: str = "--strategy") -> "Strategy":
        """`zero2`, `fsdp`, `fsdp+ac`, `fsdp+ac+offload`, ...; ConfigError naming `flag` and what is valid."""
        base, *mods = [t.strip() for t in str(text).split("+")]
        valid = f"valid: {' | '.join(BASES)}, each optionally +ac; fsdp also +offload (e.g. fsdp+ac+offload)"
        if base not in BASES or any(m not in MODIFIERS for m in mods) or len(set(mods)) != len(mods):
            raise ConfigError(f"{flag}={text!r}: {valid}")
        if "offload" in mods and base != "fsdp":
            raise ConfigError(f"{flag}={text!r}: offload needs fsdp's sharded parameters; {valid}")
        return cls(base, "ac" in mods, "offload" in mods)

    @property
    def fsdp(self) -> bool:
        return self.base == "fsdp"

    def split_problem(self, vocab_size: int, world_size: int) -> str | None:
        """Why this strategy cannot train a `vocab_size` vocabulary on `world_size` ranks; None when it can.
        zero2's sharded AdamW (bench/nanochat/adamw.py) splits the rows of the embedding and lm_head evenly over
        the ranks; FSDP2 pads an uneven split."""
        if self.fsdp or world_size == 1 or vocab_size % world_size == 0:
            return None
        return (f"{self.name}'s sharded AdamW splits the embedding and lm_head rows ({vocab_size:,}, the vocabulary) "
                f"evenly over the ranks, and {vocab_size:,} is not a multiple of {world_size}")

    @property
    def name(self) -> str:
        return "+".join([self.base] + [m for m in MODIFIERS if getattr(self, m)])
