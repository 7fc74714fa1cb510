"""A switch: one environment variable the model side reads, and how.

:class:`Switch` is one row of the configuration table, its reader stored on
it. The cross-backend rows are :mod:`vaelii_llm.config`'s; a backend's rows
are carried by its record (:class:`vaelii_llm._backends.Backend`), so a
registered backend's switches are read and listed as a built-in one's are.
:func:`getenv` is the one lookup every row's reader goes through, at the
moment the value is used: a value holding a control character is refused
there (:class:`~vaelii_llm.errors.LLMBadSwitch`), naming the variable, never
quoting the value. Imports nothing of the package but its errors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Final

import msgspec

from vaelii_llm.errors import LLMBadSwitch

__all__ = ["FALSY", "TRUTHY", "Switch", "getenv", "text", "text_of"]

TRUTHY: Final = frozenset({"1", "true", "yes"})
"""The words that turn a yes/no switch on, read case-insensitively."""

FALSY: Final = frozenset({"0", "false", "no"})
"""The words that turn a yes/no switch that defaults to on off, read case-insensitively."""


class Switch(msgspec.Struct, frozen=True):
    """One row of the configuration table: the variable's ``name``, the
    ``reader`` that reads it as the package does (called with no argument:
    the environment, its default applied), its ``legal`` values, its
    ``default`` as written, and what it ``decides``. A ``secret`` one's value
    is never shown, only whether it is set."""

    name: str
    reader: Callable[[], str | int | bool | None]
    legal: str
    default: str | None
    decides: str
    secret: bool = False


_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""What no switch value may hold once trimmed: C0 and C1 controls, DEL, the
Unicode line separators and the direction overrides. A newline in a URL would
be printed as a line of its own (a forged ``why: all good``), an escape would
drive the terminal."""

_passed: Final[dict[str, str]] = {}
"""The value each variable last had when it passed the check, so a value read
on every turn is checked once."""


def getenv(name: str, *, secret: bool = False) -> str | None:
    """The variable ``name`` as ``os.environ`` holds it now, or None when
    unset; a value holding a :data:`_CONTROL` character once trimmed (the
    stray CR/LF a .env file leaves at an end is trimmed, not refused) is a
    ValueError naming the variable, never quoting the value. A ``secret``
    one is left to the check that makes it a header
    (:class:`~vaelii_llm.errors.LLMBadCredential`, naming the header)."""
    try:  # on every turn, most often unset: one lookup, no Mapping.get around it
        value = os.environ[name]
    except KeyError:
        return None
    if secret or _passed.get(name) == value:
        return value
    found = _CONTROL.search(value.strip())
    if found is not None:
        raise LLMBadSwitch(
            name,
            f"holds a control character (U+{ord(found.group()):04X}) at character "
            f"{found.start() + 1}; a switch's value is one line of printable text "
            "(value withheld)",
        )
    _passed[name] = value
    return value


def text(switch: Switch) -> str | None:
    """The switch's variable trimmed, or None when unset or blank."""
    value = getenv(switch.name, secret=switch.secret)
    if value is None:
        return None
    return value.strip() or None


def text_of(name: str, *, secret: bool = False) -> str | None:
    """The variable ``name`` trimmed, or None when unset or blank."""
    value = getenv(name, secret=secret)
    if value is None:
        return None
    return value.strip() or None
