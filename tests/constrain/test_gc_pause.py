"""``gc_pause.paused``: the collector is off inside the Earley engine's miss paths and back to
exactly what it was afterwards (nested pauses, pauses from several threads, a collector the caller
had disabled, an exception inside)."""

from __future__ import annotations

import gc
import threading

import pytest

from tests.constrain.test_grammars import byte_vocab
from trellis.constrain import compile
from trellis.constrain.earley import scannerless
from trellis.constrain.gc_pause import paused


@pytest.fixture(autouse=True)
def _restore_gc():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_pause_nests_and_restores() -> None:
    gc.enable()
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still runs
    assert gc.isenabled()
    with pytest.raises(ValueError):
        with paused():
            raise ValueError
    assert gc.isenabled()


def test_a_collector_disabled_by_the_caller_stays_disabled() -> None:
    gc.disable()
    with paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_pauses_from_several_threads_restore_the_collector_once_all_end() -> None:
    gc.enable()
    inside, release = threading.Barrier(3), threading.Event()
    seen = []

    def work() -> None:
        with paused():
            inside.wait()
            release.wait()
            seen.append(gc.isenabled())

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()  # both threads are inside their pause
    assert not gc.isenabled()
    release.set()
    for t in threads:
        t.join()
    assert seen == [False, False]  # the first to leave did not re-enable it under the other
    assert gc.isenabled()


def test_masks_and_steps_run_paused_and_leave_the_collector_as_it_was(monkeypatch) -> None:
    states = []
    real = scannerless.EarleyConstraint._token_mask
    monkeypatch.setattr(scannerless.EarleyConstraint, "_token_mask",
                        lambda self, s: (states.append(gc.isenabled()), real(self, s))[1])
    for enabled in (True, False):
        c = compile(f'start: "a" NAME+\nNAME: /[a-z]+/\n%ignore " "\n// {enabled}\n', byte_vocab(), cache=False)
        (gc.enable if enabled else gc.disable)()
        s = c.start()
        c.mask_array(s)
        s = c.advance(s, ord("a"))
        assert s is not None and gc.isenabled() == enabled
        c.mask_array(s)
        assert gc.isenabled() == enabled
    assert len(states) == 4 and not any(states)  # two new masks per constraint, each paused
