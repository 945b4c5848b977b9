"""Constrain transformers' own ``model.generate`` with a trellis grammar: greedy, sampling, a
left-padded batch and beam search, on the embedded Gemma 3 270M.

    python examples/hf_logits_processor.py
"""

import json

import torch
from transformers import LogitsProcessorList

from trellis import load
from trellis.constrain import compile
from trellis.integrations import GrammarLogitsProcessor

torch.set_num_threads(2)
model = load()  # a ModelHandle: .model (transformers), .tokenizer, .vocab (exact token bytes)
tok = model.tokenizer
json_grammar = compile("json.lark", model.vocab)  # one compiled constraint, shared by every call below

prompts = ['Ada Lovelace as JSON: {"name": "Ada Lovelace", "born": 1815}\nAlan Turing as JSON:',
           'Colours as a JSON array: ["red", "green"]\nFruits as a JSON array:']
tok.padding_side = "left"  # decoder-only batches are padded on the left
batch = tok(prompts, return_tensors="pt", padding=True)
width = batch.input_ids.shape[1]


def show(title: str, out: torch.Tensor) -> None:
    print(f"-- {title}")
    for row in out[:, width:]:
        text = tok.decode(row, skip_special_tokens=True).split("\n")[0]
        try:
            json.loads(text)
            status = "complete JSON"
        except ValueError:
            status = "JSON prefix (token budget reached)"
        print(f"   {text!r}  [{status}]")


# A processor records where the prompt ends on its first call: use a fresh one per generate call.
# json.lark allows whitespace after the value, so stop at the end of the line (as quickstart.py does).
for title, options in [("greedy", dict(do_sample=False)),
                       ("sampling, temperature 0.8", dict(do_sample=True, temperature=0.8, top_p=0.95)),
                       ("beam search, 3 beams (scores renormalised after masking)",
                        dict(do_sample=False, num_beams=3, renormalize_logits=True))]:
    torch.manual_seed(0)
    out = model.model.generate(**batch, max_new_tokens=32,
                               logits_processor=LogitsProcessorList([GrammarLogitsProcessor(json_grammar)]),
                               pad_token_id=tok.pad_token_id, stop_strings=["\n"], tokenizer=tok, **options)
    show(title, out)
