"""Earley chart states: the C ``State`` (``trellis/constrain/earley/_statec.c``, one object the
cyclic collector never tracks) and the pure-Python tuple ``(frozenset of scans, accepting)`` that
runs where the C module is not built. The type on its own (equality, hashing, the tuple's face,
references released, untracked), then equal masks, accepting flags and advances from both forms
along walks through every corpus grammar and 300 maskbench schemas."""

from __future__ import annotations

import gc
import importlib
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from trellis.constrain import JsonSchema, compile
from trellis.constrain.earley import earley as earley_mod
from trellis.constrain.earley.chart_kernel import agenda
from trellis.constrain.errors import GrammarError, SchemaError
from trellis.tokens import Vocabulary

from tests.constrain.test_fuzz import compile_corpus, corpus_grammars, corpus_tiny_vocab

compile_mod = importlib.import_module("trellis.constrain.compile")  # the module (the package exports the function)

State = earley_mod.NativeState
needs_c = pytest.mark.skipif(State is None, reason="the C chart state is not built in this install")
MASKBENCH = Path(__file__).resolve().parents[3] / "shared" / "data" / "maskbench"


class _Set:  # stands for an item set (ESet): identity, no equality of its own
    pass


@needs_c
def test_state_is_a_value() -> None:
    a, b = _Set(), _Set()
    s = State({(1, 2, a), (0, 5, b)}, True)
    assert s == State([(0, 5, b), (1, 2, a), (0, 5, b)], 1)  # any order, duplicates dropped
    assert hash(s) == hash(State(iter([(1, 2, a), (0, 5, b)]), True))
    assert s != State([(1, 2, a), (0, 5, b)], False) and s != State([(1, 2, a), (0, 5, a)], True)
    assert s != State([(1, 2, a)], True) and s != (frozenset({(1, 2, a), (0, 5, b)}), True)
    assert State([], False) == State(set(), 0) and len(State([], True)[0]) == 0
    # the tuple's face: [0] the scans, [1] accepting, unpacking, len 2
    assert len(s) == 2 and s[1] is True and s[-1] is True and len(s[0]) == 2
    assert set(s[0]) == {(1, 2, a), (0, 5, b)}
    scans, acc = s
    assert acc is True and set(scans) == set(s[0])
    with pytest.raises(IndexError):
        s[2]
    with pytest.raises(TypeError):
        State([(1, 2)], True)
    with pytest.raises(OverflowError):
        State([(1 << 40, 0, a)], True)
    assert State([(7, 3, b)], False) in {State([(7, 3, b)], False): 1}


@needs_c
def test_state_releases_its_item_sets_and_stays_untracked() -> None:
    a = _Set()
    before = sys.getrefcount(a)
    states = [State([(1, 2, a), (1, 2, a), (3, 4, a)], True) for _ in range(10)]
    assert sys.getrefcount(a) == before + 20  # two distinct scans each, the duplicate dropped
    del states
    assert sys.getrefcount(a) == before
    with pytest.raises(TypeError):
        State([(1, 2, a), "not a scan"], True)
    assert sys.getrefcount(a) == before  # nothing leaked on the error path
    s = State([(1, 2, a)], False)
    assert not gc.is_tracked(s)
    key = (s, 65)  # a step memo key: untracked by the first collection that sees it
    gc.collect()
    assert not gc.is_tracked(key)


def _both(make) -> tuple:
    """(constraint with C states, constraint with tuple states) from ``make()``."""
    out = []
    for form in ("c", "python"):
        compile_mod.COMPILED.clear()  # one object per grammar text and vocabulary otherwise
        mp = pytest.MonkeyPatch()
        if form == "python":  # (an Earley recogniser reads its form once, when it is made)
            mp.setattr(earley_mod, "chart_state", earley_mod.tuple_state)
        try:
            out.append(make())
        finally:
            mp.undo()
    compile_mod.COMPILED.clear()
    return tuple(out)


