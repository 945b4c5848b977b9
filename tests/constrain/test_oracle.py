"""Oracle tests: trellis' masks == an independent brute-force reference, state by state.

Along random sentences of each shipped grammar (random derivations, checked with Lark's own
parser), at every token boundary the engine's mask over a small vocabulary (every byte of the
grammar's alphabet, random 2-3 byte strings, sentence pieces, split UTF-8 characters) is compared
with the reference set {t : text + t can still be completed} computed by tests/constrain/reference.py.
"""

from __future__ import annotations

import random

import pytest

from tests.constrain.grammar_cases import sentences
from tests.constrain.reference import Reference
from trellis.constrain import compile
from trellis.constrain.compile import load_grammar_text
from trellis.mask import allocate_bitmask, allowed_ids
from trellis.tokens import Vocabulary


def oracle_vocab(docs: list[str], literals: list[str], rng: random.Random) -> Vocabulary:
    data = [d.encode() for d in docs]
    alpha = sorted(set(b"".join(data)) | set("".join(literals).encode()) | set(b"x0 \n\"'"))
    toks: list[bytes] = [bytes([a]) for a in alpha]
    toks += [bytes(rng.choice(alpha) for _ in range(rng.choice((2, 3)))) for _ in range(120)]
    for _ in range(150):
        d = rng.choice(data)
        if len(d) >= 2:
            i = rng.randrange(len(d) - 1)
            toks.append(d[i:i + rng.randint(2, 6)])
    toks += [lit.encode() for lit in literals if lit]
    toks += ["é".encode()[:1], "é".encode()[1:], "€".encode()[:2], "€".encode()[2:], "é".encode()]
    toks = list(dict.fromkeys(toks))
    toks += [b"<eos>", b"<special>", b""]  # eos, special and empty ids are never allowed as text
    n = len(toks)
    return Vocabulary(tuple(toks), eos=frozenset([n - 3]), special=frozenset([n - 2]))


def segment(doc: bytes, vocab: Vocabulary, rng: random.Random) -> list[int]:
    by_bytes: dict[bytes, int] = {}
    for i, t in enumerate(vocab.tokens):
        if t and i not in vocab.special and i not in vocab.eos:
            by_bytes.setdefault(t, i)
    out, i = [], 0
    while i < len(doc):
        opts = [by_bytes[doc[i:i + n]] for n in range(1, 7) if doc[i:i + n] in by_bytes]
        t = rng.choice(opts)
        out.append(t)
        i += len(vocab.tokens[t])
    return out


_CLOSERS = b"\"')]}\n,:;0a x1=(-"
_BYTE_ORDER = list(dict.fromkeys(list(_CLOSERS) + list(range(32, 127)) + list(range(256))))


def engine_witness(c, state, max_nodes: int = 3000, order: list[int] | None = None, depth: int = 40) -> bytes | None:
    """A byte string that the engine says completes ``state`` (depth-first, closers first).

    Only a proposal: the test verifies it with the reference (Lark's parser), so the engine can
    only help confirm its own *allowed* answers, never make the test accept a wrong one.
    """
    if hasattr(c, "earley"):  # the scannerless engine: its chart steps a byte at a time
        step = c.earley.step
    else:
        rt = c.rt

        def step(st, b: int):
            nxt = rt.walk(st[0], st[1], bytes((b,)))
            return nxt if nxt is not None and rt.viable(nxt) else None
    seen = set()
    budget = [max_nodes]

    def dfs(st, depth: int) -> bytes | None:
        if c.is_accepting(st):
            return b""
        if depth == 0 or budget[0] <= 0:
            return None
        budget[0] -= 1
        for b in order or _BYTE_ORDER:
            nxt = step(st, b)
            if nxt is None or nxt in seen:
                continue
            seen.add(nxt)
            w = dfs(nxt, depth - 1)
            if w is not None:
                return bytes((b,)) + w
        return None

    return dfs(state, depth)


