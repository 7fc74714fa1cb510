"""EDN in and out for the model's tool calls: a safe reader and a bounded, lazy writer.

Reading (:func:`read`)
    A model's argument is a JSON string holding one EDN form, ``"(dog ?x)"`` or
    ``"CxWell"``. It is read with :mod:`edn_format` and nothing else: EDN has no
    reader-eval, so nothing in a model's input can run code. Every way the text
    can fail becomes an :class:`EDNRefusal` with a ``type``: a value that is not a
    string, text over :data:`MAX_TEXT_CHARS`, nesting past :data:`MAX_DEPTH`
    (checked by `vaelii_llm.engine.too_deep`, as every EDN reader checks it, before
    the parser sees the text, since edn-format reads 10^5 nested
    parens into a value that overflows the stack of whatever touches it next), an
    unknown ``#tag``, a reader error, no form at all, more than one form, or
    Clojure metadata. :mod:`edn_format` is imported on the first read, because its
    import builds the PLY lexer.

Writing (:func:`write`)
    Prints a read's answer as EDN into a writer that stops at ``max_chars``.
    Each write appends only the room left, so one long symbol name or string
    cannot push past the bound. The walk is iterative (no recursion limit) and
    touches only what it prints: a list, map, set, iterator or generator is
    consumed one member at a time, as far as ``max_chars`` reaches and at most
    one member past it (a cut text then gives the marker's room back), so
    ``itertools.count()``, ``cycle`` and ``repeat`` answers print and return. A
    msgspec ``Struct`` or a dataclass is projected to a map with keyword keys
    (``_`` read as ``-``), one field at a time; a tagged ``Struct`` prints its
    tag first, as msgspec encodes it.

    How a value prints: ``None`` ``nil``; ``True`` ``true``; an int or float as
    EDN reads it back (``##Inf``, ``##NaN``; an int too long for ``str`` in hex);
    a ``str`` as an EDN string (``\\" \\\\ \\n \\t \\r`` escaped, other control
    characters and lone surrogates as ``\\uXXXX``); ``Symbol`` by name,
    ``Keyword`` as ``:name``; a tuple as a list ``( )`` (a sentence); a list, and
    every other iterable, as a vector ``[ ]``; a mapping as ``{k v, k v}``; a set
    as ``#{ }``; ``Decimal`` ``1.5M``; ``Fraction`` ``22/7``; ``UUID`` ``#uuid "…"``;
    ``datetime`` ``#inst "…"``; anything else as a string of its ``repr``.

    A finite value that fits reads back through ``edn_format.loads`` to an equal
    value. A cut result ends with :data:`CUT_MARKER`, an EDN comment line, so a
    reader can tell a cut answer from a whole one; the marker counts against the
    bound (the printed prefix gives up its tail to make room), so the whole text
    is at most ``max_chars`` characters. A walk stopped by its ``deadline`` ends
    with :data:`CLOCK_MARKER` instead. Under a bound shorter than the marker, the
    text is the marker's opening ``max_chars`` characters (still a comment).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from collections.abc import Set
from decimal import Decimal
from fractions import Fraction
from typing import Any
from typing import Final
from typing import NamedTuple

import msgspec

from vaelii_llm.engine import MAX_NESTING
from vaelii_llm.engine import too_deep

__all__ = [
    "CLOCK_MARKER",
    "CUT_MARKER",
    "MAX_DEPTH",
    "MAX_TEXT_CHARS",
    "EDNRefusal",
    "Written",
    "cut",
    "opening_of",
    "read",
    "write",
]

MAX_DEPTH: Final = MAX_NESTING
"""Deepest bracket nesting :func:`read` accepts: the engine's own cap on a sentence
(`vaelii_llm.engine.MAX_NESTING`), so the parser and every consumer of its value
stay off the stack limit."""

MAX_TEXT_CHARS: Final = 32_768
"""Longest argument text :func:`read` accepts. edn-format parses at roughly
135 µs a form, so the bound keeps one argument's read in the milliseconds."""

DEFAULT_MAX_CHARS: Final = 4000
"""How much of an answer a tool call prints unless told otherwise (the tool
surface's ``max_result_chars``, the MCP client's, ``vaelii-llm call
--max-chars``). Held by the writer, which the command reads without loading
the tool surface."""

CUT_MARKER: Final = "\n;; cut: the answer goes on past max_result_chars; ask a narrower question"
"""Appended to a result the writer cut. It is an EDN comment, so it reads as a
note to a model and is skipped by an EDN reader."""


