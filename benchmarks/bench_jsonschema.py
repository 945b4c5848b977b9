"""JSON Schema coverage and exactness: trellis vs xgrammar vs llguidance, same instances, one run.

Sources: JSON-Schema-Test-Suite draft4, draft7 and draft2020-12 (top-level files of each folder, each
root schema given its folder's ``$schema`` so every engine may apply that draft's semantics; MIT) and maskbench (2,778 real-world
schemas with valid/invalid instances; guidance-ai/jsonschemabench), under ../shared/data (see its
README.md). For every schema each engine compiles it (or refuses it: an error, or a compile past
``--timeout``); for compiled ones every instance is serialised (compact ``json.dumps``; plus
``indent=2`` with ``--whitespace flexible``), keys in schema order (``order_keys``: all three
engines fix the declared order), tokenised with Gemma 3 270M's tokenizer and fed token by token;
a valid instance must be accepted with EOS allowed at the end, an invalid one rejected.

Engine options: trellis ``JsonSchema(schema, whitespace=..., closed_objects=False)`` (and
``format_assertion=False`` for the suite's format.json, which tests the annotation default)
(additionalProperties as the spec says, not the generation default that closes objects; ``precompute=False``: only ``advance`` is used); xgrammar ``compile_json_schema(...,
strict_mode=False)`` (the spec's additionalProperties) with ``any_whitespace`` and separators to
match; llguidance ``grammar_from_json_schema`` with ``whitespace_flexible`` and "," ":" separators.
Each (schema, engine) runs in a forked child, so a pathological compile cannot hang the run: past
``--timeout`` seconds it is killed and counted as refused ("timeout").

    python benchmarks/bench_jsonschema.py --limit 30
    python benchmarks/bench_jsonschema.py --only Github_easy --out results.json

Prints, per source (maskbench file-name prefix, or JSON-Schema-Test-Suite) and engine: schemas,
% compiled, % valid accepted, % invalid rejected (over compiled schemas), compile seconds
(median / p95 over compiled schemas), then trellis' most common refusal reasons and a one-line
summary. Do not compare timings taken on a busy machine.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))
SUITE = os.path.join(DATA, "JSON-Schema-Test-Suite", "tests", "draft2020-12")
MASKBENCH = os.path.join(DATA, "maskbench")
ENGINES = ("trellis", "xgrammar", "llguidance")


SUITE_ROOT = os.path.dirname(SUITE)
# The suite's folders and the draft each one is written for (its cases carry no "$schema": the
# folder says which draft's semantics they test, so the bench adds it to each root schema).
SUITE_DRAFTS = {"draft4": "http://json-schema.org/draft-04/schema#",
                "draft7": "http://json-schema.org/draft-07/schema#",
                "draft2020-12": "https://json-schema.org/draft/2020-12/schema"}


def source_of(path: str) -> str:
    if path.startswith(SUITE_ROOT):
        return "JSON-Schema-Test-Suite/" + os.path.basename(os.path.dirname(path))
    name = os.path.basename(path)
    if name.startswith(("Github_", "BFCL_")):
        return "_".join(name.split("---")[0].split("_")[:2])
    return name.split("---")[0].split("_")[0]


def load_cases(limit: int | None, only: str | None, sources: str) -> list[dict]:
    """[{source, name, schema, tests}], interleaved across sources so --limit takes a mix."""
    by_source: dict[str, list[dict]] = defaultdict(list)
    for folder, uri in SUITE_DRAFTS.items() if sources in ("all", "suite") else ():
        for fn in sorted(glob.glob(os.path.join(SUITE_ROOT, folder, "*.json"))):
            for i, case in enumerate(json.load(open(fn, encoding="utf-8"))):
                schema = case["schema"]
                if isinstance(schema, dict) and "$schema" not in schema:
                    schema = {"$schema": uri, **schema}
                # format.json tests each draft's default, format as an annotation (the suite's
                # optional/format files test the assertion): trellis asserts formats unless told
                by_source[source_of(fn)].append({"source": source_of(fn), "name": f"{folder}/{os.path.basename(fn)}#{i}",
                                                 "schema": schema, "tests": case["tests"],
                                                 "format_assertion": os.path.basename(fn) != "format.json"})
    if sources in ("all", "maskbench") and os.path.isdir(MASKBENCH):
        for fn in sorted(glob.glob(os.path.join(MASKBENCH, "*.json"))):
            d = json.load(open(fn, encoding="utf-8"))
            by_source[source_of(fn)].append({"source": source_of(fn), "name": os.path.basename(fn),
                                             "schema": d["schema"], "tests": d.get("tests", [])})
    if only:
        pre = tuple(only.split(","))  # several prefixes, comma-separated
        by_source = {k: v for k, v in by_source.items() if k.startswith(pre) or any(
            c["name"].startswith(pre) for c in v)}
        by_source = {k: [c for c in v if k.startswith(pre) or c["name"].startswith(pre)] for k, v in by_source.items()}
    cases, lists = [], [v for _, v in sorted(by_source.items())]
    for i in range(max(map(len, lists), default=0)):
        cases += [v[i] for v in lists if i < len(v)]
    return cases[:limit] if limit else cases


# ----------------------------------------------------------------------------- engines
# Each returns (compile seconds, accepts(ids) -> bool); raising means "refused".


def trellis_engine(schema: Any, ctx: dict) -> tuple[float, Callable[[list[int]], bool]]:
    from trellis.constrain import JsonSchema, advance_many, compile

    t0 = time.perf_counter()
    c = compile(JsonSchema(schema, whitespace=ctx["whitespace"], closed_objects=False,
                           format_assertion=ctx.get("format_assertion", True)), ctx["vocab"], cache=False,
                precompute=False)
    dt = time.perf_counter() - t0

    def accepts(ids: list[int]) -> bool:
        s = advance_many(c, c.start(), ids)
        return s is not None and c.is_accepting(s)

    return dt, accepts


def xgrammar_engine(schema: Any, ctx: dict) -> tuple[float, Callable[[list[int]], bool]]:
    import xgrammar as xgr

    if "xgr_compiler" not in ctx:
        info = xgr.TokenizerInfo.from_huggingface(ctx["tokenizer"], vocab_size=len(ctx["vocab"]),
                                                  stop_token_ids=sorted(ctx["vocab"].eos))
        ctx["xgr_compiler"] = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    flexible = ctx["whitespace"] == "flexible"
    t0 = time.perf_counter()
    compiled = ctx["xgr_compiler"].compile_json_schema(
        json.dumps(schema), any_whitespace=flexible, separators=None if flexible else (",", ":"), strict_mode=False)
    dt = time.perf_counter() - t0
    eos = min(ctx["vocab"].eos)

    def accepts(ids: list[int]) -> bool:
        m = xgr.GrammarMatcher(compiled)
        return all(m.accept_token(t) for t in ids) and m.accept_token(eos) and m.is_terminated()

    return dt, accepts


def llguidance_engine(schema: Any, ctx: dict) -> tuple[float, Callable[[list[int]], bool]]:
    import llguidance
    import llguidance.hf

    if "llg_tokenizer" not in ctx:
        ctx["llg_tokenizer"] = llguidance.hf.from_tokenizer(ctx["tokenizer"], n_vocab=len(ctx["vocab"]),
                                                            eos_token=min(ctx["vocab"].eos))
    flexible = ctx["whitespace"] == "flexible"
    opts = {"whitespace_flexible": flexible, **({} if flexible else {"item_separator": ",", "key_separator": ":"})}
    t0 = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=opts)
    first = llguidance.LLMatcher(ctx["llg_tokenizer"], grammar, log_level=0)
    if first.is_error():
        raise ValueError(first.get_error())
    dt = time.perf_counter() - t0

    def accepts(ids: list[int]) -> bool:
        m = llguidance.LLMatcher(ctx["llg_tokenizer"], grammar, log_level=0)
        for t in ids:
            if m.validate_tokens([t]) != 1 or not m.consume_token(t):
                return False
        return bool(m.is_accepting())

    return dt, accepts


ENGINE_FNS = {"trellis": trellis_engine, "xgrammar": xgrammar_engine, "llguidance": llguidance_engine}


def instances(case: dict, ctx: dict) -> list[tuple[bool, list[int]]]:
    from trellis.constrain.frontends.json_schema import order_keys

    out = []
    for t in case["tests"]:
        try:
            data = order_keys(case["schema"], t["data"])
        except Exception:  # noqa: BLE001 - a schema the helper cannot read: keep the given order
            data = t["data"]
        texts = [json.dumps(data, separators=(",", ":"), ensure_ascii=False)]
        if ctx["whitespace"] == "flexible":
            texts.append(json.dumps(data, indent=2, ensure_ascii=False))
        for text in texts:
            out.append((bool(t["valid"]), ctx["tokenizer"].encode(text, add_special_tokens=False)))
    return out


def run_one(engine: str, case: dict, ctx: dict, items: list, conn: Any) -> None:
    """Child process: compile, report, then check every instance and report the verdicts."""
    try:
        dt, accepts = ENGINE_FNS[engine](case["schema"], {**ctx, "format_assertion": case.get("format_assertion", True)})
    except BaseException as e:  # noqa: BLE001 - any failure to compile is a refusal
        msg = " ".join(str(e).split())[:160] or type(e).__name__
        conn.send(("refused", f"{type(e).__name__}: {msg}"))
        return
    conn.send(("compiled", dt))
    verdicts = []
    for valid, ids in items:
        try:
            verdicts.append((valid, bool(accepts(ids))))
        except Exception:  # noqa: BLE001 - a matcher error on an instance counts as rejection
            verdicts.append((valid, False))
    conn.send(("verdicts", verdicts))


def measure(engine: str, case: dict, ctx: dict, items: list, timeout: float) -> dict:
    import multiprocessing as mp

    parent, child = mp.Pipe(duplex=False)
    p = mp.get_context("fork").Process(target=run_one, args=(engine, case, ctx, items, child), daemon=True)
    p.start()
    child.close()
    res: dict = {}
    try:
        if not parent.poll(timeout):
            res = {"status": "refused", "reason": f"timeout ({timeout:g} s)"}
        else:
            kind, val = parent.recv()
            if kind == "refused":
                res = {"status": "refused", "reason": val}
            else:
                res = {"status": "compiled", "seconds": val}
                if parent.poll(max(60.0, 0.5 * len(items))):
                    res["verdicts"] = parent.recv()[1]
                else:
                    res["verdicts"] = [(v, False) for v, _ in items]
                    res["check_timeout"] = True
    except EOFError:  # the child died (e.g. out of memory)
        res = {"status": "refused", "reason": f"crashed (exit code {p.exitcode})"}
    finally:
        if p.is_alive():
            p.kill()
        p.join(5)
    return res


# ----------------------------------------------------------------------------- report


def pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:5.1f}" if b else "    -"


def summarise(rows: list[dict], engines: list[str]) -> dict:
    agg: dict = defaultdict(lambda: {"schemas": 0, "compiled": 0, "valid": 0, "valid_ok": 0, "invalid": 0,
                                     "invalid_ok": 0, "times": []})
    for r in rows:
        for e in engines:
            res = r["engines"][e]
            for key in (r["source"], "ALL"):
                a = agg[(key, e)]
                a["schemas"] += 1
                if res["status"] != "compiled":
                    continue
                a["compiled"] += 1
                a["times"].append(res["seconds"])
                for valid, ok in res.get("verdicts", []):
                    a["valid" if valid else "invalid"] += 1
                    a["valid_ok" if valid else "invalid_ok"] += int(ok == valid)
    return agg


def print_report(rows: list[dict], engines: list[str]) -> None:
    agg = summarise(rows, engines)
    sources = sorted({k for k, _ in agg if k != "ALL"}) + ["ALL"]
    print(f"\n{'source':<24} {'engine':<11} {'schemas':>7} {'%comp':>6} {'%valid':>6} {'%inval':>6} "
          f"{'med s':>7} {'p95 s':>7}")
    for src in sources:
        for e in engines:
            a = agg[(src, e)]
            ts = sorted(a["times"])
            med = f"{statistics.median(ts):7.3f}" if ts else "      -"
            p95 = f"{ts[min(len(ts) - 1, int(0.95 * len(ts)))]:7.3f}" if ts else "      -"
            print(f"{src:<24} {e:<11} {a['schemas']:>7} {pct(a['compiled'], a['schemas']):>6} "
                  f"{pct(a['valid_ok'], a['valid']):>6} {pct(a['invalid_ok'], a['invalid']):>6} {med} {p95}")
    if "trellis" in engines:
        reasons = Counter(r["engines"]["trellis"].get("reason", "")[:110] for r in rows
                          if r["engines"]["trellis"]["status"] != "compiled")
        print("\ntrellis refusals:")
        for reason, n in reasons.most_common(15):
            print(f"  {n:5d}  {reason}")
        wrong = [(r["name"], valid) for r in rows for valid, ok in r["engines"]["trellis"].get("verdicts", [])
                 if ok != valid]
        if wrong:
            print(f"\ntrellis wrong verdicts ({len(wrong)}; valid=True means a valid instance rejected):")
            for name, valid in wrong[:20]:
                print(f"  {name} valid={valid}")
    parts = []
    for e in engines:
        a = agg[("ALL", e)]
        ts = sorted(a["times"])
        parts.append(f"{e}: {pct(a['compiled'], a['schemas']).strip()}% compiled, "
                     f"{pct(a['valid_ok'], a['valid']).strip()}% valid accepted, "
                     f"{pct(a['invalid_ok'], a['invalid']).strip()}% invalid rejected, median compile "
                     f"{statistics.median(ts) if ts else float('nan'):.3f} s")
    real = [r for r in rows if not r["source"].startswith(("JSON-Schema-Test-Suite", "Handwritten", "Synthesized"))]
    if real:  # issue 27's coverage target: the real-world maskbench sources
        print("\nreal-world sources (maskbench but Handwritten/Synthesized), compiled: " + ", ".join(
            f"{e} {sum(r['engines'][e]['status'] == 'compiled' for r in real)}/{len(real)}" for e in engines))
    print(f"\nSUMMARY ({len(rows)} schemas): " + " | ".join(parts))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="at most N schemas (a mix of all sources)")
    ap.add_argument("--only", default=None, help="sources (or file names) starting with PREFIX (several: comma-separated)")
    ap.add_argument("--sources", choices=("all", "suite", "maskbench"), default="all")
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated subset of " + ",".join(ENGINES))
    ap.add_argument("--whitespace", choices=("compact", "flexible"), default="compact")
    ap.add_argument("--timeout", type=float, default=60.0, help="per-schema compile limit in seconds")
    ap.add_argument("--out", default=None, help="write per-schema results as JSON")
    ap.add_argument("--compile-only", action="store_true",
                    help="time compiles only, no instance checks (a quick quiet-machine timing run)")
    args = ap.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        ap.error(f"unknown engines {bad}")

    import torch

    torch.set_num_threads(1)
    from trellis.models import load

    cases = load_cases(args.limit, args.only, args.sources)
    if not cases:
        print(f"no schemas found under {DATA}", file=sys.stderr)
        return 1
    handle = load()
    ctx = {"tokenizer": handle.tokenizer, "vocab": handle.vocab, "whitespace": args.whitespace}
    for e in engines:  # build tokenizer views / token tables once, before forking
        try:
            ENGINE_FNS[e]({"type": "integer"}, ctx)
        except ImportError as err:
            print(f"{e} unavailable: {err}", file=sys.stderr)
            return 1
    rows = []
    t_start = time.time()
    for k, case in enumerate(cases):
        items = [] if args.compile_only else instances(case, ctx)
        row = {"source": case["source"], "name": case["name"], "engines": {}}
        for e in engines:
            row["engines"][e] = measure(e, case, ctx, items, args.timeout)
        rows.append(row)
        status = " ".join(f"{e}={'ok' if row['engines'][e]['status'] == 'compiled' else 'refused'}" for e in engines)
        print(f"[{k + 1}/{len(cases)} {time.time() - t_start:6.0f}s] {case['name'][:60]:<60} {status}", flush=True)
    print_report(rows, engines)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"whitespace": args.whitespace, "timeout": args.timeout, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
