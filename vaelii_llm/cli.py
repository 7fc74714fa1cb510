"""The ``vaelii-llm`` command: a thin shell over the library, holding no logic of its own.

``ask``     ask the configured model a question it answers by reading the KB
``status``  which backend answers now, and what its host serves and its model can do
``config``  every switch with the value it reads now (credentials only as set/unset)
``tools``   the tool schemas a model is offered, derived from the engine
``call``    run one tool call against the sample KB (or an EDN file)
``vote``    a majority yes/no vote over the configured pool (the stub's when no host)
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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from vaelii_llm import __version__, config, errors
from vaelii_llm.kb._types import EngineRefusal

if TYPE_CHECKING:
    from vaelii_llm import agent, pool

__all__ = ["main"]


def _print_config() -> int:
    for switch in config.SWITCHES:
        raw = os.environ.get(switch.name)
        if switch.secret:
            shown = "set" if raw and raw.strip() else "unset"
        elif raw is None:
            shown = f"unset (default {switch.default})" if switch.default else "unset"
        else:
            shown = repr(config.hide_userinfo(raw))
        print(f"{switch.name:32} {shown}")
    return 0


async def _status() -> int:
    from vaelii_llm import providers

    kind = config.provider_kind()
    active = await providers.active_kind()
    print(f"configured: {kind}\nanswering:  {active}")
    if kind == "ollama":
        from vaelii_llm.providers import ollama

        model = config.ollama_model()
        print(f"host:       {ollama.base_url()}\nmodel:      {model}")
        if active == "ollama":
            caps = sorted(await ollama.capabilities(model))
            print(f"capabilities: {', '.join(caps)}")
            print(f"tools:      {'yes' if await ollama.supports_tools(model) else 'no'}")
            print(f"context:    {await ollama.context_length(model)}")
    elif kind == "openai":
        from vaelii_llm.providers import openai

        chosen = config.openai_model()
        print(f"base URL:   {config.hide_userinfo(config.openai_base_url())}")
        print(f"model:      {chosen or '(none sent: the server chooses)'}")
        if active == "openai":
            served = await openai.models()
            print(f"served:     {', '.join(served) if served else '(none listed)'}")
            if chosen is not None and chosen not in served:
                print(f"warning:    {chosen!r} is not among the served models")
    return 0


def _print_tools(as_json: bool) -> int:
    import msgspec

    from vaelii_llm import tools

    listed = tools.schemas()
    if as_json:
        print(msgspec.json.format(msgspec.json.encode(listed)).decode())
    else:
        for schema in listed:
            first = schema.description.strip().splitlines()[0] if schema.description else ""
            print(f"{schema.name:28} {first}")
    return 0


# -- ask ------------------------------------------------------------------------------

ASK_EXIT: dict[str, int] = {"answered": 0, "refusal": 3, "max_tokens": 4, "max_turns": 5}
"""The exit status of ``ask`` for each way the tool loop stops."""
ASK_STUB_ONLY = 2

ASK_STOPPED: dict[str, str] = {
    "refusal": "refused: the model declined to answer",
    "max_tokens": "truncated: the answer ran into max_tokens",
    "max_turns": "turn limit: the model was still asking for tools after {turns} turns "
    "(raise --max-turns)",
}

ASK_EPILOG = """exit status:
  0  answered
  1  a typed error (the model unreachable, a timeout, a bad --kb file)
  2  only the stub can answer (nothing configured, or the backend fell back), or a bad argument
  3  the model refused
  4  the answer was truncated at max_tokens
  5  the turn limit ran out while the model still asked for tools
"""


def _stub_only(reason: str) -> str:
    return (
        f"only the stub can answer ({reason}): set VAELII_LLM_PROVIDER=ollama (an Ollama at "
        "VAELII_OLLAMA_HOST) or anthropic (ANTHROPIC_API_KEY); `vaelii-llm status` checks"
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


class _AskPrinter:
    """Each tool call as it happens, then the text as it arrives."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.mid_line = False

    def __call__(self, event: agent.Event) -> None:
        from vaelii_llm import agent

        if isinstance(event, agent.TextArrived):
            self.out.write(event.text)
            self.mid_line = not event.text.endswith("\n")
        else:
            if self.mid_line:
                self.out.write("\n")
                self.mid_line = False
            if isinstance(event, agent.ToolCallStarted):
                self.out.write(f"-> {event.name} {json.dumps(event.input, ensure_ascii=False)}\n")
            else:
                self.out.write(f"   {event.summary}\n")
        self.out.flush()

    def end(self) -> None:
        if self.mid_line:
            self.out.write("\n")
            self.out.flush()


async def _ask(
    question: str, kb_path: str | None, kind: str | None, max_turns: int, as_json: bool
) -> int:
    from vaelii_llm import agent, kb, providers, tools
    from vaelii_llm.providers.stub import StubProvider

    chosen = config.provider_kind(kind)
    if chosen == "stub":
        print(_stub_only("nothing is configured"), file=sys.stderr)
        return ASK_STUB_ONLY
    toolset = tools.Toolset(kb.load_edn(kb_path) if kb_path else kb.sample())
    with _quiet_fallback():
        model = await providers.provider(chosen)
    async with model:
        if isinstance(model, StubProvider):
            print(_stub_only(f"{chosen} is configured but cannot answer now"), file=sys.stderr)
            return ASK_STUB_ONLY
        printer = None if as_json else _AskPrinter(sys.stdout)
        try:
            result = await agent.run(
                model,
                toolset,
                question,
                max_turns=max_turns,
                deltas=not as_json,
                on_event=printer,
            )
        finally:  # a failure's line on stderr starts on a line of its own
            if printer is not None:
                printer.end()
    if printer is None:
        print(json.dumps(result.summary(), ensure_ascii=False))
    if result.stopped != "answered":
        print(ASK_STOPPED[result.stopped].format(turns=result.turns), file=sys.stderr)
    return ASK_EXIT[result.stopped]


