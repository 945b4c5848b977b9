"""In-process A/B of the fresh-mask path's native pieces (issue 59): two arms, alternating per schema.

    python benchmarks/ab_masks.py --switch all [--schemas 100] [--out FILE]
    python benchmarks/ab_masks.py --grammars --switch ctrie [--docs 2]

The fresh masks of ``bench_fresh.py``'s schemas (maskbench, sources interleaved, the first valid
document each, keys in the grammar's order, compact JSON, ``closed_objects=False``), each schema
compiled twice in one process, once per arm, the arm order alternating from schema to schema, so
that the VM's drift (20-30% between runs minutes apart on the 2-core VMs) hits both arms alike. Before
each arm every process-wide memo ``bench_fresh.py`` restores (``SHARED_MEMOS``: the walk cache, DFAs,
shapes...) is put back to its state before the schema: each arm finds what the earlier schemas
left, as in ``bench_fresh.py --isolation grammar``.
``--carry``: instead, each arm carries its own memos from its previous schema (both start from one
warm state): for a switch whose work is memoised across schemas (``counted``), where the shared
restore would hand the next schema whichever arm ran last.
The garbage collector is off (``bench_gc.py`` measures it) and the disk cache is off.

``--grammars``: the grammars of ``bench_fresh.py`` (shipped, and the corpus in ../shared/data/grammars)
instead, ``--docs`` documents each, made before any arm runs by ``bench_fresh``'s seeded random walks
(a compile without work bound; at most 25 walks a document; a shipped grammar's documents are
``bench_masks.grammar_docs``'s, as in ``bench_fresh.py``); before each arm every in-process memo
is cleared (``compile.clear_caches()``: the walks, DFAs and item sets the document walks made are
not the arm's), and each arm compiles the grammar on the default path (work bounds on); a mask or
advance past the bound ends that arm's document (counted; the ratio compares documents both arms
finished).

Timed: every ``fill_mask`` along the document (each on a state the constraint has never seen),
and the compile before it (``compile`` and ``start``).
Printed per arm: the masks' sum, p99, how many took over 1 ms and the longest; and the median (p10,
p90) over schemas of the per-schema ratio of mask sums (arm B / arm A); then the compiles' sum and
median per arm and the median per-schema ratio of compile times.

``--switch`` names what arm A turns off (arm B is the code as it is):

* ``cut``: trie cuts (``slices.trie_cut_for``);
* ``cstep`` / ``cclose`` / ``ctake``: the chart's C loops (``_statec`` step; item-set closure; the
  byte walks of ``Earley.take_rests`` and ``Earley.walk``), read when a recogniser is made;
* ``cmiss``: the C walks' memo misses stepped in C (without it: each miss calls the Python
  ``Earley.step_miss``, as before);
* ``cminus``: ``_dfac.minus_words`` (an open object's key regex minus its declared keys);
* ``member``: sorted-pool membership in ``cut_walk.patch`` and the literal walks (``np.isin`` instead);
* ``digest``: ``walk_cache.key_digest``'s memo;
* ``cmany``: the C step's boundary after several terminals complete at one byte
  (``Earley._after_many`` read in C; without it such a step declines to Python);
* ``ctrie``: every chart walk of a leftover set as one C take over its arrays, grouped by chart
  state (``scannerless.CHART_WALK_C``; without it: the numpy grouped walk, small groups and sets
  rest by rest through ``Earley.walk``);
* ``ceps``: ``_dfac.epsilon_free`` (a terminal regex's NFA without its empty moves; acts on
  compiles: see the compile line);
* ``cprefix``: ``_walkc.prefix_bounds`` (where the tokens equal to and starting with each prefix of a
  literal lie in the sorted vocabulary; without it: ``bisect`` on Python bytes);
* ``nprow``: ``mask.write_row``'s numpy copy into a CPU row (without it: ``torch.from_numpy`` and
  ``copy_``, as before; times ``fill_mask``, which is what the arms time);
* ``cpack``: ``TokenMatrix.pack_where`` (a walk's kept tokens packed by one C pass over its flags;
  without it: the boolean gather of their ids first, then packed);
* ``patch``: ``alike_patch`` (a broad state's walk patched from that of a state walked before which
  walks alike on all but a few tokens: a length-bounded string's positions; without it: each
  walked in full);
* ``depth``: a large sub-automaton's walks keyed by its state's class up to the longest token
  (``dfa_shapes.DEPTH_CLASSES``; without it: by the state);
* ``cshape``: canonical shapes built in C (``_dfac.bfs_shape``; without it: the numpy form, the
  same bytes). (``compact``, the [n, 256] form against alike columns once, was retired with its
  switch after the forty-second session's A/B: benchmarks/README.md.)
* ``cpaths``: a cut key terminal's special paths searched in C (``_walkc.special_paths``; without
  it: ``cut_walk.Simulation.special_paths``' Python search, the same paths);
* ``scanids``: the scan ids of an item set memoised by its expected terminals
  (``Earley._scan_ids``; without it: derived for every new set, each key tested for overlap);
* ``cfgc``: a new grammar's analyses in C (``grammar/_cfgc.c``: productivity, nullability, FOLLOW
  bytes, the Earley item tables; without it: their Python forms in ``grammar/analysis.py``; acts on
  compiles: see the compile line);
* ``cafter``: ``Earley.after`` and the several-completions ``_close`` in C (``_statec.after`` /
  ``close_kernel``: a new item set's kernel, agenda, static lookup, interning and scans in one
  call; without them: the Python methods around the C agenda);
* ``wordslices``: the word slices (``slices.WORD_SLICES``: ``[0-9A-Za-z]+`` and ``[a-z]+``, for
  identifier and hostname patterns' loops; without them: the text slices only);
* ``dotslice``: the slice of a JSON Schema pattern's ``.`` in a JSON string (``slices.DOT_SLICE``:
  ``[^"\\\x00-\x1f\x7f\u2028\u2029]+``; off, a ``.*`` state contains no slice and is walked whole).
* ``trieleft``: a trie walk and its crossings' leftovers in one C call (``trie_walk.TRIE_LEFTOVERS``,
  ``_walkc.walk_trie_leftovers``; off: ``_walkc.walk_trie``, its runs spread out in numpy, the
  inside tokens dropped, then the generic ``rest_walk.leftovers``: the same arrays).
* ``counted``: a length-bounded terminal's positions read off one counting walk
  (``counted_walk.ENABLED``; without it: each position walked as before, patched or in full);
* ``sparse``: a scan state's row with few nonzero words OR-ed into a mask word by word
  (``scannerless.SPARSE_ROWS``; without it: every row OR-ed whole, as before);
* ``crepeat``: a bounded repeat between literals built by counting units (``counted_repeat.py``;
  without it: the general NFA and subset construction). It changes compiles, not masks: read
  the compile rows, with ``--carry`` (the terminal DFA memo is shared across schemas);
* ``removals``: a cut key's patch memoised on its base walk where every special path ends in a
  removed byte (``cut_walk.REMOVAL_MEMO``; without it: each patch computed). The memo lives on
  walks shared across schemas: use ``--carry``;
* ``all``: every one of the above.
"""

