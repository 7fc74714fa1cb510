"""The KB tools derived from an engine's op table: each read's shapes and schema.

Nothing here is transcribed: a tool's parameters, shapes (``typing.overload``
included), description and options schema are read off the engine function's own
signature, docstring and declared options Struct, so a read added to the engine
becomes a tool with no edit here. :class:`Table` holds one engine's tools;
:mod:`vaelii_llm.tools` publishes them.
"""

from __future__ import annotations

import copy
import functools
import inspect
import itertools
import re
import types
import typing
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Final

import msgspec

from vaelii_llm import engine as engine_mod
from vaelii_llm._protocol import TOOL_NAME_GRAMMAR
from vaelii_llm._protocol import TOOL_NAME_MAX
from vaelii_llm._protocol import ToolSchema
from vaelii_llm.engine import READ
from vaelii_llm.engine import Options

__all__ = ["Param", "Shape", "Table", "Tool", "tool_name"]


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: str
    keyword_only: bool
    has_default: bool
    default: Any
    max_items: int | None = None  # an array's declared bound (``Meta(max_length=…)``)


@dataclass(frozen=True, slots=True)
class Shape:
    """One way to call an op: the first ``size`` parameters of a signature."""

    params: tuple[Param, ...]  # the whole signature, minus the KB
    size: int

    @property
    def taken(self) -> tuple[Param, ...]:
        return self.params[: self.size]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.taken)

    def spelled(self) -> str:
        return "(" + ", ".join(self.names) + ")"


@dataclass(frozen=True, slots=True)
class Tool:
    op: str
    name: str
    fn: Callable[..., Any]
    shapes: tuple[Shape, ...]
    schema: ToolSchema
    opts: type[Options]  # the declared options Struct (no keys when none is declared)
    defaults: Options | None  # what a call naming no options runs under


def tool_name(op: str) -> str:
    """The tool name for an op: ``find-sentexes`` -> ``kb_find_sentexes``,
    ``ask?`` -> ``kb_ask_p`` (distinct from ``kb_ask``).

    Munged to the providers' identifier grammar (``TOOL_NAME_GRAMMAR``), cut to its length.
    """
    munged = op.replace("?", "_p").replace("!", "_bang").replace("-", "_")
    munged = re.sub(r"[^a-zA-Z0-9_]", "_", munged)
    return ("kb_" + munged)[:TOOL_NAME_MAX]


def _kind_names() -> dict[str, str]:
    return {
        getattr(marker, "__name__", str(marker)): kind
        for marker, kind in engine_mod.ARG_KINDS.items()
    }


def _declared_bound(annotation: object) -> tuple[object, int | None]:
    """``Annotated[X, Meta(max_length=n)]`` -> ``(X, n)``; any other annotation -> itself
    and no bound. The op declares an array argument's bound in its own signature."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return annotation, None
    inner, *extras = typing.get_args(annotation)
    bounds = [m.max_length for m in extras if isinstance(m, msgspec.Meta) and m.max_length]
    return inner, min(bounds) if bounds else None


def _kind_of(annotation: object) -> str:
    """The ARG_KINDS kind of a parameter annotation (``X | None`` reads as ``X``)."""
    annotation, _ = _declared_bound(annotation)
    if isinstance(annotation, str):  # an annotation that would not evaluate
        name = annotation.replace(" ", "").removesuffix("|None").rsplit(".", 1)[-1]
        return _kind_names().get(name, "json")
    origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation) or (object,)
        return "sentences" if _kind_of(item) == "sentence" else "json"
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _kind_of(members[0])
        return "json"
    if isinstance(annotation, type) and issubclass(annotation, Options):
        return "opts"
    try:
        kind = engine_mod.ARG_KINDS.get(annotation)
    except TypeError:  # unhashable annotation
        kind = None
    if kind is not None:
        return kind
    if annotation is float:
        return "number"
    return "json"


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn, eval_str=True)
    except (NameError, SyntaxError, TypeError, AttributeError):
        pass
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _params(fn: Callable[..., Any]) -> tuple[Param, ...] | None:
    """A signature's parameters minus the KB, or None when it has no single shape."""
    sig = _signature(fn)
    if sig is None:
        return None
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return None  # takes no KB
    out: list[Param] = []
    for p in params[1:]:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            return None
        has_default = p.default is not inspect.Parameter.empty
        out.append(
            Param(
                name=p.name,
                kind=_kind_of(p.annotation),
                keyword_only=p.kind is inspect.Parameter.KEYWORD_ONLY,
                has_default=has_default,
                default=p.default if has_default else None,
                max_items=_declared_bound(p.annotation)[1],
            )
        )
    return tuple(out)


