"""Fuzz the JSON Schema compiler: random schemas, then random instances against the reference validator.

    python benchmarks/fuzz_schemas.py --schemas 10000 --instances 6 [--seed 0]

Schemas come from ``tests/constrain/schema_fuzz.random_schema`` (every keyword family the compiler
reads, each draft's ``$schema``, nesting, ``$ref`` recursion, and now and then a keyword with a
value of the wrong type). Each is compiled as the spec reads it (``JsonSchema(s,
closed_objects=False)``) onto the default engine over a byte vocabulary. Counted:

* crashes: any exception but ``SchemaError`` (issue 27: must be 0), with repros;
* refusals (``SchemaError``), by message;
* wrong answers: for every compiled schema that the ``jsonschema`` package also accepts as a schema,
  ``--instances`` random JSON values (keys in the grammar's order, ``order_keys``; compact
  ``json.dumps``) where trellis' acceptance differs from ``jsonschema``'s validator for the schema's
  draft (must be 0). Schemas with a ``format`` or a ``pattern`` are compiled but not judged here:
  the reference validator does not assert formats by default and runs patterns with Python's
  ``re`` (Unicode ``\\w``), where JSON Schema means ECMA-262 (bench_jsonschema.py and the
  JSON-Schema-Test-Suite tests judge those).

The last line starts with SUMMARY.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
import time
from collections import Counter

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tests.constrain.schema_fuzz import random_instance, random_schema  # noqa: E402
from tests.constrain.test_grammars import accepts, byte_vocab  # noqa: E402
from trellis.constrain import SchemaError, compile  # noqa: E402
from trellis.constrain.frontends.json_schema import JsonSchema, order_keys  # noqa: E402


def _has(s, key: str) -> bool:
    if isinstance(s, dict):
        return key in s or any(_has(v, key) for v in s.values())
    if isinstance(s, list):
        return any(_has(v, key) for v in s)
    return False


def fuzz(n: int, instances: int, seed: int, log=print) -> dict:
    import jsonschema

    rng = random.Random(seed)
    vocab = byte_vocab()
    out = {"schemas": 0, "compiled": 0, "refused": Counter(), "crashes": [], "judged": 0, "checks": 0, "wrong": []}
    for i in range(n):
        s = random_schema(rng)
        out["schemas"] += 1
        try:
            c = compile(JsonSchema(s, closed_objects=False), vocab, cache=False)
        except SchemaError as e:
            out["refused"][e.message.split(":")[0][:60]] += 1
            continue
        except Exception as e:  # noqa: BLE001 - what the fuzz is for
            out["crashes"].append((s, f"{type(e).__name__}: {e}"[:300]))
            log(f"CRASH {type(e).__name__}: {str(e)[:200]}\n  schema: {json.dumps(s)[:400]}")
            continue
        out["compiled"] += 1
        if _has(s, "format") or _has(s, "pattern") or _has(s, "patternProperties") or _has(s, "propertyNames"):
            continue
        try:
            cls = jsonschema.validators.validator_for(s, default=jsonschema.Draft202012Validator)
            cls.check_schema(s)
            validator = cls(s)
        except Exception:  # noqa: BLE001 - the reference refuses the schema itself
            continue
        out["judged"] += 1
        for _ in range(instances):
            x = random_instance(rng)
            try:
                want = validator.is_valid(x)
            except Exception:  # noqa: BLE001 - e.g. a $ref the reference cannot resolve
                break
            text = json.dumps(order_keys(s, x), separators=(",", ":"), ensure_ascii=False)
            got = accepts(c, text.encode("utf-8"))
            out["checks"] += 1
            if got != want:
                out["wrong"].append((s, text, got, want))
                log(f"WRONG trellis={got} jsonschema={want} on {text}\n  schema: {json.dumps(s)[:400]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schemas", type=int, default=10_000)
    ap.add_argument("--instances", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    r = fuzz(args.schemas, args.instances, args.seed)
    dt = time.perf_counter() - t0
    print(f"schemas {r['schemas']}, compiled {r['compiled']}, refused {sum(r['refused'].values())}, "
          f"{dt:.0f} s")
    for msg, k in r["refused"].most_common(15):
        print(f"  {k:6d}  {msg}")
    print(f"SUMMARY {r['schemas']} schemas (seed {args.seed}): {len(r['crashes'])} crashes (non-SchemaError), "
          f"{r['compiled']} compiled, {r['judged']} judged against jsonschema with {r['checks']} instances: "
          f"{len(r['wrong'])} wrong")


if __name__ == "__main__":
    main()
