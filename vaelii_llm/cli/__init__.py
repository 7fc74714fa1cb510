"""The ``vaelii-llm`` command: a thin shell over the library, holding no logic of its own.

``ask``     ask the configured model a question it answers by reading the KB
``status``  which backend answers now, and what its host serves and its model can do
``config``  every switch with the value it reads now (credentials only as set/unset)
``tools``   the tool schemas a model is offered, derived from the engine
``call``    run one tool call against the sample KB (or an EDN file)
``vote``    a majority yes/no vote over the configured backend's hosts
``warm``    load the configured backend's model and hold it resident
``mcp``     serve the read surface to an MCP host (stdio, or streamable HTTP)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from contextlib import AsyncExitStack
from contextlib import asynccontextmanager
from contextlib import contextmanager
from typing import TYPE_CHECKING
from typing import Any

from vaelii_llm import _edn
from vaelii_llm import config
from vaelii_llm import errors
from vaelii_llm._protocol import MAX_WAIT_MS
from vaelii_llm._transport.urls import hide_userinfo
from vaelii_llm._version import __version__
from vaelii_llm.cli._drawing import AskPrinter
from vaelii_llm.cli._drawing import Waiting
from vaelii_llm.cli._drawing import say_ignored
from vaelii_llm.engine import EngineRefusal
from vaelii_llm.errors import excerpt

if TYPE_CHECKING:
    from vaelii_llm import agent
    from vaelii_llm import pool
    from vaelii_llm._protocol import Provider

__all__ = ["main"]


def _print_config() -> int:
    for switch in config.every_switch():  # a registered kind's own switches included
        _print_switch(switch)
    return 0


def _print_switch(switch: config.Switch) -> None:
    name, default = switch.name, switch.default
    raw = os.environ.get(name)
    if switch.secret:
        shown = "set" if raw and raw.strip() else "unset"
    elif raw is None:
        shown = f"unset (default {default})" if default else "unset"
    else:
        shown = repr(hide_userinfo(raw)) + _not_as_written(switch, raw)
    print(f"{name:32} {shown}")


def _not_as_written(switch: config.Switch, raw: str) -> str:
    """What follows a value the package will not use as written: the refusal
    its reader raises, or the default its reader falls back to; else nothing."""
    try:
        used = switch.reader()
    except ValueError as exc:
        return f" (refused: {exc})"
    written = raw.strip().rstrip("/")
    if switch.default is None or not written or written == switch.default:
        return ""
    return (
        f" (not usable: the default {switch.default} is used)"
        if str(used) == switch.default
        else ""
    )


def _checked_kind(explicit: str | None = None, *, hosts: bool = False) -> str:
    """The kind a command runs, once the switches it reads are checked (no
    I/O): a kind naming no backend or an unusable URL switch is a bad-switch
    stop (exit 2) naming the variable; ``hosts``: the pool's host list too."""
    from vaelii_llm import _switch_check

    kind = config.provider_kind(explicit)
    named_by = "--provider" if explicit is not None else config._PROVIDER.name
    why = _switch_check.bad_kind(kind, named_by) or _switch_check.bad_switches(kind)
    if why is None and hosts:
        why = _bad_hosts(kind)
    if why is not None:
        raise _Stop(2, "bad-switch", why)
    return kind


def _bad_hosts(kind: str) -> str | None:
    """Why the pool's host list of ``kind`` will not read, naming its variable."""
    from vaelii_llm import _backends
    from vaelii_llm import pool

    switch = _backends.record(kind).hosts_switch
    if switch is None or config._getenv(switch) is None:
        return None
    try:
        listed = pool.hosts(kind=kind)
    except errors.LLMBadHosts as exc:
        return f"{switch} will not read: {exc}"
    return None if listed else pool._blank_hosts(switch)