def _shapes(fn: Callable[..., Any]) -> tuple[Shape, ...]:
    """Every shape of ``fn``: one per overload (or the function itself) and per
    defaulted tail of each. Empty when there is no single signature to read."""
    try:
        overloads = list(typing.get_overloads(fn))
    except Exception:  # an object get_overloads cannot key
        overloads = []
    signatures = [p for p in map(_params, overloads or [fn]) if p is not None]
    shapes: list[Shape] = []
    seen: set[tuple[str, ...]] = set()
    for params in signatures:
        for size in range(len(params) + 1):
            if all(p.has_default for p in params[size:]):
                shape = Shape(params, size)
                if shape.names not in seen:
                    seen.add(shape.names)
                    shapes.append(shape)
    return tuple(shapes)


_SENTENCE: Final = {
    "type": "string",
    "description": 'A sentence: a string holding one EDN list, e.g. "(isa Muffet Spider)"; '
    'a symbol starting with ? is a variable, e.g. "(isa ?x Spider)".',
}


def _property(kind: str, opts: type[Options], max_items: int | None = None) -> dict[str, Any]:
    if kind == "sentence":
        return dict(_SENTENCE)
    if kind == "sentences":
        out: dict[str, Any] = {
            "type": "array",
            "items": dict(_SENTENCE),
            "description": 'Sentences: an array of sentence strings, e.g. ["(isa Humpty Egg)"].',
        }
        if max_items is not None:
            out["maxItems"] = max_items
        return out
    if kind == "context":
        return {
            "type": "string",
            "description": 'A context: a string holding one EDN symbol, e.g. "CxWell".',
        }
    if kind == "term":
        return {
            "type": "string",
            "description": "A term: a string holding one EDN constant, a symbol or a "
            'literal, e.g. "Muffet" or "\\"Little Miss\\"".',
        }
    if kind == "handle":
        return {"type": "integer", "description": "A sentex handle, e.g. 42."}
    if kind == "opts":
        return copy.deepcopy(_opts_property(opts))
    if kind in ("integer", "string", "boolean", "number"):
        return {"type": kind}
    return {}


@functools.cache
def _opts_property(opts: type[Options]) -> dict[str, Any]:
    """The opts object: :func:`msgspec.json.schema` of the op's declared Struct (each
    key's type, bounds, default and description), its keys sorted so the tool list is
    byte-stable, described as every options object is. Any other key is refused."""
    whole = msgspec.json.schema(opts)
    out: dict[str, Any] = dict(whole["$defs"][whole["$ref"].rsplit("/", 1)[-1]])
    out.pop("title", None)
    out["description"] = _OPTS_DESCRIPTION
    out["properties"] = dict(sorted(out["properties"].items()))
    return out


_OPTS_DESCRIPTION: Final = "Options, a JSON object with kebab-case keys; any other key is refused."


