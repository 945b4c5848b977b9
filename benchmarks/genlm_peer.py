"""Peer benchmark: run genlm-control's SMC (AWRS + BoolCFG) on a spec and dump the particles.

Run by the *genlm* virtualenv, never by trellis's (this file must not import trellis):

    /work/peers/genlm/bin/python benchmarks/genlm_peer.py --spec spec.json --out out.json

spec.json: {"model_dir", "prompt_ids" (BOS included, used verbatim), "grammar" (Lark), "particles",
"max_tokens", "runs", "ess_threshold", "seed", "threads", "eos_token_ids" (optional)}. Optional
extras: "resampling_method" (genlm's default "multinomial"), "keep_cache" (default false),
"llm_opts" (kwargs for genlm's AsyncTransformer, e.g. {"timeout": 0.02, "batch_size": 20}).

Semantics of genlm-control 0.4.1 worth knowing when comparing (read from its source):
- ``max_tokens`` counts the terminal EOS: at the last step EOS is forced and the weight gets
  the target's EOS log-weight (p_LM(EOS | x) + grammar ``complete``: -inf if x is not a sentence).
- AWRS's incremental weight is an unbiased *random* estimate of the allowed mass Z_t, not exact.
- Weights are log-space; after a resample every weight becomes the log mean, so ``log_ml`` (log
  mean of the final weights) is the usual SMC estimate of log P(x in L).
- genlm's AsyncTransformer keeps a trie of logprobs/KV for every prefix it has seen, across
  runs (and BoolCFG memoises Earley charts); we clear both before each run (unless keep_cache)
  so runs are independent and cold: with the caches kept, repeat runs are ~10x faster.
- The HF backend batches queued forwards and waits ``timeout`` (0.02 s) after the last query
  before firing a batch smaller than ``batch_size``: idle time per step is part of genlm's cost.
"""

import argparse
import asyncio
import json
import os
import random
import sys
import time

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--spec", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--threads", type=int, default=None, help="override spec['threads'] (default 1)")
args = ap.parse_args()
with open(args.spec) as f:
    spec = json.load(f)
threads = args.threads or int(spec.get("threads") or 1)

# Offline, and thread counts fixed before torch is imported (OMP reads them at load).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(threads)

# 1a. Import (genlm.control pulls in torch, transformers, genlm.backend/grammar/bytes).
t0 = time.perf_counter()
import numpy as np  # noqa: E402
import torch  # noqa: E402
from genlm.control import AWRS, EOS, BoolCFG, PromptedLLM  # noqa: E402
import_s = time.perf_counter() - t0
torch.set_num_threads(threads)


def versions():
    from importlib.metadata import version

    out = {"python": sys.version.split()[0], "threads": threads}
    for pkg in ("genlm-control", "genlm-backend", "genlm-grammar", "genlm-bytes",
                "torch", "transformers", "numpy"):
        try:
            out[pkg] = version(pkg)
        except Exception:  # pragma: no cover - informational only
            out[pkg] = None
    return out


def seed_all(s):
    """Seed every RNG genlm's SMC touches: numpy's global one (resampling), torch's global one,
    Python's, and the AWRS instance's own streams (set at construction, so reset them here)."""
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)
    # AWRS keeps a numpy Generator (geometric "phantom" draws) and a torch Generator for the
    # Gumbel keys, both made from the constructor's seed; private attributes, hence the guard.
    if hasattr(sampler, "rng"):
        sampler.rng = np.random.default_rng(s)
    if hasattr(sampler, "_seed"):
        sampler._seed = s
        sampler._gen_cache = None


def particle_record(context, log_weight):
    """One particle: the Token objects (bytes subclasses with .token_id) then maybe genlm's EOS."""
    eos = bool(context) and context[-1] is EOS
    toks = context[:-1] if eos else context
    # A rejected particle can end with a non-Token (AWRS returns the rejected token); keep bytes.
    text = b"".join(bytes(t) for t in toks).decode("utf-8", errors="replace")
    ids = [getattr(t, "token_id", None) for t in toks]
    # -inf (a rejected particle) is written as JSON -Infinity, which Python's json reads back.
    # "eos" is also true for EOS forced at the budget (step max_tokens always appends EOS, with
    # weight -inf when the text is not a sentence): "at_budget" flags that step.
    return {"text": text, "log_weight": float(log_weight), "eos": eos, "token_ids": ids,
            "at_budget": eos and len(context) == int(spec["max_tokens"])}


