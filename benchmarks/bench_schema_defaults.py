"""JSON Schema defaults by measurement (issue 22): whitespace x closed_objects on Gemma 3 270M.

Question: which defaults should ``JsonSchema`` have? ``whitespace="compact"`` (no whitespace at
all: fewest tokens, one spelling per value) forbids the ``": "`` and ``", "`` a model has seen
most, so after ``"age":`` it must write a digit where it wanted a space, and may get the value
wrong; ``closed_objects=False`` (the spec's reading of a missing ``additionalProperties``) lets
a model invent keys. This script runs the four combinations

    whitespace in {compact, flexible}  x  closed_objects in {False (open), True (closed)}

with the embedded Gemma 3 270M (base), greedy, ``finish_in_budget=False`` (a budget-cut output
is not steered to close; it counts as invalid and is reported), on two sets of maskbench schemas
(``../shared/data/maskbench``, real-world schemas with valid instances). Budget per item:
``min(--max-new-tokens 256, 2 x the reference's tokens as json.dumps writes it + 32)``, so an
output cut by it is more than twice as long as the reference in its most verbose one-line
spelling: in practice a loop (repeated keys, ever deeper free-form objects); a flat 256 spent
most of the run on such loops.

A fifth, experimental run, ``spaced/closed`` (``--no-spaced`` skips it), is not a ``JsonSchema``
option: the compact/closed grammar with its two separator terminals respelled ``", "`` and
``": "``, i.e. exactly ``json.dumps``'s default spelling (one spelling per value, as compact, but
the one the model prefers); passed to ``generate`` as a ``SchemaGrammar``. It tests whether a
third ``whitespace`` mode would beat both.

(a) BFCL_*: function-calling argument schemas of the Berkeley Function Calling Leaderboard; the
    valid test is the ground-truth call ``{"function.name": {args}}``. All BFCL files that compile
    in all four combinations, or ``--limit N`` of them: a deterministic subset, round-robin over
    the BFCL categories (java, javascript, multiple, parallel, parallel_multiple, simple, sql),
    each category's files in a ``random.Random(seed)`` shuffle of their sorted names.
(b) ``--extraction`` (default 50) non-BFCL schemas, round-robin over the maskbench families
    (Github_easy/medium/hard/trivial, Glaiveai2K, JME, JsonSchemaStore, Kubernetes, MCPspec,
    Snowplow, Synthesized, WashingtonPost; sorted family names, each family's sorted files in a
    seeded shuffle), each with a valid test instance that is a small JSON object: 2-8 leaves,
    depth <= 3, at least two scalar top-level fields, strings <= 80 characters without newlines,
    at most 400 characters of JSON; the first such valid test of the file is the reference.

A schema is used only if (1) all four ``JsonSchema`` combinations (and the spaced grammar)
compile for Gemma's vocabulary (``SchemaError`` or any other refusal in any combination: skipped
and counted, by the first combination that failed), and (2) the
reference instance validates with the ``jsonschema`` package (counted otherwise).

Prompt (identical for all combinations; the reference's JSON is never shown). The reference
(keys in schema order, ``order_keys``) is described in text: ``The record has k1 v1, k2 v2.``;
a nested object is ``k (a 1, b 2)``, a list ``k (list: x; y)``, empty ones ``(empty object)`` /
``(empty list)``; numbers as JSON writes them, booleans ``true``/``false``, null ``null``;
strings raw, quoted JSON-style only when empty, padded, or containing one of ``, ; ( ) "``.
A base model needs an example of the task, so two few-shot records with toy schemas unrelated to
maskbench come first, their JSON written by ``json.dumps`` with its default separators (``", "``,
``": "``: the spelling most JSON in the wild has):

    Write each record as one line of JSON with exactly the fields given.

    Record: The record has title The Old Man and the Sea, author Ernest Hemingway, ...
    JSON:
    {"title": "The Old Man and the Sea", "author": "Ernest Hemingway", ...}

    Record: <description of the reference>
    JSON:
    <generation under the schema>

Measures per combination and set:

* valid %: the output parses with ``json.loads`` AND validates with ``jsonschema`` (the
  schema's draft; formats not asserted); budget-cut outputs count as invalid ("cut" column);
  "fin-invalid" counts finished outputs that still fail (a trellis exactness bug if nonzero).
* field exact-match %: every leaf of the reference (scalars, empty containers) is looked up at
  the same JSON path in the output; it matches when equal (strings exactly, numbers by value,
  booleans/null by type); pooled over all reference leaves of the set (an unparsable output
  matches none of its leaves); "numbers" / "strings": the same over number / string leaves only.
  "items all-match" is the share of items with every leaf right.
* invented keys: keys the output has at a path where the reference's object does not
  (a key under an invented key is not counted again); "undeclared" is the part of those the
  schema does not declare there (not in ``properties`` nor matching ``patternProperties`` of the
  local schema, following local ``$ref`` and ``allOf``/``anyOf``/``oneOf`` branches): only
  open objects admit these.
* mean new tokens per output, mean and median wall seconds per ``generate`` call (prompt prefix
  reused from the KV cache, schema compile included: its grammar tables are cached after the
  filter pass). Seconds depend on the machine's load; tokens do not.

Each item runs all its combinations back to back, so a slow spell of the shared machine hits
all alike. ``torch.set_num_threads(--threads)`` (default 2), with ``OMP_WAIT_POLICY=PASSIVE``
unless set (spinning OpenMP threads on a shared 2-core machine were ~10x slower).

    python benchmarks/bench_schema_defaults.py                    # all BFCL + 50 extraction
    python benchmarks/bench_schema_defaults.py --limit 60         # 60 BFCL + 50 extraction
    python benchmarks/bench_schema_defaults.py --limit 4 --extraction 4   # a smoke run

Prints a markdown table per set and pooled, and writes every item's outputs and scores to
``--out`` (default /tmp/schema_defaults.json), rewritten after every item.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import re
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
# Idle OpenMP threads sleep instead of spinning: on a 2-core machine where another process holds a
# core, 2 spinning threads made Gemma ~10x slower (40 tokens: 44 s, vs 4.9 s with PASSIVE and 4.7 s
# with 1 thread); on a quiet machine it costs nothing measurable. Must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
MASKBENCH = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data", "maskbench"))
COMBOS = (("compact", False), ("compact", True), ("flexible", False), ("flexible", True))
SPACED = ("spaced", True)  # not a JsonSchema option: the compact/closed grammar with ", " and ": " (see docstring)

INSTRUCTION = "Write each record as one line of JSON with exactly the fields given."
FEW_SHOT = (
    {"title": "The Old Man and the Sea", "author": "Ernest Hemingway", "year": 1952, "in_print": True},
    {"order_id": "A-1042", "customer": {"name": "Li Wei", "vip": False},
     "items": [{"sku": "X12", "qty": 2}, {"sku": "B7", "qty": 1}], "total": 31.5, "note": None},
)


def combo_name(ws: str, closed: bool) -> str:
    return f"{ws}/{'closed' if closed else 'open'}"


def grammar_for(schema: Any, ws: str, closed: bool) -> Any:
    """What ``generate`` gets: ``JsonSchema(schema, whitespace=ws, closed_objects=closed)``, or for
    ``ws == "spaced"`` the compact grammar with its separator terminals respelled as
    ``json.dumps`` writes them (``COMMA: ", "``, ``COLON: ": "``): one spelling per value, the
    model's own."""
    from trellis.constrain.frontends.json_schema import JsonSchema

    if ws != "spaced":
        return JsonSchema(schema, whitespace=ws, closed_objects=closed)
    from trellis.constrain.compile import SchemaGrammar

    text = JsonSchema(schema, whitespace="compact", closed_objects=closed).to_lark("earley")  # Earley-compiled
    lines = text.split("\n")
    for old, new in (('COMMA: ","', 'COMMA: ", "'), ('COLON: ":"', 'COLON: ": "')):
        if lines.count(old) != 1:
            raise ValueError(f"spaced variant: no single {old!r} line in the compact grammar")
        lines[lines.index(old)] = new
    return SchemaGrammar("\n".join(lines))