async def _status() -> int:
    from vaelii_llm import _backends
    from vaelii_llm import providers

    kind = _checked_kind()
    reason = await providers.unavailable_reason(kind)
    print(f"configured: {kind}\nanswering:  {'stub' if reason else kind}")
    if reason:
        print(f"why:        {reason}")
    elif config._read(config._PROVIDER) is None:  # the stub by default, not by choice
        print(f"why:        {_backends.nothing_configured()}")
    lines = _backends.record(kind).status_lines
    if lines is not None:
        async for line in _backends.import_ref(lines)(reason is None):
            print(line)
    return 0 if reason is None else ASK_STUB_ONLY


async def _print_tools(as_json: bool, servers: Sequence[_Server] = (), kb_too: bool = True) -> int:
    import msgspec

    from vaelii_llm import agent
    from vaelii_llm import tools

    if not (kb_too or servers):
        raise _Stop(2, "error", "--no-kb leaves no tools: name a server with --mcp or --mcp-http")
    kb_tools = [tools.Toolset(None)] if kb_too else []  # the schemas need no KB
    async with _with_servers(kb_tools, servers) as sources:
        listed = agent.together(toolsets=sources).schemas()
    if as_json:
        print(msgspec.json.format(msgspec.json.encode(listed)).decode())
    else:
        for schema in listed:
            first = schema.description.strip().splitlines()[0] if schema.description else ""
            print(f"{schema.name:28} {first}")
    return 0


# -- ask ------------------------------------------------------------------------------

_ASK_BUDGETS = (
    "max_input_tokens",
    "max_output_tokens",
    "max_tool_calls",
    "max_tool_calls_per_turn",
)
"""The agent budgets ``ask`` takes as options (``--max-tool-calls`` …)."""
ASK_EXIT: dict[str, int] = {
    "answered": 0,
    "refusal": 3,
    "max_tokens": 4,
    "max_turns": 5,
    **dict.fromkeys(_ASK_BUDGETS, 5),
}
"""The exit status of ``ask`` for each way the tool loop stops."""
ASK_STUB_ONLY = 2
"""The exit status when the configured backend cannot answer (only the stub could)."""

ASK_STOPPED: dict[str, str] = {
    "refusal": "refused: the model declined to answer",
    "max_tokens": "truncated: the answer ran into max_tokens",
    "max_turns": "turn limit: the model was still asking for tools after {turns} turns "
    "(raise --max-turns)",
    **{
        name: f"budget: {name} reached after {{turns}} turns (raise --{name.replace('_', '-')})"
        for name in _ASK_BUDGETS
    },
}

ASK_SERVER_GONE = 6
"""The exit status when an MCP server died (or hung up) during the loop."""

EXIT_STATUSES: tuple[tuple[int, str], ...] = (
    (
        0,
        (
            "done: an answer, a verdict (turns that failed said on stderr), a listing, "
            "a tool's result; `status`: the backend that answers is the one configured "
            "(the stub too: chosen, or with nothing configured)"
        ),
    ),
    (
        1,
        (
            "a typed error once the backend was found able to answer (a timeout, the far "
            "end's error status, a bad --kb file, an MCP server that would not start or "
            "list its tools); `call`: the tool refused (the result says why); `vote`: "
            "every turn failed at hosts that answer"
        ),
    ),
    (
        ASK_STUB_ONLY,
        (
            "the configured backend cannot answer now (nothing configured, unreachable, "
            "no credential, a wrong base URL, a model not there or without tools): the "
            "line leads with the cause and only the stub could answer; or a bad argument "
            "or switch value (bad-switch: the variable and what is wrong with it)"
        ),
    ),
    (3, "`ask`: the model refused"),
    (4, "`ask`: the answer was truncated at max_tokens"),
    (
        5,
        (
            "`ask`: the turn limit or a budget (--max-tool-calls ...) ran out while the "
            "model still asked for tools"
        ),
    ),
    (
        ASK_SERVER_GONE,
        (
            "`ask`: an MCP server died or hung up during the loop (its later calls were "
            "error results the model read; the answer is printed, then the reason)"
        ),
    ),
    (130, "interrupted (Ctrl-C): one line, `interrupted`"),
)
"""Every command's exit statuses: one table, shown by each ``--help`` and
in the scripts guide."""


