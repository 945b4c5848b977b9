#!/usr/bin/env python3
"""Build a corpus of EBNF grammars from xgrammar's own Python test-suite.

Usage:
    python extract.py SNAPSHOT_GIT_DIR [--out DIR] [--files test_a.py ...] [--timeout SEC]

SNAPSHOT_GIT_DIR is a (bare) git directory of https://github.com/mlc-ai/xgrammar,
e.g. /work/.mirror/mlc-ai+xgrammar/repo.  The script reads HEAD of that snapshot.

Two complementary passes are run over tests/python/test_*.py:

1. Dynamic pass (the source of truth for "test input").  Every selected test file is
   run under pytest (xgrammar = the installed package) with a small plugin that wraps
   the public EBNF entry points

       xgr.Grammar.from_ebnf(text, root_rule_name=...)
       xgrammar.testing._ebnf_to_grammar_no_normalization(text, root_rule_name)
       xgr.GrammarCompiler.compile_grammar(<str>, root_rule_name=...)
       xgrammar.testing._is_grammar_accept_string(<str>, input)
       xgrammar.testing._get_matcher_from_grammar(<str>)
       xgrammar.testing._get_matcher_from_grammar_and_tokenizer_info(<str>, ...)

   and records every call whose *direct caller* is a test file (calls made inside
   xgrammar itself are ignored), together with the root rule name, the pytest node id,
   whether the call happened lexically inside a ``pytest.raises`` block (and its
   ``match=``), and whether xgrammar raised.  Calls of
   ``_is_grammar_accept_string(grammar, input)`` on a recorded grammar are recorded as
   test strings; the value the test expects is read from the enclosing ``assert``
   (``assert f(..)`` -> True, ``assert not f(..)`` -> False, ``assert f(..) == X`` -> the
   value of X evaluated in the caller's frame, if X contains no call); otherwise
   ``expected`` is null.

2. Static pass.  Every string constant containing "::=" in the test files is collected
   with ``ast``.  A recorded grammar whose text equals such a literal gets
   ``origin = "literal"`` (else ``"computed"``: f-strings, converter output, printed
   grammars).  Literals never passed to an EBNF entry point at run time are added with
   ``role = "expected_output"`` when they are the expected side of a comparison
   (variable / parameter named ``expected*`` / ``after`` etc.) or
   ``role = "unexecuted_literal"`` otherwise (e.g. tests skipped because they need
   a HuggingFace tokenizer).

Finally every grammar is parsed with the installed xgrammar,
``xgr.Grammar.from_ebnf(text, root_rule_name=root)`` (plus
``_ebnf_to_grammar_no_normalization``), and the result is written to
``grammars.json``.
"""

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import OrderedDict

MARKERS = (
    "::=",
    "from_ebnf",
    "_ebnf_to_grammar_no_normalization",
    "compile_grammar",
    "_is_grammar_accept_string",
    "_get_matcher_from_grammar",
)

