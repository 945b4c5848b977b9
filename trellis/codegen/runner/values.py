# Names used but not defined here come from the earlier parts of the one script (runner/__init__.py).
"""Runner part: values between worker and judge. The worker encodes the program's values leniently
(``_enc``, its objects that are not data as handles) and decodes the judge's arguments (``_dec_arg``);
the judge decodes strictly into its own builtins or ``_Remote`` proxies (``_dec``) and encodes the
tests' arguments (``_enc_arg``). Also the exceptions of the judge-worker protocol and the tables the
judge checks what the worker sends against (``_TEST_MODULES``, ``_LAYER``, ``_EXC``).
"""

# ------------------------------------------------------------------------------------------- values
# Wire form of a value (one JSON document): None, bool, str and float (finite) as themselves; ints
# within 2**53 as themselves, larger as {"I": hex} (hex parses without the int-digits limit);
# {"f": "nan"|"inf"|"-inf"}, {"C": [re, im]}, {"B": base64}, {"L": [...]}, {"T": [...]},
# {"S": [...]}, {"F": [...]}, {"D": [[k, v], ...]}, and {"H": id, "t": type name} for a handle.
_SMALL = 1 << 53


class _Handles:
    """Objects of the program that are not data, by id (worker side); one object keeps one id, so
    the judge can tell a generator from the iterator ``iter()`` gives of it (the same)."""

    def __init__(self):
        self.objs = {}
        self.ids = {}  # id(obj) -> handle (the object stays alive in ``objs``)

    def add(self, obj):
        hid = self.ids.get(id(obj))
        if hid is not None and self.objs.get(hid) is obj:
            return hid
        hid = len(self.objs) + 1
        self.objs[hid] = obj
        self.ids[id(obj)] = hid
        return hid


# Taken when the runner starts, before any program code: a program cannot pass its own class off
# as one of these (``_Remote.__class__``).
_BUILTIN_TYPES = frozenset((type(x for x in ()), map, filter, zip, enumerate, reversed, type(iter([])),
                            type(iter(range(0))), type(lambda: 0)))


class _NotData(Exception):
    pass


def _enc(v, handles, depth=0):
    """Worker side: a value of the program -> wire form (lenient: subclasses as their builtin).
    ``handles`` None: data only (``_NotData`` otherwise)."""
    if depth > _MAX_DEPTH:
        raise ValueError("value nested too deeply to return")
    if v is None or v is True or v is False:
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        v = int.__index__(v)
        return v if -_SMALL < v < _SMALL else {"I": hex(v)}
    if isinstance(v, float):
        v = float.__float__(v)
        return v if math.isfinite(v) else {"f": repr(v)}
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, complex):
        return {"C": [_enc(v.real, handles), _enc(v.imag, handles)]}
    if isinstance(v, (bytes, bytearray)):
        return {"B": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, tuple) and isinstance(getattr(type(v), "_fields", None), tuple):  # a namedtuple
        return {"NT": [type(v).__name__[:100], [str(f) for f in type(v)._fields],
                       [_enc(x, handles, depth + 1) for x in tuple.__iter__(v)]]}
    for t, tag in ((list, "L"), (tuple, "T"), (set, "S"), (frozenset, "F")):
        if isinstance(v, t):
            return {tag: [_enc(x, handles, depth + 1) for x in t.__iter__(v)]}
    if isinstance(v, dict):
        pairs = [[_enc(k, handles, depth + 1), _enc(x, handles, depth + 1)] for k, x in dict.items(v)]
        kind = type(v).__module__ + "." + type(v).__qualname__
        if kind == "collections.Counter":
            return {"Ct": pairs}
        if kind == "collections.OrderedDict":
            return {"OD": pairs}
        factory = getattr(v, "default_factory", None)
        if kind == "collections.defaultdict" and factory in _FACTORIES:
            return {"dd": [factory.__name__, pairs]}
        if kind == "collections.defaultdict" and callable(factory):
            # ``defaultdict(lambda: 0)``: the default the factory makes, as data (a copy per key)
            try:
                default = _enc(factory(), None, depth + 1)
            except _BaseException:  # noqa: B902 - not data, or the factory raised: a plain dict
                return {"D": pairs}
            return {"dd0": [default, pairs]}
        return {"D": pairs}
    if isinstance(v, memoryview):
        return {"mv": base64.b64encode(v.tobytes()).decode("ascii")}
    view = type(v).__name__
    if view in ("dict_keys", "dict_values", "dict_items") and type(v).__module__ == "builtins":
        return {view: [_enc(x, handles, depth + 1) for x in v]}
    # Values of the standard library's number and container types, rebuilt by the judge's own
    # classes; numpy's scalars by the number protocols they register with.
    name = type(v).__module__ + "." + type(v).__qualname__
    if name == "fractions.Fraction":
        return {"Q": [_enc(v.numerator, None), _enc(v.denominator, None)]}
    if name == "decimal.Decimal":
        return {"Dm": str(v)}
    if name == "collections.deque":
        return {"dq": [_enc(x, handles, depth + 1) for x in list(v)]}
    if name == "builtins.range":
        return {"R": [_enc(v.start, None), _enc(v.stop, None), _enc(v.step, None)]}
    if type(v).__module__ == "datetime":
        dt = _enc_dt(v)
        if dt is not None:
            return dt
    if type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_"):
        return bool(v)
    if isinstance(v, numbers.Integral):
        return _enc(operator.index(v), None)
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Rational):
        return _enc(float(v), None)
    if handles is None:
        raise _NotData(type(v).__name__)
    out = {"H": handles.add(v), "t": type(v).__name__[:100]}
    if type(v) in _BUILTIN_TYPES:  # the worker's own types, taken before the program ran
        out["b"] = True
    return out


