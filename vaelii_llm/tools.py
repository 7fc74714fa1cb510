"""The model's read surface over a KB: tool schemas derived from the engine's op table.

Nothing here is transcribed. The tools are the ops the engine
(:func:`vaelii_llm.engine.embedded` by default) declares reads (``@op(...,
kind=READ)``, :mod:`vaelii_llm.kb._declare`), and each tool's parameters, shapes and
description come from the engine function's own signature (``typing.overload``
shapes included), docstring and declared options Struct (published as its
:func:`msgspec.json.schema`, defaults and ceilings included). A read added to the engine
becomes a tool with no edit here; an op declared anything else, or declared
nothing, never does.

Excluded, in :meth:`Toolset.ops`, whatever else is true of them:

* every op not declared a read: the writes (:data:`WRITE_OPS` for the embedded
  engine: what changes the KB, and ``preview``, which holds the writer and advances
  the handle counter, ``clear-caches``, which resets the measurements a model is
  measured through, ``abduce``/``abduce-discard``, which store and drop
  hypotheses), the change feed, :data:`HOST_PATH_OPS` (``kb-diff`` reads a
  directory on this host, a path-recon primitive in a prompt-injected model's
  hands), :data:`UNBOUNDED_OPS` (reads no call can bound: whole-KB sorts and
  audits) and the kb-less ops;
* any op whose function carries the irreversible mark
  (:func:`vaelii_llm.engine.irreversible`), whatever its declaration says;
* ops with no single signature (variadic, with no overloads).

A :class:`Toolset` holds one KB, its engine's derived table and its call bound.
:meth:`Toolset.call` runs one tool call and never raises (cancellation propagates):
every failure is a :class:`ToolResult` with ``ok=False`` and an ``error`` that
starts with the refusal's type (``over-ceiling: …``, ``unexpected-argument: …``).
A call's options are checked once, into the op's declared Struct, by the engine's
own ``check_options`` (the one place a ceiling is held), and the op receives the
Struct; a call naming none runs under the declared defaults. The engine
read and the printing of its answer run in a worker thread, at most ``workers``
at once per toolset, so a slow read never blocks the loop. The answer is printed
by :func:`vaelii_llm._edn.write`, which realizes a lazy answer only as far as
``max_result_chars`` reaches. The module functions (:func:`call`,
:func:`schemas`, …) are thin wrappers over a default toolset of the embedded
engine.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import itertools
import re
import threading
import time
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

import anyio
import anyio.to_thread
import msgspec

from vaelii_llm import _edn as edn
from vaelii_llm import engine as engine_mod
from vaelii_llm import telemetry
from vaelii_llm._protocol import ToolResultBlock, ToolSchema
from vaelii_llm.engine import MAX_LIMIT, READ, EngineRefusal, Options

__all__ = [
    "HOST_PATH_OPS",
    "MAX_LIMIT",
    "UNBOUNDED_OPS",
    "WRITE_OPS",
    "ToolResult",
    "ToolSource",
    "Toolset",
    "call",
    "op_of",
    "prefixed",
    "read_ops",
    "schema",
    "schemas",
    "tool_name",
]

WRITE_OPS: frozenset[str]
"""Every op of the embedded engine no model may reach: its declared writes and
irreversible ops (derived on first use; :meth:`Toolset.write_ops` for any engine)."""
HOST_PATH_OPS: frozenset[str]
"""The embedded engine's ops declared ``host-path``: never a tool."""
UNBOUNDED_OPS: frozenset[str]
"""The embedded engine's ops declared ``unbounded``: reads with no bound a call can
carry, the whole KB sorted into one answer or audited whole; narrower reads
(``sentex-count``, ``term-count``, ``find-terms``, ``kb-integrity``…) answer
the bounded questions."""

_DERIVED: Final[Mapping[str, Callable[[engine_mod.Engine], frozenset[str]]]] = {
    "WRITE_OPS": lambda eng: eng.write_ops,
    "HOST_PATH_OPS": lambda eng: eng.host_path_ops,
    "UNBOUNDED_OPS": lambda eng: eng.unbounded_ops,
}


