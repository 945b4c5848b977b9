"""Cross-check trellis' GBNF reader against xgrammar on xgrammar's own EBNF test grammars.

    python benchmarks/crosscheck_xgrammar_ebnf.py [--walks 5] [--steps 20] [--tokens 300]
                                                  [--limit-s 60] [--seed 0] [--only ID ...]
                                                  [--roles test_input] [--json out.json] [--quiet]

Corpus: ``benchmarks/data/xgrammar_ebnf/grammars.json`` (see its README.md), the records with
role ``test_input`` whose grammar the installed xgrammar accepts (``Grammar.from_ebnf(text,
root_rule_name=...)`` and ``compile_grammar`` for the printable ASCII bytes, re-checked here: some
refusals, a regex its ``Regex`` macro cannot build, come only at compile time), one per distinct (text, root rule name).

For each grammar:

1. trellis: ``compile(Gbnf(text, root=root_rule_name), vocab, cache=False)``; a ``GrammarError``
   is a refusal, counted by reason (the message up to its first ':' or '('; the xgrammar macros
   and rule attributes, which have no GBNF meaning, are also counted apart as "xgrammar-only").
2. The vocabulary (per grammar, seeded): the bytes 0x20-0x7e, ``\\n``, ``\\t``; ``--tokens``
   random 2-4 byte tokens, half of them slices of the grammar's own literals (what its rules
   spell, as trellis parsed them, or the quoted strings of the text when trellis refused it),
   half random strings over those literals' bytes and ASCII punctuation; ``é``, ``日本``, ``😀``,
   the lone bytes ``\\xc3`` ``\\xa9`` ``\\xf0``; and EOS (``b""``). xgrammar sees the same bytes
   (``TokenizerInfo`` RAW, ``trellis.integrations.xgrammar.tokenizer_info``).
3. Where both compile: ``--walks`` seeded random walks of up to ``--steps`` tokens, each token
   drawn from the tokens both masks allow (so a walk follows trellis' masks and both engines stay
   in step), stopping at EOS. At every step the two masks are compared token by token. Each
   difference is printed (grammar id, prefix, token, both answers) and adjudicated by xgrammar's
   own matcher, without its mask: a fresh ``GrammarMatcher`` ``accept_string(prefix + token)``
   (EOS: ``accept_string(prefix)`` and ``is_completed()``). If the matcher agrees with trellis,
   xgrammar's mask disagrees with xgrammar's own matcher ("xgrammar inconsistent": its mask
   precomputation trusts lookahead assertions ``(= ...)`` it never checks, DIALECT.md section 6);
   otherwise "trellis wrong".
4. The strings xgrammar's tests check on the grammar (``checked_inputs``): trellis, compiled for
   a byte vocabulary (256 single bytes + EOS), must accept the ``accepted_inputs`` and reject the
   ``rejected_inputs`` (whole string with termination, or as a prefix where the test passes
   ``require_termination=False``); disagreements are printed, with what the installed xgrammar
   says (a few converter-made grammars changed between the snapshot the tests target and 0.2.9).

Every grammar runs under a ``--limit-s`` SIGALRM deadline (Python code only; a long call into
xgrammar's C++ is cut when it returns). The last line is the SUMMARY.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_fresh import Timeout, deadline  # noqa: E402

from trellis.constrain import compile  # noqa: E402
from trellis.constrain.errors import GrammarError  # noqa: E402
from trellis.constrain.frontends.gbnf import Alt, Chars, Gbnf, Lit, Repeat, Seq  # noqa: E402
from trellis.tokens import Vocabulary  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "xgrammar_ebnf" / "grammars.json"
PUNCT = b' {}[](),:;."\'\n\t-_=<>/\\|*+?'
EXTRA = ("é".encode(), "日本".encode(), "😀".encode(), b"\xc3", b"\xa9", b"\xf0")


def xgrammar_only(reason: str) -> bool:
    return reason.startswith("xgrammar macro") or reason.startswith("xgrammar rule attributes")


def reason_of(e: GrammarError) -> str:
    """The refusal's kind: its message up to the first detail."""
    m = e.message
    if xgrammar_only(m):
        return re.match(r"xgrammar (macro \w+|rule attributes)", m).group()
    return re.split(r"[:(']", m)[0].strip() or m[:40]


