"""Honest test idioms (issue 55, item 3) as pairs: a correct program that must pass and a wrong one
that must fail, with the tests people write for them. ``tests/codegen/test_sandbox_idioms.py``
checks each pair natively (one process, no sandbox) and in the sandbox.

Each entry: name -> (correct program, wrong program, tests). The tests are one string per case.
"""

from __future__ import annotations

IDIOMS: dict[str, tuple[str, str, list[str]]] = {
    # ---------------------------------------------------------------- plain values (the baseline)
    "int-return": ("def f(x):\n    return x * 2\n", "def f(x):\n    return x * 3\n",
                   ["assert f(2) == 4", "assert f(0) == 0"]),
    "list-return": ("def f(n):\n    return list(range(n))\n", "def f(n):\n    return list(range(1, n))\n",
                    ["assert f(3) == [0, 1, 2]"]),
    "dict-return": ("def f(s):\n    return {c: s.count(c) for c in s}\n", "def f(s):\n    return {c: 1 for c in s}\n",
                    ["assert f('aab') == {'a': 2, 'b': 1}"]),
    "float-isclose": ("def f(x):\n    return x / 3\n", "def f(x):\n    return x / 2\n",
                      ["import math\nassert math.isclose(f(1), 0.3333333333333333)"]),
    "exception-expected": ("def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n",
                           "def f(x):\n    return x\n",
                           ["try:\n    f(-1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('no error')"]),
    "mutates-argument": ("def f(xs):\n    xs.sort()\n", "def f(xs):\n    xs.reverse()\n",
                         ["a = [3, 1, 2]\nf(a)\nassert a == [1, 2, 3]"]),
    "tuple-unpack": ("def f(x):\n    return x, x + 1\n", "def f(x):\n    return x + 1, x\n",
                     ["a, b = f(1)\nassert (a, b) == (1, 2)"]),
    "set-return": ("def f(xs):\n    return set(xs)\n", "def f(xs):\n    return set(xs[1:])\n",
                   ["assert f([1, 2, 2]) == {1, 2}"]),
    "bytes-return": ("def f(s):\n    return s.encode()\n", "def f(s):\n    return s.encode()[1:]\n",
                     ["assert f('ab') == b'ab'"]),
    "bytearray-return": ("def f(n):\n    return bytearray(n)\n", "def f(n):\n    return bytearray(n + 1)\n",
                         ["assert f(2) == bytearray(b'\\x00\\x00')"]),
    "nan-identity": ("import math\ndef f():\n    return math.nan\n", "def f():\n    return 0.0\n",
                     ["import math\nassert math.isnan(f())"]),
    "recursion-deep": ("import sys\nsys.setrecursionlimit(5000)\ndef f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n",
                       "import sys\nsys.setrecursionlimit(5000)\ndef f(n):\n    return 0 if n == 0 else 2 + f(n - 1)\n",
                       ["assert f(2000) == 2000"]),
    "nesting-deeper-than-100": ("def f(n):\n    r = []\n    for _ in range(n):\n        r = [r]\n    return r\n",
                                "def f(n):\n    r = []\n    for _ in range(n - 1):\n        r = [r]\n    return r\n",
                                ["x = f(150)\nd = 0\nwhile x:\n    x = x[0]\n    d += 1\nassert d == 150"]),
    # ---------------------------------------------------------------- builtins and stdlib as arguments
    "arg-builtin-int": ("def f(conv, s):\n    return conv(s)\n", "def f(conv, s):\n    return s\n",
                        ["assert f(int, '3') == 3"]),
    "arg-builtin-str-upper": ("def f(fn, s):\n    return fn(s)\n", "def f(fn, s):\n    return s\n",
                              ["assert f(str.upper, 'ab') == 'AB'"]),
    "arg-math-sqrt": ("def f(fn, xs):\n    return [fn(x) for x in xs]\n", "def f(fn, xs):\n    return xs\n",
                      ["import math\nassert f(math.sqrt, [4, 9]) == [2.0, 3.0]"]),
    "arg-range": ("def f(r):\n    return sum(r)\n", "def f(r):\n    return len(r)\n", ["assert f(range(5)) == 10"]),
    "arg-fraction": ("def f(q):\n    return q * 2\n", "def f(q):\n    return q + 2\n",
                     ["from fractions import Fraction\nassert f(Fraction(1, 3)) == Fraction(2, 3)"]),
    "arg-decimal": ("def f(d):\n    return d + 1\n", "def f(d):\n    return d\n",
                    ["from decimal import Decimal\nassert f(Decimal('1.5')) == Decimal('2.5')"]),
    "arg-deque": ("def f(q):\n    q.rotate(1)\n    return list(q)\n", "def f(q):\n    return list(q)\n",
                  ["from collections import deque\nassert f(deque([1, 2, 3])) == [3, 1, 2]"]),
    "arg-generator": ("def f(it):\n    return sum(it)\n", "def f(it):\n    return 0\n",
                      ["assert f(x * x for x in range(4)) == 14"]),
    "arg-map": ("def f(it):\n    return list(it)\n", "def f(it):\n    return []\n",
                ["assert f(map(str, [1, 2])) == ['1', '2']"]),
    "arg-date": ("def f(d):\n    return d.year\n", "def f(d):\n    return d.month\n",
                 ["import datetime\nassert f(datetime.date(2020, 5, 1)) == 2020"]),
    "arg-namedtuple": ("def f(p):\n    return p.x + p.y\n", "def f(p):\n    return p.x\n",
                       ["from collections import namedtuple\nP = namedtuple('P', 'x y')\nassert f(P(1, 2)) == 3"]),
    "arg-lambda": ("def f(fn, xs):\n    return [fn(x) for x in xs]\n", "def f(fn, xs):\n    return xs\n",
                   ["assert f(lambda v: v + 1, [1, 2]) == [2, 3]"]),
    "returned-date-compared": ("import datetime\ndef f(s):\n    return datetime.date.fromisoformat(s)\n",
                               "import datetime\ndef f(s):\n    return datetime.date(2000, 1, 1)\n",
                               ["import datetime\nassert f('2021-03-04') == datetime.date(2021, 3, 4)"]),
    # ---------------------------------------------------------------- generators
    "infinite-generator-islice": ("def f():\n    n = 0\n    while True:\n        yield n\n        n += 2\n",
                                  "def f():\n    n = 0\n    while True:\n        yield n\n        n += 3\n",
                                  ["from itertools import islice\nassert list(islice(f(), 4)) == [0, 2, 4, 6]"]),
    "infinite-generator-zip": ("def f():\n    n = 1\n    while True:\n        yield n\n        n *= 2\n",
                               "def f():\n    n = 1\n    while True:\n        yield n\n        n += 1\n",
                               ["assert [a for a, _ in zip(f(), range(4))] == [1, 2, 4, 8]"]),
    "generator-type": ("def f(n):\n    yield from range(n)\n", "def f(n):\n    return list(range(n))\n",
                       ["import types\nassert isinstance(f(2), types.GeneratorType)"]),
    "generator-name": ("def f(n):\n    yield n\n", "def g(n):\n    yield n\nf = g\n",
                       ["assert f.__name__ == 'f'"]),
    # ---------------------------------------------------------------- the program's own objects
    "object-repr": ("class P:\n    def __init__(self, x):\n        self.x = x\n    def __repr__(self):\n"
                    "        return f'P({self.x})'\ndef f(x):\n    return P(x)\n",
                    "class P:\n    def __init__(self, x):\n        self.x = x\n    def __repr__(self):\n"
                    "        return 'P'\ndef f(x):\n    return P(x)\n",
                    ["assert repr(f(3)) == 'P(3)'"]),
    "object-str": ("class P:\n    def __str__(self):\n        return 'p!'\ndef f():\n    return P()\n",
                   "class P:\n    pass\ndef f():\n    return P()\n", ["assert str(f()) == 'p!'"]),
    "object-add": ("class V:\n    def __init__(self, x):\n        self.x = x\n    def __add__(self, o):\n"
                   "        return V(self.x + o.x)\n",
                   "class V:\n    def __init__(self, x):\n        self.x = x\n    def __add__(self, o):\n"
                   "        return V(self.x)\n",
                   ["assert (V(1) + V(2)).x == 3"]),
    "object-contains": ("class S:\n    def __init__(self, xs):\n        self.xs = xs\n    def __contains__(self, v):\n"
                        "        return v in self.xs\n",
                        "class S:\n    def __init__(self, xs):\n        self.xs = xs\n    def __contains__(self, v):\n"
                        "        return False\n",
                        ["assert 2 in S([1, 2])"]),
    "objects-sorted": ("class K:\n    def __init__(self, v):\n        self.v = v\n    def __lt__(self, o):\n"
                       "        return self.v < o.v\n",
                       "class K:\n    def __init__(self, v):\n        self.v = v\n    def __lt__(self, o):\n"
                       "        return self.v > o.v\n",
                       ["assert [k.v for k in sorted([K(3), K(1), K(2)])] == [1, 2, 3]"]),
    "object-slicing": ("class L:\n    def __init__(self, xs):\n        self.xs = xs\n    def __getitem__(self, i):\n"
                       "        return self.xs[i]\n",
                       "class L:\n    def __init__(self, xs):\n        self.xs = xs\n    def __getitem__(self, i):\n"
                       "        return self.xs\n",
                       ["assert L([1, 2, 3])[1:] == [2, 3]"]),
    "object-set-attribute": ("class Node:\n    def __init__(self, v):\n        self.v = v\n        self.next = None\n"
                             "def length(n):\n    k = 0\n    while n is not None:\n        k += 1\n        n = n.next\n"
                             "    return k\n",
                             "class Node:\n    def __init__(self, v):\n        self.v = v\n        self.next = None\n"
                             "def length(n):\n    return 1\n",
                             ["a = Node(1)\na.next = Node(2)\nassert length(a) == 2"]),
    "object-context-manager": ("class Box:\n    def __enter__(self):\n        return 5\n    def __exit__(self, *a):\n"
                               "        return False\n",
                               "class Box:\n    def __enter__(self):\n        return 4\n    def __exit__(self, *a):\n"
                               "        return False\n",
                               ["with Box() as v:\n    assert v == 5"]),
    "object-len-iter": ("class Bag:\n    def __init__(self):\n        self.xs = [1, 2]\n    def __len__(self):\n"
                        "        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n",
                        "class Bag:\n    def __init__(self):\n        self.xs = [1]\n    def __len__(self):\n"
                        "        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n",
                        ["b = Bag()\nassert len(b) == 2 and list(b) == [1, 2]"]),
    # ---------------------------------------------------------------- the program's exceptions
    "program-exception-caught-by-class": ("class Bad(Exception):\n    pass\ndef f(x):\n    raise Bad(x)\n",
                                          "class Bad(Exception):\n    pass\ndef f(x):\n    raise KeyError(x)\n",
                                          ["try:\n    f(1)\nexcept Bad:\n    pass\nelse:\n    raise AssertionError"]),
    "program-exception-field": ("class Bad(Exception):\n    def __init__(self, code):\n        super().__init__(code)\n"
                                "        self.code = code\ndef f(x):\n    raise Bad(x * 2)\n",
                                "class Bad(Exception):\n    def __init__(self, code):\n        super().__init__(code)\n"
                                "        self.code = code\ndef f(x):\n    raise Bad(x)\n",
                                ["try:\n    f(2)\nexcept Bad as e:\n    assert e.code == 4"]),
    "program-exception-str": ("class Bad(Exception):\n    def __str__(self):\n        return 'bad input'\n"
                              "def f():\n    raise Bad()\n",
                              "class Bad(Exception):\n    pass\ndef f():\n    raise Bad()\n",
                              ["try:\n    f()\nexcept Exception as e:\n    assert str(e) == 'bad input'"]),
    # ---------------------------------------------------------------- stdout, files, input, globals
    "stdout-redirect": ("def f(x):\n    print(x * 2)\n", "def f(x):\n    print(x)\n",
                        ["import contextlib, io\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n"
                         "    f(3)\nassert buf.getvalue() == '6\\n'"]),
    "temp-file-read": ("def f(path):\n    with open(path) as fh:\n        return fh.read().upper()\n",
                       "def f(path):\n    return path\n",
                       ["import tempfile, os\nd = tempfile.mkdtemp()\np = os.path.join(d, 'a.txt')\n"
                        "with open(p, 'w') as fh:\n    fh.write('hi')\nassert f(p) == 'HI'"]),
    "temp-file-write": ("def f(path, s):\n    with open(path, 'w') as fh:\n        fh.write(s)\n",
                        "def f(path, s):\n    with open(path, 'w') as fh:\n        fh.write(s[::-1])\n",
                        ["import tempfile, os\np = os.path.join(tempfile.mkdtemp(), 'b.txt')\nf(p, 'ab')\n"
                         "with open(p) as fh:\n    assert fh.read() == 'ab'"]),
    "mocked-input": ("def f():\n    return int(input()) + 1\n", "def f():\n    return 1\n",
                     ["import builtins\nfrom unittest import mock\nwith mock.patch.object(builtins, 'input', "
                      "lambda *a: '41'):\n    assert f() == 42"]),
    "mocked-stdin": ("import sys\ndef f():\n    a = int(sys.stdin.readline())\n    return a + sum(int(x) for x in sys.stdin)\n",
                     "import sys\ndef f():\n    return int(sys.stdin.readline())\n",
                     ["import io, sys\nfrom unittest import mock\nwith mock.patch('sys.stdin', io.StringIO('3\\n4\\n5\\n')):\n"
                      "    assert f() == 12"]),
    "input-prompt-order": ("def f():\n    print('hello')\n    name = input('name? ')\n    print('hi', name)\n",
                           "def f():\n    name = input('name? ')\n    print('hello')\n    print('hi', name)\n",
                           ["import builtins, contextlib, io\nfrom unittest import mock\nbuf = io.StringIO()\n"
                            "with mock.patch('sys.stdin', io.StringIO('ada\\n')), contextlib.redirect_stdout(buf):\n"
                            "    f()\nassert buf.getvalue() == 'hello\\nname? hi ada\\n', buf.getvalue()"]),
    # ---------------------------------------------------------------- the tests' functions, called by the program
    "key-lambda": ("def f(xs, key):\n    return sorted(xs, key=key)\n", "def f(xs, key):\n    return sorted(xs)\n",
                   ["assert f([3, 1, 2], key=lambda x: -x) == [3, 2, 1]"]),
    "callback-bound-method": ("def f(emit, n):\n    for i in range(n):\n        emit(i * i)\n",
                              "def f(emit, n):\n    for i in range(1, n):\n        emit(i * i)\n",
                              ["out = []\nf(out.append, 3)\nassert out == [0, 1, 4]"]),
    "callback-mock-called": ("def f(fetch):\n    return fetch(2) * 2\n", "def f(fetch):\n    return fetch(3) * 2\n",
                             ["from unittest import mock\nm = mock.Mock(return_value=5)\nassert f(m) == 10\n"
                              "m.assert_called_once_with(2)"]),
    "callback-on-program-object": ("class Node:\n    def __init__(self, v):\n        self.v = v\n"
                                   "def f(fn):\n    return [fn(Node(i)) for i in range(3)]\n",
                                   "class Node:\n    def __init__(self, v):\n        self.v = v + 1\n"
                                   "def f(fn):\n    return [fn(Node(i)) for i in range(3)]\n",
                                   ["assert f(lambda node: node.v * 10) == [0, 10, 20]"]),
    "callback-raises": ("def f(fn):\n    try:\n        return fn()\n    except KeyError:\n        return 'missing'\n",
                        "def f(fn):\n    return fn()\n",
                        ["def boom():\n    raise KeyError('k')\nassert f(boom) == 'missing'"]),
    "random-seed-in-tests": ("import random\ndef f():\n    return random.random()\n",
                             "def f():\n    return 0.5\n",
                             ["import random\nrandom.seed(1)\na = f()\nrandom.seed(1)\nassert a == random.random()"]),
    "program-global-read": ("TABLE = {'a': 1, 'b': 2}\ndef f(k):\n    return TABLE[k]\n",
                            "TABLE = {'a': 1, 'b': 3}\ndef f(k):\n    return 2\n",
                            ["assert TABLE['b'] == 2 and f('b') == TABLE['b']"]),
    "defaultdict-lambda-missing-key": ("from collections import defaultdict\ndef f(s):\n    d = defaultdict(lambda: 0)\n"
                                       "    for c in s:\n        d[c] += 1\n    return d\n",
                                       "from collections import defaultdict\ndef f(s):\n    d = defaultdict(lambda: 0)\n"
                                       "    for c in s[1:]:\n        d[c] += 1\n    return d\n",
                                       ["d = f('aab')\nassert d['a'] == 2 and d['z'] == 0"]),
}
