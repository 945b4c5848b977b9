"""Tool calling on the BFCL function schemas (maskbench BFCL_*.json) with Gemma 3 270M: valid-call
rate constrained (``generate(..., tools=..., tool_choice="required")``) vs unconstrained.

Each maskbench BFCL file holds ``schema`` = ``{"type": "object", "properties": {<function name>:
<parameters schema>}, "required": [<name>], "additionalProperties": false}`` (or ``anyOf`` of such
objects, one per available function: the BFCL "multiple" categories) and one valid test instance
``{<name>: <arguments>}``. Per file: one ``Tool.from_schema`` per function; the task is generated
from the test instance ("Call <name> with <arg> = <value>, ..."); the prompt is
``format_tools_prompt(tools, task)`` for both modes (same prompt, greedy, same max tokens). A reply
is a **valid call** when ``{name: arguments}`` validates against the file's schema (``jsonschema``
is the judge); for the unconstrained reply the first JSON value in the text is taken
(``parse_tool_calls(..., lenient=True)``). **exact**: the arguments equal the test instance's.
Schemas the JSON Schema compiler refuses (``SchemaError``) are counted as refused and listed; the
constrained rates are over the schemas it accepts, the unconstrained ones over both sets.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/bench_tools.py --limit 3 --threads 1
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import re
import statistics
import time
from typing import Any

import torch

DATA = pathlib.Path("/work/shared/data/maskbench")


def category(path: pathlib.Path) -> str:
    return re.sub(r"_\d+$", "", path.stem)


def files(limit: int | None) -> list[pathlib.Path]:
    """BFCL files, categories interleaved (round robin) so ``--limit`` samples every category."""
    by: dict[str, list[pathlib.Path]] = collections.defaultdict(list)
    for p in sorted(DATA.glob("BFCL_*.json"), key=lambda p: (category(p), int(p.stem.rsplit("_", 1)[1]))):
        by[category(p)].append(p)
    out: list[pathlib.Path] = []
    while any(by.values()):
        for c in sorted(by):
            if by[c]:
                out.append(by[c].pop(0))
    return out[:limit] if limit else out


def functions(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, parameters schema) of every function a BFCL schema offers."""
    alts = schema.get("anyOf", [schema])
    out = []
    for a in alts:
        (name, params), = a["properties"].items()
        out.append((name, params))
    return out


def task(instance: dict[str, Any]) -> str:
    (name, args), = instance.items()
    if not args:
        return f"Call {name}."
    parts = [f"{k} = {json.dumps(v, ensure_ascii=False)}" for k, v in args.items()]
    return f"Call {name} with " + ", ".join(parts) + "."


