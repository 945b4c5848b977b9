"""Per-request constraint arguments (request_spec) and the persistent-batch bookkeeping behind the
vLLM processor (request_batch): masks follow each request's own tokens through adds, removes,
moves, swaps and recomputation. No vLLM needed: tests/integrations/test_vllm.py runs the real one."""

from __future__ import annotations

import json
import random

import pytest
import torch

from trellis.constrain import compile
from trellis.constrain.errors import GrammarError, SchemaError
from trellis.integrations import request_spec
from trellis.integrations.request_batch import RequestBatch
from trellis.integrations.request_spec import RequestSpec, RequestSpecError
from trellis.mask import allocate_bitmask, bitmask_to_bool
from trellis.tokens import Vocabulary

EOS = 0
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string", "maxLength": 3}},
          "required": ["n"]}
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]


def vocab() -> Vocabulary:
    pieces = [b"<eos>"] + [bytes([b]) for b in range(32, 127)] + [b"\n", b'{"', b'":', b'",', b"12", b"true",
                                                                   b'"n"', b"ab", b"[1", b"]"]
    return Vocabulary(tuple(pieces), eos=frozenset([EOS]), special=frozenset())


V = vocab()
ARGS = [{"trellis_grammar": "json"}, {"trellis_schema": SCHEMA}, {"trellis_schema": json.dumps(SCHEMA)},
        {"trellis_regex": "[a-c]{1,4}!"}, {"trellis_tools": TOOLS}, {"trellis_tools": json.dumps(TOOLS),
                                                                      "trellis_tool_choice": "auto"},
        {"trellis_gbnf": 'root ::= "x" [0-9]+'}, None, {"unrelated": 1}]


# ----------------------------------------------------------------------------- request_spec


def test_parse_kinds_and_sharing():
    specs = [request_spec.parse(a) for a in ARGS]
    assert [s.kind if s else None for s in specs] == ["grammar", "schema", "schema", "regex", "tools", "tools",
                                                       "gbnf", None, None]
    assert specs[1] == specs[2]  # a dict and its JSON text share one compiled constraint
    assert specs[4] != specs[5]  # tool_choice changes the language
    for s in specs:
        if s is not None:
            request_spec.check(s)


@pytest.mark.parametrize("args, error, words", [
    ({"trellis_grammar": "start: foo"}, GrammarError, "<grammar>:1:8"),
    ({"trellis_grammar": "/etc/passwd"}, GrammarError, "<grammar>:1:1"),  # never opened as a file
    ({"trellis_grammar": "%import .secret (SECRET)\nstart: SECRET"}, RequestSpecError, "never files"),
    ({"trellis_grammar": "%import secret (SECRET)\nstart: SECRET"}, RequestSpecError, "never files"),
    ({"trellis_gbnf": "root ::= b"}, GrammarError, "undefined rule 'b'"),
    ({"trellis_schema": {"type": "strin"}}, SchemaError, "/type"),
    ({"trellis_schema": "{nope"}, RequestSpecError, "invalid JSON"),
    ({"trellis_regex": "(["}, GrammarError, "invalid regex"),
    ({"trellis_grammr": "json"}, RequestSpecError, "unknown trellis argument"),
    ({"trellis_grammar": "json", "trellis_regex": "a"}, RequestSpecError, "pass one of"),
    ({"trellis_regex": "a", "trellis_tool_choice": "auto"}, RequestSpecError, "go with trellis_tools"),
    ({"trellis_tools": "[]"}, RequestSpecError, "non-empty list"),
    ({"trellis_tools": TOOLS, "trellis_tool_choice": "mul"}, ValueError, "names no tool"),
    ({"trellis_tools": TOOLS, "trellis_parallel_tool_calls": "maybe"}, RequestSpecError, "true or false"),
    ({"trellis_schema": SCHEMA, "trellis_whitespace": "loose"}, RequestSpecError, "compact"),
    ({"trellis_regex": ""}, RequestSpecError, "non-empty text"),
])
def test_bad_arguments_are_typed_errors(args, error, words):
    with pytest.raises(error) as e:
        request_spec.check(request_spec.parse(args))
    assert words in str(e.value)
    assert isinstance(e.value, ValueError)  # what vLLM turns into an HTTP 400


def test_bundled_imports_still_work(tmp_path, monkeypatch):
    (tmp_path / "secret.lark").write_text('SECRET: "x"\n')
    monkeypatch.chdir(tmp_path)  # where Lark would find a relative import
    request_spec.check(request_spec.parse({"trellis_grammar": "%import common.WORD\nstart: WORD"}))
    with pytest.raises(RequestSpecError):
        request_spec.check(request_spec.parse({"trellis_grammar": "  %import .secret (SECRET)\nstart: SECRET"}))


