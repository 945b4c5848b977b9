"""Whether an object declares a capability (a ``runtime_checkable`` Protocol of methods), decided
once per class.

trellis' capabilities are methods a class declares (``ReindexesRows``, ``Normalises``,
``Refines``, ...), so the answer depends only on the object's class. ``isinstance`` against a
runtime protocol walks the protocol's members on every call: ~20 us, asked several times per SMC
step, where a memo-served step costs ~0.4 ms (bench_smc.py peer --task yesno, line-profiled
2026-11-29, 2-core AMD EPYC). Cached per (class, protocol), it is a dict lookup.
"""

from __future__ import annotations

from typing import Any

_KNOWN: dict[tuple[type, type], bool] = {}


def declares(obj: Any, protocol: type) -> bool:
    """``isinstance(obj, protocol)`` for a protocol of methods, cached per class of ``obj``.

    A capability set on an instance (not its class) is not seen: capabilities are declared by
    classes, never attached to objects at run time."""
    key = (type(obj), protocol)
    got = _KNOWN.get(key)
    if got is None:
        got = _KNOWN[key] = issubclass(type(obj), protocol)
    return got
