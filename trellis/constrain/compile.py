"""``compile(grammar, vocab) -> Constraint``, with a disk cache of the compiled tables.

``grammar`` is one of: a ``Regex``; a ``JsonSchema`` (compiled through its BNF text; the
constraint's ``ignored_keywords`` lists what lenient mode ignored); a ``Gbnf``; the name of a
grammar shipped in ``trellis/grammars/`` (``"json.lark"`` or ``"json"``); a path to a ``.lark`` or
``.gbnf`` file; or raw Lark grammar text. ``engine`` picks the scannerless Earley engine (default)
or the LALR one (``compile``'s docstring).

The cache lives under ``platformdirs.user_cache_dir("trellis")`` (override: ``TRELLIS_CACHE_DIR``;
``TRELLIS_CACHE_DIR=""`` or ``cache=False`` disables it). Earley: vocabulary walks per DFA shape
under ``walks/`` (``walk_cache.py``), built on first use. LALR: pickles keyed by (grammar text,
start rule, vocab.fingerprint(), trellis version, cache format); the vocabulary-independent
grammar tables are always cached; with ``precompute=True`` the per-lexer-state vocabulary tables
are built up front (tqdm progress bar) and cached too, otherwise lazily on first use. Vocabulary
tables of both are bounded by ``TRELLIS_GRAMMAR_CACHE_MB``, least recently used first out.
"""

from __future__ import annotations

from collections import OrderedDict

import hashlib
import re
import os
from pathlib import Path
from typing import Union

from trellis.constrain.lalr.cfg import CFGConstraint, GrammarTables, build_top_table, compile_lark
from trellis.constrain.disk_cache import (cache_key, cache_version, grammar_cache_dir, read_cache_file, wait_for_cache_writes,
                                          write_cache_later, write_cache_now)
from trellis.constrain.errors import GrammarError
from trellis.constrain.gc_pause import paused
from trellis.constrain.frontends.json_schema import JsonSchema
from trellis.constrain.grammar.grammar_ir import load_bnf, load_lark
from trellis.constrain.terminal_kinds import RESERVED
from trellis.constrain.regex_constraint import Regex, RegexConstraint
from trellis.constrain.earley.scannerless import EarleyConstraint
from trellis.errors import UsageError
from trellis.tokens import Vocabulary

GRAMMAR_DIR = Path(__file__).resolve().parent.parent / "grammars"

GrammarSpec = Union[str, os.PathLike, Regex, JsonSchema]  # or a trellis.constrain.frontends.gbnf.Gbnf


def shipped_grammars() -> list[str]:
    """File names of the grammars shipped in ``trellis/grammars/``."""
    return sorted(p.name for p in GRAMMAR_DIR.glob("*.lark")) + sorted(p.name for p in GRAMMAR_DIR.glob("*.gbnf"))


_DEFINITION = re.compile(r"^\s*(?:%|//|[?!]?[A-Za-z_][\w.]*(?:\{[^}]*\})?\s*(?:\.\s*-?\d+\s*)?(?::|::=))")


def load_grammar_text(grammar: str | os.PathLike) -> tuple[str, str]:
    """(text, source name) for a shipped grammar name, a path, or raw grammar text.

    A string is grammar text when it starts with a definition (``name:``, ``NAME.2:``, ``name ::=``,
    a ``%`` directive or a comment) or spans several lines; otherwise it names a shipped grammar or
    a file (so one-line text such as ``start: /a+/`` or ``'start: "a/b"'`` is not taken for a path)."""
    if isinstance(grammar, os.PathLike):
        p = Path(grammar)
        try:
            return p.read_text(encoding="utf-8"), str(p)
        except OSError as e:
            raise GrammarError(f"cannot read grammar file ({e.strerror})", source=str(p)) from None
    g = str(grammar)
    if "\n" not in g and len(g) < 4096 and Path(g).expanduser().is_file():
        return Path(g).expanduser().read_text(encoding="utf-8"), g
    if "\n" not in g and not _DEFINITION.match(g):
        suffix = Path(g).suffix
        name = g if suffix in (".lark", ".gbnf") else g + ".lark"
        shipped = GRAMMAR_DIR / name
        if shipped.is_file():
            return shipped.read_text(encoding="utf-8"), name
        p = Path(g).expanduser()
        if p.is_file():
            return p.read_text(encoding="utf-8"), str(p)
        raise GrammarError(f"no such grammar file (shipped: {', '.join(shipped_grammars())})", source=g)
    return g, "<grammar>"




