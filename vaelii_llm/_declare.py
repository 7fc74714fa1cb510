"""Each engine op declared once, at its definition, in the vocabulary every engine
shares: the argument markers (`Sentence`, `Context`, `Term`, `Handle`: `typing.NewType`s
the tools read off a signature), the nesting cap, and the refusal an engine raises.

``@op("query", kind=READ, opts=ProofOpts, clocked=True)`` on an engine function says
everything the engine and the tools know about the op: its name, its kind, its
options and whether the clock holds it. The options are a `msgspec.Struct` whose
fields carry the real defaults and bounds (``Annotated[int, Meta(ge=…, le=…)]``, the
bounds being the ceilings); the tools publish its `msgspec.json.schema` (keys sorted). The
op table (`vaelii_llm.kb._ops`), the engine description (`vaelii_llm.engine.embedded`)
and the tools' exclusions are read off these declarations.

An op's options are checked once, by `check_options`, the one place a ceiling is held:
a caller's mapping (a tool call's JSON object, an EDN map) becomes the op's Struct at
the op's own boundary (the wrapper `op` puts around a function that declares options),
and an instance of the Struct passes through unchecked (the tools check the model's
options themselves, so each refusal names the tool). The function body always receives
the typed Struct, defaults filled.

The kinds: ``read`` (a model may call it), ``write`` (changes state), ``irreversible``
(a write that cannot be undone; also carries the irreversible mark), ``host-path``
(reads this host's files), ``unbounded`` (a read no call can bound), ``feed`` (the
change feed) and ``kb-less`` (takes no KB). Only a ``read`` can become a tool, so an
op nobody declared, or declared anything else, never reaches a model.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated
from typing import Any
from typing import Final
from typing import Literal
from typing import NewType
from typing import TypeVar

import msgspec
from msgspec import Meta

__all__ = [
    "CLOCK",
    "FEED",
    "HOST_PATH",
    "IRREVERSIBLE",
    "IRREVERSIBLE_ATTR",
    "KBLESS",
    "KINDS",
    "LIMIT",
    "LIST",
    "MAX_DEPTH_CEILING",
    "MAX_LIMIT",
    "MAX_MS_CEILING",
    "MAX_NESTING",
    "PROOF",
    "READ",
    "UNBOUNDED",
    "WRITE",
    "ClockOpts",
    "Context",
    "Declared",
    "EngineRefusal",
    "Handle",
    "Kind",
    "Limit",
    "LimitOpts",
    "ListOpts",
    "MaxDepth",
    "MaxMs",
    "Options",
    "ProofOpts",
    "Sentence",
    "Term",
    "check_options",
    "declared",
    "op",
    "too_deep",
]

Kind = Literal["read", "write", "irreversible", "host-path", "unbounded", "feed", "kb-less"]
Sentence = NewType("Sentence", tuple[Any, ...])
Context = NewType("Context", object)
Term = NewType("Term", object)
Handle = NewType("Handle", int)

MAX_NESTING: Final = 64
"""The deepest bracket nesting a sentence may have (the sentence itself is one). The
tools' EDN reader (`vaelii_llm._edn`) holds a model's arguments to it too, so one cap
keeps the parser and every recursive walk of a sentence off the stack limit. Every
EDN reader (a model's argument, an engine argument, a KB file) checks the text
against it with `too_deep` before the parser sees it."""

# Strings, comments and character literals hold brackets that do not nest.
_NON_NESTING: Final = re.compile(r'"(?:[^"\\]|\\.)*"|;[^\n]*|\\.', re.DOTALL)
_NOT_BRACKET: Final = re.compile(r"[^()\[\]{}]+")
_INNERMOST: Final = re.compile(r"[(\[{][)\]}]")
_BRACKET: Final = re.compile(r"[(\[{)\]}]")


def too_deep(text: str, cap: int = MAX_NESTING) -> int | None:
    """Where ``text`` first nests past ``cap`` brackets (lists, vectors, maps and sets
    alike, outside strings, comments and character literals): the offset of the
    opening bracket one too deep, or None when it nests no deeper than ``cap``.

    Linear and iterative: the text reduced to its brackets loses its innermost pairs
    once per level, at most ``cap`` times (a KB file nests a few levels, so a few
    passes); only a text found too deep is walked again for the offset."""
    if text.count("(") + text.count("[") + text.count("{") <= cap:
        return None  # cannot nest deeper than the cap
    brackets = _NOT_BRACKET.sub("", _NON_NESTING.sub("", text))
    for _ in range(cap):
        brackets, removed = _INNERMOST.subn("", brackets)
        if not removed:
            return None
    if not _INNERMOST.search(brackets):
        return None  # only unpaired brackets are left: the parser says where
    blanked = _NON_NESTING.sub(lambda m: " " * len(m.group()), text)
    depth = 0
    for match in _BRACKET.finditer(blanked):
        if match.group() in "([{":
            depth += 1
            if depth > cap:
                return match.start()
        elif depth:
            depth -= 1
    return None


#: The function attribute that marks an engine function irreversible (the Python
#: spelling of a Clojure ``!`` var). `vaelii_llm.engine.irreversible` sets it and
#: `vaelii_llm.engine.is_irreversible` reads it; it lives here so the engine package
#: can mark its own functions without importing the model-side boundary module.
IRREVERSIBLE_ATTR: Final = "__vaelii_irreversible__"


class EngineRefusal(Exception):
    """The engine refused a call: a typed, expected failure, never a bug.

    ``type`` says which refusal it is (``"unknown-option"``, ``"over-ceiling"``,
    ``"bad-option"``, ``"malformed-sentence"``, ``"malformed-context"``,
    ``"malformed-term"``, ``"unknown-handle"``, ``"arity-mismatch"``,
    ``"unknown-context"``, ``"clock-cut"``, ``"not-scratch"``, ``"bad-argument"``,
    ``"bad-path"``); ``data`` holds the particulars (the option key and the accepted
    keys, the handle, the arity expected and given ...). The message already names
    the type, so a model reading only the message learns it.
    """

    def __init__(self, type: str, message: str, **data: Any) -> None:
        super().__init__(f"{type}: {message}")
        self.type = type
        self.data: dict[str, Any] = data


READ: Final = "read"
WRITE: Final = "write"
IRREVERSIBLE: Final = "irreversible"
HOST_PATH: Final = "host-path"
UNBOUNDED: Final = "unbounded"
FEED: Final = "feed"
KBLESS: Final = "kb-less"
KINDS: Final = frozenset({READ, WRITE, IRREVERSIBLE, HOST_PATH, UNBOUNDED, FEED, KBLESS})

MAX_DEPTH_CEILING: Final = 12
MAX_MS_CEILING: Final = 10_000
MAX_LIMIT: Final = 100

#: The function attribute holding an op's `Declared`.
DECLARATION_ATTR: Final = "__vaelii_op__"

F = TypeVar("F", bound=Callable[..., Any])


class Options(
    msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, rename="kebab"
):
    """The base of every op's options: kebab-case keys, any other key refused."""


MaxMs = Annotated[
    int, Meta(ge=1, le=MAX_MS_CEILING, description="The read's time budget in milliseconds.")
]
MaxDepth = Annotated[
    int, Meta(ge=0, le=MAX_DEPTH_CEILING, description="How many rule steps a proof may take.")
]
Limit = Annotated[int, Meta(ge=0, le=MAX_LIMIT, description="How many results to build.")]


class ClockOpts(Options, frozen=True):
    """A time budget. A clocked read that names none runs under the ceiling: this
    field's default is the one place that rule is written."""

    max_ms: MaxMs = MAX_MS_CEILING


class ProofOpts(ClockOpts, frozen=True):
    """A time budget and a proof depth."""

    max_depth: MaxDepth = 6


class ListOpts(ClockOpts, frozen=True):
    """A time budget, and whether a context's inherited sentexes are listed too."""

    inherited: Annotated[
        bool, Meta(description="Also list the sentexes of the contexts this one inherits from.")
    ] = False


class LimitOpts(Options, frozen=True):
    """How many results to build."""

    limit: Limit = MAX_LIMIT


#: Each shared options Struct with every default, the default of an op's ``opts``.
CLOCK: Final = ClockOpts()
PROOF: Final = ProofOpts()
LIST: Final = ListOpts()
LIMIT: Final = LimitOpts()


@dataclass(frozen=True, slots=True)
class Declared:
    """One op's declaration: what `op` attached to its function.

    ``defaults`` is the options a call naming none runs under: the declared Struct
    with every default, or, for a clocked op that takes no options, `CLOCK`.
    """

    name: str
    kind: Kind
    opts: type[Options] | None
    clocked: bool
    defaults: Options | None


def op(
    name: str, *, kind: Kind = READ, opts: type[Options] | None = None, clocked: bool = False
) -> Callable[[F], F]:
    """Declare an engine function an op (see the module docstring).

    A function that declares ``opts`` takes them as its parameter named ``opts``; the
    declaration wraps it so a mapping given there is checked into the Struct (and a
    missing one is the Struct's defaults) before the body runs.
    """
    if kind not in KINDS:
        raise ValueError(f"{name}: unknown op kind {kind!r}")
    if opts is not None and not (isinstance(opts, type) and issubclass(opts, Options)):
        raise TypeError(f"{name}: opts must be an Options subclass, got {opts!r}")
    defaults = opts() if opts is not None else (CLOCK if clocked else None)
    declaration = Declared(name, kind, opts, clocked, defaults)

    def declare(fn: F) -> F:
        out = fn if opts is None else _checking(fn, declaration)
        setattr(out, DECLARATION_ATTR, declaration)
        if kind == IRREVERSIBLE:
            setattr(out, IRREVERSIBLE_ATTR, True)
        return out

    return declare


def _checking(fn: F, d: Declared) -> F:
    """`fn` with its ``opts`` argument checked against `d` on the way in."""
    code = getattr(fn, "__code__", None)
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount] if code else ()
    if "opts" not in names:
        raise TypeError(f"{d.name}: declares options but takes no parameter named opts")
    at = names.index("opts")
    positional = code is not None and at < code.co_argcount
    cls = d.opts

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if positional and len(args) > at:
            given = args[at]
            if type(given) is not cls:
                args = (*args[:at], _checked(given), *args[at + 1 :])
        elif "opts" in kwargs and type(kwargs["opts"]) is not cls:
            kwargs["opts"] = _checked(kwargs["opts"])
        return fn(*args, **kwargs)

    def _checked(given: Any) -> Any:
        return d.defaults if given is None else check_options(d.name, cls, given)

    return checked  # type: ignore[return-value]


