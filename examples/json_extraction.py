"""Structured extraction: a JSON Schema (here from a pydantic model) -> a valid object from text.

    python examples/json_extraction.py

Every token is masked so the output stays a prefix of a document the schema accepts: a finished
result always parses and validates (property order follows the schema).
"""

import json
from typing import Literal

import torch
from pydantic import BaseModel, Field

from trellis import generate, load
from trellis.constrain import JsonSchema


class Event(BaseModel):
    title: str = Field(max_length=40)
    city: str
    year: int = Field(ge=1900, le=2100)
    kind: Literal["concert", "conference", "match"]


torch.set_num_threads(2)
model = load()  # the embedded Gemma 3 270M (~10 s once converted)

text = "The Rolling Stones played a sold-out concert in Lisbon in 2022."
prompt = f"Extract the event as JSON.\nText: {text}\nJSON: "
# pydantic models leave additionalProperties open (the spec then allows any extra key);
# closed_objects=True allows only the declared fields, so a small model cannot ramble on.
res = generate(model, prompt, schema=JsonSchema(Event, closed_objects=True), max_new_tokens=64)
print(res.text)
print(Event.model_validate_json(res.text))  # parses whenever res.finished: only valid events fit

# A plain JSON Schema dict works the same; flexible whitespace accepts json.dumps(indent=2) style.
schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {
    "type": "array", "items": {"type": "string"}, "maxItems": 3}}, "required": ["name", "tags"],
    "additionalProperties": False}
res = generate(model, "A JSON record for the Eiffel Tower with up to three tags: ",
               schema=JsonSchema(schema, whitespace="flexible", max_whitespace=8), max_new_tokens=64)
print(json.loads(res.text))