from __future__ import annotations

import argparse
import collections
import gc
import importlib
import json
import os
import sys
import time
from typing import Callable

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

SWITCHES = ("cut", "cstep", "cclose", "ctake", "cmiss", "cminus", "member", "digest", "cmany", "ctrie", "depth", "ceps",
            "cprefix", "nprow", "cpack", "patch", "cshape", "cpaths", "scanids", "wordslices", "cafter", "counted", "sparse",
            "crepeat", "removals", "narrow", "dotslice", "trieleft", "cfgc")


def switches() -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    """name -> (turn it off, turn it back on)."""
    import trellis.constrain.automata.byte_dfa as byte_dfa
    import trellis.constrain.automata.regex_compile as regex_compile
    import trellis.constrain.earley.earley as earley
    import trellis.constrain.earley.scannerless as scannerless
    import trellis.constrain.grammar.analysis as analysis
    import trellis.constrain.vocab.cut_walk as cut_walk
    import trellis.constrain.vocab.dfa_shapes as dfa_shapes
    import trellis.constrain.vocab.literal_walk as literal_walk
    import trellis.constrain.vocab.slices as slices
    import trellis.constrain.vocab.trie_walk as trie_walk
    import trellis.constrain.vocab.vocab_walk as vocab_walk
    import trellis.constrain.vocab.walk_cache as walk_cache

    def flip(mods: list, name: str, off: object) -> tuple[Callable[[], None], Callable[[], None]]:
        on = getattr(mods[0], name)

        def set_all(v: object) -> None:
            for m in mods:
                setattr(m, name, v)

        return (lambda: set_all(off)), (lambda: set_all(on))

    def isin(x: np.ndarray, pool: np.ndarray) -> np.ndarray:
        return np.isin(x, pool)

    def digest(key: object, size: int = 16) -> bytes:
        return walk_cache._digest(key, size)[0]

    out = {
        "cut": flip([vocab_walk], "trie_cut_for", lambda *a: None),
        "cstep": flip([earley], "native_step", None),
        "cclose": flip([earley], "native_close", None),
        "cminus": flip([byte_dfa], "_dfac", None),
        "ceps": flip([regex_compile], "dfac", None),
        "cfgc": flip([analysis], "cfgc", None),
        "member": flip([cut_walk, literal_walk], "member", isin),
        "digest": flip([walk_cache, vocab_walk, scannerless], "key_digest", digest),
    }
    take_off, take_on = flip([earley], "native_take_rests", None)
    walk_off, walk_on = flip([earley], "native_walk", None)
    out["ctake"] = (lambda: (take_off(), walk_off())), (lambda: (take_on(), walk_on()))
    after_off, after_on = flip([earley], "native_after", None)
    kernel_off, kernel_on = flip([earley], "native_close_kernel", None)
    out["cafter"] = (lambda: (after_off(), kernel_off())), (lambda: (after_on(), kernel_on()))

    def walk_py_miss(self, state, data):  # Earley.walk with every memo miss through Python
        self.charge(len(data) >> 3)
        return self._native_walk(state, data, self._steps, self.step_miss)

    def take_rests_py_miss(self, state, base, length, flat, stride):
        if self._native_take_rests is None:
            return None
        taken, units = self._native_take_rests(state, base, length, flat, stride, self._steps, self.step_miss)
        self.charge(units)
        return np.frombuffer(taken, dtype=np.int64)

    cls = earley.Earley
    walk_c, take_c = cls.walk, cls.take_rests

    def miss_off() -> None:
        cls.walk = lambda s, *a: walk_py_miss(s, *a) if s._native_walk else walk_c(s, *a)
        cls.take_rests = take_rests_py_miss

    def miss_on() -> None:
        cls.walk, cls.take_rests = walk_c, take_c

    out["cmiss"] = miss_off, miss_on
    init = cls.__init__

    def init_without_many(self, *a, **k):  # the C step without _after_many: it declines such steps
        init(self, *a, **k)
        self._tables = self._tables[:6]

    out["cmany"] = (lambda: setattr(cls, "__init__", init_without_many)), (lambda: setattr(cls, "__init__", init))
    scans = cls._scans

    def scans_unmemoised(self, *a, **k):  # every item set's scan ids derived again (Earley._scan_ids_of)
        self._scan_ids.clear()
        return scans(self, *a, **k)

    out["scanids"] = (lambda: setattr(cls, "_scans", scans_unmemoised)), (lambda: setattr(cls, "_scans", scans))
    out["ctrie"] = flip([scannerless], "CHART_WALK_C", False)
    out["patch"] = flip([vocab_walk], "PATCH", False)
    bfs_shape = dfa_shapes._bfs_shape

    def bfs_shape_numpy(dfa: object, q: int) -> object:
        kernel = dfa_shapes.dfac
        dfa_shapes.dfac = None  # (only _bfs_shape reads it while it runs: the numpy form)
        try:
            return bfs_shape(dfa, q)
        finally:
            dfa_shapes.dfac = kernel

    out["cpaths"] = flip([cut_walk], "walkc", None)
    out["cshape"] = (lambda: setattr(dfa_shapes, "_bfs_shape", bfs_shape_numpy)), (
        lambda: setattr(dfa_shapes, "_bfs_shape", bfs_shape))
    out["wordslices"] = flip([slices], "WORD_SLICES", False)
    out["dotslice"] = flip([slices], "DOT_SLICE", False)
    out["trieleft"] = flip([trie_walk], "TRIE_LEFTOVERS", False)
    sv = literal_walk.SortedVocab
    out["cprefix"] = flip([sv], "prefix_bounds", sv.prefix_bounds_py)

    def torch_copy(out_row: torch.Tensor, row: np.ndarray) -> None:
        out_row.copy_(torch.from_numpy(row))

    import trellis.constrain.lalr.cfg as cfg
    import trellis.constrain.regex_constraint as regex_constraint

    import trellis.constrain.vocab.walks as walks_mod

    tmc = walks_mod.TokenMatrix
    out["cpack"] = flip([tmc], "pack_where", lambda self, ids, flags: self.pack_ids(ids[flags]))
    out["nprow"] = flip([scannerless, cfg, regex_constraint], "write_row", torch_copy)
    out["depth"] = flip([dfa_shapes], "DEPTH_CLASSES", False)
    import trellis.constrain.vocab.counted_walk as counted_walk

    out["counted"] = flip([counted_walk], "ENABLED", False)
    out["sparse"] = flip([scannerless], "SPARSE_ROWS", False)
    import trellis.constrain.automata.regex as regex_mod

    out["crepeat"] = flip([regex_mod], "counted_repeat", lambda pattern: None)
    out["removals"] = flip([cut_walk], "REMOVAL_MEMO", False)
    narrow_off, narrow_on = flip([scannerless], "NARROW_WALKS", False)
    pack_off, pack_on = flip([vocab_walk], "_pack_started", lambda dfa, q, rs, tm, w: tm.pack_where(rs.tid, w.inside))
    out["narrow"] = (lambda: (narrow_off(), pack_off())), (lambda: (narrow_on(), pack_on()))
    return out