def _exit_table() -> str:
    import textwrap

    rows = [
        textwrap.fill(meaning, 88, initial_indent=f"  {status:<4} ", subsequent_indent=" " * 7)
        for status, meaning in EXIT_STATUSES
    ]
    return "exit status (every command):\n" + "\n".join(rows) + "\n"


ASK_EPILOG = (
    _exit_table()
    + """
A far end that shows it ignores the tools is said once on stderr, naming the
fix, and the model still answers (without the knowledge base; exit 0):
`no-tools: ...` before the turn when the server says its chat template renders
none (llama.cpp's /props), else `tools-ignored: ...` when it read fewer input
tokens than the tools take.
"""
)


class _Stop(Exception):
    """A command ends here: its exit status, a kind and one line saying why."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


def _stub_only(reason: str) -> _Stop:
    return _Stop(ASK_STUB_ONLY, "stub-only", f"only the stub can answer: {reason}")


def _cannot_answer(reason: str) -> _Stop:
    """The configured backend cannot answer now (exit 2): the probe's
    cause leads, its type as the line's kind (``llm-unreachable: ...``), else
    ``cannot-answer: ...`` for a reason naming no type."""
    cause, colon, message = reason.partition(": ")
    if colon and cause and " " not in cause:
        return _Stop(ASK_STUB_ONLY, cause, message)
    return _Stop(ASK_STUB_ONLY, "cannot-answer", reason)


STUB_SAYS = "answering: the scripted stub, not a model (named as the provider)"
"""The line ``ask`` prints on stderr before a turn the stub answers."""


def _stub_answer(sources: Sequence[Any]) -> Provider:
    """The stub ``ask`` runs when it is named: one answer naming the tools it was
    offered (the KB's and each MCP server's), so ``--mcp`` can be tried offline."""
    from vaelii_llm import agent
    from vaelii_llm.providers import stub

    names = [schema.name for schema in agent.together(toolsets=sources).schemas()]
    return stub.provider(
        default=f"The scripted stub answers; no model read the question. "
        f"It was offered {len(names)} tool(s): {', '.join(names)}."
    )


@contextmanager
def _quiet_fallback() -> Iterator[None]:
    """Hold back the selection's fallback warning: ``ask`` says it in its own one line."""
    logger = logging.getLogger("vaelii_llm.providers")
    handler = logging.NullHandler()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


_Server = tuple[str, str]
"""An MCP server named on the command line: ``("stdio", COMMAND)`` or ``("http", URL)``."""


def _load_kb(kb_path: str | None) -> Any:
    """The KB ``--kb`` names (the sample without it). It reads a file: a
    coroutine calls it through ``asyncio.to_thread``. A file holding no
    sentence is refused: a model would read an empty KB and say nothing of it."""
    from vaelii_llm import engine
    from vaelii_llm import kb

    if not kb_path:
        return kb.sample()
    loaded = kb.load_edn(kb_path)
    if engine.embedded().ops["sentex-count"](loaded) == 0:
        raise _Stop(
            1,
            "bad-kb",
            f"{kb_path} holds no sentence; name an EDN file of sentences, e.g. (isa Muffet Spider)",
        )
    return loaded


async def _kb_toolset(
    kb_path: str | None, kb_too: bool, servers: Sequence[_Server], **options: Any
) -> list[Any]:
    """The KB's toolset (built with ``options``), unless ``--no-kb`` (which needs
    a server in its place)."""
    from vaelii_llm import tools

    if not kb_too:
        if not servers:
            raise _Stop(
                2, "error", "--no-kb leaves no tools: name a server with --mcp or --mcp-http"
            )
        return []
    return [tools.Toolset(await asyncio.to_thread(_load_kb, kb_path), **options)]