# --------------------------------------------------------------------------------------
# pytest plugin (written to a temp dir and loaded with ``-p _xg_recorder``)
# --------------------------------------------------------------------------------------
PLUGIN_SRC = r'''
import ast, json, os, sys
import pytest

_OUT = open(os.environ["XG_RECORD_OUT"], "a", encoding="utf-8")
_TEST_DIR = os.path.realpath(os.environ["XG_TEST_DIR"]) + os.sep
_state = {"nodeid": "<collect>", "raises": []}
_keys = {}      # id(grammar object) -> key
_keep = []      # keep recorded objects alive so ids are not reused
_counter = [0]
_ast_cache = {}


def _emit(rec):
    try:
        s = json.dumps(rec, ensure_ascii=True)
    except Exception as e:  # pragma: no cover
        s = json.dumps({"kind": "emit_error", "error": repr(e)})
    _OUT.write(s + "\n")
    _OUT.flush()


def _test_caller(depth=2):
    f = sys._getframe(depth)
    fn = os.path.realpath(f.f_code.co_filename)
    if fn.startswith(_TEST_DIR):
        return f, fn
    return None, None


def _enc(s):
    if isinstance(s, bytes):
        try:
            return {"utf8": s.decode("utf-8")}
        except UnicodeDecodeError:
            return {"hex": s.hex()}
    return s


def _record_ebnf(entry, text, root, frame, fn):
    _counter[0] += 1
    key = _counter[0]
    rec = {
        "kind": "ebnf", "key": key, "entry": entry, "text": text, "root_rule_name": root,
        "file": os.path.basename(fn), "line": frame.f_lineno, "nodeid": _state["nodeid"],
        "in_raises": bool(_state["raises"]),
        "raises_match": (_state["raises"][-1] if _state["raises"] else None),
    }
    return key, rec


def _call_recorded(entry, orig, text, root, args, kwargs, depth=3):
    frame, fn = _test_caller(depth)
    if frame is None or not isinstance(text, str):
        return orig(*args, **kwargs), None
    key, rec = _record_ebnf(entry, text, root, frame, fn)
    try:
        res = orig(*args, **kwargs)
    except BaseException as e:
        rec["ok"] = False
        rec["error"] = "%s: %s" % (type(e).__name__, e)
        _emit(rec)
        raise
    rec["ok"] = True
    rec["error"] = None
    _emit(rec)
    return res, key


def _remember(obj, key):
    if key is not None and obj is not None:
        _keys[id(obj)] = key
        _keep.append(obj)


# ---------------------------------------------------------------- expected value
def _parse(fn):
    if fn not in _ast_cache:
        with open(fn, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        parents = {}
        for node in ast.walk(tree):
            for ch in ast.iter_child_nodes(node):
                parents[ch] = node
        _ast_cache[fn] = (tree, parents)
    return _ast_cache[fn]


def _call_name(call):
    f = call.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return None


def _expected_from_assert(frame, fn):
    """Return (expected, how) for an _is_grammar_accept_string call site."""
    try:
        tree, parents = _parse(fn)
        import inspect
        pos = inspect.getframeinfo(frame).positions
        cands = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node) == "_is_grammar_accept_string":
                if pos is not None and pos.lineno is not None and pos.col_offset is not None:
                    if (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset) == (
                        pos.lineno, pos.col_offset, pos.end_lineno, pos.end_col_offset):
                        cands = [node]
                        break
                if node.lineno <= frame.f_lineno <= node.end_lineno:
                    cands.append(node)
        if len(cands) != 1:
            return None, "ambiguous"
        call = cands[0]
        p = parents.get(call)
        if isinstance(p, ast.Assert) and p.test is call:
            return True, "assert f()"
        if isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.Not):
            pp = parents.get(p)
            if isinstance(pp, ast.Assert) and pp.test is p:
                return False, "assert not f()"
        if isinstance(p, ast.Compare) and len(p.ops) == 1 and isinstance(parents.get(p), ast.Assert):
            other = p.comparators[0] if p.left is call else p.left
            # evaluate the other side in the caller's frame unless it contains a call
            if not any(isinstance(n, ast.Call) for n in ast.walk(other)):
                val = eval(compile(ast.Expression(other), fn, "eval"), frame.f_globals, frame.f_locals)
                if isinstance(val, bool):
                    op = p.ops[0]
                    if isinstance(op, (ast.Eq, ast.Is)):
                        return val, "assert f() == X"
                    if isinstance(op, (ast.NotEq, ast.IsNot)):
                        return (not val), "assert f() != X"
        return None, "not-asserted-directly"
    except Exception as e:  # pragma: no cover
        return None, "error: %r" % (e,)


# ---------------------------------------------------------------- patches
def _install():
    import xgrammar as xgr
    import xgrammar.testing as xt

    orig_from_ebnf = xgr.Grammar.from_ebnf

    def from_ebnf(ebnf_string, *args, **kwargs):
        root = kwargs.get("root_rule_name", args[0] if args else "root")
        res, key = _call_recorded("Grammar.from_ebnf", orig_from_ebnf, ebnf_string, root,
                                  (ebnf_string,) + args, kwargs)
        _remember(res, key)
        return res

    xgr.Grammar.from_ebnf = staticmethod(from_ebnf)

    orig_nn = xt._ebnf_to_grammar_no_normalization

    def _ebnf_to_grammar_no_normalization(ebnf_string, *args, **kwargs):
        root = kwargs.get("root_rule_name", args[0] if args else "root")
        res, key = _call_recorded("testing._ebnf_to_grammar_no_normalization", orig_nn,
                                  ebnf_string, root, (ebnf_string,) + args, kwargs)
        _remember(res, key)
        return res

    xt._ebnf_to_grammar_no_normalization = _ebnf_to_grammar_no_normalization

    orig_compile = xgr.GrammarCompiler.compile_grammar

    def compile_grammar(self, grammar, *args, **kwargs):
        root = kwargs.get("root_rule_name", args[0] if args else "root")
        res, key = _call_recorded("GrammarCompiler.compile_grammar", orig_compile, grammar, root,
                                  (self, grammar) + args, kwargs)
        return res

    xgr.GrammarCompiler.compile_grammar = compile_grammar

    for name in ("_get_matcher_from_grammar", "_get_matcher_from_grammar_and_tokenizer_info"):
        orig = getattr(xt, name)

        def make(orig=orig, name=name):
            def wrapper(grammar, *args, **kwargs):
                res, key = _call_recorded("testing." + name, orig, grammar, "root",
                                          (grammar,) + args, kwargs)
                return res
            wrapper.__name__ = name
            return wrapper

        setattr(xt, name, make())

    orig_accept = xt._is_grammar_accept_string

    def _is_grammar_accept_string(grammar, input_str, *args, **kwargs):
        frame, fn = _test_caller(2)
        if frame is None:
            return orig_accept(grammar, input_str, *args, **kwargs)
        key = None
        if isinstance(grammar, str):
            res, key = _call_recorded("testing._is_grammar_accept_string", orig_accept, grammar,
                                      "root", (grammar, input_str) + args, kwargs)
        else:
            key = _keys.get(id(grammar))
            res = orig_accept(grammar, input_str, *args, **kwargs)
        if key is not None:
            expected, how = _expected_from_assert(frame, fn)
            _emit({"kind": "accept", "key": key, "input": _enc(input_str),
                   "require_termination": kwargs.get("require_termination", True),
                   "result": bool(res), "expected": expected, "expected_how": how,
                   "file": os.path.basename(fn), "line": frame.f_lineno,
                   "nodeid": _state["nodeid"]})
        return res

    xt._is_grammar_accept_string = _is_grammar_accept_string

    orig_raises = pytest.raises

    class _RaisesWrapper:
        def __init__(self, cm, match):
            self._cm = cm
            self._match = match

        def __enter__(self):
            _state["raises"].append(self._match)
            return self._cm.__enter__()

        def __exit__(self, *exc):
            _state["raises"].pop()
            return self._cm.__exit__(*exc)

        def __getattr__(self, item):
            return getattr(self._cm, item)

    def raises(*args, **kwargs):
        match = kwargs.get("match")
        if len(args) > 1:  # legacy callable form
            _state["raises"].append(match)
            try:
                return orig_raises(*args, **kwargs)
            finally:
                _state["raises"].pop()
        return _RaisesWrapper(orig_raises(*args, **kwargs), match)

    pytest.raises = raises


def pytest_configure(config):
    _install()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _state["nodeid"] = item.nodeid
    yield
    _state["nodeid"] = "<between-tests>"


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _emit({"kind": "outcome", "nodeid": report.nodeid, "when": report.when,
               "outcome": report.outcome})
'''