def run_oracle(name: str, n_docs: int, seed: int = 0, check_fraction: float = 1.0) -> dict:
    text, _ = load_grammar_text(name)
    rng = random.Random(seed)
    import lark

    lk = lark.Lark(text, parser="lalr", strict=True)
    docs = sentences(name, lk, n_docs, seed=seed)
    literals = [t.pattern.value for t in lk.terminals if type(t.pattern).__name__ == "PatternStr"]
    vocab = oracle_vocab(docs, literals, rng)
    alphabet = "".join(sorted(set("".join(docs) + "".join(literals) + "x0 \n\"'")))
    ref = Reference(text, alphabet)
    c = compile(name, vocab, cache=False, engine="lalr")  # Reference is the LALR + contextual-lexer language
    v = len(vocab)
    eos = next(iter(vocab.eos))
    row = allocate_bitmask(1, v)[0]
    in_alpha = set(alphabet.encode())
    order = [b for b in _BYTE_ORDER if b in in_alpha] + [b for b in range(0x80, 0xC0)]
    witness_checks = 0
    stats = {"states": 0, "unknown": 0, "rejected_by_search": 0, "docs": len(docs)}
    for doc in docs:
        ids = segment(doc.encode(), vocab, rng)
        s, rs = c.start(), ref.start()
        for k in range(len(ids) + 1):
            if k < len(ids) and rng.random() > check_fraction:  # (slow test) check a sample of states
                s = c.advance(s, ids[k])
                rs = ref.feed(rs, vocab.tokens[ids[k]])
                assert s is not None and rs is not None, (name, doc, vocab.decode(ids[:k + 1]))
                continue
            c.fill_mask(s, row)
            got = set(allowed_ids(row, v))
            assert bool(eos in got) == ref.complete(rs), (name, doc, vocab.decode(ids[:k]))
            got.discard(eos)
            for t, tb in enumerate(vocab.tokens):
                if t in vocab.eos:
                    continue
                r2 = ref.feed(rs, tb) if tb and t not in vocab.special else None
                s2 = c.advance(s, t)
                assert (s2 is not None) == (t in got), (name, doc, vocab.decode(ids[:k]), tb)
                if t in got:
                    # allowed: the reference must lex it, and (for a sample of up to 6 tokens per
                    # state) an engine-proposed completion must be a sentence for the reference
                    # and for Lark's own parser
                    assert r2 is not None, (name, doc, vocab.decode(ids[:k]), tb)
                    witness_checks += 1
                    if witness_checks > 6 and rng.random() > 6 / max(1, len(got)):
                        continue
                    w = engine_witness(c, s2, order=order)
                    assert w is not None, (name, doc, vocab.decode(ids[:k]), tb)
                    r3 = ref.feed(r2, w)
                    assert r3 is not None and ref.complete(r3), (name, doc, vocab.decode(ids[:k]), tb, w)
                    if k % 4 == 0:
                        lk.parse((vocab.decode(ids[:k]) + tb + w).decode())
                elif r2 is not None:
                    # rejected but the reference still lexes and parses it: it must find no completion
                    v2 = ref.viable(r2, depth=8, budget=200)
                    assert v2 is not True, (name, doc, vocab.decode(ids[:k]), tb)
                    stats["unknown"] += v2 is None
                    stats["rejected_by_search"] += v2 is False
            stats["states"] += 1
            witness_checks = 0
            if k < len(ids):
                s = c.advance(s, ids[k])
                rs = ref.feed(rs, vocab.tokens[ids[k]])
                assert s is not None and rs is not None, (name, doc, vocab.decode(ids[:k + 1]))
        assert c.is_accepting(s), (name, doc)
        lk.parse(vocab.decode(ids).decode())  # the engine's accepted text parses with Lark itself
    return stats


ALL = ["json.lark", "json_object.lark", "arithmetic.lark", "csv.lark", "python_call.lark", "yaml_flat.lark",
       "sql_select.lark"]


@pytest.mark.parametrize("name", ALL)
def test_oracle_fast(name: str) -> None:
    if name == "sql_select.lark":  # long sentences, ~40 terminals: check a sample of states
        run_oracle(name, n_docs=2, seed=1, check_fraction=0.1)
    else:
        run_oracle(name, n_docs=3 if name != "csv.lark" else 6, seed=1)


@pytest.mark.exhaustive
@pytest.mark.parametrize("name", ALL)
def test_oracle_200_documents(name: str) -> None:
    """200 documents per grammar; every document is walked, a 10% sample of states is compared."""
    run_oracle(name, n_docs=200, seed=2, check_fraction=0.1)
