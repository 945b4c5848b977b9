"""The per-vocabulary tables of the vocabulary walks, built once per vocabulary and kept on disk.

``prepare(vocab)`` makes sure every table the walks need that depends on the vocabulary alone is
built: the token matrix (``walks.TokenMatrix``), the token trie and its depth-first form
(``trie_walk``), the lexicographic order (``literal_walk.SortedVocab``), the vocabulary rest set
and its rows (``rest_walk``), the token slices with their bounded covers and trie cuts
(``slices``), a JSON string character's counting walk (``counted_walk.prebuild``). Like xgrammar's ``TokenizerInfo`` and
llguidance's ``LLTokenizer``, but read back from the disk cache (``disk_cache``, keyed by the
vocabulary's fingerprint and ``cache_version()``) instead of rebuilt in every process: on Gemma
3's 262,144 tokens ~1.2 s to build, ~0.1 s to read (~115 MB with the word slices; ``benchmarks/bench_first_mask.py``).
``trellis.load`` calls it, so a new process's first grammar does not pay the build (issue 59).
"""

from __future__ import annotations

from trellis.constrain.disk_cache import (cache_key, cache_version, grammar_cache_dir, pickled, read_cache_file,
                                          write_cache_later)
from trellis.constrain.vocab import counted_walk
from trellis.constrain.vocab.literal_walk import SortedVocab
from trellis.constrain.vocab.rest_walk import RestSet, rows
from trellis.constrain.vocab.slices import prebuild, slices
from trellis.constrain.vocab.trie_walk import TokenTrie
from trellis.constrain.vocab.walks import TokenMatrix
from trellis.tokens import Vocabulary


def prepare(vocab: Vocabulary, *, cache: bool = True) -> TokenMatrix:
    """The token matrix of ``vocab`` with every per-vocabulary table built (from the disk cache
    when ``cache`` and a cache directory is set; written there, in the background, when built)."""
    tm = TokenMatrix.cached(vocab)
    path = None
    if tm is None and cache:
        d = grammar_cache_dir()
        path = d / "vocab" / f"v-{cache_key(vocab.fingerprint(), cache_version())}.pkl" if d else None
        tables = read_cache_file(path, wait=False) if path is not None else None
        if isinstance(tables, dict) and TokenMatrix.restorable(tables):
            TokenMatrix.restore(vocab, tables)
            path = None  # read back whole: nothing to write
    tm = TokenMatrix.of(vocab)
    TokenTrie.of(tm).preorder()
    SortedVocab.of(tm)
    RestSet.vocabulary(tm)
    rows(tm)
    slices(tm)
    prebuild(tm)
    counted_walk.prebuild(tm)
    if path is not None:
        # pickled here, not on the writer's thread: later masks add memos to these objects
        write_cache_later(path, pickled(tm.tables()))
    return tm