def _walk_equal(c1, c2, rng: random.Random, steps: int, forced: list[int] | None = None) -> int:
    """Masks, accepting flags and advances equal along one walk (``forced`` tokens, else random
    allowed ones); the number of positions compared."""
    s1, s2 = c1.start(), c2.start()
    assert type(s1) is not type(s2)
    n = 0
    for k in range(len(forced) + 1 if forced is not None else steps):
        m1, m2 = c1.mask_array(s1), c2.mask_array(s2)
        assert np.array_equal(m1, m2), k
        assert c1.is_accepting(s1) == c2.is_accepting(s2)
        n += 1
        if forced is not None:
            if k == len(forced):
                break
            tok = forced[k]
        else:
            bits = np.unpackbits(m1.view(np.uint8), bitorder="little")[: c1.tm.size]
            ids = [i for i in np.flatnonzero(bits) if i not in c1.tm.eos]
            if not ids:
                break
            tok = rng.choice(ids)
        s1, s2 = c1.advance(s1, tok), c2.advance(s2, tok)
        assert (s1 is None) == (s2 is None)
        if s1 is None:
            break
        assert type(s1) is not type(s2)  # each constraint keeps its form (and the C step its states)
    return n


@needs_c
@pytest.mark.parametrize("gid", corpus_grammars())
def test_corpus_grammars_same_masks_either_form(gid: str) -> None:
    try:
        vocab = corpus_tiny_vocab(gid)
    except Exception:  # noqa: BLE001 - Lark cannot build the file (a start rule of another name...): bytes
        toks = tuple(bytes([b]) for b in range(256)) + (b"",)
        vocab = Vocabulary(toks, eos=frozenset([256]))
    try:
        c1, c2 = _both(lambda: compile_corpus(gid, vocab, cache=False))
    except GrammarError:
        pytest.skip("refused (the fuzz tests check which refusals are expected)")
    rng = random.Random(gid)
    assert sum(_walk_equal(c1, c2, rng, 30) for _ in range(3)) >= 3


def _maskbench(n: int) -> list[tuple[str, dict, str]]:
    """``n`` schemas spread over the whole split (every k-th file: all its sources), each with its
    first valid document, keys in the schema's order (trellis' documented narrowing)."""
    from trellis.constrain.frontends.json_schema import order_keys

    files = sorted(MASKBENCH.glob("*.json"))
    out = []
    for p in files[:: max(1, len(files) // (n + n // 4))]:
        try:
            case = json.loads(p.read_text(encoding="utf-8"))
            schema = case["schema"]
            data = next(t["data"] for t in case.get("tests", []) if t.get("valid"))
            doc = json.dumps(order_keys(schema, data), separators=(",", ":"))
        except Exception:  # noqa: BLE001 - no valid document, or one the helper cannot order
            continue
        if isinstance(schema, dict):
            out.append((p.stem, schema, doc))
        if len(out) == n:
            break
    return out


@needs_c
def test_maskbench_schemas_same_masks_either_form() -> None:
    """300 maskbench schemas, each walked along its first valid document (bytes as tokens, with
    JSON's punctuation pairs as multi-byte tokens so that masks have tokens that cross terminals)."""
    cases = _maskbench(300)
    if len(cases) < 300:
        pytest.skip(f"maskbench data not found at {MASKBENCH}")
    extra = [b'":', b'",', b'"}', b'":"', b"},", b'{"', b'["', b"],", b"true", b"null", b'","', b"00"]
    toks = tuple(bytes([b]) for b in range(256)) + tuple(extra) + (b"",)
    vocab = Vocabulary(toks, eos=frozenset([len(toks) - 1]))
    ids = {t: i for i, t in enumerate(toks[:-1])}
    compared = walked = 0
    for name, schema, doc in cases:
        try:
            c1, c2 = _both(lambda: compile(JsonSchema(schema, closed_objects=False), vocab, cache=False))
        except (GrammarError, SchemaError):
            continue
        data = doc.encode()
        forced, i = [], 0
        while i < len(data):  # longest token first
            t = next((x for x in extra if data.startswith(x, i)), data[i:i + 1])
            forced.append(ids[t])
            i += len(t)
        compared += _walk_equal(c1, c2, random.Random(name), 0, forced)
        walked += 1
    assert walked >= 250 and compared > 10_000, (walked, compared)


def test_a_dropped_constraint_leaves_no_item_sets() -> None:
    """The C states are invisible to the cyclic collector, which is safe only while no cycle
    passes through one: item sets must never refer to chart states (an ``ESet`` holding the
    ``State`` after one of its scans made every dropped grammar's item sets uncollectable). A
    constraint used and dropped leaves no item set behind once the collector has run."""
    from trellis.constrain.earley.earley import ESet

    def live_sets() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is ESet)

    compile_mod.COMPILED.clear()
    before = live_sets()
    toks = tuple(bytes([b]) for b in range(256)) + (b'":', b'",', b'{"', b"",)
    vocab = Vocabulary(toks, eos=frozenset([len(toks) - 1]))
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "integer"}}}}
    c = compile(JsonSchema(schema), vocab, cache=False)
    s = c.start()
    for t in [toks.index(x) for x in (b'{"', b"a", b'":', b'"', b"x", b'",', b'"', b"b", b'":', b"[", b"1", b"]", b"}")]:
        c.mask_array(s)
        s = c.advance(s, t)
        assert s is not None
    assert c.is_accepting(s) and live_sets() > before
    del c, s
    compile_mod.COMPILED.clear()
    assert live_sets() == before