def _turns(text: str) -> int:
    turns = int(text)
    if turns < 1:
        raise argparse.ArgumentTypeError(f"at least 1 turn, got {turns}")
    return turns


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
    ask.add_argument("--provider", help="a backend kind, instead of VAELII_LLM_PROVIDER")
    ask.add_argument("--max-turns", type=_turns, default=8, help="model turns allowed (default 8)")
    ask.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object at the end: answer, tool calls, stop reason, usage",
    )


async def _call(name: str, raw_input: str, kb_path: str | None, limit: int | None) -> int:
    from vaelii_llm import kb, tools

    try:
        arguments: Any = json.loads(raw_input) if raw_input else None
    except json.JSONDecodeError as exc:
        print(f"the input is not JSON: {exc}", file=sys.stderr)
        return 2
    base = kb.load_edn(kb_path) if kb_path else kb.sample()
    bound = {} if limit is None else {"max_result_chars": limit}  # else the tools' default
    result = await tools.call(base, name, arguments, **bound)
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


async def _vote(question: str, votes: int) -> int:
    from vaelii_llm import pool

    if config.provider_kind() in ("ollama", "openai"):
        voters = await pool.pool_from_config()
    else:
        print("VAELII_LLM_PROVIDER is not ollama or openai: the stub votes (it answers nothing)")
        voters = pool.stub_pool()
    progress = _vote_progress if sys.stderr.isatty() else None
    async with voters:
        outcome = await pool.vote(voters, question, votes=votes, on_vote=progress)
    tally = outcome.tally
    print(
        f"verdict: {outcome.verdict}  tally: yes {tally['yes']}, no {tally['no']}  "
        f"failed: {outcome.failed} of {outcome.calls}"
    )
    return 0


async def _warm() -> int:
    from vaelii_llm import providers
    from vaelii_llm._protocol import Response

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
    from vaelii_llm import kb, tools

    toolset = tools.Toolset(kb.load_edn(kb_path) if kb_path else kb.sample())
    address = None if http is None else mcp_face.parse_address(http)
    try:
        if address is None:
            asyncio.run(mcp_face.serve_stdio(toolset))
        else:
            asyncio.run(mcp_face.serve_http(toolset, *address))
    except KeyboardInterrupt:
        return 130
    return 0


def _add_mcp_parser(commands: Any) -> None:
    mcp_cmd = commands.add_parser("mcp", help="serve the read surface to an MCP host")
    mcp_cmd.add_argument("--kb", dest="kb_path", help="an EDN file to serve, not the sample KB")
    mcp_cmd.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP instead of stdio (host 127.0.0.1 unless named)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vaelii-llm",
        description="Talk to a model, let it read a knowledge base, or take a yes/no vote.",
    )
    parser.add_argument("--version", action="version", version=f"vaelii-llm {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_ask(commands)
    commands.add_parser("status", help="which backend answers now, and what its model can do")
    commands.add_parser("config", help="every switch and the value it reads now")
    tools_cmd = commands.add_parser("tools", help="the tools a model is offered")
    tools_cmd.add_argument("--json", action="store_true", help="print the full schemas")
    call = commands.add_parser("call", help="run one tool call against a KB")
    call.add_argument("tool", help="a tool name, e.g. kb_query")
    call.add_argument(
        "input", nargs="?", default="", help='a JSON object, e.g. \'{"goal": "(isa ?x Mammal)"}\''
    )
    call.add_argument("--kb", dest="kb_path", help="an EDN file to load instead of the sample KB")
    call.add_argument("--max-chars", type=int, help="bound on the printed result")
    vote = commands.add_parser("vote", help="a majority yes/no vote over the pool")
    vote.add_argument("question")
    vote.add_argument("--votes", type=int, default=3)
    commands.add_parser("warm", help="load the configured model and hold it resident")
    _add_mcp_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; the return value is the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "ask":
            return asyncio.run(
                _ask(args.question, args.kb_path, args.provider, args.max_turns, args.json)
            )
        if args.command == "config":
            return _print_config()
        if args.command == "tools":
            return _print_tools(args.json)
        if args.command == "status":
            return asyncio.run(_status())
        if args.command == "call":
            return asyncio.run(_call(args.tool, args.input, args.kb_path, args.max_chars))
        if args.command == "vote":
            return asyncio.run(_vote(args.question, args.votes))
        if args.command == "warm":
            return asyncio.run(_warm())
        if args.command == "mcp":
            return _mcp(args.kb_path, args.http)
    except errors.LLMError as exc:
        print(f"{exc.type}: {exc}", file=sys.stderr)
        return 1
    except EngineRefusal as exc:  # its message starts with its type
        print(exc, file=sys.stderr)
        return 1
    except (ValueError, TypeError) as exc:  # a setting or an argument the library refused
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