@asynccontextmanager
async def _with_servers(
    sources: list[Any], servers: Sequence[_Server], **options: Any
) -> AsyncIterator[list[Any]]:
    """``sources`` and each MCP server's toolset (built with ``options``), open;
    every server's session (and child process) closed on the way out, however
    the command ends."""
    if not servers:
        yield sources
        return
    try:
        from vaelii_llm.integrations.mcp_client import McpServerError
        from vaelii_llm.integrations.mcp_client import McpToolset
    except ImportError:
        raise _Stop(
            2, "error", "--mcp needs the mcp extra: pip install 'vaelii-llm[mcp]'"
        ) from None
    async with AsyncExitStack() as stack:
        opened = list(sources)
        for how, where in servers:
            made = (
                McpToolset.stdio(where, **options)
                if how == "stdio"
                else McpToolset.http(where, **options)
            )
            try:
                opened.append(await stack.enter_async_context(made))
            except McpServerError as exc:
                raise _Stop(1, "mcp-server", str(exc)) from None
        yield opened


async def _ask(
    question: str,
    kb_path: str | None,
    kind: str | None,
    max_turns: int,
    as_json: bool,
    servers: Sequence[_Server] = (),
    kb_too: bool = True,
    cache: bool | None = None,
    budgets: Mapping[str, int | None] | None = None,
    stall_ms: int | None = None,
    timeout_ms: int | None = None,
) -> int:
    from vaelii_llm import _backends
    from vaelii_llm import agent
    from vaelii_llm import providers
    from vaelii_llm.providers.stub import StubProvider

    chosen = _checked_kind(kind)
    on_stub = chosen == "stub"
    if on_stub and kind is None and config._read(config._PROVIDER) is None:
        raise _stub_only(_backends.nothing_configured())  # the stub by default, not by choice
    sources = await _kb_toolset(kb_path, kb_too, servers)
    no_tools: str | None = None
    if not on_stub:
        reason = await providers.unavailable_reason(chosen)
        if reason is not None:
            raise _cannot_answer(reason)
        record = _backends.record(chosen)
        check = record.cannot_call_tools
        refused = None if check is None else await _backends.import_ref(check)()
        if refused is not None:
            raise _Stop(ASK_STUB_ONLY, "no-tools", refused)
        no_tools = await providers.tools_dropped(chosen)
        if no_tools is not None:  # said once, before the turn; the model still answers
            print(f"no-tools: {no_tools}", file=sys.stderr, flush=True)
    async with AsyncExitStack() as stack:
        if not on_stub:
            with _quiet_fallback():
                model = await stack.enter_async_context(await providers.provider(chosen))
            if isinstance(model, StubProvider):  # it went away between the check and the build
                raise _stub_only(f"{chosen} stopped answering; `vaelii-llm status` checks")
        sources = await stack.enter_async_context(_with_servers(sources, servers))
        if on_stub:  # named: the tools are offered, and no model reads them
            print(STUB_SAYS, file=sys.stderr)
            model = await stack.enter_async_context(_stub_answer(sources))
        printer = None if as_json else AskPrinter(sys.stdout)
        shown: Callable[[agent.Event], None] = say_ignored if printer is None else printer
        waiting = Waiting(sys.stderr)

        def watch(event: agent.Event) -> None:
            waiting.seen(event)
            if no_tools is None or not isinstance(event, agent.ToolsIgnored):  # said once
                shown(event)

        limits = budgets or {}
        turn = _turn_bounds(stall_ms=stall_ms, timeout_ms=timeout_ms)
        waiting.start()
        try:
            result = await agent.run(
                model,
                agent.request(question, sources, **turn) if turn else question,
                toolsets=sources,
                max_turns=max_turns,
                deltas=not as_json,
                cache=cache,
                on_event=watch,
                max_input_tokens=limits.get("max_input_tokens"),
                max_output_tokens=limits.get("max_output_tokens"),
                max_tool_calls=limits.get("max_tool_calls"),
                max_tool_calls_per_turn=limits.get("max_tool_calls_per_turn"),
            )
        finally:  # a failure's line on stderr starts on a line of its own
            await waiting.stop()
            if printer is not None:
                printer.end()
    if printer is None:
        print(json.dumps(result.summary(), ensure_ascii=False))
    if result.stopped != "answered":
        print(ASK_STOPPED[result.stopped].format(turns=result.turns), file=sys.stderr)
    gone = [s.gone for s in sources if getattr(s, "gone", None)]
    if gone:
        print(f"mcp-server-gone: {gone[0]}", file=sys.stderr)
        return ASK_SERVER_GONE
    return ASK_EXIT[result.stopped]


