"""Quick start: generate with the embedded Gemma 3 270M, stream tokens, read the statistics.

    python examples/quickstart.py
"""

import torch

from trellis import generate, load

torch.set_num_threads(2)
model = load()  # first call converts the embedded GGUF once (~1-2 min), later calls take ~10 s

res = generate(model, "The capital of France is Paris. The capital of Germany is", max_new_tokens=12)
print(repr(res.text), f"{res.stats.tokens_per_s:.1f} tok/s, {res.stats.forward_calls} forward calls")

print("streamed: ", end="")
stream = generate(model, "Once upon a time", max_new_tokens=32, temperature=0.8, top_p=0.95, seed=0, stream=True)
for piece in stream:
    print(piece, end="", flush=True)
print(f"\n[{stream.result.stats.new_tokens} tokens, finished={stream.result.finished}]")

res = generate(model, 'Ada Lovelace as JSON: {"name": "Ada Lovelace", "born": 1815}. Alan Turing as JSON:',
               grammar="json.lark", stop=["\n"], max_new_tokens=48)  # json.lark allows trailing whitespace
print("under json.lark:", res.text)
