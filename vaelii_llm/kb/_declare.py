"""Each engine op declared once, at its definition.

``@op("query", kind=READ, opts=ProofOpts, clocked=True)`` on an engine function says
everything the engine and the tools know about the op: its name, its kind, its
options (a `msgspec.Struct` whose field bounds, ``Annotated[int, Meta(ge=…, le=…)]``,
are the ceilings) and whether the clock holds it. The op table
(`vaelii_llm.kb.table`), the engine description (`vaelii_llm.engine.embedded`) and
the tools' exclusions and schemas are read off these declarations; `check_options`
is the one place a ceiling is checked.

The kinds: ``read`` (a model may call it), ``write`` (changes state), ``irreversible``
(a write that cannot be undone; also carries the irreversible mark), ``host-path``
(reads this host's files), ``unbounded`` (a read no call can bound), ``feed`` (the
change feed) and ``kb-less`` (takes no KB). Only a ``read`` can become a tool, so an
op nobody declared, or declared anything else, never reaches a model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec
from msgspec import Meta

from vaelii_llm.kb._types import IRREVERSIBLE_ATTR, EngineRefusal

__all__ = [
    "DECLARATION_ATTR",
    "DEFAULT_MAX_DEPTH",
    "FEED",
    "HOST_PATH",
    "IRREVERSIBLE",
    "KBLESS",
    "KINDS",
    "MAX_DEPTH_CEILING",
    "MAX_LIMIT",
    "MAX_MS_CEILING",
    "READ",
    "UNBOUNDED",
    "WRITE",
    "ClockOpts",
    "Declared",
    "Kind",
    "Limit",
    "LimitOpts",
    "ListOpts",
    "MaxDepth",
    "MaxMs",
    "OptionSpec",
    "Options",
    "ProofOpts",
    "check_options",
    "declared",
    "op",
    "option_specs",
]

Kind = Literal["read", "write", "irreversible", "host-path", "unbounded", "feed", "kb-less"]
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
DEFAULT_MAX_DEPTH: Final = 6

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
    """A time budget."""

    max_ms: MaxMs | None = None


class ProofOpts(ClockOpts, frozen=True):
    """A time budget and a proof depth."""

    max_depth: MaxDepth | None = None


class ListOpts(ClockOpts, frozen=True):
    """A time budget, and whether a context's inherited sentexes are listed too."""

    inherited: Annotated[
        bool, Meta(description="Also list the sentexes of the contexts this one inherits from.")
    ] = False


class LimitOpts(Options, frozen=True):
    """How many results to build; `MAX_LIMIT` when none is named."""

    limit: Limit = MAX_LIMIT


@dataclass(frozen=True, slots=True)
class Declared:
    """One op's declaration: what `op` attached to its function."""

    name: str
    kind: Kind
    opts: type[Options] | None
    clocked: bool


def op(
    name: str, *, kind: Kind = READ, opts: type[Options] | None = None, clocked: bool = False
) -> Callable[[F], F]:
    """Declare an engine function an op (see the module docstring)."""
    if kind not in KINDS:
        raise ValueError(f"{name}: unknown op kind {kind!r}")
    if opts is not None and not (isinstance(opts, type) and issubclass(opts, Options)):
        raise TypeError(f"{name}: opts must be an Options subclass, got {opts!r}")

    def declare(fn: F) -> F:
        setattr(fn, DECLARATION_ATTR, Declared(name, kind, opts, clocked))
        if kind == IRREVERSIBLE:
            setattr(fn, IRREVERSIBLE_ATTR, True)
        return fn

    return declare


