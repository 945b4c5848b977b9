"""Grammar-aligned sampling: where masking each token goes wrong, and SMC does not.

The question "Name a primary color." under the grammar ``" red" | " blue" | " yellow"``. Gemma 3
270M, asked for the answer, gives the three words 0.71%, 0.17% and 0.12% of its next-token mass;
the bare space token " " gets 2.8% (it wants " " then something else). A locally masked sampler
renormalises over what the grammar allows, so it writes " " 73% of the time, and after a bare
space the model's "yellow" token is the likeliest of the three: masked sampling answers yellow
~76% of the time, where the model itself, conditioned on answering with one of the three words,
says red 62%, blue 22%, yellow 17%. SMC weights each particle by the mass the grammar allowed, so
the path through " " pays for how unlikely it was, and its outputs follow the conditioned model.

Both distributions are computed exactly here (``exact_posterior`` walks the whole token tree of
this small language: ~5,000 token sequences, ~10 s), next to 200 masked samples and 40 SMC runs
of 8 particles pooled by their Z^. ~1 minute on a 2-core CPU.

    python examples/smc_sampling.py
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from trellis import generate, load
from trellis.constrain import compile
from trellis.decoder import Decoder
from trellis.hf_lm import language_model
from trellis.search import exact_posterior, pooled_posterior, total_variation

PROMPT = "Q: Name a primary color.\nA:"
GRAMMAR = 'start: " red" | " blue" | " yellow"'

model = load()
# A base model ends its answer with a newline, almost never with its EOS token: make the newline
# tokens the EOS, so "the model ends its answer here" is something it actually says.
model = dataclasses.replace(model, vocab=model.vocab.ending_at(b"\n"))

# What the model would say, conditioned on the grammar: exact, by walking every token sequence.
dec = Decoder(language_model(model.model), compile(GRAMMAR, model.vocab), temperature=1.0, vocab=model.vocab)
exact = exact_posterior(dec, dec.start(model.tokenizer(PROMPT).input_ids), max_new_tokens=5)

# The locally masked sampler: 200 samples (and its exact distribution from the same walk).
samples = generate(model, PROMPT, grammar=GRAMMAR, temperature=1.0, n=200, seed=0, max_new_tokens=5)
counts = Counter(r.text for r in samples)
masked = {k: v / len(samples) for k, v in counts.items()}

# SMC: one call gives a draw from its posterior (res.text) and the posterior itself ...
res = generate(model, PROMPT, grammar=GRAMMAR, strategy="smc", n=8, seed=0, max_new_tokens=5)
print(f"one SMC call: {res.text!r}, posterior {res.smc.posterior}, log Z^ {res.smc.log_z:.2f}")
# ... and independent runs pool into one estimate, each weighted by its Z^.
runs = [generate(model, PROMPT, grammar=GRAMMAR, strategy="smc", n=8, seed=s, max_new_tokens=5).smc
        for s in range(40)]
smc, log_z = pooled_posterior(runs)

print(f"\n{'answer':10s} {'exact p(x | grammar)':>22s} {'masked (exact)':>15s} {'masked (200)':>13s} {'SMC (40 x 8)':>13s}")
for word in exact.by_text:
    print(f"{word!r:10s} {exact.by_text[word]:22.3f} {exact.masked.get(word, 0):15.3f} {masked.get(word, 0):13.3f}"
          f" {smc.get(word, 0):13.3f}")
print(f"\nTV to the exact posterior: masked sampling {total_variation(exact.masked, exact.by_text):.3f}, "
      f"SMC {total_variation(smc, exact.by_text):.3f}")
print(f"log P(answer in the grammar): exact {exact.log_z:.3f}, SMC's estimate {log_z:.3f}")
