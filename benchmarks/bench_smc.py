"""Sequential Monte Carlo on Gemma 3 270M (issue 54): quality against the other samplers, the
per-step cost against batched sampling, and genlm-control 0.4.1 on the same task.

    python benchmarks/bench_smc.py quality   [--extraction 40 --arith 40 --particles 8]
    python benchmarks/bench_smc.py step-cost [--particles 8 --reps 3]
    python benchmarks/bench_smc.py peer      [--runs 100 --particles 4]   # needs the genlm venv below

**The end of an output.** A base model ends a line with "\\n", almost never with its EOS token, and
SMC's target p(x | x in L) ends at EOS: every method here runs on ``vocab.ending_at(b"\\n")`` (the
newline tokens are the EOS, the output is one line), so the probability the model gives to ending
the answer is its own. Greedy, masked sampling and best-of-N see the same grammar and the same ends.

**quality**: the same prompts, one process, every method per item back to back:
greedy; masked sampling (temperature 1, one sample); best-of-N (N samples, temperature 1, ranked by
masked log-prob: ``BestOfN``'s default); SMC with N particles (temperature 1, its output a draw from
its posterior: ``SMC``'s default) and the most probable output of the same run ("smc-map"); SMC
without resampling ("smc-is": ``ess_threshold=0``, importance sampling with the same exact
weights). Best-of-N and SMC decode N rows per step: the equal forward-token budget (tokens actually
forwarded are reported). Tasks:
(a) JSON extraction: ``bench_schema_defaults``'s extraction set (maskbench schemas of 12 families with
    a small valid instance, described in words, two few-shot records; ``schema=`` with
    JsonSchema's defaults; budget 2 x the reference's tokens + 32); valid = parses and validates
    with ``jsonschema``, field exact-match = the reference's leaves at the same path (pooled);
(b) arithmetic word problems under ``../shared/data/grammars/outlines/arithmetic.lark`` (unchanged):
    generated from templates with seeded numbers, three few-shot questions; exact-match = the
    expression's value equals the reference answer.
For every output: its log-probability under the UNCONSTRAINED model, end token included (the GAD
paper's measure: a sampler that follows the model conditioned on the grammar writes likelier
text than one that the mask pushed off the model's path). Significance: paired over items,
Wilcoxon signed-rank for log-probs and per-item match shares, exact McNemar for validity.

**step-cost**: one prompt under json.lark, ``generate(n=N, temperature=1)`` (batched sampling, N
rows in lockstep) against ``generate(strategy="smc", n=N)`` and SMC resampling whenever its weights
differ, alternating ``--reps`` times; seconds per forward step and per particle-step.

**peer**: genlm-control 0.4.1 in its own venv (never a trellis dependency):

    python -m venv /work/peers/genlm && /work/peers/genlm/bin/pip install torch==2.13.0 \\
        && /work/peers/genlm/bin/pip install genlm-control==0.4.1

run through ``benchmarks/genlm_peer.py`` (AWRS proposal, ``BoolCFG.from_lark``) on the same Gemma
copy, prompt ids, Lark grammar, particle count, token budget, ESS threshold and resampler
(multinomial, genlm's default), newline as EOS in both; trellis runs ``SMC`` the same way. Reported:
wall seconds per SMC run and per sampled output (runs in one process after loading; genlm with its
prefix caches kept across runs, its default, and cold), the posteriors pooled over runs by Z^, and
their TV distances to each other and to the exact posterior (``exact_posterior``: the whole token
tree of this small language on Gemma).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench_schema_defaults.py
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))
ARITHMETIC = os.path.join(DATA, "grammars", "outlines", "arithmetic.lark")
GENLM_PYTHON = "/work/peers/genlm/bin/python"
METHODS = ("greedy", "sample", "best-of-n", "smc", "smc-map", "smc-is")


# ----------------------------------------------------------------------------- shared pieces
def line_model(model: Any) -> Any:
    """The handle with the newline tokens as its only EOS (see the module docstring)."""
    return dataclasses.replace(model, vocab=model.vocab.ending_at(b"\n"))


def unconstrained_logprob(model: Any, prompt_ids: list[int], tokens: tuple[int, ...]) -> float:
    """log p(tokens | prompt) under the raw model (no mask, temperature 1), one chain forward."""
    import torch

    from trellis.hf_lm import language_model
    from trellis.tokens import TokenTree

    if not tokens:
        return 0.0
    lm = language_model(model.model)
    logits = lm.tree_logits(prompt_ids, TokenTree.chain(list(tokens[:-1])))  # [len(tokens), V]
    lp = torch.log_softmax(logits.double(), -1)
    return float(lp[torch.arange(len(tokens)), torch.tensor(tokens)].sum())


def forwarded(model: Any) -> int:
    from trellis.hf_lm import language_model

    return language_model(model.model).stats.tokens_forwarded


def run_methods(model: Any, prompt: str, budget: int, n: int, seed: int, **constraint: Any) -> dict[str, dict]:
    """Every method on one prompt: text, tokens, finished, seconds, tokens forwarded."""
    from trellis import generate
    from trellis.search import SMC, BestOfN

    out: dict[str, dict] = {}

    def one(name: str, **kw: Any) -> Any:
        f0, t0 = forwarded(model), time.perf_counter()
        res = generate(model, prompt, max_new_tokens=budget, seed=seed, **constraint, **kw)
        out[name] = {"text": res.text, "tokens": list(res.tokens), "finished": res.finished,
                     "seconds": time.perf_counter() - t0, "forwarded": forwarded(model) - f0}
        return res

    one("greedy")
    one("sample", temperature=1.0)
    one("best-of-n", temperature=1.0, strategy=BestOfN(n=n))
    res = one("smc", strategy="smc", n=n)
    best = max((p for p in res.smc.particles if p.text == next(iter(res.smc.posterior), None)),
               key=lambda p: p.log_weight, default=res.smc.output)
    out["smc-map"] = {"text": best.text, "tokens": list(best.hypothesis.new_tokens), "finished": best.ending == "eos",
                      "seconds": out["smc"]["seconds"], "forwarded": 0}
    out["smc"].update(log_z=res.smc.log_z, resamples=res.smc.resamples, distinct=len(res.smc.posterior),
                      map_probability=next(iter(res.smc.posterior.values()), 0.0))
    res = one("smc-is", strategy=SMC(particles=n, ess_threshold=0.0))
    out["smc-is"].update(log_z=res.smc.log_z, distinct=len(res.smc.posterior))
    return out


# ----------------------------------------------------------------------------- (a) JSON extraction
def extraction_items(model: Any, count: int, seed: int) -> list[dict]:
    """``bench_schema_defaults``'s extraction set: the first ``count`` maskbench schemas, round-robin
    over families, with a small valid instance that validates and whose schema compiles."""
    from bench_schema_defaults import round_robin, small_record, validator_for
    from trellis.constrain import compile as compile_constraint
    from trellis.constrain.frontends.json_schema import JsonSchema, order_keys

    folder = os.path.join(DATA, "maskbench")
    names = [f for f in os.listdir(folder) if not f.startswith("BFCL_") and (f.endswith(".json") or "---" in f)]
    items = []
    for name in round_robin(names, seed):
        if len(items) >= count:
            break
        d = json.load(open(os.path.join(folder, name), encoding="utf-8"))
        ref = next((t["data"] for t in d.get("tests", []) if t.get("valid") and small_record(t["data"])), None)
        if ref is None:
            continue
        try:
            validator = validator_for(d["schema"])
            if any(True for _ in validator.iter_errors(ref)):
                continue
            compile_constraint(JsonSchema(d["schema"]), model.vocab)
        except Exception:  # noqa: BLE001 - refused schemas are bench_schema_defaults' business
            continue
        try:
            ref = order_keys(d["schema"], ref)
        except Exception:  # noqa: BLE001 - as bench_schema_defaults: the reference as written
            pass
        items.append({"name": name, "schema": d["schema"], "reference": ref, "validator": validator})
    return items


def run_extraction(model: Any, items: list[dict], n: int, seed: int, spelling: str) -> list[dict]:
    """``spelling``: "compact" (``JsonSchema``'s default: no whitespace) or "spaced" (the compact
    grammar with ``", "`` and ``": "``, json.dumps' spelling, which the few-shot records use)."""
    from bench_schema_defaults import build_prompt, grammar_for, score
    from trellis.chat import encode

    records = []
    for k, it in enumerate(items):
        prompt = build_prompt(it["reference"])
        ref_tokens = len(model.tokenizer(json.dumps(it["reference"], ensure_ascii=False),
                                         add_special_tokens=False).input_ids)
        budget = min(256, 2 * ref_tokens + 32)
        g = grammar_for(it["schema"], spelling, True) if spelling == "spaced" else None
        outs = run_methods(model, prompt, budget, n, seed + k,
                           **({"grammar": g} if g is not None else {"schema": it["schema"]}))
        ids = encode(model.tokenizer, prompt)
        for name, o in outs.items():
            r = score(o["text"] or "", o["finished"], it["reference"], it["schema"], it["validator"])
            o.update(valid=r["valid"], matched=r["matched"], leaves=r["leaves"],
                     logprob=unconstrained_logprob(model, ids, tuple(o["tokens"])))
        records.append({"task": f"json-{spelling}", "name": it["name"], "methods": outs})
        print(f"[json-{spelling} {k + 1}/{len(items)}] {it['name'][:40]:40s} "
              + " ".join(f"{m}:{'V' if o['valid'] else 'x'}{o['matched']}/{o['leaves']}" for m, o in outs.items()),
              file=sys.stderr)
    return records


# ----------------------------------------------------------------------------- (b) arithmetic
FEW_SHOT_ARITH = (("Ann has 3 pens and buys 4 more. How many pens does she have?", "3 + 4"),
                  ("A box holds 6 rows of 5 eggs. How many eggs are in the box?", "6 * 5"),
                  ("Tom had 12 apples and gave away 5. How many apples are left?", "12 - 5"))
TEMPLATES = (
    ("{name} has {a} marbles and finds {b} more. How many marbles does {name} have now?", lambda a, b, c: a + b),
    ("A shelf has {a} books. {name} takes {b} of them away. How many books are left on the shelf?", lambda a, b, c: a - b),
    ("There are {a} bags with {b} oranges in each bag. How many oranges are there?", lambda a, b, c: a * b),
    ("{name} shares {p} sweets equally among {b} friends. How many sweets does each friend get?", lambda a, b, c: a),
    ("{name} buys {a} packs of {b} stickers and then gets {c} more stickers. How many stickers does {name} have?",
     lambda a, b, c: a * b + c),
    ("A class has {a} girls and {b} boys. Each child gets {c} pencils. How many pencils are handed out?",
     lambda a, b, c: (a + b) * c),
)
NAMES = ("Mia", "Leo", "Sara", "Omar", "Lena", "Ravi", "Kim", "Jon")


def arithmetic_items(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    items = []
    for i in range(count):
        text, answer = TEMPLATES[i % len(TEMPLATES)]
        a, b, c = rng.randint(2, 12), rng.randint(2, 9), rng.randint(2, 9)
        if "take" in text:
            a += b
        question = text.format(name=rng.choice(NAMES), a=a, b=b, c=c, p=a * b)
        items.append({"question": question, "answer": answer(a, b, c)})
    return items


def arithmetic_value(text: str) -> float | None:
    """The value of an expression of the arithmetic grammar (its language: numbers, + - * /,
    unary minus, parentheses, spaces), or None."""
    import ast

    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None
    if not all(isinstance(n, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop))
               for n in ast.walk(tree)):
        return None
    try:
        return float(eval(compile(tree, "<expr>", "eval"), {"__builtins__": {}}))  # noqa: S307 - checked above
    except (ZeroDivisionError, OverflowError, ValueError):
        return None


def run_arithmetic(model: Any, items: list[dict], n: int, seed: int) -> list[dict]:
    from trellis.chat import encode

    grammar = open(ARITHMETIC, encoding="utf-8").read()
    head = "Write the arithmetic expression that answers each question.\n\n" + "".join(
        f"Question: {q}\nExpression: {e}\n\n" for q, e in FEW_SHOT_ARITH)
    records = []
    for k, it in enumerate(items):
        prompt = head + f"Question: {it['question']}\nExpression:"
        outs = run_methods(model, prompt, 24, n, seed + k, grammar=grammar)
        ids = encode(model.tokenizer, prompt)
        for name, o in outs.items():
            v = arithmetic_value(o["text"] or "") if o["finished"] else None
            o.update(valid=bool(o["finished"]), matched=int(v is not None and abs(v - it["answer"]) < 1e-9),
                     leaves=1, logprob=unconstrained_logprob(model, ids, tuple(o["tokens"])))
        records.append({"task": "arith", "question": it["question"], "answer": it["answer"], "methods": outs})
        print(f"[arith {k + 1}/{len(items)}] = {it['answer']:<4} "
              + " ".join(f"{m}:{(o['text'] or '').strip()!r}{'+' if o['matched'] else ''}" for m, o in outs.items()),
              file=sys.stderr)
    return records


def summarise(records: list[dict], task: str) -> list[str]:
    from scipy.stats import binomtest, wilcoxon

    recs = [r for r in records if r["task"] == task]
    if not recs:
        return []
    lines = [f"### {task}: {len(recs)} items", "",
             "| method | valid | exact-match | finished | mean log p(x), unconstrained (finished) | per token "
             "| tokens forwarded | s/item |", "|---|---|---|---|---|---|---|---|"]
    for m in METHODS:
        os_ = [r["methods"][m] for r in recs]
        fin = [o for o in os_ if o["finished"]]
        valid = sum(o["valid"] for o in os_) / len(os_)
        match = sum(o["matched"] for o in os_) / max(1, sum(o["leaves"] for o in os_))
        lp = statistics.mean(o["logprob"] for o in fin) if fin else float("nan")
        per = statistics.mean(o["logprob"] / max(1, len(o["tokens"])) for o in fin) if fin else float("nan")
        fw = statistics.mean(o["forwarded"] for o in os_) if m != "smc-map" else float("nan")
        sec = statistics.mean(o["seconds"] for o in os_)
        lines.append(f"| {m} | {valid:.0%} | {match:.1%} | {len(fin)}/{len(os_)} | {lp:.2f} | {per:.3f} | {fw:.0f} "
                     f"| {sec:.2f} |")
    lines.append("")
    for base in ("greedy", "sample", "best-of-n", "smc-is"):
        a = [r["methods"]["smc"] for r in recs]
        b = [r["methods"][base] for r in recs]
        both = [(x, y) for x, y in zip(a, b) if x["finished"] and y["finished"]]
        d_lp = [x["logprob"] - y["logprob"] for x, y in both] or [0.0]
        share = [x["matched"] / x["leaves"] - y["matched"] / y["leaves"] for x, y in zip(a, b)]
        only_a = sum(x["valid"] and not y["valid"] for x, y in zip(a, b))
        only_b = sum(y["valid"] and not x["valid"] for x, y in zip(a, b))
        p_lp = wilcoxon(d_lp).pvalue if any(d_lp) else 1.0
        p_sh = wilcoxon(share).pvalue if any(share) else 1.0
        p_v = binomtest(only_a, only_a + only_b).pvalue if only_a + only_b else 1.0
        lines.append(f"- smc vs {base}: log p {statistics.mean(d_lp):+.2f} over {len(both)} items both finished "
                     f"(Wilcoxon p={p_lp:.3g}); "
                     f"exact-match share {statistics.mean(share):+.3f} (p={p_sh:.3g}); "
                     f"valid {only_a} only-smc vs {only_b} only-{base} (McNemar p={p_v:.3g})")
    return lines


def cmd_quality(args: argparse.Namespace) -> None:
    import torch

    from trellis import load

    torch.set_num_threads(args.threads)
    model = line_model(load())
    records: list[dict] = []
    t0 = time.perf_counter()
    if args.arith:
        records += run_arithmetic(model, arithmetic_items(args.arith, args.seed), args.particles, args.seed)
    if args.extraction:
        items = extraction_items(model, args.extraction, args.seed)
        for spelling in args.spellings.split(","):
            records += run_extraction(model, items, args.particles, args.seed, spelling)
    json.dump({"args": vars(args), "seconds": time.perf_counter() - t0, "records": records},
              open(args.out, "w", encoding="utf-8"), indent=1, default=str)
    print("\n".join(sum((summarise(records, t) + [""] for t in ("arith", "json-compact", "json-spaced")), [])))
    print(f"raw: {args.out}")


# ----------------------------------------------------------------------------- step cost
STEP_PROMPT = ('Ada Lovelace as JSON: {"name": "Ada Lovelace", "born": 1815, "fields": ["mathematics"]}. '
               'Alan Turing as JSON:')


def cmd_step_cost(args: argparse.Namespace) -> None:
    """Seconds per forward step and per particle-step (a row of a step): batched sampling's rows
    finish at their EOS, SMC's finished particles leave the batch too and copies that drew the same
    tokens share a row, so both figures are given; "smc, ess 1.0" resamples whenever the weights
    differ (the row copies' cost at every step)."""
    import torch

    from trellis import generate, load
    from trellis.search import SMC

    torch.set_num_threads(args.threads)
    model = line_model(load())
    n, budget = args.particles, args.max_new_tokens
    # A grammar no output can finish within the budget: every step has N live rows in both methods
    # (under json.lark the rows left as samples finish differ between them, and so would ms/step).
    grammar = "start: /[a-zA-Z0-9 ,.:;'\"-]{400,500}/" if args.long else "json.lark"
    generate(model, STEP_PROMPT, grammar=grammar, max_new_tokens=4, temperature=1.0, n=n, seed=0)  # warm up
    names = ("sample", "smc", "smc, ess 1.0")
    per_step: dict[str, list[float]] = {k: [] for k in names}
    per_row: dict[str, list[float]] = {k: [] for k in names}
    for rep in range(args.reps):
        for name in names:
            kw: dict[str, Any] = {"temperature": 1.0} if name == "sample" else \
                {"strategy": SMC(particles=n, ess_threshold=1.0 if "1.0" in name else 0.5)}
            res = generate(model, STEP_PROMPT, grammar=grammar, max_new_tokens=budget, n=n, seed=rep, **kw)
            r = res if name != "sample" else res[0]
            steps = r.stats.forward_calls
            row_steps = sum(r.smc.live) if name != "sample" else sum(len(x.tokens) for x in res)
            per_step[name].append(r.stats.seconds / steps)
            per_row[name].append(r.stats.seconds / row_steps)
            extra = f", {r.smc.resamples} resamplings, distinct rows/step {statistics.mean(r.smc.rows):.1f}" \
                if name != "sample" else ""
            print(f"rep {rep} {name}: {r.stats.seconds:.2f} s, {steps} forwards, {row_steps} particle-steps, "
                  f"{per_step[name][-1] * 1e3:.1f} ms/step{extra}", file=sys.stderr)
    base_s, base_r = statistics.median(per_step["sample"]), statistics.median(per_row["sample"])
    print("| N | method | ms/step | ratio | ms/particle-step | ratio |\n|---|---|---|---|---|---|")
    for name in names:
        a_s, a_r = statistics.median(per_step[name]), statistics.median(per_row[name])
        print(f"| {n} | {name} | {a_s * 1e3:.1f} | {a_s / base_s:.2f} | {a_r * 1e3:.1f} | {a_r / base_r:.2f} |")


# ----------------------------------------------------------------------------- peer
PEER_PROMPT = "Q: Is the sky blue? Answer yes, no or maybe.\nA:"
PEER_GRAMMAR = 'start: " yes" | " no" | " maybe"\n'
JSON_LARK = os.path.join(os.path.dirname(HERE), "trellis", "grammars", "json.lark")
PEER_TASKS = {  # name: (prompt, Lark grammar, max tokens, exact posterior?)
    "yesno": (PEER_PROMPT, PEER_GRAMMAR, 5, True),
    "json": (STEP_PROMPT, open(JSON_LARK, encoding="utf-8").read(), 30, False),
}


def cmd_peer(args: argparse.Namespace) -> None:
    import torch

    from trellis import load
    from trellis.chat import encode
    from trellis.constrain import compile as compile_constraint
    from trellis.decoder import Decoder
    from trellis.hf_lm import language_model
    from trellis.models import default_model_dir
    from trellis.search import SMC, exact_posterior, pooled_posterior, total_variation
    from trellis.search.smc import SMCResult

    torch.set_num_threads(args.threads)
    model = line_model(load())
    prompt, grammar, max_tokens, enumerable = PEER_TASKS[args.task]
    args.max_tokens = args.max_tokens or max_tokens
    ids = encode(model.tokenizer, prompt)
    dec = Decoder(language_model(model.model), compile_constraint(grammar, model.vocab), temperature=1.0,
                  vocab=model.vocab)
    root = dec.start(ids)
    exact_by_text: dict[str, float] = {}
    if enumerable:
        t0 = time.perf_counter()
        exact = exact_posterior(dec, root, max_new_tokens=args.max_tokens)
        exact_by_text = exact.by_text
        print(f"exact: {exact.outputs} token sequences in {time.perf_counter() - t0:.1f} s, log Z {exact.log_z:.3f}, "
              f"{ {k: round(v, 4) for k, v in exact.by_text.items()} }", file=sys.stderr)
    gen = torch.Generator().manual_seed(args.seed)
    smc = SMC(particles=args.particles, ess_threshold=0.5, resampler="multinomial", generator=gen)
    ours: list[SMCResult] = []  # no warm-up run: genlm's first run is counted too
    secs = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        ours.append(smc.weighted(dec, root, max_new_tokens=args.max_tokens))
        secs.append(time.perf_counter() - t0)
    post, log_z = pooled_posterior(ours)
    table = {"trellis": {"seconds": secs, "posterior": post, "log_z": log_z}}
    print(f"trellis: {statistics.mean(secs):.3f} s/run, posterior {post}", file=sys.stderr)
    eos = sorted(model.vocab.eos)
    for mode, keep in (("warm", True), ("cold", False)):
        runs = (args.peer_runs or args.runs) if keep else args.cold_runs
        spec = {"model_dir": str(default_model_dir()), "prompt_ids": ids, "grammar": grammar,
                "particles": args.particles, "max_tokens": args.max_tokens, "runs": runs, "ess_threshold": 0.5,
                "seed": args.seed, "threads": args.threads, "eos_token_ids": eos, "keep_cache": keep,
                "resampling_method": "multinomial"}
        path = f"/tmp/bench_smc_peer_{args.task}_{mode}.json"
        json.dump(spec, open(path + ".spec", "w"))
        subprocess.run([GENLM_PYTHON, os.path.join(HERE, "genlm_peer.py"), "--spec", path + ".spec", "--out", path],
                       check=True)
        peer = json.load(open(path))
        post, log_z = pooled_posterior(genlm_runs(peer["runs"]))
        table[f"genlm ({mode})"] = {"seconds": [r["seconds"] for r in peer["runs"]], "posterior": post, "log_z": log_z,
                                    "timings": peer["timings"], "versions": peer["versions"]}
    print(f"task {args.task}: {args.particles} particles, max {args.max_tokens} tokens; "
          f"genlm import {table['genlm (warm)']['timings']['import_s']:.1f} s, load "
          f"{table['genlm (warm)']['timings']['load_s']:.1f} s (not counted below)")
    print("| library | s per run, mean (median) | s per sampled output, mean | runs | log Z^ (pooled) | TV to exact "
          "| TV to trellis |")
    print("|---|---|---|---|---|---|---|")
    for name, t in table.items():
        s, med = statistics.mean(t["seconds"]), statistics.median(t["seconds"])
        tv_exact = f"{total_variation(t['posterior'], exact_by_text):.4f}" if exact_by_text else "n/a"
        print(f"| {name} | {s:.4f} ({med:.4f}) | {s / args.particles:.4f} | {len(t['seconds'])} | {t['log_z']:.3f} | "
              f"{tv_exact} | {total_variation(t['posterior'], table['trellis']['posterior']):.4f} |")
    ours_s = statistics.mean(table["trellis"]["seconds"])
    print("speed-up per sampled output (mean): " + ", ".join(
        f"{statistics.mean(t['seconds']) / ours_s:.1f}x vs {name}" for name, t in table.items() if name != "trellis"))
    if exact_by_text:
        print(f"exact: log Z = {exact.log_z:.3f}, {exact_by_text}")
    json.dump({k: {kk: vv for kk, vv in v.items()} for k, v in table.items()} | {"exact": exact_by_text},
              open(args.out, "w"), indent=1, default=str)


def genlm_runs(runs: list[dict]) -> list[Any]:
    """genlm's runs in the shape ``pooled_posterior`` reads (``log_z``, ``posterior``: each run's
    normalised particle weights summed by text), so both libraries are pooled by one function."""
    import types

    from trellis.search.resampling import normalised

    out = []
    for r in runs:
        ws = [p["log_weight"] for p in r["particles"]]
        post: dict[str, float] = {}
        if any(w > float("-inf") for w in ws):
            for p, w in zip(r["particles"], normalised(ws).tolist()):
                post[p["text"]] = post.get(p["text"], 0.0) + w
        out.append(types.SimpleNamespace(log_z=r["log_ml"], posterior=post))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--extraction", type=int, default=40)
    q.add_argument("--arith", type=int, default=40)
    q.add_argument("--particles", type=int, default=8)
    q.add_argument("--spellings", default="compact,spaced", help="JSON spellings to run (compact, spaced)")
    q.add_argument("--out", default="/tmp/bench_smc_quality.json")
    s = sub.add_parser("step-cost")
    s.add_argument("--particles", type=int, default=8)
    s.add_argument("--reps", type=int, default=3)
    s.add_argument("--max-new-tokens", type=int, default=48)
    s.add_argument("--long", action="store_true", help="a grammar no output finishes in the budget: N rows every step")
    p = sub.add_parser("peer")
    p.add_argument("--task", choices=tuple(PEER_TASKS), default="yesno")
    p.add_argument("--runs", type=int, default=100, help="trellis runs (and genlm's warm runs, unless --peer-runs)")
    p.add_argument("--peer-runs", type=int, default=None, help="genlm warm runs (default: --runs)")
    p.add_argument("--cold-runs", type=int, default=20)
    p.add_argument("--particles", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=None, help="default: the task's (yesno 5, json 30)")
    p.add_argument("--out", default="/tmp/bench_smc_peer.json")
    for x in (q, s, p):
        x.add_argument("--threads", type=int, default=2)
        x.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    {"quality": cmd_quality, "step-cost": cmd_step_cost, "peer": cmd_peer}[args.cmd](args)


if __name__ == "__main__":
    main()
