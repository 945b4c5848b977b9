"""Cross-check trellis' grammar masks against xgrammar's on Gemma 3's vocabulary, every difference
explained by an independent oracle.

    python benchmarks/crosscheck_grammars.py [--docs 50] [--grammars NAME ...] [--seed 0]
                                             [--out results.json] [--limit-s 240]

Grammars: the shipped ones and the corpus under ../shared/data/grammars (Lark files in lark/ and
outlines/, llama.cpp's GBNF files), read by each engine as in ``bench_fresh.py`` (trellis: the
file path or shipped name on its default path; xgrammar: ``Grammar.from_ebnf`` for GBNF,
``compile_lark(lark_for_llguidance(text))`` for Lark, json.lark as ``JSON_EBNF``).

Documents: ``--docs`` seeded random walks per grammar with trellis' masks (``bench_fresh.Walker``:
short and punctuation tokens favoured, EOS taken on a coin flip once allowed), the walk's own
tokens (odd tokenisations included, not the HF tokenizer's). Along each document, at every
position, trellis' allowed set and xgrammar's are compared over all non-special tokens, and EOS
separately. A token allowed by one engine only is adjudicated by ``tests/constrain/lark_oracle.py``
(an Earley recogniser over characters written apart from the engine; for GBNF on the Lark text
of ``Gbnf.to_lark``): the bytes so far plus the token's are a viable prefix of the grammar's
language or not, so the engine that is wrong is named. At most ``--judge`` differing tokens per
position are judged (the rest are counted). A document whose token xgrammar refuses ends its
comparison there (counted). Prints a row per grammar; the last line starts with SUMMARY.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_fresh import Timeout, Walker, deadline, first_line, grammar_inputs  # noqa: E402


def oracle_for(inp: Any) -> Any:
    from tests.constrain.lark_oracle import LarkOracle
    from trellis.constrain import Gbnf, load_grammar_text

    if inp.is_lark:
        paths = [os.path.dirname(inp.path)] if inp.path else []
        return LarkOracle(inp.text, import_paths=paths)
    if inp.path:
        return LarkOracle(Gbnf.from_file(inp.path).to_lark())
    return LarkOracle(Gbnf(load_grammar_text(inp.trellis_spec)[0]).to_lark())


def check_grammar(inp: Any, args: argparse.Namespace, ctx: dict) -> dict:
    import xgrammar as xgr

    from trellis.constrain import compile
    from trellis.mask import allocate_bitmask, bitmask_to_bool

    vocab, walker = ctx["vocab"], ctx["walker"]
    row = {"grammar": inp.name}
    try:
        c = compile(inp.trellis_spec, vocab)
    except Exception as e:  # noqa: BLE001 - a refusal is a result
        row["trellis"] = f"refused: {first_line(e)}"
        return row
    try:
        comp = xgr.GrammarCompiler(ctx["info"], max_threads=1, cache_enabled=False)
        m = xgr.GrammarMatcher(inp.xgr_make(comp))
    except Exception as e:  # noqa: BLE001
        row["xgrammar"] = f"refused: {first_line(e)}"
        return row
    oracle = None
    n = len(vocab)
    keep = np.ones(n, dtype=bool)
    keep[list(vocab.special | vocab.eos)] = False
    eos = min(vocab.eos)
    xrow = xgr.allocate_token_bitmask(1, ctx["info"].vocab_size)
    trow = allocate_bitmask(1, n)[0]
    rng = random.Random(f"{args.seed}:{inp.name}")
    stats = {"docs": 0, "positions": 0, "equal": 0, "differ": 0, "eos_differ": 0, "xgr_refused_token": 0,
             "judged": 0, "trellis_wrong": 0, "xgrammar_wrong": 0, "unjudged": 0, "examples": []}
    t0 = time.perf_counter()
    try:
        with deadline(args.limit_s):
            walks = 0
            while stats["docs"] < args.docs and walks < 10 * args.docs:
                walks += 1
                ids = walker.walk(c, rng, trow)
                if ids is None:
                    continue
                stats["docs"] += 1
                m.reset()
                s = c.start()
                done = b""
                for i in range(len(ids) + 1):
                    c.fill_mask(s, trow)
                    m.fill_next_token_bitmask(xrow, 0)
                    ta = bitmask_to_bool(trow.view(1, -1), n)[0].numpy()
                    xa = bitmask_to_bool(xrow, n)[0].numpy()
                    stats["positions"] += 1
                    if bool(ta[eos]) != bool(xa[eos]):
                        stats["eos_differ"] += 1
                        oracle = oracle or oracle_for(inp)
                        truth = oracle.accepts(done.decode("utf-8", "replace"))
                        stats["trellis_wrong" if bool(ta[eos]) != truth else "xgrammar_wrong"] += 1
                        if len(stats["examples"]) < 5:
                            stats["examples"].append({"prefix": done[-60:].decode("utf-8", "replace"), "eos": {
                                "trellis": bool(ta[eos]), "xgrammar": bool(xa[eos]), "oracle": truth}})
                    diff = np.flatnonzero((ta != xa) & keep)
                    if not len(diff):
                        stats["equal"] += 1
                    else:
                        stats["differ"] += 1
                        oracle = oracle or oracle_for(inp)
                        for t in diff[:args.judge].tolist():
                            tb = vocab.tokens[t]
                            try:
                                truth = oracle.viable_bytes(done + tb)
                            except Exception:  # noqa: BLE001 - the oracle cannot read these bytes
                                stats["unjudged"] += 1
                                continue
                            stats["judged"] += 1
                            wrong = "trellis_wrong" if bool(ta[t]) != truth else "xgrammar_wrong"
                            stats[wrong] += 1
                            if len(stats["examples"]) < 5:
                                stats["examples"].append({"prefix": done[-60:].decode("utf-8", "replace"),
                                                          "token": tb.decode("utf-8", "replace"),
                                                          "trellis": bool(ta[t]), "xgrammar": bool(xa[t]),
                                                          "oracle": truth})
                        stats["unjudged"] += max(0, len(diff) - args.judge)
                    if i == len(ids):
                        break
                    t = ids[i]
                    if not m.accept_token(t):
                        stats["xgr_refused_token"] += 1
                        break
                    s = c.advance(s, t)
                    done += vocab.tokens[t]
    except Timeout:
        stats["timeout"] = True
    stats["seconds"] = round(time.perf_counter() - t0, 1)
    row.update(stats)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=50)
    ap.add_argument("--grammars", nargs="*", default=None, help="only grammars whose name contains one of these")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--judge", type=int, default=8, help="differing tokens judged by the oracle per position")
    ap.add_argument("--limit-s", type=float, default=240.0, help="per grammar")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)

    from trellis.integrations.xgrammar import tokenizer_info
    from trellis.models import load

    h = load()
    ctx = {"vocab": h.vocab, "info": tokenizer_info(h.vocab, h.tokenizer), "walker": Walker(h.vocab)}
    rows = []
    for inp in grammar_inputs(args.grammars):
        r = check_grammar(inp, args, ctx)
        rows.append(r)
        if "positions" in r:
            print(f"{r['grammar']:42s} docs {r['docs']:3d} pos {r['positions']:5d} equal {r['equal']:5d} "
                  f"differ {r['differ']:4d} eos-differ {r['eos_differ']:3d} | judged {r['judged']:4d}: trellis wrong "
                  f"{r['trellis_wrong']:3d}, xgrammar wrong {r['xgrammar_wrong']:4d}, unjudged {r['unjudged']:5d}"
                  f"{' TIMEOUT' if r.get('timeout') else ''} ({r['seconds']} s)", flush=True)
            for ex in r["examples"][:2]:
                print(f"    e.g. {ex}")
        else:
            print(f"{r['grammar']:42s} {r.get('trellis') or r.get('xgrammar')}"
                  f"{'' if 'trellis' in r else ' (xgrammar)'}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    ran = [r for r in rows if "positions" in r]
    tot = {k: sum(r[k] for r in ran) for k in ("docs", "positions", "equal", "differ", "eos_differ",
                                              "trellis_wrong", "xgrammar_wrong", "unjudged", "xgr_refused_token")}
    print(f"SUMMARY grammars compared {len(ran)} (of {len(rows)}), docs {tot['docs']}, positions "
          f"{tot['positions']}: equal {tot['equal']}, differ {tot['differ']}, eos differ {tot['eos_differ']}; "
          f"judged differences: trellis wrong {tot['trellis_wrong']}, xgrammar wrong {tot['xgrammar_wrong']}, "
          f"unjudged {tot['unjudged']}; xgrammar refused a walk token {tot['xgr_refused_token']} times")


if __name__ == "__main__":
    main()
