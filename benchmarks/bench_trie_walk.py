"""Whole-vocabulary walks on Gemma 3's vocabulary: the flat walk (``rest_walk.walk``) against the
trie walk (``trie_walk.walk_vocabulary``), per terminal, with the number of tokens starting in
the state: the scannerless engine picks the trie when at least 60% of tokens start there.

    python benchmarks/bench_trie_walk.py [--repeat 5]

Prints one row per terminal: tokens starting, median ms flat, median ms trie, and the trie
build time (once per vocabulary and process). Needs the Gemma copy ``trellis.load()`` writes.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

TERMINALS = {
    "json string interior": r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"',
    "json whitespace": r"[ \t\n\r]*",
    "json number": r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?",
    "identifier": r"[a-zA-Z_]\w*",
    "block comment rest": r"(?s:.)*?\*/",
    "keyword": r"true|false|null",
    "line rest": r"[^\n]*\n",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from trellis.constrain.automata.regex import regex_to_byte_dfa
    from trellis.constrain.vocab.rest_walk import RestSet, walk
    from trellis.constrain.vocab.trie_walk import TokenTrie, walk_vocabulary
    from trellis.constrain.vocab.walks import TokenMatrix
    from trellis.models import load

    tm = TokenMatrix.of(load().vocab)
    t = time.perf_counter()
    trie = TokenTrie.of(tm)
    print(f"trie build {1e3 * (time.perf_counter() - t):.0f} ms: {trie.nodes:,} nodes for "
          f"{int(tm.lengths[tm.order].sum()):,} token bytes")
    rs = RestSet.vocabulary(tm)
    print(f"{'terminal':22s} {'starting':>9s} {'flat ms':>8s} {'trie ms':>8s}")
    for name, p in TERMINALS.items():
        d = regex_to_byte_dfa(p)
        starting = int(np.diff(rs.lo)[d.trans[0] >= 0].sum())
        res = {}
        for label, fn in (("flat", walk), ("trie", walk_vocabulary)):
            ts = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                fn(d.trans, d.final, 0, rs, tm, None)
                ts.append(time.perf_counter() - t)
            res[label] = 1e3 * statistics.median(ts)
        print(f"{name:22s} {starting / len(rs):8.0%} {res['flat']:8.1f} {res['trie']:8.1f}")


if __name__ == "__main__":
    main()
