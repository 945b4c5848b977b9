"""End to end under json.lark on Gemma 3 270M: 20 varied prompts, parse rate, and the wall time per
token of constrained vs unconstrained greedy decoding (same prompts, same budget, one run).

Usage: python benchmarks/bench_e2e_json.py [--threads 2] [--max-new-tokens 48] [--prompts 20]

Constrained runs stop at EOS in an accepting state or at the budget; a budget-cut document is
reported as "unfinished" (it is still a valid prefix). Per-token time = generate() wall time /
generated tokens, summed over prompts, grammar tables precomputed first (compile is reported
separately) so the ratio measures decoding only.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

PROMPTS = [
    "Ada Lovelace as JSON: {\"name\": \"Ada Lovelace\", \"born\": 1815}. Alan Turing as JSON:",
    "Return a JSON object describing Paris with keys city, country and population:",
    "A JSON array of the first five prime numbers:",
    "The weather in Tokyo today as JSON (temperature in celsius, condition):",
    "Product record as JSON: name=Desk Lamp, price=24.99, in_stock=true. JSON:",
    "Convert to JSON: title: Dune; author: Frank Herbert; year: 1965\nJSON:",
    "List three colours as a JSON array of strings:",
    "A JSON object with a nested address for Jane Doe living at 12 Oak St, Springfield:",
    "Sensor reading {\"id\": 7, \"temp\": 21.5} next reading as JSON:",
    "JSON config for a web server: host, port, debug flag:",
    "Translate to JSON: the user Bob (age 31) likes chess and tennis.\n",
    "Here is an empty JSON object:",
    "A JSON list of two people, each with name and age:",
    "Give the answer as JSON {\"answer\": number}. What is 12 times 12?",
    "Movie info as JSON: Inception, 2010, directed by Christopher Nolan.",
    "A JSON value that is just the boolean true:",
    "Encode this as a JSON string: hello \"world\"",
    "JSON for a book with an array of chapter titles:",
    "Order #1234 for 3 apples and 2 pears as JSON:",
    "A JSON object mapping the numbers one, two, three to 1, 2, 3:",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from trellis import generate, load
    from trellis.constrain import compile as compile_grammar

    h = load()
    t0 = time.perf_counter()
    con = compile_grammar("json.lark", h.vocab)
    compile_s = time.perf_counter() - t0
    prompts = PROMPTS[: args.prompts]
    generate(h, "warm up", max_new_tokens=4)
    rows = []
    tot = {"free": [0.0, 0], "json": [0.0, 0]}
    for p in prompts:
        r_free = generate(h, p, max_new_tokens=args.max_new_tokens)
        r_json = generate(h, p, grammar=con, max_new_tokens=args.max_new_tokens)
        tot["free"][0] += r_free.stats.seconds
        tot["free"][1] += r_free.stats.new_tokens
        tot["json"][0] += r_json.stats.seconds
        tot["json"][1] += r_json.stats.new_tokens
        text = r_json.text or ""
        try:
            json.loads(text)
            status = "parsed"
        except json.JSONDecodeError:
            status = "unfinished (valid prefix)" if not r_json.finished else "PARSE ERROR"
        rows.append((p, text, status))
    for p, text, status in rows:
        print(f"{status:26s} {text.strip()[:90]!r}")
    parsed = sum(1 for r in rows if r[2] == "parsed")
    errors = sum(1 for r in rows if r[2] == "PARSE ERROR")
    free = tot["free"][0] / tot["free"][1]
    cons = tot["json"][0] / tot["json"][1]
    print(f"\ncompile (json.lark, precomputed tables, disk cache as found): {compile_s:.2f} s")
    print(f"parsed {parsed}/{len(rows)}, parse errors {errors}, unfinished {len(rows) - parsed - errors}")
    print(f"unconstrained {1000 * free:.1f} ms/token ({tot['free'][1]} tokens), "
          f"json.lark {1000 * cons:.1f} ms/token ({tot['json'][1]} tokens): overhead {100 * (cons / free - 1):+.1f}%")


if __name__ == "__main__":
    main()
