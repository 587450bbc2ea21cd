"""`nanochat-bench data download|generate|info|bin`: the shards under $NANOCHAT_BASE_DIR/base_data, and
their pre-tokenized .bin form (bench/nanochat/tokbin.py)."""

from bench import paths
from bench.commands import nonempty
from bench.errors import ConfigError

# Defaults of the shards' flags, applied by the commands: the parser leaves them None, so that one given beside
# --chat or --eval-bundle (which write no shards) can be told from one left out
SHARDS, DOCS_PER_SHARD, ROW_GROUP_SIZE = 4, 8192, 256


def register(subparsers) -> None:
    p = subparsers.add_parser("data", help="get the data: download FineWeb-Edu shards (or the chat data, the eval "
                              "bundle) or generate offline ones")
    sub = p.add_subparsers(dest="data_command", metavar="<subcommand>", required=True)

    d = sub.add_parser("download", help="download FineWeb-Edu shards (parallel, resumable, verified)",
                       flags=_download_flags)
    d.set_defaults(func=cmd_download)

    g = sub.add_parser("generate", help="write shards offline from text that ships with Python (no network)")
    g.add_argument("--chat", action="store_true", help="write offline stand-ins of the staged chat data instead")
    g.add_argument("--eval-bundle", action="store_true",
                   help="write a small CORE eval bundle in the real format instead (for tests and CI)")
    g.add_argument("--shards", type=int, default=None,
                   help=f"number of shard files; the last K are validation (default: {SHARDS})")
    g.add_argument("--docs-per-shard", type=int, default=None,
                   help=f"documents per shard, ~3 KB each (default: {DOCS_PER_SHARD})")
    g.add_argument("--row-group-size", type=int, default=None,
                   help=f"documents per row group, the unit dealt to ranks (default: {ROW_GROUP_SIZE}, so the default "
                        "validation shard serves 32 ranks; upstream's shards use 1024)")
    g.add_argument("--overwrite", action="store_true",
                   help="replace shard files already there (downloaded, or generated with other settings); "
                        "default: refuse, naming them")
    g.set_defaults(func=cmd_generate)

    i = sub.add_parser("info", help="list the shards, the train/val split and how many ranks each split allows")
    i.set_defaults(func=cmd_info)

    b = sub.add_parser("bin",
                       help="write train.bin/val.bin (flat uint16 tokens, NanoGPT/NNTile format) from the shards",
                       description="Tokenize the train and val splits into train.bin and val.bin, with token_bytes.npy "
                                   "(for bits per byte) and meta.json (which tokenizer made them) beside them.")
    b.add_argument("--tokenizer", default="nanochat", choices=("nanochat", "gpt2"),
                   help="nanochat: ours ($NANOCHAT_BASE_DIR/tokenizer); gpt2: GPT-2's BPE via tiktoken, only if its "
                        "files are cached offline (default: nanochat)")
    b.add_argument("--out", default=None, type=nonempty("--out", "a directory"),
                   help="directory (default: $NANOCHAT_BASE_DIR/base_data_bin)")
    b.add_argument("--max-tokens", type=int, default=None, help="at most this many tokens per split (default: all)")
    b.set_defaults(func=cmd_bin)


def _download_flags(d) -> None:
    """`data download`'s flags, whose defaults are the downloader's: added when the command is parsed (or its help
    shown), so that no other command imports the downloader (requests, pyarrow: 0.3 s of every command's start)."""
    from bench.nanochat import download, evalstage

    d.add_argument("--chat", action="store_true", help="stage the chat data of mid-training, SFT and chat "
                   "evaluation instead (no -n; --url is then a Hugging Face mirror, default $HF_ENDPOINT)")
    d.add_argument("--eval-bundle", action="store_true",
                   help="stage the CORE eval bundle of base_eval instead, into $NANOCHAT_BASE_DIR/eval_bundle "
                        f"(--url is then the zip's URL, default ${evalstage.ENV_URL}, else upstream's)")
    d.add_argument("--sha256", default=None, help="with --eval-bundle: the zip's expected SHA-256 (default: none "
                   "published upstream; the digest seen is recorded in eval_bundle/origin.json)")
    d.add_argument("-n", "--num-shards", type=int, default=None,
                   help=f"shards 0..N-1 to fetch (-1 = all {paths.MAX_SHARD + 1}); d20 needs ~240; required "
                        "unless --chat or --eval-bundle")
    d.add_argument("-w", "--workers", type=int, default=None, help=f"parallel downloads (default: {download.WORKERS})")
    d.add_argument("--url", default=None, type=nonempty("--url", "a mirror's base URL"),
                   help=f"base URL of a mirror (default: ${download.ENV_DATA_URL}, else {download.DEFAULT_BASE_URL})")
    d.add_argument("--retries", type=int, default=5, help="attempts per shard (default: 5)")
    d.add_argument("--timeout", type=float, default=download.READ_TIMEOUT_S,
                   help=f"seconds a server may stay silent, or send under {download.MIN_RATE_B_S:,} bytes/s over "
                        f"that span, before an attempt counts as failed (default: {download.READ_TIMEOUT_S:g}; "
                        f"connecting gets at most {download.CONNECT_TIMEOUT_S:g})")
    d.add_argument("--overwrite", action="store_true",
                   help="replace shards that `data generate` made by the downloads (default: refuse to mix them)")


