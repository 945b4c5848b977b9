"""Synthetic LMs, constraints and tasks for the search tests (tiny vocabularies, exact control)."""

from __future__ import annotations

import random
from typing import Sequence

import torch
from torch import Tensor

from fakes import HashLM
from trellis.decoder import Decoder, Hypothesis
from trellis.mask import bool_to_bitmask
from trellis.tokens import TokenTree, Vocabulary

EOS = 2


def letters_vocab(n: int, eos: Sequence[int] = (EOS,)) -> Vocabulary:
    """Token i (i >= 3) is one distinct short ascii string; 0..2 are special (2 = EOS)."""
    toks = [b"", b"", b""] + [bytes([97 + (i % 26)]) * (1 + i // 26) for i in range(n - 3)]
    return Vocabulary(tuple(toks), eos=frozenset(eos), special=frozenset({0, 1, *eos}))


class _PrefixLM:
    """A LanguageModel from a function prefix -> logits row."""

    vocab_size: int

    def _row(self, prefix: tuple[int, ...]) -> Tensor:
        raise NotImplementedError

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        return torch.stack([self._row(tuple(int(t) for t in p)) for p in prefixes])

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        toks = tree.tokens.tolist()
        rows = [self._row(tuple(prefix))]
        for i in range(len(tree)):
            rows.append(self._row(tuple(prefix) + tuple(toks[j] for j in tree.path_to(i))))
        return torch.stack(rows)


class TrapLM(_PrefixLM):
    """The high-reward sequence starts with a low-probability token.

    Prompt ``(1,)``; tokens 3..V-2 are words, ``goal`` = V-1. At the root the ``bait`` token is the
    ``bait_rank``-th most likely (p ~ 0.1); after bait the greedy path reaches ``goal`` ``delay``
    tokens later; ``goal`` is (almost) impossible anywhere else. After ``goal`` the distribution is
    flat, so bait paths have a clearly lower likelihood than the peaked greedy paths: greedy and
    beam search (likelihood) never pick bait. EOS is likely from ``length`` generated tokens on.
    """

    def __init__(self, seed: int, *, vocab_size: int = 16, length: int = 5) -> None:
        rng = random.Random(seed)
        self.vocab_size, self.goal, self.length = vocab_size, vocab_size - 1, length
        self.base = HashLM(vocab_size, seed=seed, scale=3.0)
        words = list(range(3, vocab_size - 1))
        rng.shuffle(words)
        self.bait_rank = rng.choice([2, 3])
        self.root_order = words[:3]  # the bait is root_order[bait_rank - 1]
        self.bait = self.root_order[self.bait_rank - 1]
        self.delay = rng.choice([1, 2])

    def _greedy_after_bait(self, prefix: tuple[int, ...]) -> int:
        row = self.base._row(prefix).clone()
        row[[0, 1, EOS, self.goal]] = float("-inf")
        return int(row.argmax())

    def _row(self, prefix: tuple[int, ...]) -> Tensor:
        gen = prefix[1:]
        row = self.base._row(prefix).clone()
        row[[0, 1]] = -30.0
        row[self.goal] = -30.0
        row[EOS] = 8.0 if len(gen) >= self.length else -30.0
        if not gen:  # root: fixed top-3 with the bait at bait_rank
            row[3:self.goal] = 0.0
            for logit, tok in zip((3.0, 2.2, 1.4), self.root_order):
                row[tok] = logit
        elif gen[0] == self.bait and self.goal not in gen and len(gen) == 1 + self.delay:
            row[self.goal] = 20.0
        elif self.goal in gen and len(gen) < self.length:
            row[3:self.goal + 1] = 0.0  # flat after the goal
        return row


def trap_task(seed: int):
    lm = TrapLM(seed)
    dec = Decoder(lm, vocab=letters_vocab(lm.vocab_size))
    return lm, dec, dec.start([1]), (lambda h: float(lm.goal in h.new_tokens))


class SynonymLM(_PrefixLM):
    """One answer token, then ``noise`` uniform filler tokens, then EOS.

    The correct answer has 4 synonyms (tokens 3..6, p = 0.12 each, 0.48 together); the most likely
    single token is a wrong answer (token 7, p = 0.25); tokens 8..11 are other wrong answers
    (p ~ 0.068 each). The string mode (max log-prob) is wrong; the meaning with most mass is right.
    """

    correct = frozenset({3, 4, 5, 6})

    def __init__(self, noise: int = 3) -> None:
        self.vocab_size, self.noise = 24, noise
        probs = torch.full((24,), 1e-12)
        probs[3:7] = 0.12
        probs[7] = 0.25
        probs[8:12] = 0.27 / 4
        self.first = probs.log()
        self.filler = torch.full((24,), -30.0)
        self.filler[12:24] = 0.0
        self.end = torch.full((24,), -30.0)
        self.end[EOS] = 0.0

    def meaning(self, token: int) -> int:
        return 0 if token in self.correct else token

    def _row(self, prefix: tuple[int, ...]) -> Tensor:
        n = len(prefix) - 1
        return self.first if n == 0 else self.filler if n <= self.noise else self.end


class Brackets:
    """Balanced brackets over a small vocabulary: '(' = 3, ')' = 4, atoms 5..V-1 allowed only
    inside brackets, nesting depth <= ``max_depth``; accepting when depth is 0 after >= 1 token.
    State: (depth, length)."""

    def __init__(self, vocab: Vocabulary, max_depth: int = 3) -> None:
        self.vocab, self.max_depth = vocab, max_depth

    def start(self):
        return (0, 0)

    def advance(self, state, token):
        depth, n = state
        if token == 3:
            return (depth + 1, n + 1) if depth < self.max_depth else None
        if token == 4:
            return (depth - 1, n + 1) if depth > 0 else None
        if token >= 5 and depth > 0:
            return (depth, n + 1)
        return None

    def is_accepting(self, state):
        return state[0] == 0 and state[1] > 0

    def fill_mask(self, state, out):
        ok = torch.zeros(len(self.vocab), dtype=torch.bool)
        for t in range(3, len(self.vocab)):
            ok[t] = self.advance(state, t) is not None
        if self.is_accepting(state):
            ok[list(self.vocab.eos)] = True
        out.copy_(bool_to_bitmask(ok)[0])


class OnlyTokens:
    """Tokens from ``allowed`` only, accepting after ``n`` tokens (as in tests/test_decoding.py)."""

    def __init__(self, vocab: Vocabulary, allowed: set[int], n: int) -> None:
        self.vocab, self.allowed, self.n = vocab, allowed, n

    def start(self):
        return 0

    def advance(self, state, token):
        return state + 1 if token in self.allowed else None

    def fill_mask(self, state, out):
        ok = torch.zeros(len(self.vocab), dtype=torch.bool)
        ok[list(self.allowed)] = True
        if state >= self.n:
            ok[list(self.vocab.eos)] = True
        out.copy_(bool_to_bitmask(ok)[0])

    def is_accepting(self, state):
        return state >= self.n


def accepted(constraint, hyp: Hypothesis, eos: frozenset[int]) -> bool:
    """Whether ``hyp``'s generated tokens are a path the constraint allows (EOS only when accepting)."""
    state = constraint.start()
    for t in hyp.new_tokens:
        if t in eos:
            return constraint.is_accepting(state) and t == hyp.new_tokens[-1]
        state = constraint.advance(state, t)
        if state is None:
            return False
    return True  # no EOS: a budget-cut (or stop-string) prefix of an allowed path
