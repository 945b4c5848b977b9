"""The CUDA path, timed: ``generate()`` on a GPU with Gemma 3 270M's architecture and vocabulary.

    python benchmarks/bench_cuda.py [--device cuda] [--tokenizer DIR] [--schemas DIR] [--tokens 64]

The model is Gemma 3 270M's own config (``DIR/config.json``: 18 layers, 262,144-token vocabulary)
with seeded random weights, and the real tokenizer from ``DIR`` (default: the converted model's
folder, ``trellis.models.default_model_dir()``). Random weights because a GPU machine here cannot
receive the 1 GB checkpoint; the constraint's work per token depends on the vocabulary and the
grammar state, not on the weights, but the generated text (and so the states walked) is random.

For each request it times ``generate(handle, prompt, ..., max_new_tokens=--tokens)`` twice: fresh
(in-process memos cleared, an empty disk cache) and again (the same request: every mask cached).
It prints ms per generated token and the time to the first token (``max_new_tokens=1``, fresh)
for: unconstrained; ``grammar="json.lark"``; each schema file in ``--schemas``. Also
``apply_bitmask_`` for one 262,144-token row on the device, with the bitmask on the host (what
``Decoder`` does every step) and already on the device.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import json
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trellis import generate  # noqa: E402
tc = importlib.import_module("trellis.constrain.compile")  # the module (trellis.constrain.compile is the function)
from trellis.mask import apply_bitmask_  # noqa: E402
from trellis.models import default_model_dir, load  # noqa: E402


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def fresh() -> None:
    tc.clear_caches()
    os.environ["TRELLIS_CACHE_DIR"] = tempfile.mkdtemp(prefix="trellis-cuda-")


def timed(device: str, fn) -> tuple[float, object]:
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


def mask_cost(device: str, vocab_size: int, reps: int = 200) -> dict[str, float]:
    logits = torch.randn(1, vocab_size, device=device)
    bm = torch.randint(-(1 << 31), (1 << 31) - 1, (1, (vocab_size + 31) // 32), dtype=torch.int64).to(torch.int32)
    out = {}
    for name, mask in (("host bitmask", bm), ("device bitmask", bm.to(device))):
        for _ in range(10):
            apply_bitmask_(logits, mask)
        dt, _ = timed(device, lambda: [apply_bitmask_(logits, mask) for _ in range(reps)])
        out[name] = dt / reps * 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokenizer", default=str(default_model_dir()), help="folder with config.json and tokenizer files")
    ap.add_argument("--schemas", default=None, help="folder of JSON Schema files (*.json)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(args.tokenizer, local_files_only=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    handle = load(model, tokenizer=args.tokenizer, dtype=getattr(torch, args.dtype), device=args.device)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"device {args.device} ({name}), torch {torch.__version__}, dtype {args.dtype}, "
          f"vocab {len(handle.vocab.tokens)}, {args.tokens} new tokens")
    prompt = "Here is the requested JSON object:\n"
    requests: list[tuple[str, dict]] = [("unconstrained", {}), ("json.lark", {"grammar": "json.lark"})]
    for path in sorted(glob.glob(os.path.join(args.schemas, "*.json"))) if args.schemas else []:
        with open(path) as f:
            requests.append((os.path.basename(path), {"schema": json.load(f)}))
    for _ in range(2):  # warm-up: kernels, allocator, the prompt's KV cache (every row reuses it)
        generate(handle, prompt, max_new_tokens=1)
        generate(handle, prompt, max_new_tokens=args.tokens)
    rows = []
    for label, kw in requests:
        fresh()
        ttft, _ = timed(args.device, lambda: generate(handle, prompt, max_new_tokens=1, **kw))
        fresh()
        cold, res = timed(args.device, lambda: generate(handle, prompt, max_new_tokens=args.tokens, **kw))
        warm, res2 = timed(args.device, lambda: generate(handle, prompt, max_new_tokens=args.tokens, **kw))
        assert res.tokens == res2.tokens, label  # greedy: the same request gives the same output
        n = max(1, len(res.tokens))
        rows.append((label, ttft * 1e3, cold / n * 1e3, warm / n * 1e3, len(res.tokens), res.stop_reason))
        print(f"{label:40s} ttft {ttft * 1e3:8.1f} ms | fresh {cold / n * 1e3:7.2f} ms/tok | "
              f"again {warm / n * 1e3:7.2f} ms/tok | {len(res.tokens)} tokens ({res.stop_reason})", flush=True)
    base = rows[0][3]
    cons = [r for r in rows[1:]]
    if cons:
        print(f"SUMMARY device={name} unconstrained {base:.2f} ms/tok; constrained again: median "
              f"{statistics.median(r[3] for r in cons):.2f} ms/tok, fresh median {statistics.median(r[2] for r in cons):.2f}"
              f" ms/tok, ttft median {statistics.median(r[1] for r in cons):.1f} ms (unconstrained {rows[0][1]:.1f})")
    for k, v in mask_cost(args.device, len(handle.vocab.tokens)).items():
        print(f"apply_bitmask_ 1 x {len(handle.vocab.tokens)} on {args.device}, {k}: {v:.3f} ms")


if __name__ == "__main__":
    main()
