"""Reading one KB tool call's arguments, before and in the worker thread.

Before anything is read: the shape the input selects (:func:`select_shape`), the
input's size (:func:`input_chars`) and its arrays' declared bounds
(:func:`check_sizes`). In the worker: the options checked into the op's declared
Struct, then every other argument read (EDN, never evaluated) under the call's
clock (:func:`prepare`). Every refusal is a :class:`ToolRefusal` whose type
starts its message.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing import Final

from vaelii_llm import _edn as edn
from vaelii_llm import engine as engine_mod
from vaelii_llm._json_walk import atoms
from vaelii_llm.tools._schemas import Param
from vaelii_llm.tools._schemas import Shape
from vaelii_llm.tools._schemas import Tool

__all__ = [
    "CLOCK_GRACE_S",
    "MAX_INPUT_CHARS",
    "PreparedCall",
    "ToolRefusal",
    "check_sizes",
    "input_chars",
    "prepare",
    "select_shape",
]

CLOCK_GRACE_S: Final = 0.1
"""How long past a read's ``max-ms`` the printer keeps realizing before it cuts the
answer itself. The engine's own clock normally ends the answer first, with a
record saying so; this is the backstop for one it does not reach."""

MAX_INPUT_CHARS: Final = 2 * edn.MAX_TEXT_CHARS
"""The most a call's input may hold, counted as its JSON spelling roughly runs
(every string's length, a few characters per other member), before any of it is
read: a bigger input is refused ``input-too-large`` on the loop, at a cost bounded
by the cap, whatever it holds."""

_EDN_KINDS: Final = frozenset({"sentence", "context", "term"})


class ToolRefusal(Exception):
    """A call the tools refuse before (or instead of) reaching the engine.

    ``type``: ``unknown-tool``, ``bad-input``, ``missing-argument``,
    ``unexpected-argument`` or ``bad-argument``. (An option is refused by the
    engine's ``check_options``: ``unknown-option``, ``bad-option``, ``over-ceiling``.)
    """

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(f"{type_}: {message}")
        self.type = type_


def select_shape(tool: Tool, given: Mapping[str, Any]) -> Shape:
    """The longest shape ``given`` fully satisfies; refuses an argument it does not take.
    A ``null`` counts as absent for a name some shape takes; a name no shape takes is
    refused whatever its value (the schema's ``additionalProperties: false``)."""
    supplied = {k for k, v in given.items() if v is not None}
    named = {name for s in tool.shapes for name in s.names}
    strays = {k for k, v in given.items() if v is None and k not in named}
    fitting = [s for s in tool.shapes if set(s.names) <= supplied]
    every = " | ".join(s.spelled() for s in tool.shapes)
    if not fitting:
        raise ToolRefusal(
            "missing-argument",
            f"{tool.name} was given {_spell(supplied)}, which completes none of its "
            f"shapes; its shapes are {every}",
        )
    shape = max(fitting, key=lambda s: s.size)  # first declared wins a tie
    supplied |= strays
    extra = sorted(supplied - set(shape.names))
    if extra:
        wider = [s for s in tool.shapes if supplied <= set(s.names)]
        hint = ""
        if wider:
            best = min(wider, key=lambda s: s.size)
            hint = f"; {best.spelled()} takes them and also needs " + _spell(
                set(best.names) - supplied
            )
        raise ToolRefusal(
            "unexpected-argument",
            f"{tool.name} was given {_spell(extra)}, which the shape the input selected, "
            f"{shape.spelled()}, does not take; an argument is never dropped{hint}. "
            f"Its shapes are {every}",
        )
    return shape


def check_sizes(tool: Tool, shape: Shape, given: Mapping[str, Any]) -> None:
    """Refuse, before anything is read, an array argument longer than the op declares
    (``over-ceiling``, as the engine says it)."""
    for p in shape.taken:
        value = given[p.name]
        if p.max_items is not None and isinstance(value, list) and len(value) > p.max_items:
            raise ToolRefusal(
                "over-ceiling",
                f"{tool.name}'s {p.name} holds {len(value)} items, over the ceiling of "
                f"{p.max_items}",
            )


_BRACKETS: Final = object()
"""A compound's two brackets, walked as its first member."""


def _spelled_members(item: Any) -> Iterator[Any] | None:
    """A compound's members as its JSON spells them: its brackets, then each
    member (an object's keys and values in turn); ``None`` for an atom."""
    if isinstance(item, Mapping):
        return itertools.chain((_BRACKETS,), itertools.chain.from_iterable(item.items()))
    if isinstance(item, list | tuple):
        return itertools.chain((_BRACKETS,), item)
    return None


def input_chars(value: Any, cap: int) -> int:
    """About how long ``value`` spells as JSON, counted only until it passes ``cap``:
    the walk is iterative and takes at most ``cap`` steps, whatever the input holds."""
    total = 0
    for atom in atoms(value, _spelled_members):
        if isinstance(atom, str):
            total += len(atom) + 3  # the quotes and a separator
        elif atom is _BRACKETS:
            total += 2
        else:
            total += 4
        if total > cap:
            break
    return total


def _spell(names: Iterable[str]) -> str:
    listed = sorted(names)
    return "no arguments" if not listed else ", ".join(repr(n) for n in listed)


def _convert(p: Param, value: Any, clock: Callable[[], None]) -> Any:
    kind = p.kind
    if kind in _EDN_KINDS:
        return edn.read(value, p.name)
    if kind == "sentences":
        if isinstance(value, str):  # one string holding an EDN list of them
            return edn.read(value, p.name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ToolRefusal(
                "bad-argument", f'{p.name} must be an array of sentence strings, e.g. ["(isa A B)"]'
            )
        read = []
        for v in value:
            clock()
            read.append(edn.read(v, p.name))
        return read
    if kind in ("handle", "integer"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToolRefusal("bad-argument", f"{p.name} must be a whole number, e.g. 42")
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolRefusal("bad-argument", f"{p.name} must be a number")
        return value
    if kind == "string":
        if not isinstance(value, str):
            raise ToolRefusal("bad-argument", f"{p.name} must be a string")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise ToolRefusal("bad-argument", f"{p.name} must be true or false")
        return value
    if kind == "opts":
        return _opts(p.name, value)
    return value


def _opts(name: str, value: Any) -> dict[str, Any]:
    """A JSON object of options (or a string holding an EDN map) with plain keys."""
    if isinstance(value, str):
        value = edn.read(value, name)
    if not isinstance(value, Mapping):
        raise ToolRefusal("bad-argument", f'{name} must be a JSON object, e.g. {{"max-depth": 3}}')
    out: dict[str, Any] = {}
    for key, item in value.items():
        text = getattr(key, "name", key)  # an EDN keyword reads as its name
        if not isinstance(text, str):
            raise ToolRefusal("bad-argument", f"{name} keys must be strings, got {key!r}")
        out[text.removeprefix(":")] = item
    return out


def _no_clock() -> None:
    """The clock of what is read before the call's deadline is known (its options)."""


@dataclass(slots=True)
class PreparedCall:
    args: list[Any]
    kwargs: dict[str, Any]
    deadline: float | None


def prepare(tool: Tool, shape: Shape, given: Mapping[str, Any]) -> PreparedCall:
    """Read the arguments, the options first, checked into the op's declared Struct
    (the engine's ``check_options``, once: the op receives the Struct as it is). The
    call's deadline is the options' ``max-ms`` (the declared default when the call
    names no options) plus :data:`CLOCK_GRACE_S`, from now: the reading of the other
    arguments runs under it (refused ``max-ms`` once past it), then the printing."""
    values: dict[str, Any] = {}
    opts = tool.defaults
    for p in shape.taken:
        if p.kind == "opts":
            raw = _convert(p, given[p.name], _no_clock)
            opts = values[p.name] = engine_mod.check_options(tool.name, tool.opts, raw)
    max_ms = getattr(opts, "max_ms", None)
    deadline = None
    if type(max_ms) is int:
        deadline = time.monotonic() + max(0.0, max_ms / 1000) + CLOCK_GRACE_S

    def clock() -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise ToolRefusal(
                "max-ms", f"reading the arguments of {tool.name} ran past its max-ms of {max_ms}"
            )

    for p in shape.taken:
        if p.kind != "opts":
            clock()
            values[p.name] = _convert(p, given[p.name], clock)
    args = [values[p.name] for p in shape.taken if not p.keyword_only]
    kwargs = {p.name: values[p.name] for p in shape.taken if p.keyword_only}
    return PreparedCall(args, kwargs, deadline)