def declared(fn: object) -> Declared | None:
    """The declaration `fn` carries, or None."""
    d = getattr(fn, DECLARATION_ATTR, None)
    return d if isinstance(d, Declared) else None


# -- checking options ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    """One options key as `check_options` explains a refusal of it."""

    integer: bool
    boolean: bool
    least: int | None
    ceiling: int | None


_FIELDS: dict[type[Options], dict[str, _Field]] = {}


def _fields(cls: type[Options]) -> dict[str, _Field]:
    """An options Struct's keys, read off its declaration (cached per Struct)."""
    cached = _FIELDS.get(cls)
    if cached is not None:
        return cached
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    out: dict[str, _Field] = {}
    for f in sorted(info.fields, key=lambda f: f.encode_name):
        t: Any = f.type
        if isinstance(t, msgspec.inspect.UnionType):  # X | None reads as X
            kept = [m for m in t.types if not isinstance(m, msgspec.inspect.NoneType)]
            t = kept[0] if len(kept) == 1 else t
        if isinstance(t, msgspec.inspect.Metadata):
            t = t.type
        if isinstance(t, msgspec.inspect.IntType):
            out[f.encode_name] = _Field(True, False, t.ge, t.le)
        else:
            out[f.encode_name] = _Field(False, isinstance(t, msgspec.inspect.BoolType), None, None)
    _FIELDS[cls] = out
    return out