CLOCK_MARKER: Final = "\n;; cut: the clock (max-ms) ran out while the answer was printed"
"""Appended instead of :data:`CUT_MARKER` when a ``deadline`` stopped the walk."""


class EDNRefusal(ValueError):
    """A model argument that is not one readable EDN form.

    ``type`` names what was wrong: ``edn-not-a-string``, ``edn-too-long``,
    ``edn-too-deep``, ``edn-unknown-tag``, ``edn-syntax``, ``edn-empty``,
    ``edn-trailing`` (more than one form) or ``edn-metadata``.
    """

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(message)
        self.type = type_


# -- reading ---------------------------------------------------------------------------

# edn-format builds a fresh PLY parser per call; the lock keeps concurrent worker
# threads from sharing PLY's module-level state while it does.
_PARSE_LOCK = threading.Lock()


def read(text: object, what: str = "argument") -> Any:
    """Read one EDN form from ``text``, a model's argument, or refuse it.

    ``what`` names the argument in the refusal's message. Raises only
    :class:`EDNRefusal`; never evaluates anything.
    """
    if not isinstance(text, str):
        raise EDNRefusal(
            "edn-not-a-string",
            f'{what} must be a JSON string holding EDN, e.g. "(isa Muffet Spider)"; '
            f"got {_json_kind(text)}",
        )
    if len(text) > MAX_TEXT_CHARS:
        raise EDNRefusal(
            "edn-too-long", f"{what} is {len(text)} characters; at most {MAX_TEXT_CHARS} are read"
        )
    if too_deep(text, MAX_DEPTH) is not None:
        raise EDNRefusal("edn-too-deep", f"{what} nests deeper than {MAX_DEPTH} brackets")
    import edn_format  # lazy: its import builds the PLY lexer

    try:
        with _PARSE_LOCK:
            forms = edn_format.loads_all(text)
    except NotImplementedError as exc:  # edn-format's unknown-#tag error
        raise EDNRefusal(
            "edn-unknown-tag", f"{what} holds a #tag; only #inst and #uuid are read"
        ) from exc
    except RecursionError as exc:  # belt and braces under the depth check
        raise EDNRefusal("edn-too-deep", f"{what} nests too deep to read") from exc
    except Exception as exc:  # EDNDecodeError, UnicodeDecodeError, ValueError, …
        raise EDNRefusal("edn-syntax", f"{what} is not EDN: {_short(str(exc))}") from exc
    if not forms:
        raise EDNRefusal("edn-empty", f"{what} holds no EDN form")
    if len(forms) > 1:
        raise EDNRefusal(
            "edn-trailing",
            f'{what} holds {len(forms)} EDN forms; give exactly one, e.g. "(isa Muffet Spider)"',
        )
    if _has_metadata(forms[0], edn_format.MetadataValue):
        raise EDNRefusal("edn-metadata", f"{what} carries ^metadata, which is not read")
    return forms[0]


def _has_metadata(value: object, metadata_type: type) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, metadata_type):
            return True
        if isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, Sequence | Set) and not isinstance(item, str):
            stack.extend(item)
    return False


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


# -- writing ---------------------------------------------------------------------------


class Written(NamedTuple):
    """What :func:`write` printed: ``text`` (ending in :data:`CUT_MARKER` when cut),
    at most the ``max_chars`` it was given, the marker included."""

    text: str
    cut: bool


class _Writer:
    """Appends text until ``room`` runs out; a write past it is cut to the room left."""

    __slots__ = ("cut", "parts", "room")

    def __init__(self, max_chars: int) -> None:
        self.parts: list[str] = []
        self.room = max(0, max_chars)
        self.cut = False

    def write(self, text: str) -> bool:
        """Append ``text``, or as much as fits; False once the writer is full."""
        if len(text) <= self.room:
            self.parts.append(text)
            self.room -= len(text)
            return True
        if self.room:
            self.parts.append(text[: self.room])
            self.room = 0
        self.cut = True
        return False


class _Tok(str):
    """Literal text a frame hands the walker, as opposed to a value to print."""

    __slots__ = ()


_SPACE = _Tok(" ")
_ENTRY_SEP = _Tok(", ")
_OPEN_LIST, _CLOSE_LIST = _Tok("("), _Tok(")")
_OPEN_VEC, _CLOSE_VEC = _Tok("["), _Tok("]")
_OPEN_MAP, _CLOSE_MAP = _Tok("{"), _Tok("}")
_OPEN_SET = _Tok("#{")

