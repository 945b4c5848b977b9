"""Search strategies on the embedded Gemma 3 270M: beam vs diverse beam vs MCTS with a reward, and
the explored MCTS tree written as SVG.

    python examples/search_strategies.py            # ~1-2 min on a laptop CPU

The image markers are suppressed (``Decoder(suppress=...)``, ``generate(..., suppress_tokens=
["<start_of_image>", ...])``), and so are the special tokens but EOS: the base model's beams
otherwise fill up with ``<start_of_image>`` (the GGUF's tokenizer lists it as ordinary text), a
token it scores high after a colon but that never belongs in text.
"""

from __future__ import annotations

import torch

from trellis.decoder import Decoder
from trellis.hf_lm import HFLanguageModel
from trellis.models import load
from trellis.search import MCTS, Beam, DiverseBeam, EntropyGate
from trellis.viz import write_tree

torch.set_num_threads(2)
handle = load()
vocab = handle.vocab
images = handle.tokenizer.convert_tokens_to_ids(["<start_of_image>", "<end_of_image>", "[multimodal]"])
dec = Decoder(HFLanguageModel(handle.model), vocab=vocab, suppress=(vocab.special - vocab.eos) | set(images))
root = dec.start(handle.tokenizer("A short list of fruits:").input_ids)

beam = Beam(width=4, n_best=2).search(dec, root, max_new_tokens=12)
for h, s in zip(beam.hypotheses, beam.scores):
    print(f"beam    {s:7.3f}  {dec.text(h)!r}")

diverse = DiverseBeam(width=4, groups=2, diversity_penalty=2.0).search(dec, root, max_new_tokens=12)
for h, s in zip(diverse.hypotheses, diverse.scores):
    print(f"diverse {s:7.3f}  {dec.text(h)!r}")


def mentions_mango(h) -> float:
    """Reward: 1 if the text names a mango, plus a little for fluency."""
    return float("mango" in dec.text(h).lower()) + 0.01 * h.logprob / max(1, h.num_new)


mcts = MCTS(reward=mentions_mango, k=4, max_rollouts=24).search(dec, root, max_new_tokens=12)
print(f"mcts    {mcts.scores[0]:7.3f}  {dec.text(mcts.hypotheses[0])!r}")
print("tree ->", write_tree(mcts.tree, "mcts_tree.svg"))

gate = EntropyGate(threshold=2.0, k=3, depth=3).search(dec, root, max_new_tokens=12)
pauses = sum(bool(d.get("paused")) for _, d in gate.tree.nodes(data=True))
print(f"entropy-gate ({pauses} pauses)  {dec.text(gate.hypotheses[0])!r}")