def _turn_bounds(**bounds: int | None) -> dict[str, int]:
    """The :class:`~vaelii_llm.Request` bounds a command was given (``--timeout-ms``,
    ``--stall-ms``), the unset ones left to the request's defaults."""
    return {name: value for name, value in bounds.items() if value is not None}


def _add_timeout_flag(parser: argparse.ArgumentParser) -> None:
    import msgspec

    from vaelii_llm._protocol import Request

    (default,) = [f.default for f in msgspec.structs.fields(Request) if f.name == "timeout_ms"]
    parser.add_argument(
        "--timeout-ms",
        type=_whole_number(1, "--timeout-ms", MAX_WAIT_MS),
        help=f"each model turn's whole budget: the connection, the head and the whole "
        f"answer (default {default})",
    )


def _whole_number(least: int, what: str, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``least`` (and at most
    ``most``, when given), refused in words."""

    def read(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{what} takes a whole number, got {excerpt(text, 40)!r}"
            ) from None
        if number < least:
            raise argparse.ArgumentTypeError(
                f"{what} takes at least {least}, got {excerpt(text, 40)}"
            )
        if most is not None and number > most:
            raise argparse.ArgumentTypeError(
                f"{what} takes at most {most}, got {excerpt(text, 40)}"
            )
        return number

    read.__name__ = what  # argparse names a failed type by it
    return read


def _add_server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="'COMMAND ARGS...'",
        help="an MCP server to launch over stdio and offer the tools of (repeatable)",
    )
    parser.add_argument(
        "--mcp-http",
        action="append",
        default=[],
        metavar="URL",
        help="an MCP server over streamable HTTP to offer the tools of (repeatable)",
    )
    parser.add_argument(
        "--no-kb", action="store_true", help="offer only the MCP servers' tools, not the KB's"
    )


def _servers(args: argparse.Namespace) -> list[_Server]:
    return [("stdio", c) for c in args.mcp] + [("http", u) for u in args.mcp_http]


def _add_ask(commands: Any) -> None:
    ask = commands.add_parser(
        "ask",
        help="ask the configured model; it reads the KB through the tools",
        description="Ask the configured model a question; it answers by reading the KB\n"
        "through the read-only tools. Each tool call is printed as it runs (name and\n"
        "arguments, then one line of its result), then the answer as it arrives.",
        epilog=ASK_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ask.add_argument("question")
    ask.add_argument("--kb", dest="kb_path", help="an EDN file to load instead of the sample KB")
    ask.add_argument(
        "--provider",
        help="a backend kind, instead of VAELII_LLM_PROVIDER (stub: the scripted stub "
        "answers, naming the tools it was offered, so --mcp can be tried offline)",
    )
    ask.add_argument(
        "--max-turns",
        type=_whole_number(1, "--max-turns"),
        default=8,
        help="model turns allowed (default 8)",
    )
    for name in _ASK_BUDGETS:
        flag = "--" + name.replace("_", "-")
        ask.add_argument(flag, type=_whole_number(1, flag), help=f"stop at {name} (default none)")
    ask.add_argument(
        "--stall-ms",
        type=_whole_number(1, "--stall-ms", MAX_WAIT_MS),
        help="end a turn whose model sends nothing for this many ms (keep-alives do "
        "not count; default: only the turn's whole timeout)",
    )
    _add_timeout_flag(ask)
    _add_server_flags(ask)
    ask.add_argument(
        "--no-cache",
        dest="cache",
        action="store_const",
        const=False,
        default=None,
        help="send no prompt-cache breakpoints (default: the tools and system prompt "
        "are cached on the Messages API unless VAELII_PROMPT_CACHE=0)",
    )
    ask.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object at the end: answer, tool calls, stop reason, usage "
        '(on a failure: {"error", "message", "exit"})',
    )


async def _call(
    name: str,
    raw_input: str,
    kb_path: str | None,
    limit: int | None,
    servers: Sequence[_Server] = (),
    kb_too: bool = True,
) -> int:
    from vaelii_llm import agent

    try:
        arguments: Any = json.loads(raw_input) if raw_input else None
    except json.JSONDecodeError as exc:
        raise _Stop(2, "error", f"the input is not JSON: {exc}") from None
    bound = {} if limit is None else {"max_result_chars": limit}  # else the tools' default
    sources = await _kb_toolset(kb_path, kb_too, servers, **bound)
    async with _with_servers(sources, servers, **bound) as sources:
        # the tool is looked up among the KB's and each server's, as `ask` offers them
        result = await agent.together(toolsets=sources).call(name, arguments)
    print(result.text)
    return 0 if result.ok else 1


def _vote_progress(so_far: pool.Vote) -> None:
    """One line on a terminal's stderr, redrawn as each vote comes in."""
    tally = so_far.tally
    sys.stderr.write(
        f"\rvotes {len(so_far.votes)}/{so_far.calls}: yes {tally['yes']}, no {tally['no']}, "
        f"failed {so_far.failed}"
    )
    if len(so_far.votes) == so_far.calls:
        sys.stderr.write("\n")
    sys.stderr.flush()


async def _vote(question: str, votes: int, timeout_ms: int | None = None) -> int:
    from vaelii_llm import _backends
    from vaelii_llm import pool
    from vaelii_llm.pool import _vote as voting

    kind = _checked_kind(hosts=True)
    if kind == _backends.STUB:
        reason = (
            _backends.nothing_configured()
            if config._read(config._PROVIDER) is None
            else "the stub has no opinion to count; set VAELII_LLM_PROVIDER to a model backend"
        )
        raise _stub_only(reason)
    try:
        voters = await pool.pool_from_config(kind=kind)
    except errors.LLMError:  # a credential no header can carry...: as `ask` says it
        probed = await _why_turns_failed(kind)
        if probed is not None:
            raise _cannot_answer(probed) from None
        raise
    progress = _vote_progress if sys.stderr.isatty() else None
    async with voters:
        asked = voting.asked_yes_no(question, **_turn_bounds(timeout_ms=timeout_ms))
        outcome = await pool.vote(voters, asked, votes=votes, on_vote=progress)
    tally = outcome.tally
    print(
        f"verdict: {outcome.verdict}  tally: yes {tally['yes']}, no {tally['no']}  "
        f"failed: {outcome.failed} of {outcome.calls}"
    )
    if not outcome.failed:
        return 0
    first = outcome.errors[0]
    probed = await _why_turns_failed(kind)
    why = probed or f"{first.type}: {first}"
    if outcome.failed < outcome.calls:
        print(f"{outcome.failed} turn(s) failed: {why}", file=sys.stderr)
        return 0
    if probed is not None:  # the backend cannot answer now, as `ask` and `status` say
        raise _cannot_answer(probed)
    raise _Stop(1, "vote-failed", f"every turn failed: {why}")


async def _why_turns_failed(kind: str) -> str | None:
    """What the pool's hosts say when probed: the first host that cannot
    answer, or the model the hosts lack, each with its next step; None when
    every host answers. A kind with no host list is its one host, probed as
    `status` probes it."""
    from vaelii_llm import _backends
    from vaelii_llm import pool
    from vaelii_llm import providers

    backend = _backends.record(kind)
    if backend.host_option is None:
        return await providers.unavailable_reason(kind)
    lacks = None if backend.missing_model is None else _backends.import_ref(backend.missing_model)
    assert backend.hosts_switch is not None
    by_list = config._getenv(backend.hosts_switch) is not None  # as pool.hosts reads it
    for host in pool.hosts(kind=kind):
        reason = await providers.unavailable_reason(kind, **{backend.host_option: host.url})
        if reason is None and lacks is not None:
            reason = await lacks(host.url)
        if reason is not None and by_list and backend.host_switch is not None:
            # the probe names the one-host switch; these hosts came from the list
            return reason.replace(backend.host_switch, backend.hosts_switch)
        if reason is not None:
            return reason
    return None


async def _warm() -> int:
    from vaelii_llm import providers
    from vaelii_llm._protocol import Response

    _checked_kind()
    started = time.perf_counter()
    result = await providers.warm()
    took = time.perf_counter() - started
    if result is None:
        print("nothing to warm")
        return 0
    line = f"resident: the load took {took:.2f} s"
    if isinstance(result, Response) and result.usage.load_duration is not None:
        line += f" (the host spent {result.usage.load_duration / 1e9:.2f} s loading the model)"
    print(line)
    return 0


def _mcp(kb_path: str | None, http: str | None) -> int:
    """Serve the KB's read surface as an MCP server: stdio, or streamable HTTP."""
    try:
        from vaelii_llm.integrations import mcp as mcp_face
    except ImportError as exc:
        print(f"the mcp face needs: pip install 'vaelii-llm[mcp]' ({exc})", file=sys.stderr)
        return 2
    from vaelii_llm import tools

    address = None if http is None else mcp_face.parse_address(http)
    toolset = tools.Toolset(_load_kb(kb_path))  # before the loop runs
    try:
        if address is None:
            asyncio.run(mcp_face.serve_stdio(toolset))
        else:
            asyncio.run(mcp_face.serve_http(toolset, *address))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)  # as every command ends on Ctrl-C
        return 130
    except OSError as exc:  # the port is taken, or the host is not this machine's
        assert address is not None
        host, port = address
        raise _Stop(
            1,
            "cannot-listen",
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
            "name a free port (--http HOST:PORT, or --http :0 for any)",
        ) from None
    return 0


