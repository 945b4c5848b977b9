"""Cross-check trellis' RFC 8259 JSON masks (tests/data/json_rfc8259.lark) against xgrammar and llguidance on Gemma 3's vocabulary.

    python benchmarks/crosscheck_json.py [--docs 50] [--seed 0] [--no-hf-peers]

Walks valid JSON documents (tests/constrain/test_crosscheck.py: ``json_documents``), tokenised
with the Gemma 3 tokenizer; at every token boundary compares trellis' allowed-token set with each
peer's for the same JSON language, and explains every difference with an independent JSON
prefix recogniser (who is wrong, or a tokenizer difference: the peer reads the token's bytes
differently). Prints a summary table; the last line starts with SUMMARY.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tests.constrain.test_crosscheck import crosscheck, engines, format_report, json_documents  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spot", type=int, default=48, help="random tokens per position checked against the oracle")
    ap.add_argument("--no-hf-peers", action="store_true", help="skip the peers' own HF tokenizer imports")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from trellis.models import load

    h = load()
    docs = json_documents(args.docs, seed=args.seed)
    t0 = time.perf_counter()
    engs = engines(h.tokenizer, h.vocab, hf_peers=not args.no_hf_peers)
    print(f"engines ready in {time.perf_counter() - t0:.1f} s: {', '.join(e.name for e in engs)}", flush=True)
    t0 = time.perf_counter()

    def progress(i: int) -> None:
        if (i + 1) % 10 == 0:
            print(f"  {i + 1}/{len(docs)} documents, {time.perf_counter() - t0:.0f} s", flush=True)

    rep = crosscheck(h.tokenizer, h.vocab, docs, engines_=engs, spot=args.spot, seed=args.seed, progress=progress)
    print()
    print(format_report(rep))
    grammar = sum(n for (p, c), n in rep.differences.items() if not c.startswith("tokenizer"))
    tok = sum(n for (p, c), n in rep.differences.items() if c.startswith("tokenizer"))
    print(f"\nSUMMARY docs={rep.docs} positions={rep.positions} grammar_differences={grammar} "
          f"(trellis wrong {rep.wrong('trellis')}, peer wrong {rep.wrong('peer')}) tokenizer_differences={tok} "
          f"trellis_oracle_failures={len(rep.trellis_vs_oracle)}/{rep.oracle_checks} "
          f"seconds={time.perf_counter() - t0:.0f}")


if __name__ == "__main__":
    main()