# ----------------------------------------------------------------------------- prompt


def _scalar(v: Any) -> str:
    if isinstance(v, str):
        if not v or v != v.strip() or any(c in v for c in ',;()"'):
            return json.dumps(v, ensure_ascii=False)
        return v
    return json.dumps(v, ensure_ascii=False)  # numbers, true/false, null


def describe_value(v: Any) -> str:
    if isinstance(v, dict):
        return "(" + ", ".join(f"{k} {describe_value(x)}" for k, x in v.items()) + ")" if v else "(empty object)"
    if isinstance(v, list):
        return "(list: " + "; ".join(describe_value(x) for x in v) + ")" if v else "(empty list)"
    return _scalar(v)


def describe(instance: dict) -> str:
    if not instance:
        return "The record is empty."
    return "The record has " + ", ".join(f"{k} {describe_value(v)}" for k, v in instance.items()) + "."


def build_prompt(instance: dict) -> str:
    parts = [INSTRUCTION, ""]
    for ex in FEW_SHOT:
        parts += [f"Record: {describe(ex)}", "JSON:", json.dumps(ex, ensure_ascii=False), ""]
    parts += [f"Record: {describe(instance)}", "JSON:", ""]
    return "\n".join(parts)


# ----------------------------------------------------------------------------- scoring


