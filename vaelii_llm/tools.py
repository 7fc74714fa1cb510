"""The model's read surface over a KB: tool schemas derived from the engine's op table.

Nothing here is transcribed. The tools are the engine's op table
(:func:`vaelii_llm.engine.embedded` by default) minus what a model must not reach,
and each tool's parameters, shapes and description come from the engine
function's own signature (``typing.overload`` shapes included) and docstring. A
read added to the engine becomes a tool with no edit here.

Excluded, in :func:`read_ops`:

* the writes: the engine's write set plus :data:`EXTRA_WRITE_OPS`, the ops that
  change state which an engine may file elsewhere (``forward-chain`` stores what
  the rules derive, ``abduce`` stores hypotheses and ``abduce-discard`` drops
  them, ``preview`` holds the writer and advances the handle counter,
  ``clear-caches`` resets the measurements a model is measured through,
  ``subscribe`` registers a listener). A new op that changes state outside the
  engine's write set needs a line there. :data:`WRITE_OPS` is the union for the
  embedded engine;
* any op whose function the engine marks irreversible
  (:func:`vaelii_llm.engine.irreversible`), whatever the write set says;
* the change feed (the engine's feed ops);
* :data:`HOST_PATH_OPS`: ``kb-diff`` reads a directory on this host, a
  path-recon primitive in a prompt-injected model's hands;
* :data:`UNBOUNDED_OPS`: reads no call can bound (whole-KB sorts and audits);
* kb-less ops, and ops with no single signature (variadic, with no overloads).

:func:`call` runs one tool call and never raises (cancellation propagates): every
failure is a :class:`ToolResult` with ``ok=False`` and an ``error`` that starts
with the refusal's type (``over-ceiling: …``, ``unexpected-argument: …``). The
engine read and the printing of its answer run in a worker thread, under an
anyio :class:`~anyio.CapacityLimiter` of :data:`READ_WORKERS` per event loop, so a
slow read never blocks the loop. The answer is printed by
:func:`vaelii_llm.edn.write`, which realizes a lazy answer only as far as
``max_result_chars`` reaches.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import threading
import time
import types
import typing
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.to_thread
import msgspec

from vaelii_llm import edn, telemetry
from vaelii_llm import engine as engine_mod
from vaelii_llm.protocol import ToolResultBlock, ToolSchema

__all__ = [
    "EXTRA_WRITE_OPS",
    "HOST_PATH_OPS",
    "MAX_LIMIT",
    "READ_WORKERS",
    "UNBOUNDED_OPS",
    "WRITE_OPS",
    "ToolRefusal",
    "ToolResult",
    "Toolset",
    "call",
    "op_of",
    "read_ops",
    "schema",
    "schemas",
    "tool_name",
    "write_ops",
]

EXTRA_WRITE_OPS: Final = frozenset(
    {
        "abduce",
        "abduce-discard",
        "assert",
        "clear-caches",
        "edit",
        "edit-with-consequences",
        "forward-chain",
        "load",
        "preview",
        "retract",
        "save",
        "subscribe",
    }
)
"""Ops that change state, listed here whether or not the engine's write set has
them: a write the engine files elsewhere is still a write."""

WRITE_OPS: Final = frozenset(engine_mod.embedded().write_ops) | EXTRA_WRITE_OPS
"""Every op of the embedded engine no model may reach: its write set plus
:data:`EXTRA_WRITE_OPS` (:func:`write_ops` answers for any engine)."""

HOST_PATH_OPS: Final = frozenset({"kb-diff"})
"""Reads whose argument is a path on this host: never a tool."""

UNBOUNDED_OPS: Final = frozenset(
    {
        "all-functional-at-instant-violations",
        "all-specified-violations",
        "explain-levels",
        "exposed-clashes",
        "handles",
        "kb-quality",
        "terms",
    }
)
"""Reads with no bound a call can carry: the whole KB sorted into one answer, or
audited whole. ``sentex-count``, ``term-count``, ``find-terms``, ``escalate`` and
``kb-integrity`` answer the narrower questions."""

MAX_LIMIT: Final = 100
"""The largest ``limit`` a call may name: a count the engine realizes whole before
the printer's bound applies. ``find-terms`` and ``describe`` naming none are given
this."""

DEFAULT_LIMIT_OPS: Final = frozenset({"find-terms", "describe"})
"""Ops given ``limit`` :data:`MAX_LIMIT` when the call names none, because the engine
builds their whole answer before the printer starts: an empty search string would
answer the whole vocabulary, and a common term (a predicate) every sentex that
mentions it."""

READ_WORKERS: Final = 2
"""Engine reads one event loop runs at once, each in a worker thread; more calls
wait their turn. A pure-Python engine read holds the GIL while it computes, so
more threads add no throughput and lengthen the event loop's own wait for the GIL
(measured here, 8 CPU-bound reads at once: loop lag at most ~14 ms with 2
workers, ~42 ms with 4); two keep one long read from holding up every other."""

GIL_SLICE_S: Final = 0.001
"""How long a worker printing an answer holds the GIL before it steps aside."""

CLOCK_GRACE_S: Final = 0.1
"""How long past a read's ``max-ms`` the printer keeps realizing before it cuts the
answer itself. The engine's own clock normally ends the answer first, with a
record saying so; this is the backstop for one it does not reach."""

_EDN_KINDS: Final = frozenset({"sentence", "context", "term"})
_NAME_GRAMMAR = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


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


class ToolRefusal(Exception):
    """A call the tools refuse before (or instead of) reaching the engine.

    ``type``: ``unknown-tool``, ``bad-input``, ``missing-argument``, ``unknown-option``,
    ``unexpected-argument``, ``bad-argument``, ``over-ceiling`` or ``bad-option``.
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


