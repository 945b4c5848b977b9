"""Time to first token for a schema or grammar the process has never seen: the user's wait.

    python benchmarks/bench_ttft.py [--schemas 20] [--threads 2] [--grammars] [--no-old] [--no-peers]

For each of ``--schemas`` maskbench schemas (interleaved across sources, so a mix of GitHub,
Kubernetes, Snowplow, BFCL, ...) it times, on the embedded Gemma 3 270M with its 262,144-token
vocabulary, what ``generate`` costs with defaults:

* ``unconstrained``: ``generate(model, prompt, max_new_tokens=1)`` (prefill + one token);
* ``schema``: ``generate(model, prompt, schema=S, max_new_tokens=1)`` with the in-process memos
  cleared (``trellis.constrain.compile.clear_caches()``) and a disk cache that is a fresh folder
  for the run (``--cold-disk``: for every schema): the schema's grammar compile, the first mask
  and the first token. The prompt's KV cache is reused by both rows (same prompt), so the rows
  differ by what the constraint costs. ``finish_in_budget=False``: with ``max_new_tokens=1`` the
  budget steering would search for a completion before the first token, which a request with a
  real budget does not;
* ``overhead`` = schema - unconstrained, measured back to back (alternating, same prompt);
* for reference, the peers' cost for the same schema, timed the same way around one mask
  (xgrammar 0.2.8: ``compile_json_schema`` + ``fill_next_token_bitmask``; llguidance:
  ``grammar_from_json_schema`` + ``LLMatcher`` + ``fill_next_token_bitmask``; both with their
  caches off or new objects) and trellis' previous default (the LALR engine with
  ``precompute=True``: every lexer state's vocabulary table before the first mask) unless
  ``--no-old``.

With ``--grammars`` it also times ``generate(model, prompt, grammar=G, max_new_tokens=1)`` for the
shipped grammars and the corpus grammars of ../shared/data/grammars (Lark and GBNF), fresh each.
Medians are printed; the last line starts with SUMMARY.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

PROMPT = "Fill in the JSON object for the request below.\nRequest: book it for tomorrow.\nJSON: "


def fresh() -> None:
    """Nothing of earlier schemas in memory: ``clear_caches()`` (compiled grammars, regex DFAs,
    shared vocabulary walks). The disk cache is a fresh folder for the whole run, so walks of
    terminals shared with EARLIER schemas of the run (JSON strings, numbers) may come from it:
    ``--cold-disk`` gives every schema its own empty folder."""
    tc = importlib.import_module("trellis.constrain.compile")
    tc.clear_caches()
    if COLD_DISK:
        os.environ["TRELLIS_CACHE_DIR"] = tempfile.mkdtemp(prefix="trellis-ttft-")


COLD_DISK = False


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def peers(schema: dict, handle, ctx: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    import torch

    try:
        import xgrammar as xgr

        if "xgr" not in ctx:
            info = xgr.TokenizerInfo.from_huggingface(handle.tokenizer, vocab_size=len(handle.vocab),
                                                      stop_token_ids=sorted(handle.vocab.eos))
            ctx["xgr"] = info
        comp = xgr.GrammarCompiler(ctx["xgr"], max_threads=1, cache_enabled=False)
        bm = xgr.allocate_token_bitmask(1, len(handle.vocab))

        def x() -> None:
            g = comp.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=(",", ":"),
                                         strict_mode=False)
            xgr.GrammarMatcher(g).fill_next_token_bitmask(bm)

        out["xgrammar"] = timed(x)
    except Exception as e:  # a schema a peer refuses: no time for it
        out["xgrammar_error"] = str(e)[:80]  # type: ignore[assignment]
    try:
        import llguidance
        import llguidance.hf
        import llguidance.torch

        if "llg" not in ctx:
            ctx["llg"] = llguidance.hf.from_tokenizer(handle.tokenizer, n_vocab=len(handle.vocab),
                                                      eos_token=min(handle.vocab.eos))
        bm = torch.zeros((1, (len(handle.vocab) + 31) // 32), dtype=torch.int32)

        def lg() -> None:
            g = llguidance.LLMatcher.grammar_from_json_schema(
                json.dumps(schema), defaults={"item_separator": ",", "key_separator": ":"})
            m = llguidance.LLMatcher(ctx["llg"], g, log_level=0)
            if m.is_error():
                raise ValueError(m.get_error())
            llguidance.torch.fill_next_token_bitmask(m, bm, 0)

        out["llguidance"] = timed(lg)
    except Exception as e:
        out["llguidance_error"] = str(e)[:80]  # type: ignore[assignment]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--grammars", action="store_true")
    ap.add_argument("--no-old", action="store_true", help="skip trellis' old precompute=True default")
    ap.add_argument("--no-peers", action="store_true", help="skip xgrammar and llguidance (minutes on some schemas)")
    ap.add_argument("--cold-disk", action="store_true", help="an empty disk cache for every schema")
    args = ap.parse_args()
    global COLD_DISK
    COLD_DISK = args.cold_disk
    import torch

    torch.set_num_threads(args.threads)
    tmp = tempfile.mkdtemp(prefix="trellis-ttft-")
    os.environ["TRELLIS_CACHE_DIR"] = tmp
    from bench_jsonschema import load_cases

    from trellis import generate, load
    from trellis.constrain import JsonSchema, compile
    from trellis.constrain.errors import ConstraintError

    handle = load()
    for _ in range(2):  # warm up the model, the kernels and the lark/interegular imports
        generate(handle, PROMPT, max_new_tokens=1)
        generate(handle, PROMPT, grammar='start: "a"', max_new_tokens=1)
    cases = load_cases(None, None, "maskbench")
    cases = [c for c in cases if not c["source"].startswith(("Handwritten", "Synthesized"))]
    rows = []
    ctx: dict = {}
    print(f"{'schema':<58} {'uncon s':>8} {'schema s':>9} {'overhead':>9} {'old pre s':>9} {'xgr s':>7} {'llg s':>7}")
    for case in cases:
        if len(rows) == args.schemas:
            break
        try:
            JsonSchema(case["schema"])
            fresh()
            compile(JsonSchema(case["schema"]), handle.vocab, cache=False)  # refusals are skipped, untimed
        except ConstraintError:
            continue
        fresh()
        u = timed(lambda: generate(handle, PROMPT, max_new_tokens=1))
        s = timed(lambda: generate(handle, PROMPT, schema=case["schema"], max_new_tokens=1, finish_in_budget=False))
        u2 = timed(lambda: generate(handle, PROMPT, max_new_tokens=1))
        uncon = (u + u2) / 2
        old = None
        if not args.no_old:
            fresh()
            old = timed(lambda: compile(JsonSchema(case["schema"]), handle.vocab, cache=False, precompute=True,
                                        progress=False, engine="lalr"))
        p = {} if args.no_peers else peers(case["schema"], handle, ctx)
        rows.append({"name": case["name"], "uncon": uncon, "schema": s, "over": s - uncon, "old": old, **p})
        print(f"{case['name'][:58]:<58} {uncon:8.3f} {s:9.3f} {s - uncon:9.3f} "
              f"{old if old is not None else float('nan'):9.3f} {p.get('xgrammar', float('nan')):7.3f} "
              f"{p.get('llguidance', float('nan')):7.3f}", flush=True)
    med = lambda k: statistics.median([r[k] for r in rows if isinstance(r.get(k), float)])  # noqa: E731
    line = (f"SUMMARY {len(rows)} schemas, medians: unconstrained TTFT {med('uncon'):.3f}s, schema TTFT "
            f"{med('schema'):.3f}s, overhead {med('over') * 1e3:.0f} ms (p90 "
            f"{sorted(r['over'] for r in rows)[int(0.9 * (len(rows) - 1))] * 1e3:.0f} ms)")
    if not args.no_old:
        line += f"; old precompute=True compile {med('old'):.3f}s"
    if not args.no_peers:
        line += f"; xgrammar compile+mask {med('xgrammar') * 1e3:.0f} ms, llguidance {med('llguidance') * 1e3:.0f} ms"
    if args.grammars:
        from trellis.constrain import shipped_grammars

        grows = []
        paths = [g for g in shipped_grammars()] + sorted(glob.glob(os.path.join(HERE, "..", "..", "shared", "data",
                                                                                "grammars", "*", "*.*")))
        print(f"\n{'grammar':<40} {'TTFT s':>8} {'overhead':>9}  note")
        for g in paths:
            if g.endswith((".md", "LICENSE")) or os.path.basename(g) == "LICENSE":
                continue
            fresh()
            try:
                u = timed(lambda: generate(handle, PROMPT, max_new_tokens=1))
                s = timed(lambda: generate(handle, PROMPT, grammar=g, max_new_tokens=1, finish_in_budget=False))
            except ConstraintError as e:
                print(f"{os.path.basename(g):<40} {'-':>8} {'-':>9}  refused: {str(e).splitlines()[0][:70]}")
                continue
            grows.append(s - u)
            print(f"{os.path.basename(g):<40} {s:8.3f} {s - u:9.3f}")
        line += f"; grammars: overhead median {statistics.median(grows) * 1e3:.0f} ms over {len(grows)}"
    print(line)


if __name__ == "__main__":
    main()
