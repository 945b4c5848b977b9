"""Test-guided code generation, the language-model stage: ``CodeLM``, the proxy of the language
model that one ``TestGuided`` search (``guided.py``) decodes through (strategies still see only a
``Decoder``). It gives the search three things:

- *function end*: where the text is at the start of a line (or at the end of one), the tokens that
  would start a logical line at column 0 (``def``, ``if __name__``, a stray fence ...; see
  ``syntax.scan_function``) are removed and their probability is added to EOS, which thus means
  "the function ends here". Every strategy finishes the program there instead of generating junk
  up to the budget, and no token of the next statement enters a hypothesis: its text is the
  completion the tests run (issue 22: ``generate`` returned text ending in ``"\\n\\ndef"`` when
  the end was only noticed after such a token, and each way of starting the next statement was a
  separate search branch of one and the same program);
- *syntax pruning*: of each next-token row, the most likely tokens are checked in order until
  ``prune_top`` viable ones are found and those that make the program prefix unparseable for good
  (``syntax.check_prefix``) are set to -inf; a prefix that still ends up dead gets an all -inf row,
  which stops every strategy on it (reward 0). Checking only the tokens a search can pick keeps
  this cheap on a 262k vocabulary, where a full ``Constraint`` mask would not be;
- *budgets*: a forward that would not fit in ``budget_tokens`` forward tokens or ``budget_seconds``
  is not started: its rows force EOS, so any strategy winds down (how far a budget can be
  overshot: ``TestGuided``).
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor

from trellis.codegen.syntax import LinePosition, check_prefix, scan_function
from trellis.lm import LanguageModel
from trellis.lm_proxy import LMProxy
from trellis.tokens import TokenTree, Vocabulary

__all__ = ["CodeLM"]

_NEG_INF = float("-inf")


# A token that, written where a logical line has just ended, puts a non-blank, non-comment
# character at column 0 (after blank lines, if any): the next top-level statement, i.e. the end of
# the function. And the same after the line break that closes the current line.
_COL0_AT_LINE_START = re.compile(rb"(?:[ \t\f]*\r?\n)*[^ \t\f\r\n#]")
_COL0_AFTER_LINE_END = re.compile(rb"[ \t\f]*\r?\n(?:[ \t\f]*\r?\n)*[^ \t\f\r\n#]")
_END_MASKS: dict[tuple[str, int], tuple[Tensor, Tensor]] = {}


def _end_masks(vocab: Vocabulary, width: int) -> tuple[Tensor, Tensor]:
    """Bool masks [width] of the tokens that end the function (see ``_COL0_*``) at a line start and
    at a line end. One pass over the vocabulary (about 0.1 s for 262k tokens), kept per vocabulary."""
    key = (vocab.fingerprint(), width)
    got = _END_MASKS.get(key)
    if got is None:
        skip = vocab.special | vocab.eos
        toks = [b"" if i in skip else t for i, t in enumerate(vocab.tokens[:width])]
        toks += [b""] * (width - len(toks))  # logits wider than the vocabulary: padding ids
        start = torch.tensor([_COL0_AT_LINE_START.match(t) is not None for t in toks], dtype=torch.bool)
        end = torch.tensor([_COL0_AFTER_LINE_END.match(t) is not None for t in toks], dtype=torch.bool)
        if len(_END_MASKS) >= 4:  # a process rarely sees more than one or two vocabularies
            _END_MASKS.pop(next(iter(_END_MASKS)))
        got = _END_MASKS[key] = (start, end)
    return got


@dataclass
class _Found:
    """What reading one draft-tree row found: pruned children (path -> syntax error) and ends."""

    dead: dict[tuple[int, ...], str] = field(default_factory=dict)
    ended: set[tuple[int, ...]] = field(default_factory=set)


class CodeLM(LMProxy):
    """The language-model proxy of one test-guided search (see the module docstring). Counts the
    forward tokens it lets through and remembers which prefixes it ended or pruned.

    Why the function end is folded into EOS rather than detected after the fact: the end is only
    visible once a token has started the next top-level statement (``def``, ``print``, ...). Letting
    that token in and forcing EOS after it leaves the start of the next statement in the hypothesis
    (``generate`` returned text ending in ``"\\n\\ndef"``) and gives each way of starting it a
    separate branch. So on every row where the text is at a line start (or line end), the tokens
    that would start a column-0 line are removed and their probability is added to EOS: EOS then
    means "the function ends here", with the model's probability of that."""

    def __init__(self, lm: LanguageModel, vocab: Vocabulary, prompt: str, base: int, *, prune_top: int,
                 max_checks: int, budget_tokens: int | None, budget_seconds: float | None,
                 on_forward: Callable[[], None] | None = None) -> None:
        super().__init__(lm)
        self.vocab, self.prompt, self.base = vocab, prompt, base
        self.prune_top, self.max_checks = prune_top, max_checks
        self.budget_tokens, self.budget_seconds = budget_tokens, budget_seconds
        self.on_forward = on_forward
        self.eos = min(vocab.eos)
        self.ends_at_start, self.ends_at_line_end = _end_masks(vocab, self.vocab_size)
        self.any_at_start, self.any_at_line_end = bool(self.ends_at_start.any()), bool(self.ends_at_line_end.any())
        self.t0 = time.monotonic()
        self.exhausted = False  # a forward was refused for the budget: the search must wind down
        self._tree_forwarded = False  # the last tree_logits reached the model: commit goes through
        self._state: dict[tuple[int, ...], tuple[str, LinePosition, str | None]] = {}
        self.ended: set[tuple[int, ...]] = set()  # generated-token paths whose last token ended the function
        self.dead: dict[tuple[int, ...], str] = {}  # generated-token path -> syntax error (pruned)
        # Where the two above are written: None = into them. A draft tree's rows write into one
        # _Found each, kept only for the rows its verification accepts (``commit``): a rejected
        # draft row is not a place the search went, so its pruned children and ends are not part
        # of the search tree (and one-at-a-time rollouts would never have recorded them).
        self._sink: _Found | None = None
        self._draft_found: list[_Found | None] = []

    def over_budget(self) -> bool:
        return (self.exhausted or (self.budget_tokens is not None and self.spent() >= self.budget_tokens)
                or (self.budget_seconds is not None and time.monotonic() - self.t0 >= self.budget_seconds))

    def _affordable(self, rows: int) -> bool:
        """May a forward of ``rows`` prefixes start? Each costs at least its one new token (a KV-cache
        hit aside), so a call that cannot fit whole is refused rather than started: without LM
        counters (one prefix = one unit) the budget is never exceeded; with them, only the tokens a
        KV-cache miss re-forwards can overshoot (see ``TestGuided``)."""
        if self.exhausted:
            return False
        if ((self.budget_tokens is not None and self.spent() + rows > self.budget_tokens)
                or (self.budget_seconds is not None and time.monotonic() - self.t0 >= self.budget_seconds)):
            self.exhausted = True
            return False
        return True

    def completion(self, prefix: Sequence[int]) -> str:
        return self.vocab.decode(prefix[self.base:]).decode("utf-8", errors="ignore")

    def _record_dead(self, path: tuple[int, ...], reason: str) -> None:
        (self._sink.dead if self._sink is not None else self.dead).setdefault(path, reason)

    def _record_ended(self, path: tuple[int, ...]) -> None:
        (self._sink.ended if self._sink is not None else self.ended).add(path)

    def state(self, prefix: tuple[int, ...]) -> tuple[str, LinePosition]:
        """("ended" | "dead" | "open", where the text ends) — cached: a prefix's verdict never changes
        (it is recorded in ``ended``/``dead`` on every call: into the current draft row's record
        when a tree is being read). The prompt itself is always open."""
        got = self._state.get(prefix)
        path = prefix[self.base:]
        if got is None:
            text = self.completion(prefix)
            found = scan_function(self.prompt, text)
            reason = None
            if not path:
                kind = "open"
            elif found.end is not None:
                # only a token that carries body text and the next statement's start together gets
                # here (the fold below removes the pure ones); ``TestGuided._close`` cuts it off
                kind = "ended"
            else:
                check = check_prefix(self.prompt + text)
                kind = "open" if check.viable else "dead"
                reason = None if check.viable else check.reason
            got = self._state[prefix] = (kind, found.position, reason)
        if got[0] == "ended":
            self._record_ended(path)
        elif got[2] is not None:
            self._record_dead(path, got[2])
        return got[0], got[1]

    def _fold_end_(self, row: Tensor, prefix: tuple[int, ...], position: LinePosition) -> Tensor:
        """Move the probability of the tokens that would end the function into EOS, in place (row [V])."""
        if position == "line_start" and self.any_at_start:
            ends = self.ends_at_start
        elif position == "line_end" and self.any_at_line_end:  # never, with Gemma's newline-only tokens
            ends = self.ends_at_line_end
            if not check_prefix(self.prompt + self.completion(prefix) + "\n").viable:
                row[ends] = _NEG_INF  # the line cannot end here: a line break (and what follows) is dead
                return row
        else:
            return row
        mass = torch.logsumexp(row[ends].float(), 0)
        if torch.isfinite(mass):
            row[self.eos] = torch.logaddexp(row[self.eos].float(), mass).to(row.dtype)
            self._record_ended(prefix[self.base:] + (self.eos,))
        row[ends] = _NEG_INF
        return row

    def _prune_(self, row: Tensor, prefix: tuple[int, ...]) -> Tensor:
        """Set the likeliest tokens that would make the program dead to -inf, in place (row [V])."""
        if self.prune_top <= 0:
            return row
        text = self.prompt + self.completion(prefix)
        order = torch.topk(row, min(self.max_checks, row.shape[-1])).indices.tolist()  # not a full sort: V = 262k
        viable = 0
        for t in order:
            if row[t] == _NEG_INF:
                break
            if t in self.vocab.eos or t >= len(self.vocab.tokens):
                viable += 1
            else:
                piece = self.vocab.tokens[t].decode("utf-8", errors="ignore")
                check = check_prefix(text + piece) if piece else None
                if check is None or check.viable:
                    viable += 1
                else:
                    row[t] = _NEG_INF
                    self._record_dead(prefix[self.base:] + (t,), check.reason)
            if viable >= self.prune_top:
                break
        return row

    def _open_row(self, raw: Tensor, prefix: tuple[int, ...], position: LinePosition) -> Tensor:
        return self._prune_(self._fold_end_(raw.clone(), prefix, position), prefix)

    def _forced(self, kind: str, like: Tensor | None) -> Tensor:
        row = torch.full((self.vocab_size,), _NEG_INF, dtype=like.dtype if like is not None else torch.float32)
        if kind != "dead":
            row[self.eos] = 0.0
        return row

    def _kinds(self, keys: Sequence[tuple[int, ...]],
               found: Sequence[_Found | None] = ()) -> list[tuple[str, LinePosition]]:
        """Each prefix's verdict (recorded into ``found[i]`` where given); open ones become "budget"
        (EOS forced) when their forward cannot start (``_affordable``): past the budget every
        strategy winds down, the prompt included."""
        kinds = []
        for i, k in enumerate(keys):
            with self._into(found[i] if i < len(found) else None):
                kinds.append(self.state(k))
        opened = sum(kind == "open" for kind, _ in kinds)
        if opened and not self._affordable(opened):
            kinds = [("budget", pos) if kind == "open" else (kind, pos) for kind, pos in kinds]
        return kinds

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        keys = [tuple(int(t) for t in p) for p in prefixes]
        kinds = self._kinds(keys)
        need = [k for k, (kind, _) in zip(keys, kinds) if kind == "open"]
        self._tree_forwarded = False
        out = super().logits(need) if need else None  # [M, V]
        if need and self.on_forward is not None:
            self.on_forward()
        rows, j = [], 0
        for k, (kind, pos) in zip(keys, kinds):
            if kind == "open":
                assert out is not None
                rows.append(self._open_row(out[j], k, pos))
                j += 1
            else:
                rows.append(self._forced(kind, out))
        return torch.stack(rows)  # [B, V]

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        toks = tree.tokens.tolist()
        base = tuple(int(t) for t in prefix)
        keys = [base] + [base + tuple(toks[j] for j in tree.path_to(i)) for i in range(len(tree))]
        # row 0 is the prefix the search stands on: recorded now; draft rows only if accepted
        found: list[_Found | None] = [None] + [_Found() for _ in range(len(tree))]
        kinds = self._kinds(keys, found)
        # the budget is judged before the forward (all N+1 rows come from one pass)
        out = super().tree_logits(prefix, tree) if any(kind == "open" for kind, _ in kinds) else None  # [N+1, V]
        self._tree_forwarded = out is not None
        if out is not None:
            if self.on_forward is not None:
                self.on_forward()
        rows = []
        for i, (key, (kind, pos)) in enumerate(zip(keys, kinds)):
            with self._into(found[i]):
                rows.append(self._open_row(out[i], key, pos) if kind == "open" and out is not None
                            else self._forced(kind, out))
        self._draft_found = [None if toks[i] in self.vocab.eos else f for i, f in enumerate(found[1:])]
        return torch.stack(rows)

    def commit(self, path: Sequence[int]) -> None:
        """Keep what the accepted draft rows found (pruned children, ends); forwarded to the model
        only when the last tree reached it (a tree whose rows were all forced by the budget or by
        syntax never did, and there is nothing to keep)."""
        for i in path:
            if not 0 <= int(i) < len(self._draft_found):
                break
            got = self._draft_found[int(i)]
            if got is None:  # the row after an EOS: a finished hypothesis asks for no distribution
                break
            for p, reason in got.dead.items():
                self.dead.setdefault(p, reason)
            self.ended |= got.ended
        self._draft_found = []
        if self._tree_forwarded:
            self._tree_forwarded = False
            super().commit(path)

    @contextlib.contextmanager
    def _into(self, found: _Found | None) -> Iterator[None]:
        saved, self._sink = self._sink, found
        try:
            yield
        finally:
            self._sink = saved
