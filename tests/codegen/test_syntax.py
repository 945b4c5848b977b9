"""Syntax pruning of program prefixes: completable prefixes are never called dead; definitely dead
ones are caught at the line (or, for indentation and closing brackets, the character) where they die;
and the end of a generated function is found outside strings and brackets."""

from __future__ import annotations

import pytest

from trellis.codegen.syntax import check_prefix, extract_program, function_end, scan_function

HEAD = 'def f(x):\n    """doc"""\n'

VIABLE = {
    "open block": "def f(x):\n    y = 1\n",
    "open paren": "def f(x):\n    y = (1 +\n",
    "open triple-quoted string": "def f(x):\n    s = '''abc\n",
    "if header": "def f(x):\n    if x:\n",
    "dict across lines": "d = {\n  'a': 1,\n",
    "try without except yet": "try:\n    x = 1\n",
    "decorator": "@dec\n",
    "backslash continuation": "x = 1 + \\\n",
    "nonlocal bound later (symbol table, not parser)": "def g():\n    def h():\n        nonlocal q\n",
    "mid-line operator": "def f(x):\n    return x +",
    "closing bracket inside an open string": "def f(x):\n    return ')",
    "balanced brackets mid-line": "def f(x):\n    return g(x)",
    "comment at any indentation": "def f(x):\n    if x:\n# note",
    "next line inside brackets": "def f(x):\n    y = (1,\n2",
    "bracket inside triple-quoted string": "def f(x):\n    y = '''\nabc)",
    "f-string still open": "def f(x):\n    return f'{x})",
    "empty": "",
    "prompt only": HEAD,
    "new top-level def": HEAD + "    return x\n\ndef",
}

DEAD = {
    "dangling operator at end of line": ("def f(x):\n    return x +\n", "invalid syntax"),
    "else without if": ("def f(x):\n    else:\n", "invalid syntax"),
    "unmatched paren, whole line": ("def f(x):\n    return x)\n", "unmatched"),
    "unmatched paren, mid-line": ("def f(x):\n    return x)", "unmatched"),
    "unterminated string at end of line": ("def f(x):\n    s = 'abc\n", "unterminated"),
    "unexpected indent": ("def f(x):\n    y = 1\n      z = 2\n", "unexpected indent"),
    "unexpected indent, mid-line": ("def f(x):\n    y = 1\n      z", "unexpected indent"),
    "dedent to no level": ("def f(x):\n    if x:\n        y = 1\n  z", "unindent"),
    "missing block": ("def f(x):\n    if x:\n    y", "expected an indented block"),
    "for without colon": ("def f(x):\n    for i in x\n", "expected ':'"),
    "assign to literal": ("def f(x):\n    1 = x\n", "literal"),
    "try then dedent": ("try:\n    x = 1\ny = 2\n", "except"),
    "markdown fence inside the body": (HEAD + "    ```\n", "invalid"),
}


@pytest.mark.parametrize("name", sorted(VIABLE))
def test_completable_prefixes_are_viable(name):
    assert check_prefix(VIABLE[name]).viable, check_prefix(VIABLE[name])


@pytest.mark.parametrize("name", sorted(DEAD))
def test_dead_prefixes_are_caught(name):
    source, words = DEAD[name]
    check = check_prefix(source)
    assert not check.viable and words in check.reason, check
    assert check.line is not None


def test_every_prefix_of_a_valid_program_is_viable():
    program = (HEAD + "    total = 0\n    for i, v in enumerate([x, (x + 1) * 2, {'k': [1, 2]}]):\n"
               "        if i % 2 == 0 and v != ')':\n            total += len(str(v))  # ) comment\n"
               "        else:\n            total -= 1\n    s = '''a)\nb'''\n    return total, s, f'{x!r:>3}'\n")
    compile(program, "<p>", "exec")
    for i in range(len(program) + 1):
        assert check_prefix(program[:i]).viable, (i, program[:i])


def test_function_end_and_extraction():
    assert function_end(HEAD, "    return x\n\n\ndef g():\n") == len("    return x\n\n\n")
    assert function_end(HEAD, "    return x\nif __name__ == '__main__':\n    f(1)\n") == len("    return x\n")
    assert function_end(HEAD, "    return x\n```\n") == len("    return x\n")
    # a column-0 line inside a string or brackets, and a comment, do not end it
    body = "    s = '''\nabc\n'''\n    t = (1 +\n2)\n# note\n    return s\n"
    assert function_end(HEAD, body) is None
    assert function_end(HEAD, body + "print(f(1))") == len(body)
    assert function_end(HEAD, "    return x") is None
    assert extract_program(HEAD, body + "print(f(1))\nprint(2)\n") == HEAD + body
    assert extract_program(HEAD, "    return x\n\n\n") == HEAD + "    return x\n"
    # a prompt that ends mid-line: the completion continues that line
    assert function_end("def f(x):\n    return ", "x\n") is None


def test_scan_function_says_what_a_newline_or_column_0_text_would_do():
    """The position ``solve`` folds end-of-function tokens at: after a closed logical line, inside
    one (outside brackets and strings), or where a newline does not close a line."""
    at = {c: scan_function(HEAD, c).position for c in (
        "", "    return x", "    return x\n", "    return x\n\n", "    return x  # c", "    return (x",
        "    return (x\n", '    s = """a\n', "    return x + \\\n")}
    assert at == {"": "line_start", "    return x": "line_end", "    return x\n": "line_start",
                  "    return x\n\n": "line_start", "    return x  # c": "line_end", "    return (x": "inside",
                  "    return (x\n": "inside", '    s = """a\n': "inside", "    return x + \\\n": "inside"}
    assert scan_function(HEAD, "    return x\ndef g").end == len("    return x\n")
