"""Typed tool calling: schemas from Python types, docstrings, argument conversion, the call grammar,
constrained generation with tiny models, and one Gemma call of a weather tool."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Annotated, Any, Literal, Optional, Sequence, TypedDict

import annotated_types as at
import jsonschema
import pytest
from pydantic import BaseModel, Field
from typing_extensions import NotRequired

from fakes import BigramLM, HashLM
from trellis import generate
from trellis.constrain.regex_constraint import Regex
from trellis.constrain.tools import (EitherConstraint, Ge, Keywords, Le, MaxLen, MinLen, Pattern, Tool, ToolCall,
                                     ToolCallError, call_schema, format_tools_prompt, parse_docstring,
                                     parse_tool_calls, text_pattern, tool_constraint)
from trellis.mask import allocate_bitmask
from trellis.models import ModelHandle
from trellis.tokens import Vocabulary

V = jsonschema.Draft202012Validator


# ----------------------------------------------------------------------------- fixtures: types


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass(frozen=True)
class Point:
    """A point in the plane.

    Attributes:
        x: horizontal position
        y: vertical position
    """

    x: float
    y: float = 0.0


@dataclasses.dataclass
class Path:
    points: list[Point]
    label: str = dataclasses.field(default="", metadata={"description": "a name"})


class Options(TypedDict, total=False):
    verbose: bool
    depth: int


class Query(TypedDict):
    text: str
    limit: NotRequired[int]


class Address(BaseModel):
    street: str
    zip: Annotated[str, Field(pattern=r"[0-9]{5}", description="postal code")]


class Person(BaseModel):
    name: str
    home: Address
    work: Optional[Address] = None


class Recursive(BaseModel):
    value: int
    children: list["Recursive"] = []


def schema_of(tp: Any) -> dict[str, Any]:
    def f(x):  # noqa: ANN001 - annotated below
        return x

    f.__annotations__ = {"x": tp}
    return Tool.from_function(f).parameters["properties"]["x"]


# ----------------------------------------------------------------------------- schemas


@pytest.mark.parametrize("tp, expected", [
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (str, {"type": "string"}),
    (None, {"type": "null"}),
    (Any, {}),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    (Literal[1, "x"], {"enum": [1, "x"]}),
    (Unit, {"type": "string", "enum": ["celsius", "fahrenheit"]}),
    (Level, {"type": "integer", "enum": [1, 2]}),
    (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
    (list[str], {"type": "array", "items": {"type": "string"}}),
    (Sequence[int], {"type": "array", "items": {"type": "integer"}}),
    (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
    (tuple[int, str], {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False,
                       "minItems": 2, "maxItems": 2}),
    (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
    (dict, {"type": "object"}),
    (list, {"type": "array"}),
    (Annotated[int, at.Ge(0), at.Lt(10)], {"type": "integer", "minimum": 0, "exclusiveMaximum": 10}),
    (Annotated[float, at.Interval(gt=0, le=1)], {"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
    (Annotated[int, at.MultipleOf(5)], {"type": "integer", "multipleOf": 5}),
    (Annotated[str, at.Len(1, 3)], {"type": "string", "minLength": 1, "maxLength": 3}),
    (Annotated[list[int], at.MinLen(2)], {"type": "array", "items": {"type": "integer"}, "minItems": 2}),
    (Annotated[int, Ge(0), Le(10)], {"type": "integer", "minimum": 0, "maximum": 10}),
    (Annotated[str, MinLen(1), MaxLen(8), Pattern("[a-z]+")],
     {"type": "string", "minLength": 1, "maxLength": 8, "pattern": "[a-z]+"}),
    (Annotated[str, Keywords(format="date")], {"type": "string", "format": "date"}),
    (Annotated[str, "the city"], {"type": "string", "description": "the city"}),
    (Annotated[str, at.doc("the city")], {"type": "string", "description": "the city"}),
    (Annotated[int, Field(ge=1, description="count")], {"type": "integer", "minimum": 1, "description": "count"}),
    (Point, {"type": "object", "properties": {"x": {"type": "number", "description": "horizontal position"},
                                             "y": {"type": "number", "description": "vertical position"}},
             "required": ["x"], "additionalProperties": False}),
    (Options, {"type": "object", "properties": {"verbose": {"type": "boolean"}, "depth": {"type": "integer"}},
               "additionalProperties": False}),
    (Query, {"type": "object", "properties": {"text": {"type": "string"}, "limit": {"type": "integer"}},
             "required": ["text"], "additionalProperties": False}),
])
def test_schema_of_annotation(tp: Any, expected: dict[str, Any]) -> None:
    got = schema_of(tp)
    assert got == expected
    V.check_schema(got)


def test_nested_dataclass_schema_and_field_description() -> None:
    got = schema_of(Path)
    assert got["properties"]["points"]["items"] == schema_of(Point)
    assert got["properties"]["label"] == {"type": "string", "description": "a name"}
    assert got["required"] == ["points"]


def test_pydantic_models_hoist_defs() -> None:
    def register(person: Person, tags: list[str] | None = None) -> str:
        return person.name

    params = Tool.from_function(register).parameters
    V.check_schema(params)
    assert params["properties"]["person"]["properties"]["home"] == {"$ref": "#/$defs/Address"}
    assert set(params["$defs"]) == {"Address"}
    assert params["$defs"]["Address"]["properties"]["zip"]["pattern"] == "[0-9]{5}"
    good = {"person": {"name": "Ada", "home": {"street": "Main", "zip": "12345"}}}
    V(params).validate(good)
    assert not V(params).is_valid({"person": {"name": "Ada", "home": {"street": "Main", "zip": "1"}}})


def test_from_function_full_example() -> None:
    def get_weather(city: Annotated[str, MinLen(1)], unit: Unit = Unit.C, days: Annotated[int, Ge(1), Le(7)] = 1,
                    hourly: bool = False) -> str:
        """Get the weather forecast for a city.

        Args:
            city: The city name,
                e.g. "Paris".
            unit (Unit): Temperature unit.
            days: How many days ahead.

        Returns:
            A short forecast.
        """
        return f"{city}: sunny, 21 {unit.value}, {days} days"

    t = Tool.from_function(get_weather)
    assert t.name == "get_weather" and t.description == "Get the weather forecast for a city."
    assert t.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1, "description": 'The city name, e.g. "Paris".'},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit."},
            "days": {"type": "integer", "minimum": 1, "maximum": 7, "description": "How many days ahead."},
            "hourly": {"type": "boolean"},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    V.check_schema(t.parameters)
    assert t.to_openai()["function"]["name"] == "get_weather"


# ----------------------------------------------------------------------------- docstrings

GOOGLE = '''Add two numbers.

    More detail
    over two lines.

    Args:
        a (int): The first
            number.
        b: The second number.
        *rest: ignored

    Returns:
        int: the sum
    '''

NUMPY = '''Add two numbers.

    Parameters
    ----------
    a : int
        The first number.
    b, c : float, optional
        Other numbers.

    Returns
    -------
    int
        The sum.
    '''

REST = '''Add two numbers.

    :param a: The first
        number.
    :param int b: The second number.
    :type b: int
    :returns: the sum
    '''


def test_docstring_google() -> None:
    desc, params = parse_docstring(GOOGLE)
    assert desc == "Add two numbers.\nMore detail over two lines."
    assert params == {"a": "The first number.", "b": "The second number.", "rest": "ignored"}


def test_docstring_numpy() -> None:
    desc, params = parse_docstring(NUMPY)
    assert desc == "Add two numbers."
    assert params == {"a": "The first number.", "b": "Other numbers.", "c": "Other numbers."}


def test_docstring_rest() -> None:
    desc, params = parse_docstring(REST)
    assert desc == "Add two numbers."
    assert params == {"a": "The first number.", "b": "The second number."}


def test_docstring_empty_and_plain() -> None:
    assert parse_docstring(None) == ("", {})
    assert parse_docstring("Just a line.") == ("Just a line.", {})


# ----------------------------------------------------------------------------- conversion, invoke


def plan(start: Point, stops: list[Point], mode: Literal["walk", "bike"], unit: Unit, level: Level,
         pair: tuple[int, str], opts: Options, query: Query, person: Person, scale: float = 1.0,
         note: str | None = None, weights: dict[str, int] | None = None) -> dict[str, Any]:
    """Plan a trip."""
    return dict(start=start, stops=stops, mode=mode, unit=unit, level=level, pair=pair, opts=opts, query=query,
                person=person, scale=scale, note=note, weights=weights)


PLAN_ARGS = {
    "start": {"x": 1, "y": 2.5}, "stops": [{"x": 0}, {"x": 3, "y": 4}], "mode": "bike", "unit": "fahrenheit",
    "level": 2, "pair": [7, "z"], "opts": {"verbose": True}, "query": {"text": "q"},
    "person": {"name": "Ada", "home": {"street": "Main", "zip": "12345"}}, "scale": 2, "note": None,
    "weights": {"a": 1},
}


def test_arguments_convert_to_declared_types_and_invoke() -> None:
    tool = Tool.from_function(plan)
    V(tool.parameters).validate(PLAN_ARGS)
    call = tool.call(PLAN_ARGS)
    a = call.arguments
    assert a["start"] == Point(1.0, 2.5) and isinstance(a["start"].x, float)
    assert a["stops"] == [Point(0.0), Point(3.0, 4.0)]
    assert a["mode"] == "bike" and a["unit"] is Unit.F and a["level"] is Level.HIGH
    assert a["pair"] == (7, "z") and a["opts"] == {"verbose": True} and a["query"] == {"text": "q"}
    assert isinstance(a["person"], Person) and a["person"].home.zip == "12345"
    assert a["scale"] == 2.0 and isinstance(a["scale"], float) and a["note"] is None
    assert call.to_json() == {"name": "plan", "arguments": PLAN_ARGS}
    out = call.invoke()
    assert out["start"] == Point(1.0, 2.5) and out["weights"] == {"a": 1}


def test_invoke_positional_only_and_defaults() -> None:
    def power(base: int, exp: int = 2, /, *, mod: int | None = None) -> int:
        return pow(base, exp, mod)

    tool = Tool.from_function(power)
    assert tool.call({"base": 3}).invoke() == 9
    assert tool.call({"base": 3, "exp": 3, "mod": 5}).invoke() == 2
    assert tool.parameters["required"] == ["base"]


def test_invoke_without_function_and_schema_tools_keep_json() -> None:
    tool = Tool.from_schema("lookup", {"type": "object", "properties": {"id": {"type": "integer"}}}, description="d")
    call = tool.call({"id": 3})
    assert call.arguments == {"id": 3}
    with pytest.raises(ValueError, match="no Python function"):
        call.invoke()
    assert ToolCall("x", {}).tool is None
    with pytest.raises(ValueError, match="no Python function"):
        ToolCall("x", {}).invoke()


def test_from_openai_both_shapes() -> None:
    inner = {"name": "f", "description": "does f", "parameters": {"type": "object", "properties": {}}}
    a = Tool.from_openai({"type": "function", "function": inner})
    b = Tool.from_openai(inner)
    assert a == b and a.description == "does f" and a.to_openai() == {"type": "function", "function": inner}
    assert Tool.from_openai({"type": "function", "function": {"name": "g"}}).parameters["type"] == "object"
    assert Tool.from_schema("h", '{"type": "object"}').parameters == {"type": "object"}
    with pytest.raises(ValueError, match="OpenAI"):
        Tool.from_openai({"type": "function", "function": {"description": "no name"}})


@pytest.mark.parametrize("bad, arguments, match", [
    ("start", {"x": "one"}, "plan/start/x: expected a number"),
    ("mode", "car", "expected one of"),
    ("unit", "kelvin", "expected a Unit value"),
    ("pair", [1, "a", 2], "array of 2 items"),
    ("opts", {"colour": 1}, "unexpected keys"),
    ("query", {"limit": 1}, "missing keys"),
    ("person", {"name": "Ada"}, "validation error"),
    ("note", 3, "str or NoneType"),
])
def test_conversion_errors_name_the_path(bad: str, arguments: Any, match: str) -> None:
    with pytest.raises(ToolCallError, match=match):
        Tool.from_function(plan).call({**PLAN_ARGS, bad: arguments})


def test_call_errors() -> None:
    tool = Tool.from_function(plan)
    with pytest.raises(ToolCallError, match="missing required"):
        tool.call({"start": {"x": 1}})
    with pytest.raises(ToolCallError, match="unexpected argument"):
        tool.call({**PLAN_ARGS, "speed": 3})


# ----------------------------------------------------------------------------- refused annotations


def test_unsupported_annotations_name_the_parameter() -> None:
    def f1(a: int, when: complex) -> None: ...

    def f2(a, b: int) -> None: ...  # noqa: ANN001

    def f3(*xs: int) -> None: ...

    def f4(m: dict[int, str]) -> None: ...

    def f5(x: Annotated[int, object()]) -> None: ...

    def f6(x: Annotated[bool, MinLen(1)]) -> None: ...

    with pytest.raises(TypeError, match="parameter 'when' of f1: unsupported type annotation"):
        Tool.from_function(f1)
    with pytest.raises(TypeError, match="parameter 'a' of f2: missing type annotation"):
        Tool.from_function(f2)
    with pytest.raises(TypeError, match=r"parameter 'xs' of f3: \*args"):
        Tool.from_function(f3)
    with pytest.raises(TypeError, match="parameter 'm' of f4: dict keys must be str"):
        Tool.from_function(f4)
    with pytest.raises(TypeError, match="parameter 'x' of f5: unsupported Annotated metadata"):
        Tool.from_function(f5)
    with pytest.raises(TypeError, match="parameter 'x' of f6: MinLen applies to strings"):
        Tool.from_function(f6)


@dataclasses.dataclass
class Node:
    value: int
    children: list[Node]


def test_recursive_dataclass_is_refused_but_pydantic_recursion_works() -> None:
    def walk(tree: Node) -> int: ...

    with pytest.raises(TypeError, match="recursive type Node"):
        Tool.from_function(walk)

    def walk2(tree: Recursive) -> int:
        return tree.value + sum(walk2(c) for c in tree.children)

    t = Tool.from_function(walk2)
    V.check_schema(t.parameters)
    assert t.call({"tree": {"value": 1, "children": [{"value": 2}]}}).invoke() == 3
    schema = call_schema([t])
    V(schema).validate({"name": "walk2", "arguments": {"tree": {"value": 1, "children": [{"value": 2}]}}})
    assert not V(schema).is_valid({"name": "walk2", "arguments": {"tree": {"value": 1, "children": [{"v": 2}]}}})


def test_tool_validation() -> None:
    with pytest.raises(ValueError, match="object"):
        Tool.from_schema("f", {"type": "string"})
    with pytest.raises(ValueError, match="name"):
        Tool.from_function(lambda x: x)
    with pytest.raises(ValueError, match="duplicate tool names"):
        call_schema([Tool("a"), Tool("a")])
    with pytest.raises(ValueError, match="names no tool"):
        call_schema([Tool("a")], tool_choice="b")


# ----------------------------------------------------------------------------- call schema, parsing


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def echo(text: str, times: Annotated[int, Ge(1), Le(3)] = 1) -> str:
    """Repeat text."""
    return text * times


def test_call_schema_shapes_validate_with_jsonschema() -> None:
    s = call_schema([add, echo])
    V.check_schema(s)
    v = V(s)
    assert v.is_valid({"name": "add", "arguments": {"a": 1, "b": 2}})
    assert not v.is_valid({"name": "add", "arguments": {"text": "x"}})  # the name decides the arguments
    assert not v.is_valid({"name": "mul", "arguments": {"a": 1, "b": 2}})
    assert list(s["anyOf"][0]["properties"]) == ["name", "arguments"]  # name is written first
    only = call_schema([add, echo], tool_choice="echo")
    assert only["properties"]["name"] == {"const": "echo"}
    par = V(call_schema([add, echo], parallel=True))
    assert par.is_valid([{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "echo", "arguments": {"text": "x"}}])
    assert not par.is_valid([])


def test_call_schema_moves_local_refs_of_schema_tools() -> None:
    params = {"type": "object", "definitions": {"id": {"type": "integer", "minimum": 0}},
              "properties": {"a": {"$ref": "#/definitions/id"}, "b": {"$ref": "#/properties/a"}},
              "required": ["a", "b"]}
    other = {"type": "object", "$defs": {"id": {"type": "string"}}, "properties": {"s": {"$ref": "#/$defs/id"}}}
    s = call_schema([Tool.from_schema("f", params), Tool.from_schema("g", other)], parallel=True)
    V.check_schema(s)
    assert set(s["$defs"]) == {"id", "id_2"}  # clashing definitions renamed
    v = V(s)
    assert v.is_valid([{"name": "f", "arguments": {"a": 1, "b": 2}}, {"name": "g", "arguments": {"s": "x"}}])
    assert not v.is_valid([{"name": "f", "arguments": {"a": 1, "b": -2}}])
    assert not v.is_valid([{"name": "g", "arguments": {"s": 1}}])


def test_parse_tool_calls() -> None:
    tools = [Tool.from_function(add), Tool.from_function(echo)]
    assert parse_tool_calls("The answer is 3.", tools) == []
    assert parse_tool_calls(None, tools) == []
    [c] = parse_tool_calls(' {"name": "add", "arguments": {"a": 1, "b": 2}}', tools)
    assert c == ToolCall("add", {"a": 1, "b": 2}) and c.invoke() == 3
    assert parse_tool_calls('[{"name": "echo", "arguments": {"text": "x"}}]', tools) == []  # text unless parallel
    calls = parse_tool_calls('[{"name": "echo", "arguments": {"text": "ab", "times": 2}}, '
                             '{"name": "add", "arguments": {"a": 1, "b": 1}}]', tools, parallel=True)
    assert [c.invoke() for c in calls] == ["abab", 2]
    lenient = parse_tool_calls('Sure! {"name": "add", "arguments": {"a": 2, "b": 2}} done', tools, lenient=True)
    assert lenient[0].invoke() == 4
    for bad, match in [('{"name": "mul", "arguments": {}}', "unknown tool"), ('{"name": "add"}', "a call is"),
                       ('{"name": "add", "arguments": {"a": 1}}', "missing required"), ('{"name": ', "invalid JSON")]:
        with pytest.raises(ToolCallError, match=match):
            parse_tool_calls(bad, tools)


def test_format_tools_prompt_lists_tools() -> None:
    p = format_tools_prompt([Tool.from_function(add), Tool.from_function(echo)], "What is 2+2?")
    assert "- add: Add two integers." in p and '"minimum": 1' in p and p.endswith("Request: What is 2+2?\nTool call or answer:")


# ----------------------------------------------------------------------------- the union constraint

BYTES = tuple(bytes([b]) for b in range(32, 127)) + (b"\n",)


def byte_vocab(extra: tuple[bytes, ...] = ()) -> Vocabulary:
    toks = (b"",) + BYTES + extra
    return Vocabulary(toks, eos=frozenset({0}), special=frozenset({0}))


def _allowed(c: Any, state: Any, n: int) -> set[int]:
    row = allocate_bitmask(1, n)[0]
    c.fill_mask(state, row)
    bits = [(int(row[i // 32]) >> (i % 32)) & 1 for i in range(n)]
    return {i for i, b in enumerate(bits) if b}


def test_either_constraint_is_the_exact_union() -> None:
    vocab = byte_vocab((b"ab", b"ba", b"abc"))
    a, b = Regex("(ab)+").compile(vocab), Regex("a[bc]?c").compile(vocab)
    u = EitherConstraint(a, b)
    n = len(vocab)

    def ok(c: Any, data: bytes) -> bool:
        s = c.start()
        for t in data:
            s = c.advance(s, vocab.tokens.index(bytes([t])))
            if s is None:
                return False
        return True

    for prefix in [b"", b"a", b"ab", b"abab", b"ac", b"abc"]:
        su, sa, sb = u.start(), a.start(), b.start()
        for ch in prefix:
            t = vocab.tokens.index(bytes([ch]))
            su = u.advance(su, t)
            sa = a.advance(sa, t) if sa is not None else None
            sb = b.advance(sb, t) if sb is not None else None
        want = set()
        for s, c in ((sa, a), (sb, b)):
            if s is not None:
                want |= _allowed(c, s, n)
        assert _allowed(u, su, n) == want
        assert u.is_accepting(su) == any(s is not None and c.is_accepting(s) for s, c in ((sa, a), (sb, b)))
    assert ok(u, b"abab") and ok(u, b"acc"[:2]) and not ok(u, b"aca")


def test_text_pattern_excludes_call_markers() -> None:
    from trellis.constrain.automata.regex import regex_to_byte_dfa

    single, par = regex_to_byte_dfa(text_pattern()), regex_to_byte_dfa(text_pattern(parallel=True))
    assert single.matches(b"  Hello {x}") and single.matches("é".encode()) and single.matches(b"[1]")
    assert not single.matches(b"") and not single.matches(b"  ") and not single.matches(b' {"a": 1}')
    assert not par.matches(b"\n[1]") and par.matches(b"x[1]")


# ----------------------------------------------------------------------------- constrained generation

JSON_PIECES = (b'{"', b'":', b'",', b'"}', b'name', b'arguments', b'add', b'echo', b' {', b'}}', b'"text":', b", ",
               b"12", b"true")


PROMPT = [len(BYTES)]  # the token b"\n"


def tiny_handle(lm: Any) -> tuple[ModelHandle, Vocabulary]:
    vocab = byte_vocab(JSON_PIECES)
    lm.vocab_size = len(vocab)
    return ModelHandle(model=lm, tokenizer=None, vocab=vocab, name="tiny"), vocab


def steer_to(handle: ModelHandle, vocab: Vocabulary, want: bytes) -> None:
    """Make the bigram model like the bytes of ``want`` after the prompt token (``PROMPT``), so
    random samples look like calls."""
    idx = {t: i for i, t in enumerate(vocab.tokens)}
    table = handle.model.table
    want = b"\n" + want
    for x, y in zip(want, want[1:]):
        table[idx[bytes([x])], idx[bytes([y])]] += 4.0


@pytest.mark.parametrize("choice, parallel", [("required", False), ("echo", False), ("required", True)])
def test_sampled_calls_always_parse_into_valid_tool_calls(choice: str, parallel: bool) -> None:
    handle, vocab = tiny_handle(BigramLM(len(byte_vocab(JSON_PIECES)), seed=1, scale=1.0))
    steer_to(handle, vocab, b'{"name": "add", "arguments": {"a": 12, "b": 3}}')
    tools = [Tool.from_function(add), Tool.from_function(echo)]
    schema = V(call_schema(tools, tool_choice=choice, parallel=parallel))
    finished = 0
    for seed in range(12):
        res = generate(handle, PROMPT, tools=tools, tool_choice=choice, parallel_tool_calls=parallel,
                       temperature=1.0, seed=seed, max_new_tokens=160)
        if not res.finished:
            continue  # the budget ran out mid-call: no call to check
        finished += 1
        data = json.loads(res.text)
        schema.validate(data)
        assert res.tool_calls and all(isinstance(c, ToolCall) for c in res.tool_calls)
        assert [c.to_json() for c in res.tool_calls] == (data if parallel else [data])
        if choice == "echo":
            assert all(c.name == "echo" for c in res.tool_calls)
        for c in res.tool_calls:
            c.invoke()
    assert finished >= 3


def test_auto_mode_gives_text_or_a_valid_call() -> None:
    handle, vocab = tiny_handle(BigramLM(len(byte_vocab(JSON_PIECES)), seed=2, scale=1.0))
    steer_to(handle, vocab, b'{"name": "add", "arguments": {"a": 12, "b": 3}}')
    tools = [Tool.from_function(add)]
    kinds = set()
    for seed in range(16):
        res = generate(handle, PROMPT, tools=tools, temperature=1.0, seed=seed, max_new_tokens=80)
        text = res.text
        if text.lstrip().startswith("{"):
            kinds.add("call")
            if res.finished:
                assert len(res.tool_calls) == 1 and res.tool_calls[0].name == "add"
        else:
            kinds.add("text")
            assert res.tool_calls == () and text.strip()
    assert kinds == {"call", "text"}


def test_generate_tools_argument_errors() -> None:
    handle, _ = tiny_handle(HashLM(len(byte_vocab(JSON_PIECES))))
    with pytest.raises(ValueError, match="either grammar= or tools="):
        generate(handle, PROMPT, tools=[add], grammar="json.lark")


def test_greedy_stream_carries_tool_calls() -> None:
    handle, vocab = tiny_handle(BigramLM(len(byte_vocab(JSON_PIECES)), seed=3, scale=0.5))
    steer_to(handle, vocab, b'{"name": "echo", "arguments": {"text": "hi"}}')
    stream = generate(handle, PROMPT, tools=[echo], tool_choice="required", max_new_tokens=200, stream=True)
    text = "".join(stream)
    res = stream.result
    assert res.text == text
    if res.finished:
        assert res.tool_calls[0].name == "echo"


def _accepts(c: Any, vocab: Vocabulary, text: str) -> bool:
    s = c.start()
    for b in text.encode():
        s = c.advance(s, vocab.tokens.index(bytes([b])))
        if s is None:
            return False
    return c.is_accepting(s)


@pytest.mark.parametrize("choice", ["required", "auto", "none"])
def test_constraint_accepts_exactly_the_valid_calls(choice: str) -> None:
    vocab = byte_vocab(JSON_PIECES)
    tools = [add, echo]
    c = tool_constraint(tools, vocab, tool_choice=choice)
    v = V(call_schema(tools))
    calls = ['{"name": "add", "arguments": {"a": 1, "b": -2}}', '{"name":"add","arguments":{"a":1,"b":2}}',
             ' {"name": "echo", "arguments": {"text": "hi", "times": 3}}', '{"name": "echo", "arguments": {"text": "x"}}',
             '{"name": "echo", "arguments": {"text": "hi", "times": 4}}', '{"name": "add", "arguments": {"a": 1}}',
             '{"name": "add", "arguments": {"text": "x"}}', '{"name": "mul", "arguments": {"a": 1, "b": 2}}',
             '{"name": "add", "arguments": {"a": 1, "b": 2, "c": 3}}', '{"arguments": {"a": 1, "b": 2}, "name": "add"}',
             '{"name": "add", "arguments": {"a": 1.5, "b": 2}}']
    for text in calls:  # the grammar's one narrowing: "name" comes first, so the name decides
        want = v.is_valid(json.loads(text)) and text.lstrip().startswith('{"name"') and choice != "none"
        assert _accepts(c, vocab, text) == want, text
    for text in ["Hello there.", " 42", "x {not a call"]:
        assert _accepts(c, vocab, text) == (choice != "required"), text
    assert not _accepts(c, vocab, "  ")


def test_call_grammar_rejects_repeated_keys() -> None:
    vocab = byte_vocab(JSON_PIECES)
    c = tool_constraint([add], vocab, tool_choice="required")
    assert _accepts(c, vocab, '{"name": "add", "arguments": {"a": 1, "b": 2}}')
    assert not _accepts(c, vocab, '{"name": "add", "arguments": {"a": 1, "b": 2, "b": 2}}')
    assert not _accepts(c, vocab, '{"name": "add", "arguments": {"a": 1, "b": 2}, "name": "add"}')


# ----------------------------------------------------------------------------- Gemma


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
    """Get the current weather in a city.

    Args:
        city: The city name, e.g. "London".
    """
    return f"Sunny, 21 degrees {unit} in {city}"


@pytest.mark.model
def test_gemma_calls_the_weather_tool(gemma) -> None:
    """The README example: Gemma 3 270M picks the city and the unit from the request."""
    res = generate(gemma, "What's the weather like in Tokyo, in fahrenheit?", tools=[get_weather],
                   tool_choice="required", max_new_tokens=48)
    assert res.finished, res.text
    [call] = res.tool_calls
    assert call.name == "get_weather" and call.arguments == {"city": "Tokyo", "unit": "fahrenheit"}
    assert call.invoke() == "Sunny, 21 degrees fahrenheit in Tokyo"