def judge(schema: dict[str, Any], calls: list[Any], instance: dict[str, Any]) -> tuple[bool, bool]:
    """(valid, exact) of the first parsed call."""
    import jsonschema

    if not calls:
        return False, False
    c = calls[0]
    data = {c.name: dict(c.raw_arguments if c.raw_arguments is not None else c.arguments)}
    valid = jsonschema.Draft202012Validator(schema).is_valid(data)
    return valid, valid and data == instance


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=0, help="first N files (categories interleaved); 0 = all 253")
    ap.add_argument("--only", nargs="*", default=None, help="only these files (stems, e.g. BFCL_java_3)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-free", action="store_true",
                    help="skip the unconstrained reply (constrained validity only: ~3x faster)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every reply")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from trellis import generate, load
    from trellis.constrain.errors import GrammarError, SchemaError
    from trellis.constrain.tools import Tool, ToolCallError, format_tools_prompt, parse_tool_calls, tool_constraint

    t0 = time.perf_counter()
    h = load()
    print(f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)

    rows = []
    refused: list[tuple[str, str]] = []
    paths = [DATA / f"{stem}.json" for stem in args.only] if args.only else files(args.limit or None)
    for path in paths:
        doc = json.loads(path.read_text())
        schema, instance = doc["schema"], doc["tests"][0]["data"]
        tools = [Tool.from_schema(n, p) for n, p in functions(schema)]
        prompt = format_tools_prompt(tools, task(instance))
        row: dict[str, Any] = {"file": path.stem, "cat": category(path)}

        free = None
        if not args.no_free:
            t = time.perf_counter()
            free = generate(h, prompt, max_new_tokens=args.max_new_tokens)
            row["free_s"] = time.perf_counter() - t
            try:
                calls = parse_tool_calls(free.text, tools, lenient=True)
            except ToolCallError:
                calls = []
            row["free_valid"], row["free_exact"] = judge(schema, calls, instance)

        t = time.perf_counter()
        try:
            tool_constraint(tools, h.vocab, tool_choice="required")
        except (SchemaError, GrammarError) as e:
            refused.append((path.stem, str(e).splitlines()[0][:160]))
            row["refused"] = True
            rows.append(row)
            print(f"{path.stem:32s} REFUSED  free={'ok' if row.get('free_valid') else '--'}", flush=True)
            continue
        row["compile_s"] = time.perf_counter() - t
        t = time.perf_counter()
        # the same prompt: generate() wraps the task with format_tools_prompt; the constraint is
        # the one just compiled (compile() keeps it per process)
        res = generate(h, task(instance), tools=tools, tool_choice="required", max_new_tokens=args.max_new_tokens)
        row["con_s"] = time.perf_counter() - t
        row["con_valid"], row["con_exact"] = judge(schema, list(res.tool_calls), instance)
        row["refused"] = False
        rows.append(row)
        free_col = "skip" if free is None else f"{'ok' if row['free_valid'] else '--'}{'=' if row['free_exact'] else ' '}"
        print(f"{path.stem:32s} constrained={'ok' if row['con_valid'] else '--'}{'=' if row['con_exact'] else ' '} "
              f"free={free_col} compile {row['compile_s']:.1f}s gen {row['con_s']:.1f}s / "
              f"{row.get('free_s', float('nan')):.1f}s", flush=True)
        if args.verbose:
            print("   constrained:", res.text)
        if args.verbose and free is not None:
            print("   free:       ", (free.text or "").strip().splitlines()[0][:200] if (free.text or "").strip()
                  else repr(free.text))

    ok = [r for r in rows if not r["refused"]]

    def rate(rs: list[dict[str, Any]], key: str) -> str:
        rs = [r for r in rs if key in r]  # the unconstrained columns are absent under --no-free
        return f"{sum(r[key] for r in rs)}/{len(rs)} = {sum(r[key] for r in rs) / len(rs):.0%}" if rs else "-"

    print()
    print(f"{'category':24s} {'n':>3s} {'refused':>7s}  {'constrained valid':>18s}  {'free valid':>14s}  "
          f"{'constrained exact':>18s}  {'free exact':>14s}")
    for c in sorted({r["cat"] for r in rows}) + ["ALL"]:
        rs = [r for r in rows if c in ("ALL", r["cat"])]
        acc = [r for r in rs if not r["refused"]]
        print(f"{c:24s} {len(rs):3d} {len(rs) - len(acc):7d}  {rate(acc, 'con_valid'):>18s}  "
              f"{rate(acc, 'free_valid'):>14s}  {rate(acc, 'con_exact'):>18s}  {rate(acc, 'free_exact'):>14s}")
    if refused:
        print(f"\nrefused by the JSON Schema compiler ({len(refused)}):")
        for name, why in refused:
            print(f"  {name}: {why}")
    free_all = rate(rows, "free_valid")
    timed = [r["con_s"] / r["free_s"] for r in ok if "free_s" in r]
    med = statistics.median(timed) if timed else float("nan")
    print(f"\nunconstrained valid over all {len(rows)} (refused included): {free_all}")
    print(f"SUMMARY bench_tools: {len(rows)} BFCL schemas, {len(refused)} refused; valid calls constrained "
          f"{rate(ok, 'con_valid')} vs unconstrained {rate(ok, 'free_valid')} (same prompts, greedy, "
          f"{args.max_new_tokens} max tokens); exact {rate(ok, 'con_exact')} vs {rate(ok, 'free_exact')}; "
          f"median time ratio constrained/unconstrained {med:.2f}")


if __name__ == "__main__":
    main()
