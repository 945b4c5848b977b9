"""Python's garbage collector on the user's path: fresh schemas served one after another in a process
that holds Gemma, with the collector left as a user leaves it.

``bench_fresh.py`` calls ``gc.collect()`` before each timed run so that one engine is not charged
for the harness's or another engine's garbage; a process serving requests never does. There a
full (generation-2) collection walks every object the collector tracks, torch's and
transformers' included (~430k after ``trellis.load()``: ~250-300 ms on a 2-core VM), and runs
whenever the objects that survived two young collections since the last one pass a quarter of
those that survived it. Which objects trellis keeps (its memos) decides how often that is.

What it does: ``trellis.load()``, ``prepare_vocabulary``, then for each of ``--schemas`` maskbench
schemas in order (the ones with a valid test document whose Gemma tokens decode back to it):
``compile(JsonSchema(schema, closed_objects=False))``, then every mask along the document with
``advance`` between them (bench_fresh's (a) run, one thread). A ``gc.callbacks`` hook times every
collection. ``--freeze`` moves every object tracked after the load out of the collector's reach
first (``gc.freeze()``, what vLLM's engine does after start-up: ``vllm/utils/gc_utils.py``).
``--engine llguidance`` runs the same loop with llguidance (``grammar_from_json_schema`` + a new
``LLMatcher`` per schema, its masks and ``consume_token``; its tokenizer made untimed), in a process
that has loaded the same model: what a user of that engine waits for, collector included; run
each engine in its own process, back to back, and compare the walls. ``--owners`` names, after the run, what holds the objects that stayed tracked (each new object's
nearest owner that is a trellis object, a module dict or a memo named in a module): where the
growth comes from.

Prints: collections per generation (count, total and longest pause), the masks' p50/p99/max,
the wall time, how many tracked objects the run left and how long a full collection over them
takes; the last line starts with SUMMARY.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_fresh import schema_cases, schema_docs  # noqa: E402


def inputs(tok, n: int) -> list[tuple[str, object, list[int]]]:
    """The first ``n`` schemas with a valid document (``bench_fresh.schema_docs``) whose tokens
    decode back to it: (name, schema, token ids)."""
    out = []
    for c in schema_cases():
        docs = schema_docs(c)
        if not docs:
            continue
        ids = tok.encode(docs[0], add_special_tokens=False)
        if tok.decode(ids) != docs[0]:
            continue
        out.append((c["name"], c["schema"], ids))
        if len(out) >= n:
            break
    return out


class Watch:
    """Every collection's generation and pause (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._t = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._t))


def owners(before: set[int], top: int = 12) -> list[tuple[str, int]]:
    """The tracked objects made since ``before`` (ids), counted by their nearest named owner."""
    objs = [o for o in gc.get_objects() if id(o) not in before]
    new = {id(o) for o in objs}
    parent: dict[int, object] = {}
    for o in objs:
        for c in gc.get_referents(o):
            if id(c) in new and id(c) not in parent:
                parent[id(c)] = o
    names: dict[int, str] = {}
    for mname, mod in list(sys.modules.items()):
        if mname.startswith("trellis"):
            for k, v in list(getattr(mod, "__dict__", {}).items()):
                if isinstance(v, (dict, list)):
                    names[id(v)] = f"{mname}.{k}"

    def label(o: object) -> str | None:
        if id(o) in names:
            return names[id(o)]
        mod = getattr(type(o), "__module__", "") or ""
        return f"{mod}.{type(o).__name__}" if mod.startswith(("trellis", "interegular")) else None

    count: Counter = Counter()
    for o in objs:
        p, name = o, None
        for _ in range(16):
            name = label(p) if p is not o else None
            if name is not None:
                break
            q = parent.get(id(p))
            if q is None:
                break
            p = q
        count[name or f"(unowned {type(p).__name__})"] += 1
    return count.most_common(top)


def serve_trellis(schema, ids, masks, vocab, row) -> bool:
    """Compile, then every mask along the document with ``advance`` between (False: refused)."""
    from trellis.constrain import JsonSchema, compile
    from trellis.errors import TrellisError

    try:
        c = compile(JsonSchema(schema, closed_objects=False), vocab)
    except TrellisError:
        return False
    s = c.start()
    for i in range(len(ids) + 1):
        a = time.perf_counter()
        c.fill_mask(s, row)
        masks.append(time.perf_counter() - a)
        if i < len(ids):
            s = c.advance(s, ids[i])
            if s is None:  # a document the engine rejects (as llguidance's consume_token can)
                return False
    return True


def serve_llguidance(vocab, tok, row):
    """The loop's body for llguidance (bench_fresh's configuration: the spec's
    additionalProperties, compact separators); its LLTokenizer is made here, untimed."""
    import llguidance

    from trellis.integrations.llguidance import lltokenizer

    lt = lltokenizer(vocab, tok)

    def serve(schema, ids, masks) -> bool:
        g = llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), defaults={"item_separator": ",", "key_separator": ":"})
        m = llguidance.LLMatcher(lt, g, log_level=0)
        if m.is_error():
            return False
        for i in range(len(ids) + 1):
            a = time.perf_counter()
            m.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * 4)
            masks.append(time.perf_counter() - a)
            if i < len(ids) and not m.consume_token(ids[i]):
                return False
        return True

    return serve


