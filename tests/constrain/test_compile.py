"""compile(): grammar lookup, disk cache (warm load), precomputed tables, tree_masks integration."""

from __future__ import annotations

import time

import pytest
import torch

from trellis.constrain import CFGConstraint, Regex, RegexConstraint, compile, tree_masks
from trellis.mask import allocate_bitmask
from trellis.tokens import TokenTree, Vocabulary


def vocab() -> Vocabulary:
    toks = tuple(bytes([b]) for b in range(128)) + (b'{"', b'":', b"true", b"")
    return Vocabulary(toks, eos=frozenset([len(toks) - 1]))


def same_masks_along(c1, c2, text: bytes, size: int):
    """Assert both constraints give equal masks at every byte of ``text`` (byte tokens); c2's end state."""
    row1, row2 = allocate_bitmask(1, size)[0], allocate_bitmask(1, size)[0]
    s1, s2 = c1.start(), c2.start()
    for b in text:
        c1.fill_mask(s1, row1)
        c2.fill_mask(s2, row2)
        assert torch.equal(row1, row2)
        s1, s2 = c1.advance(s1, b), c2.advance(s2, b)
    return s2


def test_compile_kinds() -> None:
    from trellis.constrain import EarleyConstraint, JsonSchema

    v = vocab()
    assert isinstance(compile("json.lark", v, cache=False), EarleyConstraint)  # Lark grammars: Earley by default
    assert isinstance(compile('start: "a"+\n', v, cache=False), EarleyConstraint)
    assert isinstance(compile("json.lark", v, cache=False, engine="lalr"), CFGConstraint)
    assert isinstance(compile(JsonSchema({"type": "integer"}), v, cache=False), EarleyConstraint)
    assert isinstance(compile(JsonSchema({"type": "integer"}), v, cache=False, engine="lalr"), CFGConstraint)
    assert isinstance(compile(Regex("[ab]+"), v), RegexConstraint)
    with pytest.raises(ValueError, match="engine must be one of"):
        compile("json.lark", v, engine="glr")
    with pytest.raises(ValueError, match="precompute=True applies to engine='lalr' only"):
        compile("json.lark", v, precompute=True)


def test_disk_cache_warm_and_precomputed(tmp_path, monkeypatch) -> None:
    import sys
    from collections import OrderedDict

    memo = sys.modules["trellis.constrain.compile"]
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(memo, "COMPILED", OrderedDict())  # earlier tests compiled json.lark too
    v = vocab()
    c1 = compile("json.lark", v, precompute=True, progress=False, engine="lalr")
    sys.modules["trellis.constrain.disk_cache"].wait_for_cache_writes()  # tables are written in the background
    files = sorted(p.name[:2] for p in tmp_path.rglob("*.pkl"))
    assert files == ["g-", "t-"]
    memo.COMPILED.clear()  # the second compile must come from disk, not the process memo
    t = time.perf_counter()
    c2 = compile("json.lark", v, precompute=True, progress=False, engine="lalr")
    warm = time.perf_counter() - t
    assert warm < 5.0  # generous: tests never assert tight timings
    assert set(c2.tables) == set(c1.tables)
    assert c2.is_accepting(same_masks_along(c1, c2, b'{"a": [true, 1]}', len(v)))


def test_tables_on_disk_never_meet_a_differently_numbered_grammar(tmp_path, monkeypatch) -> None:
    """lark numbers LALR states differently in each compile, so after the grammar pickle is lost
    the recompiled grammar must not reuse tables written for the old numbering."""
    import sys
    from collections import OrderedDict

    memo = sys.modules["trellis.constrain.compile"]
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(memo, "COMPILED", OrderedDict())
    v = vocab()
    compile("json.lark", v, precompute=True, progress=False, engine="lalr")
    for p in tmp_path.rglob("g-*.pkl"):
        p.unlink()
    memo.COMPILED.clear()
    c = compile("json.lark", v, precompute=True, progress=False, engine="lalr")
    ref = compile("json.lark", v, cache=False, precompute=False, engine="lalr")
    same_masks_along(ref, c, b'{"k": [true, -1.5e3, "x", null], "b": {}}', len(v))