def _build_schema(
    op: str, fn: Callable[..., Any], shapes: Sequence[Shape], opts: type[Options]
) -> ToolSchema:
    properties: dict[str, dict[str, Any]] = {}
    kinds: dict[str, list[str]] = {}
    bounds: dict[str, int] = {}
    for shape in shapes:
        for p in shape.taken:
            if p.kind not in kinds.setdefault(p.name, []):
                kinds[p.name].append(p.kind)
            if p.max_items is not None:
                bounds[p.name] = min(p.max_items, bounds.get(p.name, p.max_items))
    for name, ks in kinds.items():
        props = [_property(k, opts, bounds.get(name)) for k in ks]
        properties[name] = props[0] if len(props) == 1 else {"anyOf": props}
    required = [n for n in kinds if all(n in s.names for s in shapes)]
    description = inspect.cleandoc(inspect.getdoc(fn) or f"The engine's {op} read.")
    if len(shapes) > 1:
        description += "\n\nShapes (give exactly the arguments of one): " + " | ".join(
            s.spelled() for s in shapes
        )
    strict = len(required) == len(properties)
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    refused = _refused_combinations(shapes, list(kinds), required)
    if refused:
        input_schema["not"] = {"anyOf": refused}
    return ToolSchema(
        name=tool_name(op),
        description=description,
        input_schema=input_schema,
        strict=True if strict else None,
    )


def _refused_combinations(
    shapes: Sequence[Shape], names: Sequence[str], required: Sequence[str]
) -> list[dict[str, Any]]:
    """The argument combinations no shape takes, as JSON Schema a validator and a
    model can read: the dispatcher takes an input whose names are exactly one
    shape's. Under the root's ``not`` (the Messages API refuses a top-level
    ``anyOf``/``oneOf``/``allOf``): an argument given without one it needs, two
    that no shape holds together, none of the arguments when some are needed,
    then any combination those miss, spelled whole. Sorted: byte-stable."""
    takes = [frozenset(s.names) for s in shapes]
    out: list[dict[str, Any]] = []
    for name in sorted(names):
        holding = [t for t in takes if name in t]
        needs = sorted(frozenset.intersection(*holding) - {name} - set(required))
        if needs:
            out.append({"required": [name], "not": {"required": needs}})
    for a, b in itertools.combinations(sorted(names), 2):
        if not any({a, b} <= t for t in takes):
            out.append({"required": [a, b]})
    if frozenset() not in takes and not required:
        out.append({"not": {"anyOf": [{"required": [n]} for n in sorted(names)]}})
    optional = sorted(set(names) - set(required))
    for size in range(len(optional) + 1):
        for extra in itertools.combinations(optional, size):
            given = frozenset(required) | set(extra)
            if given not in takes and not any(_refuses(rule, given) for rule in out):
                absent = [{"required": [n]} for n in optional if n not in given]
                rule: dict[str, Any] = {"required": sorted(given)}
                if absent:
                    rule["not"] = {"anyOf": absent}
                out.append(rule)
    return out


def _refuses(rule: Mapping[str, Any], given: frozenset[str]) -> bool:
    """Whether one of :func:`_refused_combinations`' rules matches ``given``."""
    if not set(rule.get("required", ())) <= given:
        return False
    inner = rule.get("not")
    if inner is None:
        return True
    if "anyOf" in inner:
        return not any(_refuses(alt, given) for alt in inner["anyOf"])
    return not _refuses(inner, given)


class Table:
    """The tools one engine exposes, derived once from its declarations."""

    def __init__(self, eng: engine_mod.Engine) -> None:
        tools: dict[str, Tool] = {}
        writes = eng.write_ops
        for op in sorted(eng.ops):
            fn = eng.ops[op]
            d = engine_mod.declared(fn)
            # only a declared read is a tool; the irreversible mark excludes whatever
            # the declaration says
            if d is None or d.kind != READ or op in writes:
                continue
            if engine_mod.is_irreversible(fn):
                continue
            shapes = _shapes(fn)
            name = tool_name(op)
            if not shapes or not TOOL_NAME_GRAMMAR.match(name):
                continue
            if name in tools:
                raise ValueError(
                    f"the engine's ops {tools[name].op!r} and {op!r} both become the tool "
                    f"{name!r}; rename one, or a model could not tell them apart"
                )
            opts = d.opts if d.opts is not None else Options
            schema = _build_schema(op, fn, shapes, opts)
            tools[name] = Tool(op, name, fn, shapes, schema, opts, d.defaults)
        self.by_name = tools
        self.ops = tuple(t.op for t in tools.values())
        self.by_op = {t.op: t for t in tools.values()}
