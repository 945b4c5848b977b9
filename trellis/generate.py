"""``generate``: one call from a model and a prompt to text, under a grammar and a strategy."""

from __future__ import annotations

import codecs
import dataclasses
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from trellis.constrain.base import Constraint, Unconstrained, is_unconstrained
from trellis.constrain.budget import Budgeted
from trellis.constrain.tools import (Tool, ToolCall, ToolCallError, as_tool, format_tools_prompt, parse_tool_calls,
                                     tool_constraint)
from trellis.decoder import Decoder, Hypothesis
from trellis.lm import HFLanguageModel, LanguageModel
from trellis.search.base import StepwiseStrategy, Strategy
from trellis.search.greedy import Greedy
from trellis.search.sample import Sample
from trellis.tokens import Vocabulary


@dataclass(frozen=True)
class GenerationStats:
    new_tokens: int
    seconds: float
    forward_calls: int
    tokens_forwarded: int
    cache_hits: int

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class GenerationResult:
    """``text`` is the decoded best hypothesis (``None`` for a model without a tokenizer);
    ``tokens`` its generated ids; ``hypotheses`` every returned hypothesis, best first;
    ``tool_calls`` the parsed calls when ``tools`` were given (empty: the model answered in text,
    or the budget ran out mid-call, ``finished=False``)."""

    text: str | None
    tokens: tuple[int, ...]
    finished: bool
    hypotheses: tuple[Hypothesis, ...]
    stats: GenerationStats
    texts: tuple[str, ...] | None = None
    tool_calls: tuple[ToolCall, ...] = ()


_LMS: "weakref.WeakKeyDictionary[Any, HFLanguageModel]" = weakref.WeakKeyDictionary()


def language_model(model: Any) -> LanguageModel:
    """The cached ``HFLanguageModel`` of a transformers model (one KV cache per model object), or
    ``model`` itself when it already implements ``LanguageModel``."""
    if isinstance(model, LanguageModel):
        return model
    lm = _LMS.get(model)
    if lm is None:
        lm = _LMS[model] = HFLanguageModel(model)
    return lm


def _constraint(grammar: Any, vocab: Vocabulary | None) -> Constraint:
    if grammar is None:
        return Unconstrained(vocab)
    if hasattr(grammar, "advance") and hasattr(grammar, "fill_mask"):
        return grammar  # an already compiled Constraint
    if vocab is None:
        raise ValueError("a grammar needs the model's vocabulary: load the model with its tokenizer")
    from trellis.constrain.compile import compile as compile_grammar

    return compile_grammar(grammar, vocab)


@dataclass
class GenerationStream:
    """Iterates over text increments as tokens are produced (multi-byte characters are emitted
    whole); ``result`` holds the full ``GenerationResult`` once the iteration is over."""

    _chunks: Iterator[str]
    result: GenerationResult | None = field(default=None)

    def __iter__(self) -> Iterator[str]:
        return self._chunks


def generate(model: Any, prompt: str | Sequence[int], *, grammar: Any = None,
             strategy: Strategy | None = None, max_new_tokens: int = 128, temperature: float = 0.0,
             top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, repetition_penalty: float = 1.0,
             stop: Sequence[str] = (), seed: int | None = None,
             stream: bool = False, tools: Sequence[Any] | None = None, tool_choice: str = "auto",
             parallel_tool_calls: bool = False,
             tool_prompt: Callable[[Sequence[Tool], str], str] | None = format_tools_prompt,
             schema: Any = None, finish_in_budget: bool = True,
             ) -> GenerationResult | GenerationStream:
    """Generate a continuation of ``prompt``.

    ``model``: anything ``trellis.load`` accepts, or a loaded ``ModelHandle``. ``prompt``: text, or
    token ids (needed for models without a tokenizer). ``grammar``: a shipped grammar name
    (``"json.lark"``), a path, Lark text, a ``Regex`` or a compiled ``Constraint``. ``strategy``
    defaults to greedy when ``temperature == 0`` and to ``Sample`` otherwise. With ``stream=True``
    returns a ``GenerationStream`` of text increments (stepwise strategies stream token by token).

    ``tools``: ``Tool``s, typed Python functions or OpenAI tool specs; the reply is then constrained
    to a call (``tool_choice="required"`` or a tool name), a call or text (``"auto"``), text
    (``"none"``), a list of
    calls with ``parallel_tool_calls``, and parsed into ``result.tool_calls``
    (``trellis.constrain.tools``). A text prompt is wrapped by ``tool_prompt(tools, prompt)``
    (``None``: used as is).

    ``schema``: a JSON Schema (dict, JSON text, pydantic model class, or a ``JsonSchema`` with its
    options); the output is then one JSON value valid under it (``trellis.constrain.json_schema``).

    ``finish_in_budget`` (constrained only): near ``max_new_tokens`` the output is steered to close
    in time, so it still parses (``trellis.constrain.budget.Budgeted``; an output that finishes
    within the budget on its own is unchanged under greedy decoding).
    """
    from trellis.models import load

    handle = load(model)
    vocab = handle.vocab
    if schema is not None:
        if grammar is not None or tools:
            raise ValueError("pass one of grammar=, schema= or tools=")
        from trellis.constrain.json_schema import JsonSchema

        grammar = schema if isinstance(schema, JsonSchema) else JsonSchema(schema)
    tool_list = [as_tool(t) for t in tools] if tools else []
    if tool_list:
        if grammar is not None:
            raise ValueError("pass either grammar= or tools=, not both (tools= sets the grammar)")
        if vocab is None:
            raise ValueError("tools need the model's vocabulary: load the model with its tokenizer")
        grammar = tool_constraint(tool_list, vocab, tool_choice=tool_choice, parallel=parallel_tool_calls)
        if isinstance(prompt, str) and tool_prompt is not None:
            prompt = tool_prompt(tool_list, prompt)
    if isinstance(prompt, str):
        if handle.tokenizer is None:
            raise ValueError("a text prompt needs a tokenizer; pass token ids for tokenizer-less models")
        ids = list(handle.tokenizer(prompt).input_ids)
    else:
        ids = [int(t) for t in prompt]
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    if strategy is None:
        strategy = Greedy() if temperature == 0 else Sample(generator=generator)
    constraint = _constraint(grammar, vocab)
    if finish_in_budget and not is_unconstrained(constraint) and constraint.vocab is not None:
        constraint = Budgeted(constraint, max_new_tokens)
    decoder = Decoder(language_model(handle.model), constraint, temperature=temperature,
                      top_k=top_k, top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty,
                      stop=tuple(s.encode() for s in stop), vocab=vocab)
    root = decoder.start(ids)
    if stream:
        holder = GenerationStream(iter(()))
        holder._chunks = _stream(decoder, strategy, root, max_new_tokens, holder)
        if tool_list:
            holder._chunks = _then_parse_calls(holder._chunks, holder, tool_list, parallel_tool_calls)
        return holder
    t0, s0 = time.perf_counter(), _lm_stats(decoder.lm)
    hyps = strategy(decoder, root, max_new_tokens=max_new_tokens)
    res = _result(decoder, hyps, t0, s0)
    return _with_tool_calls(res, tool_list, parallel_tool_calls) if tool_list else res


