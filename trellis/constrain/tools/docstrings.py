"""Docstrings -> descriptions: ``parse_docstring`` reads a tool's description and its parameters'
descriptions from a Google (``Args:``), NumPy (``Parameters`` + dashes) or reST (``:param x:``) docstring."""

from __future__ import annotations

import inspect
import re

# ----------------------------------------------------------------------------- docstrings

_PARAM_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
                   "other parameters", "attributes"}
_SECTIONS = _PARAM_SECTIONS | {"returns", "return", "yields", "yield", "raises", "examples", "example", "note",
                               "notes", "warning", "warnings", "see also", "references", "todo", "methods"}
_REST_FIELD = re.compile(r"^:(param|parameter|arg|argument|key|keyword)\s+(?:[^:]*?\s)?\*{0,2}(\w+)\s*:\s*(.*)$")
_GOOGLE_ITEM = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ITEM = re.compile(r"^\*{0,2}(\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::.*)?$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_underline(line: str) -> bool:
    s = line.strip()
    return len(s) >= 3 and set(s) == {"-"}


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) of a Google, NumPy or reST docstring.

    The description is the text before the first section or field, one line per paragraph.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    params: dict[str, str] = {}
    summary: list[str] = []
    in_summary = True
    i = 0
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        low = stripped.rstrip(":").strip().lower()
        if i + 1 < len(lines) and _is_underline(lines[i + 1]) and low in _SECTIONS:  # NumPy header
            in_summary = False
            i = _numpy_section(lines, i + 2, params if low in _PARAM_SECTIONS else {})
            continue
        if stripped.endswith(":") and low in _SECTIONS:  # Google header
            in_summary = False
            i = _google_section(lines, i + 1, _indent(line), params if low in _PARAM_SECTIONS else {})
            continue
        if stripped.startswith(":") and re.match(r"^:\w", stripped):  # reST field list
            in_summary = False
            m = _REST_FIELD.match(stripped)
            j = i + 1
            text = [m.group(3)] if m else []
            while j < len(lines) and lines[j].strip() and _indent(lines[j]) > _indent(line):
                text.append(lines[j].strip())
                j += 1
            if m:
                params[m.group(2)] = " ".join(t for t in text if t)
            i = j
            continue
        if in_summary:
            summary.append(stripped)
        i += 1
    paragraphs = [" ".join(p.split()) for p in "\n".join(summary).split("\n\n")]
    return "\n".join(p for p in paragraphs if p), params


def _google_section(lines: list[str], i: int, header_indent: int, out: dict[str, str]) -> int:
    item_indent: int | None = None
    name: str | None = None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        ind = _indent(line)
        if ind <= header_indent:
            break
        if item_indent is None:
            item_indent = ind
        m = _GOOGLE_ITEM.match(line.strip()) if ind == item_indent else None
        if m:
            name = m.group(1)
            out[name] = m.group(2).strip()
        elif name is not None:
            out[name] = (out[name] + " " + line.strip()).strip()
        i += 1
    return i


def _numpy_section(lines: list[str], i: int, out: dict[str, str]) -> int:
    base: int | None = None
    names: list[str] = []
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and _is_underline(lines[i + 1]) and line.strip():
            break  # the next section's header
        if not line.strip():
            i += 1
            continue
        ind = _indent(line)
        if base is None:
            base = ind
        m = _NUMPY_ITEM.match(line.strip()) if ind <= base else None
        if m:
            names = [n.strip().lstrip("*") for n in m.group(1).split(",")]
            for n in names:
                out[n] = ""
        elif names:
            for n in names:
                out[n] = (out[n] + " " + line.strip()).strip()
        i += 1
    return i