_STR_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f\ud800-\udfff]')
_NAMED_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def _escape(text: str) -> str:
    return _STR_ESCAPE.sub(_escape_char, text)


def _write_string(writer: _Writer, text: str) -> bool:
    if not writer.write('"'):
        return False
    # Escaping only lengthens, so escaping one character past the room left is
    # enough to fill it: a long string costs what fits, not what it holds.
    head = text if len(text) <= writer.room else text[: writer.room + 1]
    return writer.write(_escape(head)) and writer.write('"')


def _int_text(value: int) -> str:
    try:
        return int.__repr__(value)
    except ValueError:  # past sys.int_info.str_digits_check_threshold: hex has no limit
        return ("-0x" if value < 0 else "0x") + format(abs(value), "x")


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "##NaN"
    if math.isinf(value):
        return "##Inf" if value > 0 else "##-Inf"
    return float.__repr__(value)


def _struct_frame(value: msgspec.Struct) -> Iterator[object]:
    cls = type(value)
    names: tuple[str, ...] = cls.__struct_fields__
    keys: tuple[str, ...] = getattr(cls, "__struct_encode_fields__", names)
    config = getattr(cls, "__struct_config__", None)
    tag_field = getattr(config, "tag_field", None)
    yield _OPEN_MAP
    if tag_field is not None:  # msgspec encodes a tagged Struct's tag first; so do we
        yield _Tok(":" + tag_field.replace("_", "-"))
        yield _SPACE
        yield config.tag  # type: ignore[union-attr]
    for index, (name, key) in enumerate(zip(names, keys, strict=True)):
        if index or tag_field is not None:
            yield _ENTRY_SEP
        yield _Tok(":" + key.replace("_", "-"))
        yield _SPACE
        yield getattr(value, name)
    yield _CLOSE_MAP


def _dataclass_frame(value: Any) -> Iterator[object]:
    yield _OPEN_MAP
    for index, field in enumerate(dataclasses.fields(value)):
        if index:
            yield _ENTRY_SEP
        yield _Tok(":" + field.name.replace("_", "-"))
        yield _SPACE
        yield getattr(value, field.name)
    yield _CLOSE_MAP


def _map_frame(value: Mapping[Any, Any]) -> Iterator[object]:
    yield _OPEN_MAP
    first = True
    for key, item in value.items():
        if first:
            first = False
        else:
            yield _ENTRY_SEP
        yield key
        yield _SPACE
        yield item
    yield _CLOSE_MAP


def _seq_frame(opener: _Tok, closer: _Tok, items: Iterable[Any]) -> Iterator[object]:
    yield opener
    first = True
    try:
        for item in items:
            if first:
                first = False
            else:
                yield _SPACE
            yield item
    finally:
        if isinstance(items, Iterator):  # an engine generator we stop early: close it
            _close(items)
    yield closer


