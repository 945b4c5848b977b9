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
print(f"\n[{stream.result.stats.new_tokens} tokens, stop_reason={stream.result.stop_reason}]")

res = generate(model, 'Ada Lovelace as JSON: {"name": "Ada Lovelace", "born": 1815}. Alan Turing as JSON:',
               grammar="json.lark", max_new_tokens=48)  # the grammar ends at the value: EOS follows it
print("under json.lark:", res.text, f"({res.stop_reason})")  # "length" = cut by the budget, not a whole value

# A batch: one result per prompt, decoded in lockstep (one forward per step for all of them).
for r in generate(model, ["The capital of Italy is", "The capital of Spain is Madrid. The capital of Peru is"],
                  max_new_tokens=6, logprobs=2):
    print(repr(r.text), [(lp.text, round(lp.logprob, 2)) for lp in r.logprobs[:2]])
