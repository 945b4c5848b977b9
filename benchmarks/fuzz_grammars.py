"""Fuzz every shipped grammar: random-logit constrained decodes on a tiny vocabulary and on Gemma 3.

    python benchmarks/fuzz_grammars.py --tiny 10000 --gemma 500 [--grammars json.lark csv.lark]
    python benchmarks/fuzz_grammars.py --corpus --tiny 1000 --gemma 50 [--grammars lark/lark.lark]

Per grammar and vocabulary prints decodes, finished (EOS), parsed % (finished outputs that the
oracle accepts: must be 100), empty-mask count (must be 0), EOS/accepting mismatches and
refused tokens (must be 0), steps and seconds, with minimal repros of any failure. The decode
logic is tests/constrain/test_fuzz.py's ``fuzz``. The last line starts with SUMMARY.

The shipped grammars' oracle is Lark's own parser for their language. ``--corpus`` fuzzes the
corpus grammars of /work/shared/data/grammars instead (``lark/*.lark``, ``outlines/*.lark``,
``llama.cpp/*.gbnf``; ``--grammars`` takes their ids, ``lark/lark.lark``, and shipped names): the
files the default engine refuses are listed with the reason (``%declare``, no ``start`` rule, a
relative ``%import`` missing from the flat corpus: not failures; any other refusal is one). Their
oracles: Lark's Earley parser with ``lexer="dynamic_complete"`` and the file's folder as import
path for ``.lark``; XGrammar reading the GBNF text for ``.gbnf``. Each of their parses gets
``--parse-timeout`` seconds: outputs whose parse runs out of time are counted as ``timeouts``,
neither parsed nor failed. Outputs Lark rejects but the independent scannerless oracle
(tests/constrain/lark_oracle.py) accepts are counted as ``diverged`` (Lark's greedy ``%ignore``
or leftmost-first matching, documented in trellis/constrain/earley/scannerless.py), not as failures.
Failures, divergences and timeouts are written to ``--failures`` as JSON (grammar, vocabulary,
token ids and their bytes, text).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tests.constrain.test_fuzz import (BUDGET, CORPUS, PARSE_TIMEOUT, compile_corpus,  # noqa: E402
                                       corpus_grammars, corpus_oracle, corpus_refusal, corpus_tiny_vocab,
                                       format_stats, fuzz, gemma_favoured, is_corpus, lark_parser,
                                       refusal_reason, tiny_vocab)
from trellis.constrain import compile, shipped_grammars  # noqa: E402


def save_cases(out_dir: pathlib.Path, s, vocab) -> None:
    """The failures, divergences and timed-out parses of one run as JSON, one file per grammar/vocab."""
    cases = [{"kind": kind, "detail": detail, "token_ids": toks, "text": data.decode("utf-8", "backslashreplace")}
             for kind, data, detail, toks in s.failures]
    cases += [{"kind": "divergence", "detail": detail, "token_ids": toks,
               "text": data.decode("utf-8", "backslashreplace")} for data, detail, toks in s.divergent]
    cases += [{"kind": "timeout", "detail": "oracle parse ran out of time", "token_ids": toks,
               "text": data.decode("utf-8", "backslashreplace")} for data, toks in s.slow]
    if not cases:
        return
    for c in cases:
        c["token_bytes_hex"] = [vocab.tokens[i].hex() for i in c["token_ids"]]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{s.grammar.replace('/', '__')}.{s.vocab}.json"
    path.write_text(json.dumps({"grammar": s.grammar, "vocab": s.vocab, "cases": cases}, indent=1))
    print(f"    {len(cases)} cases -> {path}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", type=int, default=300, help="decodes per grammar on the tiny vocabulary")
    ap.add_argument("--gemma", type=int, default=5, help="decodes per grammar on Gemma 3's vocabulary (0: skip)")
    ap.add_argument("--grammars", nargs="*", default=None,
                    help="shipped grammar names and/or corpus ids (lark/lark.lark, llama.cpp/json.gbnf)")
    ap.add_argument("--corpus", action="store_true", help="the corpus grammars instead of the shipped ones")
    ap.add_argument("--corpus-dir", type=pathlib.Path, default=CORPUS)
    ap.add_argument("--parse-timeout", type=float, default=PARSE_TIMEOUT,
                    help="seconds per oracle parse of a corpus grammar's output (0: no limit)")
    ap.add_argument("--failures", type=pathlib.Path, default=pathlib.Path("/tmp/fuzz_failures"),
                    help="folder for the JSON repros of failures, divergences and timeouts")
    ap.add_argument("--budget", type=int, default=BUDGET, help="max tokens per decode")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    root = args.corpus_dir
    names = args.grammars or (corpus_grammars(root) if args.corpus else shipped_grammars())
    refusals: dict[str, str] = {}  # corpus id -> reason (expected refusals)
    bad_refusals: dict[str, str] = {}  # corpus id -> error (a refusal with another reason)
    for name in [n for n in names if is_corpus(n)]:
        e = corpus_refusal(name, root)
        if e is not None:
            reason = refusal_reason(e)
            (refusals if reason else bad_refusals)[name] = f"{reason or 'unexpected'}: {str(e).splitlines()[0]}"
    names = [n for n in names if n not in refusals and n not in bad_refusals]
    for name, why in {**refusals, **bad_refusals}.items():
        print(f"{name}: refused ({why})", flush=True)

    def setup(name: str):
        """(tiny vocabulary, oracle, parse time limit) of a grammar."""
        if is_corpus(name):
            return corpus_tiny_vocab(name, root=root), corpus_oracle(name, root), args.parse_timeout or None
        return tiny_vocab(name), lark_parser(name), None

    def build(name: str, vocab, **kw):
        return compile_corpus(name, vocab, root, **kw) if is_corpus(name) else compile(name, vocab, **kw)

    rows, seconds, tinies, oracles = [], {}, {}, {}
    t_all = time.perf_counter()
    for name in names:
        tinies[name], oracles[name], limit = setup(name)
        if args.tiny:
            t0 = time.perf_counter()
            c = build(name, tinies[name], cache=False)
            rows.append(fuzz(name, c, oracles[name], args.tiny, seed=args.seed, budget=args.budget, label="tiny",
                             parse_timeout=limit))
            seconds[(name, "tiny")] = time.perf_counter() - t0
            print(f"{name} tiny: {seconds[(name, 'tiny')]:.1f} s", flush=True)
            save_cases(args.failures, rows[-1], c.vocab)
    if args.gemma:
        from trellis.models import load

        h = load()
        for name in names:
            t0 = time.perf_counter()
            c = build(name, h.vocab)
            limit = (args.parse_timeout or None) if is_corpus(name) else None
            rows.append(fuzz(name, c, oracles[name], args.gemma, seed=args.seed + 1, budget=args.budget,
                             favoured=gemma_favoured(name, h.vocab, tinies[name]), label="gemma",
                             parse_timeout=limit))
            seconds[(name, "gemma")] = time.perf_counter() - t0
            print(f"{name} gemma: {seconds[(name, 'gemma')]:.1f} s", flush=True)
            save_cases(args.failures, rows[-1], h.vocab)
    print()
    print(format_stats(rows))
    print()
    w = max([18] + [len(n) for n in names])
    for s in rows:
        key = (s.grammar, s.vocab)
        per_step = 1000 * seconds[key] / max(s.steps, 1)
        print(f"{s.grammar:<{w}} {s.vocab:<6} {seconds[key]:8.1f} s  {per_step:6.2f} ms/step")
    for name, why in {**refusals, **bad_refusals}.items():
        print(f"refused: {name}: {why}")
    bad = [f"{s.grammar}/{s.vocab}" for s in rows if not s.ok] + [f"{n}/refusal" for n in bad_refusals]
    print(f"\nSUMMARY grammars={len(names)} decodes={sum(s.decodes for s in rows)} "
          f"finished={sum(s.finished for s in rows)} parsed={sum(s.parsed for s in rows)} "
          f"empty_masks={sum(s.empty_masks for s in rows)} eos_mismatch={sum(s.eos_mismatch for s in rows)} "
          f"refused={sum(s.refused for s in rows)} timeouts={sum(s.timeouts for s in rows)} "
          f"diverged={sum(s.diverged for s in rows)} grammars_refused={len(refusals)} failing={bad} "
          f"seconds={time.perf_counter() - t_all:.0f}")


if __name__ == "__main__":
    main()