def tool_name(op: str) -> str:
    """The tool name for an op: ``find-sentexes`` -> ``kb_find_sentexes``,
    ``ask?`` -> ``kb_ask_p`` (distinct from ``kb_ask``).

    Munged to the providers' identifier grammar ``^[a-zA-Z0-9_-]{1,64}$``.
    """
    munged = op.replace("?", "_p").replace("!", "_bang").replace("-", "_")
    munged = re.sub(r"[^a-zA-Z0-9_]", "_", munged)
    return ("kb_" + munged)[:64]


def _kind_names() -> dict[str, str]:
    return {
        getattr(marker, "__name__", str(marker)): kind
        for marker, kind in engine_mod.ARG_KINDS.items()
    }


def _kind_of(annotation: object) -> str:
    """The ARG_KINDS kind of a parameter annotation (``X | None`` reads as ``X``)."""
    if isinstance(annotation, str):  # an annotation that would not evaluate
        name = annotation.replace(" ", "").removesuffix("|None").rsplit(".", 1)[-1]
        return _kind_names().get(name, "json")
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _kind_of(members[0])
        return "json"
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


def _property(kind: str, op: str, eng: engine_mod.Engine) -> dict[str, Any]:
    c = eng.ceilings
    if kind == "sentence":
        return {
            "type": "string",
            "description": 'A sentence: a string holding one EDN list, e.g. "(isa Muffet Spider)"; '
            'a symbol starting with ? is a variable, e.g. "(isa ?x Spider)".',
        }
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
    if kind == "opts" and op in eng.opt_keys:
        return _opts_property(op, eng)
    if kind == "opts":
        keys = []
        if op in c.accepts_max_depth:
            keys.append(f"max-depth (at most {c.max_depth})")
        if op in c.accepts_max_ms:
            clocked = (
                f"; the read runs under {c.max_ms} when none is named" if (op in c.clocked) else ""
            )
            keys.append(f"max-ms (at most {c.max_ms}{clocked})")
        if op in DEFAULT_LIMIT_OPS:
            keys.append(f"limit (at most {MAX_LIMIT}; {MAX_LIMIT} when none is named)")
        accepted = "; keys include " + ", ".join(keys) if keys else ""
        return {
            "type": "object",
            "description": "Options, a JSON object with kebab-case keys, e.g. "
            f'{{"max-depth": 3}}{accepted}. A limit, where the read takes one, is at most '
            f"{MAX_LIMIT}.",
        }
    if kind in ("integer", "string", "boolean", "number"):
        return {"type": kind}
    return {}