@needs_c
@pytest.mark.parametrize("gid", ["lark/lark.lark", "outlines/arithmetic.lark", "llama.cpp/c.gbnf", "outlines/json.lark"])
def test_the_c_step_is_the_python_step_or_declines(gid: str) -> None:
    """``_statec.step`` (Earley.step's scan loop in C) returns exactly ``Earley._step``'s state,
    or False where it declines (a follow guard, a boundary not memoised yet: after one terminal in
    its item set, after several completing at one byte in ``_after_many``): every byte from every
    state along random walks over grammars with ``%ignore`` terminals and lookahead guards. Both
    outcomes occur, and on lark.lark (a name, a comment and whitespace can end at one byte) the C
    step takes bytes where several terminals complete."""
    native_step = earley_mod.native_step
    c = _fresh_corpus_constraint(gid)
    e = c.earley
    taken = declined = taken_many = 0
    for s in _random_states(c, random.Random(gid), 25):
        for b in range(256):
            got = native_step(s, b, *e._tables)
            want = e._step(s, b)
            if got is False:
                declined += 1
                got = native_step(s, b, *e._tables)
                assert got is False or got == want  # _step memoised the boundary: taken now, or still declined
            else:
                taken += 1
                assert got == want, (b, s)
                taken_many += _completions(e, s, b) > 1
            # without _after_many the C step declines every byte where several terminals complete
            if _completions(e, s, b) > 1:
                assert native_step(s, b, *e._tables[:6]) is False
    assert taken > 1000 and declined > 0, (taken, declined)
    if gid == "lark/lark.lark":
        assert taken_many > 0, taken_many


def _completions(e, s, b: int) -> int:  # type: ignore[no-untyped-def]
    """How many (terminal, start set) pairs complete on byte ``b`` from ``s`` (terminals not
    ignored; 0 where a completing scan has a follow guard)."""
    done = set()
    for t, q, o in s[0]:
        q2 = e.trans[t][(q << 8) | b]
        if q2 >= 0 and e.final[t][q2]:
            if e.scan_guard[t] is not None:
                return 0
            if not e.scan_ignore[t]:
                done.add((e.scan_term[t], o))
    return len(done)


def _fresh_corpus_constraint(gid: str):  # type: ignore[no-untyped-def]
    """A new constraint for corpus grammar ``gid`` (compile's memo cleared: every item set is made
    by the caller's walk); skipped where the grammar is refused."""
    compile_mod.COMPILED.clear()
    try:
        return compile_corpus(gid, corpus_tiny_vocab(gid), cache=False)
    except GrammarError:
        pytest.skip("refused")


