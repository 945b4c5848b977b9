"""Typed tool calling with the embedded Gemma 3 270M: the reply is constrained to a valid call of
one of the tools, parsed into a ``ToolCall`` with Python-typed arguments (an ``Operation`` member,
floats), and invoked.

    python examples/tool_calling.py
"""

import enum
from typing import Annotated, Literal

import torch

from trellis import generate
from trellis.constrain.tools import Ge, Le

torch.set_num_threads(1)  # the 2-core dev machines are shared; raise it on your own machine


class Operation(enum.Enum):
    ADD = "add"
    SUBTRACT = "subtract"
    MULTIPLY = "multiply"
    DIVIDE = "divide"


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius",
                days: Annotated[int, Ge(1), Le(7)] = 1) -> str:
    """Get the weather forecast for a city.

    Args:
        city: The city name, e.g. "London".
        unit: The temperature unit.
        days: How many days to forecast.
    """
    return f"{city}: sunny, 21 degrees {unit}, for the next {days} day(s)"


def calculator(operation: Operation, a: float, b: float) -> float:
    """Apply an arithmetic operation to two numbers.

    Args:
        operation: What to do with the numbers.
        a: The first operand.
        b: The second operand.
    """
    return {"add": a + b, "subtract": a - b, "multiply": a * b, "divide": a / b}[operation.value]


tools = [get_weather, calculator]  # plain typed functions; Tool.from_function builds the schemas


def show(question: str, tool_choice: str, **options: object) -> None:
    res = generate(None, question, tools=tools, tool_choice=tool_choice, **options)  # None: embedded Gemma
    print(f"Q: {question}  (tool_choice={tool_choice!r})\n   reply: {res.text.strip()!r}")
    for call in res.tool_calls:
        print(f"   {call}\n   -> invoke(): {call.invoke()!r}")
    if not res.tool_calls:
        print("   no tool call" + ("" if res.finished else " (budget ran out)"))


# "required": the reply must be a call of one of the tools
show("What's the weather like in Tokyo, in fahrenheit?", "required", max_new_tokens=64)
show("Multiply 12 by 7.", "required", max_new_tokens=64)
# a tool name forces that tool
show("Add 25 and 17.", "calculator", max_new_tokens=64)
# "auto": a call or a text answer, the first non-space character decides ("{" = call); a 270M
# base model mostly answers in text here
show("Say hello to the user.", "auto", max_new_tokens=24, stop=["\n"])