_DT_KINDS = ("date", "datetime", "time", "timedelta")


def _enc_dt(v):
    """A ``datetime`` value (date, datetime, time, timedelta; naive or at a fixed UTC offset) ->
    its wire form ``{"dt": [kind, fields]}``; None for anything else (a tzinfo of the program's)."""
    import datetime

    kind = type(v).__name__
    if type(v) is not getattr(datetime, kind, None) or kind not in _DT_KINDS:
        return None
    if kind == "timedelta":
        return {"dt": [kind, [v.days, v.seconds, v.microseconds]]}
    if kind == "date":
        return {"dt": [kind, [v.year, v.month, v.day]]}
    off = v.utcoffset() if kind == "datetime" else (v.tzinfo.utcoffset(None) if v.tzinfo else None)
    if v.tzinfo is not None and type(v.tzinfo) is not datetime.timezone:
        return None
    tz = None if off is None else off // datetime.timedelta(microseconds=1)
    if kind == "time":
        return {"dt": [kind, [v.hour, v.minute, v.second, v.microsecond, tz, v.fold]]}
    return {"dt": [kind, [v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, tz, v.fold]]}


def _dec_dt(body):
    """``{"dt": ...}`` -> this process's own ``datetime`` value (``ValueError`` if malformed)."""
    import datetime

    if type(body) is not list or len(body) != 2 or body[0] not in _DT_KINDS or type(body[1]) is not list:
        raise ValueError("malformed date/time")
    kind, f = body
    if not all(x is None or type(x) is int for x in f):
        raise ValueError("malformed date/time")
    if kind == "timedelta" and len(f) == 3:
        return datetime.timedelta(days=f[0], seconds=f[1], microseconds=f[2])
    if kind == "date" and len(f) == 3:
        return datetime.date(*f)
    if kind in ("time", "datetime") and len(f) == (6 if kind == "time" else 9):
        tz = None if f[-2] is None else datetime.timezone(datetime.timedelta(microseconds=f[-2]))
        cls = datetime.time if kind == "time" else datetime.datetime
        return cls(*f[:-2], tzinfo=tz, fold=f[-1])
    raise ValueError("malformed date/time")


