"""``generate``: one call from a model and a prompt to text, under a grammar and a strategy."""

from __future__ import annotations

import codecs
import dataclasses
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence, Union

import torch

from trellis.constrain.base import Constraint, Unconstrained, is_unconstrained
from trellis.constrain.finish import Budgeted
from trellis.constrain.tools import (Tool, ToolCall, ToolCallError, as_tool, format_tools_prompt, parse_tool_calls,
                                     tool_constraint)
from trellis.decoder import Decoder, Hypothesis
from trellis.errors import UsageError
from trellis.hf_lm import language_model
from trellis.lm_proxy import lm_stats
from trellis.search.base import BatchStrategy, StepwiseStrategy, Strategy, WeightedStrategy
from trellis.search.greedy import Greedy
from trellis.search.names import canonical_name, strategy_from_name
from trellis.search.sample import Sample
from trellis.search.smc import SMCResult
from trellis.tokens import TokenTree, Vocabulary


StopReason = Literal["eos", "stop", "length", "steered", "rejected"]


@dataclass(frozen=True)
class GenerationStats:
    """``seconds`` and the forward counters cover the whole call: for a batch (several prompts, or
    ``n`` > 1) every result carries the batch's figures, ``new_tokens`` its own."""

    new_tokens: int
    seconds: float
    forward_calls: int
    tokens_forwarded: int
    cache_hits: int

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its log-probability and the ``top`` alternatives (token, log-prob), best
    first, under the distribution the decoder sampled from (masked by the constraint, penalised and
    warped by temperature/top-k/top-p/min-p, renormalised)."""

    token: int
    piece: bytes
    logprob: float
    top: tuple[tuple[int, float], ...] = ()

    @property
    def text(self) -> str:
        return self.piece.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class GenerationResult:
    """``text`` is the decoded best hypothesis (``None`` for a model without a tokenizer);
    ``tokens`` its generated ids; ``hypotheses`` every returned hypothesis, best first;
    ``tool_calls`` the parsed calls when ``tools`` were given (empty: the model answered in text,
    or the budget ran out mid-call, ``finished=False``).

    ``stop_reason``: ``"eos"`` (the model ended it, in an accepting state), ``"stop"`` (a stop
    string), ``"length"`` (``max_new_tokens`` spent, or no token allowed: ``finished=False``, the
    output is cut as it stood), ``"steered"`` (``finish_in_budget=True`` overrode the model's
    choice to close the output in time: it parses, but it is not what the model would have
    written), ``"rejected"`` (SMC only: every particle had weight 0, the potentials rejected the
    output shown). ``logprobs``: per generated token when asked for (``logprobs=k``). ``smc``: with
    ``strategy="smc"``, the run's ``SMCResult``: the posterior over output texts, log Z^ (the
    estimate of log P(output in the grammar)), ESS per step, resampling count, every particle."""

    text: str | None
    tokens: tuple[int, ...]
    finished: bool
    hypotheses: tuple[Hypothesis, ...]
    stats: GenerationStats
    texts: tuple[str, ...] | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: StopReason = "length"
    logprobs: tuple[TokenLogprob, ...] | None = None
    smc: SMCResult | None = None


def _constraint(grammar: Any, vocab: Vocabulary | None) -> Constraint:
    if grammar is None:
        return Unconstrained(vocab)
    if isinstance(grammar, Constraint):
        return grammar  # an already compiled Constraint
    if vocab is None:
        raise UsageError("a grammar needs the model's vocabulary: load the model with its tokenizer")
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


Prompt = Union[str, Sequence[int]]


def generate(model: Any, prompt: Prompt | Sequence[Prompt] | None = None, *,
             messages: Sequence[Mapping[str, str]] | Sequence[Sequence[Mapping[str, str]]] | None = None,
             chat_template: str | None = None, grammar: Any = None, schema: Any = None,
             strategy: Strategy | str | None = None, max_new_tokens: int = 128, temperature: float | None = None,
             top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, repetition_penalty: float = 1.0,
             stop: str | Sequence[str] = (), seed: int | None = None, n: int = 1, logprobs: int | None = None,
             suppress_tokens: Sequence[int | str] | str | None = "placeholders",
             bad_words: Sequence[str | Sequence[int]] = (),
             stream: bool = False, tools: Sequence[Any] | None = None, tool_choice: str = "auto",
             parallel_tool_calls: bool = False,
             tool_prompt: Callable[[Sequence[Tool], str], str] | None = format_tools_prompt,
             finish_in_budget: bool = False,
             ) -> Any:
    """Generate a continuation of ``prompt``.

    ``model``: anything ``trellis.load`` accepts, or a loaded ``ModelHandle``. ``prompt``: text, or
    token ids (needed for models without a tokenizer); a text that starts with the BOS token is not
    given a second one. A LIST of prompts is a batch: one result per prompt, decoded in lockstep
    (one batched forward per step) by greedy and sampling, one after another by other strategies.
    ``messages``: a conversation (``[{"role": "user", "content": ...}]``, or a list of them) in
    place of ``prompt``, rendered with the tokenizer's chat template (or ``chat_template``; see
    ``trellis.chat``). ``n``: samples per prompt (a sampling strategy: ``temperature > 0``,
    ``"sample"``, ``"best-of-n"``, ``"lookahead"``); ``n > 1`` returns a list of ``n`` results per
    prompt. So: one prompt -> a result; a list of prompts -> a list; ``n > 1`` -> one more level.

    ``grammar``: a shipped grammar name (``"json.lark"``), a path, Lark or GBNF text, a ``Regex``
    or a compiled ``Constraint``. ``strategy``: a ``Strategy`` or its name as on the command line
    (``"beam"``, ``"best-of-n"``, ...; ``trellis.search.strategy_from_name``); default greedy when
    ``temperature == 0``, else ``Sample``. ``seed`` seeds the default sampler and any strategy with
    a ``generator`` field left unset. ``temperature``: default 0 (greedy), but 1.0 (the model's own
    distribution) for ``strategy="smc"``: sequential Monte Carlo samples from the model conditioned
    on the grammar, and ``n`` is then its particle count (one result per prompt, whose ``smc`` holds
    the posterior; ``trellis.search.smc``). With ``stream=True`` returns a ``GenerationStream`` of text
    increments (stepwise strategies stream token by token; one prompt, ``n == 1``).

    ``stop``: a string or strings that end the output (cut before them, ``stop_reason="stop"``).
    ``suppress_tokens``: tokens never generated. Default ``"placeholders"``: a text-only model's
    multimodal placeholder tokens (``MULTIMODAL_PLACEHOLDERS``: Gemma 3's GGUF tokenizer lists
    ``<start_of_image>`` as text, and unconstrained sampling drew it); ``None``: nothing; ids or
    exact token strings (``"<start_of_image>"``), which replace the default; ``"special"``: every
    special token but EOS, and the placeholders. ``bad_words``: words (tokenized as written and
    with a leading space) or id sequences never completed (HF's ``bad_words_ids``). ``logprobs=k``: each result's ``logprobs`` holds, per
    generated token, its log-prob and the ``k`` best alternatives, from one extra forward over the
    output (``k=0``: the chosen token's only).

    ``tools``: ``Tool``s, typed Python functions or OpenAI tool specs; the reply is then constrained
    to a call (``tool_choice="required"`` or a tool name), a call or text (``"auto"``), text
    (``"none"``), a list of calls with ``parallel_tool_calls``, and parsed into
    ``result.tool_calls`` (``trellis.constrain.tools``). A text prompt is wrapped by
    ``tool_prompt(tools, prompt)`` (``None``: used as is).

    ``schema``: a JSON Schema (dict, JSON text, pydantic model class, or a ``JsonSchema`` with its
    options); the output is then one JSON value valid under it (``trellis.constrain.frontends.json_schema``).

    Budget: an output that runs out of ``max_new_tokens`` comes back as it stood, ``finished=False``
    and ``stop_reason="length"`` (a constrained one is then a prefix of the language, not a
    member). ``finish_in_budget=True`` (constrained only) instead steers near the end of the budget
    towards a short completion so the output parses (``trellis.constrain.finish.Budgeted``): it
    changes the distribution there (truncated to tokens that can still finish, EOS forced last),
    and a result it changed says ``stop_reason="steered"``.
    """
    from trellis.models import load

    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise UsageError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if not isinstance(n, int) or n < 1:
        raise UsageError(f"n must be an integer >= 1, got {n!r}")
    if logprobs is not None and (not isinstance(logprobs, int) or isinstance(logprobs, bool) or logprobs < 0):
        raise UsageError(f"logprobs must be None or an integer >= 0 (alternatives per token), got {logprobs!r}")
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    if not all(isinstance(s, str) and s for s in stops):
        raise UsageError(f"stop must be a non-empty string or a sequence of them, got {stop!r}")
    if (prompt is None) == (messages is None):
        raise UsageError("pass exactly one of prompt= and messages=")
    handle = load(model)
    vocab, tok = handle.vocab, handle.tokenizer
    prompts, batched = _prompts(prompt, messages, tok, chat_template)
    if messages is not None and vocab is not None:
        from trellis.chat import TURN_MARKERS

        vocab = _ending_turns(vocab, token_ids(TURN_MARKERS, vocab, tok))
    if schema is not None:
        if grammar is not None or tools:
            raise UsageError("pass one of grammar=, schema= or tools=")
        from trellis.constrain.frontends.json_schema import JsonSchema

        grammar = schema if isinstance(schema, JsonSchema) else JsonSchema(schema)
    tool_list = [as_tool(t) for t in tools] if tools else []
    if tool_list:
        if grammar is not None:
            raise UsageError("pass either grammar= or tools=, not both (tools= sets the grammar)")
        if vocab is None:
            raise UsageError("tools need the model's vocabulary: load the model with its tokenizer")
        grammar = tool_constraint(tool_list, vocab, tool_choice=tool_choice, parallel=parallel_tool_calls)
        if tool_prompt is not None:
            prompts = [tool_prompt(tool_list, p) if isinstance(p, str) else p for p in prompts]
    ids = [_ids(p, tok) for p in prompts]
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    if temperature is None:
        temperature = 1.0 if _weighted(strategy) else 0.0
    strategy = _strategy(strategy, temperature, generator, n)
    per_root = 1 if isinstance(strategy, WeightedStrategy) else n  # SMC: n is the particle count
    if (batched or per_root > 1) and stream:
        raise UsageError("stream=True takes one prompt and n=1")
    constraint = _constraint(grammar, vocab)
    if finish_in_budget and not is_unconstrained(constraint) and constraint.vocab is not None:
        constraint = Budgeted(constraint, max_new_tokens)
    decoder = Decoder(language_model(handle.model), constraint, temperature=temperature,
                      top_k=top_k, top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty,
                      stop=tuple(s.encode() for s in stops), vocab=vocab,
                      suppress=suppressed_ids(suppress_tokens, vocab, tok, text_only=not multimodal(handle.model)),
                      bad_words=_bad_words(bad_words, tok))
    roots = [decoder.start(i) for i in ids for _ in range(per_root)]
    if stream:
        holder = GenerationStream(iter(()))
        holder._chunks = _stream(decoder, strategy, roots[0], max_new_tokens, holder, logprobs)
        if tool_list:
            holder._chunks = _then_parse_calls(holder._chunks, holder, tool_list, parallel_tool_calls)
        return holder
    t0, s0 = time.perf_counter(), _lm_stats(decoder.lm)
    if len(roots) > 1 and isinstance(strategy, BatchStrategy):
        runs = [([h], None) for h in strategy.batch(decoder, roots, max_new_tokens=max_new_tokens)]
    else:
        runs = [_run_root(strategy, decoder, r, max_new_tokens) for r in roots]
    results = [_result(decoder, hyps, t0, s0, smc) for hyps, smc in runs]
    if logprobs is not None:
        results = [dataclasses.replace(r, logprobs=_token_logprobs(decoder, root, r.hypotheses[0], logprobs))
                   for r, root in zip(results, roots)]
    if tool_list:
        results = [_with_tool_calls(r, tool_list, parallel_tool_calls) for r in results]
    per_prompt: list[Any] = [results[i * per_root:(i + 1) * per_root] if per_root > 1 else results[i]
                             for i in range(len(ids))]
    return per_prompt if batched else per_prompt[0]


_TURN_VOCABS: "weakref.WeakKeyDictionary[Vocabulary, dict[frozenset[int], Vocabulary]]" = weakref.WeakKeyDictionary()


def _ending_turns(vocab: Vocabulary, markers: frozenset[int]) -> Vocabulary:
    """``vocab`` with the turn markers as EOS too: a reply to ``messages=`` ends where a turn does.
    One derived vocabulary per (vocabulary, markers), so compiled grammars and vocabulary tables
    built for it are reused across calls (building Gemma's takes seconds)."""
    ends = markers - vocab.eos
    if not ends:
        return vocab
    per = _TURN_VOCABS.setdefault(vocab, {})
    if ends not in per:
        per[ends] = Vocabulary(tuple(b"" if i in ends else t for i, t in enumerate(vocab.tokens)),
                               eos=vocab.eos | ends, special=vocab.special | ends)
    return per[ends]


def _prompts(prompt: Any, messages: Any, tok: Any, template: str | None) -> tuple[list[Prompt], bool]:
    """(prompts, whether the caller passed a batch)."""
    if messages is not None:
        from trellis.chat import chat_prompt

        if tok is None:
            raise UsageError("messages= needs the model's tokenizer (its chat template)")
        convs = list(messages)
        batched = bool(convs) and not isinstance(convs[0], Mapping)
        return [chat_prompt(tok, c, template) for c in (convs if batched else [convs])], batched
    if isinstance(prompt, str):
        return [prompt], False
    items = list(prompt)
    if not items:
        raise UsageError("empty prompt: pass text, token ids, or a non-empty list of prompts")
    if all(isinstance(p, int) or (hasattr(p, "__index__") and not isinstance(p, str)) for p in items):
        return [items], False  # one tokenized prompt
    if all(isinstance(p, str) or (isinstance(p, Sequence) and not isinstance(p, (str, bytes))) for p in items):
        return items, True
    raise UsageError("prompt must be text, a sequence of token ids, or a list of those")


def _ids(prompt: Prompt, tok: Any) -> list[int]:
    if isinstance(prompt, str):
        if tok is None:
            raise UsageError("a text prompt needs a tokenizer; pass token ids for tokenizer-less models")
        from trellis.chat import encode

        return encode(tok, prompt)
    return [int(t) for t in prompt]


def _weighted(strategy: Any) -> bool:
    """A strategy (or name) that returns weighted particles: SMC."""
    if isinstance(strategy, str):
        return canonical_name(strategy) == "smc"
    return isinstance(strategy, WeightedStrategy)


def _strategy(strategy: Strategy | str | None, temperature: float, generator: torch.Generator | None,
              n: int) -> Strategy:
    if strategy is None:
        strategy = Greedy() if temperature == 0 else Sample(generator=generator)
    elif isinstance(strategy, str):
        strategy = strategy_from_name(strategy, generator=generator, **({"particles": n} if _weighted(strategy) else {}))
    elif generator is not None and _samples(strategy):
        if strategy.generator is not None:  # type: ignore[attr-defined]
            raise UsageError("seed= and a strategy with its own generator: pass one of them")
        strategy = dataclasses.replace(strategy, generator=generator)  # type: ignore[type-var]
    if not isinstance(strategy, Strategy):
        raise UsageError(f"strategy must be a Strategy or a strategy name, got {strategy!r}")
    if isinstance(strategy, WeightedStrategy):
        if n > 1 and n != strategy.particles:
            raise UsageError(f"n={n} is SMC's particle count, but the strategy object has particles="
                             f"{strategy.particles}: pass one of them")
        if temperature == 0:
            raise UsageError("SMC samples the model conditioned on the grammar: temperature must be > 0 "
                             "(leave it unset for 1.0, the model's own distribution)")
        return strategy
    if n > 1 and (not _samples(strategy) or temperature == 0):
        raise UsageError(f"n={n} needs a sampling strategy at temperature > 0 (greedy, beam and the "
                         "other deterministic searches would return n identical outputs)")
    return strategy


def _samples(strategy: Any) -> bool:
    """A strategy that draws from a ``generator`` field (sample, best-of-n, lookahead)."""
    return dataclasses.is_dataclass(strategy) and "generator" in {f.name for f in dataclasses.fields(strategy)}


# Placeholders a multimodal checkpoint's tokenizer keeps for images, audio and video. A text-only
# model (Gemma 3 270M) has them in its vocabulary, as text in Gemma's GGUF tokenizer, and nothing
# taught it not to sample them: generate(model, "A name for a cat:", n=4, temperature=0.9) drew
# 31 <start_of_image> (issue 57). generate() suppresses those present by default.
MULTIMODAL_PLACEHOLDERS = (
    "<start_of_image>", "<end_of_image>", "<image_soft_token>", "[multimodal]", "<start_of_audio>",
    "<end_of_audio>", "<audio_soft_token>", "<image>", "<|image|>", "<|image_pad|>", "<|video_pad|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|audio_bos|>", "<|audio_eos|>", "<|AUDIO|>",
    "<|IMAGE|>", "<|VIDEO|>",
)


def multimodal(model: Any) -> bool:
    """Whether ``model`` takes images, audio or video (its config has a vision or audio part)."""
    config = getattr(model, "config", None)
    return any(getattr(config, key, None) is not None for key in ("vision_config", "audio_config"))


def token_ids(names: Sequence[str], vocab: Vocabulary | None, tok: Any) -> frozenset[int]:
    """The ids of those ``names`` that are single tokens of this tokenizer (or vocabulary)."""
    return frozenset(i for i in (_token_id(name, vocab, tok) for name in names) if i is not None)


def _token_id(t: str, vocab: Vocabulary | None, tok: Any) -> int | None:
    if tok is not None:  # special tokens (<image_soft_token>) have no bytes: ask the tokenizer
        i = tok.convert_tokens_to_ids(t)
        if isinstance(i, int) and (i != tok.unk_token_id or t == tok.unk_token):
            return i
        return None
    if vocab is not None:
        from trellis.constrain.vocab.walks import TokenMatrix

        return TokenMatrix.of(vocab).token_of_bytes(t.encode())
    return None


def suppressed_ids(tokens: Sequence[int | str] | str | None, vocab: Vocabulary | None, tok: Any, *,
                   text_only: bool = True) -> frozenset[int]:
    """The token ids ``generate(suppress_tokens=...)`` bans: ``None`` none; ``"placeholders"`` a
    text-only model's multimodal placeholders (none for a multimodal model); ids, token strings
    (``UsageError`` for one that is not a single token); or ``"special"`` (every special token but
    EOS, and the placeholders)."""
    if tokens is None:
        return frozenset()
    if tokens == "placeholders":
        return token_ids(MULTIMODAL_PLACEHOLDERS, vocab, tok) if text_only else frozenset()
    if tokens == "special":  # every special/control token but EOS (<start_of_image>, <pad>, <unk>, ...)
        if vocab is None:
            raise UsageError('suppress_tokens="special" needs the model\'s vocabulary')
        return frozenset(vocab.special - vocab.eos) | (token_ids(MULTIMODAL_PLACEHOLDERS, vocab, tok) if text_only else frozenset())
    if isinstance(tokens, (str, int)):
        tokens = [tokens]
    out = set()
    for t in tokens:
        if not isinstance(t, str):
            out.add(int(t))
            continue
        hit = _token_id(t, vocab, tok)
        if hit is None:
            raise UsageError(f"suppress_tokens: {t!r} is not a token of this vocabulary")
        out.add(hit)
    return frozenset(out)


def _bad_words(words: Sequence[str | Sequence[int]], tok: Any) -> tuple[tuple[int, ...], ...]:
    if isinstance(words, str):
        words = [words]
    out: list[tuple[int, ...]] = []
    for w in words:
        if isinstance(w, str):
            if tok is None:
                raise UsageError("bad_words given as strings need the model's tokenizer")
            for form in (w, " " + w):  # as written, and as a word inside text (HF's advice)
                ids = tuple(tok(form, add_special_tokens=False).input_ids)
                if ids and ids not in out:
                    out.append(ids)
        else:
            ids = tuple(int(t) for t in w)
            if not ids:
                raise UsageError("bad_words: an empty token sequence")
            out.append(ids)
    return tuple(out)


def _token_logprobs(decoder: Decoder, root: Hypothesis, hyp: Hypothesis, k: int) -> tuple[TokenLogprob, ...]:
    """Per generated token, its log-prob and the ``k`` best alternatives, from ONE forward over the
    output as a chain tree: the same masked, warped distributions the strategy saw (up to float
    rounding between a batched forward and step-by-step ones)."""
    toks = hyp.new_tokens
    if not toks:
        return ()
    lp, _ = decoder.tree_log_probs(root, TokenTree.chain(list(toks[:-1])))  # [len(toks), V]
    out = []
    vocab = decoder.vocab
    for i, t in enumerate(toks):
        row = lp[i]
        top: tuple[tuple[int, float], ...] = ()
        if k:
            finite = int(torch.isfinite(row).sum())
            vals, idx = torch.topk(row, min(k, finite)) if finite else (row[:0], row[:0].long())
            top = tuple(zip(idx.tolist(), vals.tolist()))
        out.append(TokenLogprob(t, vocab.tokens[t] if vocab is not None else b"", float(row[t]), top))
    return tuple(out)


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
    stats = lm_stats(lm)
    return stats.snapshot() if stats is not None else {}


def _run_root(strategy: Strategy, decoder: Decoder, root: Hypothesis,
              max_new_tokens: int) -> tuple[list[Hypothesis], SMCResult | None]:
    """One root's hypotheses, best first, and SMC's result when the strategy is weighted."""
    if isinstance(strategy, WeightedStrategy):
        run = strategy.weighted(decoder, root, max_new_tokens=max_new_tokens)
        return run.hypotheses(), run
    return strategy(decoder, root, max_new_tokens=max_new_tokens), None


def _result(decoder: Decoder, hyps: Sequence[Hypothesis], t0: float, s0: dict[str, int],
            smc: SMCResult | None = None) -> GenerationResult:
    seconds = time.perf_counter() - t0
    s1 = _lm_stats(decoder.lm)
    delta = {k: s1.get(k, 0) - s0.get(k, 0) for k in ("forward_calls", "tokens_forwarded", "cache_hits")}
    best = hyps[0]
    texts = tuple(decoder.text(h) for h in hyps) if decoder.vocab is not None else None
    return GenerationResult(
        text=texts[0] if texts is not None else None,
        tokens=best.new_tokens,
        finished=best.finished and (smc is None or smc.output.ending == "eos"),
        hypotheses=tuple(hyps),
        stats=GenerationStats(new_tokens=sum(h.num_new for h in hyps[:1]), seconds=seconds, **delta),
        texts=texts,
        stop_reason=stop_reason(decoder, best) if smc is None else smc.output.ending,
        smc=smc,
    )


def stop_reason(decoder: Decoder, hyp: Hypothesis) -> StopReason:
    """Why ``hyp`` ended (``GenerationResult.stop_reason``)."""
    if not hyp.finished:
        return "length"
    con = decoder.constraint
    if isinstance(con, Budgeted) and con.was_steered(hyp.state):
        return "steered"
    return "eos" if hyp.new_tokens and hyp.new_tokens[-1] in decoder.eos else "stop"


def _stream(decoder: Decoder, strategy: Strategy, root: Hypothesis, max_new_tokens: int,
            holder: GenerationStream, logprobs: int | None) -> Iterator[str]:
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
        hyps, smc = [last], None
    else:
        hyps, smc = _run_root(strategy, decoder, root, max_new_tokens)
    tail = pending(hyps[0], True)
    if tail:
        yield tail
    res = _result(decoder, hyps, t0, s0, smc)
    if logprobs is not None:
        res = dataclasses.replace(res, logprobs=_token_logprobs(decoder, root, hyps[0], logprobs))
    holder.result = res