def clear_caches() -> None:
    """Forget every in-process memo of compiled grammars and shared tables (the disk cache stays:
    point ``TRELLIS_CACHE_DIR`` at an empty folder for that): what a process that has never seen
    a grammar starts from. Benchmarks of cold compiles call it."""
    from trellis.constrain.vocab import alike_patch, counted_walk, dfa_shapes, rest_walk
    from trellis.constrain.automata import fsm_product, regex_compile, regex_ir
    from trellis.constrain.frontends import formats, pattern, ranges
    from trellis.constrain.automata.byte_dfa import LITERAL_MEMO
    from trellis.constrain.grammar.grammar_ir import IMPORTS_MEMO
    from trellis.constrain.grammar.plain_patterns import PLAIN_MEMO
    from trellis.constrain.automata.regex import DFA_MEMO, PARTS_MEMO, clear_pending
    from trellis.constrain.vocab.walk_cache import LISTED, SHARED, clear_digests

    wait_for_cache_writes()
    LISTED.clear()
    COMPILED.clear()
    alike_patch.forget()
    counted_walk.MEMO.clear()
    DFA_MEMO.clear()
    PARTS_MEMO.clear()
    clear_pending()
    SHARED.clear()
    clear_digests()
    IMPORTS_MEMO.clear()
    LITERAL_MEMO.clear()
    PLAIN_MEMO.clear()
    rest_walk._SCALED.clear()
    regex_compile.PARSED.clear()
    regex_compile._CHAR_SETS.clear()
    regex_ir._ENC_MEMO.clear()
    pattern._IR_MEMO.clear()
    fsm_product._UNIONS.clear()
    regex_ir._FSM_CACHE.clear()
    pattern._MATCHERS.clear()
    ranges._FRAC_MEMO.clear()
    formats._FORMAT_IR.clear()
    dfa_shapes.clear_shapes()


def compile_grammar(text: str, *, source: str = "<grammar>", start: str = "start",
                    cache: bool = True, top_table: bool = False) -> GrammarTables:
    """Vocabulary-independent tables of Lark grammar text (disk-cached); ``top_table``: with the
    viability answers of every stack top (``cfg.build_top_table``; for precomputed compiles)."""
    d = grammar_cache_dir() if cache else None
    path = d / f"g-{cache_key(text, start, cache_version())}.pkl" if d else None
    g = read_cache_file(path) if path is not None else None
    if isinstance(g, GrammarTables):
        g.source = source
        if not top_table or g.top_table is not None:
            return g
    else:
        g = compile_lark(text, source=source, start=start)
    if top_table:
        build_top_table(g)
    if path is not None:
        write_cache_now(path, g)
    return g


ENGINES = ("auto", "earley", "lalr")


def check_grammar(grammar: GrammarSpec, *, start: str = "start") -> None:
    """Raise the ``GrammarError`` (or ``SchemaError``) ``compile`` would raise about the grammar
    itself (no such file, syntax, undefined rules, refused features), without a vocabulary: a CLI
    checks its arguments this way before spending seconds loading a model."""
    if isinstance(grammar, Regex):
        return
    from trellis.constrain.frontends.gbnf import Gbnf

    if isinstance(grammar, (JsonSchema, SchemaGrammar)):
        text = grammar.to_lark("earley") if isinstance(grammar, JsonSchema) else str(grammar)
        if load_bnf(text, source="<json schema>", start=start, lexical_priority=True) is None:
            load_lark(text, source="<json schema>", start=start)
        return
    if isinstance(grammar, Gbnf):
        text, source = grammar.to_lark(fuse=True), grammar.source
    else:
        text, source = load_grammar_text(grammar)
        if source.endswith(".gbnf"):
            text = Gbnf(text, source=source).to_lark(fuse=True)
    path = source if source != "<grammar>" and Path(source).is_file() else None
    load_lark(text, source=source, start=start, path=path)