def test_tree_masks_prunes_forbidden_nodes() -> None:
    v = vocab()
    c = compile("json.lark", v, cache=False)
    tree = TokenTree.from_paths([[ord("["), ord("1"), ord("]")], [ord("["), ord("}")]])
    masks, states = tree_masks(c, c.start(), tree, len(v))
    assert states[1] is not None and states[3] is not None and states[4] is None
    assert int(masks[4].abs().sum()) == 0
    assert c.is_accepting(states[3])


def test_table_cache_is_bounded_lru(tmp_path, monkeypatch) -> None:
    import os

    from trellis.constrain.disk_cache import prune_cache_dir

    monkeypatch.setenv("TRELLIS_GRAMMAR_CACHE_MB", str(2.5 / 1024))  # 2.5 KiB
    for i in range(4):
        p = tmp_path / f"t-{i}.pkl"
        p.write_bytes(b"x" * 1024)
        os.utime(p, (1000 + i, 1000 + i))
    (tmp_path / "g-keep.pkl").write_bytes(b"x" * 4096)  # grammar tables are small: never pruned
    prune_cache_dir(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g-keep.pkl", "t-2.pkl", "t-3.pkl"]


def test_continuations_equal_a_byte_by_byte_walk_of_every_rest() -> None:
    """Crossing tokens are split once per global lexer state and their rests walked only from
    bytes the next lexer can begin with; every (rests, next lexer) pair must equal walking each
    rest byte by byte: ends inside -> its group (by viability class), ends a complete lexeme
    again -> cross, else gone.
    Walks are shared between lexers (and equal crossing sets between states): a wrong share
    shows up here as another lexer's states."""
    toks = tuple(bytes([b]) for b in range(32, 127)) + (
        b' {"', b'  "a', b'\n1', b' true', b' tru', b'":', b'", "', b'] ,', b' 12.5e', b', [', b'":-', b'"}', b'ab c',
        b' \xc3\xa9', b'  ', b'')
    v = Vocabulary(toks, eos=frozenset([len(toks) - 1]))
    c = compile("json.lark", v, cache=False, engine="lalr")
    g = c.grammar
    checked = 0
    for lid, lex in enumerate(g.lexers):
        for d in range(len(lex.accept)):
            for rests in c.table(lid, d).cross.values():
                for lid2, lex2 in enumerate(g.lexers):
                    cont = c._continuation(rests, lid2)  # walked in global states, shared by lexers
                    got_in = {(u, int(i)) for u, ids in cont.groups for i in ids.tolist()}
                    got_x = {(t, int(i), int(p)) for t, r in cont.cross.items()
                             for i, p in zip(r.ids.tolist(), r.pos.tolist())}
                    want_in, want_x = set(), set()
                    vc = c.rt.vclass(lid2)  # groups are merged per viability class
                    for i, p in zip(rests.ids.tolist(), rests.pos.tolist()):
                        s = 0
                        for k, b in enumerate(toks[i][p:]):
                            n = lex2.rows[s][b]
                            if n < 0:
                                if k >= 1 and lex2.accept[s] >= 0:
                                    want_x.add((int(lex2.accept[s]), i, p + k))
                                break
                            s = n
                        else:
                            want_in.add((vc[s], i))
                    assert (got_in, got_x) == (want_in, want_x), (lid, d, lid2)
                    for r in cont.cross.values():  # the byte a rest begins with is recorded
                        assert [toks[i][p] for i, p in zip(r.ids.tolist(), r.pos.tolist())] == r.first.tolist()
                    checked += len(rests.ids)
    assert checked > 100


def test_walk_equals_a_byte_by_byte_run() -> None:
    """``walks.walk_tokens`` (strings walked longest first, dead ones parked in a sink state and
    compacted once they are the majority) against a plain loop, on random DFAs and strings: where
    each ends, the first byte without a transition, the state before it and that byte."""
    import numpy as np

    from trellis.constrain.vocab.walks import TokenMatrix, walk_tokens, scaled

    rng = np.random.default_rng(0)
    for trial in range(40):
        n_states = int(rng.integers(1, 6))
        density = [0.3, 0.8, 1.0][trial % 3]  # many deaths, some, none (exercises the compaction)
        trans = np.where(rng.random((n_states, 256)) < density, rng.integers(0, n_states, (n_states, 256)), -1)
        trans = trans.astype(np.int32)
        alphabet = rng.choice(256, size=4, replace=False)
        toks = tuple(bytes(rng.choice(alphabet, size=int(rng.integers(1, 9))).tolist()) for _ in range(60)) + (b"",)
        v = Vocabulary(toks, eos=frozenset([len(toks) - 1]))
        tm = TokenMatrix.of(v)
        ids = tm.order
        j0 = trial % 2
        keep = tm.lengths[ids] > j0
        ids = ids[keep]
        start = rng.integers(0, n_states, len(ids))
        end, bpos, bst, bbyte = walk_tokens(scaled(trans), start, tm.lengths[ids], tm, tm.rank[ids], j0=j0)
        for k, i in enumerate(ids.tolist()):
            s, want = int(start[k]), (-1, -1, -1, 0)
            for j, b in enumerate(toks[i][j0:], start=j0):
                if trans[s, b] < 0:
                    want = (-1, j, s, b)
                    break
                s = int(trans[s, b])
            else:
                want = (s, -1, -1, 0)
            assert (int(end[k]), int(bpos[k]), int(bst[k]), int(bbyte[k])) == want, (trial, toks[i])


def test_precomputed_continuations_cover_every_decode(monkeypatch) -> None:
    """``precompute=True`` walks every crossing set from every lexer that can follow its terminal
    (a superset of what a real stack reaches), and the tables carry those walks to disk: random
    decodes, on the compiled object and on one rebuilt from pickled tables, must never need a
    continuation walk at run time."""
    import pickle
    import random

    import trellis.constrain.lalr.cfg as cfg
    from trellis.mask import allowed_ids

    toks = tuple(bytes([b]) for b in range(32, 127)) + (
        b' (', b'((', b'(((', b' x', b' foo(', b'), ', b' + 1', b'  ', b' \n', b'\n ', b' SELECT', b' a,', b' FROM t',
        b' {"', b'":', b'", "', b'] ,', b' 12.5e', b', [', b'":-', b'"}', b' true', b' 1)', b'"a": 1, "', b'')
    v = Vocabulary(toks, eos=frozenset([len(toks) - 1]))
    rng = random.Random(0)
    row = allocate_bitmask(1, len(v))[0]
    for name in ["json.lark", "arithmetic.lark", "python_call.lark", "sql_select.lark"]:
        built = compile(name, v, cache=False, precompute=True, progress=False, engine="lalr")
        loaded = CFGConstraint(built.grammar, v, tables=pickle.loads(pickle.dumps(dict(built.tables))))

        def no_walk(*a, **k):
            raise AssertionError(f"{name}: a continuation was walked at run time")

        with monkeypatch.context() as m:
            m.setattr(cfg, "continuation", no_walk)
            for c in (built, loaded):
                for _ in range(25):
                    s = c.start()
                    for _ in range(30):
                        c.fill_mask(s, row)
                        ids = [t for t in allowed_ids(row, len(v)) if t not in v.eos]
                        if not ids:
                            break
                        s = c.advance(s, rng.choice(ids))
                        assert s is not None
        # and the guard is live: a fresh, lazily built constraint does walk them
        lazy = compile(name, v, cache=False, precompute=False, engine="lalr")
        with monkeypatch.context() as m:
            m.setattr(cfg, "continuation", no_walk)
            try:
                for t in (toks.index(b" ("), toks.index(b' {"'), toks.index(b" x")):
                    lazy.mask_array(lazy.start())
                    lazy.advance(lazy.start(), t)
            except AssertionError as e:
                assert "walked at run time" in str(e)
            else:
                raise AssertionError(f"{name}: the lazy constraint never walked a continuation")


def test_sparse_ids_equal_the_packed_row() -> None:
    """Table groups are stored as (nonzero word indices, words): OR-ing them into a row must give
    ``pack_ids`` exactly, for empty, small (sorted path), bit-31 and large (dense path) sets."""
    import numpy as np

    from trellis.constrain.vocab.walks import TokenMatrix

    v = Vocabulary(tuple(bytes([i % 256]) * (1 + i // 256) for i in range(5000)), eos=frozenset([4999]))
    tm = TokenMatrix.of(v)
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 31, 77, 100, 3000, 4999):
        ids = rng.choice(4999, size=n, replace=True)
        if n == 31:
            ids = np.arange(31, 4999, 32)[:n]  # every bit 31: the sign bit of an int32 word
        words, vals = tm.sparse_ids(ids)
        row = np.zeros(tm.words, dtype=np.int32)
        row[words] |= vals
        assert np.array_equal(row, tm.pack_ids(ids)), n
        assert len(np.unique(words)) == len(words) == np.count_nonzero(row)