def _plain_key(k: Any) -> Any:
    key = getattr(k, "name", k)  # an EDN keyword reads as its name
    return key.lstrip(":") if isinstance(key, str) else key


def _shown(v: Any) -> str:
    try:
        text = msgspec.json.encode(v).decode()
    except Exception:
        text = type(v).__name__
    return text[:40]


_AT = re.compile(r"at `\$\.(.+)`$")


def check_options(who: str, cls: type[Options] | None, raw: Any) -> Options:
    """``raw`` options checked into ``cls``, the one place a ceiling is held.

    ``raw`` is a mapping (``None`` reads as an empty one; an `Options` instance as the
    mapping it encodes to). Refused, never ignored: a key ``cls`` does not have
    (``unknown-option``), a value of the wrong type or under the least the key allows
    (``bad-option``), a number past its ceiling (``over-ceiling``). An integral float
    reads as a whole number (JSON has one number type). ``who`` names the op (or the
    tool) in a refusal.
    """
    cls = cls if cls is not None else Options
    if raw is None:
        raw = {}
    elif isinstance(raw, Options):
        raw = msgspec.to_builtins(raw)
    if not isinstance(raw, Mapping):
        raise EngineRefusal(
            "bad-option", f'opts must be a map such as {{"max-depth": 3}}, got {raw!r}'[:200]
        )
    fields = _fields(cls)
    plain: dict[str, Any] = {}
    for k, v in raw.items():
        key = _plain_key(k)
        f = fields.get(key) if isinstance(key, str) else None
        if f is None:
            raise EngineRefusal(
                "unknown-option",
                f"{who} reads no option {key!r}; it accepts: " + (", ".join(fields) or "none"),
                key=key,
                accepted=list(fields),
            )
        if f.integer and type(v) is float and math.isfinite(v) and v.is_integer():
            v = int(v)
        plain[key] = v
    try:
        return msgspec.convert(plain, cls)
    except msgspec.ValidationError as exc:
        raise _refusal(fields, plain, exc) from None


def _refusal(fields: Mapping[str, _Field], given: Mapping[str, Any], exc: Exception) -> Exception:
    """The refusal that says, in the option's own terms, why msgspec refused it."""
    at = _AT.search(str(exc))
    key = at.group(1) if at else ""
    f = fields.get(key)
    if f is None:
        return EngineRefusal("bad-option", str(exc))
    v = given[key]
    if f.integer:
        whole = type(v) is int
        if whole and f.ceiling is not None and v > f.ceiling:
            return EngineRefusal(
                "over-ceiling",
                f"{key} {v} is over the ceiling of {f.ceiling}",
                key=key,
                value=v,
                ceiling=f.ceiling,
            )
        least = f"of at least {f.least}, " if f.least is not None else ""
        return EngineRefusal(
            "bad-option", f"{key} must be a whole number {least}got {_shown(v)}", key=key
        )
    if f.boolean:
        return EngineRefusal("bad-option", f"{key} must be true or false", key=key)
    return EngineRefusal("bad-option", f"{key}: {exc}", key=key)