def _random_states(c, rng: random.Random, steps: int):  # type: ignore[no-untyped-def]
    """The states along three random walks of at most ``steps`` allowed tokens (masks made on the way)."""
    for _ in range(3):
        s = c.start()
        for _ in range(steps):
            yield s
            m = c.mask_array(s)
            bits = np.unpackbits(m.view(np.uint8), bitorder="little")[: c.tm.size]
            ids = [i for i in np.flatnonzero(bits) if i not in c.tm.eos]
            if not ids:
                break
            s = c.advance(s, rng.choice(ids))


@needs_c
@pytest.mark.parametrize("gid", ["lark/lark.lark", "outlines/arithmetic.lark", "llama.cpp/c.gbnf", "outlines/json.lark"])
def test_the_c_closure_is_the_python_closure(gid: str, monkeypatch) -> None:
    """``_statec.close`` (``Earley._close``'s agenda in C) gives what ``chart_kernel.agenda`` gives for
    every kernel closed along random walks: the same items, the same symbols waited for and
    expected by the same items, the same predictions, accepting flag and pending items."""
    c = _fresh_corpus_constraint(gid)
    e = c.earley
    compared = []
    native = e._native_close

    def both(kernel, *tables):  # type: ignore[no-untyped-def]
        got = native(kernel, *tables)
        want = agenda(kernel, e.next_sym, e.lhs, e.nullable, e.accept_item)
        assert got[0] == want[0] and got[3:] == want[3:], kernel
        for g, w in zip(got[1:3], want[1:3]):
            assert {k: set(v) for k, v in g.items()} == {k: set(v) for k, v in w.items()}
            assert all(len(v) == len(set(v)) for v in g.values())
        compared.append(len(got[0]))
        return got

    monkeypatch.setattr(e, "_native_close", both)
    # the agenda Python's _close runs (the C ``after`` / ``close_kernel`` run it inside C)
    monkeypatch.setattr(e, "_native_after", None)
    monkeypatch.setattr(e, "_native_close_kernel", None)
    monkeypatch.setattr(e, "_tables", e._tables[:7] + (None,))  # (the C step's boundaries: no ctx)
    for _ in _random_states(c, random.Random(gid), 30):
        pass
    assert len(compared) >= 5 and max(compared) > 3, compared


def _set_ids(earley):  # type: ignore[no-untyped-def]
    """An item set -> a number that depends on its meaning alone: its future (the items still
    waiting, with their origins' numbers; the items it predicts; accepting), numbered as met."""
    futures = {id(v): k for k, v in earley._futures.items()}
    numbers: dict = {}
    known: dict = {}  # id(set) -> its number (origins are shared: unmemoised, exponential)

    def number(e):  # type: ignore[no-untyped-def]
        if id(e) not in known:
            pending, content, accepting = futures[id(e)]
            key = (frozenset((i, number(o)) for i, o in pending), content, accepting)
            known[id(e)] = numbers.setdefault(key, len(numbers))
        return known[id(e)]

    return number


@needs_c
@pytest.mark.parametrize("gid", ["lark/lark.lark", "outlines/arithmetic.lark", "llama.cpp/c.gbnf", "outlines/json.lark",
                                 "lark/composition_csv.lark", "lark/grammars_verilog.lark"])
def test_the_c_item_sets_are_the_python_item_sets(gid: str) -> None:
    """``Earley.after`` and the several-completions ``_close`` in C (``_statec.after`` /
    ``close_kernel``, and the C step's boundaries made inside it) make the item sets Python's
    ``after``, ``_close`` and ``_step`` make: along the same
    random walks (tokens picked by one seed from masks that must be equal), every chart state's
    scans start in sets of the same meaning (numbered by their futures, origins included), with
    the same scan ids, DFA states and accepting flag; and some sets were made in C."""
    made = {}
    runs = {}
    for form in ("c", "python"):
        c = _fresh_corpus_constraint(gid)
        e = c.earley
        if form == "python":
            e._native_after = e._native_close_kernel = None
            e._tables = e._tables[:7] + (None,)
        made[form] = e._made
        rng, seen = random.Random(gid), []
        for s in _random_states(c, rng, 25):
            seen.append((s, c.mask_array(s).tobytes()))
        number = _set_ids(e)
        runs[form] = [(frozenset((t, q, number(o)) for t, q, o in s[0]), bool(s[1]), m) for s, m in seen]
        made[form] = e._made - made[form]
    assert runs["c"] == runs["python"]
    assert made["c"] >= 5 and len(runs["c"]) >= 10, (made, len(runs["c"]))


