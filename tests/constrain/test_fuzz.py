"""Fuzz every shipped grammar with constrained decodes under random logits.

Each decode samples from seeded random logits masked by the grammar until EOS or a token budget.
At every step: the mask is non-empty (dead ends are bugs: masks are exact), EOS is in it exactly
when ``is_accepting``, and the sampled token advances. Every finished output must parse with
Lark's own parser for the engine's language: Earley with ``lexer="dynamic_complete"`` for the
default scannerless engine, ``parser="lalr"`` for ``engine="lalr"``.

Two vocabularies: a tiny one per grammar (the grammar's alphabet, literals, pieces of random
sentences, random byte n-grams, split UTF-8 characters) and Gemma 3's 262,144 tokens. Logits are
Gaussian noise plus, per decode, a random bias toward the tokens of the tiny vocabulary (so that
Gemma decodes sometimes finish: pure noise over 262k tokens almost never closes a string) and
toward EOS. CI runs 300 tiny + 5 Gemma decodes per grammar; ``-m exhaustive`` (or
``benchmarks/fuzz_grammars.py --tiny 10000 --gemma 500``) the full counts.

The corpus grammars (``/work/shared/data/grammars``: ``lark/*.lark``, ``outlines/*.lark``,
``llama.cpp/*.gbnf``, ids like ``"lark/lark.lark"``) are fuzzed the same way where the default
engine compiles them (``compile(path, vocab)``, ``compile(Gbnf.from_file(path), vocab)``); the
files it refuses (``%declare``, no ``start`` rule, a relative ``%import`` missing from the flat
corpus) must be refused with one of those reasons. Oracles: Lark's Earley parser with
``lexer="dynamic_complete"`` and the file's folder as import path for ``.lark`` files; XGrammar
reading the GBNF text itself for ``.gbnf`` files. Their tiny vocabulary takes its sentences from
``lark_oracle.random_sentences`` (a random walk under the independent oracle). Each Lark parse
gets a time limit (Earley on ambiguous grammars such as lark.lark can be very slow); a parse
that runs out of time is counted as ``timeouts``: neither parsed nor failed. CI runs 20 tiny
decodes per corpus grammar.
"""

from __future__ import annotations

import random
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.constrain.grammar_cases import sentences
from trellis.constrain import Gbnf, compile, shipped_grammars
from trellis.constrain.compile import load_grammar_text
from trellis.constrain.errors import GrammarError
from trellis.mask import allocate_bitmask, bitmask_to_bool
from trellis.tokens import Vocabulary

CI_TINY, CI_GEMMA = 300, 5
FULL_TINY, FULL_GEMMA = 10_000, 500
BUDGET = 48
CORPUS = Path("/work/shared/data/grammars")
CI_CORPUS_TINY = 20
PARSE_TIMEOUT = 10.0  # seconds per oracle parse of a corpus grammar's output
# why the default engine refuses a corpus file: the only acceptable refusals
REFUSALS = {"%declare": "%declare is not supported", "no start rule": "start rule 'start' is not defined",
            "missing %import": r"%import: grammar file \S+ not found"}


def lark_parser(name: str, engine: str = "earley") -> Any:
    import lark

    text, _ = load_grammar_text(name)
    if engine == "lalr":
        return lark.Lark(text, parser="lalr")
    return lark.Lark(text, parser="earley", lexer="dynamic_complete")


def tiny_vocab(name: str, seed: int = 0) -> Vocabulary:
    """A few hundred tokens that can spell the grammar's sentences several ways."""
    import lark

    text, _ = load_grammar_text(name)
    lk = lark.Lark(text, parser="lalr")
    docs = [d.encode() for d in sentences(name, lk, 40, seed=seed)]
    return _tiny_vocab(docs, _literals(lk), seed)


def _literals(lk: Any) -> list[bytes]:
    return [t.pattern.value.encode() for t in lk.terminals if type(t.pattern).__name__ == "PatternStr"]


