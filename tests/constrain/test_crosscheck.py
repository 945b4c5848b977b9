"""Cross-check on Gemma 3's 262,144-token vocabulary: trellis' masks for RFC 8259 JSON
(``tests/data/json_rfc8259.lark``: json.lark's language plus trailing whitespace) vs xgrammar and
llguidance for the same JSON language, at every token boundary of valid JSON documents.

Peers (trellis/integrations): xgrammar with ``JSON_EBNF`` and llguidance with
``lark_for_llguidance`` of that grammar, each twice: over trellis' own token bytes ("bytes": any
difference is a grammar-engine difference) and over the peer's own import of the HF tokenizer
("hf": differences can also come from how the peer reads tokens). Every differing token is
adjudicated by ``JsonPrefix``, an independent byte-level JSON recogniser (RFC 8259, strict UTF-8):
is ``text + bytes(token)`` still a prefix of a JSON text? Is ``text`` a JSON text (EOS)? trellis'
mask is also spot-checked against it on random tokens at every position.

CI checks 8 documents over the same token bytes; ``-m exhaustive`` and
``benchmarks/crosscheck_json.py`` run 50 documents with the HF-import peers too (summary table).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from trellis.constrain import compile
from trellis.mask import allocate_bitmask, bitmask_to_bool

# The peers' JSON grammars are RFC 8259 (whitespace after the value too); the shipped json.lark ends
# at the value, so the engines are compared on the RFC language.
RFC_JSON = (Path(__file__).resolve().parents[1] / "data" / "json_rfc8259.lark").read_text(encoding="utf-8")
CI_DOCS = 8
FULL_DOCS = 50

# ----------------------------------------------------------------------------- documents

_WORDS = ["name", "id", "a", "", "x y", "Ada Lovelace", "naïve café", "€1", "日本語", "emoji 🎉", "tab\there",
          "quote\"in", "back\\slash", "slash/", "line\nbreak", "ctrl\u0001", "del\u007f", "k1", "value", "null",
          "true", "12", " lead", "trail ", "\u2028sep"]


def _ws(rng: random.Random, style: str) -> str:
    if style == "compact":
        return ""
    if style == "spaced":
        return rng.choice(["", " "])
    return rng.choice(["", " ", "  ", "\n", "\n  ", "\t", "\r\n", " \n    "])


def _string(rng: random.Random) -> str:
    s = rng.choice(_WORDS) if rng.random() < 0.7 else "".join(
        rng.choice("abcXYZ019 _-é€😀\"\\/\n\t\u0000") for _ in range(rng.randint(0, 12)))
    out = []
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "/" and rng.random() < 0.5:
            out.append("\\/")
        elif o < 0x20:
            named = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}.get(ch)
            out.append(named if named and rng.random() < 0.7 else f"\\u{o:04x}")
        elif o > 0xFFFF and rng.random() < 0.3:  # escaped as a surrogate pair
            v = o - 0x10000
            out.append(f"\\u{0xD800 + (v >> 10):04X}\\u{0xDC00 + (v & 0x3FF):04x}")
        elif o > 0x7F and rng.random() < 0.3:
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else ch)
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _number(rng: random.Random) -> str:
    sign = "-" if rng.random() < 0.3 else ""
    intpart = "0" if rng.random() < 0.2 else str(rng.randint(1, 10 ** rng.randint(1, 9)))
    frac = "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 4))) if rng.random() < 0.4 else ""
    exp = ""
    if rng.random() < 0.2:
        exp = rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 300))
    return sign + intpart + frac + exp


def _value(rng: random.Random, depth: int, style: str, ind: str, top: bool = False) -> str:
    r = rng.random() * (0.5 if top else 1.0)  # documents are mostly containers
    if depth > 0 and r < 0.25:
        items = [_value(rng, depth - 1, style, ind + "  ") for _ in range(rng.randint(0, 6))]
        if not items:
            return "[" + _ws(rng, style) + "]"
        sep = "," + _ws(rng, style)
        return "[" + _ws(rng, style) + sep.join(items) + _ws(rng, style) + "]"
    if depth > 0 and r < 0.5:
        n = rng.randint(0, 6)
        if not n:
            return "{" + _ws(rng, style) + "}"
        pairs = [_string(rng) + _ws(rng, style) + ":" + _ws(rng, style) + _value(rng, depth - 1, style, ind + "  ")
                 for _ in range(n)]
        return "{" + _ws(rng, style) + ("," + _ws(rng, style)).join(pairs) + _ws(rng, style) + "}"
    if r < 0.7:
        return _string(rng)
    if r < 0.9:
        return _number(rng)
    return rng.choice(["true", "false", "null"])


def json_documents(n: int, seed: int = 0) -> list[str]:
    """``n`` random valid JSON texts: nested containers, escapes (\\uXXXX, surrogate pairs), raw
    UTF-8, exponents, whitespace styles (compact / spaced / newlines, tabs, CRLF, leading and
    trailing whitespace), and top-level scalars. Deterministic in ``seed``."""
    import json

    rng = random.Random(seed)
    docs: list[str] = []
    while len(docs) < n:
        style = rng.choice(["compact", "spaced", "pretty"])
        depth = rng.choice([0, 1, 2, 3, 3, 4, 4])
        doc = _value(rng, depth, style, "", top=True)
        if style == "pretty" and rng.random() < 0.5:
            doc = rng.choice([" ", "\n", "\t "]) + doc + rng.choice(["", "\n", " "])
        json.loads(doc)  # the generator only writes valid JSON
        if 1 <= len(doc) <= 1200:
            docs.append(doc)
    return docs


# ----------------------------------------------------------------------------- independent oracle


class JsonPrefix:
    """A byte-level recogniser of JSON text prefixes (RFC 8259, strict UTF-8, no trellis code).

    States are tuples; ``feed`` returns ``None`` as soon as the bytes cannot start a JSON text.
    Every non-rejected prefix can be completed (close the open string / number / containers),
    so ``feed(...) is not None`` decides viability exactly; ``complete`` decides EOS.
    """

    WS = frozenset(b" \t\n\r")
    START = ((), "V", False)  # aux of "V": may a "]" close an empty array here

    def feed(self, state: tuple | None, data: bytes) -> tuple | None:
        for b in data:
            if state is None:
                return None
            state = self._byte(state, b)
        return state

    def complete(self, state: tuple | None) -> bool:
        if state is None:
            return False
        stack, mode, aux = state
        if stack:
            return False
        return mode == "A" or (mode == "N" and aux in ("0", "int", "frac", "exp"))

    def _byte(self, state: tuple, b: int) -> tuple | None:
        stack, mode, aux = state
        if mode == "V":
            if b in self.WS:
                return state
            if b == 0x7B:  # {
                return stack + ("o",), "K0", None
            if b == 0x5B:  # [
                return stack + ("a",), "V", True
            if b == 0x22:
                return stack, "S", False
            if b == 0x2D:
                return stack, "N", "-"
            if b == 0x30:
                return stack, "N", "0"
            if 0x31 <= b <= 0x39:
                return stack, "N", "int"
            for w in (b"true", b"false", b"null"):
                if b == w[0]:
                    return stack, "L", (w, 1)
            if b == 0x5D and aux is True:
                return stack[:-1], "A", None
            return None
        if mode == "K0" or mode == "K":
            if b in self.WS:
                return state
            if b == 0x22:
                return stack, "S", True
            if b == 0x7D and mode == "K0":
                return stack[:-1], "A", None
            return None
        if mode == "C":
            if b in self.WS:
                return state
            return (stack, "V", False) if b == 0x3A else None
        if mode == "A":
            if b in self.WS:
                return state
            top = stack[-1] if stack else None
            if b == 0x2C and top == "o":
                return stack, "K", None
            if b == 0x2C and top == "a":
                return stack, "V", False
            if (b == 0x7D and top == "o") or (b == 0x5D and top == "a"):
                return stack[:-1], "A", None
            return None
        if mode == "S":
            if b == 0x22:
                return (stack, "C", None) if aux else (stack, "A", None)
            if b == 0x5C:
                return stack, "SE", aux
            if b < 0x20:
                return None
            if b < 0x80:
                return state
            lead = {0xE0: (2, 0xA0, 0xBF), 0xED: (2, 0x80, 0x9F), 0xF0: (3, 0x90, 0xBF), 0xF4: (3, 0x80, 0x8F)}
            if b in lead:
                n, lo, hi = lead[b]
            elif 0xC2 <= b <= 0xDF:
                n, lo, hi = 1, 0x80, 0xBF
            elif 0xE1 <= b <= 0xEF:
                n, lo, hi = 2, 0x80, 0xBF
            elif 0xF1 <= b <= 0xF3:
                n, lo, hi = 3, 0x80, 0xBF
            else:
                return None
            return stack, "U8", (aux, n, lo, hi)
        if mode == "U8":
            key, n, lo, hi = aux
            if not lo <= b <= hi:
                return None
            return (stack, "S", key) if n == 1 else (stack, "U8", (key, n - 1, 0x80, 0xBF))
        if mode == "SE":
            if b in b'"\\/bfnrt':
                return stack, "S", aux
            return (stack, "SU", (aux, 4)) if b == 0x75 else None
        if mode == "SU":
            key, n = aux
            if b not in b"0123456789abcdefABCDEF":
                return None
            return (stack, "S", key) if n == 1 else (stack, "SU", (key, n - 1))
        if mode == "L":
            w, i = aux
            if b != w[i]:
                return None
            return (stack, "A", None) if i + 1 == len(w) else (stack, "L", (w, i + 1))
        if mode == "N":
            digit = 0x30 <= b <= 0x39
            nxt = {
                "-": "int" if 0x31 <= b <= 0x39 else "0" if b == 0x30 else None,
                "0": "." if b == 0x2E else "e" if b in b"eE" else "end",
                "int": "int" if digit else "." if b == 0x2E else "e" if b in b"eE" else "end",
                ".": "frac" if digit else None,
                "frac": "frac" if digit else "e" if b in b"eE" else "end",
                "e": "esign" if b in b"+-" else "exp" if digit else None,
                "esign": "exp" if digit else None,
                "exp": "exp" if digit else "end",
            }[aux]
            if nxt is None:
                return None
            if nxt == "end":
                return self._byte((stack, "A", None), b)
            return stack, "N", nxt
        raise AssertionError(mode)


# ----------------------------------------------------------------------------- engines


@dataclass
class Engine:
    """One mask source: ``constraint`` plus how it reads each token (for the tokenizer category)."""

    name: str
    constraint: Any
    token_bytes: Callable[[int], bytes | None]  # None = the engine treats the id as special


def engines(tokenizer: Any, vocab: Any, *, hf_peers: bool = True) -> list[Engine]:
    """trellis + xgrammar / llguidance over the same token bytes (+ over their own HF import)."""
    from trellis.integrations.llguidance import compile_llguidance, lark_for_llguidance, lltokenizer
    from trellis.integrations.xgrammar import JSON_EBNF, compile_xgrammar, tokenizer_info

    text = RFC_JSON
    mine = lambda t: None if t in vocab.special or t in vocab.eos else vocab.tokens[t]  # noqa: E731
    out = [Engine("trellis", compile(RFC_JSON, vocab), mine),
           Engine("xgrammar[bytes]", compile_xgrammar(JSON_EBNF, vocab), mine),
           Engine("llguidance[bytes]", compile_llguidance(lark_for_llguidance(text), vocab), mine)]
    if hf_peers:
        info = tokenizer_info(vocab, tokenizer)
        special = set(info.special_token_ids) | set(vocab.eos)
        dv = info.decoded_vocab
        out.append(Engine("xgrammar[hf]", compile_xgrammar(JSON_EBNF, vocab, tokenizer=tokenizer),
                          lambda t: None if t in special else bytes(dv[t])))
        lt = lltokenizer(vocab, tokenizer)
        out.append(Engine("llguidance[hf]", compile_llguidance(lark_for_llguidance(text), vocab, tokenizer=tokenizer),
                          lambda t: None if lt.is_special_token(t) or t in vocab.eos else lt.decode_bytes([t])))
    return out


# ----------------------------------------------------------------------------- the comparison


@dataclass
class Report:
    docs: int = 0
    positions: int = 0
    compared: Counter = field(default_factory=Counter)  # peer -> tokens compared
    differences: Counter = field(default_factory=Counter)  # (peer, category) -> tokens
    examples: dict = field(default_factory=dict)  # (peer, category) -> first few (doc, text tail, token)
    oracle_checks: int = 0
    trellis_vs_oracle: list = field(default_factory=list)  # spot-check failures
    skipped_docs: int = 0

    def wrong(self, who: str) -> int:
        return sum(n for (peer, cat), n in self.differences.items() if cat.startswith(who))


_TOKENIZER_CATEGORIES = ("", "tokenizer: peer reads a special token as text",
                         "tokenizer: peer treats a text token as special",
                         "tokenizer: peer decodes the token to other bytes")


def _tokenizer_codes(eng: Engine, vocab: Any) -> torch.Tensor:
    """[V] int64: index into ``_TOKENIZER_CATEGORIES`` (0 = the engine reads the token as trellis does)."""
    codes = torch.zeros(len(vocab), dtype=torch.long)
    for t in range(len(vocab)):
        if t in vocab.eos:
            continue
        mine = None if t in vocab.special else vocab.tokens[t]
        theirs = eng.token_bytes(t)
        if mine != theirs:
            codes[t] = 1 if mine is None else 2 if theirs is None else 3
    return codes


def _grammar_category(t: int, trellis_allows: bool, text_state: tuple | None, oracle: JsonPrefix, vocab: Any) -> str:
    """Whose mask is wrong about token ``t`` (same bytes for both engines), by the oracle."""
    if t in vocab.eos:
        truth = oracle.complete(text_state)
        return ("peer" if trellis_allows == truth else "trellis") + " wrong: EOS"
    truth = oracle.feed(text_state, vocab.tokens[t]) is not None
    side = "peer" if trellis_allows == truth else "trellis"
    return f"{side} wrong: {'allows an invalid' if not truth else 'misses a valid'} token"


def crosscheck(tokenizer: Any, vocab: Any, docs: list[str], *, engines_: list[Engine] | None = None,
               spot: int = 48, seed: int = 0, examples: int = 3, progress: Callable[[int], None] | None = None
               ) -> Report:
    """Compare every engine's mask with trellis' at every token boundary of every document."""
    engs = engines_ or engines(tokenizer, vocab)
    peers = engs[1:]  # engs[0] is trellis
    oracle = JsonPrefix()
    rng = random.Random(seed)
    rep = Report()
    n = len(vocab)
    rows = allocate_bitmask(len(engs), n)
    codes = {e.name: _tokenizer_codes(e, vocab) for e in peers}
    for di, doc in enumerate(docs):
        ids = tokenizer(doc, add_special_tokens=False).input_ids
        if vocab.decode(ids) != doc.encode():
            rep.skipped_docs += 1  # the tokenizer normalised the text: not a walk of this document
            continue
        rep.docs += 1
        states = [e.constraint.start() for e in engs]
        ostate = JsonPrefix.START
        text = b""
        for pos in range(len(ids) + 1):
            for e, s, i in zip(engs, states, range(len(engs))):
                e.constraint.fill_mask(s, rows[i])
            allowed = bitmask_to_bool(rows, n)  # [E, V]
            rep.positions += 1
            mine = allowed[0]
            for i, e in enumerate(peers, start=1):
                rep.compared[e.name] += n
                diff = torch.nonzero(allowed[i] != mine).flatten()
                if not len(diff):
                    continue
                kinds = codes[e.name][diff]
                for k in kinds.unique().tolist():
                    sel = diff[kinds == k].tolist()
                    if k:  # a tokenizer difference: the engines do not see the same bytes
                        cats = [(_TOKENIZER_CATEGORIES[k], sel)]
                    else:
                        by: dict[str, list[int]] = {}
                        for t in sel:
                            by.setdefault(_grammar_category(t, bool(mine[t]), ostate, oracle, vocab), []).append(t)
                        cats = list(by.items())
                    for cat, toks in cats:
                        rep.differences[(e.name, cat)] += len(toks)
                        ex = rep.examples.setdefault((e.name, cat), [])
                        for t in toks[: max(0, examples - len(ex))]:
                            ex.append((di, text[-24:], vocab.tokens[t] if t not in vocab.special else t))
            # Spot-check trellis itself against the oracle on random tokens (plus EOS).
            for t in rng.sample(range(n), spot) + sorted(vocab.eos):
                if t in vocab.special and t not in vocab.eos:
                    truth = False
                elif t in vocab.eos:
                    truth = oracle.complete(ostate)
                else:
                    truth = oracle.feed(ostate, vocab.tokens[t]) is not None
                rep.oracle_checks += 1
                if bool(mine[t]) != truth:
                    rep.trellis_vs_oracle.append((di, text[-24:], vocab.tokens[t], bool(mine[t])))
            if pos == len(ids):
                break
            t = ids[pos]
            for i, e in enumerate(engs):
                nxt = e.constraint.advance(states[i], t)
                assert nxt is not None, (f"{e.name} rejects token {t} {vocab.tokens[t]!r} of document {di} "
                                         f"after {text[-30:]!r}")
                states[i] = nxt
            text += vocab.tokens[t]
            ostate = oracle.feed(ostate, vocab.tokens[t])
            assert ostate is not None
        assert oracle.complete(ostate) and all(e.constraint.is_accepting(s) for e, s in zip(engs, states))
        if progress is not None:
            progress(di)
    return rep


def format_report(rep: Report) -> str:
    lines = [f"documents {rep.docs} (skipped {rep.skipped_docs}), positions {rep.positions}, "
             f"oracle spot checks of trellis {rep.oracle_checks} (failures {len(rep.trellis_vs_oracle)})", ""]
    peers = sorted(rep.compared)
    lines.append(f"{'peer':<20} {'tokens compared':>16} {'differences':>12}")
    for p in peers:
        d = sum(n for (q, _), n in rep.differences.items() if q == p)
        lines.append(f"{p:<20} {rep.compared[p]:>16,} {d:>12,}")
    lines.append("")
    lines.append(f"{'peer':<20} {'category':<48} {'tokens':>8}  examples (doc, text tail, token)")
    for (p, cat), cnt in sorted(rep.differences.items()):
        ex = "; ".join(f"{d}:{tail!r}+{tok!r}" for d, tail, tok in rep.examples[(p, cat)])
        lines.append(f"{p:<20} {cat:<48} {cnt:>8,}  {ex}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- tests


def test_oracle_agrees_with_json_module():
    import json

    oracle = JsonPrefix()
    for doc in json_documents(200, seed=1):
        data = doc.encode()
        st = JsonPrefix.START
        for i in range(len(data)):  # every prefix is viable; only the whole text is complete
            assert st is not None and (not oracle.complete(st) or data[:i].strip() and json.loads(data[:i]) is not None)
            st = oracle.feed(st, data[i:i + 1])
        assert oracle.complete(st), doc
    for bad in [b"[1,]", b"01", b'{"a" 1}', b"\xed\xa0\x80", b'"\xed\xa0\x80"', b'"\xc0\xaf"', b"1.", b"-",
                b'"\x01"', b'"\\x"', b"nul", b"[1 2]", b"{} {}", b'"\xff"', b"]", b" ]", b"[1]]", b"{]"]:
        st = oracle.feed(JsonPrefix.START, bad)
        with pytest.raises(ValueError):
            json.loads(bad.decode("utf-8"))
        assert not oracle.complete(st), bad
    assert oracle.feed(JsonPrefix.START, b'"\xe2\x82') is not None  # half of a character inside a string
    assert oracle.feed(JsonPrefix.START, b"\xe2") is None


def _tiny_json_vocab():
    from trellis.tokens import Vocabulary

    toks = [c.encode() for c in '{}[],:"0123456789-.eE+ \nabtruefalsn\\/u'] + [
        b"true", b"null", b'{"', b'":', b'",', b' "', b"12", b'"}', b"]}", "é".encode(), "é".encode()[:1],
        "é".encode()[1:], "€".encode()[:2], "€".encode()[2:], b"\xff", b"\\u00"]
    toks = list(dict.fromkeys(toks)) + [b"", b""]
    return Vocabulary(tuple(toks), eos=frozenset([len(toks) - 2]), special=frozenset([len(toks) - 1]))


def test_peers_agree_on_a_tiny_vocabulary():
    """trellis, xgrammar and llguidance masks are equal (and equal to the oracle) along random
    walks; states are visited out of order, so the adapters' rollback/replay is exercised too."""
    pytest.importorskip("xgrammar")
    pytest.importorskip("llguidance")
    from trellis.integrations.llguidance import compile_llguidance, lark_for_llguidance
    from trellis.integrations.xgrammar import JSON_EBNF, compile_xgrammar

    vocab = _tiny_json_vocab()
    text = RFC_JSON
    cs = [compile(RFC_JSON, vocab, cache=False), compile_xgrammar(JSON_EBNF, vocab),
          compile_llguidance(lark_for_llguidance(text), vocab)]
    oracle = JsonPrefix()
    rng = random.Random(0)
    n = len(vocab)
    rows = allocate_bitmask(3, n)
    seen: list[tuple] = [tuple(c.start() for c in cs)]  # (trellis, xgrammar, llguidance) states
    data = {seen[0]: b""}
    for _ in range(400):
        states = rng.choice(seen)  # jump anywhere: the peers' matchers must roll back / replay
        for c, st, i in zip(cs, states, range(3)):
            c.fill_mask(st, rows[i])
        allowed = bitmask_to_bool(rows, n)
        text_so_far = data[states]
        ostate = oracle.feed(JsonPrefix.START, text_so_far)
        truth = [oracle.feed(ostate, t) is not None if t and i not in vocab.special | vocab.eos else False
                 for i, t in enumerate(vocab.tokens)]
        for e in vocab.eos:
            truth[e] = oracle.complete(ostate)
        for i in range(3):
            assert allowed[i].tolist() == truth, (i, text_so_far)
        ok = [t for t in range(n) if truth[t] and t not in vocab.eos]
        if not ok:
            continue
        t = rng.choice(ok)
        nxt = tuple(c.advance(st, t) for c, st in zip(cs, states))
        assert all(x is not None for x in nxt)
        if nxt not in data:
            seen.append(nxt)
            data[nxt] = text_so_far + vocab.tokens[t]
    assert cs[1].replayed > 0 and cs[2].replayed > 0