def test_whitespace_and_parallel_options():
    s = request_spec.parse({"trellis_tools": TOOLS, "trellis_parallel_tool_calls": "true",
                            "trellis_whitespace": "compact"})
    assert s.parallel and s.whitespace == "compact"
    c = request_spec.build(s, V)
    assert accepts(c, b'[{"name":"add","arguments":{"a":1,"b":2}}]')
    assert not accepts(c, b'[{"name": "add", "arguments": {"a": 1, "b": 2}}]')


# ----------------------------------------------------------------------------- request_batch


def accepts(c, text: bytes) -> bool:
    s = c.start()
    for b in text:
        tok = V.tokens.index(bytes([b]))
        s = c.advance(s, tok)
        if s is None:
            return False
    return c.is_accepting(s)


def expected_row(c, tokens: list[int]) -> torch.Tensor:
    """The mask a row must get, computed from scratch: the constraint's own mask after ``tokens``,
    EOS exactly when accepting; EOS only after an accepted EOS or a refused token."""
    s = c.start()
    for t in tokens:
        if t == EOS:
            return eos_only()
        s = c.advance(s, t)
        if s is None:
            return eos_only()
    m = allocate_bitmask(1, len(V))
    c.fill_mask(s, m[0])
    allowed = bitmask_to_bool(m, len(V))[0].clone()
    allowed[EOS] = c.is_accepting(s)
    return allowed


def eos_only() -> torch.Tensor:
    a = torch.zeros(len(V), dtype=torch.bool)
    a[EOS] = True
    return a


def masked(batch: RequestBatch, n_rows: int, width: int | None = None) -> torch.Tensor:
    logits = torch.randn(n_rows, width or len(V))
    before = logits.clone()
    batch.apply(logits)
    return logits, before


def test_rows_follow_their_requests_through_random_batch_updates():
    rng = random.Random(0)
    batch = RequestBatch(V, rows=6)
    rows: dict[int, tuple[object, list[int]]] = {}  # row -> (constraint or None, live output list)
    for step in range(400):
        op = rng.random()
        free = [i for i in range(6) if i not in rows]
        if op < 0.25 and free:
            i = rng.choice(free)
            args = rng.choice(ARGS)
            out: list[int] = []
            batch.add(i, args, out)
            spec = request_spec.parse(args)
            rows[i] = (None if spec is None else batch.constraint_for(spec), out)
        elif op < 0.35 and rows:
            i = rng.choice(list(rows))
            batch.remove(i)
            del rows[i]
        elif op < 0.45 and len(rows) >= 1:
            a = rng.choice(list(rows))
            b = rng.randrange(6)
            swap = b in rows and rng.random() < 0.5
            batch.move(a, b, swap=swap)
            ra, rb = rows.pop(a), rows.pop(b, None)
            rows[b] = ra
            if swap and rb is not None:
                rows[a] = rb
        elif op < 0.5 and rows:  # preempted and recomputed: the list is rebuilt, possibly shorter
            i = rng.choice(list(rows))
            out = rows[i][1]
            del out[rng.randrange(len(out) + 1):]
        # one decoding step: every row samples a token among what the batch allowed
        logits, before = masked(batch, 6)
        for i in range(6):
            if i not in rows or rows[i][0] is None:
                assert torch.equal(logits[i], before[i]), "an unconstrained row was touched"
                if i in rows:
                    rows[i][1].append(rng.randrange(len(V)))
                continue
            c, out = rows[i]
            want = expected_row(c, out)
            got = logits[i] > float("-inf")
            assert torch.equal(got, want), (step, i, out)
            choices = torch.nonzero(got).flatten().tolist()
            if rng.random() < 0.03:  # a token the mask forbade (logits changed after the mask)
                choices = [t for t in range(len(V)) if t not in choices] or choices
            out.append(rng.choice(choices))


