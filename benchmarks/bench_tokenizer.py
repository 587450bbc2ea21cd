"""Tokenizer training speed and compression of the two trainers `tokenizer train` can use: HF tokenizers, rustbpe.

    python benchmarks/bench_tokenizer.py                       # generated-shard text, 20M chars, vocab 8192
    python benchmarks/bench_tokenizer.py --text shards --max_chars 200000000 --vocab_size 65536

Both trainers get the same documents (cropped at doc_cap, stopped after max_chars) and the same vocab
size; bytes/token is measured on held-out documents with the resulting tiktoken Encoding. Texts:
`corpus` = the text of `data generate` (Python's reference and standard-library sources, offline),
`stdlib` = whole standard-library modules, `shards` = the train split of $NANOCHAT_BASE_DIR (FineWeb-Edu after `data download`).
"""

import argparse
import os
import sys
import tempfile
import time


def documents(kind: str, count_hint: int) -> list[str]:
    from bench.nanochat import corpus

    if kind == "stdlib":
        return [p.read_text(encoding="utf-8", errors="replace") for p in corpus.code_files()]
    if kind == "corpus":
        return corpus.documents(count_hint, seed=0)
    from bench.nanochat.dataset import parquets_iter_batched

    docs, chars = [], 0
    for batch in parquets_iter_batched("train"):
        docs += batch
        chars += sum(map(len, batch))
        if chars > count_hint * 3000:
            break
    return docs


def run(trainer: str, train_docs: list[str], held_out: str, args) -> tuple[float, float, int]:
    """(seconds, chars used, bytes/token on held-out text) for one trainer via the real train_tokenizer."""
    from bench.nanochat import tokenizer

    with tempfile.TemporaryDirectory() as base:
        os.environ["NANOCHAT_BASE_DIR"] = base
        t0 = time.perf_counter()
        tokenizer.train_tokenizer(args.vocab_size, args.max_chars, args.doc_cap, trainer=trainer, texts=train_docs)
        seconds = time.perf_counter() - t0
        tok = tokenizer.get_tokenizer()
    chars = sum(len(d) for d in tokenizer.capped_texts(train_docs, args.max_chars, args.doc_cap))
    return seconds, chars, len(held_out.encode()) / len(tok.encode(held_out))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", choices=["corpus", "stdlib", "shards"], default="corpus", help="training text (default: corpus)")
    p.add_argument("--max_chars", type=int, default=20_000_000, help="training characters (default: 20,000,000)")
    p.add_argument("--doc_cap", type=int, default=10_000, help="characters kept per document (default: 10,000)")
    p.add_argument("--vocab_size", type=int, default=8192, help="vocab size incl. 9 specials (default: 8192)")
    args = p.parse_args(argv)

    import torch  # noqa: F401  (imported once here so neither timing pays for it)

    from bench.errors import DataError

    try:
        docs = documents(args.text, args.max_chars // 2000)
    except DataError as e:  # --text shards with none staged: its message names the command that stages them
        print(f"error: --text {args.text}: {e}", file=sys.stderr)
        return 1
    docs = [d for d in docs if d.strip()]
    held_out_docs, train_docs = docs[::20], [d for i, d in enumerate(docs) if i % 20]
    held_out = "\n".join(held_out_docs)[:5_000_000]
    print(f"text: {args.text}, {len(train_docs):,} training documents, vocab {args.vocab_size:,}, "
          f"max_chars {args.max_chars:,}, doc_cap {args.doc_cap:,}, {os.cpu_count()} CPU cores, "
          f"held-out {len(held_out.encode()):,} bytes")
    rows = []
    for trainer in ("hf", "rustbpe"):
        seconds, chars, bpt = run(trainer, train_docs, held_out, args)
        rows.append((trainer, seconds, chars, bpt))
    print(f"\n{'trainer':10s} {'seconds':>9s} {'chars':>14s} {'chars/s':>14s} {'bytes/token':>12s}")
    for trainer, seconds, chars, bpt in rows:
        print(f"{trainer:10s} {seconds:9.2f} {chars:14,d} {chars / seconds:14,.0f} {bpt:12.4f}")
    (_, s_hf, _, b_hf), (_, s_rs, _, b_rs) = rows
    print(f"\nhf / rustbpe: speed x{s_rs / s_hf:.2f}, bytes/token {100 * (b_hf - b_rs) / b_rs:+.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