def _small(v, budget=_GLOBAL_ITEMS):
    """Whether ``v`` has at most ``budget`` elements in all (counted without encoding it)."""
    stack, n = [v], 0
    while stack:
        x = stack.pop()
        n += 1
        if n > budget:
            return False
        if isinstance(x, (list, tuple, set, frozenset)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
    return True


class _TooBig(ValueError):
    """A reply over ``_MAX_LINE``: that call fails, the run goes on."""


class _ProgramError(Exception):
    """The program raised an exception that is not one of Python's built-in ones."""


class _ProtocolError(Exception):
    """The worker's reply broke the protocol (malformed, too large, out of order)."""


class UnreceivableValue(BaseException):
    """A reply that answers its request but holds a value the judge cannot rebuild (a dict keyed by
    the program's objects, a set of them, a malformed part): that case fails with the reason, the
    worker and the run go on (issue 55: one such value used to end the run). A BaseException, so
    the tests' own ``except Exception`` cannot swallow it and pass."""


class _WorkerLost(Exception):
    """The worker died or stopped answering: no later case can run."""


# Modules the program imported that the tests may use by the program's name for them (MBPP's asserts
# call ``math.isclose`` after the program's ``import math``): the judge imports its own copy, and only
# of these pure, side-effect-free ones (the program chooses the names: ``antigravity`` would open a
# browser).
_TEST_MODULES = frozenset((
    "abc", "array", "base64", "binascii", "bisect", "calendar", "cmath", "collections", "collections.abc",
    "copy", "dataclasses", "datetime", "decimal", "difflib", "enum", "fractions", "functools", "hashlib", "heapq",
    "itertools", "json", "keyword", "math", "numbers", "operator", "pprint", "random", "re", "statistics",
    "string", "struct", "sys", "textwrap", "time", "types", "typing", "unicodedata", "zlib"))

_BUILTIN_NAMES = frozenset(vars(builtins))
_LAYER = re.compile(r"rlimit|landlock-abi\d{1,2}|seccomp|uid-per-run|uid\d{1,10}|no-capabilities|socket-shim")
# Built-in exceptions the program raised are rebuilt by name for the tests (``except ValueError``),
# but not StopIteration/StopAsyncIteration: inside ``map``/``filter`` one would end the loop
# quietly and skip the asserts (red-team finding); they arrive as ``_ProgramError`` (PEP 479's rule).
_EXC = {n: c for n, c in vars(builtins).items() if isinstance(c, type) and issubclass(c, BaseException)
        and not issubclass(c, (StopIteration, StopAsyncIteration, GeneratorExit))}


def _dec(x, rpc, depth=0):
    """Judge side, strict: wire form -> a value built from builtins only (or a ``_Remote``)."""
    if depth > _MAX_DEPTH:
        raise _ProtocolError("value nested too deeply")
    t = type(x)
    if x is None or t is bool or t is str or t is float:
        return x
    if t is int:
        if not -_SMALL < x < _SMALL:
            raise _ProtocolError("large int not in hex form")
        return x
    if t is not dict or len(x) not in (1, 2, 3):
        raise _ProtocolError(f"unexpected {t.__name__} in a value")
    (tag, body), = list(x.items())[:1]
    if tag == "H" and len(x) in (2, 3) and type(body) is int and type(x.get("t")) is str:
        return _Remote(rpc, body, x["t"][:100], x.get("b") is True)
    if len(x) != 1:
        raise _ProtocolError("malformed value")
    if tag == "I" and type(body) is str and len(body) < 1 << 22:
        return int(body, 16)
    if tag == "f" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "B" and type(body) is str:
        return base64.b64decode(body.encode("ascii"), validate=True)
    if tag == "Dm" and type(body) is str and len(body) < 1 << 22:  # as an int's hex digits
        import decimal

        return decimal.Decimal(body)
    if tag in ("Q", "R") and type(body) is list and len(body) == (2 if tag == "Q" else 3):
        parts = [_dec(b, rpc, depth + 1) for b in body]
        if not all(type(x) is int for x in parts):
            raise _ProtocolError("malformed number")
        if tag == "R":
            return range(*parts)
        import fractions

        return fractions.Fraction(*parts)
    if tag == "dq" and type(body) is list:
        import collections

        return collections.deque(_dec(b, rpc, depth + 1) for b in body)
    if tag == "dt":
        return _dec_dt(body)
    if tag == "dd0" and type(body) is list and len(body) == 2:
        import collections
        import copy

        default = _dec(body[0], rpc, depth + 1)
        if isinstance(default, _Remote):
            raise _ProtocolError("a defaultdict's default must be data")
        return collections.defaultdict(lambda: copy.deepcopy(default), _dec({"D": body[1]}, rpc, depth))
    if tag == "mv" and type(body) is str:
        return memoryview(base64.b64decode(body.encode("ascii"), validate=True))
    if tag == "NT" and type(body) is list and len(body) == 3:
        import collections

        name, fields, values = body
        if (type(name) is not str or not name.isidentifier() or type(fields) is not list or type(values) is not list
                or len(fields) != len(values) or not all(type(f) is str and f.isidentifier() for f in fields)):
            raise _ProtocolError("malformed namedtuple")
        cls = _NAMEDTUPLES.get((name, tuple(fields)))
        if cls is None:
            if len(_NAMEDTUPLES) > 256:
                raise _ProtocolError("too many namedtuple types")
            try:
                # rename=True rebuilds the program's own renamed fields (``_1`` for a bad name at 1);
                # names it would rename otherwise are not what the program had
                cls = collections.namedtuple(name, fields, rename=True)
            except (ValueError, SyntaxError) as e:  # SyntaxError: names equal once NFKC-normalised
                raise _ProtocolError(f"malformed namedtuple: {e}") from None
            if cls._fields != tuple(fields):
                raise _ProtocolError(f"malformed namedtuple: fields {fields}")
            _NAMEDTUPLES[(name, tuple(fields))] = cls
        return cls(*(_dec(x, rpc, depth + 1) for x in values))
    if tag in ("Ct", "OD", "dict_keys", "dict_values", "dict_items", "dd"):
        import collections

        if tag == "dd":
            if type(body) is not list or len(body) != 2 or body[0] not in {f.__name__ for f in _FACTORIES}:
                raise _ProtocolError("malformed defaultdict")
            factory = getattr(builtins, body[0])
            return collections.defaultdict(factory, _dec({"D": body[1]}, rpc, depth))
        if tag in ("Ct", "OD"):
            d = _dec({"D": body}, rpc, depth)
            return collections.Counter(d) if tag == "Ct" else collections.OrderedDict(d)
        items = _dec({"L": body}, rpc, depth)
        if tag == "dict_keys":
            return dict.fromkeys(items).keys()
        if tag == "dict_values":
            return dict(enumerate(items)).values()
        if not all(type(x) is tuple and len(x) == 2 for x in items):
            raise _ProtocolError("malformed dict items")
        return dict(items).items()
    if type(body) is not list:
        raise _ProtocolError("malformed value")
    if tag == "C" and len(body) == 2:
        re_, im = (_dec(b, rpc, depth + 1) for b in body)
        if type(re_) is not float and type(re_) is not int or type(im) is not float and type(im) is not int:
            raise _ProtocolError("malformed complex")
        return complex(re_, im)
    items = [_dec(b, rpc, depth + 1) for b in body] if tag != "D" else None
    try:
        if tag == "L":
            return items
        if tag == "T":
            return tuple(items)
        if tag == "S":
            return set(items)
        if tag == "F":
            return frozenset(items)
        if tag == "D":
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise _ProtocolError("malformed dict item")
                out[_dec(pair[0], rpc, depth + 1)] = _dec(pair[1], rpc, depth + 1)
            return out
    except TypeError as e:  # an unhashable key or element, e.g. a handle
        raise _ProtocolError(f"malformed value: {e}") from None
    raise _ProtocolError(f"unknown value tag {tag!r}")


def _enc_arg(v, depth=0):
    """Judge side: an argument the tests pass -> wire form (exact builtin types and handles only)."""
    if depth > _MAX_DEPTH:
        raise ValueError("argument nested too deeply")
    t = type(v)
    if isinstance(v, _Remote):
        return {"H": object.__getattribute__(v, "_ref"), "t": ""}
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -_SMALL < v < _SMALL else {"I": hex(v)}
    if t is float:
        return v if math.isfinite(v) else {"f": repr(v)}
    if t is complex:
        return {"C": [_enc_arg(v.real), _enc_arg(v.imag)]}
    if t is bytes or t is bytearray:
        return {"B": base64.b64encode(bytes(v)).decode("ascii")}
    for typ, tag in ((list, "L"), (tuple, "T"), (set, "S"), (frozenset, "F")):
        if t is typ:
            return {tag: [_enc_arg(x, depth + 1) for x in v]}
    if t is dict:
        return {"D": [[_enc_arg(k, depth + 1), _enc_arg(x, depth + 1)] for k, x in v.items()]}
    if t is type(len) and getattr(builtins, getattr(v, "__name__", ""), None) is v:
        return {"bi": v.__name__}  # a builtin function (key=len, map(abs, ...)): by name
    ref = _stdlib_ref(v)
    if ref is not None:  # int, str.upper, math.sqrt, datetime.date: the worker's own copy, by name
        return {"ref": ref}
    name = t.__module__ + "." + t.__qualname__
    if name == "builtins.range":
        return {"R": [v.start, v.stop, v.step]}
    if name == "builtins.slice":
        return {"sl": [_enc_arg(v.start, depth + 1), _enc_arg(v.stop, depth + 1), _enc_arg(v.step, depth + 1)]}
    if name == "fractions.Fraction":
        return {"Q": [_enc_arg(v.numerator), _enc_arg(v.denominator)]}
    if name == "decimal.Decimal":
        return {"Dm": str(v)}
    if name == "collections.deque":
        return {"dq": [_enc_arg(x, depth + 1) for x in v]}
    if name in ("collections.Counter", "collections.OrderedDict"):
        return {"Ct" if "Counter" in name else "OD": [[_enc_arg(k, depth + 1), _enc_arg(x, depth + 1)]
                                                      for k, x in v.items()]}
    if isinstance(v, tuple) and type(getattr(t, "_fields", None)) is tuple:  # the tests' namedtuple
        return {"NT": [t.__name__, list(t._fields), [_enc_arg(x, depth + 1) for x in v]]}
    dt = _enc_dt(v) if t.__module__ == "datetime" else None
    if dt is not None:
        return dt
    if name in _ITERATORS:
        # a generator or iterator of the tests: its items, as an iterator in the worker (the
        # program can only iterate it; an infinite one stops at _MAX_ITEMS)
        items = []
        for x in v:
            items.append(_enc_arg(x, depth + 1))
            if len(items) > _MAX_ITEMS:
                raise MemoryError(f"more than {_MAX_ITEMS} items from one iterator argument")
        return {"it": items}
    if callable(v) and not isinstance(v, type):
        # a function of the tests' (a lambda, a bound method, a mock): it stays here and runs here
        # when the program calls it (``_Rpc.answer``); the worker holds a ``_JudgeFn``
        return {"fn": [_callback_id(v), str(getattr(v, "__name__", "function"))[:100]]}
    raise TypeError(f"the tests passed a {t.__name__} to the program: only data values, functions "
                    "and the program's own objects can cross into the sandbox")


def _changed(values, wires, enc):
    """``[i, wire form now]`` for each list, dict, set or bytearray among ``values`` whose wire form
    ``enc`` gives is no longer ``wires[i]``: the arguments a call changed in place (the worker
    for the tests' arguments, the judge for the program's), sent back to be mirrored."""
    out = []
    for i, (a, wire) in enumerate(zip(values, wires)):
        if type(a) in (list, dict, set, bytearray):
            try:
                now = enc(a)
            except (TypeError, ValueError, RecursionError, MemoryError):  # holds what cannot go back
                continue
            if now != wire:
                out.append([i, now])
    return out


_CALLBACKS = {}  # judge side: id on the wire -> a function of the tests' the program may call
_CALLBACK_IDS = {}  # id(function) -> its id on the wire (the function is kept alive in _CALLBACKS)


def _callback_id(fn):
    fid = _CALLBACK_IDS.get(id(fn))
    if fid is not None and _CALLBACKS.get(fid) is fn:
        return fid
    if len(_CALLBACKS) >= 1 << 16:
        raise TypeError("the tests passed more than 65,536 functions to the program")
    # Random, not 1, 2, 3...: a function is registered while its arguments are encoded, and one the
    # request never carried (a later argument failed to encode) must not be callable by a guessed
    # id (red-team finding, 2026-11-29).
    fid = int.from_bytes(os.urandom(7), "little") or 1
    _CALLBACKS[fid], _CALLBACK_IDS[id(fn)] = fn, fid
    return fid


_ITERATORS = frozenset(("builtins.generator", "builtins.map", "builtins.filter", "builtins.zip",
                        "builtins.enumerate", "builtins.reversed", "builtins.list_iterator",
                        "builtins.tuple_iterator", "builtins.range_iterator", "builtins.dict_keyiterator",
                        "builtins.set_iterator", "builtins.str_ascii_iterator", "builtins.str_iterator"))


def _stdlib_ref(v):
    """``[module, qualname]`` naming ``v`` when it is a builtin or a standard module's class,
    function or method that the worker can import under that name; else None."""
    mod = getattr(v, "__module__", None)
    owner = getattr(v, "__objclass__", None)  # str.upper: a method descriptor of str
    if owner is not None:
        mod = owner.__module__
    qual = getattr(v, "__qualname__", None)
    if type(mod) is not str or type(qual) is not str or (mod != "builtins" and mod not in _TEST_MODULES):
        return None
    try:
        import importlib

        obj = importlib.import_module(mod)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return [mod, qual] if obj is v else None


def _dec_arg(x, handles, depth=0):
    """Worker side: wire form -> value (the judge is trusted; handles name the worker's objects)."""
    if type(x) is not dict:
        return x
    (tag, body), = list(x.items())[:1]
    if tag == "H":
        return handles.objs[body]
    if tag == "bi":
        return getattr(builtins, body)
    if tag == "fn":
        return _JudgeFn(*body)
    if tag == "I":
        return int(body, 16)
    if tag == "f":
        return float(body)
    if tag == "B":
        return base64.b64decode(body)
    if tag == "C":
        return complex(*body)
    if tag == "D":
        return {_dec_arg(k, handles, depth + 1): _dec_arg(v, handles, depth + 1) for k, v in body}
    if tag == "ref":
        import importlib

        obj = importlib.import_module(body[0])
        for part in body[1].split("."):
            obj = getattr(obj, part)
        return obj
    if tag == "R":
        return range(*body)
    if tag == "sl":
        return slice(*(_dec_arg(b, handles, depth + 1) for b in body))
    if tag == "Q":
        import fractions

        return fractions.Fraction(*(_dec_arg(b, handles, depth + 1) for b in body))
    if tag == "Dm":
        import decimal

        return decimal.Decimal(body)
    if tag in ("dq", "it"):
        import collections

        items = [_dec_arg(b, handles, depth + 1) for b in body]
        return collections.deque(items) if tag == "dq" else iter(items)
    if tag in ("Ct", "OD"):
        import collections

        pairs = [(_dec_arg(k, handles, depth + 1), _dec_arg(v, handles, depth + 1)) for k, v in body]
        return collections.Counter(dict(pairs)) if tag == "Ct" else collections.OrderedDict(pairs)
    if tag == "NT":
        import collections

        name, fields, values = body
        cls = _NAMEDTUPLES.get((name, tuple(fields)))
        if cls is None:
            cls = _NAMEDTUPLES[(name, tuple(fields))] = collections.namedtuple(name, fields, rename=True)
        return cls(*(_dec_arg(b, handles, depth + 1) for b in values))
    if tag == "dt":
        return _dec_dt(body)
    items = [_dec_arg(b, handles, depth + 1) for b in body]
    return {"L": list, "T": tuple, "S": set, "F": frozenset}[tag](items)