# --------------------------------------------------------------------------------------
# static pass
# --------------------------------------------------------------------------------------
EXPECTED_NAME_RE = re.compile(r"expect|after|output|result|printed|target", re.I)
ENTRY_CALLS = {
    "from_ebnf", "_ebnf_to_grammar_no_normalization", "compile_grammar",
    "_is_grammar_accept_string", "_get_matcher_from_grammar",
    "_get_matcher_from_grammar_and_tokenizer_info",
}


def _fname(call):
    f = call.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return None


def static_literals(path):
    """All str constants containing '::=' and where they flow to (statically, one step).

    For every literal we record
      bound_to   -- the variable / parametrize parameter / callee parameter it is bound to,
      uses       -- for a literal bound to a variable: how that variable is used in the same
                    scope ("compare", "call:<callee>", or the callee's parameter name when the
                    callee is a helper defined in the same file).
    """
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    parents = {}
    for node in ast.walk(tree):
        for ch in ast.iter_child_nodes(node):
            parents[ch] = node

    # helper functions defined in this file: name -> positional parameter names
    local_funcs = {}
    # module-level parametrize tables: table variable name -> parameter names
    param_tables = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local_funcs[node.name] = [a.arg for a in node.args.args]
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and _fname(dec) == "parametrize"
                        and len(dec.args) >= 2 and isinstance(dec.args[0], ast.Constant)
                        and isinstance(dec.args[0].value, str)
                        and isinstance(dec.args[1], ast.Name)):
                    param_tables[dec.args[1].id] = [
                        x.strip() for x in dec.args[0].value.split(",")]

    def callee_param(call, child):
        """Name under which `child` (an argument node of `call`) is received."""
        fname = _fname(call)
        if isinstance(child, ast.keyword):
            return child.arg
        if fname in local_funcs:
            for i, a in enumerate(call.args):
                if a is child:
                    params = local_funcs[fname]
                    if params and params[0] == "self":
                        params = params[1:]
                    if i < len(params):
                        return params[i]
        return "call:%s" % fname

    def scope_of(node):
        cur = node
        while cur in parents:
            cur = parents[cur]
            if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return cur
        return tree

    def binding(node):
        cur = node
        while cur in parents:
            p = parents[cur]
            if isinstance(p, ast.Assign):
                t = p.targets[0]
                if isinstance(t, ast.Name):
                    idx = _tuple_index(node, parents)
                    if t.id in param_tables and idx is not None:
                        names = param_tables[t.id]
                        if idx < len(names):
                            return names[idx], None, None
                    return t.id, idx, t.id
                return None, None, None
            if isinstance(p, ast.keyword):
                return p.arg, None, None
            if isinstance(p, ast.Dict) and cur in p.values:
                key = p.keys[p.values.index(cur)]
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    return "dict:%s" % key.value, None, None
            if isinstance(p, ast.Call):
                if _fname(p) == "parametrize" and len(p.args) >= 2:
                    names = p.args[0]
                    if isinstance(names, ast.Constant) and isinstance(names.value, str):
                        idx = _tuple_index(node, parents)
                        plist = [x.strip() for x in names.value.split(",")]
                        if idx is not None and idx < len(plist):
                            return plist[idx], None, None
                        return names.value, None, None
                    return None, None, None
                return callee_param(p, cur), None, None
            if isinstance(p, ast.Compare):
                return "compare", None, None
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
                return None, None, None
            cur = p
        return None, None, None

    def uses_of(var, scope):
        out = []
        for n in ast.walk(scope):
            if isinstance(n, ast.Name) and n.id == var and isinstance(n.ctx, ast.Load):
                cur = n
                while cur in parents:
                    p = parents[cur]
                    if isinstance(p, ast.Compare):
                        out.append("compare")
                        break
                    if isinstance(p, ast.Call) and cur is not p.func:
                        out.append(callee_param(p, cur))
                        if _fname(p) in ENTRY_CALLS:
                            out.append("call:%s" % _fname(p))
                        break
                    if isinstance(p, ast.keyword):
                        cur = p
                        continue
                    if isinstance(p, (ast.stmt,)):
                        break
                    cur = p
        return sorted(set(out))

    def func_name(node):
        s = scope_of(node)
        return s.name if s is not tree else None

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "::=" in node.value:
            if isinstance(parents.get(node), ast.JoinedStr):
                continue  # a piece of an f-string: not a grammar by itself
            name, idx, var = binding(node)
            uses = uses_of(var, scope_of(node)) if var else []
            out.append({
                "text": node.value, "line": node.lineno, "function": func_name(node),
                "bound_to": name, "tuple_index": idx, "uses": uses,
                "concatenated": isinstance(parents.get(node), ast.BinOp),
            })
    out.sort(key=lambda r: r["line"])
    return out


