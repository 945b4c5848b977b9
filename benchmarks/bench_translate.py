"""JSON Schema -> Lark translation time over every real-world maskbench schema: the part of a new
schema's compile that happens before any grammar exists, including the time to refuse.

    python benchmarks/bench_translate.py [--limit-s 30] [--only PREFIX] [--open-objects] [--form lalr]
                                         [--out results.json]

For each maskbench schema under ../shared/data/maskbench (all but the Handwritten/Synthesized
files) it times ``JsonSchema(schema).to_lark("earley")`` (what ``generate(schema=...)`` builds:
the Earley engine's form; ``--form lalr`` the plain form the LALR engine takes; with
``--open-objects``, ``closed_objects=False`` as ``bench_fresh.py`` configures it to match the
peers) on a new object, once, the process having translated the schemas before it (the
memos shared across schemas warm, as in a server). A translation past ``--limit-s`` seconds is
stopped (SIGALRM) and counted as a timeout. Prints, for the schemas that translate and for those
refused (``SchemaError``) or timed out: count, median, p95, p99, max and sum in ms, counts above
100 ms and 1 s, and the slowest of each. Timings are one run on a shared machine: compare runs
taken back to back, and read the tails (a gen-2 garbage collection can land on any schema).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MASKBENCH = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data", "maskbench"))


class _Timeout(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _Timeout


def _q(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))] if s else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit-s", type=int, default=30, help="per-schema limit in seconds")
    ap.add_argument("--only", default=None, help="schema files whose names start with PREFIX")
    ap.add_argument("--open-objects", action="store_true",
                    help="closed_objects=False (bench_fresh's setting) instead of generate's default")
    ap.add_argument("--form", choices=("earley", "lalr"), default="earley",
                    help="the grammar form: the Earley engine's (generate's path) or the LALR engine's")
    ap.add_argument("--out", default=None, help="per-schema rows [name, ms, outcome] as JSON")
    args = ap.parse_args(argv)

    sys.path.insert(0, os.path.dirname(HERE))
    from trellis.constrain import JsonSchema

    files = sorted(glob.glob(os.path.join(MASKBENCH, "*.json")))
    files = [f for f in files if not os.path.basename(f).startswith(("Handwritten", "Synthesized"))]
    if args.only:
        files = [f for f in files if os.path.basename(f).startswith(args.only)]
    if not files:
        print(f"no maskbench schemas under {MASKBENCH}", file=sys.stderr)
        return 1
    schemas = [(os.path.basename(f), json.load(open(f, encoding="utf-8"))["schema"]) for f in files]
    signal.signal(signal.SIGALRM, _alarm)
    rows: list[tuple[str, float, str]] = []
    t_all = time.perf_counter()
    for i, (name, schema) in enumerate(schemas):
        signal.alarm(args.limit_s)
        t0 = time.perf_counter()
        try:
            JsonSchema(schema, closed_objects=not args.open_objects).to_lark(args.form)
            outcome = "ok"
        except _Timeout:
            outcome = "timeout"
        except Exception as e:  # noqa: BLE001 - a refusal (SchemaError) or a bug: both are reported
            outcome = type(e).__name__
        finally:
            signal.alarm(0)
        rows.append((name, (time.perf_counter() - t0) * 1e3, outcome))
        if (i + 1) % 500 == 0:
            print(f"  {i + 1}/{len(schemas)} schemas, {time.perf_counter() - t_all:.0f} s", flush=True)
    if args.out:
        json.dump(rows, open(args.out, "w"))

    print(f"{'outcome':<10} {'schemas':>7} {'median':>8} {'p95':>8} {'p99':>8} {'max':>9} {'sum':>10} "
          f"{'>100ms':>7} {'>1s':>5}   (ms)")
    groups = {"ok": [r for r in rows if r[2] == "ok"], "refused": [r for r in rows if r[2] != "ok"]}
    for label, rs in groups.items():
        ms = [r[1] for r in rs]
        if not ms:
            continue
        print(f"{label:<10} {len(ms):>7} {statistics.median(ms):>8.2f} {_q(ms, .95):>8.1f} {_q(ms, .99):>8.1f} "
              f"{max(ms):>9.1f} {sum(ms):>10.0f} {sum(x > 100 for x in ms):>7} {sum(x > 1000 for x in ms):>5}")
    kinds: dict[str, int] = {}
    for r in groups["refused"]:
        kinds[r[2]] = kinds.get(r[2], 0) + 1
    print("refusals by kind:", ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda x: -x[1])) or "none")
    for label, rs in groups.items():
        slow = sorted(rs, key=lambda r: -r[1])[:5]
        print(f"slowest {label}: " + "; ".join(f"{n} {ms:.0f} ms" for n, ms, _ in slow))
    ok = [r[1] for r in groups["ok"]]
    med = f"median {statistics.median(ok):.2f} ms, p99 {_q(ok, .99):.1f} ms" if ok else "none"
    print(f"SUMMARY {len(rows)} schemas: {len(ok)} translated ({med}), {len(rows) - len(ok)} refused or timed "
          f"out ({sum(r[1] for r in groups['refused']) / 1e3:.1f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
