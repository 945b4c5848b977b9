"""The string ``format``s asserted (date-time, email, uri, ipv6, hostname ...) as regexes, and the
integer ranges of the numeric ones (int32, int64)."""

from __future__ import annotations

from trellis.constrain.frontends.pattern import pattern_ir

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_H16 = r"[0-9a-fA-F]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = ("(?:" + "|".join([  # RFC 3986 IPv6address
    rf"(?:{_H16}:){{6}}{_LS32}",
    rf"::(?:{_H16}:){{5}}{_LS32}",
    rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
    rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
]) + ")")
_LEAP = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
_DATE = (r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
         rf"|02-(?:0[1-9]|1[0-9]|2[0-8]))|{_LEAP}-02-29)")
_HH, _MM, _FRAC = r"(?:[01][0-9]|2[0-3])", r"[0-5][0-9]", r"(?:\.[0-9]+)?"
_TIME = rf"(?:{_HH}:{_MM}:{_MM}{_FRAC}(?:[Zz]|[+-]{_HH}:{_MM})|23:59:60{_FRAC}(?:[Zz]|[+-]00:00))"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_LDH = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_EMAIL = (rf"(?:{_ATEXT}+(?:\.{_ATEXT}+)*|\"(?:[ !#-\[\]-~]|\\[ -~])*\")"
          rf"@(?:{_LDH}(?:\.{_LDH})*|\[{_IPV4}\]|\[[Ii][Pp][Vv]6:{_IPV6}\])")


def _label(n: int) -> str:
    """LDH labels of 1..n characters, without "--" in positions 3-4 (RFC 5891 reserves those for
    A-labels, whose punycode validity a regex cannot check: they are rejected)."""
    x, h = "[A-Za-z0-9]", "[A-Za-z0-9-]"
    return rf"{x}(?:{x}|{h}(?:{x}|{x}{x}|-{x}|(?:{x}{h}|-{x}){h}{{0,{n - 5}}}{x}))?"


_HOSTNAME = (rf"(?:{_label(63)}(?:\.{_label(63)}){{0,2}}(?:\.{_label(61)})?"
             rf"|{_label(30)}(?:\.{_label(30)}){{4,7}}|{_label(20)}(?:\.{_label(20)}){{8,11}})")
_UNRES, _SUBD, _PCT = r"A-Za-z0-9\-._~", r"!$&'()*+,;=", r"%[0-9a-fA-F]{2}"
_PCHAR = rf"(?:[{_UNRES}{_SUBD}:@]|{_PCT})"
_SEG, _SEG_NZ = rf"{_PCHAR}*", rf"{_PCHAR}+"
_QF = rf"(?:{_PCHAR}|[/?])*"
_HOST = (rf"(?:\[(?:{_IPV6}|[vV][0-9a-fA-F]+\.[{_UNRES}{_SUBD}:]+)\]"
         rf"|(?:[{_UNRES}{_SUBD}]|{_PCT})*)")
_AUTH = rf"(?:(?:[{_UNRES}{_SUBD}:]|{_PCT})*@)?{_HOST}(?::[0-9]*)?"
_PATHS = rf"//{_AUTH}(?:/{_SEG})*|/(?:{_SEG_NZ}(?:/{_SEG})*)?"
_URI = rf"[A-Za-z][A-Za-z0-9+\-.]*:(?:{_PATHS}|{_SEG_NZ}(?:/{_SEG})*|)(?:\?{_QF})?(?:#{_QF})?"
_RELREF = rf"(?:{_PATHS}|(?:[{_UNRES}{_SUBD}@]|{_PCT})+(?:/{_SEG})*|)(?:\?{_QF})?(?:#{_QF})?"
STRING_FORMATS = {
    "date-time": rf"{_DATE}[Tt]{_TIME}",
    "date": _DATE,
    "time": _TIME,
    "email": _EMAIL,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "uri": _URI,
    "uri-reference": rf"(?:{_URI}|{_RELREF})",
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "hostname": _HOSTNAME,
}
NUMBER_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# Every format a JSON Schema draft (04 to 2020-12) defines. Any other name ("url", "byte", "semver")
# is an unknown format, which the specs make an annotation: it never fails validation.
SPEC_FORMATS = frozenset({
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4",
    "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
    "relative-json-pointer", "regex"})
_FORMAT_IR: dict[str, tuple] = {}


def format_ir(name: str) -> tuple:
    ir = _FORMAT_IR.get(name)
    if ir is None:
        ir = _FORMAT_IR[name] = pattern_ir(f"^{STRING_FORMATS[name]}$")
    return ir
