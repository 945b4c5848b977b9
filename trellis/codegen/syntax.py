"""Python syntax as a pruning predicate on program prefixes, and where a generated function ends.

Why not a token mask (a ``Constraint``): a mask must classify every one of the vocabulary's tokens
(262k for Gemma 3) at every step, and Python is not a grammar the LALR masks here handle well
(indentation, f-strings, soft keywords). Search only needs to stop investing in a prefix that can
never become valid, and that is decidable cheaply at a few points:

- *complete lines* (the text up to the last newline): CPython's own parser, in the mode the REPL
  uses to tell "incomplete" from "invalid" (``PyCF_ALLOW_INCOMPLETE_INPUT``, as ``codeop`` does),
  parse-only (``PyCF_ONLY_AST``) so that symbol-table errors which later text could still fix (a
  ``nonlocal`` whose binding comes later) are not called fatal;
- the *indentation* of the current line, once it has a non-blank character: probe it with ``pass``;
- an *unmatched closing bracket* in the current line (``tokenize``, stopping at an open string).

Everything else about the current, unfinished line is left alone: more characters can still fix
it. ``check_prefix`` is called once per line boundary by ``trellis.codegen.code_lm`` (results are
cached by text), not once per vocabulary token.
"""

from __future__ import annotations

import ast
import codeop
import functools
import io
import tokenize
import warnings
from dataclasses import dataclass
from typing import Literal

__all__ = ["FunctionScan", "LinePosition", "PrefixCheck", "check_prefix", "extract_program", "function_end",
           "scan_function"]

_INCOMPLETE = getattr(codeop, "PyCF_ALLOW_INCOMPLETE_INPUT", 0)  # Python >= 3.11
_FLAGS = ast.PyCF_ONLY_AST | codeop.PyCF_DONT_IMPLY_DEDENT | _INCOMPLETE
_PAIRS = {")": "(", "]": "[", "}": "{"}


@dataclass(frozen=True)
class PrefixCheck:
    """``viable``: some continuation can still make the text a valid module. When not, ``reason`` is
    the syntax error and ``line`` its 1-based line."""

    viable: bool
    reason: str = ""
    line: int | None = None


_OK = PrefixCheck(True)


def _parse(source: str, flags: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile(source, "<prefix>", "exec", flags, dont_inherit=True)


def _dead(e: Exception) -> PrefixCheck:
    if isinstance(e, SyntaxError):
        return PrefixCheck(False, f"{type(e).__name__}: {e.msg}", e.lineno)
    return PrefixCheck(False, f"{type(e).__name__}: {e}")


@functools.lru_cache(maxsize=4096)
def _check_lines(lines: str) -> PrefixCheck:
    """Complete lines: can more lines make them valid?"""
    if not lines.strip() or lines.rstrip("\n").endswith("\\"):
        return _OK  # nothing yet, or a backslash continuation that the next line completes
    if not _INCOMPLETE:  # Python 3.10: codeop's own heuristic (it also runs the symbol table)
        try:
            codeop.compile_command(lines, "<prefix>", "exec")
        except (SyntaxError, ValueError, OverflowError) as e:
            return _dead(e)
        return _OK
    try:
        _parse(lines, _FLAGS)
        return _OK
    except SyntaxError:
        pass
    except (ValueError, OverflowError, MemoryError, RecursionError) as e:
        return _dead(e)
    try:  # codeop's recipe: an error that one more newline removes, or "incomplete input", is not fatal
        _parse(lines + "\n", _FLAGS)
        return _OK
    except SyntaxError as e:
        if "incomplete input" in str(e) or "unexpected EOF" in str(e):
            return _OK
    except (ValueError, OverflowError, MemoryError, RecursionError) as e:
        return _dead(e)
    try:
        _parse(lines, _FLAGS & ~_INCOMPLETE)  # for the real message
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
        return _dead(e)
    return _OK


@functools.lru_cache(maxsize=4096)
def _check_indent(lines: str, indent: str) -> PrefixCheck:
    """Can a statement indented by ``indent`` follow ``lines``? (A comment or a line inside brackets
    or a string is not a statement: only an ``IndentationError`` of the probe counts.)"""
    if not _INCOMPLETE:
        return _OK
    try:
        _parse(lines + indent + "pass\n", _FLAGS)
    except IndentationError as e:
        return _dead(e)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError):
        pass
    return _OK