def _with_tool_calls(res: GenerationResult, tools: Sequence[Tool], parallel: bool) -> GenerationResult:
    try:
        calls = parse_tool_calls(res.text, tools, parallel=parallel)
    except ToolCallError:  # a call cut short by the budget or a stop string
        calls = []
    return dataclasses.replace(res, tool_calls=tuple(calls))


def _then_parse_calls(chunks: Iterator[str], holder: GenerationStream, tools: Sequence[Tool],
                      parallel: bool) -> Iterator[str]:
    yield from chunks
    if holder.result is not None:
        holder.result = _with_tool_calls(holder.result, tools, parallel)


def _lm_stats(lm: Any) -> dict[str, int]:
    stats = getattr(lm, "stats", None)
    return stats.snapshot() if stats is not None else {}


def _result(decoder: Decoder, hyps: Sequence[Hypothesis], t0: float, s0: dict[str, int]) -> GenerationResult:
    seconds = time.perf_counter() - t0
    s1 = _lm_stats(decoder.lm)
    delta = {k: s1.get(k, 0) - s0.get(k, 0) for k in ("forward_calls", "tokens_forwarded", "cache_hits")}
    best = hyps[0]
    texts = tuple(decoder.text(h) for h in hyps) if decoder.vocab is not None else None
    return GenerationResult(
        text=texts[0] if texts is not None else None,
        tokens=best.new_tokens,
        finished=best.finished,
        hypotheses=tuple(hyps),
        stats=GenerationStats(new_tokens=sum(h.num_new for h in hyps[:1]), seconds=seconds, **delta),
        texts=texts,
    )


def _stream(decoder: Decoder, strategy: Strategy, root: Hypothesis, max_new_tokens: int,
            holder: GenerationStream) -> Iterator[str]:
    t0, s0 = time.perf_counter(), _lm_stats(decoder.lm)
    vocab = decoder.vocab
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    emitted = 0  # generated bytes already handed to the utf-8 decoder
    stop_guard = max((len(s) for s in decoder.stop), default=1) - 1

    def pending(h: Hypothesis, final: bool) -> str:
        # Hold back bytes that could be the start of a stop string; the final flush cuts at it.
        nonlocal emitted
        if vocab is None:
            return ""
        data = vocab.decode(h.new_tokens)
        for s in decoder.stop:
            k = data.find(s)
            if k >= 0:
                data, final = data[:k], True
        upto = len(data) if final else max(emitted, len(data) - stop_guard)
        piece = utf8.decode(data[emitted:upto], final=final)
        emitted = upto
        return piece

    if isinstance(strategy, StepwiseStrategy):
        last = root
        for last in strategy.steps(decoder, root, max_new_tokens=max_new_tokens):
            piece = pending(last, False)
            if piece:
                yield piece
        hyps = [last]
    else:
        hyps = strategy(decoder, root, max_new_tokens=max_new_tokens)
    tail = pending(hyps[0], True)
    if tail:
        yield tail
    holder.result = _result(decoder, hyps, t0, s0)
