"""Python's cyclic garbage collector paused while the Earley engine computes a new mask or step,
while a JSON Schema is translated and while a grammar is built for the Earley engine.

The engine's memos hold many container objects with reference cycles (item sets point at the sets
their items started in, scans ``(t, q, E)`` at their sets, sets at their successors), and a new mask
allocates thousands more. Each allocation burst triggers collections, and the full ones traverse
every memo object again: on Lark's own grammar (lark.lark, whose ambiguous ``%ignore`` makes chart
states of hundreds of scans) half of a fresh document's time was the collector (bench_fresh's
lark/lark.lark documents 0 and 8: 3,466 -> 1,964 ms and 1,344 -> 742 ms, alternating in one
process; sql_select.lark and the maskbench schemas: unchanged minima, fewer outliers). A large
JSON Schema's translation is such a burst too (FSM products and unions of its string Venn regions):
Github_ultra o17072's first translation in a process made 299 young, 28 middle and 2 full
collections (415 ms; 1 young collection and ~150-200 ms paused), and in one run o18637's grammar
build took 353 ms with a full collection in it (42 ms paused; ``compile``, with Gemma loaded).

``paused()`` disables the collector for the duration of such a call and restores it afterwards, if
it was enabled when the outermost pause began (calls nest and threads share one count, so a
pause never re-enables a collector that someone else disabled before it). Nothing is leaked:
garbage made during the call is collected by the first collection after it. Only the miss paths
pause (a cached mask or step costs no toggle).
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_depth = 0  # pauses in progress, all threads
_resume = False  # whether the outermost pause found the collector enabled


class _Pause:
    """The context manager ``paused()`` returns (one object, no state of its own: the count is
    module-wide). A plain class, not ``@contextmanager``: 1.1-1.2 vs 2.6 us a pause on this
    2-core VM (timeit of an empty ``with``), and a fresh document pauses once per new mask and
    step (1,332 times in 30 fresh corpus documents)."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _depth, _resume
        with _lock:
            if _depth == 0:
                _resume = gc.isenabled()
                if _resume:
                    gc.disable()
            _depth += 1

    def __exit__(self, *exc: object) -> None:
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()


_PAUSE = _Pause()


def paused() -> _Pause:
    return _PAUSE