# ----------------------------------------------------------------------------- corpus and vocabulary

def corpus(roles: set[str]) -> list[dict]:
    """One record per distinct (text, root) among ``roles`` that the dataset says xgrammar accepts."""
    seen: dict[tuple[str, str], dict] = {}
    for r in json.loads(DATA.read_text(encoding="utf-8")):
        if r["role"] in roles and r["xgrammar"]["accepted"]:
            key = (r["ebnf"], r["root_rule_name"] or "root")
            if key in seen:  # merge the checked strings of the duplicates
                seen[key]["checked_inputs"] = seen[key]["checked_inputs"] + (r.get("checked_inputs") or [])
            else:
                seen[key] = dict(r, checked_inputs=list(r.get("checked_inputs") or []))
    return list(seen.values())


def literals(text: str, root: str) -> list[bytes]:
    """The grammar's literal texts (and one character of each class), as trellis reads it; the
    quoted strings of the source where trellis refuses it."""
    try:
        rules = Gbnf(text, root=root).rules()
    except GrammarError:
        return [m.encode("utf-8", "surrogatepass") for m in re.findall(r'"((?:[^"\\\n]|\\.)+)"', text)]
    out: list[bytes] = []

    def visit(n: Any) -> None:
        if isinstance(n, Lit) and n.text:
            out.append(n.text.encode("utf-8", "surrogatepass"))
        elif isinstance(n, Chars) and n.ranges and not n.negated:
            lo, hi = n.ranges[0]
            out.append(chr(lo if lo == hi else (lo + hi) // 2).encode("utf-8", "surrogatepass"))
        elif isinstance(n, Repeat):
            visit(n.item)
        elif isinstance(n, Seq):
            for x in n.items:
                visit(x)
        elif isinstance(n, Alt):
            for x in n.options:
                visit(x)

    for body in rules.values():
        visit(body)
    if re.search(r"\b(Regex|Substring|TagDispatch)\(", text):  # their arguments spell text too
        out += [m.encode("utf-8", "surrogatepass") for m in re.findall(r'"((?:[^"\\\n]|\\.)+)"', text)]
    return out


def uses_token_elements(text: str) -> bool:
    """Whether the grammar names tokens by id (xgrammar's Token / ExcludeToken / TokenTagDispatch,
    llama.cpp's <[id]>): its vocabulary then starts with ``SPECIALS`` special tokens."""
    return bool(re.search(r"\b(Token|ExcludeToken|TokenTagDispatch)\s*\(|<\[", text))


SPECIALS = 12  # control tokens (no text) at ids 0..11 where a grammar names tokens by id


def vocabulary(text: str, root: str, rng: random.Random, n: int) -> Vocabulary:
    toks = [bytes([b]) for b in range(0x20, 0x7F)] + [b"\n", b"\t"]
    lits = [x for x in literals(text, root) if x]
    alphabet = bytes(sorted(set(b"".join(lits)) | set(PUNCT)))
    long_lits = [x for x in lits if len(x) >= 2]
    for i in range(n):
        k = rng.randint(2, 4)
        if i % 2 == 0 and long_lits:
            lit = rng.choice(long_lits)
            j = rng.randrange(max(1, len(lit) - 1))
            toks.append(lit[j:j + k])
        else:
            toks.append(bytes(rng.choice(alphabet) for _ in range(k)))
    toks += EXTRA
    toks = [t for t in dict.fromkeys(toks) if t] + [b""]
    if not uses_token_elements(text):
        return Vocabulary(tuple(toks), eos=frozenset([len(toks) - 1]))
    # Token(2) names a control token, as it does in a real vocabulary (xgrammar too reads a token
    # with no text as special); Token(42) a text token
    toks = [b""] * SPECIALS + toks
    return Vocabulary(tuple(toks), eos=frozenset([len(toks) - 1]), special=frozenset(range(SPECIALS)))


def standin(vocab: Vocabulary, i: int) -> bytes:
    """Token ``i``'s text as xgrammar sees it: a control token's is ``\\xff`` and its id's byte."""
    return b"\xff" + bytes([i]) if i in vocab.special and i not in vocab.eos else vocab.tokens[i]


def byte_vocabulary() -> Vocabulary:
    toks = tuple(bytes([b]) for b in range(256)) + (b"",)
    return Vocabulary(toks, eos=frozenset([256]))


# ----------------------------------------------------------------------------- engines

def trellis_mask(c: Any, state: Any, n: int) -> np.ndarray:
    return np.unpackbits(c.mask_array(state).view(np.uint8), bitorder="little")[:n].astype(bool)


class XG:
    """xgrammar for one grammar and vocabulary: a replaying mask reader and a fresh-matcher judge."""

    def __init__(self, text: str, root: str, vocab: Vocabulary) -> None:
        import xgrammar as xgr
        from trellis.integrations.xgrammar import XGrammarConstraint, tokenizer_info

        self.xgr = xgr
        grammar = xgr.Grammar.from_ebnf(text, root_rule_name=root)
        info = tokenizer_info(vocab)
        if vocab.special:  # xgrammar reads a token without text as unusable: give control tokens
            # a stand-in text no text grammar can match (not UTF-8), as a real vocabulary gives them
            # theirs (``standin``)
            info = xgr.TokenizerInfo([standin(vocab, i) for i in range(len(vocab))], xgr.VocabType.RAW,
                                     vocab_size=len(vocab), stop_token_ids=sorted(vocab.eos))
        compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.compiled = compiler.compile_grammar(grammar)
        self.c = XGrammarConstraint(self.compiled, vocab)
        self.n = len(vocab.tokens)
        from trellis.mask import allocate_bitmask

        self.row = allocate_bitmask(1, self.n)

    def mask(self, state: Any) -> np.ndarray:
        from trellis.mask import bitmask_to_bool

        self.c.fill_mask(state, self.row[0])
        return bitmask_to_bool(self.row, self.n)[0].numpy().astype(bool)

    def matcher_accepts(self, prefix: bytes, token: bytes | None) -> bool:
        """xgrammar's matcher alone (no mask): ``prefix + token`` a viable prefix; ``token`` None:
        ``prefix`` complete (EOS allowed)."""
        m = self.xgr.GrammarMatcher(self.compiled)
        if token is None:
            return bool((m.accept_string(prefix) if prefix else True) and m.is_completed())
        return bool(m.accept_string(prefix + token))

    def matcher_accepts_ids(self, ids: tuple, token: int, eos: int) -> tuple[bool, bool]:
        """xgrammar's matcher alone, by token ids (a grammar with token elements has no string
        form): whether it accepts ``token`` after ``ids``, and whether it is then terminated."""
        m = self.xgr.GrammarMatcher(self.compiled)
        ok = all(m.accept_token(i) for i in ids) and bool(m.accept_token(token))
        return ok, bool(ok and m.is_terminated())


def utf8_ok(prefix: bytes, token: bytes | None) -> bool:
    """Whether ``prefix + token`` can still become UTF-8 text (``token`` None: ``prefix`` is
    complete UTF-8 text). trellis' languages are sets of Unicode strings; xgrammar's TagDispatch
    free text runs over raw bytes and also admits byte strings that are not UTF-8 (a lone
    continuation byte, a lead byte followed by ASCII)."""
    data = prefix if token is None else prefix + token
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError as e:
        return token is not None and e.end == len(data) and e.reason == "unexpected end of data"


def straddles(c: Any, state: Any, token: int) -> bool:
    """Whether ``token`` splits into text ``u`` (non-empty, a proper prefix of its bytes) that
    the chart takes from ``state``, after which a token element expected there would match the
    token's id: one token read twice, as text and as a token element. xgrammar's matcher accepts
    such a token after text that ``ExcludeToken`` follows (``"aa" ExcludeToken(3) "dd"`` takes
    token ``a`` then token ``a>)``), though ExcludeToken "matches exactly one token" and that
    token's first byte was text; trellis reads every token whole, as text or as one element."""
    data = c.vocab.tokens[token]
    for k in range(1, len(data)):
        st = c.earley.walk(state, data[:k])
        if st is None:
            return False
        ids = c.token_ids(st)
        if ids is not None and ids[token]:
            return True
    return False


def trellis_accepts(c: Any, data: bytes, whole: bool) -> bool:
    s = c.start()
    for b in data:
        s = c.advance(s, b)
        if s is None:
            return False
    return c.is_accepting(s) if whole else True


# ----------------------------------------------------------------------------- one grammar

_ASCII: list = []


def _ascii_tokenizer() -> Any:
    """xgrammar's tokenizer info for the printable ASCII bytes (to ask whether it compiles a grammar)."""
    if not _ASCII:
        import xgrammar as xgr

        _ASCII.append(xgr.TokenizerInfo([chr(c) for c in range(0x20, 0x7F)]))
    return _ASCII[0]


def check(rec: dict, args: argparse.Namespace, out: list[str]) -> dict:
    text, root, gid = rec["ebnf"], rec["root_rule_name"] or "root", rec["id"]
    res: dict[str, Any] = {"id": gid, "status": None, "masks": 0, "diffs": [], "input_mismatches": []}
    try:
        import xgrammar as xgr

        # accepted = compiled: some refusals (a regex xgrammar cannot build) come at compile time
        xgr.GrammarCompiler(_ascii_tokenizer(), max_threads=1, cache_enabled=False).compile_grammar(
            xgr.Grammar.from_ebnf(text, root_rule_name=root))
    except Exception as e:  # noqa: BLE001 - the installed xgrammar refuses it
        res.update(status="xgrammar refuses", reason=" ".join(str(e).split())[-120:])
        return res
    rng = random.Random(f"{args.seed}-{gid}")
    vocab = vocabulary(text, root, rng, args.tokens)
    n = len(vocab.tokens)
    eos = n - 1
    try:
        with deadline(args.limit_s):
            t0 = time.perf_counter()
            try:
                c = compile(Gbnf(text, source=gid, root=root), vocab, cache=False)
            except GrammarError as e:
                res.update(status="refused", reason=reason_of(e), message=e.message[:160])
                return res
            res["compile_s"] = time.perf_counter() - t0
            res["status"] = "compiled"
            x = XG(text, root, vocab)
            by_ids = uses_token_elements(text)
            for w in range(args.walks):
                wrng = random.Random(f"{args.seed}-{gid}-walk{w}")
                s, xs, doc = c.start(), x.c.start(), b""
                for _ in range(args.steps):
                    mine, theirs = trellis_mask(c, s, n), x.mask(xs)
                    res["masks"] += 1
                    for i in np.flatnonzero(mine != theirs):
                        tok = None if i == eos else standin(vocab, int(i))
                        if by_ids:
                            judge, ended = x.matcher_accepts_ids(xs, int(i), eos)
                        else:
                            judge, ended = x.matcher_accepts(doc, tok), True
                        verdict = ("xgrammar inconsistent" if judge == bool(mine[i]) else
                                   "xgrammar allows text that is not UTF-8" if judge and not utf8_ok(doc, tok) else
                                   "xgrammar reads the stop token as a token of ExcludeToken"
                                   if judge and tok is None and not ended else
                                   "xgrammar lets a token end text and match ExcludeToken at once"
                                   if judge and by_ids and straddles(c, s, int(i)) else
                                   "trellis wrong")
                        res["diffs"].append(verdict)
                        out.append(f"DIFF {gid} walk={w} prefix={doc!r} token={'EOS' if tok is None else tok!r} "
                                   f"trellis={bool(mine[i])} xgrammar_mask={bool(theirs[i])} "
                                   f"xgrammar_matcher={judge} -> {verdict}")
                    both = np.flatnonzero(mine & theirs)
                    if not len(both):
                        break
                    t = int(wrng.choice(both))
                    if t == eos:
                        break
                    s, xs, doc = c.advance(s, t), x.c.advance(xs, t), doc + vocab.tokens[t]
            checked = rec.get("checked_inputs") or []
            if checked:
                cb = compile(Gbnf(text, source=gid, root=root), byte_vocabulary(), cache=False)
                for ci in checked:
                    whole = ci.get("require_termination", True)
                    got = trellis_accepts(cb, ci["input"].encode("utf-8", "surrogatepass"), whole)
                    res.setdefault("inputs", 0)
                    res["inputs"] += 1
                    if got != ci["expected"]:
                        xg_result = ci.get("result_installed_xgrammar")
                        res["input_mismatches"].append({"input": ci["input"], "expected": ci["expected"],
                                                        "trellis": got, "xgrammar_0.2.9": xg_result})
                        out.append(f"INPUT {gid} {ci['input'][:80]!r} whole={whole} test_expects={ci['expected']} "
                                   f"trellis={got} installed_xgrammar={xg_result}")
    except Timeout as e:
        res.update(status="timeout" if res["status"] is None else "compiled", timeout=str(e))
        out.append(f"TIMEOUT {gid}: {e} (status {res['status']}, {res['masks']} masks compared)")
    except Exception as e:  # noqa: BLE001 - report, go on
        res.update(status=res["status"] or "error", error=f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
        out.append(f"ERROR {gid}: {res['error']}")
    return res


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--walks", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--limit-s", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", default=None, help="grammar ids")
    ap.add_argument("--roles", nargs="*", default=["test_input"])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--quiet", action="store_true", help="no per-grammar lines")
    args = ap.parse_args(argv)

    recs = corpus(set(args.roles))
    if args.only:
        recs = [r for r in recs if r["id"] in set(args.only)]
    results = []
    t0 = time.perf_counter()
    for rec in recs:
        out: list[str] = []
        res = check(rec, args, out)
        results.append(res)
        for line in out:
            print(line, flush=True)
        if not args.quiet:
            walked = f"{res['masks']} masks, {len(res['diffs'])} diffs" if res["status"] == "compiled" else ""
            extra = res.get("reason") or walked
            print(f"{res['id']}: {res['status']} {extra}", flush=True)

    by_status = collections.Counter(r["status"] for r in results)
    considered = [r for r in results if r["status"] != "xgrammar refuses"]
    compiled = [r for r in considered if r["status"] == "compiled"]
    refused = collections.Counter(r["reason"] for r in considered if r["status"] == "refused")
    gbnf_meaningful = [r for r in considered if not (r["status"] == "refused" and xgrammar_only(r["reason"]))]
    diffs = collections.Counter(v for r in results for v in r["diffs"])
    n_inputs = sum(r.get("inputs", 0) for r in results)
    mism = [m for r in results for m in r["input_mismatches"]]
    mism_xg_agrees = sum(m["trellis"] == m["xgrammar_0.2.9"] for m in mism)
    summary = {
        "grammars": len(considered),
        "compiled": len(compiled),
        "compiled_pct": 100 * len(compiled) / max(1, len(considered)),
        "without_xgrammar_only": len(gbnf_meaningful),
        "compiled_pct_without_xgrammar_only": 100 * len(compiled) / max(1, len(gbnf_meaningful)),
        "refused": dict(refused.most_common()),
        "timeouts": by_status.get("timeout", 0) + sum(1 for r in compiled if "timeout" in r),
        "errors": by_status.get("error", 0),
        "xgrammar_refuses_now": by_status.get("xgrammar refuses", 0),
        "masks_compared": sum(r["masks"] for r in results),
        "differences": dict(diffs),
        "grammars_with_differences": sum(1 for r in results if r["diffs"]),
        "inputs_checked": n_inputs,
        "input_mismatches": len(mism),
        "input_mismatches_where_xgrammar_0.2.9_agrees_with_trellis": mism_xg_agrees,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "results": results}, indent=1))
    print(f"SUMMARY grammars={summary['grammars']} compiled={summary['compiled']} "
          f"({summary['compiled_pct']:.1f}%; {summary['compiled_pct_without_xgrammar_only']:.1f}% of the "
          f"{summary['without_xgrammar_only']} without xgrammar-only macros/attributes) "
          f"refused={summary['refused']} timeouts={summary['timeouts']} errors={summary['errors']} "
          f"masks_compared={summary['masks_compared']} differences={summary['differences'] or 0} "
          f"(in {summary['grammars_with_differences']} grammars) inputs_checked={n_inputs} "
          f"input_mismatches={len(mism)} (installed xgrammar agrees with trellis on {mism_xg_agrees}) "
          f"seconds={summary['seconds']}", flush=True)
    return summary


if __name__ == "__main__":
    main()