@needs_c
def test_the_c_after_passes_max_sets_to_python(monkeypatch) -> None:
    """Past ``MAX_SETS`` sets the C ``after`` leaves the set to Python's ``_close`` (which forgets the
    memos, ``_forget``): the walk goes on with the same masks as a recogniser that forgets in Python."""
    masks = {}
    for form in ("c", "python"):
        c = _fresh_corpus_constraint("outlines/json.lark")
        e = c.earley
        e._close_ctx = e._close_ctx[:-1] + (3,)  # what the C form reads
        monkeypatch.setattr(earley_mod, "MAX_SETS", 3)  # what Python's _close reads
        if form == "python":
            e._native_after = e._native_close_kernel = None
            e._tables = e._tables[:7] + (None,)
        else:
            e._tables = e._tables[:7] + (e._close_ctx,)
        forgot = []
        real = e._forget
        monkeypatch.setattr(e, "_forget", lambda: (forgot.append(1), real())[1])
        masks[form] = [c.mask_array(s).tobytes() for s in _random_states(c, random.Random(7), 20)]
        assert forgot, form
    assert masks["c"] == masks["python"]


@needs_c
@pytest.mark.parametrize("gid", ["lark/lark.lark", "outlines/arithmetic.lark", "llama.cpp/c.gbnf", "outlines/json.lark"])
@pytest.mark.parametrize("cap", [1 << 22, 40])
def test_the_c_walks_miss_as_the_python_step_does(gid: str, cap: int, monkeypatch) -> None:
    """``Earley.walk`` and ``Earley.take_rests`` step their memo misses in C (``_statec.c``'s walker):
    the same states as through the Python ``step_miss``, the same work charged, the same memo
    entries and scan count (its bounds hit at the same points: ``cap`` 40 clears it every few
    steps), and ``WorkExhausted`` raised at the same point under a small work limit."""
    monkeypatch.setattr(earley_mod, "STEP_CACHE_SCANS", cap)
    c = _fresh_corpus_constraint(gid)
    e = c.earley
    rng = random.Random(gid)
    states = list(_random_states(c, rng, 12))
    toks = [t for t in c.vocab.tokens if t]
    datas = [b"".join(rng.choice(toks) for _ in range(rng.randint(1, 3))) for _ in range(60)]

    def run(via_python: bool, s, data: bytes, limit: int):  # type: ignore[no-untyped-def]
        e._steps.clear()
        e._steps_scans, e.work, e.work_limit = 0, 0, limit
        try:
            if via_python:
                e.charge(len(data) >> 3)
                out = e._native_walk(s, data, e._steps, e.step_miss)
            else:
                out = e.walk(s, data)
            raised = False
        except earley_mod.WorkExhausted:
            out, raised = None, True
        return out, raised, e.work, e._steps_scans, set(e._steps), list(e._steps.values())

    compared = exhausted = 0
    try:
        for s in states:
            for data in rng.sample(datas, 8):
                run(False, s, data, earley_mod.UNBOUNDED)  # item sets made: both runs below find them
                for limit in (earley_mod.UNBOUNDED, rng.randint(1, 60)):
                    a, b = run(False, s, data, limit), run(True, s, data, limit)
                    assert a[:5] == b[:5], (data, limit)
                    assert a[5] == b[5]
                    compared += 1
                    exhausted += a[1]
        # take_rests: token suffixes from each state, through C misses and through Python
        from trellis.constrain.vocab.rest_walk import RestSet

        vr, stride = RestSet.vocabulary(c.tm), c.tm.mat_t.shape[1]
        for s in states[:10]:
            pick = np.array(sorted(rng.sample(range(len(vr)), min(len(vr), 30))), dtype=np.int64)
            off = np.array([rng.randint(0, int(vr.length[i]) - 1) for i in pick], dtype=np.int64)
            base, length = vr.base[pick] + off * stride, (vr.length[pick] - off).astype(np.int32)
            got = []
            for via_python in (False, False, True):  # (the first makes the item sets the others find)
                e._steps.clear()
                e._steps_scans, e.work, e.work_limit = 0, 0, earley_mod.UNBOUNDED
                if via_python:
                    taken, units = e._native_take_rests(s, base, length, c._flat, stride, e._steps, e.step_miss)
                    e.charge(units)
                    taken = np.frombuffer(taken, dtype=np.int64)
                else:
                    taken = e.take_rests(s, base, length, c._flat, stride)
                got.append((taken.tolist(), e.work, e._steps_scans, set(e._steps)))
            assert got[1] == got[2]
    finally:
        e.work, e.work_limit = 0, earley_mod.UNBOUNDED
    assert compared > 100 and exhausted > 0, (compared, exhausted)


