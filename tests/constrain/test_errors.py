"""Bad grammars raise GrammarError naming file:line:col with a caret excerpt; no lark traceback."""

from __future__ import annotations

import pytest

from trellis.constrain import GrammarError, compile_lark
from trellis.constrain.compile import load_grammar_text

CASES = {
    "syntax": ('start: "a"\n  : b\n', 2, "Expecting"),
    "unclosed_string": ('start: "a\n', 1, "Unexpected"),
    "undefined_rule": ("start: foo\n", 1, "foo"),
    "undefined_terminal": ('start: A B\nA: "a"\n', 1, "B"),
    "backreference": ("start: A\nA: /(a)\\1/\n", 2, "backreference"),
    "lookahead": ("start: A\nA: /a(?=b)/\n", 2, "lookahead"),
    "lookbehind": ("start: A\nA: /(?<=b)a/\n", 2, "lookbehind"),
    "reduce_reduce": ('start: a | b\na: "x"\nb: "x"\n', (2, 3), "Reduce/Reduce"),  # either rule
    "shift_reduce": ('start: e\ne: e "+" e | "1"\n', 2, "Shift/Reduce"),
    "collision": ("start: A | B\nA: /a+/\nB: /a*b?a/\n", (2, 3), "Collision"),  # either terminal
    "zero_width": ("start: A\nA: /a*/\n", 2, "zero-width"),
    "empty_language": ("start: A B\nA: /[a-z]+/\nB: /[a-z]/\n", 1, "empty"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_grammar_errors(case: str) -> None:
    text, line, word = CASES[case]
    with pytest.raises(GrammarError) as ei:
        compile_lark(text, source="bad.lark")
    e = ei.value
    msg = str(e)
    assert word in msg, msg
    lines = line if isinstance(line, tuple) else (line,)
    assert e.line in lines, msg
    assert msg.startswith(f"bad.lark:{e.line}:"), msg
    assert "^" in msg and "Traceback" not in msg
    assert e.__cause__ is None and (e.__context__ is None or e.__suppress_context__)


def test_missing_grammar_file() -> None:
    with pytest.raises(GrammarError, match="no such grammar"):
        load_grammar_text("nope.lark")


def test_shipped_name_path_and_text(tmp_path) -> None:
    t1, s1 = load_grammar_text("json.lark")
    t2, _ = load_grammar_text("json")
    p = tmp_path / "g.lark"
    p.write_text('start: "x"\n')
    t3, s3 = load_grammar_text(str(p))
    t4, s4 = load_grammar_text('start: "x"\n')
    assert t1 == t2 and s1 == "json.lark" and t3 == t4 and s3 == str(p) and s4 == "<grammar>"