def _opts_property(op: str, eng: engine_mod.Engine) -> dict[str, Any]:
    """The opts object with exactly the keys the engine says ``op`` reads, each
    bounded by its ceiling, so the model cannot name a key nothing reads."""
    c = eng.ceilings
    bounds = {"max-depth": c.max_depth, "max-ms": c.max_ms, "limit": MAX_LIMIT}
    notes = {
        "max-depth": "How many rule steps a proof may take.",
        "max-ms": "The read's time budget in milliseconds"
        + (f"; it runs under {c.max_ms} when none is named." if op in c.clocked else "."),
        "inherited": "Also list the sentexes of the contexts this one inherits from.",
        "limit": "How many results to build"
        + (f"; {MAX_LIMIT} when none is named." if op in DEFAULT_LIMIT_OPS else "."),
    }
    properties: dict[str, Any] = {}
    for key, json_kind in eng.opt_keys[op].items():
        prop: dict[str, Any] = {"type": json_kind}
        if key in bounds:
            prop.update(minimum=1 if key == "max-ms" else 0, maximum=bounds[key])
        if key in notes:
            prop["description"] = notes[key]
        properties[key] = prop
    return {
        "type": "object",
        "description": "Options, a JSON object with kebab-case keys; any other key is refused.",
        "properties": properties,
        "additionalProperties": False,
    }