# 1b. Model load: the local directory goes straight to AutoTokenizer/AutoModelForCausalLM
# (genlm's from_name(model_id) calls from_pretrained(model_id, device_map="auto",
# torch_dtype="auto"); Gemma 3 270M's config says float32). Temperature 1.
t0 = time.perf_counter()
llm = PromptedLLM.from_name(spec["model_dir"], backend="hf", temperature=1.0,
                            **(spec.get("llm_opts") or {}))
eos_ids = spec.get("eos_token_ids")
if eos_ids:
    # genlm names EOS tokens by byte string (every vocab token with those bytes becomes EOS);
    # its default is only tokenizer.eos_token_id (<eos>=1 for Gemma, NOT <end_of_turn>=106).
    eos_bytes = list(dict.fromkeys(llm.token_maps.decode[i].byte_string for i in eos_ids))  # one per text
    if sorted(llm.token_maps.eos_idxs) != sorted(eos_ids):
        llm = llm.spawn_new_eos(eos_bytes)
llm.prompt_ids = list(spec["prompt_ids"])  # verbatim, BOS included (no re-tokenisation)
load_s = time.perf_counter() - t0
assert llm.prompt_ids == list(spec["prompt_ids"])

# 1c. Grammar potential: a Boolean CFG over *bytes* (Earley parser; EOS handled internally
# by BoolCFG.complete, so the grammar needs no explicit end marker).
t0 = time.perf_counter()
grammar = BoolCFG.from_lark(spec["grammar"])
grammar_s = time.perf_counter() - t0

# 1d. Sampler: the grammar coerced to the LM's token vocabulary (a token sequence maps to its
# concatenated bytes, so any tokenisation of a sentence counts), then AWRS over llm x grammar.
t0 = time.perf_counter()
condition = grammar.coerce(llm, f=b"".join)
sampler = AWRS(llm, condition, seed=int(spec["seed"]))
sampler_s = time.perf_counter() - t0

record = {
    "versions": versions(),
    "timings": {"import_s": import_s, "load_s": load_s, "grammar_s": grammar_s,
                "sampler_s": sampler_s},
    "settings": {"eos_token_ids": list(llm.token_maps.eos_idxs),
                 "eos_byte_strings": [b.decode("utf-8", "replace") for b in llm.eos_byte_strings],
                 "resampling_method": spec.get("resampling_method", "multinomial"),
                 "keep_cache": bool(spec.get("keep_cache", False)),
                 "temperature": llm.temperature},
    "runs": [],
}


async def one_run():
    return await sampler.smc(n_particles=int(spec["particles"]),
                             ess_threshold=float(spec["ess_threshold"]),
                             max_tokens=int(spec["max_tokens"]),
                             resampling_method=record["settings"]["resampling_method"])


# 2-3. Independent runs, each seeded with seed + run index and timed on the wall clock.
for r in range(int(spec["runs"])):
    if not record["settings"]["keep_cache"]:
        llm.model.clear_cache()  # drop the logprob/KV trie from earlier runs (prompt included)
        grammar.clear_cache()  # and the Earley parser's memo of byte-prefix charts
    seed_all(int(spec["seed"]) + r)
    t0 = time.perf_counter()
    seqs = asyncio.run(one_run())
    seconds = time.perf_counter() - t0
    log_ml = float(seqs.log_ml)
    record["runs"].append({
        "seconds": seconds,
        "log_ml": log_ml,  # -Infinity when every particle has weight 0
        "ess": float(seqs.ess),
        "particles": [particle_record(c, w) for c, w in zip(seqs.contexts, seqs.log_weights)],
        "decoded_posterior": {k: float(v) for k, v in seqs.decoded_posterior.items()},
    })
    print(f"run {r}: {seconds:.3f}s log_ml={log_ml:.4f} "
          f"{[p['text'] for p in record['runs'][-1]['particles']]}", file=sys.stderr)

with open(args.out, "w") as f:
    json.dump(record, f, indent=1)
print(json.dumps(record["timings"]), file=sys.stderr)
