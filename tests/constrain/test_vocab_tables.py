"""The per-vocabulary tables on disk (``constrain/vocab/tables.py``): read back, they are the tables
a build makes, array for array, and give the same masks; a new process finds them; ``load``
prepares them, so the first constrained request does not build them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from tests.constrain.test_slices import _vocab
from trellis.constrain import JsonSchema, compile
from trellis.constrain.compile import clear_caches
from trellis.constrain.disk_cache import wait_for_cache_writes
from trellis.constrain.vocab import walks
from trellis.constrain.vocab.tables import prepare
from trellis.mask import allocate_bitmask


def _forget(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as a new one: no token matrix, no memo (the disk cache stays)."""
    monkeypatch.setattr(walks, "_TM_CACHE", {})
    clear_caches()


def _same(a, b, path: str = "tables") -> None:
    """Equal values, recursively: arrays by content, objects by their fields."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b), path
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), (path, set(a) ^ set(b))
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif hasattr(a, "__dict__"):
        assert type(a) is type(b), path
        _same(vars(a), vars(b), f"{path}<{type(a).__name__}>")
    else:
        assert a == b, path


def _masks(vocab, schema: dict) -> list[bytes]:
    """The masks along a walk that takes the highest allowed token at each step (seeded choice
    would do as well: the walk only has to visit string interiors, keys and numbers)."""
    c = compile(JsonSchema(schema), vocab, cache=False)
    row = allocate_bitmask(1, len(vocab))[0]
    s, out = c.start(), []
    for _ in range(20):
        c.fill_mask(s, row)
        out.append(row.numpy().tobytes())
        bits = np.unpackbits(row.numpy().view(np.uint8), bitorder="little")[:len(vocab)]
        ids = [int(i) for i in np.flatnonzero(bits) if int(i) not in vocab.eos]
        if not ids:
            break
        s = c.advance(s, ids[len(out) * 7919 % len(ids)])
    return out


def test_tables_read_back_equal_the_built_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))
    vocab = _vocab(3)
    _forget(monkeypatch)
    built = prepare(vocab)
    wait_for_cache_writes()
    files = list(tmp_path.glob("vocab/v-*.pkl"))
    assert len(files) == 1
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    masks_built = _masks(vocab, schema)
    _forget(monkeypatch)
    read = prepare(vocab)
    assert read is not built and read.tokens is vocab.tokens
    assert walks.TokenMatrix.of(vocab) is read  # registered: compile finds it
    # the memos later masks add are not part of the tables
    _same({k: v for k, v in built.tables().items()}, read.tables())
    assert _masks(vocab, schema) == masks_built


def test_a_stale_or_broken_cache_file_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))
    vocab = _vocab(4)
    _forget(monkeypatch)
    prepare(vocab)
    wait_for_cache_writes()
    (f,) = tmp_path.glob("vocab/v-*.pkl")
    f.write_bytes(b"not a pickle")
    _forget(monkeypatch)
    tm = prepare(vocab)
    assert tm.first_bits.shape[1] == tm.words  # built again
    wait_for_cache_writes()
    assert f.read_bytes() != b"not a pickle"  # and written again


def test_no_cache_dir_builds_in_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("TRELLIS_CACHE_DIR", "")
    vocab = _vocab(5)
    _forget(monkeypatch)
    tm = prepare(vocab)
    assert walks.TokenMatrix.cached(vocab) is tm
    assert not list(tmp_path.rglob("*.pkl"))


def test_load_prepares_the_vocabulary(monkeypatch):
    from tests.fakes import tiny_llama
    from tests.test_vocab import sentencepiece_tokenizer
    from trellis.models import load

    _forget(monkeypatch)
    tok = sentencepiece_tokenizer("gemma")
    handle = load(tiny_llama(vocab_size=len(tok)), tokenizer=tok)
    tm = walks.TokenMatrix.cached(handle.vocab)
    assert tm is not None and {"_trie", "_sorted_vocab", "_vocab_rests", "_rows", "_slices"} <= set(vars(tm))


def test_a_new_process_reads_the_tables_instead_of_building_them(tmp_path):
    """Two processes: the first builds and writes, the second reads (it never calls a builder)."""
    code = f"""
import sys
sys.path.insert(0, {str(__import__('pathlib').Path(__file__).resolve().parents[2])!r})
from tests.constrain.test_slices import _vocab
from trellis.constrain.vocab import walks
from trellis.constrain.vocab.tables import prepare
from trellis.constrain.disk_cache import wait_for_cache_writes
built = []
real = walks.TokenMatrix._build.__func__
walks.TokenMatrix._build = classmethod(lambda cls, v: built.append(1) or real(cls, v))
prepare(_vocab(6))
wait_for_cache_writes()
print(len(built))
"""
    # PYTHONHASHSEED: the test vocabulary is built through a set, so its token order (and its
    # fingerprint, the cache key) would differ between two processes otherwise
    env = {**__import__("os").environ, "TRELLIS_CACHE_DIR": str(tmp_path), "PYTHONHASHSEED": "0"}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr[-2000:] for r in runs]
    assert [r.stdout.split()[-1] for r in runs] == ["1", "0"]