def refuse_shard_flags(args, command: str, flags: dict[str, str], verb: str) -> None:
    """--chat and --eval-bundle stage or write their files whole: a shards' flag beside them went silently unread."""
    given = [flag for flag, dest in flags.items() if getattr(args, dest) is not None]
    if given and (args.chat or args.eval_bundle):
        raise ConfigError(f"data {command}: {', '.join(given)} {'is' if len(given) == 1 else 'are'} for the "
                          f"pre-training shards; {'--chat' if args.chat else '--eval-bundle'} {verb} its files whole: "
                          f"leave out {', '.join(given)}, or {command} the shards in a command of their own")


def cmd_download(args) -> int:
    from bench.nanochat import chatstage, dataset, download, evalstage

    if args.chat and args.eval_bundle:
        raise ConfigError("data download: --chat and --eval-bundle stage different things; give one at a time")
    if args.sha256 and not args.eval_bundle:
        raise ConfigError("data download: --sha256 checks the eval bundle's zip; it needs --eval-bundle")
    if args.num_shards is not None and (args.chat or args.eval_bundle):  # else staged whole, -n silently unread
        raise ConfigError(f"data download: -n counts FineWeb-Edu shards; {'--chat' if args.chat else '--eval-bundle'} "
                          f"stages its files whole: leave out -n, or download the shards in a command of their own")
    refuse_shard_flags(args, "download", {"-w": "workers"}, "stages")
    if args.chat:
        return chatstage.cli_download(args)
    if args.eval_bundle:
        return evalstage.cli_download(args)
    if args.num_shards is None:
        raise ConfigError("data download: -n/--num-shards N is required (or --chat for the chat data, "
                          "--eval-bundle for CORE's eval bundle)")
    workers = download.WORKERS if args.workers is None else args.workers
    paths = download.download_shards(args.num_shards, workers=workers, url=args.url, retries=args.retries,
                                     timeout_s=args.timeout, overwrite=args.overwrite)
    print(f"{len(paths)} shard(s) in {dataset.data_dir()}")
    return 0


def _refuse_a_set_training_cannot_split(num_shards: int) -> None:
    """Before writing: the directory must end up with the K validation files plus one for training, or the
    tokenizer and training refuse the set that was just generated."""
    from bench.nanochat import dataset

    k = dataset.resolve_val_files_k()
    if not 1 <= num_shards <= k:  # more are enough; fewer than 1 is generate_shards' own error
        return
    names = {p.name for p in dataset.list_parquet_files()} | {dataset.shard_name(i) for i in range(num_shards)}
    if len(names) < k + 1:
        raise ConfigError(f"--shards={num_shards}: the split needs NANOCHAT_VAL_FILES_K={k} validation file(s) plus "
                          f"at least 1 training file; give --shards >= {k + 1}")


def cmd_generate(args) -> int:
    from bench.nanochat import chatstage, dataset, evalstage

    if args.chat and args.eval_bundle:
        raise ConfigError("data generate: --chat and --eval-bundle write different things; give one at a time")
    refuse_shard_flags(args, "generate", {"--shards": "shards", "--docs-per-shard": "docs_per_shard",
                                          "--row-group-size": "row_group_size"}, "writes")
    if args.chat:
        return chatstage.cli_generate(args)
    if args.eval_bundle:
        return evalstage.cli_generate(args)
    shards = SHARDS if args.shards is None else args.shards
    docs = DOCS_PER_SHARD if args.docs_per_shard is None else args.docs_per_shard
    rows = ROW_GROUP_SIZE if args.row_group_size is None else args.row_group_size
    _refuse_a_set_training_cannot_split(shards)
    paths = dataset.generate_shards(shards, docs, rows, overwrite=args.overwrite)
    print(f"{len(paths)} generated shard(s) of {docs} documents in {dataset.data_dir()}")
    others = len(dataset.list_parquet_files()) - len(paths)
    if others > 0:
        print(f"note: {others} other shard file(s) are in that directory too; the last K files are validation")
    return 0


def cmd_info(args) -> int:
    from bench.nanochat import data_origin, dataset

    k = dataset.resolve_val_files_k()
    print(f"shards in {dataset.data_dir()}: {len(dataset.list_parquet_files())}  (validation files K = {k})")
    for split in dataset.SPLITS:
        files = dataset.split_files(split, k)
        rgs = sum(dataset.row_group_counts(files))
        span = files[0].name if len(files) == 1 else f"{files[0].name} .. {files[-1].name}"
        print(f"  {split:5s}: {len(files)} file(s), {rgs} row group(s) -> at most {rgs} ranks ({span}); "
              f"origin: {data_origin.describe(files)}")
    return 0


def cmd_bin(args) -> int:
    from bench.nanochat import tokbin

    out = tokbin.write_bins(args.out, args.tokenizer, args.max_tokens)
    meta = tokbin.read_meta(out)
    sizes = ", ".join(f"{split} {info['tokens']:,}" for split, info in meta["splits"].items())
    print(f"wrote {out}/train.bin and val.bin ({sizes} tokens; tokenizer {meta['tokenizer']}, "
          f"vocab {meta['vocab_size']:,})")
    return 0