def grammar_inputs(vocab, tokenizer, n_docs: int, only: list[str] | None = None) -> list:
    """(name, spec, ids) for each document of each bench_fresh grammar trellis compiles."""
    import random

    from bench_fresh import Walker, grammar_inputs as inputs_of
    from bench_masks import grammar_docs
    from trellis.constrain import compile
    from trellis.constrain.earley.earley import UNBOUNDED
    from trellis.mask import allocate_bitmask

    walker, row, out = Walker(vocab), allocate_bitmask(1, len(vocab))[0], []
    for inp in inputs_of(only or None):
        try:
            c = compile(inp.trellis_spec, vocab, mask_work=UNBOUNDED, advance_work=UNBOUNDED)
        except Exception:  # noqa: BLE001 - a refused grammar
            continue
        rng, docs, walks = random.Random(f"0:{inp.name}"), [], 0
        if inp.path is None:  # shipped: bench_masks' documents, as bench_fresh takes them
            for d in grammar_docs(inp.trellis_spec, 4 * n_docs, 0):
                ids = tokenizer.encode(d, add_special_tokens=False)
                if vocab.decode(ids) == d.encode() and ids not in docs and len(docs) < n_docs:
                    docs.append(ids)
        while inp.path is not None and len(docs) < n_docs and walks < 25 * n_docs:
            walks += 1
            ids = walker.walk(c, rng, row)
            if ids and ids not in docs:
                docs.append(ids)
        out += [(f"{inp.name} d{i}", inp.trellis_spec, ids) for i, ids in enumerate(docs)]
    return out