def compare(path_a: str, path_b: str) -> None:
    with open(path_a) as f:
        a = json.load(f)
    with open(path_b) as f:
        b = json.load(f)
    both = sorted(set(a["per_schema_s"]) & set(b["per_schema_s"]))
    ta = [a["per_schema_s"][n] for n in both]
    tb = [b["per_schema_s"][n] for n in both]
    r = sorted(x / y for x, y in zip(ta, tb))
    name_a, name_b = a.get("engine", "A"), b.get("engine", "B")
    print(f"{len(both)} schemas served by both; per schema, collections included:")
    for name, t in ((name_a, ta), (name_b, tb)):
        t = sorted(t)
        print(f"  {name}: median {statistics.median(t) * 1e3:.2f} ms, p95 {t[int(.95 * len(t))] * 1e3:.2f} ms, "
              f"mean {statistics.mean(t) * 1e3:.2f} ms, sum {sum(t):.2f} s")
    print(f"SUMMARY {name_a}/{name_b}: median of per-schema ratios {statistics.median(r):.2f}x, "
          f"ratio of sums {sum(ta) / sum(tb):.2f}x, ratio of p95s {sorted(ta)[int(.95 * len(ta))] / sorted(tb)[int(.95 * len(tb))]:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schemas", type=int, default=100)
    ap.add_argument("--freeze", action="store_true", help="gc.freeze() after the load (as vLLM's engine does)")
    ap.add_argument("--owners", action="store_true", help="name what holds the objects left tracked")
    ap.add_argument("--engine", choices=("trellis", "llguidance"), default="trellis")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                    help="two --out files (say trellis and llguidance): per-schema ratios A/B on the schemas both served")
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    torch.set_num_threads(args.threads)
    from trellis import load
    from trellis.constrain import prepare_vocabulary
    from trellis.mask import allocate_bitmask

    h = load()
    vocab, tok = h.vocab, h.tokenizer
    os.environ["TRELLIS_CACHE_DIR"] = tempfile.mkdtemp(prefix="trellis-gc-")  # no walks from earlier runs
    prepare_vocabulary(vocab)
    row = allocate_bitmask(1, len(vocab))[0]
    cases = inputs(tok, args.schemas)
    serve = serve_llguidance(vocab, tok, row) if args.engine == "llguidance" else None  # setup untimed
    gc.collect()
    if args.freeze:
        gc.freeze()
    base_tracked = len(gc.get_objects())
    t = time.perf_counter()
    gc.collect()
    base_full = time.perf_counter() - t
    before = {id(o) for o in gc.get_objects()} if args.owners else set()
    watch = Watch()
    masks: list[float] = []
    refused = 0
    gc.callbacks.append(watch)
    t0 = time.perf_counter()
    per: dict[str, float] = {}  # seconds per schema served, collections included
    for name, schema, ids in cases:
        t1 = time.perf_counter()
        if serve is not None:
            ok = serve(schema, ids, masks)
        else:
            ok = serve_trellis(schema, ids, masks, vocab, row)
        if ok:
            per[name] = time.perf_counter() - t1
        refused += not ok
    wall = time.perf_counter() - t0
    gc.callbacks.remove(watch)
    left = len(gc.get_objects())
    t = time.perf_counter()
    gc.collect()
    end_full = time.perf_counter() - t
    masks.sort()
    ms = lambda x: round(x * 1e3, 2)  # noqa: E731
    print(f"{args.engine}: {len(cases)} schemas ({refused} refused), {len(masks)} masks, wall {wall:.2f} s; "
          f"{'frozen after load' if args.freeze else 'collector as the user leaves it'}")
    print(f"tracked after load: {base_tracked} (full collection {ms(base_full)} ms); after the run: {left} "
          f"(full collection {ms(end_full)} ms)")
    gens = {}
    for g in (0, 1, 2):
        ps = sorted(p for x, p in watch.pauses if x == g)
        gens[g] = {"count": len(ps), "total_ms": ms(sum(ps)), "max_ms": ms(ps[-1]) if ps else 0.0}
        print(f"gen{g}: {len(ps)} collections, {ms(sum(ps))} ms in all, longest {gens[g]['max_ms']} ms")
    q = lambda p: masks[min(len(masks) - 1, int(p * len(masks)))]  # noqa: E731
    ts = sorted(per.values())
    print(f"per schema served: median {ms(statistics.median(ts))} ms, p95 {ms(ts[int(.95 * len(ts))])} ms, "
          f"mean {ms(statistics.mean(ts))} ms, max {ms(ts[-1])} ms")
    print(f"masks: p50 {ms(q(.5))} ms, p99 {ms(q(.99))} ms, max {ms(masks[-1])} ms; "
          f"collector {ms(sum(p for _, p in watch.pauses))} ms = {100 * sum(p for _, p in watch.pauses) / wall:.0f}% of wall")
    own = owners(before) if args.owners else []
    for name, n in own:
        print(f"  {n:8d}  {name}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"schemas": len(cases), "freeze": args.freeze, "wall_s": wall, "gens": gens,
                       "masks_ms": {"p50": ms(q(.5)), "p99": ms(q(.99)), "max": ms(masks[-1])},
                       "tracked": {"after_load": base_tracked, "after_run": left}, "owners": own,
                       "engine": args.engine, "per_schema_s": per}, f, indent=1)
    print(f"SUMMARY {args.engine} gc2 {gens[2]['count']} x longest {gens[2]['max_ms']} ms; young longest "
          f"{max(gens[0]['max_ms'], gens[1]['max_ms'])} ms; collector {ms(sum(p for _, p in watch.pauses))} ms of "
          f"{wall:.2f} s; masks max {ms(masks[-1])} ms; tracked +{left - base_tracked}")


if __name__ == "__main__":
    main()