def prepare_vocabulary(vocab: Vocabulary) -> None:
    """Build now (or read from the disk cache) the per-vocabulary tables every Earley constraint
    over ``vocab`` uses (otherwise the first compile or mask that needs each pays for it): the
    token matrix, the token trie and its depth-first form, the lexicographic order, the token
    slices (``vocab/tables.py``: ~1.2 s to build on Gemma 3's 262,144 tokens, ~0.1 s to read).
    ``trellis.load`` calls it; they depend on the vocabulary alone, like xgrammar's
    ``TokenizerInfo`` and llguidance's ``LLTokenizer``."""
    from trellis.constrain.vocab.tables import prepare

    prepare(vocab)


class SchemaGrammar(str):
    """Lark text generated by ``JsonSchema.to_lark`` (possibly extended, as ``tools`` does): it is
    compiled the way a ``JsonSchema`` is (plain-BNF reader, terminal priorities applied as the
    contextual lexer applies them)."""


def compile(grammar: GrammarSpec, vocab: Vocabulary, *, start: str = "start", cache: bool = True,
            precompute: bool | None = None, progress: bool | None = None, engine: str = "auto",
            mask_work: int | None = None, advance_work: int | None = None,
            ) -> CFGConstraint | RegexConstraint | EarleyConstraint:
    """Compile a grammar for ``vocab`` into a Constraint (exact token masks).

    ``engine`` picks the language and the engine of a Lark grammar:

    * ``"earley"``: the scannerless Earley engine (``scannerless.py``): the language of the CFG
      with each terminal expanded to its regular language, ``%ignore`` anywhere between terminals,
      which is what Lark's Earley parser accepts (``lexer="dynamic_complete"``); any context-free
      grammar. Vocabulary tables are built lazily per terminal-DFA state, so the first mask of a
      new grammar costs milliseconds. Always used for ``Gbnf`` grammars.
    * ``"lalr"``: the LALR(1) + contextual-lexer engine (``cfg.py``): the language of Lark's LALR
      parser with greedy lexing, which can be smaller (a lexer-based language); refuses grammars
      with LALR conflicts or colliding terminals; the tables can be precomputed and disk-cached.
    * ``"auto"`` (default): ``"earley"``. A ``JsonSchema``'s grammar is read by a plain-BNF reader
      (``grammar_ir.load_bnf``, not Lark's grammar parser) and its terminal priorities apply as
      the contextual lexer applies them (declared keys outrank the "other keys" regex where both
      are expected: ``GrammarIR.lexical_priority``), so both engines give the schema's language.

    ``precompute`` (LALR engine only, ``ValueError`` otherwise; default False): walk the vocabulary from every lexer state
    now and cache the tables on disk, so no mask pays a table build during decoding (one build is
    ~3-15 ms on a 262k vocabulary) at the cost of seconds before the first mask. ``progress``
    shows a tqdm bar while precomputing (default: when stderr is a terminal).

    ``mask_work`` / ``advance_work`` (Earley engine): the work one mask / one advance may take
    before it raises ``GrammarBudgetError`` instead of stalling its caller (default
    ``work_bound.MASK_WORK`` / ``ADVANCE_WORK``, 50,000 units: ~20-100 ms on a 2-core VM; the
    environment variables ``TRELLIS_MASK_WORK`` / ``TRELLIS_ADVANCE_WORK`` set them process-wide;
    ``earley.UNBOUNDED``: no bound). The build of a terminal's automaton is bounded too
    (``TRELLIS_COMPILE_WORK``): a refusal names the terminal.
    """
    if engine not in ENGINES:
        raise UsageError(f"engine must be one of {ENGINES}, got {engine!r}")
    if isinstance(grammar, Regex):
        return grammar.compile(vocab)
    from trellis.constrain.frontends.gbnf import Gbnf

    ignored: tuple = ()
    path: str | None = None
    if isinstance(grammar, Gbnf):
        text, source, engine = grammar.to_lark(fuse=True), grammar.source, "earley"
    elif isinstance(grammar, JsonSchema):
        engine = "earley" if engine == "auto" else engine
        # the Earley engine takes the shared-source form (not LALR(1), linear in an object's
        # optional properties: JsonSchema.to_lark); the LALR engine the plain one
        text = grammar.to_lark(engine)
        source, ignored = "<json schema>", grammar.ignored_keywords
    elif isinstance(grammar, SchemaGrammar):
        text, source = str(grammar), "<json schema>"
        engine = "earley" if engine == "auto" else engine
    else:
        text, source = load_grammar_text(grammar)
        if source.endswith(".gbnf"):
            text, engine = Gbnf(text, source=source).to_lark(fuse=True), "earley"
        elif source != "<grammar>" and Path(source).is_file():
            path = source
        engine = "earley" if engine == "auto" else engine
    if precompute and engine != "lalr":
        raise UsageError("precompute=True applies to engine='lalr' only: the Earley engine builds its "
                         "vocabulary walks on first use and shares them across grammars and runs")
    precompute = bool(precompute)
    if engine == "lalr" and RESERVED in text:
        raise GrammarError(f"reserved terminal names ({RESERVED}...: token elements, lazy and max_chars terminals, "
                           "terminal_kinds.py) are read by engine='earley' only: the lalr engine would take them "
                           "for plain terminals", source=source)
    # One constraint per (grammar, vocabulary) per process: its tables and mask cache are the
    # expensive part, and states are immutable values, so callers can share it.
    key = (text, source, start, vocab.fingerprint(), precompute, engine, mask_work, advance_work) + (
        (ignored,) if ignored else ())
    hit = COMPILED.get(key)
    if hit is not None:
        COMPILED.move_to_end(key)
        return hit
    if engine == "earley":
        with paused():  # an allocation burst (terminal DFAs, rules, the engine's tables): gc_pause.py
            ir = None
            schema = isinstance(grammar, (JsonSchema, SchemaGrammar))
            if schema:  # plain BNF: skip Lark's grammar parser
                ir = load_bnf(text, source=source, start=start, lexical_priority=True)
            if ir is None:
                ir = load_lark(text, source=source, start=start, path=path)
                ir.lexical_priority = schema
            c = EarleyConstraint(ir, vocab, share=cache, mask_work=mask_work, advance_work=advance_work)
    else:
        c = _compile_new(text, source, vocab, start=start, cache=cache, precompute=precompute, progress=progress)
    if isinstance(grammar, JsonSchema):
        c.ignored_keywords = ignored  # type: ignore[union-attr]
    COMPILED[key] = c
    while len(COMPILED) > _COMPILED_MAX:
        COMPILED.popitem(last=False)
    return c