def schema_inputs(tokenizer) -> list:
    """(name, schema, ids) for each bench_fresh schema: its first valid document whose tokens decode back."""
    from bench_fresh import schema_cases
    from trellis.constrain.frontends.json_schema import order_keys

    out = []
    for c in schema_cases():
        docs = [json.dumps(order_keys(c["schema"], t["data"]), separators=(",", ":"), ensure_ascii=False)
                for t in c["tests"] if t.get("valid")]
        ids = next((x for x in (tokenizer.encode(d, add_special_tokens=False) for d in docs)
                    if tokenizer.decode(x) in docs), None)
        if ids is not None:
            out.append((c["name"], c["schema"], ids))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--switch", choices=SWITCHES + ("all",), default=None)
    ap.add_argument("--set", nargs="+", default=None, metavar="NAME=INT",
                    help="instead of --switch: arm A sets these scannerless constants (e.g. CHART_WALK_SMALL=256)")
    ap.add_argument("--schemas", type=int, default=100)
    ap.add_argument("--out", default=None, help="write per-arm mask times as JSON")
    ap.add_argument("--grammars", action="store_true", help="the grammars' random-walk documents, not schemas")
    ap.add_argument("--docs", type=int, default=2, help="--grammars: documents per grammar")
    ap.add_argument("--only", nargs="*", default=None, help="only grammars (or schemas) whose name has one of these")
    ap.add_argument("--reps", type=int, default=1, help="pass over the inputs this many times (sums add up)")
    ap.add_argument("--carry", action="store_true",
                    help="schemas: each arm carries its own process-wide memos from input to input, as a server "
                         "would (for a switch whose work is memoised across inputs), instead of both arms "
                         "starting each input from the state the previous input's last arm left")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ["TRELLIS_CACHE_DIR"] = ""
    from bench_fresh import Fresh
    from trellis.constrain import JsonSchema, compile, prepare_vocabulary
    from trellis.mask import allocate_bitmask
    from trellis.models import load

    if args.set:
        import trellis.constrain.earley.scannerless as scannerless

        new = {k: int(v) for k, v in (x.split("=") for x in args.set)}
        old = {k: getattr(scannerless, k) for k in new}
        arms = {"off": lambda: [setattr(scannerless, k, v) for k, v in new.items()],
                "on": lambda: [setattr(scannerless, k, v) for k, v in old.items()]}
        args.switch = " ".join(args.set)
    else:
        sw = switches()
        names = list(SWITCHES) if args.switch == "all" else [args.switch]
        arms = {"off": lambda: [sw[n][0]() for n in names], "on": lambda: [sw[n][1]() for n in names]}
    h = load()
    vocab, tok = h.vocab, h.tokenizer
    prepare_vocabulary(vocab)
    row = allocate_bitmask(1, len(vocab))[0]
    compile_mod = importlib.import_module("trellis.constrain.compile")  # the module (the package exports the function)
    from trellis.constrain.errors import GrammarBudgetError

    inputs = []
    if args.grammars:
        inputs = grammar_inputs(vocab, tok, args.docs, args.only)
        print(f"{len(inputs)} documents", flush=True)
    else:
        inputs = [x for x in schema_inputs(tok) if not args.only or any(o in x[0] for o in args.only)]
    # Every process-wide memo bench_fresh.py restores (DFAs, shapes, walks...), put back before each
    # arm (``Fresh.snapshot``): restoring the walk cache alone left the DFAs, shapes and scan tables
    # the first arm made to the second, ~2x per-schema noise on heavy schemas (o13020: 208 vs 106 ms).
    fresh = Fresh("grammar")
    # --carry: each arm's own memos, kept from its previous input (both start from the warm state)
    own = {arm: Fresh("grammar") for arm in ("off", "on")} if args.carry and not args.grammars else None
    os.environ["TRELLIS_CACHE_DIR"] = ""
    budget: collections.Counter = collections.Counter()
    gc.disable()
    masks: dict[str, list[float]] = collections.defaultdict(list)
    per: dict[str, dict[str, float]] = collections.defaultdict(dict)
    compiles: dict[str, dict[str, float]] = collections.defaultdict(dict)
    # One untimed compile and mask first: the first compile of the process imports Lark's reader and
    # makes per-process tables (~15-20 ms), which landed on whichever arm ran first.
    warm = compile('start: "a"' if args.grammars else JsonSchema({"type": "string"}), vocab)
    warm.fill_mask(warm.start(), row)
    for f in (own or {}).values():
        f.snapshot()
    done = 0
    # (each pass takes the first --schemas schemas that compile: the passes were one list of all
    # inputs repeated, cut at schemas * reps, so --reps 3 ran ~2.8 passes over every input)
    per_rep = collections.Counter()
    for rep, (name, schema, ids) in [(r, x) for r in range(args.reps) for x in inputs]:
        if per_rep[rep] >= args.schemas and not args.grammars:
            continue
        if not args.grammars and not own:  # (with --carry each arm keeps its own)
            fresh.snapshot()
        order = ["off", "on"] if done % 2 == 0 else ["on", "off"]
        for arm in order:
            if args.grammars:
                compile_mod.clear_caches()
            else:
                (own[arm] if own else fresh)._restore()
            arms[arm]()
            compile_mod.COMPILED.clear()
            t0 = time.perf_counter()
            try:
                c = compile(schema if args.grammars else JsonSchema(schema, closed_objects=False), vocab)
            except Exception:  # noqa: BLE001 - a refused schema (both arms alike)
                break
            s, total = c.start(), 0.0
            compiles[arm][name] = compiles[arm].get(name, 0.0) + time.perf_counter() - t0
            for i in range(len(ids) + 1):
                t0 = time.perf_counter()
                try:
                    c.fill_mask(s, row)
                except GrammarBudgetError:  # (grammars) the default bound ends this arm's document
                    budget[arm] += 1
                    total = None
                    break
                dt = time.perf_counter() - t0
                masks[arm].append(dt)
                total += dt
                if i < len(ids):
                    try:
                        s = c.advance(s, ids[i])
                    except GrammarBudgetError:
                        budget[arm] += 1
                        total = None
                        break
                    if s is None:
                        break
            if own:
                own[arm].snapshot()  # what this arm's next input starts from
            if total is not None:  # (the ratio compares documents both arms finished)
                per[arm][name] = per[arm].get(name, 0.0) + total
        else:
            done += 1
            per_rep[rep] += 1
        arms["on"]()
    label = {"off": f"with {args.switch}" if args.set else f"without {args.switch}", "on": "as it is"}
    for arm in ("off", "on"):
        a = np.sort(np.array(masks[arm])) * 1e3
        print(f"{label[arm]:>22s}: {len(a)} masks, sum {a.sum():.1f} ms, p99 {a[int(.99 * len(a))]:.3f} ms, "
              f"over 1 ms {(a > 1).sum()}, longest {a[-1]:.1f} ms, documents ended at the work bound {budget[arm]}")
    common = [n for n in per["off"] if n in per["on"]]
    r = np.array([per["on"][n] / per["off"][n] for n in common])
    print(f"per-{'document' if args.grammars else 'schema'} mask sum, as it is / without: median {np.median(r):.3f} (p10 {np.percentile(r, 10):.3f}, "
          f"p90 {np.percentile(r, 90):.3f}) over {len(common)} {'documents' if args.grammars else 'schemas'}")
    both = [n for n in compiles["off"] if n in compiles["on"]]
    for arm in ("off", "on"):
        a = np.array([compiles[arm][n] for n in both]) * 1e3
        print(f"{label[arm]:>22s}: {len(a)} compiles, sum {a.sum():.1f} ms, median {np.median(a):.2f} ms")
    r = np.array([compiles["on"][n] / compiles["off"][n] for n in both])
    print(f"per-input compile, as it is / without: median {np.median(r):.3f} (p10 {np.percentile(r, 10):.3f}, "
          f"p90 {np.percentile(r, 90):.3f})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"switch": args.switch, "masks": masks, "per_schema": per, "compiles": compiles}, f)


if __name__ == "__main__":
    main()