def __getattr__(name: str) -> frozenset[str]:
    """The derived sets above, read off the embedded engine's declarations."""
    derive = _DERIVED.get(name)
    if derive is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return frozenset(derive(_default().engine))


_READ_WORKERS: Final = 2
"""Engine reads one toolset runs at once by default, each in a worker thread; more
calls wait their turn. A pure-Python engine read holds the GIL while it computes, so
more threads add no throughput and lengthen the event loop's own wait for the GIL
(tests/bench/bench_tools.py measures the lag with 2 and 4); two keep one long read
from holding up every other."""

_GIL_SLICE_S: Final = 0.001
"""How long a worker printing an answer holds the GIL before it steps aside."""

_CLOCK_GRACE_S: Final = 0.1
"""How long past a read's ``max-ms`` the printer keeps realizing before it cuts the
answer itself. The engine's own clock normally ends the answer first, with a
record saying so; this is the backstop for one it does not reach."""

_MAX_RESULT_CHARS: Final = edn.DEFAULT_MAX_CHARS
"""How much of an answer a call prints by default (``max_result_chars``):
the writer's :data:`vaelii_llm._edn.DEFAULT_MAX_CHARS`."""

_MAX_INPUT_CHARS: Final = 2 * edn.MAX_TEXT_CHARS
"""The most a call's input may hold, counted as its JSON spelling roughly runs
(every string's length, a few characters per other member), before any of it is
read: a bigger input is refused ``input-too-large`` on the loop, at a cost bounded
by the cap, whatever it holds."""

_NAME_MAX: Final = 64
"""The longest tool name the providers' identifier grammar allows."""
_NAME_GRAMMAR = re.compile(rf"^[a-zA-Z0-9_-]{{1,{_NAME_MAX}}}$")

_EDN_KINDS: Final = frozenset({"sentence", "context", "term"})


# -- results and refusals ----------------------------------------------------------------


class ToolResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What one tool call answered: ``result`` when ``ok``, else ``error``.

    Either string is what a ``tool_result`` block carries back to the model;
    :attr:`text` is whichever is set and :meth:`block` builds the block.
    """

    ok: bool
    result: str | None = None
    error: str | None = None

    @property
    def text(self) -> str:
        return (self.result if self.ok else self.error) or ""

    def block(self, tool_use_id: str) -> ToolResultBlock:
        """The ``tool_result`` block answering the ``tool_use`` block ``tool_use_id``."""
        return ToolResultBlock(tool_use_id=tool_use_id, content=self.text, is_error=not self.ok)


@runtime_checkable
class ToolSource(Protocol):
    """What the agent loop needs of a set of tools: a ``name`` (for messages and
    spans), the tools' schemas in a byte-stable order, and a ``call`` that answers
    a :class:`ToolResult` and never raises (cancellation aside). The KB's
    :class:`Toolset` is one; ``vaelii_llm.integrations.mcp_client.McpToolset`` (any
    MCP server's tools) is another."""

    @property
    def name(self) -> str: ...

    def schemas(self) -> list[ToolSchema]: ...

    async def call(self, name: str, input: Any = None) -> ToolResult: ...


class _Prefixed:
    """A :class:`ToolSource` whose tool names carry ``prefix`` (see :func:`prefixed`)."""

    def __init__(self, inner: ToolSource, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix
        self.name = inner.name

    def schemas(self) -> list[ToolSchema]:
        return [msgspec.structs.replace(s, name=self.prefix + s.name) for s in self.inner.schemas()]

    async def call(self, name: str, input: Any = None) -> ToolResult:
        if not isinstance(name, str) or not name.startswith(self.prefix):
            names = (s.name for s in self.schemas())
            return _unknown_tool(name, names, getattr(self.inner, "max_result_chars", None))
        return await self.inner.call(name[len(self.prefix) :], input)


def _unknown_tool(name: object, names: Iterable[str], bound: object = None) -> ToolResult:
    """The refusal of a name no tool of a composed source has: the name shown
    bounded whatever it is (a list 10⁵ deep too), then every tool's; cut to
    ``bound`` where the source has one."""
    message = f"unknown-tool: no tool is named {_json(name)}; the tools are {', '.join(names)}"
    return ToolResult(ok=False, error=_bounded(message, bound) if type(bound) is int else message)


def prefixed(source: ToolSource, prefix: str) -> ToolSource:
    """``source`` with every tool name starting ``prefix`` (``"fs_"``: ``read`` ->
    ``fs_read``), so two sets offering one name can share a loop. The prefixed names
    must still fit the providers' grammar (letters, digits, ``_``, ``-``; at most
    64); a prefix that breaks one is refused with ``ValueError``."""
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"a prefix is a non-empty string, got {prefix!r}")
    wrapped = _Prefixed(source, prefix)
    for schema in wrapped.schemas():
        if not _NAME_GRAMMAR.match(schema.name):
            raise ValueError(
                f"the prefix {prefix!r} makes the tool name {schema.name!r}, which is not "
                f"1-{_NAME_MAX} letters, digits, _ or -"
            )
    return wrapped


class _ToolRefusal(Exception):
    """A call the tools refuse before (or instead of) reaching the engine.

    ``type``: ``unknown-tool``, ``bad-input``, ``missing-argument``,
    ``unexpected-argument`` or ``bad-argument``. (An option is refused by the
    engine's ``check_options``: ``unknown-option``, ``bad-option``, ``over-ceiling``.)
    """

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(f"{type_}: {message}")
        self.type = type_


# -- deriving the tools from the op table ---------------------------------------------


@dataclass(frozen=True, slots=True)
class _Param:
    name: str
    kind: str
    keyword_only: bool
    has_default: bool
    default: Any
    max_items: int | None = None  # an array's declared bound (``Meta(max_length=…)``)


@dataclass(frozen=True, slots=True)
class _Shape:
    """One way to call an op: the first ``size`` parameters of a signature."""

    params: tuple[_Param, ...]  # the whole signature, minus the KB
    size: int

    @property
    def taken(self) -> tuple[_Param, ...]:
        return self.params[: self.size]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.taken)

    def spelled(self) -> str:
        return "(" + ", ".join(self.names) + ")"