def _check_brackets(source: str) -> PrefixCheck:
    """A closing bracket with no matching opener (outside strings and comments) is fatal."""
    stack: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.ERRORTOKEN:
                break  # e.g. the quote of a string still open on this line: the rest is unknown
            if tok.type == tokenize.OP:
                if tok.string in "([{":
                    stack.append(tok.string)
                elif tok.string in _PAIRS:
                    if not stack or stack.pop() != _PAIRS[tok.string]:
                        return PrefixCheck(False, f"SyntaxError: unmatched {tok.string!r}", tok.start[0])
    except (tokenize.TokenError, SyntaxError):
        pass  # end of input inside a string or bracket, or an indentation error: judged elsewhere
    return _OK


def check_prefix(source: str) -> PrefixCheck:
    """Whether ``source`` — a program cut anywhere, possibly mid-line — can still be completed into a
    valid Python module. Never says "dead" for a viable prefix (up to the parser's own verdict on
    complete lines); may say "viable" for some dead ones (it does not judge unfinished lines beyond
    indentation and closing brackets)."""
    head, nl, partial = source.rpartition("\n")
    lines = head + nl
    verdict = _check_lines(lines)
    if not verdict.viable:
        return verdict
    body = partial.lstrip(" \t")
    if body and not body.startswith("#") and not lines.rstrip("\n").endswith("\\"):
        verdict = _check_indent(lines, partial[: len(partial) - len(body)])
        if not verdict.viable:
            return verdict
        if any(c in body for c in ")]}"):
            return _check_brackets(source)
    return _OK


LinePosition = Literal["line_start", "line_end", "inside"]


@dataclass(frozen=True)
class FunctionScan:
    """One tokenizer pass over prompt + completion. ``end``: see ``function_end``. ``position``: what
    a newline or a column-0 character appended to the text would be —

    - ``"line_start"``: the text ends with a newline that closed a logical line (blank or comment
      lines may follow it): a non-blank character written next sits at column 0 of a new logical
      line, which ends the function;
    - ``"line_end"``: the text ends inside a logical line but outside brackets, strings and
      backslash continuations: a newline written next closes that line;
    - ``"inside"``: the text ends inside brackets, a (multi-line) string or a continuation, or does
      not tokenize: a newline written next does not close a logical line.
    """

    end: int | None
    position: LinePosition


def scan_function(prompt: str, completion: str) -> FunctionScan:
    """``function_end`` plus the position the text ends at (see ``FunctionScan``), in one pass."""
    text = prompt + completion
    starts = [0]
    for line in io.StringIO(text):
        starts.append(starts[-1] + len(line))
    at_line_start = True
    skip = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.ENDMARKER:
                break
            if tok.type == tokenize.NEWLINE:
                at_line_start = True
                continue
            if tok.type in skip:
                continue
            if at_line_start:
                row, col = tok.start
                offset = starts[row - 1] + col
                if col == 0 and offset >= len(prompt):
                    return FunctionScan(offset - len(prompt), "line_start")
            at_line_start = False
    except (tokenize.TokenError, SyntaxError):
        # input ends inside a string or bracket or after a backslash, or bad indentation: no
        # column-0 line before it, and a newline there would not close a logical line
        return FunctionScan(None, "inside")
    # tokenize closes an unterminated last line itself (an empty NEWLINE token): only a text that
    # ends with a line break is at the start of the next logical line
    return FunctionScan(None, "line_start" if text.endswith(("\n", "\r")) else "line_end")


def function_end(prompt: str, completion: str) -> int | None:
    """Where in ``completion`` the function that ``prompt`` starts has ended: the offset of the first
    logical line at column 0 after the prompt (a new ``def``, ``if __name__``, a stray fence ...,
    not a comment and not a line inside brackets or a string), or ``None`` if there is none yet."""
    return scan_function(prompt, completion).end


def extract_program(prompt: str, completion: str) -> str:
    """``prompt`` + ``completion`` cut where the function ends (see ``function_end``), trailing blank
    lines dropped and one newline at the end."""
    end = function_end(prompt, completion)
    body = completion if end is None else completion[:end]
    return (prompt + body).rstrip() + "\n"