def _leaves(v: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    if isinstance(v, dict) and v:
        return [lf for k, x in v.items() for lf in _leaves(x, path + (k,))]
    if isinstance(v, list) and v:
        return [lf for i, x in enumerate(v) for lf in _leaves(x, path + (i,))]
    return [(path, v)]


_MISSING = object()


def _at(v: Any, path: tuple) -> Any:
    for p in path:
        if isinstance(p, str) and isinstance(v, dict) and p in v:
            v = v[p]
        elif isinstance(p, int) and isinstance(v, list) and p < len(v):
            v = v[p]
        else:
            return _MISSING
    return v


def leaf_type(v: Any) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return "number"
    return "string" if isinstance(v, str) else "other"


def _same(a: Any, b: Any) -> bool:
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool):
        return a == b
    return type(a) is type(b) and a == b


class SchemaView:
    """Which keys the schema declares at a place (approximate: local ``$ref`` only)."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def _resolve(self, s: Any, seen: frozenset = frozenset()) -> list[dict]:
        if not isinstance(s, dict):
            return []
        out = [s]
        ref = s.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and ref not in seen:
            node: Any = self.root
            try:
                for part in [p for p in ref[1:].split("/") if p]:
                    part = part.replace("~1", "/").replace("~0", "~")
                    node = node[int(part)] if isinstance(node, list) else node[part]
                out += self._resolve(node, seen | {ref})
            except (KeyError, IndexError, ValueError, TypeError):
                pass
        for kw in ("allOf", "anyOf", "oneOf"):
            for sub in s.get(kw, []) if isinstance(s.get(kw), list) else []:
                out += self._resolve(sub, seen)
        for kw in ("then", "else"):
            out += self._resolve(s.get(kw), seen)
        return out

    def declares(self, nodes: list[dict], key: str) -> bool:
        for n in nodes:
            if isinstance(n.get("properties"), dict) and key in n["properties"]:
                return True
            for pat in n.get("patternProperties", {}) if isinstance(n.get("patternProperties"), dict) else {}:
                try:
                    if re.search(pat, key):
                        return True
                except re.error:
                    return True
        return False

    def child(self, nodes: list[dict], step: str | int) -> list[dict]:
        out: list[dict] = []
        for n in nodes:
            if isinstance(step, str):
                props = n.get("properties") if isinstance(n.get("properties"), dict) else {}
                if step in props:
                    out += self._resolve(props[step])
                for pat, sub in (n.get("patternProperties") or {}).items() if isinstance(
                        n.get("patternProperties"), dict) else ():
                    try:
                        if re.search(pat, step):
                            out += self._resolve(sub)
                    except re.error:
                        pass
                if isinstance(n.get("additionalProperties"), dict):
                    out += self._resolve(n["additionalProperties"])
            else:
                pre = n.get("prefixItems") if isinstance(n.get("prefixItems"), list) else (
                    n.get("items") if isinstance(n.get("items"), list) else [])
                if step < len(pre):
                    out += self._resolve(pre[step])
                elif isinstance(n.get("items"), dict):
                    out += self._resolve(n["items"])
                elif isinstance(n.get("additionalItems"), dict):
                    out += self._resolve(n["additionalItems"])
        return out


def invented_keys(out: Any, ref: Any, view: SchemaView, nodes: list[dict], path: tuple = ()
                  ) -> list[tuple[str, bool]]:
    """[(json path of an invented key, declared by the schema there?)]."""
    found: list[tuple[str, bool]] = []
    if isinstance(out, dict) and isinstance(ref, dict):
        for k, v in out.items():
            if k not in ref:
                found.append(("/".join(map(str, path + (k,))), view.declares(nodes, k)))
            else:
                found += invented_keys(v, ref[k], view, view.child(nodes, k), path + (k,))
    elif isinstance(out, list) and isinstance(ref, list):
        for i, (v, r) in enumerate(zip(out, ref)):
            found += invented_keys(v, r, view, view.child(nodes, i), path + (i,))
    elif isinstance(out, dict) and not isinstance(ref, dict):
        found += [("/".join(map(str, path + (k,))), view.declares(nodes, k)) for k in out]
    return found


def validator_for(schema: Any) -> Any:
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


def score(text: str, finished: bool, ref: Any, schema: Any, validator: Any) -> dict:
    r: dict[str, Any] = {"finished": finished, "parsed": False, "schema_valid": False}
    leaves = _leaves(ref)
    r["leaves"] = len(leaves)
    try:
        out = json.loads(text)
        r["parsed"] = True
    except (ValueError, TypeError):
        out = _MISSING
    if r["parsed"]:
        try:
            r["schema_valid"] = not any(True for _ in validator.iter_errors(out))
        except Exception as e:  # noqa: BLE001 - an unresolvable reference etc.
            r["validator_error"] = f"{type(e).__name__}: {e}"[:200]
    r["valid"] = bool(finished and r["parsed"] and r["schema_valid"])
    r["matched"] = 0 if out is _MISSING else sum(_same(_at(out, p), v) for p, v in leaves if _at(out, p) is not _MISSING)
    by_type: dict[str, list[int]] = {}
    for p, v in leaves:
        got = _MISSING if out is _MISSING else _at(out, p)
        t = leaf_type(v)
        by_type.setdefault(t, [0, 0])
        by_type[t][0] += int(got is not _MISSING and _same(got, v))
        by_type[t][1] += 1
    r["by_type"] = by_type
    r["wrong_leaves"] = [] if out is _MISSING else ["/".join(map(str, p)) for p, v in leaves
                                                    if not (_at(out, p) is not _MISSING and _same(_at(out, p), v))]
    if out is _MISSING:
        r["invented"], r["undeclared"] = 0, 0
    else:
        view = SchemaView(schema)
        inv = invented_keys(out, ref, view, view._resolve(schema))
        r["invented"] = len(inv)
        r["undeclared"] = sum(not declared for _, declared in inv)
        r["invented_paths"] = [p for p, _ in inv]
    return r


# ----------------------------------------------------------------------------- selection


def family(name: str) -> str:
    if name.startswith(("Github_", "BFCL_")):
        head = name.split("---")[0]
        if name.startswith("BFCL_"):
            return "BFCL_" + re.sub(r"_\d+\.json$", "", head)[5:]
        return "_".join(head.split("_")[:2])
    return name.split("---")[0].split("_")[0]


def _depth(v: Any) -> int:
    if isinstance(v, (dict, list)) and v:
        return 1 + max(_depth(x) for x in (v.values() if isinstance(v, dict) else v))
    return 0


def _short_strings(v: Any) -> bool:
    if isinstance(v, dict):
        return all(len(k) <= 40 for k in v) and all(_short_strings(x) for x in v.values())
    if isinstance(v, list):
        return all(_short_strings(x) for x in v)
    return not isinstance(v, str) or (len(v) <= 80 and "\n" not in v)


def small_record(x: Any) -> bool:
    return (isinstance(x, dict) and 2 <= len(_leaves(x)) <= 8 and _depth(x) <= 3 and _short_strings(x)
            and len(json.dumps(x)) <= 400 and sum(not isinstance(v, (dict, list)) for v in x.values()) >= 2)


def round_robin(names: list[str], seed: int) -> list[str]:
    by_fam: dict[str, list[str]] = defaultdict(list)
    for n in sorted(names):
        by_fam[family(n)].append(n)
    lists = []
    for fam in sorted(by_fam):
        lst = by_fam[fam]
        random.Random(f"{seed}:{fam}").shuffle(lst)
        lists.append(lst)
    out = []
    for i in range(max(map(len, lists), default=0)):
        out += [lst[i] for lst in lists if i < len(lst)]
    return out


# ----------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="BFCL schemas to run (default: all that compile)")
    ap.add_argument("--extraction", type=int, default=50, help="non-BFCL extraction schemas (default 50)")
    ap.add_argument("--max-new-tokens", type=int, default=256, help="cap of the per-item budget (default 256)")
    ap.add_argument("--budget-factor", type=float, default=2.0,
                    help="per-item budget: factor x the reference's tokens (json.dumps) + --budget-slack, capped")
    ap.add_argument("--budget-slack", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/schema_defaults.json")
    ap.add_argument("--data", default=MASKBENCH, help="maskbench directory (default: ../shared/data/maskbench)")
    ap.add_argument("--no-spaced", action="store_true", help="skip the fifth, experimental spaced/closed run")
    ap.add_argument("--report", metavar="JSON", help="only print the tables of an earlier run's --out file")
    args = ap.parse_args()
    data = args.data
    if args.report:
        print_report(json.load(open(args.report, encoding="utf-8")))
        return

    import torch

    torch.set_num_threads(args.threads)
    from trellis import generate, load
    from trellis.constrain import compile as compile_constraint
    from trellis.constrain.frontends.json_schema import order_keys

    combos = list(COMBOS) + ([] if args.no_spaced else [SPACED])
    gen_kwargs: dict[str, Any] = {}
    if "finish_in_budget" in inspect.signature(generate).parameters:
        gen_kwargs["finish_in_budget"] = False

    t_load = time.perf_counter()
    model = load()
    print(f"model loaded in {time.perf_counter() - t_load:.1f} s", file=sys.stderr)

    files = sorted(f for f in os.listdir(data) if f.endswith(".json") or "---" in f)
    skipped: dict[str, dict[str, list]] = {"bfcl": defaultdict(list), "extraction": defaultdict(list)}

    def admit(name: str, set_name: str, pick) -> dict | None:
        d = json.load(open(os.path.join(data, name), encoding="utf-8"))
        ref = pick(d)
        if ref is None:
            return None
        try:
            validator = validator_for(d["schema"])
            if any(True for _ in validator.iter_errors(ref)):
                skipped[set_name]["reference invalid (jsonschema)"].append(name)
                return None
        except Exception as e:  # noqa: BLE001
            skipped[set_name][f"jsonschema: {type(e).__name__}"].append(name)
            return None
        compile_s = {}
        for ws, closed in combos:
            t0 = time.perf_counter()
            try:
                compile_constraint(grammar_for(d["schema"], ws, closed), model.vocab)
            except Exception as e:  # noqa: BLE001 - SchemaError, GrammarError, too large ...
                skipped[set_name][f"{combo_name(ws, closed)}: {type(e).__name__}"].append(name)
                return None
            compile_s[combo_name(ws, closed)] = time.perf_counter() - t0
        try:
            ref = order_keys(d["schema"], ref)
        except Exception:  # noqa: BLE001
            pass
        return {"set": set_name, "name": name, "family": family(name), "schema": d["schema"], "reference": ref,
                "validator": validator, "compile_s": compile_s}

    def first_valid(d: dict) -> Any:
        return next((t["data"] for t in d.get("tests", []) if t.get("valid")), None)

    def first_small(d: dict) -> Any:
        return next((t["data"] for t in d.get("tests", []) if t.get("valid") and small_record(t["data"])), None)

    t_sel = time.perf_counter()
    items: list[dict] = []
    bfcl = [f for f in files if f.startswith("BFCL_")]
    admitted = [it for it in (admit(name, "bfcl", first_valid) for name in round_robin(bfcl, args.seed)) if it]
    print(f"BFCL: {len(admitted)} of {len(bfcl)} files compile in all four combinations", file=sys.stderr)
    items += admitted[:args.limit] if args.limit is not None else admitted  # --limit: the first N, round-robin
    n_bfcl = len(items)
    others = [f for f in files if not f.startswith("BFCL_")]
    n_ext = 0
    for name in round_robin(others, args.seed):
        if n_ext >= args.extraction:
            break
        d = json.load(open(os.path.join(data, name), encoding="utf-8"))
        if first_small(d) is None:
            continue
        it = admit(name, "extraction", first_small)
        if it is not None:
            items.append(it)
            n_ext += 1
    print(f"selected {n_bfcl} BFCL + {n_ext} extraction schemas in {time.perf_counter() - t_sel:.1f} s; skipped: "
          + json.dumps({k: {r: len(v) for r, v in s.items()} for k, s in skipped.items()}), file=sys.stderr)

    # Extraction items first, so a cut-short run still has the required set.
    items.sort(key=lambda it: it["set"] != "extraction")
    records: list[dict] = []
    t_run = time.perf_counter()
    for i, it in enumerate(items):
        prompt = build_prompt(it["reference"])
        ref_tokens = len(model.tokenizer(json.dumps(it["reference"], ensure_ascii=False),
                                         add_special_tokens=False).input_ids)
        budget = min(args.max_new_tokens, int(args.budget_factor * ref_tokens) + args.budget_slack)
        rec = {k: it[k] for k in ("set", "name", "family", "reference", "compile_s")}
        rec["reference_tokens"], rec["budget"] = ref_tokens, budget
        rec["prompt_tail"] = prompt.split("\n\n")[-1]
        rec["results"] = {}
        for ws, closed in combos:
            t0 = time.perf_counter()
            g = grammar_for(it["schema"], ws, closed)
            kw = {"schema": g} if ws != "spaced" else {"grammar": g}
            res = generate(model, prompt, max_new_tokens=budget, **kw, **gen_kwargs)
            wall = time.perf_counter() - t0
            r = score(res.text, res.finished, it["reference"], it["schema"], it["validator"])
            r.update(text=res.text, new_tokens=res.stats.new_tokens, seconds=wall, decode_seconds=res.stats.seconds)
            rec["results"][combo_name(ws, closed)] = r
        records.append(rec)
        done = time.perf_counter() - t_run
        line = " ".join(f"{c.split('/')[0][0]}{c.split('/')[1][0]}:{'V' if r['valid'] else ('C' if not r['finished'] else 'x')}"
                        f"{r['matched']}/{r['leaves']}+{r['invented']} {r['new_tokens']}t"
                        for c, r in rec["results"].items())
        print(f"[{i + 1}/{len(items)} {done:.0f}s] {it['set'][:3]} {it['name'][:48]:48s} {line}", file=sys.stderr)
        run_s = time.perf_counter() - t_run  # the file is rewritten after every item
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "gen_kwargs": gen_kwargs, "bfcl_files": len(bfcl),
                       "bfcl_compiled_all_four": len(admitted), "bfcl_selected": n_bfcl,
                       "extraction_selected": n_ext, "run_seconds": run_s,
                       "combos": [combo_name(*c) for c in combos], "skipped": skipped, "items": records},
                      f, indent=1, ensure_ascii=False)
    print_report(json.load(open(args.out, encoding="utf-8")))
    print(f"raw per-item results: {args.out}")


def print_report(d: dict) -> None:
    records, a = d["items"], d["args"]
    print(f"\n{len(records)} items x {len(d['combos'])} combinations in {d.get('run_seconds', 0):.0f} s "
          f"(budget per item: min({a['max_new_tokens']}, {a['budget_factor']:g} x reference tokens + "
          f"{a['budget_slack']}); threads={a['threads']}; generate kwargs {d['gen_kwargs']})\n")
    for set_name in ("bfcl", "extraction", None):
        recs = [r for r in records if set_name is None or r["set"] == set_name]
        if recs:
            print(table(recs, d["combos"], {"bfcl": "(a) BFCL", "extraction": "(b) extraction", None: "(a)+(b) pooled"}[set_name]))
    print("skipped (refused by trellis, keyed by the first combination that refused; or reference rejected by "
          "jsonschema): "
          + json.dumps({k: {r: len(v) for r, v in s.items()} for k, s in d["skipped"].items()}))
    print(f"BFCL files: {d.get('bfcl_files')}, compiled in all four: {d.get('bfcl_compiled_all_four')}, "
          f"run: {sum(r['set'] == 'bfcl' for r in records)}; extraction run: "
          f"{sum(r['set'] == 'extraction' for r in records)}")


def _pct(rs: list[dict], t: str) -> str:
    hit = sum(r["by_type"].get(t, [0, 0])[0] for r in rs)
    tot = sum(r["by_type"].get(t, [0, 0])[1] for r in rs)
    return f"{100 * hit / tot:.1f} (of {tot})" if tot else "-"


def table(recs: list[dict], combos: list[str], title: str) -> str:
    lines = [f"### {title}: {len(recs)} schemas, {sum(len(_leaves(r['reference'])) for r in recs)} reference leaves",
             "",
             "| combination | valid % | cut | fin-invalid | field exact-match % | numbers % | strings % | items all-match % | invented keys "
             "(undeclared) | items w/ invented | mean tokens | mean s | median s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in combos:
        rs = [r["results"][c] for r in recs]
        n = len(rs)
        leaves = sum(r["leaves"] for r in rs)
        lines.append(
            f"| {c} | {100 * sum(r['valid'] for r in rs) / n:.1f} | {sum(not r['finished'] for r in rs)} "
            f"| {sum(r['finished'] and not r['valid'] for r in rs)} "
            f"| {100 * sum(r['matched'] for r in rs) / max(leaves, 1):.1f} "
            f"| {_pct(rs, 'number')} | {_pct(rs, 'string')} "
            f"| {100 * sum(r['matched'] == r['leaves'] for r in rs) / n:.1f} "
            f"| {sum(r['invented'] for r in rs)} ({sum(r['undeclared'] for r in rs)}) "
            f"| {sum(r['invented'] > 0 for r in rs)} "
            f"| {statistics.mean(r['new_tokens'] for r in rs):.1f} | {statistics.mean(r['seconds'] for r in rs):.2f} "
            f"| {statistics.median(r['seconds'] for r in rs):.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
