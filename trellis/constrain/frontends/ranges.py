"""Numeric ranges as regexes: ``NumSpec`` (bounds, integer-only, ``multipleOf``, enumerated and
excluded values) and the regexes of the plain decimal JSON numbers it holds."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from math import ceil, floor, gcd

from trellis.constrain.automata.regex_ir import (EPS, JSON_NUMBER, MAX_REPEAT, Unsupported, alt, cat, fsm_regex, fsm_sub, lit,
                                        regex_atom, regex_fsm, rep, to_regex)

# Regexes over plain decimal JSON numbers (no exponent) for exact ranges: the integer part by
# the classic digit-range split, the fraction part by a digit-wise comparison of zero-padded
# digit strings (so 1.5, 1.50 and 1.500 are the same value).

_MAX_DIGITS = 400


def _digits(d: Decimal) -> tuple[str, str]:
    """(integer digits, fraction digits without trailing zeros) of |d|."""
    t = format(abs(d), "f")
    i, _, f = t.partition(".")
    i, f = i.lstrip("0") or "0", f.rstrip("0")
    if len(i) + len(f) > _MAX_DIGITS:
        raise Unsupported(f"number {d} has too many digits")
    return i, f


def _dclass(a: int, b: int) -> str:
    return str(a) if a == b else f"[{a}-{b}]"


def _same_len(lo: str, hi: str) -> str:
    """Digit strings of len(lo) between lo and hi (inclusive, leading zeros allowed)."""
    if lo == hi:
        return lo
    n = len(lo)
    if n == 1:
        return _dclass(int(lo), int(hi))
    if lo[1:] == "0" * (n - 1) and hi[1:] == "9" * (n - 1):
        return _dclass(int(lo[0]), int(hi[0])) + f"[0-9]{{{n - 1}}}"
    if lo[0] == hi[0]:
        return lo[0] + _same_len(lo[1:], hi[1:])
    parts = [lo[0] + regex_atom(_same_len(lo[1:], "9" * (n - 1)))]
    if int(lo[0]) + 1 <= int(hi[0]) - 1:
        parts.append(_dclass(int(lo[0]) + 1, int(hi[0]) - 1) + f"[0-9]{{{n - 1}}}")
    parts.append(hi[0] + regex_atom(_same_len("0" * (n - 1), hi[1:])))
    return "(?:" + "|".join(parts) + ")"


def _nat_range(a: int, b: int | None) -> str | None:
    """Canonical naturals (no leading zeros) in [a, b]; b None = unbounded."""
    if b is not None and a > b:
        return None
    sa = str(a)
    alts = []
    top = len(str(b)) if b is not None else len(sa)
    for n in range(len(sa), top + 1):
        lo = max(a, 10 ** (n - 1) if n > 1 else 0)
        hi = min(b, 10**n - 1) if b is not None else 10**n - 1
        if lo <= hi:
            alts.append(_same_len(str(lo), str(hi)))
    if b is None:
        alts.append(f"[1-9][0-9]{{{len(sa)},}}")
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


Bound = tuple  # (digits without trailing zeros, strict) of a fraction bound, or None


_FRAC_MEMO: dict[tuple, tuple[bool, str | None]] = {}


def _frac(lo: Bound | None, hi: Bound | None, left: int | None) -> tuple[bool, str | None]:
    """Fraction digit strings f between the bounds (compared zero-padded).

    Returns (the empty string is allowed, regex of the non-empty ones or None). ``left``: how
    many more digits may be non-zero (``multipleOf`` 10^-d), None = unlimited.
    """
    if lo is not None and lo[0] == "" and not lo[1]:
        lo = None  # f >= 0 always holds
    key = (lo, hi, left)
    hit = _FRAC_MEMO.get(key)
    if hit is not None:
        return hit
    res = _frac_new(lo, hi, left)
    if len(_FRAC_MEMO) > 100_000:
        _FRAC_MEMO.clear()
    _FRAC_MEMO[key] = res
    return res


def _frac_new(lo: Bound | None, hi: Bound | None, left: int | None) -> tuple[bool, str | None]:
    empty_ok = lo is None and (hi is None or not (hi[0] == "" and hi[1]))
    if hi is not None and hi[0] == "":
        if hi[1]:
            return False, None  # f < 0
        return (True, "0+") if lo is None else (False, None)  # f <= 0: zeros only
    if left == 0:
        return (True, "0+") if lo is None else (False, None)
    if lo is None and hi is None:
        return True, ("[0-9]+" if left is None else f"[0-9]{{1,{left}}}0*")
    if lo == ("", True) and hi is None and left is None:
        return False, "0*[1-9][0-9]*"
    groups: dict[tuple[bool, str | None], list[int]] = {}
    for d in range(10):
        nlo: Bound | None = None
        if lo is not None:
            l0 = int(lo[0][0]) if lo[0] else 0
            if d < l0:
                continue
            if d == l0:
                nlo = (lo[0][1:], lo[1])
        nhi: Bound | None = None
        if hi is not None:
            h0 = int(hi[0][0])
            if d > h0:
                continue
            if d == h0:
                nhi = (hi[0][1:], hi[1])
        sub = _frac(nlo, nhi, None if left is None else left - 1)
        if sub[0] or sub[1] is not None:
            groups.setdefault(sub, []).append(d)
    alts = []
    for (emp, rx), ds in groups.items():
        runs, start = [], ds[0]
        for a, b in zip(ds, ds[1:] + [None]):
            if b != a + 1:
                runs.append((start, a))
                start = b
        dc = "".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
        dc = dc if len(ds) == 1 else f"[{dc}]"
        tail = "" if rx is None else (f"(?:{rx})?" if emp else regex_atom(rx))
        alts.append(dc + tail)
    if not alts:
        return empty_ok, None
    return empty_ok, alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def _mag(lo: Decimal, lo_s: bool, hi: Decimal | None, hi_s: bool, left: int | None) -> str | None:
    """Plain magnitudes ``I(.F)?`` (no sign) in the range; None if empty."""
    if hi is not None and (hi < lo or (hi == lo and (lo_s or hi_s))):
        return None
    li, lf = _digits(lo)
    alts: list[str] = []

    def piece(ints: str | None, frac: tuple[bool, str | None]) -> None:
        emp, rx = frac
        if ints is None or (not emp and rx is None):
            return
        tail = "" if rx is None else (f"(?:\\.{regex_atom(rx)})?" if emp else f"\\.{regex_atom(rx)}")
        alts.append(regex_atom(ints) + tail)

    if hi is not None:
        hi_i, hf = _digits(hi)
        if li == hi_i:
            piece(li, _frac((lf, lo_s), (hf, hi_s), left))
        else:
            piece(li, _frac((lf, lo_s), None, left))
            piece(_nat_range(int(li) + 1, int(hi_i) - 1), _frac(None, None, left))
            piece(hi_i, _frac(None, (hf, hi_s), left))
    else:
        piece(li, _frac((lf, lo_s), None, left))
        piece(_nat_range(int(li) + 1, None), _frac(None, None, left))
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def _range_regex(lo: Decimal | None, lo_s: bool, hi: Decimal | None, hi_s: bool, left: int | None) -> str | None:
    """Plain decimal numbers x with lo <(=) x <(=) hi (either bound may be None)."""
    alts = []
    if hi is None or hi > 0 or (hi == 0 and not hi_s):
        a, a_s = (lo, lo_s) if lo is not None and lo >= 0 else (Decimal(0), False)
        r = _mag(a, a_s, hi, hi_s, left)
        if r:
            alts.append(r)
    if lo is None or lo < 0 or (lo == 0 and not lo_s):  # x = -y; "-0" is 0
        b, b_s = (-lo, lo_s) if lo is not None else (None, False)
        a, a_s = (-hi, hi_s) if hi is not None and hi <= 0 else (Decimal(0), False)
        r = _mag(a, a_s, b, b_s, left)
        if r:
            alts.append("-" + regex_atom(r))
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def _int_range_regex(lo: int | None, hi: int | None, plain: bool = False) -> str | None:
    alts = []
    if hi is None or hi >= 0:
        r = _nat_range(max(lo, 0) if lo is not None else 0, hi)
        if r:
            alts.append(r)
    if lo is None or lo <= 0:
        r = _nat_range(max(-hi, 0) if hi is not None else 0, -lo if lo is not None else None)
        if r:
            alts.append("-" + regex_atom(r))
    if not alts:
        return None
    body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
    return body if plain else body + r"(?:\.0+)?"


def _value_regex(v: Decimal) -> str:
    """Every plain decimal spelling of the number ``v`` (1 -> 1, 1.0, 1.00 ...)."""
    i, f = _digits(v)
    body = i + (rf"\.{f}0*" if f else r"(?:\.0+)?")
    if v == 0:
        return "-?" + body
    return ("-" if v < 0 else "") + body


def _is_int(v: Decimal) -> bool:
    return Fraction(v).denominator == 1


def _lcm(a: int, b: int) -> int:
    return a * b // gcd(a, b)


@dataclass(frozen=True)
class NumSpec:
    """A set of JSON numbers: bounds, integer-only, multipleOf, enumerated or excluded values.

    ``plain``: spelled without a fraction or exponent part, draft-04's ``integer`` ("a JSON number
    without a fraction or exponent part": ``1.0`` and ``1e2`` are not integers there, while from
    draft-06 on an integer is any number with a zero fractional part)."""

    integer: bool = False
    lo: Decimal | None = None
    lo_x: bool = False
    hi: Decimal | None = None
    hi_x: bool = False
    mults: frozenset = frozenset()
    values: frozenset | None = None
    exclude: frozenset = frozenset()
    plain: bool = False

    def contains(self, v: Decimal) -> bool:
        if self.integer and not _is_int(v):
            return False
        if self.lo is not None and (v < self.lo or (v == self.lo and self.lo_x)):
            return False
        if self.hi is not None and (v > self.hi or (v == self.hi and self.hi_x)):
            return False
        if any(Fraction(v) % Fraction(m) != 0 for m in self.mults):
            return False
        if self.values is not None and v not in self.values:
            return False
        return v not in self.exclude

    def __and__(self, o: "NumSpec") -> "NumSpec":
        lo, lo_x = self.lo, self.lo_x
        if o.lo is not None and (lo is None or o.lo > lo or (o.lo == lo and o.lo_x)):
            lo, lo_x = o.lo, o.lo_x
        hi, hi_x = self.hi, self.hi_x
        if o.hi is not None and (hi is None or o.hi < hi or (o.hi == hi and o.hi_x)):
            hi, hi_x = o.hi, o.hi_x
        values = self.values if o.values is None else (o.values if self.values is None else self.values & o.values)
        r = NumSpec(self.integer or o.integer, lo, lo_x, hi, hi_x, self.mults | o.mults, values,
                    self.exclude | o.exclude, self.plain or o.plain)
        if values is not None:
            r = NumSpec(r.integer, r.lo, r.lo_x, r.hi, r.hi_x, r.mults, frozenset(v for v in values if r.contains(v)),
                        r.exclude, r.plain)
        return r

    def empty(self) -> bool:
        if self.values is not None:
            return not self.values
        if self.lo is not None and self.hi is not None:
            if self.lo > self.hi or (self.lo == self.hi and (self.lo_x or self.hi_x)):
                return True
        return False

    def regex(self) -> str | None:
        """Regex of the JSON number texts in the set (None: empty); Unsupported if not exact."""
        if self.plain and self.values is None and not self.exclude and self._unit() == 1:
            # an integer range: its regex is digits and '-' only (``_nat_range``) plus the .0+
            # spellings, so without them it is the plain one (18 such draft-04 ranges took 20 ms
            # of o13020's 53 ms translation through the difference below)
            return self._base(plain=True)
        rx = self._spelled()
        if rx is None or not self.plain:
            return rx
        f = fsm_sub(regex_fsm(rx), regex_fsm(NOT_PLAIN))  # the same values, minus spellings with . e E
        return None if f.empty() else fsm_regex(f, to_regex)

    def _spelled(self) -> str | None:
        if self.values is not None:
            vs = sorted(v for v in self.values if self.contains(v))
            rxs = list(dict.fromkeys(_value_regex(v) for v in vs))
            return None if not rxs else rxs[0] if len(rxs) == 1 else "(?:" + "|".join(rxs) + ")"
        base = self._base()
        if base is None or not self.exclude:
            return base
        f = fsm_sub(regex_fsm(base), regex_fsm("|".join(_value_regex(v) for v in self.exclude)))
        return None if f.empty() else fsm_regex(f, to_regex)

    def _unit(self) -> Fraction | None:
        """The largest number every value is a multiple of (None: any number)."""
        unit = Fraction(1) if self.integer else None
        for m in self.mults:
            f = Fraction(m)
            unit = f if unit is None else Fraction(_lcm(unit.numerator, f.numerator), gcd(unit.denominator,
                                                                                          f.denominator))
        return unit

    def _base(self, plain: bool = False) -> str | None:
        """The regex of the values' plain decimal spellings; ``plain`` (an integer range only):
        without the ``(?:\\.0+)?`` spellings."""
        unit = self._unit()
        lo, lo_x, hi, hi_x = self.lo, self.lo_x, self.hi, self.hi_x
        if unit is None:
            return JSON_NUMBER if lo is None and hi is None else _range_regex(lo, lo_x, hi, hi_x, None)
        if unit.numerator == 1 and re.fullmatch("10*", str(unit.denominator)):  # 1, 0.1, 0.01 ...
            d = len(str(unit.denominator)) - 1
            if d == 0:
                # exact at any magnitude (Decimal's // and % raise DivisionImpossible past 28 digits)
                a = None if lo is None else ceil(Fraction(lo)) + (1 if lo_x and _is_int(lo) else 0)
                b = None if hi is None else floor(Fraction(hi)) - (1 if hi_x and _is_int(hi) else 0)
                return _int_range_regex(a, b, plain)
            return _range_regex(lo, lo_x, hi, hi_x, d)
        if lo is not None and hi is not None:  # enumerate the multiples in range
            k0 = -((-Fraction(lo)) // unit)
            vals = []
            k = k0
            while k * unit <= Fraction(hi):
                v = k * unit
                if not ((v == lo and lo_x) or (v == hi and hi_x)):
                    vals.append(Decimal(v.numerator) / Decimal(v.denominator))
                if len(vals) > MAX_REPEAT:
                    raise Unsupported(f"multipleOf {unit} over a range of more than {MAX_REPEAT} values")
                k += 1
            return NumSpec(values=frozenset(vals)).regex()
        if lo is not None or hi is not None:
            raise Unsupported(f"multipleOf {unit} with a one-sided bound")
        return _multiple_regex(unit)


# Number texts with a fraction or an exponent part (JSON number characters around a . e or E).
NOT_PLAIN = r"[-+.0-9eE]*[.eE][-+.0-9eE]*"


def _multiple_regex(unit: Fraction) -> str:
    """Plain decimals that are multiples of ``unit`` = a / 10**d with a dividing 10**j (j, d <= 3).

    x is a multiple iff X = x * 10**d is an integer (fraction digits past d are zeros) whose last
    j digits are a multiple of a; those digits are the last integer digits and the first d
    fraction digits of x, so the regex enumerates them.
    """
    d = next((d for d in range(4) if 10**d % unit.denominator == 0), None)
    a = None if d is None else unit.numerator * 10**d // unit.denominator
    j = None if a is None else next((j for j in range(4) if 10**j % a == 0), None)
    if d is None or j is None:
        raise Unsupported(f"multipleOf {unit} (only a / 10^d with a dividing 1000 is exact without bounds)")
    nat = "(?:0|[1-9][0-9]*)"

    def frac(pad: str) -> tuple:
        t = pad.rstrip("0")
        zeros = rep(lit("0"), 0, None)
        return alt(EPS, cat(lit("."), rep(lit("0"), 1, None))) if not t else cat(lit("." + t), zeros)

    alts = []
    for v in range(0, 10**j, a):
        s = str(v).zfill(j)
        if j <= d:
            fr = alt(*[frac(str(p).zfill(d - j) + s if d > j else s) for p in range(10 ** (d - j))])
            alts.append(nat + to_regex(fr))
        else:
            si, sf = s[: j - d], s[j - d:]
            ints = f"(?:{int(si)}|[1-9][0-9]*{si})"
            alts.append(ints + to_regex(frac(sf)))
    return "-?(?:" + "|".join(alts) + ")"