def _tiny_vocab(docs: list[bytes], literals: list[bytes], seed: int) -> Vocabulary:
    """The grammar's alphabet, its literals, random byte n-grams, pieces of ``docs`` (sentences),
    whole and split UTF-8 characters, then EOS and a special token."""
    rng = random.Random(seed)
    alpha = sorted(set(b"".join(docs)) | set(b"".join(literals)) | set(b"x0 \n\"'"))
    toks: list[bytes] = [bytes([a]) for a in alpha] + [lit for lit in literals if lit]
    toks += [bytes(rng.choice(alpha) for _ in range(rng.choice((2, 3)))) for _ in range(100)]
    for _ in range(150):
        d = rng.choice(docs)
        if len(d) >= 2:
            i = rng.randrange(len(d) - 1)
            toks.append(d[i:i + rng.randint(2, 8)])
    e, eu = "é".encode(), "€".encode()
    toks += [e[:1], e[1:], eu[:2], eu[2:], e, eu]  # whole and split UTF-8 characters
    toks = list(dict.fromkeys(toks))
    toks += [b"", b""]  # EOS, then a special token (never allowed as text)
    n = len(toks)
    return Vocabulary(tuple(toks), eos=frozenset([n - 2]), special=frozenset([n - 1]))


# ----------------------------------------------------------------------------- corpus grammars


def corpus_grammars(root: Path = CORPUS) -> list[str]:
    """Ids (``"lark/lark.lark"``, ``"llama.cpp/json.gbnf"``) of every corpus grammar file."""
    if not root.is_dir():
        return []
    paths = [*sorted((root / "lark").glob("*.lark")), *sorted((root / "outlines").glob("*.lark")),
             *sorted((root / "llama.cpp").glob("*.gbnf"))]
    return [f"{p.parent.name}/{p.name}" for p in paths]


def is_corpus(name: str) -> bool:
    return "/" in name


def compile_corpus(gid: str, vocab: Vocabulary, root: Path = CORPUS, **kw: Any) -> Any:
    """The default engine's constraint for a corpus file; ``GrammarError`` where it is refused."""
    path = root / gid
    if path.suffix == ".gbnf":
        return compile(Gbnf.from_file(path), vocab, **kw)
    return compile(path, vocab, **kw)


def corpus_refusal(gid: str, root: Path = CORPUS) -> GrammarError | None:
    """The default engine's refusal of a corpus file (None: it compiles), on a byte vocabulary."""
    toks = tuple(bytes([b]) for b in range(256)) + (b"",)
    try:
        compile_corpus(gid, Vocabulary(toks, eos=frozenset([256])), root, cache=False)
    except GrammarError as e:
        return e
    return None


def refusal_reason(e: GrammarError) -> str | None:
    """Which acceptable refusal (a key of REFUSALS) ``e`` is, or None (an unexpected one)."""
    return next((k for k, pat in REFUSALS.items() if re.search(pat, str(e))), None)


def corpus_lark_text(gid: str, root: Path = CORPUS) -> tuple[str, list[str]]:
    """(Lark text, import paths): the file itself, or the character-level Lark text of a GBNF file."""
    path = root / gid
    if path.suffix == ".gbnf":
        return Gbnf.from_file(path).to_lark(), []
    return path.read_text(encoding="utf-8"), [str(path.parent)]


class ParseTimeout(BaseException):
    """An oracle parse ran out of time (a BaseException, so no ``except Exception`` swallows it)."""


class GbnfOracle:
    """``parse(s)`` raises unless XGrammar, reading the GBNF text itself, accepts ``s``; the error
    says what Lark's Earley parser says of ``s`` on ``Gbnf(text).to_lark()`` (which of the two
    readings of the file disagrees with the engine)."""

    def __init__(self, path: Path) -> None:
        import lark

        from tests.constrain.test_gbnf import xgrammar_acceptor

        text = path.read_text(encoding="utf-8")
        self.accepts = xgrammar_acceptor(text)
        self.lark = lark.Lark(Gbnf(text).to_lark(), parser="earley", lexer="dynamic_complete", start="start")

    def parse(self, s: str) -> None:
        if not self.accepts(s):
            try:
                self.lark.parse(s)
                lark_says = "accepts"
            except Exception as e:  # noqa: BLE001 -- only reported
                lark_says = f"rejects ({type(e).__name__})"
            raise ValueError(f"XGrammar rejects it; Lark on to_lark() {lark_says}")


class LarkDivergence(Exception):
    """Lark rejects an output that the scannerless semantics accepts: one of the two documented
    ways Lark's regex terminal matcher finds fewer matches (trellis/constrain/earley/scannerless.py)."""