def _add_mcp_parser(commands: Any) -> None:
    mcp_cmd = commands.add_parser(
        "mcp",
        help="serve the read surface to an MCP host",
        description="Serve the KB's read-only tools to an MCP host: over stdio (what a\n"
        "desktop host launches), or streamable HTTP at /mcp with --http.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mcp_cmd.add_argument("--kb", dest="kb_path", help="an EDN file to serve, not the sample KB")
    mcp_cmd.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP instead of stdio: HOST:PORT, :PORT or PORT "
        "(host 127.0.0.1 unless named)",
    )


def _command(commands: Any, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` page says what it does."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vaelii-llm",
        description="Talk to a model, let it read a knowledge base, or take a yes/no vote.",
    )
    parser.add_argument("--version", action="version", version=f"vaelii-llm {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_ask(commands)
    _command(
        commands,
        "status",
        "which backend answers now, and what its model can do",
        "Say which backend is configured and which answers now; when it cannot, why\n"
        "and what to do; for Ollama, the host, the model and what the model can do.",
    )
    _command(
        commands,
        "config",
        "every switch and the value it reads now",
        "Print every configuration switch with the value it reads now (credentials\n"
        "only as set or unset, a URL's user:password@ cut).",
    )
    tools_cmd = _command(
        commands,
        "tools",
        "the tools a model is offered",
        "List the read-only tools a model is offered, derived from the engine's ops:\n"
        "one line each, or the full JSON schemas with --json.",
    )
    tools_cmd.add_argument("--json", action="store_true", help="print the full schemas")
    _add_server_flags(tools_cmd)
    call = _command(
        commands,
        "call",
        "run one tool call against a KB",
        "Run one tool call against the sample KB (or --kb FILE), or a tool of an MCP\n"
        "server named with --mcp or --mcp-http, and print its result.",
    )
    call.add_argument("tool", help="a tool name, e.g. kb_query")
    call.add_argument(
        "input", nargs="?", default="", help='a JSON object, e.g. \'{"goal": "(isa ?x Mammal)"}\''
    )
    call.add_argument("--kb", dest="kb_path", help="an EDN file to load instead of the sample KB")
    call.add_argument(
        "--max-chars",
        type=_whole_number(1, "--max-chars"),
        help=f"bound on the printed result (default {_edn.DEFAULT_MAX_CHARS})",
    )
    _add_server_flags(call)
    vote = _command(
        commands,
        "vote",
        "a majority yes/no vote over the pool",
        "Ask a yes/no question several times over the configured backend and\n"
        "print the verdict. It runs on every model backend: over its hosts switch\n"
        "where it has one (VAELII_OLLAMA_HOSTS, VAELII_OPENAI_HOSTS), else on its one\n"
        "host (the Messages API's ANTHROPIC_BASE_URL too). When every turn failed,\n"
        "the hosts are probed: the first one that cannot answer says why (exit 2),\n"
        "else the first turn's own error does (exit 1).",
    )
    vote.add_argument("question")
    vote.add_argument(
        "--votes", type=_whole_number(1, "--votes"), default=3, help="turns asked (default 3)"
    )
    _add_timeout_flag(vote)
    _command(
        commands,
        "warm",
        "load the configured model and hold it resident",
        "Load the configured backend's generation model and hold it resident, so the\n"
        "first real turn does not wait for the load; prints how long the load took.",
    )
    _add_mcp_parser(commands)
    for sub in commands.choices.values():  # a subcommand's stray argument shows its usage
        sub.set_defaults(usage_of=sub)
        if sub.epilog is None:  # one table of exit statuses, on every command's --help
            sub.epilog = _exit_table()
    return parser


def _run(args: argparse.Namespace) -> int | None:
    """The chosen command's exit status; None when no command was named."""
    if args.command == "ask":
        return asyncio.run(
            _ask(
                args.question,
                args.kb_path,
                args.provider,
                args.max_turns,
                args.json,
                _servers(args),
                not args.no_kb,
                args.cache,
                {name: getattr(args, name) for name in _ASK_BUDGETS},
                args.stall_ms,
                args.timeout_ms,
            )
        )
    if args.command == "config":
        return _print_config()
    if args.command == "tools":
        return asyncio.run(_print_tools(args.json, _servers(args), not args.no_kb))
    if args.command == "status":
        return asyncio.run(_status())
    if args.command == "call":
        return asyncio.run(
            _call(
                args.tool,
                args.input,
                args.kb_path,
                args.max_chars,
                _servers(args),
                not args.no_kb,
            )
        )
    if args.command == "vote":
        return asyncio.run(_vote(args.question, args.votes, args.timeout_ms))
    if args.command == "warm":
        return asyncio.run(_warm())
    if args.command == "mcp":
        return _mcp(args.kb_path, args.http)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; the return value is the exit status.

    A failure is one line on stderr (``kind: what, where, and the next step``)
    and its status; ``ask --json`` also prints it as a JSON object on stdout.
    """
    parser = build_parser()
    args, strays = parser.parse_known_args(argv)
    if strays:  # argparse would print the top level's usage; the subcommand's says more
        chosen: argparse.ArgumentParser = getattr(args, "usage_of", parser)
        chosen.error(f"unrecognized arguments: {' '.join(strays)}")
    try:
        status = _run(args)
    except _Stop as exc:
        stop = exc
    except errors.LLMBadSwitch as exc:  # read as a turn began: as every switch, bad-switch
        stop = _Stop(2, "bad-switch", str(exc))
    except errors.LLMError as exc:
        stop = _Stop(1, exc.type, str(exc))
    except EngineRefusal as exc:  # its message starts with its type
        stop = _Stop(1, exc.type, str(exc).removeprefix(f"{exc.type}: "))
    except (ValueError, TypeError) as exc:  # a setting or an argument the library refused
        stop = _Stop(2, "error", str(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    else:
        if status is None:
            parser.print_help()
            return 0
        return status
    print(f"{stop.kind}: {stop.message}", file=sys.stderr)
    if args.command == "ask" and args.json:
        failure = {"error": stop.kind, "message": stop.message, "exit": stop.status}
        print(json.dumps(failure, ensure_ascii=False))
    return stop.status