COMPILED: "OrderedDict[tuple[str, str, str, str, bool], CFGConstraint]" = OrderedDict()
_COMPILED_MAX = 8  # each holds vocabulary tables (tens of MB on a 262k vocabulary)


def _compile_new(text: str, source: str, vocab: Vocabulary, *, start: str, cache: bool, precompute: bool,
                 progress: bool | None) -> CFGConstraint:
    g = compile_grammar(text, source=source, start=start, cache=cache, top_table=precompute)
    if not precompute:
        return CFGConstraint(g, vocab)
    d = grammar_cache_dir() if cache else None
    # Keyed by the global lexer table, not the text: the tables are a function of (gtrans, gfinal,
    # vocabulary) alone, while lark numbers LALR states differently from one process to the next
    # (set orders), so a grammar recompiled after its g-*.pkl was lost must not meet old tables.
    lex = hashlib.sha256(g.gtrans.tobytes() + g.gfinal.tobytes()).hexdigest()
    path = d / f"t-{cache_key(lex, vocab.fingerprint(), cache_version())}.pkl" if d else None
    tables = read_cache_file(path) if path is not None else None
    c = CFGConstraint(g, vocab, tables=tables if isinstance(tables, dict) else None)
    if not isinstance(tables, dict):
        precompute_tables(c, progress=progress)
        if path is not None:
            write_cache_later(path, dict(c.tables))
    return c


def precompute_tables(c: CFGConstraint, *, progress: bool | None = None) -> None:
    """Walk the vocabulary from every (global) lexer state of ``c``, then every crossing set's
    rests from the lexers that can follow (tqdm bar over the states when ``progress``)."""
    import sys

    keys = range(len(c.grammar.gfinal))
    if progress is None:
        progress = sys.stderr.isatty()
    it = keys
    if progress:
        from tqdm import tqdm

        it = tqdm(keys, desc=f"compiling {c.grammar.source}", unit="state")
    for g in it:
        c.walk(g)
    c.precompute_continuations()