class LarkCorpusOracle:
    """``parse(s)``: Lark's Earley parser, ``lexer="dynamic_complete"``, the file's folder as import
    path. Where Lark rejects ``s`` the independent scannerless oracle (``lark_oracle.LarkOracle``,
    written apart from the engine) is asked too: if it accepts, ``LarkDivergence`` names the
    divergence -- "leftmost-first" when Lark's parser with an every-length terminal matcher
    (``test_lark_oracle._LongestStandaloneMatch``) accepts ``s``, else "greedy %ignore"; or Lark's
    internal RuntimeError "Earley should not generate multiple start symbol items!" -- and the
    caller counts it apart; if it rejects too, Lark's error is raised (an engine bug), saying
    what ``Lark.open(path)`` says of ``s``: without ``import_paths`` Lark's own ``common.lark``
    answers ``%import common.X`` even where the folder has a ``common.lark`` of its own
    (outlines/), and that is the reading ``compile(path)`` implements."""

    def __init__(self, text: str, imports: list[str], path: Path | None = None) -> None:
        import lark

        self.text, self.imports, self.path = text, imports, path
        self.lark = lark.Lark(text, parser="earley", lexer="dynamic_complete", start="start", import_paths=imports)
        self._oracle: Any = None
        self._exact: Any = None
        self._open: Any = None

    def parse(self, s: str) -> None:
        import lark

        try:
            self.lark.parse(s)
            return
        except lark.exceptions.UnexpectedInput as e:
            err: Exception = e
        except RuntimeError as e:  # "Earley should not generate multiple start symbol items!": Lark's own bug
            err = e
        if self._oracle is None:
            from tests.constrain.lark_oracle import LarkOracle
            from tests.constrain.test_lark_oracle import _LongestStandaloneMatch

            self._oracle = LarkOracle(self.text, start="start", import_paths=self.imports)
            self._exact = lark.Lark(self.text, parser="earley", lexer="dynamic_complete", start="start",
                                    import_paths=self.imports)
            self._exact.parser.parser.term_matcher = _LongestStandaloneMatch(self._oracle._pat)
        self._oracle.clear_cache()
        if not self._oracle.accepts(s):
            if self.path is None or isinstance(err, RuntimeError):
                raise err
            if self._open is None:
                self._open = lark.Lark.open(str(self.path), parser="earley", lexer="dynamic_complete", start="start")
            try:
                self._open.parse(s)
                also = "Lark.open(path) accepts it (another common.lark: %import resolution)"
            except lark.exceptions.UnexpectedInput:
                also = "Lark.open(path) rejects it too"
            raise ValueError(f"{type(err).__name__}: {str(err).splitlines()[0][:100]}; {also}") from err
        if isinstance(err, RuntimeError):
            raise LarkDivergence(f"Lark fails (RuntimeError: {str(err)[:80]}), the scannerless oracle accepts")
        try:
            self._exact.parse(s)
            kind = "leftmost-first"
        except lark.exceptions.UnexpectedInput:
            kind = "greedy %ignore"
        raise LarkDivergence(f"{kind}: Lark rejects ({type(err).__name__}), the scannerless oracle accepts")


def corpus_oracle(gid: str, root: Path = CORPUS) -> Any:
    """``LarkCorpusOracle`` for a .lark file, ``GbnfOracle`` (XGrammar) for a .gbnf file."""
    path = root / gid
    if path.suffix == ".gbnf":
        return GbnfOracle(path)
    return LarkCorpusOracle(*corpus_lark_text(gid, root), path)


def corpus_tiny_vocab(gid: str, seed: int = 0, root: Path = CORPUS) -> Vocabulary:
    """``tiny_vocab`` for a corpus grammar: its sentences come from random walks under the
    independent oracle (``lark_oracle.random_sentences``), its literals from Lark's terminals."""
    import lark

    from tests.constrain.lark_oracle import LarkOracle, random_sentences

    text, imports = corpus_lark_text(gid, root)
    lk = lark.Lark(text, parser="earley", lexer="dynamic_complete", start="start", import_paths=imports)
    try:
        o = LarkOracle(text, start="start", import_paths=imports)
        docs = [d.encode() for d in random_sentences(o, 20, random.Random(seed), 40)]
    except NotImplementedError:  # a pattern the oracle does not model: literals and bytes only
        docs = []
    return _tiny_vocab(docs or [b"x0"], _literals(lk), seed)


