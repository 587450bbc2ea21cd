"""`nanochat-bench tokenizer train|eval`: the BPE tokenizer under $NANOCHAT_BASE_DIR/tokenizer."""

from bench.errors import ConfigError
from bench.nanochat import tokenizer
from bench.nanochat.config import _Parser


def register(subparsers) -> None:
    p = subparsers.add_parser("tokenizer", help="train the BPE tokenizer on the train split, or evaluate it")
    sub = p.add_subparsers(dest="tokenizer_command", metavar="<subcommand>", required=True)

    t = sub.add_parser("train", help="train byte-level BPE (GPT-4 split pattern) and save it for tiktoken")
    add_train_arguments(t)
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="bytes per token on offline texts and on the first train/val row group")
    e.set_defaults(func=cmd_eval)


def add_train_arguments(t) -> None:
    t.add_argument("--max_chars", type=int, default=2_000_000_000,
                   help="characters of training text to use at most (default: 2,000,000,000, as speedrun)")
    t.add_argument("--doc_cap", type=int, default=10_000,
                   help="characters kept of each document (default: 10,000)")
    t.add_argument("--vocab_size", type=int, default=tokenizer.DEFAULT_VOCAB_SIZE,
                   help=f"tokens incl. 9 special (default: {tokenizer.DEFAULT_VOCAB_SIZE})")
    t.add_argument("--trainer", choices=tokenizer.TRAINERS, default="auto",
                   help="rustbpe = upstream's Rust trainer (pip install rustbpe), hf = HF tokenizers; "
                        "auto (default) = rustbpe when installed, else hf")


def check_train_args(argv: list[str]) -> None:
    """`tokenizer train` flags passed on (a flow's --tokenizer-arg), their names and values checked now: a job
    would fail on them only once Slurm has started it."""
    parser = _Parser(prog="--tokenizer-arg (tokenizer train)", allow_abbrev=False, add_help=False)
    add_train_arguments(parser)
    values, unknown = parser.parse_known_args(argv)
    if unknown:
        raise ConfigError(f"--tokenizer-arg: unknown flag(s) {', '.join(unknown)} of `tokenizer train`; valid: "
                          f"{', '.join(a.dest for a in parser._actions)}")
    try:
        tokenizer.check_settings(values.vocab_size, values.max_chars, values.doc_cap)
    except ConfigError as e:
        raise ConfigError(f"--tokenizer-arg: {e}") from None


def cmd_train(args) -> int:
    # a tokenizer replaced silently left the checkpoints and `data bin` tokens made with it to be read with another
    if (have := tokenizer.saved_vocab_size()) is not None:
        print(f"tokenizer: the {have:,}-token tokenizer in {tokenizer.tokenizer_dir()} is replaced once this one is "
              "trained; checkpoints and `data bin` tokens made with it do not match the new one")
    tokenizer.train_tokenizer(vocab_size=args.vocab_size, max_chars=args.max_chars, doc_cap=args.doc_cap,
                              trainer=args.trainer)
    return 0


def cmd_eval(args) -> int:
    tok = tokenizer.get_tokenizer()
    print(f"tokenizer: vocab {tok.get_vocab_size():,} ({tokenizer.tokenizer_dir()})")
    print(f"{'text':12s} {'bytes':>12s} {'tokens':>10s} {'bytes/token':>12s}")
    for name, n_bytes, n_tokens in tokenizer.compression_rows(tok, tokenizer.eval_texts()):
        print(f"{name:12s} {n_bytes:12,d} {n_tokens:10,d} {n_bytes / n_tokens:12.2f}")
    return 0
