"""Grammars as people write them: a non-LALR Lark grammar, a keyword/identifier collision, a
llama.cpp GBNF grammar, a GBNF grammar with a control token and a lazy rule (xgrammar's EBNF, as
vLLM users send it), and Lark's own grammar of grammars, each constraining Gemma 3 270M (CPU,
offline).

    python examples/any_grammar.py

The LALR engine refuses the first two ("Shift/Reduce conflict for terminal WS", "Collision between
Terminals AGG and IDENT"); the default scannerless Earley engine compiles them as written, and the
first mask of each new grammar comes in milliseconds (vocabulary walks are built on first use).
Lark's ``lark.lark`` (shipped inside the lark package) has a terminal whose lookahead looks at the
character after it (``OP: /[+*]|[?](?![a-z])/``) and a lazy one (``REGEXP``); both mean what they
mean in Lark, so the model writes a Lark rule under Lark's own grammar.
"""

from __future__ import annotations

import os
import time

import lark

from trellis import generate, load
from trellis.constrain import Gbnf, GrammarError, compile

ARITH = r"""
start: expr
expr: term (WS? ADDOP WS? term)*
term: factor (WS? MULOP WS? factor)*
factor: NUMBER | "(" WS? expr WS? ")"
ADDOP: "+" | "-"
MULOP: "*" | "/"
WS: / +/
NUMBER: /[0-9]+/
"""

SQL = r"""
start: "SELECT " item (", " item)* " FROM " IDENT
item: AGG "(" IDENT ")" | IDENT
AGG: "COUNT" | "SUM" | "AVG"
IDENT: /[A-Za-z_][A-Za-z0-9_]*/
"""

# llama.cpp's GBNF dialect, unchanged (`root`, `::=`, character classes, repetition bounds).
DATE = Gbnf(r"""
root   ::= year "-" month "-" day
year   ::= [12] [0-9]{3}
month  ::= "0" [1-9] | "1" [0-2]
day    ::= "0" [1-9] | [12] [0-9] | "3" [01]
""", source="date.gbnf")


# A token element names a token by id, not text: Gemma's control token <start_of_turn> (id 105,
# no text) must follow the answer. The answer rule is lazy: it ends at its first ".", however the
# model would go on. (Gemma's <end_of_turn>, 106, is an end-of-sequence id: naming it is refused,
# the grammar's own end allows EOS.)
TURN = Gbnf(r"""
root ::= answer <[105]> "user"
answer[lazy] ::= [A-Za-z0-9 ,]+ "."
""", source="turn.gbnf")


def main() -> None:
    model = load()
    t0 = time.perf_counter()  # the token matrix and token trie: once per vocabulary and process
    c = compile('start: "a"', model.vocab)
    c.mask_array(c.start())
    print(f"per-vocabulary setup (once per process): {(time.perf_counter() - t0) * 1e3:.0f} ms")
    for grammar, engine in ((ARITH, "lalr"), (SQL, "lalr")):
        try:
            compile(grammar, model.vocab, engine=engine)
        except GrammarError as e:
            print(f"engine={engine} refuses it: {str(e).splitlines()[0][:100]}")
    # lark.lark is ambiguous at nearly every byte (a STRING or REGEXP may end at many places), so
    # some of its masks need more work than the default bound, which keeps one grammar from
    # stalling a server (issue 58: such a mask raises GrammarBudgetError). Offline, with one user,
    # this example raises the bound for that grammar.
    for name, grammar, prompt, bound in (
            ("arithmetic", ARITH, "Twelve plus seven times three, as a formula:", {}),
            ("sql", SQL, "The query that sums the price column of the orders table:\n", {}),
            ("gbnf date", DATE, "The first moon landing happened on (YYYY-MM-DD)", {}),
            ("gbnf turn", TURN, "Q: What colour is the sky?\nA:", {}),
            ("lark.lark", os.path.join(os.path.dirname(lark.__file__), "grammars", "lark.lark"),
             "A Lark grammar for a list of numbers:\nstart: \"[\" [NUMBER (\",\" NUMBER)*] \"]\"\n"
             "A Lark grammar for a greeting:\n", {"mask_work": 2_000_000, "advance_work": 2_000_000})):
        t0 = time.perf_counter()
        c = compile(grammar, model.vocab, **bound)
        c.mask_array(c.start())
        first = time.perf_counter() - t0
        res = generate(model, prompt, grammar=c, max_new_tokens=24, finish_in_budget=False)
        marks = f", <start_of_turn> at token {res.tokens.index(105)}" if 105 in res.tokens else ""
        print(f"{name:<11} first mask after {first * 1e3:5.0f} ms -> {res.text!r} (finished={res.finished}{marks})")


if __name__ == "__main__":
    main()