def _frame(value: object) -> Iterator[object] | str:
    """A frame that prints a compound ``value``; for an atom, its text: a
    :class:`_Tok` printed as it is, any other ``str`` printed as an EDN string."""
    if isinstance(value, msgspec.Struct):
        return _struct_frame(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dataclass_frame(value)
    if isinstance(value, tuple):
        return _seq_frame(_OPEN_LIST, _CLOSE_LIST, value)
    if isinstance(value, Mapping):
        return _map_frame(value)
    if isinstance(value, Set):
        return _seq_frame(_OPEN_SET, _CLOSE_MAP, value)
    text = _atom_text(value)
    if text is not None:
        return text
    try:
        items = iter(value)  # type: ignore[call-overload]
    except TypeError:
        return repr(value)
    return _seq_frame(_OPEN_VEC, _CLOSE_VEC, items)


def _atom_text(value: object) -> str | None:
    """The text of an atom the writer's type table does not hold (a subclass of
    ``str``, ``int`` or ``float``, or a type EDN spells its own way); None for any
    other value."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # IntEnum and friends (bool is in the table)
        return _Tok(_int_text(value))
    if isinstance(value, float):
        return _Tok(_float_text(value))
    if isinstance(value, Decimal):
        return _Tok(str(value) + "M") if value.is_finite() else _Tok(_float_text(float(value)))
    if isinstance(value, Fraction):
        return _Tok(f"{value.numerator}/{value.denominator}")
    if isinstance(value, uuid.UUID):
        return _Tok(f'#uuid "{value}"')
    if isinstance(value, datetime.datetime | datetime.date):
        return _Tok(f'#inst "{value.isoformat()}"')
    edn_format = sys.modules.get("edn_format")  # no Symbol exists before its import
    if edn_format is not None:
        if isinstance(value, edn_format.Symbol):
            return _Tok(value.name)
        if isinstance(value, edn_format.Keyword):
            return _Tok(":" + value.name)
    if isinstance(value, bytes | bytearray | memoryview):
        return repr(value)
    return None


def _write_text(writer: _Writer, text: str) -> bool:
    """A :class:`_Tok` as it is, any other ``str`` as an EDN string."""
    return writer.write(text) if type(text) is _Tok else _write_string(writer, text)


#: How each exact type of atom prints: a writer of it (anything else goes to `_frame`).
_ATOMS: dict[type, Callable[[_Writer, Any], bool]] = {
    _Tok: _Writer.write,
    str: _write_string,
    int: lambda writer, value: writer.write(_int_text(value)),
    float: lambda writer, value: writer.write(_float_text(value)),
    bool: lambda writer, value: writer.write("true" if value else "false"),
    type(None): lambda writer, _: writer.write("nil"),
}


def write(
    value: object,
    max_chars: int,
    *,
    deadline: float | None = None,
    stop: threading.Event | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> Written:
    """Print ``value`` as EDN, at most ``max_chars`` characters of it.

    Pulls from iterators only as far as ``max_chars`` reaches (and one member
    past it), so an infinite answer prints and returns. An exception raised by a
    member being realized (an engine refusal, say) propagates to the caller.

    ``deadline`` (a :func:`time.monotonic` value) stops the walk between two
    members once passed, and the text ends with :data:`CLOCK_MARKER`: the
    backstop for a realization the engine's own clock does not reach. ``stop``
    (set by a caller that went away) ends the walk the same way. ``checkpoint``
    is called before each member is pulled (a worker thread uses it to let other
    threads run).
    """
    writer = _Writer(max_chars)
    stack: list[Iterator[object]] = [iter((value,))]
    clocked_out = False
    atoms = _ATOMS
    try:
        while stack:
            if (deadline is not None and time.monotonic() > deadline) or (
                stop is not None and stop.is_set()
            ):
                clocked_out = True
                break
            if checkpoint is not None:
                checkpoint()
            item = next(stack[-1], _DONE)
            if item is _DONE:
                stack.pop()
                continue
            emit = atoms.get(type(item))
            if emit is None:
                frame = _frame(item)
                if not isinstance(frame, str):
                    stack.append(frame)
                    continue
                ok = _write_text(writer, frame)
            else:
                ok = emit(writer, item)
            if not ok:
                break
    finally:
        for frame in reversed(stack):  # stop what we stopped reading, at once
            _close(frame)
    return _written(writer, max_chars, clocked_out)


def cut(text: str, max_chars: int) -> Written:
    """Plain ``text`` bounded as :func:`write` bounds an answer: at most
    ``max_chars`` of it, the :data:`CUT_MARKER` included when cut (a tool answer
    that arrives as text, such as an MCP server's, is bounded by this)."""
    writer = _Writer(max_chars)
    writer.write(text)
    return _written(writer, max_chars, False)


def _written(writer: _Writer, max_chars: int, clocked_out: bool) -> Written:
    """The writer's text with the marker saying why it stopped, if it stopped; the
    marker takes its room from the text's tail, so the whole stays in ``max_chars``."""
    text = "".join(writer.parts)
    marker = CLOCK_MARKER if clocked_out else CUT_MARKER if writer.cut else None
    if marker is None:
        return Written(text, False)
    bound = max(0, max_chars)
    keep = max(0, min(len(text), bound - len(marker)))
    return Written((text[:keep] + marker)[:bound], True)


_DONE: Final = object()
"""What ``next`` answers for a frame that has nothing more to print."""


def _close(iterator: object) -> None:
    close = getattr(iterator, "close", None)
    if callable(close):
        close()


def opening_of(value: Any) -> str:
    """``value`` for a refusal's message: its opening, or its type's name where
    no opening fits (a list 10⁵ deep) or it cannot be written."""
    try:
        return write(value, 40).text.split("\n", 1)[0] or type(value).__name__
    except Exception:
        return type(value).__name__