def _build_schema(
    op: str, fn: Callable[..., Any], shapes: Sequence[_Shape], eng: engine_mod.Engine
) -> ToolSchema:
    properties: dict[str, dict[str, Any]] = {}
    kinds: dict[str, list[str]] = {}
    for shape in shapes:
        for p in shape.taken:
            if p.kind not in kinds.setdefault(p.name, []):
                kinds[p.name].append(p.kind)
    for name, ks in kinds.items():
        props = [_property(k, op, eng) for k in ks]
        properties[name] = props[0] if len(props) == 1 else {"anyOf": props}
    required = [n for n in kinds if all(n in s.names for s in shapes)]
    description = inspect.cleandoc(inspect.getdoc(fn) or f"The engine's {op} read.")
    if len(shapes) > 1:
        description += "\n\nShapes (give exactly the arguments of one): " + " | ".join(
            s.spelled() for s in shapes
        )
    strict = len(required) == len(properties)
    return ToolSchema(
        name=tool_name(op),
        description=description,
        input_schema={
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        strict=True if strict else None,
    )


def write_ops(engine: engine_mod.Engine | None = None) -> frozenset[str]:
    """The ops no model may reach: the engine's write set plus :data:`EXTRA_WRITE_OPS`."""
    eng = _engine(engine)
    return frozenset(eng.write_ops) | EXTRA_WRITE_OPS


class _Table:
    """The tools one engine exposes, derived once."""

    def __init__(self, eng: engine_mod.Engine) -> None:
        self.engine = eng
        excluded = (
            write_ops(eng)
            | frozenset(eng.feed_ops)
            | frozenset(eng.host_path_ops)
            | HOST_PATH_OPS
            | UNBOUNDED_OPS
            | frozenset(eng.unbounded_ops)
            | frozenset(eng.kbless_ops)
        )
        tools: dict[str, _Tool] = {}
        for op in sorted(eng.ops):
            fn = eng.ops[op]
            if op in excluded or engine_mod.is_irreversible(fn):
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
            tools[name] = _Tool(op, name, fn, shapes, _build_schema(op, fn, shapes, eng))
        self.by_name = tools
        self.ops = tuple(t.op for t in tools.values())
        self.by_op = {t.op: t for t in tools.values()}


_DEFAULT: list[engine_mod.Engine] = []
_TABLES: dict[int, _Table] = {}  # by id(engine); the table holds the engine alive
_TABLES_LOCK = threading.Lock()
_MAX_TABLES: Final = 16


def _engine(engine: engine_mod.Engine | None) -> engine_mod.Engine:
    if engine is not None:
        return engine
    if not _DEFAULT:
        _DEFAULT.append(engine_mod.embedded())
    return _DEFAULT[0]


def _table(engine: engine_mod.Engine | None) -> _Table:
    eng = _engine(engine)
    table = _TABLES.get(id(eng))
    if table is not None and table.engine is eng:
        return table
    table = _Table(eng)
    with _TABLES_LOCK:
        if len(_TABLES) >= _MAX_TABLES:
            _TABLES.pop(next(iter(_TABLES)))
        _TABLES[id(eng)] = table
    return table


def read_ops(engine: engine_mod.Engine | None = None) -> tuple[str, ...]:
    """The ops a model may call, sorted so the tool list is byte-stable."""
    return _table(engine).ops


def schema(op: str, engine: engine_mod.Engine | None = None) -> ToolSchema:
    """The tool schema of one exposed read; ``KeyError`` for any other op."""
    tool = _table(engine).by_op.get(op)
    if tool is None:
        raise KeyError(f"{op!r} is not a read the model may call")
    return tool.schema


def schemas(
    only: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    engine: engine_mod.Engine | None = None,
) -> list[ToolSchema]:
    """Every exposed read as a :class:`ToolSchema`, in :func:`read_ops` order.

    ``only`` keeps just those ops; ``exclude`` drops some. Naming an op that is
    not an exposed read exposes nothing more.
    """
    table = _table(engine)
    keep = None if only is None else frozenset(only)
    drop = frozenset(exclude or ())
    return [
        t.schema
        for t in table.by_op.values()
        if (keep is None or t.op in keep) and t.op not in drop
    ]


def op_of(name: str, engine: engine_mod.Engine | None = None) -> str | None:
    """The op an exposed read's tool name came from; ``None`` for any other name,
    a write's included."""
    tool = _table(engine).by_name.get(name) if isinstance(name, str) else None
    return tool.op if tool is not None else None


# -- dispatch -------------------------------------------------------------------------


def _select(tool: _Tool, given: Mapping[str, Any]) -> _Shape:
    """The longest shape ``given`` fully satisfies; refuses an argument it does not take."""
    supplied = {k for k, v in given.items() if v is not None}
    fitting = [s for s in tool.shapes if set(s.names) <= supplied]
    every = " | ".join(s.spelled() for s in tool.shapes)
    if not fitting:
        raise ToolRefusal(
            "missing-argument",
            f"{tool.name} was given {_spell(supplied)}, which completes none of its "
            f"shapes; its shapes are {every}",
        )
    shape = max(fitting, key=lambda s: s.size)  # first declared wins a tie
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


def _spell(names: Iterable[str]) -> str:
    listed = sorted(names)
    return "no arguments" if not listed else ", ".join(repr(n) for n in listed)


def _convert(p: _Param, value: Any) -> Any:
    kind = p.kind
    if kind in _EDN_KINDS:
        return edn.read(value, p.name)
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


def _bound(key: str, value: Any, ceiling: int) -> int:
    """``value`` as an int, refused unless it is a whole number from the least
    the key allows (1 ms for ``max-ms``, else 0) to ``ceiling``, as the published
    schema says. JSON has one number type, so ``3.0`` reads as 3."""
    least = 1 if key == "max-ms" else 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ToolRefusal(
            "bad-option", f"{key} must be a whole number of at least {least}, got {_json(value)}"
        )
    if value > ceiling:
        raise ToolRefusal("over-ceiling", f"{key} {_json(value)} is over the ceiling of {ceiling}")
    return int(value)


def _json(value: Any) -> str:
    try:
        return edn.write(value, 40).text.split("\n", 1)[0]
    except Exception:
        return type(value).__name__


@dataclass(slots=True)
class _Call:
    args: list[Any]
    kwargs: dict[str, Any]
    deadline: float | None


def _prepare(tool: _Tool, shape: _Shape, given: Mapping[str, Any], eng: engine_mod.Engine) -> _Call:
    """Read the arguments, hold the bounds under the ceilings, fill the clock."""
    c = eng.ceilings
    values = {p.name: _convert(p, given[p.name]) for p in shape.taken}
    for p in shape.taken:
        if p.name == "limit" and p.kind in ("integer", "number"):
            values[p.name] = _bound("limit", values[p.name], MAX_LIMIT)
    opts_param = next((p for p in shape.params if p.kind == "opts"), None)
    opts: dict[str, Any] | None = None
    if opts_param is not None:
        opts = values.get(opts_param.name)
    if opts is not None:
        accepted = eng.opt_keys.get(tool.op)
        unknown = sorted(set(opts) - set(accepted)) if accepted is not None else []
        if accepted is not None and unknown:
            raise ToolRefusal(
                "unknown-option",
                f"{tool.name} reads no option {unknown[0]!r}; it accepts: "
                + (", ".join(accepted) or "none"),
            )
        ceilings = {"max-depth": c.max_depth, "max-ms": c.max_ms, "limit": MAX_LIMIT}
        for key, ceiling in ceilings.items():
            if key in opts:
                opts[key] = _bound(key, opts[key], ceiling)
    fill: dict[str, Any] = {}
    if tool.op in c.clocked and tool.op in c.accepts_max_ms and "max-ms" not in (opts or {}):
        fill["max-ms"] = c.max_ms
    if tool.op in DEFAULT_LIMIT_OPS and "limit" not in (opts or {}):
        fill["limit"] = MAX_LIMIT
    taken = list(shape.taken)
    if fill and opts_param is not None:
        if opts_param not in taken:
            index = shape.params.index(opts_param)
            skipped = shape.params[shape.size : index]
            if all(p.has_default and p.default is not ... for p in skipped):
                for p in skipped:
                    values[p.name] = p.default
                taken = list(shape.params[: index + 1])
        if opts_param in taken:
            values[opts_param.name] = {**(opts or {}), **fill}
            opts = values[opts_param.name]
    max_ms = (opts or {}).get("max-ms")
    if max_ms is None and tool.op in c.clocked:
        max_ms = c.max_ms
    deadline = None
    if isinstance(max_ms, int | float) and not isinstance(max_ms, bool):
        deadline = time.monotonic() + max(0.0, max_ms / 1000) + CLOCK_GRACE_S
    args = [values[p.name] for p in taken if not p.keyword_only]
    kwargs = {p.name: values[p.name] for p in taken if p.keyword_only}
    return _Call(args, kwargs, deadline)


class _GilYield:
    """Releases the GIL for a moment once a worker has held it for :data:`GIL_SLICE_S`.

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
        if now - self.last >= GIL_SLICE_S:
            time.sleep(0)
            self.last = time.perf_counter()


def _run(
    kb: Any,
    tool: _Tool,
    shape: _Shape,
    given: Mapping[str, Any],
    eng: engine_mod.Engine,
    max_chars: int,
    stop: threading.Event,
) -> str:
    """The worker thread's part: read the arguments, call the engine, print the answer."""
    prepared = _prepare(tool, shape, given, eng)
    answer = tool.fn(kb, *prepared.args, **prepared.kwargs)
    written = edn.write(
        answer, max_chars, deadline=prepared.deadline, stop=stop, checkpoint=_GilYield()
    )
    return written.text


_LIMITERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _limiter() -> anyio.CapacityLimiter:
    loop = asyncio.get_running_loop()
    limiter = _LIMITERS.get(loop)
    if limiter is None:
        limiter = _LIMITERS[loop] = anyio.CapacityLimiter(READ_WORKERS)
    return limiter


def _refused(message: str, max_chars: int) -> ToolResult:
    bound = max(max_chars, 200)
    if len(message) > bound:
        message = message[:bound] + "…"
    return ToolResult(ok=False, error=message)


@telemetry.traced_tool
async def call(
    kb: Any,
    name: str,
    input: Any = None,
    max_result_chars: int = 4000,
    engine: engine_mod.Engine | None = None,
) -> ToolResult:
    """Run one tool call against ``kb``; never raises.

    ``input`` is the provider's JSON object; a missing one (``None``) reads as no
    arguments, anything else that is not an object is refused. The longest shape
    the input fully satisfies decides the call, and an argument that shape does
    not take is refused, naming the shape selected and every shape the op has.
    Sentence, context and term arguments are read as EDN, never evaluated.
    ``max-depth``, ``max-ms`` and ``limit`` past the engine's ceilings (``limit``:
    :data:`MAX_LIMIT`) are refused ``over-ceiling``; a clocked read that names no
    ``max-ms`` runs under the ceiling. The answer is printed as EDN, at most
    ``max_result_chars`` of it plus :data:`vaelii_llm.edn.CUT_MARKER` when cut.

    Every failure (unknown tool, bad input, a refusal of the engine's, an engine
    bug) is ``ToolResult(ok=False, error=…)`` whose message starts with the
    refusal's type. Cancelling the awaiting task propagates at once; the worker
    stops printing at its next member and the engine's clock bounds the rest
    (its limiter slot is freed with the cancellation, so for that moment one
    read more than :data:`READ_WORKERS` may be running).
    """
    try:
        eng = _engine(engine)
        table = _table(eng)
        tool = table.by_name.get(name) if isinstance(name, str) else None
        if tool is None:
            raise ToolRefusal(
                "unknown-tool",
                f"no read tool is named {_json(name)}; the tools are " + ", ".join(table.by_name),
            )
        given: Any = {} if input is None else input
        if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
            raise ToolRefusal(
                "bad-input", f"the input of {tool.name} must be a JSON object, not {_json(input)}"
            )
        shape = _select(tool, given)
        stop = threading.Event()
        try:
            text = await anyio.to_thread.run_sync(
                _run,
                kb,
                tool,
                shape,
                given,
                eng,
                max_result_chars,
                stop,
                abandon_on_cancel=True,
                limiter=_limiter(),
            )
        except BaseException:
            stop.set()  # a cancelled or failed caller: the worker stops printing
            raise
        return ToolResult(ok=True, result=text)
    except (ToolRefusal, edn.EDNRefusal) as refusal:
        message = str(refusal)
        if not message.startswith(refusal.type):
            message = f"{refusal.type}: {message}"
        return _refused(message, max_result_chars)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        kind = getattr(exc, "type", None)
        if isinstance(exc, _engine_refusal(engine)) and isinstance(kind, str):
            message = _message(exc)
            if not message.startswith(kind):
                message = f"{kind}: {message}"
            return _refused(message, max_result_chars)
        return _refused(f"engine-error: {type(exc).__name__}: {_message(exc)}", max_result_chars)


def _message(exc: Exception) -> str:
    """``str(exc)``, or a stand-in when the engine's exception cannot say even that."""
    try:
        return str(exc)
    except Exception:
        return f"({type(exc).__name__} has no printable message)"


def _engine_refusal(engine: engine_mod.Engine | None) -> type[Exception]:
    try:
        return _engine(engine).refusal
    except Exception:
        return engine_mod.EngineRefusal


class Toolset:
    """The read surface over one KB, as an object: the derived table, the call
    bound and the engine travel together, so a face (MCP, pydantic-ai) holds
    one of these and nothing module-level.

    ``schemas()``, ``call(name, input)`` and ``op_of(name)`` behave as the
    module functions of the same names, on this toolset's KB and engine.
    """

    def __init__(
        self,
        kb: Any,
        *,
        engine: engine_mod.Engine | None = None,
        max_result_chars: int = 4000,
    ) -> None:
        self.kb = kb
        self.engine = _engine(engine)
        self.max_result_chars = max_result_chars

    def schemas(
        self, only: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> list[ToolSchema]:
        """Every exposed read as a :class:`ToolSchema`, byte-stable in order."""
        return schemas(only, exclude, engine=self.engine)

    def op_of(self, name: str) -> str | None:
        """The op a tool name came from; ``None`` for a write or an unknown name."""
        return op_of(name, engine=self.engine)

    async def call(self, name: str, input: Any = None) -> ToolResult:
        """Run one tool call on this toolset's KB; never raises (cancellation
        propagates)."""
        return await call(
            self.kb, name, input, max_result_chars=self.max_result_chars, engine=self.engine
        )