def test_adapters_name_the_missing_package(monkeypatch):
    import sys

    from trellis.integrations import llguidance as llg_adapter
    from trellis.integrations import xgrammar as xgr_adapter

    monkeypatch.setitem(sys.modules, "xgrammar", None)
    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(ImportError, match="pip install xgrammar"):
        xgr_adapter.compile_xgrammar("root ::= \"a\"", _tiny_json_vocab())
    with pytest.raises(ImportError, match="pip install llguidance"):
        llg_adapter.compile_llguidance('start: "a"', _tiny_json_vocab())


def test_lark_for_llguidance_allows_ignored_terminals_at_the_edges():
    from trellis.integrations.llguidance import lark_for_llguidance

    out = lark_for_llguidance(RFC_JSON)
    assert out.startswith("start: WS? trellis_start WS?") and "?trellis_start: value" in out
    assert lark_for_llguidance('start: "a"\n') == 'start: "a"\n'
    two = lark_for_llguidance('start: "a"\n%ignore " "\n%ignore /#[^\\n]*/\n')
    assert "start: (TRELLIS_IGNORE_0 | TRELLIS_IGNORE_1)* trellis_start (TRELLIS_IGNORE_0 | TRELLIS_IGNORE_1)*" in two


def _check(rep: Report) -> None:
    assert rep.docs >= 1 and not rep.trellis_vs_oracle, rep.trellis_vs_oracle[:5]
    assert rep.wrong("trellis") == 0, format_report(rep)
    # Same bytes, same language: the grammar engines must agree exactly.
    for (peer, cat), cnt in rep.differences.items():
        if peer.endswith("[bytes]"):
            raise AssertionError(f"{peer}: {cat} x{cnt}\n" + format_report(rep))


@pytest.mark.model
def test_crosscheck_json_gemma(gemma):
    torch.set_num_threads(1)
    # CI compares over the same token bytes only: llguidance's own HF import alone takes ~7 s.
    engs = engines(gemma.tokenizer, gemma.vocab, hf_peers=False)
    rep = crosscheck(gemma.tokenizer, gemma.vocab, json_documents(CI_DOCS, seed=0), engines_=engs, spot=32)
    print(format_report(rep))
    _check(rep)


@pytest.mark.model
@pytest.mark.exhaustive
def test_crosscheck_json_gemma_full(gemma):
    rep = crosscheck(gemma.tokenizer, gemma.vocab, json_documents(FULL_DOCS, seed=0))
    print(format_report(rep))
    _check(rep)
