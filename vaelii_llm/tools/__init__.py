"""The model's read surface over a KB: tool schemas derived from the engine's op table.

Nothing here is transcribed. The tools are the ops the engine
(:func:`vaelii_llm.engine.embedded` by default) declares reads (``@op(...,
kind=READ)``, :mod:`vaelii_llm._declare`), and each tool's parameters, shapes and
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
at once per toolset and :data:`_READ_THREADS` in the whole process (one executor
every toolset shares), so a slow read never blocks the loop. The answer is printed
by :func:`vaelii_llm._edn.write`, which realizes a lazy answer only as far as
``max_result_chars`` reaches. The module functions (:func:`call`,
:func:`schemas`, …) are thin wrappers over a default toolset of the embedded
engine.

The tools are derived in :mod:`vaelii_llm.tools._schemas` and a call's arguments
read in :mod:`vaelii_llm.tools._args`; this module runs the call.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from typing import Final
from typing import Protocol
from typing import runtime_checkable

import anyio
import msgspec

from vaelii_llm import _edn as edn
from vaelii_llm import engine as engine_mod
from vaelii_llm import telemetry
from vaelii_llm._edn import opening_of
from vaelii_llm._protocol import TOOL_NAME_GRAMMAR
from vaelii_llm._protocol import TOOL_NAME_MAX
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm.engine import MAX_LIMIT
from vaelii_llm.engine import EngineRefusal
from vaelii_llm.tools._args import MAX_INPUT_CHARS
from vaelii_llm.tools._args import ToolRefusal
from vaelii_llm.tools._args import check_sizes
from vaelii_llm.tools._args import input_chars
from vaelii_llm.tools._args import prepare
from vaelii_llm.tools._args import select_shape
from vaelii_llm.tools._schemas import Shape
from vaelii_llm.tools._schemas import Table
from vaelii_llm.tools._schemas import Tool
from vaelii_llm.tools._schemas import tool_name

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

_READ_THREADS: Final = 8
"""Engine reads the whole process runs at once: every toolset, every agent run and
every event loop share one executor of this many threads, so a hundred runs each
reading six tools start no more threads than this (more reads wait their turn)."""

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _reads() -> ThreadPoolExecutor:
    """The process's one bounded executor of engine reads, made on first use."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(_READ_THREADS, thread_name_prefix="vaelii-read")
        return _executor


_GIL_SLICE_S: Final = 0.001
"""How long a worker printing an answer holds the GIL before it steps aside."""


_MAX_RESULT_CHARS: Final = edn.DEFAULT_MAX_CHARS
"""How much of an answer a call prints by default (``max_result_chars``):
the writer's :data:`vaelii_llm._edn.DEFAULT_MAX_CHARS`."""

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
    MCP server's tools) is another.

    The agent loop also reads, where a source has them: ``serial`` (true: its
    calls must run one at a time, never at once), ``read_only`` (true: every tool
    only reads, so a caller's ``approve`` is not asked) and ``hints(name)`` (what
    the source says of a tool, such as MCP's ``readOnlyHint``, shown to
    ``approve``)."""

    @property
    def name(self) -> str: ...

    def schemas(self) -> list[ToolSchema]: ...

    async def call(self, name: str, input: Any = None) -> ToolResult: ...


class Prefixed:
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
            return unknown_tool(name, names, getattr(self.inner, "max_result_chars", None))
        return await self.inner.call(name[len(self.prefix) :], input)


def unknown_tool(name: object, names: Iterable[str], bound: object = None) -> ToolResult:
    """The refusal of a name no tool of a composed source has: the name shown
    bounded whatever it is (a list 10⁵ deep too), then every tool's; cut to
    ``bound`` where the source has one."""
    message = f"unknown-tool: no tool is named {opening_of(name)}; the tools are {', '.join(names)}"
    return ToolResult(ok=False, error=_bounded(message, bound) if type(bound) is int else message)


def prefixed(source: ToolSource, prefix: str) -> ToolSource:
    """``source`` with every tool name starting ``prefix`` (``"fs_"``: ``read`` ->
    ``fs_read``), so two sets offering one name can share a loop. The prefixed names
    must still fit the providers' grammar (letters, digits, ``_``, ``-``; at most
    64); a prefix that breaks one is refused with ``ValueError``."""
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"a prefix is a non-empty string, got {prefix!r}")
    wrapped = Prefixed(source, prefix)
    for schema in wrapped.schemas():
        if not TOOL_NAME_GRAMMAR.match(schema.name):
            raise ValueError(
                f"the prefix {prefix!r} makes the tool name {schema.name!r}, which is not "
                f"1-{TOOL_NAME_MAX} letters, digits, _ or -"
            )
    return wrapped


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
    tool: Tool,
    shape: Shape,
    given: Mapping[str, Any],
    max_chars: int,
    stop: threading.Event,
) -> str:
    """The worker thread's part: read the arguments, call the engine, print the answer."""
    prepared = prepare(tool, shape, given)
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
    the agent loop's messages (a :class:`ToolSource`). Every tool it offers is a
    read (``read_only``), so the agent loop asks no approval for one, and its
    calls may run at once (``serial`` is false).
    """

    read_only: Final = True
    serial: Final = False

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
        self._table = Table(self.engine)
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
        over :data:`MAX_INPUT_CHARS` is refused ``input-too-large`` and an array
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
                raise ToolRefusal(
                    "unknown-tool",
                    f"no read tool is named {opening_of(name)}; the tools are "
                    + ", ".join(table.by_name),
                )
            given: Any = {} if input is None else input
            if not isinstance(given, Mapping):
                raise ToolRefusal(
                    "bad-input",
                    f"the input of {tool.name} must be a JSON object, not {opening_of(input)}",
                )
            if input_chars(given, MAX_INPUT_CHARS) > MAX_INPUT_CHARS:
                raise ToolRefusal(
                    "input-too-large",
                    f"the input of {tool.name} is over {MAX_INPUT_CHARS} characters; "
                    "ask a narrower question",
                )
            if not all(isinstance(k, str) for k in given):
                raise ToolRefusal(
                    "bad-input",
                    f"the input of {tool.name} must be a JSON object, not {opening_of(input)}",
                )
            shape = select_shape(tool, given)
            check_sizes(tool, shape, given)
            stop = threading.Event()
            try:
                async with self._slots():
                    run = functools.partial(_run, kb, tool, shape, given, max_chars, stop)
                    text = await asyncio.get_running_loop().run_in_executor(
                        _reads(), contextvars.copy_context().run, run
                    )
            except BaseException:
                stop.set()  # a cancelled or failed caller: the worker stops printing
                raise
            return ToolResult(ok=True, result=text)
        except (ToolRefusal, edn.EDNRefusal) as refusal:
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
