"""Speculative decoding on Gemma 3 270M (CPU), all methods in ONE run on the SAME prompts.

Workloads: (a) copy-heavy — Spec-Bench summarization, rag and qa plus a code-refactor prompt;
(b) JSON extraction under a JSON Schema per prompt (constrained + speculative vs unconstrained greedy);
(c) open-ended — Spec-Bench's MT-Bench writing and roleplay.
Methods: transformers greedy ``generate``, transformers ``prompt_lookup_num_tokens``, transformers
assisted generation with an early-exit self-draft (``--methods ...,hf-early-exit``: no smaller model
shares Gemma 3's tokenizer offline), trellis greedy and trellis ``Speculative`` with each drafter
(``recycling`` grows dynamic trees, ``recycling-static`` follows the paper's template). Prints
tokens/s, ratios vs transformers greedy and vs transformers prompt lookup, mean accepted draft
tokens per round, and whether every trellis speculative output is token-for-token identical to
trellis greedy.

    python benchmarks/bench_speculate.py --threads 2 --per-category 3 --new-tokens 128
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time
from typing import Any, Callable

import torch

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "spec_bench" / "question.jsonl"

REFACTOR = '''Refactor this function to use a dictionary instead of the if/elif chain, keeping the behaviour.

def unit_factor(unit):
    if unit == "mm":
        return 0.001
    elif unit == "cm":
        return 0.01
    elif unit == "m":
        return 1.0
    elif unit == "km":
        return 1000.0
    else:
        raise ValueError(unit)

Refactored:

def unit_factor(unit):
'''

def _schema(**props: str) -> dict[str, Any]:
    types = {"str": {"type": "string"}, "int": {"type": "integer"}, "num": {"type": "number"},
             "date": {"type": "string", "format": "date"}}
    return {"type": "object", "properties": {k: types[v] for k, v in props.items()}, "required": list(props),
            "additionalProperties": False}


# (prompt, schema): workload (b) decodes under the schema, whose keys and punctuation are forced.
EXTRACTION = [
    ('Text: "Maria Lopez is 34 years old and lives in Madrid, where she works as an architect."\n'
     'Extract the person as JSON with keys name, age, city, job.\nJSON: ',
     _schema(name="str", age="int", city="str", job="str")),
    ('Text: "The order #5521 of 3 blue chairs was shipped to Oslo on 2024-03-02 for 249.90 EUR."\n'
     'Extract the order as JSON with keys id, quantity, item, city, date, price.\nJSON: ',
     _schema(id="int", quantity="int", item="str", city="str", date="date", price="num")),
    ('Text: "Kenji Watanabe, a 41-year-old chef from Osaka, opened his second restaurant in Kyoto."\n'
     'Extract the person as JSON with keys name, age, origin, job, city.\nJSON: ',
     _schema(name="str", age="int", origin="str", job="str", city="str")),
]


def spec_bench(categories: list[str], per_category: int) -> dict[str, list[str]]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    out: dict[str, list[str]] = {}
    for c in categories:
        out[c] = [r["turns"][0] + "\n\n" for r in rows if r["category"] == c][:per_category]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-category", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--max-nodes", type=int, default=15, help="node cap; DraftBudget picks 0/2/6/15 under it")
    ap.add_argument("--workloads", default="abc", help="which of the workloads a, b, c to run")
    ap.add_argument("--methods", default="", help="comma-separated subset of method names (hf-greedy always runs)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from trellis import Decoder, Greedy, HFLanguageModel, load
    from trellis.speculate import Composite, GrammarForced, LayerSkip, PromptLookup, Speculative, TokenRecycling

    h = load()
    model, tok = h.model, h.tokenizer
    n = args.new_tokens
    workloads: dict[str, dict[str, list[str]]] = {
        "a": {**spec_bench(["summarization", "rag", "qa"], args.per_category), "code-refactor": [REFACTOR]},
        "b": {"json-extraction": [p for p, _ in EXTRACTION[: max(1, args.per_category)]]},
        "c": spec_bench(["writing", "roleplay"], args.per_category),
    }
    workloads = {k: v for k, v in workloads.items() if k in args.workloads}
    try:
        from trellis.constrain.compile import compile as compile_grammar

        from trellis.constrain import JsonSchema

        schema_of = {p: compile_grammar(JsonSchema(sch), h.vocab) for p, sch in EXTRACTION}
        json_constraint: Any = True
        current: dict[str, Any] = {}  # the schema constraint of the prompt being run
    except Exception as e:  # the grammar engine is optional for workloads (a) and (c)
        print(f"(b) skipped: a schema did not compile ({type(e).__name__}: {e})")
        json_constraint = None

    lm = HFLanguageModel(model)

    def hf(ids: list[int], **kw: Any) -> tuple[float, list[int], float]:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, **kw)
        return time.perf_counter() - t0, out[0, len(ids):].tolist(), 0.0

    def trellis_run(ids: list[int], strategy: Any, constraint: Any = None) -> tuple[float, list[int], float]:
        dec = Decoder(lm, constraint, temperature=0, vocab=h.vocab) if constraint is not None \
            else Decoder(lm, temperature=0, vocab=h.vocab)
        lm.reset()  # every method pays its own prefill
        t0 = time.perf_counter()
        hyp = strategy(dec, dec.start(ids), max_new_tokens=n)[0]
        sec = time.perf_counter() - t0
        acc = strategy.stats.mean_accepted if hasattr(strategy, "stats") else 0.0
        if isinstance(strategy, Speculative):
            fav = strategy.draft_budget.favourite
            favourites[fav] = favourites.get(fav, 0) + 1
        return sec, list(hyp.new_tokens), acc

    favourites: dict[int, int] = {}  # the node budget each speculative run used most

    methods: dict[str, Callable[[list[int]], tuple[float, list[int], float]]] = {
        "hf-greedy": lambda ids: hf(ids),
        "hf-prompt-lookup": lambda ids: hf(ids, prompt_lookup_num_tokens=10),
        # transformers' assisted generation with the one draft that exists offline: its own first
        # 14 of 18 layers plus the full head (LayerSkip-style early exit); only when named in --methods
        "hf-early-exit": lambda ids: hf(ids, assistant_early_exit=14),
        "trellis-greedy": lambda ids: trellis_run(ids, Greedy()),
        "prompt-lookup": lambda ids: trellis_run(ids, Speculative(PromptLookup(), max_nodes=args.max_nodes)),
        "recycling": lambda ids: trellis_run(ids, Speculative(TokenRecycling(h.vocab_size), max_nodes=args.max_nodes)),
        "recycling-static": lambda ids: trellis_run(ids, Speculative(TokenRecycling(h.vocab_size, dynamic=False),
                                                                     max_nodes=args.max_nodes)),
        "auto": lambda ids: trellis_run(ids, Speculative(Composite([PromptLookup(), TokenRecycling(h.vocab_size)]),
                                                         max_nodes=args.max_nodes)),
        "layer-skip": lambda ids: trellis_run(ids, Speculative(LayerSkip(model), max_nodes=args.max_nodes)),
        # without Draft & Verify's adaptive draft-exiting: chains run to the round's node budget
        "layer-skip-no-exit": lambda ids: trellis_run(ids, Speculative(LayerSkip(model, adaptive_exit=False),
                                                                       max_nodes=args.max_nodes)),
    }
    json_methods: dict[str, Callable[[list[int]], tuple[float, list[int], float]]] = {
        "hf-greedy": methods["hf-greedy"],
        "trellis-greedy": methods["trellis-greedy"],
        "json-greedy": lambda ids: trellis_run(ids, Greedy(), current["c"]),
        "json-spec": lambda ids: trellis_run(ids, Speculative(Composite([GrammarForced(), PromptLookup(),
                                                                           TokenRecycling(h.vocab_size)]),
                                                              max_nodes=args.max_nodes), current["c"]),
        # the others' drafts grafted under the forced chain's end instead of beside it
        "json-spec-chain": lambda ids: trellis_run(ids, Speculative(GrammarForced(then=Composite([
            PromptLookup(), TokenRecycling(h.vocab_size)])), max_nodes=args.max_nodes), current["c"]),
    }
    if args.methods:
        keep = {"hf-greedy", "trellis-greedy", "json-greedy", *args.methods.split(",")}
        methods = {k: v for k, v in methods.items() if k in keep}
        json_methods = {k: v for k, v in json_methods.items() if k in keep}
    else:
        del methods["hf-early-exit"]  # ~3x slower than greedy on this model: opt-in
        del methods["layer-skip-no-exit"]  # an ablation: opt-in
    methods["hf-greedy"]([2, 651, 1234])  # warm-up
    if lm.kernels is not None:  # tune (or read the cached choice of) the GEMM kernels before timing
        print("GEMM kernels per weight shape and row bucket:", lm.kernels.choices())
    trellis_run([2, 651, 1234], Speculative(PromptLookup(), max_nodes=args.max_nodes))
    pooled: dict[str, list[tuple[int, float]]] = {}  # workload (a): (tokens, seconds) per method, all prompts
    summary: list[str] = []
    for wl, cats in workloads.items():
        table = json_methods if wl == "b" else methods
        if wl == "b" and json_constraint is None:
            continue
        for cat, prompts in cats.items():
            tps: dict[str, list[float]] = {m: [] for m in table}
            acc: dict[str, list[float]] = {m: [] for m in table}
            identical = True
            for prompt in prompts:
                ids = tok(prompt).input_ids
                if wl == "b":
                    current["c"] = schema_of[prompt]
                outs: dict[str, list[int]] = {}
                for name, fn in table.items():
                    sec, toks, a = fn(ids)
                    tps[name].append(len(toks) / sec)
                    if wl == "a":
                        pooled.setdefault(name, []).append((len(toks), sec))
                    acc[name].append(a)
                    outs[name] = toks
                for name in ("prompt-lookup", "recycling", "recycling-static", "auto", "layer-skip",
                             "layer-skip-no-exit"):
                    if name in outs:
                        identical &= outs[name] == outs["trellis-greedy"]
                for name in ("json-spec", "json-spec-chain"):
                    if name in outs:
                        identical &= outs[name] == outs["json-greedy"]
            med = {m: statistics.median(v) for m, v in tps.items()}
            base = med["hf-greedy"]
            print(f"\n({wl}) {cat}: {len(prompts)} prompts x {n} tokens, {args.threads} threads")
            print(f"    {'method':<18} {'tok/s':>7} {'vs hf-greedy':>13} {'vs hf-pld':>10} {'acc/round':>10}")
            for m in table:
                pld = med[m] / med["hf-prompt-lookup"] if "hf-prompt-lookup" in med else float("nan")
                print(f"    {m:<18} {med[m]:7.2f} {med[m] / base:12.2f}x {pld:9.2f}x {statistics.mean(acc[m]):10.2f}")
            print(f"    speculative outputs identical to greedy: {identical}")
            best = max((m for m in table if not m.startswith("hf-") and m not in ("trellis-greedy", "json-greedy")),
                       key=lambda m: med[m], default=None)
            if best is not None:
                summary.append(f"{cat}: best {best} {med[best] / base:.2f}x hf-greedy")
    if pooled:
        rate = {m: sum(t for t, _ in v) / sum(s for _, s in v) for m, v in pooled.items()}
        print("\n(a) pooled over every copy-heavy prompt (total tokens / total seconds):")
        for m, r in rate.items():
            pld = r / rate["hf-prompt-lookup"] if "hf-prompt-lookup" in rate else float("nan")
            print(f"    {m:<18} {r:7.2f} tok/s {r / rate['hf-greedy']:6.2f}x hf-greedy {pld:6.2f}x hf-pld")
        best = max((m for m in rate if not m.startswith("hf-") and m != "trellis-greedy"),
                   key=rate.__getitem__, default=None)
        if best is not None:
            summary.insert(0, f"(a) pooled best {best} {rate[best] / rate['hf-greedy']:.2f}x hf-greedy")
    print(f"node budget used most per speculative run: {dict(sorted(favourites.items()))}")
    print("\nSUMMARY bench_speculate: " + "; ".join(summary))


if __name__ == "__main__":
    main()