def _tuple_index(node, parents):
    """Index of node inside the closest enclosing tuple (parametrize row), if any."""
    cur = node
    while cur in parents:
        p = parents[cur]
        if isinstance(p, ast.Tuple):
            for i, e in enumerate(p.elts):
                if e is cur:
                    return i
        if isinstance(p, (ast.Assign, ast.Call, ast.FunctionDef, ast.Module)):
            return None
        cur = p
    return None


def classify_static(lit):
    """Role of a literal that was never passed to an EBNF entry point at run time."""
    name = lit["bound_to"] or ""
    idx = lit["tuple_index"]
    # tables named like "before__expected__test_x": pick the column name
    if "__" in name and idx is not None:
        parts = name.split("__")
        if idx < len(parts) - 1:
            name = parts[idx]
    flows = [name] + list(lit.get("uses") or [])
    if name in ("dict:grammar", "dict:ebnf"):
        return "embedded_grammar"  # EBNF inside a structural-tag / format object
    if any(f.startswith("call:") and f[5:] in ENTRY_CALLS for f in flows):
        return "unexecuted_input"
    if any(EXPECTED_NAME_RE.search(f) or f == "compare" for f in flows):
        return "expected_output"
    return "unexecuted_literal"


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------
def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


_TS_RE = re.compile(r"^\[\d\d:\d\d:\d\d\] ")


