"""Time trellis' grammar masks on a large vocabulary, along JSON documents.

Usage: python examples/grammar_mask_timing.py [--gemma] [--grammar json.lark] [--docs 20]

Without --gemma a synthetic 262,144-token vocabulary is used (random words with/without a leading
space, digits, JSON punctuation runs, whitespace runs, split UTF-8 characters; up to 32 bytes).
Prints cold compile time, warm (disk-cached) compile time, and the per-token mask time
(median / p99) along the documents, with and without the mask cache.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

import torch

from trellis.constrain import compile
from trellis.mask import allocate_bitmask
from trellis.tokens import Vocabulary


def synthetic_vocab(size: int = 262_144, seed: int = 0) -> Vocabulary:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    punct = '{}[]",:.-_\n '
    toks: set[bytes] = {bytes([b]) for b in range(256)}
    while len(toks) < size - 2:
        r = rng.random()
        if r < 0.70:
            w = "".join(rng.choice(letters) for _ in range(rng.randint(2, 12)))
            w = (" " if rng.random() < 0.5 else "") + w
        elif r < 0.78:
            w = "".join(rng.choice("0123456789") for _ in range(rng.randint(2, 8)))
        elif r < 0.86:
            w = "".join(rng.choice(punct) for _ in range(rng.randint(2, 6)))
        elif r < 0.93:
            w = rng.choice(['"', ' "', '":', '",', '": "', '"}', '"]']) + "".join(
                rng.choice(letters) for _ in range(rng.randint(1, 8))) + rng.choice(['"', '":', '",', '', '": '])
        elif r < 0.96:
            w = rng.choice(["\n", " ", "\t"]) * rng.randint(2, 32)
        else:
            w = "".join(chr(rng.randint(0xA0, 0x2FFF)) for _ in range(rng.randint(1, 4)))
            b = w.encode()
            toks.add(b[: rng.randint(1, len(b))])
            continue
        toks.add(w.encode()[:32])
    tokens = sorted(toks)[: size - 2] + [b"", b""]
    return Vocabulary(tuple(tokens), eos=frozenset([size - 2]), special=frozenset([size - 1]))


DOC_PARTS = ['{"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry"], "alive": false}',
             '[{"id": 1, "score": -0.5e3}, {"id": 2, "score": null}]',
             '{"a": {"b": {"c": [1, 2, 3, {"d": "deep"}]}}, "e": true}']


def tokenize(vocab: Vocabulary, text: bytes) -> list[int]:
    by = {}
    for i, t in enumerate(vocab.tokens):
        if t and i not in vocab.eos and i not in vocab.special:
            by.setdefault(t, i)
    out, i = [], 0
    while i < len(text):
        for n in range(min(32, len(text) - i), 0, -1):
            if text[i:i + n] in by:
                out.append(by[text[i:i + n]])
                i += n
                break
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemma", action="store_true")
    ap.add_argument("--grammar", default="json.lark")
    ap.add_argument("--docs", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.gemma:
        from trellis.models import load

        vocab = load().vocab
    else:
        vocab = synthetic_vocab()
    print(f"vocab: {len(vocab)} tokens, max {max(map(len, vocab.tokens))} bytes")
    with tempfile.TemporaryDirectory() as d:
        os.environ["TRELLIS_CACHE_DIR"] = d
        vocab.fingerprint()
        t = time.perf_counter()
        c = compile(args.grammar, vocab)
        cold = time.perf_counter() - t
        t = time.perf_counter()
        compile(args.grammar, vocab)
        warm = time.perf_counter() - t
        print(f"compile {args.grammar}: cold {cold * 1e3:.0f} ms, warm (disk cache) {warm * 1e3:.1f} ms")
        row = allocate_bitmask(1, len(vocab))[0]
        for label in ("first pass (lazy tables + empty mask cache)", "second pass (mask cache warm)"):
            times = []
            for doc in DOC_PARTS[: args.docs]:
                ids = tokenize(vocab, doc.encode())
                s = c.start()
                for tok in ids:
                    t = time.perf_counter()
                    c.fill_mask(s, row)
                    times.append(time.perf_counter() - t)
                    s = c.advance(s, tok)
                    assert s is not None
                assert c.is_accepting(s)
            times.sort()
            p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
            print(f"{label}: {len(times)} masks, median {statistics.median(times) * 1e3:.2f} ms, "
                  f"p99 {p99 * 1e3:.2f} ms, max {times[-1] * 1e3:.1f} ms")
        c2 = c  # tables already built: time the mask computation alone
        times = []
        for doc in DOC_PARTS[: args.docs]:
            ids = tokenize(vocab, doc.encode())
            s = c2.start()
            for tok in ids:
                c2._masks.clear()
                t = time.perf_counter()
                c2.fill_mask(s, row)
                times.append(time.perf_counter() - t)
                s = c2.advance(s, tok)
        times.sort()
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        print(f"mask cache off, tables warm: median {statistics.median(times) * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