def test_shared_constraints_and_eos_rules():
    batch = RequestBatch(V, rows=4)
    outs = [[], [], []]
    batch.add(0, {"trellis_schema": SCHEMA}, outs[0])
    batch.add(1, {"trellis_schema": json.dumps(SCHEMA)}, outs[1])  # n > 1 / same schema
    batch.add(2, {"trellis_regex": "ab"}, outs[2])
    t = batch.tracked()
    assert t[0].constraint is t[1].constraint
    tok = {p: i for i, p in enumerate(V.tokens)}
    outs[2] += [tok[b"a"], tok[b"b"]]
    logits, _ = masked(batch, 4, width=len(V) + 7)  # logits wider than the vocabulary
    assert torch.isinf(logits[:3, len(V):]).all()  # padding columns never allowed
    assert (logits[2] > float("-inf")).nonzero().flatten().tolist() == [EOS]  # accepting, nothing else
    assert not torch.isinf(logits[3]).any()
    outs[2].append(EOS)  # an engine told to ignore EOS goes on: held to EOS
    logits, _ = masked(batch, 3)
    assert (logits[2] > float("-inf")).nonzero().flatten().tolist() == [EOS]
    assert batch.tracked()[2].status == "finished"


def test_malformed_and_uncompilable_requests_are_held_to_eos():
    def failing_build(spec, vocab):
        raise GrammarError("boom")

    batch = RequestBatch(V, rows=2, build=failing_build)
    batch.add(0, {"trellis_grammr": "json"}, [])
    batch.add(1, {"trellis_regex": "a"}, [])
    logits, _ = masked(batch, 2)
    for i in (0, 1):
        assert (logits[i] > float("-inf")).nonzero().flatten().tolist() == [EOS]
    t = batch.tracked()
    assert "unknown trellis argument" in t[0].reason and "boom" in t[1].reason


def test_same_masks_as_the_constraint_along_a_document():
    c = compile("json", V)
    batch = RequestBatch(V, rows=1)
    out: list[int] = []
    batch.add(0, {"trellis_grammar": "json.lark"}, out)
    doc = b'{"n": [1, true], "s": "ab"}'
    for b in doc:
        logits, _ = masked(batch, 1)
        assert torch.equal(logits[0] > float("-inf"), expected_row(c, out))
        out.append(V.tokens.index(bytes([b])))
    logits, _ = masked(batch, 1)
    assert bool(logits[0, EOS] > float("-inf"))
    assert batch.tracked()[0].spec == RequestSpec("grammar", "json.lark")


def test_warm_builds_tables_without_tracking_a_request():
    batch = RequestBatch(V, rows=2)
    batch.warm()
    assert batch.tracked() == {}
    out: list[int] = []
    batch.add(0, {"trellis_regex": "ab"}, out)
    logits, _ = masked(batch, 2)
    assert (logits[0] > float("-inf")).nonzero().flatten().tolist() == [V.tokens.index(b"a"), V.tokens.index(b"ab")]


def test_a_grammar_over_its_work_bound_fails_its_request_alone():
    """Issue 58: a mask or an advance past the grammar's work bound (``GrammarBudgetError``) holds
    that request to EOS with the error as its reason; the other requests of the step get their
    exact masks. (The engine's bound itself: tests/constrain/test_work_bound.py.)"""
    from trellis.constrain.errors import GrammarBudgetError

    class OverBound:  # the regex a[0-9]+, whose third mask / second advance is over its bound
        def __init__(self, c, on: str) -> None:
            self.c, self.on, self.calls = c, on, 0

        def start(self):
            return self.c.start()

        def is_accepting(self, state):
            return self.c.is_accepting(state)

        def _count(self, what: str, limit: int) -> None:
            if what == self.on:
                self.calls += 1
                if self.calls >= limit:
                    raise GrammarBudgetError(f"this {what} needs more than 5 units of work",
                                             what=what, budget=5, culprit="A")

        def fill_mask(self, state, out):
            self._count("mask", 3)
            self.c.fill_mask(state, out)

        def advance(self, state, token):
            self._count("advance", 2)
            return self.c.advance(state, token)

    for on in ("mask", "advance"):
        def build(spec, vocab):
            c = request_spec.build(spec, vocab)
            return OverBound(c, on) if spec.kind == "regex" else c

        batch = RequestBatch(V, rows=2, build=build)
        slow, fine = [], []
        batch.add(0, {"trellis_regex": "a[0-9]+"}, slow)
        batch.add(1, {"trellis_grammar": "json.lark"}, fine)
        c = compile("json", V)
        for i, b in enumerate(b'{"n": 1}'):
            logits, _ = masked(batch, 2)
            allowed = (logits[0] > float("-inf")).nonzero().flatten().tolist()
            if i >= 2:  # the third mask (or the second advance, made before it) failed
                assert allowed == [EOS], (on, i)
            else:
                slow.append(allowed[-1])
            assert torch.equal(logits[1] > float("-inf"), expected_row(c, fine))
            fine.append(V.tokens.index(bytes([b])))
        t = batch.tracked()
        assert t[0].status == "dead" and "work bound" in t[0].reason and "5 units" in t[0].reason, on
        assert t[1].status == "ok"