def declared(fn: object) -> Declared | None:
    """The declaration `fn` carries, or None."""
    d = getattr(fn, DECLARATION_ATTR, None)
    return d if isinstance(d, Declared) else None


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One options key as the schema publishes it and `check_options` holds it."""

    key: str
    attr: str
    json_kind: str  # "integer", "boolean", "string" or "number"
    least: int | None
    ceiling: int | None
    default: Any
    description: str | None


_SPECS: dict[type[Options], tuple[OptionSpec, ...]] = {}


def option_specs(cls: type[Options]) -> tuple[OptionSpec, ...]:
    """The keys of an options Struct, sorted by key, read off its fields."""
    cached = _SPECS.get(cls)
    if cached is not None:
        return cached
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    specs: list[OptionSpec] = []
    for f in info.fields:
        t: Any = f.type
        if isinstance(t, msgspec.inspect.UnionType):
            members = [m for m in t.types if not isinstance(m, msgspec.inspect.NoneType)]
            t = members[0] if len(members) == 1 else t
        description = None
        if isinstance(t, msgspec.inspect.Metadata):
            description = (t.extra_json_schema or {}).get("description")
            t = t.type
        if isinstance(t, msgspec.inspect.IntType):
            least = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else None)
            ceiling = t.le if t.le is not None else (t.lt - 1 if t.lt is not None else None)
            kind = "integer"
        elif isinstance(t, msgspec.inspect.BoolType):
            least = ceiling = None
            kind = "boolean"
        elif isinstance(t, msgspec.inspect.StrType):
            least = ceiling = None
            kind = "string"
        elif isinstance(t, msgspec.inspect.FloatType):
            least = ceiling = None
            kind = "number"
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: an option is an int, bool, str or float")
        default = None if f.default is msgspec.NODEFAULT else f.default
        specs.append(OptionSpec(f.encode_name, f.name, kind, least, ceiling, default, description))
    out = tuple(sorted(specs, key=lambda s: s.key))
    _SPECS[cls] = out
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


def check_options(
    who: str, cls: type[Options] | None, raw: Any, *, clocked: bool = False
) -> dict[str, Any]:
    """``raw`` options checked against ``cls``; answers them by key, defaults filled.

    The one place a ceiling is checked. Refused, never ignored: a key ``cls`` does
    not have (``unknown-option``), a value of the wrong type or under the least the
    key allows (``bad-option``), a number past its ceiling (``over-ceiling``). An
    integral float reads as a whole number (JSON has one number type). A clocked op
    naming no ``max-ms`` is given the ceiling.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise EngineRefusal(
            "bad-option", f'opts must be a map such as {{"max-depth": 3}}, got {raw!r}'[:200]
        )
    specs = {s.key: s for s in option_specs(cls)} if cls is not None else {}
    out: dict[str, Any] = {}
    for k, v in raw.items():
        key = _plain_key(k)
        spec = specs.get(key) if isinstance(key, str) else None
        if spec is None:
            raise EngineRefusal(
                "unknown-option",
                f"{who} reads no option {key!r}; it accepts: " + (", ".join(specs) or "none"),
                key=key,
                accepted=sorted(specs),
            )
        out[key] = _checked(spec, v)
    for spec in specs.values():
        if spec.key not in out:
            if clocked and spec.key == "max-ms":
                out[spec.key] = spec.ceiling
            elif spec.default is not None:
                out[spec.key] = spec.default
    return out


def _checked(spec: OptionSpec, v: Any) -> Any:
    key = spec.key
    if spec.json_kind == "integer":
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)
        least = spec.least if spec.least is not None else -(2**63)
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise EngineRefusal(
                "bad-option",
                f"{key} must be a whole number of at least {least}, got {_shown(v)}",
                key=key,
            )
        if spec.ceiling is not None and v > spec.ceiling:
            raise EngineRefusal(
                "over-ceiling",
                f"{key} {v} is over the ceiling of {spec.ceiling}",
                key=key,
                value=v,
                ceiling=spec.ceiling,
            )
        return v
    if spec.json_kind == "boolean" and not isinstance(v, bool):
        raise EngineRefusal("bad-option", f"{key} must be true or false", key=key)
    if spec.json_kind == "string" and not isinstance(v, str):
        raise EngineRefusal("bad-option", f"{key} must be a string", key=key)
    if spec.json_kind == "number" and (isinstance(v, bool) or not isinstance(v, int | float)):
        raise EngineRefusal("bad-option", f"{key} must be a number", key=key)
    return v
