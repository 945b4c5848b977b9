"""Digests of every mask along the fresh documents, to compare two commits' masks (issue 59's exactness check).

    python benchmarks/mask_digest.py --out /tmp/before.json [--schemas 200] [--grammars]
    python benchmarks/mask_digest.py --out /tmp/after.json --compare /tmp/before.json

A change to the fresh path (walk sharing, counted walks, trie cuts, C kernels) must not change one
mask. The oracle tests check the masks against a reference on their own inputs; this checks that
a change leaves every mask of the benchmark's inputs as it was: the schemas of ``ab_masks.py`` (the
first ``--schemas`` that compile, one valid document each, ``closed_objects=False``) or with
``--grammars`` its grammars' seeded random-walk documents (``--docs`` each). One process, memos
carried from input to input as a server's are (so memoised paths are exercised, not only cold
ones), on the default path (work bounds on: a refusal or a work-bound stop is recorded, and must
be the same too). Each mask row's SHA-1 is kept per position; ``--compare`` prints every input
whose digests, refusals or lengths differ and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def digests(inputs: list, vocab, grammars: bool) -> dict[str, dict]:
    from trellis.constrain import JsonSchema, compile
    from trellis.constrain.errors import GrammarBudgetError
    from trellis.mask import allocate_bitmask

    row, out = allocate_bitmask(1, len(vocab))[0], {}
    for k, (name, spec, ids) in enumerate(inputs):
        rec: dict = {"masks": []}
        try:
            c = compile(spec if grammars else JsonSchema(spec, closed_objects=False), vocab)
            s = c.start()
            for i in range(len(ids) + 1):
                c.fill_mask(s, row)
                rec["masks"].append(hashlib.sha1(row.numpy().tobytes()).hexdigest()[:16])
                if i == len(ids):
                    break
                s = c.advance(s, ids[i])
                if s is None:
                    rec["end"] = f"rejected token {i}"
                    break
        except GrammarBudgetError as e:
            rec["end"] = f"work bound: {type(e).__name__}"
        except Exception as e:  # noqa: BLE001 - a refused schema or grammar: recorded, compared
            rec["end"] = f"refused: {type(e).__name__}"
        out[name] = rec
        if (k + 1) % 25 == 0:
            print(f"  {k + 1}/{len(inputs)}", flush=True)
    return out


def compare(new: dict, ref: dict) -> int:
    bad = 0
    for name in sorted(set(new) | set(ref)):
        a, b = new.get(name), ref.get(name)
        if a is None or b is None:
            print(f"{name}: only in {'the reference' if a is None else 'this run'}")
            bad += 1
            continue
        if a.get("end") != b.get("end") or a["masks"] != b["masks"]:
            first = next((i for i, (x, y) in enumerate(zip(a["masks"], b["masks"])) if x != y), None)
            print(f"{name}: differs (first differing position {first}, lengths {len(a['masks'])} vs "
                  f"{len(b['masks'])}, end {a.get('end')!r} vs {b.get('end')!r})")
            bad += 1
    n = sum(len(r["masks"]) for r in new.values())
    print(f"{len(new)} inputs, {n} masks: {bad} differ from the reference")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare", default=None, help="a previous run's --out: print what differs, exit 1 if any")
    ap.add_argument("--schemas", type=int, default=200)
    ap.add_argument("--grammars", action="store_true")
    ap.add_argument("--docs", type=int, default=2, help="--grammars: documents per grammar")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ["TRELLIS_CACHE_DIR"] = ""
    from ab_masks import grammar_inputs, schema_inputs
    from trellis.constrain import prepare_vocabulary
    from trellis.models import load

    h = load()
    prepare_vocabulary(h.vocab)
    inputs = grammar_inputs(h.vocab, h.tokenizer, args.docs) if args.grammars else schema_inputs(h.tokenizer)
    if not args.grammars:  # the first --schemas inputs (refusals included: they are compared too)
        inputs = inputs[:args.schemas]
    from trellis.constrain.compile import clear_caches

    clear_caches()  # (grammar_inputs' document walks compiled without bounds: their memos are not the run's)
    t0 = time.perf_counter()
    out = digests(inputs, h.vocab, args.grammars)
    print(f"{len(out)} inputs in {time.perf_counter() - t0:.0f} s")
    with open(args.out, "w") as f:
        json.dump(out, f)
    if args.compare:
        with open(args.compare) as f:
            return compare(out, json.load(f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
