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
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from tests.constrain.grammar_cases import sentences
from trellis.constrain import compile, shipped_grammars
from trellis.constrain.compile import load_grammar_text
from trellis.mask import allocate_bitmask, bitmask_to_bool
from trellis.tokens import Vocabulary

CI_TINY, CI_GEMMA = 300, 5
FULL_TINY, FULL_GEMMA = 10_000, 500
BUDGET = 48


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
    rng = random.Random(seed)
    docs = [d.encode() for d in sentences(name, lk, 40, seed=seed)]
    literals = [t.pattern.value.encode() for t in lk.terminals if type(t.pattern).__name__ == "PatternStr"]
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
    failures: list = field(default_factory=list)  # (kind, text bytes, detail) minimal repros

    @property
    def parsed_pct(self) -> float:
        return 100.0 * self.parsed / self.finished if self.finished else float("nan")

    @property
    def ok(self) -> bool:
        return not (self.empty_masks or self.eos_mismatch or self.refused or self.parsed != self.finished)


def fuzz(name: str, constraint: Any, parser: Any, n: int, *, seed: int = 0, budget: int = BUDGET,
         favoured: torch.Tensor | None = None, label: str = "") -> FuzzStats:
    """``n`` random constrained decodes of ``constraint``; see the module docstring.

    ``favoured`` [V] bool: tokens that get a per-decode random logit bonus (0-10; EOS gets the
    same bonus plus -2..5)."""
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
                st.failures.append(("empty mask", vocab.decode(toks), "no token allowed and not accepting"))
                break
            if bool(allowed[eos_t].any()) != accepting or bool(allowed[eos_t].all()) != accepting:
                st.eos_mismatch += 1
                st.failures.append(("eos", vocab.decode(toks),
                                    f"EOS in mask {allowed[eos_t].tolist()}, accepting {accepting}"))
                break
            logits = torch.randn(v, generator=g) * scale + bias
            logits[~allowed] = float("-inf")
            t = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=g))
            if t in vocab.eos:
                st.finished += 1
                data = vocab.decode(toks)
                try:
                    parser.parse(data.decode("utf-8"))
                    st.parsed += 1
                except Exception as e:  # lark.exceptions.LarkError or UnicodeDecodeError: a real failure
                    st.failures.append(("parse", data, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))
                break
            nxt = constraint.advance(state, t)
            if nxt is None:
                st.refused += 1
                st.failures.append(("refused", vocab.decode(toks),
                                    f"mask allowed {vocab.tokens[t]!r} but advance refused it"))
                break
            state = nxt
            toks.append(t)
    return st


def gemma_favoured(name: str, gemma_vocab: Vocabulary) -> torch.Tensor:
    """[V] bool: Gemma tokens whose bytes are tokens of the grammar's tiny vocabulary."""
    small = {t for t in tiny_vocab(name).tokens if t}
    fav = torch.zeros(len(gemma_vocab), dtype=torch.bool)
    ids = [i for i, t in enumerate(gemma_vocab.tokens) if t in small and i not in gemma_vocab.special]
    fav[ids] = True
    return fav


def format_stats(rows: list[FuzzStats]) -> str:
    out = [f"{'grammar':<18} {'vocab':<14} {'decodes':>8} {'finished':>9} {'parsed %':>9} {'empty masks':>12} "
           f"{'eos mism.':>10} {'refused':>8} {'steps':>8}"]
    for s in rows:
        out.append(f"{s.grammar:<18} {s.vocab:<14} {s.decodes:>8} {s.finished:>9} {s.parsed_pct:>9.1f} "
                   f"{s.empty_masks:>12} {s.eos_mismatch:>10} {s.refused:>8} {s.steps:>8}")
        for kind, data, detail in s.failures[:3]:
            out.append(f"    {kind}: {data[-60:]!r}: {detail}")
    return "\n".join(out)


def _assert_ok(st: FuzzStats) -> None:
    assert st.ok, format_stats([st])
    assert st.finished > 0 or st.vocab.startswith("gemma"), format_stats([st])


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