@needs_c
@pytest.mark.parametrize("gid", ["lark/lark.lark", "llama.cpp/c.gbnf", "outlines/json.lark"])
def test_the_c_take_rests_groups_rests_exactly(gid: str) -> None:
    """``_statec.take_rests`` steps its rests together, grouped by chart state: the rests it takes
    are exactly those a plain byte-by-byte walk takes, for rest sets full of shared prefixes,
    duplicates, suffixes of one another, empty rests and rests that fail part-way (token suffixes
    over the column-major token matrix, as a ``RestSet`` holds them); its units count the (state,
    byte) lookups of the grouped walk and the rest-bytes it moved."""
    from trellis.constrain.vocab.rest_walk import RestSet

    c = _fresh_corpus_constraint(gid)
    e = c.earley
    rng = random.Random(gid)
    vr, stride = RestSet.vocabulary(c.tm), c.tm.mat_t.shape[1]
    flat = c.tm.mat_t.reshape(-1)
    compared = taken_some = failed_some = 0
    for s in list(_random_states(c, rng, 10))[:12]:
        pick = [rng.randrange(len(vr)) for _ in range(rng.randint(1, 150))]
        pick += rng.sample(pick, min(len(pick), 10))  # duplicates
        pick = np.array(pick, dtype=np.int64)
        off = np.array([rng.randint(0, int(vr.length[i])) for i in pick], dtype=np.int64)  # (= length: empty)
        base, length = vr.base[pick] + off * stride, (vr.length[pick] - off).astype(np.int32)
        rests = [bytes(flat[base[r] + np.arange(length[r]) * stride]) for r in range(len(pick))]
        taken = e.take_rests(s, base, length, c._flat, stride).tolist()
        assert taken == [r for r, data in enumerate(rests) if e.walk(s, data) is not None], (s, rests)
        compared += 1
        taken_some += bool(taken)
        failed_some += len(taken) < len(rests)
        # the units: one per eight (state, byte) pairs looked up, rests grouped by equal chart
        # states at each depth, and one per 64 rest-bytes moved
        _, units = e._native_take_rests(s, base, length, c._flat, stride, e._steps, e.step_declined, e, e._tables,
                                        earley_mod.STEP_CACHE_SCANS)
        groups = {s: [r for r in rests if r]} if any(rests) else {}
        lookups = moved = depth = 0
        while groups:
            nxt: dict = {}
            for st, rr in groups.items():
                moved += len(rr)
                for b in sorted({r[depth] for r in rr}):
                    lookups += 1
                    s2 = e.step(st, b)
                    if s2 is not None:
                        nxt.setdefault(s2, []).extend(r for r in rr if r[depth] == b and len(r) > depth + 1)
            groups = {k: v for k, v in nxt.items() if v}
            depth += 1
        assert units == (lookups >> 3) + (moved >> 6)
    assert compared >= 5 and taken_some and failed_some


