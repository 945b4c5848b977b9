"""The ``Regex`` grammar and its constraint: the output must match a regular expression whole.

``Regex(pattern)`` is read as ``re.fullmatch`` reads it (``regex.py`` builds its byte DFA);
``RegexConstraint`` is the engine over a finished DFA: its state is the DFA state, and each
state's mask is one whole-vocabulary walk (``walks.walk_live``), built on the first visit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

import numpy as np
from torch import Tensor

from trellis.mask import write_row
from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.automata.dfa_minimise import byte_classes
from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.vocab.walks import TokenMatrix, walk_live
from trellis.tokens import Vocabulary

@dataclass(frozen=True)
class Regex:
    """A regular-expression grammar (Python ``re`` syntax); ``compile(Regex(p), vocab)`` builds it.

    The output must match the whole pattern (``re.fullmatch``); EOS is allowed exactly on a match.
    """

    pattern: str

    def compile(self, vocab: Vocabulary) -> "RegexConstraint":
        return RegexConstraint(regex_to_byte_dfa(self.pattern), vocab)

class RegexConstraint:
    """Token-level constraint from a ``ByteDFA``; its state is the DFA state (an ``int``).

    Per DFA state, the whole vocabulary is walked at once (numpy, column by column over the
    padded token-byte matrix) and the surviving tokens stored as a packed bitmask; the tables are
    built lazily, on the first visit of each DFA state, then reused.
    """

    def __init__(self, dfa: ByteDFA, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.dfa = dfa
        self.tm = TokenMatrix.of(vocab)
        self._masks: dict[int, np.ndarray] = {}  # DFA state -> [W] int32
        self._walk_memo: dict = {}  # walk_live's first-byte buckets, shared by the DFA's states
        self._eos = self.tm.eos_bits()

    def start(self) -> Hashable:
        return 0

    def advance(self, state: Hashable, token: int) -> Hashable | None:
        if not 0 <= token < self.tm.size or not self.tm.valid[token]:
            return None
        s = int(state)  # type: ignore[arg-type]
        for b in self.vocab.tokens[token]:
            s = int(self.dfa.trans[s, b])
            if s < 0:
                return None
        return s

    def mask_array(self, state: Hashable) -> np.ndarray:
        """[W] int32 packed mask for ``state`` (cached; do not modify)."""
        s = int(state)  # type: ignore[arg-type]
        m = self._masks.get(s)
        if m is None:
            ids, end, *_ = walk_live(self.dfa.trans, s, self.tm, self._walk_memo)
            m = self.tm.pack_ids(ids[end >= 0])
            if self.dfa.final[s]:
                m = m | self._eos
            self._masks[s] = m
        return m

    def fill_mask(self, state: Hashable, out: Tensor) -> None:
        write_row(out, self.mask_array(state))

    def is_accepting(self, state: Hashable) -> bool:
        return bool(self.dfa.final[int(state)])  # type: ignore[arg-type]

    def byte_classes(self) -> np.ndarray:
        """[256] class id per byte (bytes with identical DFA columns)."""
        return byte_classes(self.dfa.trans)

    def forced_tokens(self, state: Hashable) -> list[int]:
        """Tokens of the unique continuation forced by the regex from ``state`` (may be empty)."""
        s = int(state)  # type: ignore[arg-type]
        forced = bytearray()
        while len(forced) < 256 and not self.dfa.final[s]:
            nxt = np.flatnonzero(self.dfa.trans[s] >= 0)
            if len(nxt) != 1:
                break
            forced.append(int(nxt[0]))
            s = int(self.dfa.trans[s, nxt[0]])
        return self.tm.tokenize_forced(bytes(forced), lambda st, t: self.advance(st, t), state)

    def __repr__(self) -> str:
        return f"RegexConstraint(states={self.dfa.num_states}, vocab={self.tm.size})"