@dataclass(frozen=True, slots=True)
class _Tool:
    op: str
    name: str
    fn: Callable[..., Any]
    shapes: tuple[_Shape, ...]
    schema: ToolSchema
    opts: type[Options]  # the declared options Struct (no keys when none is declared)
    defaults: Options | None  # what a call naming no options runs under


def tool_name(op: str) -> str:
    """The tool name for an op: ``find-sentexes`` -> ``kb_find_sentexes``,
    ``ask?`` -> ``kb_ask_p`` (distinct from ``kb_ask``).

    Munged to the providers' identifier grammar (``_NAME_GRAMMAR``), cut to its length.
    """
    munged = op.replace("?", "_p").replace("!", "_bang").replace("-", "_")
    munged = re.sub(r"[^a-zA-Z0-9_]", "_", munged)
    return ("kb_" + munged)[:_NAME_MAX]


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


def _params(fn: Callable[..., Any]) -> tuple[_Param, ...] | None:
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
    out: list[_Param] = []
    for p in params[1:]:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            return None
        has_default = p.default is not inspect.Parameter.empty
        out.append(
            _Param(
                name=p.name,
                kind=_kind_of(p.annotation),
                keyword_only=p.kind is inspect.Parameter.KEYWORD_ONLY,
                has_default=has_default,
                default=p.default if has_default else None,
                max_items=_declared_bound(p.annotation)[1],
            )
        )
    return tuple(out)


def _shapes(fn: Callable[..., Any]) -> tuple[_Shape, ...]:
    """Every shape of ``fn``: one per overload (or the function itself) and per
    defaulted tail of each. Empty when there is no single signature to read."""
    try:
        overloads = list(typing.get_overloads(fn))
    except Exception:  # an object get_overloads cannot key
        overloads = []
    signatures = [p for p in map(_params, overloads or [fn]) if p is not None]
    shapes: list[_Shape] = []
    seen: set[tuple[str, ...]] = set()
    for params in signatures:
        for size in range(len(params) + 1):
            if all(p.has_default for p in params[size:]):
                shape = _Shape(params, size)
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
    op: str, fn: Callable[..., Any], shapes: Sequence[_Shape], opts: type[Options]
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
    shapes: Sequence[_Shape], names: Sequence[str], required: Sequence[str]
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