def _err(e):
    """Exception text without the run-dependent "[HH:MM:SS] " prefix of xgrammar logs."""
    return "%s: %s" % (type(e).__name__, _TS_RE.sub("", str(e)))


def parse_with_xgrammar(text, root):
    import xgrammar as xgr
    from xgrammar.testing import _ebnf_to_grammar_no_normalization

    res = {}
    try:
        xgr.Grammar.from_ebnf(text, root_rule_name=root)
        res["accepted"], res["error"] = True, None
    except Exception as e:
        res["accepted"], res["error"] = False, _err(e)
    try:
        _ebnf_to_grammar_no_normalization(text, root)
        res["no_normalization_accepted"], res["no_normalization_error"] = True, None
    except Exception as e:
        res["no_normalization_accepted"] = False
        res["no_normalization_error"] = _err(e)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot", help="git dir of an mlc-ai/xgrammar snapshot (reads HEAD)")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--files", nargs="*", help="only these tests/python/*.py files")
    ap.add_argument("--timeout", type=int, default=900, help="per test-file pytest timeout (s)")
    ap.add_argument("--workdir", help="keep the exported tests + raw records here")
    ap.add_argument("--max-text-chars", type=int, default=200_000,
                    help="grammars longer than this are recorded without their text")
    args = ap.parse_args()

    git = ["git", "--git-dir", args.snapshot]
    commit = run(git + ["rev-parse", "HEAD"]).strip()
    work = args.workdir or tempfile.mkdtemp(prefix="xg_ebnf_")
    os.makedirs(work, exist_ok=True)
    export = os.path.join(work, "snapshot")
    if not os.path.isdir(os.path.join(export, "tests")):
        os.makedirs(export, exist_ok=True)
        tar = subprocess.run(git + ["archive", "HEAD", "tests"], check=True,
                             capture_output=True).stdout
        subprocess.run(["tar", "x", "-C", export], input=tar, check=True)
    test_dir = os.path.join(export, "tests", "python")
    with open(os.path.join(work, "_xg_recorder.py"), "w", encoding="utf-8") as fh:
        fh.write(PLUGIN_SRC)

    files = sorted(f for f in os.listdir(test_dir) if f.startswith("test_") and f.endswith(".py"))
    if args.files:
        files = [f for f in files if f in set(args.files)]
    selected = []
    for f in files:
        src = open(os.path.join(test_dir, f), encoding="utf-8").read()
        if any(m in src for m in MARKERS):
            selected.append(f)

    env = dict(os.environ)
    env.update({
        "XG_TEST_DIR": test_dir,
        "PYTHONPATH": work + os.pathsep + env.get("PYTHONPATH", ""),
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
    })
    run_log = {}
    for f in selected:
        rec_path = os.path.join(work, f + ".jsonl")
        if os.path.exists(rec_path) and os.path.exists(rec_path + ".done"):
            run_log[f] = open(rec_path + ".done").read().strip()
            print("[cached] %s: %s" % (f, run_log[f]), file=sys.stderr)
            continue
        if os.path.exists(rec_path):
            os.remove(rec_path)
        env["XG_RECORD_OUT"] = rec_path
        cmd = [sys.executable, "-m", "pytest", os.path.join("tests", "python", f), "-q",
               "-p", "_xg_recorder", "-p", "no:cacheprovider", "-o", "addopts=",
               "-W", "ignore", "--tb=no", "-m", "not hf_token_required"]
        try:
            p = subprocess.run(cmd, cwd=export, env=env, capture_output=True, text=True,
                               timeout=args.timeout)
            summary = (p.stdout.strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired:
            summary = "TIMEOUT after %ds (partial records kept)" % args.timeout
        run_log[f] = summary
        with open(rec_path + ".done", "w") as fh:
            fh.write(summary)
        print("%s: %s" % (f, summary), file=sys.stderr)

    # ---------------------------------------------------------------- merge
    grammars = []
    for f in selected:
        rec_path = os.path.join(work, f + ".jsonl")
        recs = []
        if os.path.exists(rec_path):
            with open(rec_path, encoding="utf-8") as fh:
                recs = [json.loads(line) for line in fh if line.strip()]
        outcomes = {}
        for r in recs:
            if r["kind"] == "outcome":
                if r["when"] == "call" or r["outcome"] != "passed":
                    outcomes[r["nodeid"]] = r["outcome"]
        groups = OrderedDict()
        key2group = {}
        for r in recs:
            if r["kind"] != "ebnf":
                continue
            gk = (r["text"], r["root_rule_name"])
            g = groups.get(gk)
            if g is None:
                g = groups[gk] = {
                    "text": r["text"], "root_rule_name": r["root_rule_name"],
                    "entries": [], "call_sites": [], "tests": [],
                    "in_raises": [], "raises_match": [], "ok_in_test_run": [],
                    "errors_in_test_run": [], "inputs": OrderedDict(),
                }
            key2group[r["key"]] = g
            for fld, val in (("entries", r["entry"]), ("call_sites", r["line"]),
                             ("tests", r["nodeid"]), ("in_raises", r["in_raises"]),
                             ("ok_in_test_run", r["ok"])):
                if val not in g[fld]:
                    g[fld].append(val)
            if r["raises_match"] is not None and r["raises_match"] not in g["raises_match"]:
                g["raises_match"].append(r["raises_match"])
            if r["error"] and r["error"] not in g["errors_in_test_run"]:
                g["errors_in_test_run"].append(r["error"])
        for r in recs:
            if r["kind"] != "accept" or r["key"] not in key2group:
                continue
            g = key2group[r["key"]]
            ik = json.dumps([r["input"], r["require_termination"]])
            e = g["inputs"].get(ik)
            if e is None:
                g["inputs"][ik] = {
                    "input": r["input"], "require_termination": r["require_termination"],
                    "expected": r["expected"], "result_installed_xgrammar": r["result"],
                    "line": r["line"],
                }
            elif e["expected"] is None and r["expected"] is not None:
                e["expected"] = r["expected"]

        lits = static_literals(os.path.join(test_dir, f))
        lit_texts = {l["text"] for l in lits}
        used_texts = set()
        idx = 0
        for g in groups.values():
            used_texts.add(g["text"])
            test_outcomes = sorted({outcomes.get(t, "n/a") for t in g["tests"]})
            inputs = list(g["inputs"].values())
            big = len(g["text"]) > args.max_text_chars
            grammars.append({
                "id": "%s#%d" % (f[:-3], idx),
                "file": "tests/python/" + f,
                "role": "test_input",
                "origin": "literal" if g["text"] in lit_texts else "computed",
                "ebnf": None if big else g["text"],
                "ebnf_chars": len(g["text"]),
                "root_rule_name": g["root_rule_name"],
                "expects_error": any(g["in_raises"]),
                "expected_error_match": g["raises_match"] or None,
                "entry_points": g["entries"],
                "call_lines": sorted(g["call_sites"]),
                "tests": g["tests"],
                "test_outcomes_installed_xgrammar": test_outcomes,
                "accepted_inputs": [i["input"] for i in inputs if i["expected"] is True],
                "rejected_inputs": [i["input"] for i in inputs if i["expected"] is False],
                "checked_inputs": inputs,
                "_errors_in_test_run": g["errors_in_test_run"],
            })
            idx += 1
        seen_static = set()
        for lit in lits:
            if lit["text"] in used_texts or lit["text"] in seen_static:
                continue
            seen_static.add(lit["text"])
            grammars.append({
                "id": "%s#%d" % (f[:-3], idx),
                "file": "tests/python/" + f,
                "role": classify_static(lit),
                "origin": "literal",
                "ebnf": lit["text"],
                "ebnf_chars": len(lit["text"]),
                "root_rule_name": "root",
                "expects_error": None,
                "expected_error_match": None,
                "entry_points": [],
                "call_lines": [lit["line"]],
                "tests": [lit["function"]] if lit["function"] else [],
                "static_binding": lit["bound_to"],
                "static_uses": lit["uses"],
                "_concatenated": lit["concatenated"],
                "accepted_inputs": [], "rejected_inputs": [], "checked_inputs": [],
            })
            idx += 1

    # ---------------------------------------------------------------- parse with xgrammar
    from importlib.metadata import version as _v

    xgr_version = _v("xgrammar")

    for g in grammars:
        g.pop("_errors_in_test_run", None)
        text = g["ebnf"]
        if text is None:
            g["xgrammar"] = {"version": xgr_version, "skipped": "text longer than --max-text-chars"}
            continue
        res = g["xgrammar"] = dict(version=xgr_version, **parse_with_xgrammar(text, g["root_rule_name"]))
        # literals that are pieces of a grammar assembled elsewhere (no root / undefined refs)
        g["likely_fragment"] = bool(g.pop("_concatenated", False) or (
            g["role"] != "test_input" and not res["accepted"] and res["error"]
            and ("root rule with name" in res["error"] or "is not defined" in res["error"])))

    meta = {
        "source_repo": "https://github.com/mlc-ai/xgrammar",
        "commit": commit,
        "xgrammar_installed_version": xgr_version,
        "files_run": run_log,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "grammars.json"), "w", encoding="utf-8") as fh:
        json.dump(grammars, fh, ensure_ascii=True, indent=1)
        fh.write("\n")
    with open(os.path.join(args.out, "extract_meta.json"), "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")

    def cnt(pred):
        return sum(1 for g in grammars if pred(g))

    acc = lambda g: g["xgrammar"].get("accepted") is True  # noqa: E731
    print("total records:", len(grammars))
    for role in ("test_input", "expected_output", "unexecuted_input", "embedded_grammar",
                 "unexecuted_literal"):
        print("  %-18s %5d  accepted by from_ebnf: %d" % (
            role, cnt(lambda g: g["role"] == role),
            cnt(lambda g: g["role"] == role and acc(g))))
    print("test inputs expecting an error:", cnt(lambda g: g["expects_error"]))
    print("work dir:", work)


if __name__ == "__main__":
    main()
