"""Every search strategy under json.lark and under a JSON Schema on Gemma 3 270M: is every output
parseable (and schema-valid)?

The search issue's acceptance asks for 20 Gemma runs per strategy under each constraint; the tiny-
model half (1,000 randomised runs) is tests/search/test_constrained.py. Each strategy decodes the
same prompts through a ``Decoder`` whose constraint is ``Budgeted(compile(...), max_new_tokens)``,
exactly what ``generate`` builds, so an output cut by the budget is steered to close in time.
A run counts as **parsed** when ``json.loads`` accepts the text (schema runs: and ``jsonschema``
validates it); **finished** when the hypothesis ended with EOS. Forward tokens come from the LM
counters. Prints a table and a ``SUMMARY search_parse_rate:`` line.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/search_parse_rate.py --prompts 20 --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable

import torch

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
SUBJECTS = ["a software engineer", "a retired teacher", "a chess player", "a baker in Paris", "a student",
            "a marathon runner", "a jazz musician", "a nurse", "a farmer", "a pilot", "a painter",
            "a librarian", "a chemist", "a football coach", "a poet", "a sailor", "an architect",
            "a gardener", "a photographer", "a carpenter"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=20, help="prompts per constraint")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--methods", default="", help="comma-separated subset of method names")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import jsonschema

    from trellis import Decoder, HFLanguageModel, load
    from trellis.constrain import JsonSchema, compile
    from trellis.constrain.finish import Budgeted
    from trellis.search import MCTS, Beam, BestOfN, DiverseBeam, EntropyGate, Greedy, Lookahead, Sample

    h = load()
    lm = HFLanguageModel(h.model)
    n = args.max_new_tokens
    grammars = {"json.lark": compile("json.lark", h.vocab),
                "schema": compile(JsonSchema(SCHEMA, closed_objects=True), h.vocab)}

    def reward(hyp: Any) -> float:  # MCTS: the model's own mean log-prob (no oracle)
        return hyp.logprob / max(1, hyp.num_new)

    methods: dict[str, tuple[float, Callable[[int], Any]]] = {
        "Greedy": (0.0, lambda i: Greedy()),
        "Sample(T=0.8)": (0.8, lambda i: Sample(generator=torch.Generator().manual_seed(i))),
        "Beam(w=3)": (0.0, lambda i: Beam(width=3)),
        "DiverseBeam(w=4,g=2)": (0.0, lambda i: DiverseBeam(width=4, groups=2)),
        "Lookahead(w=2,d=2)": (0.0, lambda i: Lookahead(width=2, depth=2)),
        "MCTS(r=4)": (0.0, lambda i: MCTS(reward=reward, max_rollouts=4)),
        "BestOfN(n=3)": (0.8, lambda i: BestOfN(n=3, generator=torch.Generator().manual_seed(i))),
        "EntropyGate(tau=1.5)": (0.0, lambda i: EntropyGate(threshold=1.5, k=3, depth=3)),
    }
    if args.methods:
        keep = [m.strip() for m in args.methods.split(",")]
        methods = {k: v for k, v in methods.items() if any(k.startswith(m) for m in keep)}

    rows = []
    bad: list[str] = []
    for name, (temp, make) in methods.items():
        for gname, con in grammars.items():
            dec = Decoder(lm, Budgeted(con, n), temperature=temp, vocab=h.vocab)
            parsed = finished = 0
            toks, secs = [], []
            for i, subj in enumerate(SUBJECTS[: args.prompts]):
                what = "A JSON object describing" if gname == "json.lark" else "A JSON record (name, age, tags) of"
                ids = h.tokenizer.encode(f"{what} {subj}:\n")
                lm.reset()
                before = lm.stats.tokens_forwarded
                t = time.perf_counter()
                hyp = make(i)(dec, dec.start(ids), max_new_tokens=n)[0]
                secs.append(time.perf_counter() - t)
                toks.append(lm.stats.tokens_forwarded - before)
                text = dec.text(hyp)
                finished += hyp.finished
                try:
                    doc = json.loads(text)
                    if gname == "schema":
                        jsonschema.validate(doc, SCHEMA)
                    parsed += 1
                except (ValueError, jsonschema.ValidationError) as e:
                    bad.append(f"{name}/{gname}#{i}: {type(e).__name__}: {text[:80]!r}")
            k = min(args.prompts, len(SUBJECTS))
            rows.append((name, gname, k, parsed, finished, statistics.mean(toks), statistics.mean(secs)))
            print(f"  {name:<22} {gname:<10} parsed {parsed}/{k}  finished {finished}/{k}  "
                  f"{statistics.mean(toks):.0f} fwd tok  {statistics.mean(secs):.1f} s/run", flush=True)

    print(f"\nGemma 3 270M, max_new_tokens={n}, {args.threads} thread(s)")
    print(f"{'method':<22} {'constraint':<10} {'runs':>5} {'parsed':>7} {'finished':>9} {'fwd tok':>8} {'s/run':>6}")
    for r in rows:
        print(f"{r[0]:<22} {r[1]:<10} {r[2]:>5} {r[3]:>7} {r[4]:>9} {r[5]:>8.0f} {r[6]:>6.1f}")
    for b in bad:
        print("NOT PARSED", b)
    total, ok = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"SUMMARY search_parse_rate: {ok}/{total} outputs parsed over {len(methods)} strategies x "
          f"{len(grammars)} constraints")


if __name__ == "__main__":
    main()
