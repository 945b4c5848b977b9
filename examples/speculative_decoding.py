"""Speculative decoding on the embedded Gemma 3 270M: same tokens as greedy, fewer forward passes.

    python examples/speculative_decoding.py
"""

import time

import torch

from trellis import Decoder, Greedy, HFLanguageModel, load
from trellis.speculate import Composite, LayerSkip, PromptLookup, Speculative, TokenRecycling

torch.set_num_threads(2)
model = load()
prompt = ("Summarize: The committee met on Tuesday. The committee agreed that the budget for the new "
          "library would be increased. The budget for the new library will be presented next week.\n"
          "Summary: The committee")
ids = model.tokenizer(prompt).input_ids
lm = HFLanguageModel(model.model)
dec = Decoder(lm, temperature=0, vocab=model.vocab)  # temperature 0: greedy verification

# layer-skip: the model drafts for itself with a few middle layers skipped and a cut LM head
for name, strategy in [("greedy", Greedy()),
                       ("speculative", Speculative(Composite([PromptLookup(), TokenRecycling(model.vocab_size)]))),
                       ("layer-skip", Speculative(LayerSkip(model.model)))]:
    lm.reset()
    lm.reset_stats()
    t0 = time.perf_counter()
    hyp = strategy(dec, dec.start(ids), max_new_tokens=64)[0]
    sec = time.perf_counter() - t0
    print(f"{name:12s} {hyp.num_new / sec:5.1f} tok/s  {lm.stats.forward_calls:3d} forwards  {dec.text(hyp)!r}")
    if name != "greedy":
        print("  accepted draft tokens per round:", round(strategy.stats.mean_accepted, 2),
              "| acceptance by drafter:", strategy.stats.acceptance_by_drafter())
    if name == "speculative":
        composite = strategy
    if name == "layer-skip":
        # Draft & Verify's draft-exiting: each layer set's chain stops below its confidence threshold
        layers = range(model.model.config.num_hidden_layers)
        print("  layers skipped by the set pulled most:", sorted(set(layers) - set(strategy.drafter.choice)),
              "| stop thresholds:", [round(arm.stopping.gamma, 3) for arm in strategy.drafter.arms])

# The recycler inside the composite learned from every verification above; the dynamic tree it would
# draft next spends 8 nodes on the continuations the target found likeliest (trellis.speculate.tree).
recycler = composite.drafter.drafters[1]
draft = recycler.draft(dec, hyp, max_nodes=8, max_depth=4)
print("next dynamic draft tree from token recycling:")


def show(node: int, depth: int) -> None:
    for child in draft.tree.children(node):
        print("  " + "  " * depth + repr(model.tokenizer.decode([int(draft.tree.tokens[child])])))
        show(child, depth + 1)


show(-1, 0)