@needs_c
def test_chart_walks_in_c_give_the_grouped_walks_masks(monkeypatch) -> None:
    """Large leftover sets (past ``CHART_WALK_SMALL``) are one C take where ``_statec`` is built
    (``scannerless.CHART_WALK_C``): lark.lark's masks along random walks, with a vocabulary of
    whitespace-, comment- and name-led pieces that makes such sets, equal those of the grouped
    Python walk, and the large sets occur."""
    from tests.constrain.test_fuzz import corpus_tiny_vocab
    import trellis.constrain.earley.scannerless as sl

    base = corpus_tiny_vocab("lark/lark.lark")
    rng = random.Random(7)
    words = [t for t in base.tokens if t and t.isascii() and t.strip()]
    extra = {lead + rng.choice(words) + rng.choice([b"", b" ", b"\n", b":", b"|"] + words)
             for lead in (b" ", b"\n", b"  ", b"// ", b"\n\n", b"\t") for _ in range(150)}
    toks = [t for t in base.tokens if t] + sorted(extra - set(base.tokens))
    vocab = Vocabulary(tuple(toks) + (b"",), eos=frozenset([len(toks)]))
    big = []
    walk = sl.EarleyConstraint._chart_walk

    def counted(self, state, rs):  # type: ignore[no-untyped-def]
        if len(rs) > sl.CHART_WALK_SMALL:
            big.append(len(rs))
        return walk(self, state, rs)

    monkeypatch.setattr(sl.EarleyConstraint, "_chart_walk", counted)
    masks = {}
    for arm in (True, False):
        monkeypatch.setattr(sl, "CHART_WALK_C", arm)
        compile_mod.COMPILED.clear()
        c = compile_corpus("lark/lark.lark", vocab, cache=False)
        r = random.Random(3)
        out = []
        for _ in range(4):
            s = c.start()
            for _ in range(15):
                m = c.mask_array(s)
                out.append(m.tobytes())
                bits = np.unpackbits(m.view(np.uint8), bitorder="little")[: c.tm.size]
                ids = [i for i in np.flatnonzero(bits) if i not in c.tm.eos]
                if not ids:
                    break
                s = c.advance(s, r.choice(ids))
        masks[arm] = out
    assert masks[True] == masks[False]
    assert len(big) >= 4, big


@needs_c
def test_a_raise_in_the_python_step_propagates_through_the_c_walks() -> None:
    """Where the C step declines, the walks call the Python step; when that raises (``WorkExhausted``
    past the work bound) the exception reaches the caller as it is, from ``walk`` and
    ``take_rests``. The walker used to read ``earley.work`` back with the exception pending, and
    CPython's type lookup clears a pending error on a method-cache miss: the call then returned
    NULL with no exception (a SystemError, intermittently). The step here changes the class, so
    that the next lookup misses the cache."""
    from trellis.constrain.vocab.rest_walk import RestSet

    c = _fresh_corpus_constraint("outlines/json.lark")
    e = c.earley
    s = c.start()
    # every step declines to Python: to ``declined`` without ctx, else to ``Earley._step`` (after
    # the walker's own charge)
    no_tables = ([None] * len(e.trans),) + e._tables[1:7] + (None,)
    ctx_tables = ([None] * len(e.trans),) + e._tables[1:7] + (e._close_ctx,)
    e._step = lambda state, b: declined(state, b)  # type: ignore[method-assign]

    def declined(state, b):  # type: ignore[no-untyped-def]
        type(e)._lookup_buster = object()  # a new type version: the next attribute lookup misses
        raise earley_mod.WorkExhausted

    vr = RestSet.vocabulary(c.tm)
    stride = c.tm.mat_t.shape[1]
    calls = [
        lambda: e._native_walk(s, b"{}", {}, declined, e, no_tables, 1 << 22),
        lambda: e._native_take_rests(s, vr.base[:20], vr.length[:20], c._flat, stride, {}, declined, e, no_tables,
                                     1 << 22),
        lambda: e._native_walk(s, b"{}", {}, None, e, ctx_tables, 1 << 22),
        lambda: e._native_take_rests(s, vr.base[:20], vr.length[:20], c._flat, stride, {}, None, e, ctx_tables,
                                     1 << 22),
    ]
    try:
        for call in calls:
            for _ in range(3):
                with pytest.raises(earley_mod.WorkExhausted):
                    call()
    finally:
        del type(e)._lookup_buster
        del e._step
        compile_mod.COMPILED.clear()