class _Table:
    """The tools one engine exposes, derived once from its declarations."""

    def __init__(self, eng: engine_mod.Engine) -> None:
        tools: dict[str, _Tool] = {}
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
            if not shapes or not _NAME_GRAMMAR.match(name):
                continue
            if name in tools:
                raise ValueError(
                    f"the engine's ops {tools[name].op!r} and {op!r} both become the tool "
                    f"{name!r}; rename one, or a model could not tell them apart"
                )
            opts = d.opts if d.opts is not None else Options
            schema = _build_schema(op, fn, shapes, opts)
            tools[name] = _Tool(op, name, fn, shapes, schema, opts, d.defaults)
        self.by_name = tools
        self.ops = tuple(t.op for t in tools.values())
        self.by_op = {t.op: t for t in tools.values()}


# -- dispatch -------------------------------------------------------------------------


def _select(tool: _Tool, given: Mapping[str, Any]) -> _Shape:
    """The longest shape ``given`` fully satisfies; refuses an argument it does not take.
    A ``null`` counts as absent for a name some shape takes; a name no shape takes is
    refused whatever its value (the schema's ``additionalProperties: false``)."""
    supplied = {k for k, v in given.items() if v is not None}
    named = {name for s in tool.shapes for name in s.names}
    strays = {k for k, v in given.items() if v is None and k not in named}
    fitting = [s for s in tool.shapes if set(s.names) <= supplied]
    every = " | ".join(s.spelled() for s in tool.shapes)
    if not fitting:
        raise _ToolRefusal(
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
        raise _ToolRefusal(
            "unexpected-argument",
            f"{tool.name} was given {_spell(extra)}, which the shape the input selected, "
            f"{shape.spelled()}, does not take; an argument is never dropped{hint}. "
            f"Its shapes are {every}",
        )
    return shape


def _check_sizes(tool: _Tool, shape: _Shape, given: Mapping[str, Any]) -> None:
    """Refuse, before anything is read, an array argument longer than the op declares
    (``over-ceiling``, as the engine says it)."""
    for p in shape.taken:
        value = given[p.name]
        if p.max_items is not None and isinstance(value, list) and len(value) > p.max_items:
            raise _ToolRefusal(
                "over-ceiling",
                f"{tool.name}'s {p.name} holds {len(value)} items, over the ceiling of "
                f"{p.max_items}",
            )


_END: Final = object()


def _input_chars(value: Any, cap: int) -> int:
    """About how long ``value`` spells as JSON, counted only until it passes ``cap``:
    the walk is iterative and takes at most ``cap`` steps, whatever the input holds."""
    total = 0
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        if isinstance(item, str):
            total += len(item) + 3  # the quotes and a separator
        elif isinstance(item, Mapping):
            total += 2
            stack.append(itertools.chain.from_iterable(item.items()))
        elif isinstance(item, list | tuple):
            total += 2
            stack.append(iter(item))
        else:
            total += 4
        if total > cap:
            break
    return total


def _spell(names: Iterable[str]) -> str:
    listed = sorted(names)
    return "no arguments" if not listed else ", ".join(repr(n) for n in listed)


def _convert(p: _Param, value: Any, clock: Callable[[], None]) -> Any:
    kind = p.kind
    if kind in _EDN_KINDS:
        return edn.read(value, p.name)
    if kind == "sentences":
        if isinstance(value, str):  # one string holding an EDN list of them
            return edn.read(value, p.name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _ToolRefusal(
                "bad-argument", f'{p.name} must be an array of sentence strings, e.g. ["(isa A B)"]'
            )
        read = []
        for v in value:
            clock()
            read.append(edn.read(v, p.name))
        return read
    if kind in ("handle", "integer"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _ToolRefusal("bad-argument", f"{p.name} must be a whole number, e.g. 42")
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _ToolRefusal("bad-argument", f"{p.name} must be a number")
        return value
    if kind == "string":
        if not isinstance(value, str):
            raise _ToolRefusal("bad-argument", f"{p.name} must be a string")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise _ToolRefusal("bad-argument", f"{p.name} must be true or false")
        return value
    if kind == "opts":
        return _opts(p.name, value)
    return value


def _opts(name: str, value: Any) -> dict[str, Any]:
    """A JSON object of options (or a string holding an EDN map) with plain keys."""
    if isinstance(value, str):
        value = edn.read(value, name)
    if not isinstance(value, Mapping):
        raise _ToolRefusal("bad-argument", f'{name} must be a JSON object, e.g. {{"max-depth": 3}}')
    out: dict[str, Any] = {}
    for key, item in value.items():
        text = getattr(key, "name", key)  # an EDN keyword reads as its name
        if not isinstance(text, str):
            raise _ToolRefusal("bad-argument", f"{name} keys must be strings, got {key!r}")
        out[text.removeprefix(":")] = item
    return out


def _json(value: Any) -> str:
    """``value`` for a refusal's message: its opening, or its type's name where
    no opening fits (a list 10⁵ deep) or it cannot be written."""
    try:
        return edn.write(value, 40).text.split("\n", 1)[0] or type(value).__name__
    except Exception:
        return type(value).__name__


def _no_clock() -> None:
    """The clock of what is read before the call's deadline is known (its options)."""


@dataclass(slots=True)
class _Call:
    args: list[Any]
    kwargs: dict[str, Any]
    deadline: float | None


def _prepare(tool: _Tool, shape: _Shape, given: Mapping[str, Any]) -> _Call:
    """Read the arguments, the options first, checked into the op's declared Struct
    (the engine's ``check_options``, once: the op receives the Struct as it is). The
    call's deadline is the options' ``max-ms`` (the declared default when the call
    names no options) plus :data:`_CLOCK_GRACE_S`, from now: the reading of the other
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
        deadline = time.monotonic() + max(0.0, max_ms / 1000) + _CLOCK_GRACE_S

    def clock() -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise _ToolRefusal(
                "max-ms", f"reading the arguments of {tool.name} ran past its max-ms of {max_ms}"
            )

    for p in shape.taken:
        if p.kind != "opts":
            clock()
            values[p.name] = _convert(p, given[p.name], clock)
    args = [values[p.name] for p in shape.taken if not p.keyword_only]
    kwargs = {p.name: values[p.name] for p in shape.taken if p.keyword_only}
    return _Call(args, kwargs, deadline)


class _GilYield:
    """Releases the GIL for a moment once a worker has held it for :data:`_GIL_SLICE_S`.

    A pure-Python engine read holds the GIL while it computes; with several such
    reads at once the event loop's thread waits behind all of them for it (several
    switch intervals each time). A worker that steps aside between members keeps
    the loop's lag to a few milliseconds.
    """

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = time.perf_counter()

    def __call__(self) -> None:
        now = time.perf_counter()
        if now - self.last >= _GIL_SLICE_S:
            time.sleep(0)
            self.last = time.perf_counter()


def _run(
    kb: Any,
    tool: _Tool,
    shape: _Shape,
    given: Mapping[str, Any],
    max_chars: int,
    stop: threading.Event,
) -> str:
    """The worker thread's part: read the arguments, call the engine, print the answer."""
    prepared = _prepare(tool, shape, given)
    answer = tool.fn(kb, *prepared.args, **prepared.kwargs)
    written = edn.write(
        answer, max_chars, deadline=prepared.deadline, stop=stop, checkpoint=_GilYield()
    )
    return written.text


def _refused(message: str, max_chars: int) -> ToolResult:
    """A refusal, at most ``max_chars`` characters (its ``…`` included), as an answer is."""
    return ToolResult(ok=False, error=_bounded(message, max_chars))


def _bounded(message: str, max_chars: int) -> str:
    if len(message) <= max_chars:
        return message
    return message[: max(0, max_chars - 1)] + "…"


def _check_bound(max_result_chars: object) -> int:
    if type(max_result_chars) is not int or max_result_chars < 1:
        raise ValueError(f"max_result_chars is a whole number >= 1, got {max_result_chars!r}")
    return max_result_chars


def _message(exc: Exception) -> str:
    """``str(exc)``, or a stand-in when the engine's exception cannot say even that."""
    try:
        return str(exc)
    except Exception:
        return f"({type(exc).__name__} has no printable message)"


class Toolset:
    """The read surface over one KB: the engine's derived tool table, the bound on
    reads running at once, and the answer bound travel together, so a face (MCP,
    pydantic-ai) holds one of these and nothing module-level.

    ``engine`` defaults to :func:`vaelii_llm.engine.embedded`; ``workers`` engine
    reads run at once (each in a worker thread), more calls wait their turn;
    ``max_result_chars`` bounds each printed answer; ``name`` names the set in
    the agent loop's messages (a :class:`ToolSource`).
    """

    def __init__(
        self,
        kb: Any,
        *,
        engine: engine_mod.Engine | None = None,
        workers: int = _READ_WORKERS,
        max_result_chars: int = _MAX_RESULT_CHARS,
        name: str = "kb",
    ) -> None:
        if type(workers) is not int or workers < 1:
            raise ValueError(f"workers must be a whole number >= 1, got {workers!r}")
        self.name = name
        self.kb = kb
        self.engine = engine if engine is not None else engine_mod.embedded()
        self.workers = workers
        self.max_result_chars = _check_bound(max_result_chars)
        self._table = _Table(self.engine)
        self._limiter: tuple[asyncio.AbstractEventLoop, anyio.CapacityLimiter] | None = None

    @property
    def ops(self) -> tuple[str, ...]:
        """The ops a model may call, sorted so the tool list is byte-stable."""
        return self._table.ops

    def write_ops(self) -> frozenset[str]:
        """The ops of this toolset's engine no model may reach (its declared writes,
        irreversible ones included)."""
        return self.engine.write_ops

    def schema(self, op: str) -> ToolSchema:
        """The tool schema of one exposed read; ``KeyError`` for any other op."""
        tool = self._table.by_op.get(op)
        if tool is None:
            raise KeyError(f"{op!r} is not a read the model may call")
        return tool.schema

    def schemas(
        self, only: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> list[ToolSchema]:
        """Every exposed read as a :class:`ToolSchema`, in :attr:`ops` order.

        ``only`` keeps just those ops; ``exclude`` drops some. Naming an op that is
        not an exposed read exposes nothing more.
        """
        keep = None if only is None else frozenset(only)
        drop = frozenset(exclude or ())
        return [
            t.schema
            for t in self._table.by_op.values()
            if (keep is None or t.op in keep) and t.op not in drop
        ]

    def op_of(self, name: str) -> str | None:
        """The op an exposed read's tool name came from; ``None`` for any other name,
        a write's included."""
        tool = self._table.by_name.get(name) if isinstance(name, str) else None
        return tool.op if tool is not None else None

    def _slots(self) -> anyio.CapacityLimiter:
        loop = asyncio.get_running_loop()
        held = self._limiter
        if held is None or held[0] is not loop:
            held = self._limiter = (loop, anyio.CapacityLimiter(self.workers))
        return held[1]

    async def call(self, name: str, input: Any = None) -> ToolResult:
        """Run one tool call on this toolset's KB; never raises.

        ``input`` is the provider's JSON object; a missing one (``None``) reads as no
        arguments, anything else that is not an object is refused. The longest shape
        the input fully satisfies decides the call, and an argument that shape does
        not take is refused, naming the shape selected and every shape the op has.
        Sentence, context and term arguments are read as EDN, never evaluated. An
        option past its declared ceiling (``max-depth``, ``max-ms``, ``limit``:
        :data:`MAX_LIMIT`) is refused ``over-ceiling``; a call naming no option runs
        under the op's declared default (a clocked read's ``max-ms`` is the ceiling).
        The answer is printed as EDN, at most
        ``max_result_chars`` characters, :data:`vaelii_llm._edn.CUT_MARKER` included
        when cut; a refusal is bounded the same. Before anything is read, an input
        over :data:`_MAX_INPUT_CHARS` is refused ``input-too-large`` and an array
        longer than the op declares (``maxItems`` in its schema) ``over-ceiling``;
        the arguments are then read under the call's clock (``max-ms``).

        Every failure (unknown tool, bad input, a refusal of the engine's, an engine
        bug) is ``ToolResult(ok=False, error=…)`` whose message starts with the
        refusal's type. Cancelling the awaiting task propagates at once; the worker
        stops printing at its next member and the engine's clock bounds the rest
        (its slot is freed with the cancellation, so for that moment one read more
        than ``workers`` may be running).
        """
        return await self._call(self.kb, name, input, self.max_result_chars)

    @telemetry.traced_tool
    async def _call(self, kb: Any, name: str, input: Any, max_chars: int) -> ToolResult:
        table = self._table
        try:
            tool = table.by_name.get(name) if isinstance(name, str) else None
            if tool is None:
                raise _ToolRefusal(
                    "unknown-tool",
                    f"no read tool is named {_json(name)}; the tools are "
                    + ", ".join(table.by_name),
                )
            given: Any = {} if input is None else input
            if not isinstance(given, Mapping):
                raise _ToolRefusal(
                    "bad-input",
                    f"the input of {tool.name} must be a JSON object, not {_json(input)}",
                )
            if _input_chars(given, _MAX_INPUT_CHARS) > _MAX_INPUT_CHARS:
                raise _ToolRefusal(
                    "input-too-large",
                    f"the input of {tool.name} is over {_MAX_INPUT_CHARS} characters; "
                    "ask a narrower question",
                )
            if not all(isinstance(k, str) for k in given):
                raise _ToolRefusal(
                    "bad-input",
                    f"the input of {tool.name} must be a JSON object, not {_json(input)}",
                )
            shape = _select(tool, given)
            _check_sizes(tool, shape, given)
            stop = threading.Event()
            try:
                text = await anyio.to_thread.run_sync(
                    _run,
                    kb,
                    tool,
                    shape,
                    given,
                    max_chars,
                    stop,
                    abandon_on_cancel=True,
                    limiter=self._slots(),
                )
            except BaseException:
                stop.set()  # a cancelled or failed caller: the worker stops printing
                raise
            return ToolResult(ok=True, result=text)
        except (_ToolRefusal, edn.EDNRefusal) as refusal:
            message = str(refusal)
            if not message.startswith(refusal.type):
                message = f"{refusal.type}: {message}"
            return _refused(message, max_chars)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            kind = getattr(exc, "type", None)
            if isinstance(exc, self.engine.refusal | EngineRefusal) and isinstance(kind, str):
                message = _message(exc)
                if not message.startswith(kind):
                    message = f"{kind}: {message}"
                return _refused(message, max_chars)
            return _refused(f"engine-error: {type(exc).__name__}: {_message(exc)}", max_chars)


# -- the module functions: a default toolset of the embedded engine ---------------------


@functools.cache
def _default() -> Toolset:
    return Toolset(None)


def read_ops() -> tuple[str, ...]:
    """The ops a model may call on the embedded engine, sorted (byte-stable)."""
    return _default().ops


def schema(op: str) -> ToolSchema:
    """The tool schema of one exposed read; ``KeyError`` for any other op."""
    return _default().schema(op)


def schemas(
    only: Iterable[str] | None = None, exclude: Iterable[str] | None = None
) -> list[ToolSchema]:
    """Every exposed read of the embedded engine (see :meth:`Toolset.schemas`)."""
    return _default().schemas(only, exclude)


def op_of(name: str) -> str | None:
    """The op an exposed read's tool name came from (see :meth:`Toolset.op_of`)."""
    return _default().op_of(name)


async def call(
    kb: Any, name: str, input: Any = None, max_result_chars: int = _MAX_RESULT_CHARS
) -> ToolResult:
    """Run one tool call against ``kb`` on the embedded engine (see
    :meth:`Toolset.call`); never raises. Calls share the default toolset's worker
    slots."""
    return await _default()._call(kb, name, input, _check_bound(max_result_chars))