@dataclass
class FuzzStats:
    grammar: str
    vocab: str
    decodes: int = 0
    finished: int = 0
    parsed: int = 0
    empty_masks: int = 0
    eos_mismatch: int = 0  # EOS in the mask but not accepting, or the other way round
    refused: int = 0  # a token the mask allowed that advance() refused
    steps: int = 0
    timeouts: int = 0  # finished outputs whose oracle parse ran out of time: neither parsed nor failed
    diverged: int = 0  # finished outputs Lark rejects and the scannerless oracle accepts (LarkDivergence)
    failures: list = field(default_factory=list)  # (kind, text bytes, detail, token ids) minimal repros
    slow: list = field(default_factory=list)  # (text bytes, token ids) of the timed-out parses
    divergent: list = field(default_factory=list)  # (text bytes, detail, token ids) of the divergences

    @property
    def parsed_pct(self) -> float:
        """Of the finished outputs the oracle decided (timeouts and divergences left out)."""
        decided = self.finished - self.timeouts - self.diverged
        return 100.0 * self.parsed / decided if decided else float("nan")

    @property
    def ok(self) -> bool:
        return not (self.empty_masks or self.eos_mismatch or self.refused
                    or self.parsed + self.timeouts + self.diverged != self.finished)


def parse_with_limit(parser: Any, text: str, limit: float | None) -> None:
    """``parser.parse(text)``, raising ``ParseTimeout`` after ``limit`` seconds (SIGALRM: main thread)."""
    if not limit:
        parser.parse(text)
        return

    def on_alarm(_sig: int, _frame: Any) -> None:
        raise ParseTimeout(f"parse ran over {limit} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        parser.parse(text)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def fuzz(name: str, constraint: Any, parser: Any, n: int, *, seed: int = 0, budget: int = BUDGET,
         favoured: torch.Tensor | None = None, label: str = "", parse_timeout: float | None = None) -> FuzzStats:
    """``n`` random constrained decodes of ``constraint``; see the module docstring.

    ``favoured`` [V] bool: tokens that get a per-decode random logit bonus (0-10; EOS gets the
    same bonus plus -2..5). ``parse_timeout``: seconds per oracle parse (None: no limit)."""
    vocab = constraint.vocab
    v = len(vocab)
    eos = sorted(vocab.eos)
    eos_t = torch.tensor(eos)
    g = torch.Generator().manual_seed(seed)
    row = allocate_bitmask(1, v)
    st = FuzzStats(name, label or f"{v} tokens")
    for _ in range(n):
        st.decodes += 1
        bias = torch.zeros(v)
        lift = float(torch.randint(0, 11, (1,), generator=g)) if favoured is not None else 0.0
        if favoured is not None:
            bias[favoured] = lift
        # EOS competes with the favoured tokens: sometimes it wins as soon as allowed, sometimes late.
        bias[eos_t] += lift + float(torch.randint(-2, 6, (1,), generator=g))
        scale = float(torch.empty(1).uniform_(0.5, 3.0, generator=g))
        state = constraint.start()
        toks: list[int] = []
        for _step in range(budget):
            st.steps += 1
            constraint.fill_mask(state, row[0])
            allowed = bitmask_to_bool(row, v)[0]  # [V]
            accepting = constraint.is_accepting(state)
            text_ok = allowed.clone()
            text_ok[eos_t] = False
            if not bool(text_ok.any()) and not accepting:
                st.empty_masks += 1
                st.failures.append(("empty mask", vocab.decode(toks), "no token allowed and not accepting", toks))
                break
            if bool(allowed[eos_t].any()) != accepting or bool(allowed[eos_t].all()) != accepting:
                st.eos_mismatch += 1
                st.failures.append(("eos", vocab.decode(toks),
                                    f"EOS in mask {allowed[eos_t].tolist()}, accepting {accepting}", toks))
                break
            logits = torch.randn(v, generator=g) * scale + bias
            logits[~allowed] = float("-inf")
            t = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=g))
            if t in vocab.eos:
                st.finished += 1
                data = vocab.decode(toks)
                try:
                    parse_with_limit(parser, data.decode("utf-8"), parse_timeout)
                    st.parsed += 1
                except ParseTimeout:
                    st.timeouts += 1
                    st.slow.append((data, toks))
                except LarkDivergence as e:
                    st.diverged += 1
                    st.divergent.append((data, str(e), toks))
                except Exception as e:  # lark.exceptions.LarkError or UnicodeDecodeError: a real failure
                    st.failures.append(("parse", data, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}", toks))
                break
            nxt = constraint.advance(state, t)
            if nxt is None:
                st.refused += 1
                st.failures.append(("refused", vocab.decode(toks),
                                    f"mask allowed {vocab.tokens[t]!r} but advance refused it", toks + [t]))
                break
            state = nxt
            toks.append(t)
    return st


def gemma_favoured(name: str, gemma_vocab: Vocabulary, tiny: Vocabulary | None = None) -> torch.Tensor:
    """[V] bool: Gemma tokens whose bytes are tokens of the grammar's tiny vocabulary (``tiny``,
    by default ``tiny_vocab(name)``)."""
    small = {t for t in (tiny or tiny_vocab(name)).tokens if t}
    fav = torch.zeros(len(gemma_vocab), dtype=torch.bool)
    ids = [i for i, t in enumerate(gemma_vocab.tokens) if t in small and i not in gemma_vocab.special]
    fav[ids] = True
    return fav


def format_stats(rows: list[FuzzStats]) -> str:
    w = max([18] + [len(s.grammar) for s in rows])
    out = [f"{'grammar':<{w}} {'vocab':<14} {'decodes':>8} {'finished':>9} {'parsed %':>9} {'empty masks':>12} "
           f"{'eos mism.':>10} {'refused':>8} {'steps':>8} {'timeouts':>9} {'diverged':>9}"]
    for s in rows:
        out.append(f"{s.grammar:<{w}} {s.vocab:<14} {s.decodes:>8} {s.finished:>9} {s.parsed_pct:>9.1f} "
                   f"{s.empty_masks:>12} {s.eos_mismatch:>10} {s.refused:>8} {s.steps:>8} {s.timeouts:>9} "
                   f"{s.diverged:>9}")
        for kind, data, detail, _toks in s.failures[:3]:
            out.append(f"    {kind}: {data[-60:]!r}: {detail}")
        for data, detail, _toks in s.divergent[:2]:
            out.append(f"    divergence: {data[-60:]!r}: {detail}")
    return "\n".join(out)


def _assert_ok(st: FuzzStats) -> None:
    assert st.ok, format_stats([st])
    assert st.finished > 0 or st.vocab.startswith("gemma"), format_stats([st])
    assert st.timeouts + st.diverged <= st.finished // 2, format_stats([st])  # the oracle decided most outputs


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("engine", ["earley", "lalr"])
@pytest.mark.parametrize("name", shipped_grammars())
def test_fuzz_tiny(name: str, engine: str) -> None:
    c = compile(name, tiny_vocab(name), cache=False, engine=engine)
    st = fuzz(name, c, lark_parser(name, engine), CI_TINY, seed=1, label="tiny")
    _assert_ok(st)


@pytest.mark.model
@pytest.mark.parametrize("name", shipped_grammars())
def test_fuzz_gemma(name: str, gemma) -> None:
    torch.set_num_threads(1)
    c = compile(name, gemma.vocab)
    st = fuzz(name, c, lark_parser(name), CI_GEMMA, seed=2, favoured=gemma_favoured(name, gemma.vocab),
              label="gemma")
    _assert_ok(st)


@pytest.mark.exhaustive
@pytest.mark.parametrize("name", shipped_grammars())
def test_fuzz_tiny_full(name: str) -> None:
    c = compile(name, tiny_vocab(name), cache=False)
    _assert_ok(fuzz(name, c, lark_parser(name), FULL_TINY, seed=3, label="tiny"))


@pytest.mark.model
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", shipped_grammars())
def test_fuzz_gemma_full(name: str, gemma) -> None:
    c = compile(name, gemma.vocab)
    _assert_ok(fuzz(name, c, lark_parser(name), FULL_GEMMA, seed=4, favoured=gemma_favoured(name, gemma.vocab),
                    label="gemma"))


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared grammar corpus not present")
@pytest.mark.parametrize("gid", corpus_grammars())
def test_fuzz_corpus_tiny(gid: str) -> None:
    """20 random-logit decodes per corpus grammar the default engine compiles (the oracle: Lark's
    Earley parser, XGrammar for GBNF); the others must be refused for one of REFUSALS' reasons."""
    refused = corpus_refusal(gid)
    if refused is not None:
        assert refusal_reason(refused), f"{gid}: unexpected refusal: {refused}"
        return
    c = compile_corpus(gid, corpus_tiny_vocab(gid), cache=False)
    st = fuzz(gid, c, corpus_oracle(gid), CI_CORPUS_TINY, seed=5, label="tiny", parse_timeout=PARSE_TIMEOUT)
    _assert_ok(st)
