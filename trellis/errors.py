"""The errors trellis raises on purpose, one base for all of them.

``TrellisError`` is the base; ``UsageError`` is an argument, or a combination of arguments, that an
API does not accept (``generate(num_return_sequences=0)``, a temperature below zero, a strategy name
that does not exist). It is a ``ValueError`` too, so code that caught the bare ``ValueError`` these
raised before keeps working. Grammars and schemas that cannot be compiled raise the
``trellis.constrain.errors`` types (``GrammarError`` with file:line:col, ``SchemaError`` with a JSON
pointer), also ``TrellisError``s.
"""

from __future__ import annotations


class TrellisError(Exception):
    """Base of the errors trellis raises on purpose."""


class UsageError(TrellisError, ValueError):
    """An argument (or combination of arguments) the API does not accept; the message says which."""
